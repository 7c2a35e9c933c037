//! Any bytes as a state file (`robots.state_file`): a count or a refusal, never a panic
//! and never an allocation sized by an untrusted length beyond the input.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = robotsgate::cli::check_state_file(data);
    // Framed as a well-formed file: magic, version, the bytes, the end mark, and a valid
    // HMAC (the fuzz key's), so the records themselves are reached.
    let mut framed = b"RGSTATE\0\x02\0\0\0".to_vec();
    framed.extend_from_slice(data);
    framed.extend_from_slice(b"RGEND\0\0\0");
    let _ = robotsgate::cli::check_state_file(&robotsgate::cli::seal_state_file(&framed));
});
