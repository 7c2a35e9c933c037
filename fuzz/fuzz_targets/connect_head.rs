//! Any bytes as a CONNECT request head, and any request inside the tunnel it opens:
//! nothing panics, a tunnel's requests are only ever for the tunnel's origin, and what is
//! accepted forwards as a valid URI.
#![no_main]

use libfuzzer_sys::fuzz_target;
use robotsgate::downstream::connect::parse_connect_head;
use robotsgate::policy::target::{parse_authority, Scheme, Target};

fuzz_target!(|data: &[u8]| {
    let (head, rest) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let Ok(request) = parse_connect_head(head) else {
        return;
    };
    let Ok(tunnel) = parse_authority(&request.authority, Scheme::Https) else {
        return;
    };
    let (host, raw) = match rest.split_first() {
        Some((&n, tail)) => tail.split_at(usize::from(n).min(tail.len())),
        None => return,
    };
    let host = (!host.is_empty()).then_some(host);
    if let Ok(target) = Target::in_tunnel(&tunnel, raw, host) {
        assert_eq!(target.origin, tunnel);
        assert!(http::Uri::try_from(target.path.as_str()).is_ok());
    }
});
