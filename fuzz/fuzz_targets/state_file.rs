//! Any bytes as a state file (`robots.state_file`): a count or a refusal, never a panic
//! and never an allocation sized by an untrusted length beyond the input.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Also framed with a valid magic and version, so the fuzzer reaches the records.
    let _ = robotsgate::cli::check_state_file(data);
    let mut framed = b"RGSTATE\0\x01\0\0\0".to_vec();
    framed.extend_from_slice(data);
    let _ = robotsgate::cli::check_state_file(&framed);
});
