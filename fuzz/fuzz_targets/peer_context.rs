//! Any bytes as a `robotsgate-peer` header value (what a member says of a request it
//! hands over): nothing panics, and what is accepted encodes back to a value that reads
//! the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use robotsgate::fleet::PeerContext;

fuzz_target!(|data: &[u8]| {
    let Some(context) = PeerContext::decode(data) else {
        return;
    };
    let again = PeerContext::decode(context.encode().as_bytes());
    assert_eq!(again.as_ref(), Some(&context));
});
