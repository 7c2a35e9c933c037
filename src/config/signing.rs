//! `signing`: the identities robotsgate signs requests as (Web Bot Auth), each with its
//! Ed25519 key file, the next key (published before it signs), the URL of its key
//! directory and how long a signature is valid. Which identity a request is signed as
//! is chosen per proxy user here (`signing.users`), else in `agent` (`rules[].identity`,
//! `default_identity`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

use super::values::{ValueError, ValueKind};
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
    /// Proxy users (`access.credentials_file`) and the identity each one's requests are
    /// signed as, ahead of `agent.rules[].identity` and `agent.default_identity`.
    pub users: BTreeMap<String, String>,
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

/// An amount of money: a currency code and millionths of its unit.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct Price {
    /// ISO 4217 code (`USD`).
    pub currency: String,
    /// Millionths of a unit.
    pub micros: u64,
}

impl Price {
    /// Reads `USD 0.01` (a code, a space, a decimal with at most six decimals).
    pub fn parse(text: &str) -> Option<Price> {
        let (currency, amount) = text.trim().split_once(' ')?;
        if currency.len() != 3 || !currency.bytes().all(|b| b.is_ascii_uppercase()) {
            return None;
        }
        let amount = amount.trim();
        let (units, fraction) = amount.split_once('.').unwrap_or((amount, ""));
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(units) || !(fraction.is_empty() || digits(fraction)) || fraction.len() > 6 {
            return None;
        }
        let units: u64 = units.parse().ok()?;
        let fraction: u64 = format!("{fraction:0<6}").parse().ok()?;
        Some(Price {
            currency: currency.to_string(),
            micros: units.checked_mul(1_000_000)?.checked_add(fraction)?,
        })
    }

    /// In the currency's units (for the metric).
    pub fn units(&self) -> f64 {
        self.micros as f64 / 1e6
    }
}

impl std::fmt::Display for Price {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (units, micros) = (self.micros / 1_000_000, self.micros % 1_000_000);
        let fraction = format!("{micros:06}");
        let fraction = fraction.trim_end_matches('0');
        let fraction = if fraction.len() < 2 {
            format!("{fraction:0<2}")
        } else {
            fraction.to_string()
        };
        write!(f, "{} {units}.{fraction}", self.currency)
    }
}

impl TryFrom<String> for Price {
    type Error = ValueError;
    fn try_from(text: String) -> Result<Price, ValueError> {
        Price::parse(&text).ok_or_else(|| {
            ValueError::new(
                ValueKind::Price,
                format!(
                    "`{text}` is not a price: a currency code, a space and an amount (`USD 0.01`)"
                ),
            )
        })
    }
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
    /// Pay per crawl: the most it pays a request, and a day.
    #[serde(default)]
    pub payment: Option<PaymentConfig>,
}

/// `signing.identities[].payment` and `agent.rules[].payment`: a pay-per-crawl budget.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PaymentConfig {
    /// Offered in a signed `crawler-max-price` on every request while the day's budget
    /// covers it.
    pub max_price: Price,
    /// What may be charged in a day (UTC).
    pub daily_budget: Price,
}

impl PaymentConfig {
    /// `max_price` more than zero and at most `daily_budget`, in the same currency;
    /// `key` is the key path of this `payment`.
    pub(super) fn validate(&self, key: &str) -> Result<(), ConfigError> {
        if self.max_price.currency != self.daily_budget.currency
            || self.max_price.micros == 0
            || self.max_price.micros > self.daily_budget.micros
        {
            return Err(ConfigError::invalid(format!(
                "key `{key}`: max_price must be more than zero and at most daily_budget, in the same currency"
            )));
        }
        Ok(())
    }
}

/// A signature's default lifetime.
fn default_expires() -> Seconds {
    Seconds::new(60.0)
}

impl SigningConfig {
    /// Names unique and set, directory URLs that are URLs a header can carry, validity
    /// within the draft's day, budgets that can pay (the identities `agent` and `users`
    /// name are checked with `agent`'s, in `Config::validate`).
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        for (i, identity) in self.identities.iter().enumerate() {
            let key = |k: &str| format!("key `robotsgate.signing.identities[{i}].{k}`");
            // Names are metric labels, log fields and part of Redis keys: plain words,
            // never an agent rule's budget name (`agent.rules[N]`).
            let word = identity
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
            if identity.name.is_empty()
                || !word
                || self.identities[..i].iter().any(|o| o.name == identity.name)
            {
                return Err(ConfigError::invalid(format!(
                    "{}: must be set, unique, and made of letters, digits, `-`, `_` and `.`",
                    key("name")
                )));
            }
            let url = &identity.signature_agent;
            let printable = url
                .bytes()
                .all(|b| (0x21..0x7f).contains(&b) && b != b'"' && b != b'\\');
            if !(url.starts_with("https://") || url.starts_with("http://")) || !printable {
                return Err(ConfigError::invalid(format!(
                    "{}: `{url}` is not an http(s) URL (no spaces, quotes or backslashes)",
                    key("signature_agent")
                )));
            }
            if let Some(p) = &identity.payment {
                p.validate(&format!("robotsgate.signing.identities[{i}].payment"))?;
            }
            let expires = identity.expires_seconds.get();
            if !(1.0..=86_400.0).contains(&expires) {
                return Err(ConfigError::invalid(format!(
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

#[cfg(test)]
mod tests {
    use super::*;

    fn price(text: &str) -> Price {
        Price::parse(text).expect(text)
    }

    #[test]
    fn prices_read_and_print_exactly() {
        assert_eq!(price("USD 0.01").micros, 10_000);
        assert_eq!(price("EUR 5").micros, 5_000_000);
        assert_eq!(price("USD 1.000001").micros, 1_000_001);
        assert_eq!(price("USD 0.01").to_string(), "USD 0.01");
        assert_eq!(price("USD 5").to_string(), "USD 5.00");
        assert_eq!(price("USD 1.000001").to_string(), "USD 1.000001");
        for bad in [
            "",
            "USD",
            "usd 1",
            "USD -1",
            "USD 1.0000001",
            "USD 1e3",
            "USD .5",
            "US 1",
        ] {
            assert_eq!(Price::parse(bad), None, "{bad}");
        }
    }

    /// The error `from_yaml` gives for `robotsgate:` + `body`.
    fn refusal(body: &str) -> String {
        match super::super::Config::from_yaml(&format!("robotsgate:\n{body}")) {
            Ok(_) => String::from("accepted"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn users_budgets_and_rules_name_what_is_wrong() {
        let identity = "  signing:\n    identities:\n      - name: main\n        key_file: /k\n        signature_agent: https://crawler.example\n";
        assert_eq!(refusal(identity), "accepted");
        let bracketed = identity.replace("name: main", "name: \"agent.rules[0]\"");
        assert!(
            refusal(&bracketed).contains("key `robotsgate.signing.identities[0].name`"),
            "{}",
            refusal(&bracketed)
        );
        let users = format!("{identity}    users: {{alice: other}}\n");
        assert!(
            refusal(&users)
                .contains("key `robotsgate.signing.users.alice` (line 7): no identity `other`"),
            "{}",
            refusal(&users)
        );
        let paying = |payment: &str, default: &str| {
            format!("{identity}  agent:\n{default}    rules:\n      - client: 10.0.0.0/8\n        tokens: [A]\n        payment: {payment}\n")
        };
        let ok = "{max_price: USD 0.01, daily_budget: USD 1}";
        assert_eq!(
            refusal(&paying(ok, "    default_identity: main\n")),
            "accepted"
        );
        let unsigned = refusal(&paying(ok, ""));
        assert!(
            unsigned.contains(
                "key `robotsgate.agent.rules[0].payment` (line 11): only signed requests can pay"
            ),
            "{unsigned}"
        );
        let currencies = refusal(&paying(
            "{max_price: EUR 0.01, daily_budget: USD 1}",
            "    default_identity: main\n",
        ));
        assert!(
            currencies
                .contains("key `robotsgate.agent.rules[0].payment` (line 12): max_price must"),
            "{currencies}"
        );
    }
}
