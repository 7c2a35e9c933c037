//! `signing`: the identities robotsgate signs requests as (Web Bot Auth), each with its
//! Ed25519 key file, the next key (published before it signs), the URL of its key
//! directory and how long a signature is valid. Which identity a request is signed as
//! is chosen in `agent` (`default_identity`, `rules[].identity`).

use std::path::PathBuf;

use serde::Deserialize;

use super::{ConfigError, Seconds};

/// `signing`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SigningConfig {
    /// Serves the identities' key directories (`/.well-known/http-message-signatures-directory`),
    /// for the operator to put behind the HTTPS site each `signature_agent` names.
    pub directory_listen: Option<std::net::SocketAddr>,
    /// How `Signature-Agent` is written: `string` (a quoted URL covered whole, what
    /// Cloudflare's documented verifier takes) or `dictionary` (the draft's member,
    /// covered as `"signature-agent";key="sig1"`).
    pub signature_agent_form: AgentForm,
    /// The identities.
    pub identities: Vec<IdentityConfig>,
}

/// How `Signature-Agent` is written and covered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AgentForm {
    /// `Signature-Agent: "https://crawler.example"`, covered as `"signature-agent"`.
    #[default]
    String,
    /// `Signature-Agent: sig1="https://crawler.example"`, covered as
    /// `"signature-agent";key="sig1"`.
    Dictionary,
}

/// One identity of `signing.identities`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdentityConfig {
    /// What `agent.default_identity` and `agent.rules[].identity` call it.
    pub name: String,
    /// Its private key, an Ed25519 JWK (`robotsgate keys generate`).
    pub key_file: PathBuf,
    /// The next key: published in the directory, not used to sign until it becomes
    /// `key_file`.
    #[serde(default)]
    pub next_key_file: Option<PathBuf>,
    /// Where the operator publishes the key directory (`https://crawler.example`).
    pub signature_agent: String,
    /// A signature's validity, from `created` to `expires` (at most a day).
    #[serde(default = "default_expires")]
    pub expires_seconds: Seconds,
}

fn default_expires() -> Seconds {
    Seconds(60.0)
}

impl SigningConfig {
    /// Names unique and set, directory URLs that are URLs a header can carry, validity
    /// within the draft's day.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        for (i, identity) in self.identities.iter().enumerate() {
            let key = |k: &str| format!("key `robotsgate.signing.identities[{i}].{k}`");
            if identity.name.is_empty()
                || self.identities[..i].iter().any(|o| o.name == identity.name)
            {
                return Err(ConfigError(format!(
                    "{}: must be set and unique",
                    key("name")
                )));
            }
            let url = &identity.signature_agent;
            let printable = url
                .bytes()
                .all(|b| (0x21..0x7f).contains(&b) && b != b'"' && b != b'\\');
            if !(url.starts_with("https://") || url.starts_with("http://")) || !printable {
                return Err(ConfigError(format!(
                    "{}: `{url}` is not an http(s) URL (no spaces, quotes or backslashes)",
                    key("signature_agent")
                )));
            }
            let expires = identity.expires_seconds.get();
            if !(1.0..=86_400.0).contains(&expires) {
                return Err(ConfigError(format!(
                    "{}: {expires} s; between 1 and 86400 (the draft's 24 hours)",
                    key("expires_seconds")
                )));
            }
        }
        Ok(())
    }

    /// Is there an identity called `name`?
    pub fn has(&self, name: &str) -> bool {
        self.identities.iter().any(|i| i.name == name)
    }
}
