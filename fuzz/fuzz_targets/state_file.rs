//! Any bytes as a state file (`robots.state_file`): a count or a refusal, never a panic
//! and never an allocation sized by an untrusted length beyond the input.
#![no_main]

use libfuzzer_sys::fuzz_target;

/// FNV-1a 64, as the state file's trailer: lets the fuzzer past the checksum to the
/// records themselves.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fuzz_target!(|data: &[u8]| {
    let _ = robotsgate::cli::check_state_file(data);
    // Framed as a well-formed file: magic, version, the bytes, the end mark, a valid hash.
    let mut framed = b"RGSTATE\0\x01\0\0\0".to_vec();
    framed.extend_from_slice(data);
    framed.extend_from_slice(b"RGEND\0\0\0");
    let hash = fnv1a(&framed);
    framed.extend_from_slice(&hash.to_le_bytes());
    let _ = robotsgate::cli::check_state_file(&framed);
});
