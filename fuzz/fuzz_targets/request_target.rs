//! Any bytes as a request head, or as a request target and Host header: parsing never
//! panics; an accepted head respects every limit, carries no `Upgrade`, and a GET or HEAD
//! accepted has no body (so nothing after it can be a smuggled request); an accepted
//! target forwards as a valid
//! origin-form URI whose canonical form is a fixed point, and so does its lenient reading;
//! a redirected connection's target names the origin at the original destination's port.
#![no_main]

use std::time::Duration;

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use robotsgate::downstream::head::{parse_head, Body, HeadLimits};
use robotsgate::robots::CanonicalPath;
use robotsgate::policy::target::{Scheme, Target};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, data)) = data.split_first() else {
        return;
    };
    if mode & 1 == 0 {
        head(data);
    } else {
        target(data);
    }
});

fn head(data: &[u8]) {
    let limits = HeadLimits {
        max_request_line: 512,
        max_head: 2048,
        max_headers: 16,
        max_body: 1000,
        header_timeout: Duration::from_secs(1),
        idle_timeout: Duration::from_secs(1),
        first_byte_timeout: Duration::from_secs(1),
        unread_timeout: Duration::from_secs(1),
    };
    if let Ok(Some(head)) = parse_head(BytesMut::from(data), &limits) {
        assert!(head.len <= head.bytes.len() && head.len <= limits.max_head);
        let line = memchr::memchr(b'\n', &head.bytes[..head.len]).unwrap_or(head.len);
        assert!(line <= limits.max_request_line);
        let mut fields = [httparse::EMPTY_HEADER; 64];
        let mut request = httparse::Request::new(&mut fields);
        if request.parse(&head.bytes[..head.len]).is_ok() {
            assert!(!request.headers.iter().any(|h| h.name.eq_ignore_ascii_case("upgrade")));
            if matches!(request.method, Some("GET" | "HEAD")) {
                assert_eq!(head.body, Body::None);
            }
        }
        if let Body::Length(n) = head.body {
            assert!(n > 0 && n <= limits.max_body);
        }
    }
}

fn target(data: &[u8]) {
    let (host, raw) = match data.split_first() {
        Some((&n, rest)) => rest.split_at(usize::from(n).min(rest.len())),
        None => return,
    };
    if let Ok(target) = Target::from_request(raw, Some(host), Scheme::Http) {
        for path in [Some(target.path.clone()), target.lenient_path()].into_iter().flatten() {
            let path = path.as_str();
            assert!(path.starts_with('/'));
            assert!(http::Uri::try_from(path).is_ok(), "not forwardable: {path:?}");
            assert_eq!(CanonicalPath::new(path).as_str(), path);
        }
        let _ = target.origin.robots_url();
    }
    // A redirected connection's request: the origin is always at the destination's port.
    let destination = std::net::SocketAddr::from(([192, 0, 2, 1], 8080));
    for tls in [None, Some(Target::from_request(b"/", Some(b"a.test"), Scheme::Https))] {
        let tls = tls.and_then(Result::ok).map(|t| t.origin);
        if let Ok(target) = Target::redirected(raw, Some(host), destination, tls.as_ref()) {
            assert_eq!(target.origin.port, 8080);
            assert!(tls.as_ref().is_none_or(|o| *o == target.origin));
        }
    }
}
