//! One signing key: an Ed25519 key pair kept as a JSON Web Key (RFC 8037: `kty` `OKP`,
//! `crv` `Ed25519`, the public `x` and the private `d`, both base64url without padding),
//! and its RFC 7638 thumbprint, the `keyid` every signature names.
//!
//! The private half never leaves this type: no `Debug`, no `Display`, no serialisation
//! (only [`generate_jwk`] writes one, for `robotsgate keys generate`, to a 0600 file).
//! Errors name the file and what is wrong with it, never a key's octets.

use std::path::Path;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::signature::{Ed25519KeyPair, KeyPair};

/// Why a key file cannot be used: what is wrong, naming the identity and the file
/// (never key material).
pub type KeyError = crate::error::Failure<KeyErrorKind>;

/// What kind of problem a [`KeyError`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyErrorKind {
    /// The key file cannot be read or written.
    Io,
    /// It is not an Ed25519 private JWK, or its parts do not match.
    Invalid,
    /// The system has no randomness for a new key.
    Randomness,
}

/// An Ed25519 private key and what is published of it.
pub struct SigningKey {
    /// The Ed25519 key pair.
    pair: Ed25519KeyPair,
    /// The public key, base64url (the JWK's `x`).
    x: String,
    /// The RFC 7638 thumbprint of the public JWK, base64url: the signatures' `keyid`.
    thumbprint: String,
}

/// The JWK members robotsgate reads; others (`kid`, `use`, `alg`) are allowed and
/// ignored.
#[derive(serde::Deserialize)]
struct Jwk {
    /// Key type: `OKP`.
    kty: String,
    /// Curve: `Ed25519`.
    crv: String,
    /// The public key, base64url.
    x: String,
    /// The private key, base64url (absent in a public JWK).
    d: Option<String>,
}

impl SigningKey {
    /// The key pair whose private key is `seed`.
    fn from_seed(seed: &[u8]) -> Result<SigningKey, KeyError> {
        let pair = Ed25519KeyPair::from_seed_unchecked(seed).map_err(|_| {
            KeyError::new(
                KeyErrorKind::Invalid,
                "the private key `d` is not an Ed25519 seed",
            )
        })?;
        let x = URL_SAFE_NO_PAD.encode(pair.public_key().as_ref());
        let thumbprint = thumbprint(&x);
        Ok(SigningKey {
            pair,
            x,
            thumbprint,
        })
    }

    /// Reads a private JWK: the key named `what` in errors (the identity and file).
    pub fn from_jwk(text: &[u8], what: &str) -> Result<SigningKey, KeyError> {
        let jwk: Jwk = serde_json::from_slice(text).map_err(|e| {
            KeyError::new(
                KeyErrorKind::Invalid,
                format!("{what}: not a JSON Web Key: {e}"),
            )
        })?;
        if jwk.kty != "OKP" || jwk.crv != "Ed25519" {
            return Err(KeyError::new(KeyErrorKind::Invalid, format!(
                "{what}: an Ed25519 key has \"kty\": \"OKP\" and \"crv\": \"Ed25519\" (found {:?} and {:?})",
                jwk.kty, jwk.crv
            )));
        }
        let d = jwk.d.ok_or_else(|| {
            KeyError::new(
                KeyErrorKind::Invalid,
                format!(
                "{what}: a public key only (no \"d\"); robotsgate signs, it needs the private key"
            ),
            )
        })?;
        let seed = URL_SAFE_NO_PAD
            .decode(d.trim_end_matches('='))
            .ok()
            .filter(|s| s.len() == 32)
            .ok_or_else(|| {
                KeyError::new(
                    KeyErrorKind::Invalid,
                    format!("{what}: \"d\" is not 32 octets of base64url"),
                )
            })?;
        let key = SigningKey::from_seed(&seed)
            .map_err(|e| KeyError::new(KeyErrorKind::Invalid, format!("{what}: {e}")))?;
        if key.x != jwk.x.trim_end_matches('=') {
            return Err(KeyError::new(
                KeyErrorKind::Invalid,
                format!("{what}: \"x\" is not the public key of \"d\""),
            ));
        }
        Ok(key)
    }

    /// Reads a private JWK file, for the identity `identity`.
    pub fn load(path: &Path, identity: &str) -> Result<SigningKey, KeyError> {
        let what = format!("identity `{identity}`, key file {}", path.display());
        let text = std::fs::read(path)
            .map_err(|e| KeyError::new(KeyErrorKind::Io, format!("{what}: cannot read: {e}")))?;
        SigningKey::from_jwk(&text, &what)
    }

    /// The `keyid` of its signatures: the RFC 7638 thumbprint.
    pub fn thumbprint(&self) -> &str {
        &self.thumbprint
    }

    /// The public JWK, as the key directory publishes it (with its thumbprint as `kid`).
    pub fn public_jwk(&self) -> serde_json::Value {
        serde_json::json!({
            "kty": "OKP",
            "crv": "Ed25519",
            "x": self.x,
            "kid": self.thumbprint,
        })
    }

    /// An Ed25519 signature of `message`.
    pub fn sign(&self, message: &[u8]) -> [u8; 64] {
        let mut out = [0u8; 64];
        out.copy_from_slice(self.pair.sign(message).as_ref());
        out
    }
}

/// A new key as a private JWK (the text `robotsgate keys generate` writes) and its
/// thumbprint.
pub(crate) fn generate_jwk() -> Result<(String, String), KeyError> {
    let mut seed = [0u8; 32];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut seed).map_err(|_| {
        KeyError::new(
            KeyErrorKind::Randomness,
            "no randomness available for a new key",
        )
    })?;
    let key = SigningKey::from_seed(&seed)?;
    let mut jwk = key.public_jwk();
    jwk["d"] = serde_json::Value::from(URL_SAFE_NO_PAD.encode(seed));
    Ok((jwk.to_string(), key.thumbprint))
}

/// Writes a new key to `path` (mode 0600, never over an existing file) and returns its
/// thumbprint: `robotsgate keys generate`.
pub fn generate_file(path: &Path) -> Result<String, KeyError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let (jwk, thumbprint) = generate_jwk()?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| {
            KeyError::new(
                KeyErrorKind::Io,
                format!("{}: cannot create: {e}", path.display()),
            )
        })?;
    file.write_all(jwk.as_bytes())
        .and_then(|()| file.write_all(b"\n"))
        .map_err(|e| {
            KeyError::new(
                KeyErrorKind::Io,
                format!("{}: cannot write: {e}", path.display()),
            )
        })?;
    Ok(thumbprint)
}

/// RFC 7638 §3: SHA-256 over the required members in lexicographic order, no spaces.
fn thumbprint(x: &str) -> String {
    let canonical = format!(r#"{{"crv":"Ed25519","kty":"OKP","x":"{x}"}}"#);
    URL_SAFE_NO_PAD.encode(ring::digest::digest(
        &ring::digest::SHA256,
        canonical.as_bytes(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 8037 Appendix A.1 (the key) and A.3 (its thumbprint).
    const RFC8037: &str = r#"{"kty":"OKP","crv":"Ed25519",
        "d":"nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A",
        "x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}"#;

    #[test]
    fn rfc8037_key_and_thumbprint() {
        let key = SigningKey::from_jwk(RFC8037.as_bytes(), "test").expect("the RFC's key");
        assert_eq!(
            key.thumbprint(),
            "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k"
        );
        assert_eq!(
            key.public_jwk()["x"],
            "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"
        );
    }

    #[test]
    fn bad_keys_are_named_errors_without_key_material() {
        let wrong_x = RFC8037.replace("11qY", "21qY");
        let e = SigningKey::from_jwk(wrong_x.as_bytes(), "identity `main`").err();
        assert!(e.is_some_and(
            |e| e.to_string().contains("identity `main`") && e.to_string().contains("\"x\"")
        ));
        let public_only =
            r#"{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}"#;
        let e = SigningKey::from_jwk(public_only.as_bytes(), "k").err();
        assert!(e.is_some_and(|e| e.to_string().contains("public key only")));
        let rsa = r#"{"kty":"RSA","crv":"x","x":"y","d":"z"}"#;
        assert!(SigningKey::from_jwk(rsa.as_bytes(), "k").is_err());
        for bad in [
            "",
            "{",
            "null",
            r#"{"kty":"OKP","crv":"Ed25519","x":"a","d":"!!"}"#,
        ] {
            let e = SigningKey::from_jwk(bad.as_bytes(), "k").err();
            assert!(
                e.is_some_and(|e| !e.to_string().contains("nWGxne")),
                "{bad}"
            );
        }
    }

    #[test]
    fn generated_keys_round_trip() {
        let (text, thumbprint) = generate_jwk().expect("a key");
        let key = SigningKey::from_jwk(text.as_bytes(), "generated").expect("reads back");
        assert_eq!(key.thumbprint(), thumbprint);
        let signature = key.sign(b"message");
        let public = URL_SAFE_NO_PAD
            .decode(key.public_jwk()["x"].as_str().unwrap_or_default())
            .expect("x");
        ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, public)
            .verify(b"message", &signature)
            .expect("verifies");
    }
}
