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

use super::key::SigningKey;
use super::payment::Budget;
use crate::config::AgentForm;

/// Authorities whose signature is kept for reuse; past this, the cache starts over.
pub const CACHED_AUTHORITIES: usize = 4096;

/// The three headers of one signature, ready to set on a request.
#[derive(Debug, PartialEq, Eq)]
pub struct Signed {
    /// `Signature-Agent`.
    pub agent: Arc<str>,
    /// `Signature-Input`.
    pub input: String,
    /// `Signature`.
    pub signature: String,
    /// `crawler-max-price`, covered by the signature, when it offers to pay.
    pub max_price: Option<String>,
    /// Seconds since the epoch when it was made.
    created: u64,
}

impl Signed {
    /// Sets the three headers on `request`, replacing any of the same names: a client's
    /// own never reach the origin beside robotsgate's (a crawler must not sign as the
    /// fleet, nor keep a stale signature).
    pub fn set_on(&self, request: &mut pingora::http::RequestHeader) -> pingora::Result<()> {
        request.insert_header("Signature-Agent", &*self.agent)?;
        request.insert_header("Signature-Input", self.input.as_str())?;
        request.insert_header("Signature", self.signature.as_str())?;
        // A price the client offered is not the fleet's to pay: only robotsgate's.
        match &self.max_price {
            Some(price) => request.insert_header("crawler-max-price", price.as_str())?,
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
    key: SigningKey,
    next: Option<SigningKey>,
    agent: Arc<str>,
    form: AgentForm,
    expires: Duration,
    /// Pay per crawl: the most it pays a request and a day.
    pub budget: Option<Arc<Budget>>,
    /// By authority, and whether the signature offers to pay.
    cache: Mutex<HashMap<(String, bool), Arc<Signed>>>,
}

impl Identity {
    /// An identity signing with `key`, naming `signature_agent` (a URL).
    pub fn new(
        name: String,
        key: SigningKey,
        next: Option<SigningKey>,
        signature_agent: &str,
        form: AgentForm,
        expires: Duration,
    ) -> Identity {
        let agent = match form {
            AgentForm::String => format!("\"{signature_agent}\""),
            AgentForm::Dictionary => format!("sig1=\"{signature_agent}\""),
        };
        Identity {
            name,
            key,
            next,
            agent: agent.into(),
            form,
            expires: expires.max(Duration::from_secs(1)),
            budget: None,
            cache: Mutex::default(),
        }
    }

    /// The `keyid` its signatures carry now.
    pub fn keyid(&self) -> &str {
        self.key.thumbprint()
    }

    /// The key directory (a JWKS): the current key, then the next one when set.
    pub fn directory(&self) -> serde_json::Value {
        let keys: Vec<_> = std::iter::once(&self.key)
            .chain(self.next.as_ref())
            .map(SigningKey::public_jwk)
            .collect();
        serde_json::json!({ "keys": keys })
    }

    /// With a pay-per-crawl budget.
    pub fn paying(mut self, budget: Option<Budget>) -> Identity {
        self.budget = budget.map(Arc::new);
        self
    }

    /// The signature for a request to `authority` (RFC 9421 §2.2.3: lowercase host, the
    /// port only when not the scheme's default), made now or reused; with `paying`, it
    /// also covers the `crawler-max-price` it carries.
    pub fn sign(&self, authority: &str, paying: bool) -> Arc<Signed> {
        let paying = paying && self.budget.is_some();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        let key = (authority.to_string(), paying);
        if let Some(signed) = cache.get(&key) {
            if now < signed.created + self.expires.as_secs() / 2 {
                return signed.clone();
            }
        }
        let signed = Arc::new(self.sign_at(authority, now, paying));
        if cache.len() >= CACHED_AUTHORITIES {
            cache.clear();
        }
        cache.insert(key, signed.clone());
        signed
    }

    /// The directory response's signatures (the key directory draft: one per key it
    /// lists, proving possession), for a request to `authority`: `Signature-Input` and
    /// `Signature` values, labels `sig1`, `sig2`, … Each covers `"@authority";req`, with
    /// `tag="http-message-signatures-directory"`.
    pub fn sign_directory(&self, authority: &str) -> (String, String) {
        let created = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let (mut inputs, mut signatures) = (Vec::new(), Vec::new());
        for (i, key) in std::iter::once(&self.key)
            .chain(self.next.as_ref())
            .enumerate()
        {
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
        let url = self.agent.trim_start_matches("sig1=").trim_matches('"');
        let authority = url.split_once("://").map_or(url, |(_, rest)| rest);
        let authority = authority.split('/').next().unwrap_or_default();
        authority.eq_ignore_ascii_case(host)
    }

    /// The signature for `authority` created at `created` (seconds since the epoch).
    fn sign_at(&self, authority: &str, created: u64, paying: bool) -> Signed {
        let (component, member) = match self.form {
            AgentForm::String => ("\"signature-agent\"", &*self.agent),
            AgentForm::Dictionary => (
                "\"signature-agent\";key=\"sig1\"",
                self.agent.strip_prefix("sig1=").unwrap_or(&self.agent),
            ),
        };
        let max_price = self
            .budget
            .as_ref()
            .filter(|_| paying)
            .map(|b| b.max_price.to_string());
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
        Signed {
            agent: self.agent.clone(),
            input: format!("sig1={params}"),
            signature: format!("sig1=:{signature}:"),
            max_price,
            created,
        }
    }
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
        let signed = id.sign_at("example.com", 1_700_000_000, false);
        assert_eq!(&*signed.agent, "\"https://crawler.example\"");
        let params = format!(
            "(\"@authority\" \"signature-agent\");created=1700000000;expires=1700000060;keyid=\"{}\";alg=\"ed25519\";tag=\"web-bot-auth\"",
            id.keyid()
        );
        assert_eq!(signed.input, format!("sig1={params}"));
        let base = format!(
            "\"@authority\": example.com\n\"signature-agent\": \"https://crawler.example\"\n\"@signature-params\": {params}"
        );
        assert!(verify(&id, &base, &signed.signature));
        assert!(!verify(
            &id,
            &base.replace("example.com", "example.org"),
            &signed.signature
        ));

        let id = identity(AgentForm::Dictionary);
        let signed = id.sign_at("example.com:8080", 1_700_000_000, false);
        assert_eq!(&*signed.agent, "sig1=\"https://crawler.example\"");
        assert!(signed
            .input
            .starts_with("sig1=(\"@authority\" \"signature-agent\";key=\"sig1\");created="));
        let params = signed.input.strip_prefix("sig1=").unwrap_or_default();
        let base = format!(
            "\"@authority\": example.com:8080\n\"signature-agent\";key=\"sig1\": \"https://crawler.example\"\n\"@signature-params\": {params}"
        );
        assert!(verify(&id, &base, &signed.signature));
    }

    #[test]
    fn a_signature_is_reused_per_authority_within_half_its_validity() {
        let id = identity(AgentForm::String);
        let a = id.sign("a.example", false);
        assert!(Arc::ptr_eq(&a, &id.sign("a.example", false)));
        assert!(!Arc::ptr_eq(&a, &id.sign("b.example", false)));
        assert_ne!(a.signature, id.sign("b.example", false).signature);
    }
}
