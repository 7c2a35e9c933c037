//! Any octets as an answer of `own_claim.lua` (words split at NUL), read as a member
//! reads it (`ClaimAnswer::parse`), and any octets as a group's facts (`Words::parse`):
//! nothing panics, and facts that are read write back to words that read the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use robotsgate::fleet::ownership::{ClaimAnswer, Words};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let words: Vec<String> = text.split('\0').map(str::to_string).collect();
    let mut facts = vec![text.to_string()];
    if let Some(ClaimAnswer::Taken { facts: taken, .. }) = ClaimAnswer::parse(&words) {
        facts.extend(taken.into_iter().map(|(_, value)| value));
    }
    for value in facts {
        if let Ok(read) = Words::parse(&value) {
            assert_eq!(Words::parse(&read.write()), Ok(read), "{value:?}");
        }
    }
});
