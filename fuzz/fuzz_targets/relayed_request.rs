//! Any octets as a client's request head: when the relay takes it (`handover::relay`),
//! the owner reads the request the proxy's path would have judged — same method,
//! target, version and headers (but the ones never forwarded, and the member's own
//! context in place of any the client sent) — parsed by the same library on both hops
//! (Pingora's HTTP/1 server session).
#![no_main]

use libfuzzer_sys::fuzz_target;
use robotsgate::fleet::PeerContext;
use robotsgate::handover::relay::owner_reads;

/// Headers the relay never sends to the owner.
const DROPPED: [&str; 3] = ["proxy-authorization", "connection", "robotsgate-peer"];

fuzz_target!(|data: &[u8]| {
    let Some((parsed, owner)) = owner_reads(data) else {
        return;
    };
    assert_eq!(owner.method, parsed.method);
    assert_eq!(owner.raw_path(), parsed.raw_path());
    assert_eq!(owner.version, parsed.version);
    for (name, _) in parsed.headers.iter() {
        let kept: Vec<_> = parsed.headers.get_all(name).iter().collect();
        let read: Vec<_> = owner.headers.get_all(name).iter().collect();
        if name.as_str() == "robotsgate-peer" {
            assert_eq!(read, [PeerContext::default().encode().as_str()], "the client's context reached the owner");
        } else if DROPPED.contains(&name.as_str()) {
            assert!(read.is_empty(), "{name} reached the owner");
        } else {
            assert_eq!(kept, read, "{name}");
        }
    }
    // Every header the client sent but those dropped, and this member's context.
    let dropped: usize = DROPPED.iter().map(|d| parsed.headers.get_all(*d).iter().count()).sum();
    assert_eq!(owner.headers.len(), parsed.headers.len() - dropped + 1);
});
