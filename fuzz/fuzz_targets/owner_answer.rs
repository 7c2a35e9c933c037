//! Any octets as an owner's answer to a relayed `GET` (`handover::relay`), read as the
//! relay reads it (Pingora's HTTP/1 client session, the same library the owner writes
//! answers with): nothing panics, and a connection goes back to the pool only when its
//! answer ended exactly where the owner's octets end — one octet more, and it is closed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use robotsgate::handover::relay::answer_end;

fuzz_target!(|data: &[u8]| {
    let Some(end) = answer_end(data) else {
        return;
    };
    assert_eq!(end, data.len());
    let past = [data, b"X"].concat();
    assert_eq!(answer_end(&past), None, "an octet past the answer's end was taken");
});
