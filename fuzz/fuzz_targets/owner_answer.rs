//! Any bytes as an owner's answer to a request relayed to it (`downstream::relay`):
//! nothing panics, and where the answer ends does not depend on how its octets arrive.
#![no_main]

use libfuzzer_sys::fuzz_target;
use robotsgate::downstream::relay::answer_end;

fuzz_target!(|data: &[u8]| {
    let Some((&split, bytes)) = data.split_first() else {
        return;
    };
    let whole = answer_end(bytes, usize::MAX);
    let split = answer_end(bytes, usize::from(split));
    assert_eq!(whole, split);
    if let Some(end) = whole {
        assert!(end <= bytes.len());
    }
});
