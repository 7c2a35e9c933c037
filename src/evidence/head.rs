//! Signed heads: what a chain's `heads.jsonl` holds, one line each, each chained to the
//! line before it by `prev_head` (the SHA-256 of that line) and signed with the
//! operator's Ed25519 key.
//!
//! A **head** signs one segment as it stands: its number, the `seq` of its first record,
//! how many records it holds (`size`), the Merkle root over them (`merkle.rs`), and the
//! chain's `tip` (the SHA-256 of its last record's line). An open segment gets a head
//! every `evidence.head_interval_seconds` while records come, and a last one, `closed`,
//! when it is closed; a process that finds an earlier chain's tail unsigned (it crashed)
//! signs it as found, `recovered`. A **cut** signs that retention dropped segments
//! whole: a segment a head names is missing without one only if someone removed it.
//!
//! The signature covers the line as written up to its last field: the line without
//! `,"sig":"…"`, closed by `}` — so any reader can check it with string operations and an
//! Ed25519 implementation of its own (the tests do, with Python's `cryptography`).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::Serialize;

use super::merkle::Hash;
use super::record::hex;
use crate::identity::key::SigningKey;

/// What a head says of its segment.
#[derive(Serialize)]
pub struct SegmentHead<'a> {
    /// Always 1: a head (a cut has `cut` instead).
    pub head: u32,
    /// The chain's process (`member/start.pid`).
    pub instance: &'a str,
    /// Its member.
    pub member: &'a str,
    /// The segment's number (from 1).
    pub segment: u32,
    /// The `seq` of its first record.
    pub first_seq: u64,
    /// How many records of the segment this head signs.
    pub size: u64,
    /// The Merkle root over those records' lines, hex.
    pub root: String,
    /// The SHA-256 of the last of them, hex: the chain's tip.
    pub tip: String,
    /// The SHA-256 of the line before this one in `heads.jsonl` (64 zeros: none).
    pub prev_head: String,
    /// When it was signed.
    pub t: String,
    /// The segment is closed: nothing follows in it.
    pub closed: bool,
    /// Signed by a later process over a tail it found unsigned (its writer crashed).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub recovered: bool,
    /// The signing key's thumbprint.
    pub key_id: &'a str,
    /// The public key itself (a JWK): a chain whose start record retention dropped is
    /// still checked.
    pub key: serde_json::Value,
}

/// Retention dropped these segments whole.
#[derive(Serialize)]
pub struct RetentionCut<'a> {
    /// The segments dropped.
    pub cut: Vec<u32>,
    /// The chain's process.
    pub instance: &'a str,
    /// Why: `age` or `size`.
    pub reason: &'a str,
    /// The SHA-256 of the line before this one.
    pub prev_head: String,
    /// When.
    pub t: String,
    /// The signing key's thumbprint.
    pub key_id: &'a str,
}

/// The marker that ends a signed line's signed part.
const SIG: &str = ",\"sig\":\"";

/// `what` as a signed line (no newline): its JSON, then the signature of that JSON.
pub fn signed<T: Serialize>(what: &T, key: &SigningKey) -> String {
    let body = serde_json::to_string(what).unwrap_or_else(|_| "{}".into());
    let signature = URL_SAFE_NO_PAD.encode(key.sign(body.as_bytes()));
    let mut line = String::with_capacity(body.len() + SIG.len() + 90);
    line.push_str(&body[..body.len() - 1]);
    line.push_str(SIG);
    line.push_str(&signature);
    line.push_str("\"}");
    line
}

/// Whether `line` is signed by the Ed25519 public key `public` (32 octets).
pub fn signature_holds(line: &str, public: &[u8]) -> bool {
    let Some(at) = line.rfind(SIG) else {
        return false;
    };
    let Some(encoded) = line[at + SIG.len()..].strip_suffix("\"}") else {
        return false;
    };
    let Ok(signature) = URL_SAFE_NO_PAD.decode(encoded) else {
        return false;
    };
    let body = format!("{}}}", &line[..at]);
    ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, public)
        .verify(body.as_bytes(), &signature)
        .is_ok()
}

/// The SHA-256 of a line, as `prev` and `prev_head` name lines.
pub fn line_hash(line: &[u8]) -> Hash {
    let mut out = [0u8; 32];
    out.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, line).as_ref());
    out
}

/// [`line_hash`] in hex.
pub fn line_hex(line: &[u8]) -> String {
    hex(&line_hash(line))
}

/// The 32 octets of a public JWK's `x`, when it is an Ed25519 key.
pub fn public_key(jwk: &serde_json::Value) -> Option<Vec<u8>> {
    if jwk["kty"] != "OKP" || jwk["crv"] != "Ed25519" {
        return None;
    }
    let x = jwk["x"].as_str()?;
    URL_SAFE_NO_PAD
        .decode(x.trim_end_matches('='))
        .ok()
        .filter(|k| k.len() == 32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signed_line_verifies_and_any_change_breaks_it() {
        let (jwk, _) = crate::identity::key::generate_jwk().expect("key");
        let key = SigningKey::from_jwk(jwk.as_bytes(), "test").expect("key");
        let public = public_key(&key.public_jwk()).expect("public");
        let cut = RetentionCut {
            cut: vec![1, 2],
            instance: "a/1.2",
            reason: "age",
            prev_head: hex(&[0; 32]),
            t: "2026-12-07T00:00:00.000000Z".into(),
            key_id: key.thumbprint(),
        };
        let line = signed(&cut, &key);
        assert!(line.starts_with("{\"cut\":[1,2],"), "{line}");
        assert!(signature_holds(&line, &public));
        let changed = line.replace("[1,2]", "[1,3]");
        assert!(!signature_holds(&changed, &public));
        let other = generate_other();
        assert!(!signature_holds(&line, &other));
        assert!(!signature_holds("{\"no\":\"sig\"}", &public));
    }

    fn generate_other() -> Vec<u8> {
        let (jwk, _) = crate::identity::key::generate_jwk().expect("key");
        let key = SigningKey::from_jwk(jwk.as_bytes(), "test").expect("key");
        public_key(&key.public_jwk()).expect("public")
    }
}
