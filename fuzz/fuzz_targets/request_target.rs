//! Any bytes as a request target and Host header: parsing never panics, and whatever is
//! accepted forwards as a valid origin-form URI whose canonical form is a fixed point.
#![no_main]

use libfuzzer_sys::fuzz_target;
use robotsgate::robots::CanonicalPath;
use robotsgate::target::{Scheme, Target};

fuzz_target!(|data: &[u8]| {
    let (host, raw) = match data.split_first() {
        Some((&n, rest)) => rest.split_at(usize::from(n).min(rest.len())),
        None => return,
    };
    if let Ok(target) = Target::from_request(raw, Some(host), Scheme::Http) {
        let path = target.path.as_str();
        assert!(path.starts_with('/'));
        assert!(http::Uri::try_from(path).is_ok(), "not forwardable: {path:?}");
        assert_eq!(CanonicalPath::new(path).as_str(), path);
        let _ = target.origin.robots_url();
    }
});
