//! Web Bot Auth signatures (draft-ietf-webbotauth-httpsig-protocol, on RFC 9421 HTTP
//! Message Signatures): one [`Identity`] signs every request it is chosen for with
//! `Signature-Agent`, `Signature-Input` and `Signature`.
//!
//! What is signed: the components `@authority` and the `Signature-Agent` field, with the
//! parameters `created`, `expires`, `keyid` (the key's RFC 7638 thumbprint),
//! `alg="ed25519"` and `tag="web-bot-auth"`. The signature base (RFC 9421 §2.5) is
//!
//! ```text
//! "@authority": example.com
//! "signature-agent": "https://crawler.example"
//! "@signature-params": ("@authority" "signature-agent");created=…;expires=…;keyid="…";alg="ed25519";tag="web-bot-auth"
//! ```
//!
//! `Signature-Agent` has two forms in the field ([`crate::config::AgentForm`]): a quoted string covered
//! whole (`"https://crawler.example"`, what Cloudflare's documented verifier takes, the
//! default) and the draft's Dictionary member covered by key (`sig1="https://…"`,
//! covered as `"signature-agent";key="sig1"`).
//!
//! Cost: an Ed25519 signature is tens of microseconds, about as much as the rest of a
//! request. A signature covers nothing of the request but its authority, so one per
//! authority is reused while it has at least half its validity left (the draft makes a
//! nonce optional; with none, a verifier cannot tell a reused signature from a replayed
//! one either way). The cache is bounded ([`CACHED_AUTHORITIES`]): past it, it starts
//! over.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use http::HeaderValue;

use super::key::SigningKey;
use crate::config::{AgentForm, Price};

/// Authorities whose signature is kept for reuse; past this, the cache starts over.
pub const CACHED_AUTHORITIES: usize = 4096;

/// The headers of one signature, made once and set on every request it is reused for
/// (a header value clone shares its bytes: nothing is copied or validated again).
#[derive(Debug)]
pub struct Signed {
    /// `Signature-Agent`.
    pub agent: HeaderValue,
    /// `Signature-Input`.
    pub input: HeaderValue,
    /// `Signature`.
    pub signature: HeaderValue,
    /// `crawler-max-price`, covered by the signature, when it offers to pay.
    pub max_price: Option<HeaderValue>,
    /// What `max_price` offers.
    offer: Option<Price>,
    /// Seconds since the epoch when it was made.
    created: u64,
}

impl Signed {
    /// Sets the headers on `request`, replacing any of the same names: a client's own
    /// never reach the origin beside robotsgate's (a crawler must not sign as the
    /// fleet, nor keep a stale signature, nor offer to pay with the fleet's money).
    pub fn set_on(&self, request: &mut pingora::http::RequestHeader) -> pingora::Result<()> {
        request.insert_header("Signature-Agent", self.agent.clone())?;
        request.insert_header("Signature-Input", self.input.clone())?;
        request.insert_header("Signature", self.signature.clone())?;
        match &self.max_price {
            Some(price) => request.insert_header("crawler-max-price", price.clone())?,
            None => {
                request.remove_header("crawler-max-price");
            }
        }
        request.remove_header("crawler-exact-price");
        Ok(())
    }
}

/// One signing identity: its key (and the next one, published before it signs), where
/// its directory is, and how long a signature is valid.
pub struct Identity {
    /// The name the configuration gives it.
    pub name: String,
    /// The key that signs.
    key: SigningKey,
    /// The next key, published in the directory before it signs.
    next: Option<SigningKey>,
    /// `Signature-Agent`'s value.
    agent: HeaderValue,
    /// How the signature base names `Signature-Agent`, and the value it covers.
    covered: (&'static str, String),
    /// The host of `signature_agent`: the directory listener serves this identity
    /// to requests for it.
    directory_host: String,
    /// How long a signature is valid.
    expires: Duration,
    /// By authority: its signatures, one per price offered (none, and each budget's
    /// `max_price`: a handful).
    cache: Mutex<HashMap<String, Vec<Arc<Signed>>>>,
}

impl Identity {
    /// The `keyid` its signatures carry now: its signing key's thumbprint.
    pub fn key_id(&self) -> &str {
        self.key.thumbprint()
    }

    /// An identity signing with `key`, naming `signature_agent` (a URL).
    pub fn new(
        name: String,
        key: SigningKey,
        next: Option<SigningKey>,
        signature_agent: &str,
        form: AgentForm,
        expires: Duration,
    ) -> Identity {
        let quoted = format!("\"{signature_agent}\"");
        let (agent, covered) = match form {
            AgentForm::String => (quoted.clone(), ("\"signature-agent\"", quoted)),
            AgentForm::Dictionary => (
                format!("sig1={quoted}"),
                ("\"signature-agent\";key=\"sig1\"", quoted),
            ),
        };
        let directory_host = signature_agent
            .split_once("://")
            .map_or(signature_agent, |(_, rest)| rest)
            .split('/')
            .next()
            .unwrap_or_default()
            .to_ascii_lowercase();
        Identity {
            name,
            key,
            next,
            // The configuration admits only printable URLs without quotes.
            agent: HeaderValue::from_str(&agent).unwrap_or(HeaderValue::from_static("\"\"")),
            covered,
            directory_host,
            expires: expires.max(Duration::from_secs(1)),
            cache: Mutex::default(),
        }
    }

    /// The `keyid` its signatures carry now.
    pub fn keyid(&self) -> &str {
        self.key.thumbprint()
    }

    /// Its keys: the current one, then the next one when set.
    fn keys(&self) -> impl Iterator<Item = &SigningKey> {
        std::iter::once(&self.key).chain(self.next.as_ref())
    }

    /// The key directory (a JWKS): the current key, then the next one when set.
    pub fn directory(&self) -> serde_json::Value {
        let keys: Vec<_> = self.keys().map(SigningKey::public_jwk).collect();
        serde_json::json!({ "keys": keys })
    }

    /// The signature for a request to `authority` (RFC 9421 §2.2.3: lowercase host, the
    /// port only when not the scheme's default), made now or reused; with an `offer`, it
    /// also covers the `crawler-max-price` it carries.
    pub fn sign(&self, authority: &str, offer: Option<&Price>) -> Arc<Signed> {
        let now = now_seconds();
        let fresh = |signed: &Arc<Signed>| now < signed.created + self.expires.as_secs() / 2;
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        let reusable = cache
            .get(authority)
            .and_then(|kept| kept.iter().find(|s| s.offer.as_ref() == offer))
            .filter(|signed| fresh(signed));
        if let Some(signed) = reusable {
            return signed.clone();
        }
        let signed = Arc::new(self.sign_at(authority, now, offer));
        if cache.len() >= CACHED_AUTHORITIES && !cache.contains_key(authority) {
            cache.clear();
        }
        let kept = cache.entry(authority.to_string()).or_default();
        kept.retain(|s| s.offer.as_ref() != offer && fresh(s));
        kept.push(signed.clone());
        signed
    }

    /// The directory response's signatures (the key directory draft: one per key it
    /// lists, proving possession), for a request to `authority`: `Signature-Input` and
    /// `Signature` values, labels `sig1`, `sig2`, … Each covers `"@authority";req`, with
    /// `tag="http-message-signatures-directory"`.
    pub fn sign_directory(&self, authority: &str) -> (String, String) {
        let created = now_seconds();
        let (mut inputs, mut signatures) = (Vec::new(), Vec::new());
        for (i, key) in self.keys().enumerate() {
            let params = format!(
                "(\"@authority\";req);created={created};expires={};keyid=\"{}\";alg=\"ed25519\";tag=\"http-message-signatures-directory\"",
                created + self.expires.as_secs(),
                key.thumbprint(),
            );
            let base = format!("\"@authority\";req: {authority}\n\"@signature-params\": {params}");
            let label = i + 1;
            inputs.push(format!("sig{label}={params}"));
            signatures.push(format!(
                "sig{label}=:{}:",
                STANDARD.encode(key.sign(base.as_bytes()))
            ));
        }
        (inputs.join(", "), signatures.join(", "))
    }

    /// Does `host` (a request's `Host`) name this identity's `signature_agent`?
    pub fn serves(&self, host: &str) -> bool {
        self.directory_host.eq_ignore_ascii_case(host)
    }

    /// The signature for `authority` created at `created` (seconds since the epoch).
    fn sign_at(&self, authority: &str, created: u64, offer: Option<&Price>) -> Signed {
        let (component, member) = &self.covered;
        let max_price = offer.map(Price::to_string);
        let (price_component, price_line) = match &max_price {
            Some(price) => (
                " \"crawler-max-price\"",
                format!("\"crawler-max-price\": {price}\n"),
            ),
            None => ("", String::new()),
        };
        let params = format!(
            "(\"@authority\" {component}{price_component});created={created};expires={};keyid=\"{}\";alg=\"ed25519\";tag=\"web-bot-auth\"",
            created + self.expires.as_secs(),
            self.key.thumbprint(),
        );
        let base = format!(
            "\"@authority\": {authority}\n{component}: {member}\n{price_line}\"@signature-params\": {params}"
        );
        let signature = STANDARD.encode(self.key.sign(base.as_bytes()));
        // Made of printable ASCII (the parameters, base64, a validated URL and price).
        let value =
            |text: String| HeaderValue::from_str(&text).unwrap_or(HeaderValue::from_static(""));
        Signed {
            agent: self.agent.clone(),
            input: value(format!("sig1={params}")),
            signature: value(format!("sig1=:{signature}:")),
            max_price: max_price.map(value),
            offer: offer.cloned(),
            created,
        }
    }
}

/// Seconds since the epoch: the clock `created` and `expires` are on.
fn now_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(form: AgentForm) -> Identity {
        let (jwk, _) = super::super::key::generate_jwk().expect("key");
        let key = SigningKey::from_jwk(jwk.as_bytes(), "test").expect("key");
        Identity::new(
            "main".into(),
            key,
            None,
            "https://crawler.example",
            form,
            Duration::from_secs(60),
        )
    }

    fn text(value: &HeaderValue) -> &str {
        value.to_str().unwrap_or_default()
    }

    fn verify(identity: &Identity, base: &str, signature: &str) -> bool {
        let x = identity.directory()["keys"][0]["x"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let public = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(x)
            .unwrap_or_default();
        let raw = signature
            .strip_prefix("sig1=:")
            .and_then(|s| s.strip_suffix(':'))
            .unwrap_or_default();
        let raw = STANDARD.decode(raw).unwrap_or_default();
        ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, public)
            .verify(base.as_bytes(), &raw)
            .is_ok()
    }

    #[test]
    fn both_forms_sign_the_base_rfc9421_defines() {
        let id = identity(AgentForm::String);
        let signed = id.sign_at("example.com", 1_700_000_000, None);
        assert_eq!(signed.agent, "\"https://crawler.example\"");
        let params = format!(
            "(\"@authority\" \"signature-agent\");created=1700000000;expires=1700000060;keyid=\"{}\";alg=\"ed25519\";tag=\"web-bot-auth\"",
            id.keyid()
        );
        assert_eq!(text(&signed.input), format!("sig1={params}"));
        let base = format!(
            "\"@authority\": example.com\n\"signature-agent\": \"https://crawler.example\"\n\"@signature-params\": {params}"
        );
        assert!(verify(&id, &base, text(&signed.signature)));
        assert!(!verify(
            &id,
            &base.replace("example.com", "example.org"),
            text(&signed.signature)
        ));

        let id = identity(AgentForm::Dictionary);
        let signed = id.sign_at("example.com:8080", 1_700_000_000, None);
        assert_eq!(signed.agent, "sig1=\"https://crawler.example\"");
        assert!(text(&signed.input)
            .starts_with("sig1=(\"@authority\" \"signature-agent\";key=\"sig1\");created="));
        let input = text(&signed.input);
        let params = input.strip_prefix("sig1=").unwrap_or_default();
        let base = format!(
            "\"@authority\": example.com:8080\n\"signature-agent\";key=\"sig1\": \"https://crawler.example\"\n\"@signature-params\": {params}"
        );
        assert!(verify(&id, &base, text(&signed.signature)));
    }

    #[test]
    fn a_signature_is_reused_per_authority_within_half_its_validity() {
        let id = identity(AgentForm::String);
        let a = id.sign("a.example", None);
        assert!(Arc::ptr_eq(&a, &id.sign("a.example", None)));
        assert!(!Arc::ptr_eq(&a, &id.sign("b.example", None)));
        assert_ne!(a.signature, id.sign("b.example", None).signature);
        // One per price offered, each reused.
        let (cent, two) = (
            Price::parse("USD 0.01").expect("price"),
            Price::parse("USD 0.02").expect("price"),
        );
        let paying = id.sign("a.example", Some(&cent));
        assert_eq!(paying.max_price.as_ref().map(text), Some("USD 0.01"));
        assert!(Arc::ptr_eq(&paying, &id.sign("a.example", Some(&cent))));
        let more = id.sign("a.example", Some(&two));
        assert_eq!(more.max_price.as_ref().map(text), Some("USD 0.02"));
        assert!(Arc::ptr_eq(&a, &id.sign("a.example", None)));
        assert!(Arc::ptr_eq(&paying, &id.sign("a.example", Some(&cent))));
    }
}
