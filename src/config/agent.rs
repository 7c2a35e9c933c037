//! `agent`: which crawler a request is. Token lists chosen by client address or
//! User-Agent text, the purposes each crawler declares, the identity it is signed as and
//! what it may spend, and the defaults.

use serde::Deserialize;

use super::{Cidr, ConfigError, EnforceMode, Purpose, UsageMode};

/// Which crawler a request is (see `agent.rs`).
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfig {
    /// Token list for requests no rule matches.
    pub default_tokens: Vec<String>,
    /// Purposes of requests whose rule (or user) declares none; empty: no usage check.
    pub default_purposes: Vec<Purpose>,
    /// The identity (`signing.identities`) requests are signed as when their rule names
    /// none; unset: unsigned.
    pub default_identity: Option<String>,
    /// First matching rule wins.
    pub rules: Vec<AgentRule>,
    /// With no rule and no default, judge a request by its User-Agent header's product
    /// token. A client can then pick its own group: off in production (where
    /// `default_tokens` must be set instead).
    pub from_user_agent: bool,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            default_tokens: Vec::new(),
            default_purposes: Vec::new(),
            default_identity: None,
            rules: Vec::new(),
            from_user_agent: true,
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
/// One `agent.rules` entry: which requests it matches and the tokens they are judged as.
pub struct AgentRule {
    /// Matches clients whose address is in this network.
    #[serde(default)]
    pub client: Option<Cidr>,
    /// Matches a User-Agent header containing this text (ASCII case-insensitive).
    #[serde(default)]
    pub user_agent_contains: Option<String>,
    /// Ordered product tokens, most specific first.
    pub tokens: Vec<String>,
    /// `report`: requests this rule matches are in report mode (see `enforce`).
    #[serde(default)]
    pub mode: Option<EnforceMode>,
    /// Accept a rule chosen by `user_agent_contains`, text any client controls, as
    /// deciding more than tokens: without it, such a rule setting `mode: report`,
    /// `usage_mode: report|off`, `purposes`, `identity` or `payment` is a configuration
    /// error, and its tokens give way to a rule that identifies the client by address.
    /// Authenticated clients never get a mode or tokens from their own text, whatever
    /// this says.
    #[serde(default)]
    pub trust_client_text: bool,
    /// What the requests this rule matches fetch for (`search`, `train-ai`,
    /// `ai-input`); unset: `agent.default_purposes`.
    #[serde(default)]
    pub purposes: Option<Vec<Purpose>>,
    /// Their usage mode; unset: `usage.mode`.
    #[serde(default)]
    pub usage_mode: Option<UsageMode>,
    /// The identity they are signed as; unset: `agent.default_identity`.
    #[serde(default)]
    pub identity: Option<String>,
    /// Their own pay-per-crawl budget, instead of their identity's.
    #[serde(default)]
    pub payment: Option<super::PaymentConfig>,
}

impl AgentConfig {
    /// Its checks: the defaults name the fleet's tokens when the User-Agent may not;
    /// each rule names a token and what it matches; and one chosen by client text
    /// (`user_agent_contains`) decides no more than tokens unless it says
    /// `trust_client_text: true`.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if !self.from_user_agent && self.default_tokens.is_empty() {
            return Err(ConfigError::invalid(
                "key `robotsgate.agent.default_tokens`: must name the fleet's token(s) when agent.from_user_agent is off",
            ));
        }
        for (i, rule) in self.rules.iter().enumerate() {
            if rule.tokens.is_empty() {
                return Err(ConfigError::invalid(format!(
                    "key `robotsgate.agent.rules[{i}].tokens`: must name at least one token"
                )));
            }
            if rule.client.is_none() && rule.user_agent_contains.is_none() {
                return Err(ConfigError::invalid(format!(
                    "key `robotsgate.agent.rules[{i}]`: needs `client` or `user_agent_contains`"
                )));
            }
        }
        for (i, rule) in self.rules.iter().enumerate() {
            if rule.mode == Some(EnforceMode::Report)
                && rule.user_agent_contains.is_some()
                && !rule.trust_client_text
            {
                return Err(ConfigError::invalid(format!(
                    "key `robotsgate.agent.rules[{i}].mode`: report mode chosen by user_agent_contains, text any client can send to have disallowed paths forwarded; match on `client` (an address), use enforce.report_users, or set trust_client_text: true on this rule to accept it"
                )));
            }
            if rule.user_agent_contains.is_some() && !rule.trust_client_text {
                let chosen = [
                    (
                        "purposes",
                        rule.purposes.is_some(),
                        "what the fetched content may be used for",
                    ),
                    (
                        "identity",
                        rule.identity.is_some(),
                        "whom requests are signed as",
                    ),
                    ("payment", rule.payment.is_some(), "what the fleet pays"),
                ];
                if let Some((key, _, what)) = chosen.into_iter().find(|c| c.1) {
                    return Err(ConfigError::invalid(format!(
                        "key `robotsgate.agent.rules[{i}].{key}`: {what} chosen by user_agent_contains, text any client can send; match on `client` (an address), use a proxy user's credentials, or set trust_client_text: true on this rule to accept it"
                    )));
                }
            }
            if matches!(rule.usage_mode, Some(UsageMode::Report | UsageMode::Off))
                && rule.user_agent_contains.is_some()
                && !rule.trust_client_text
            {
                return Err(ConfigError::invalid(format!(
                    "key `robotsgate.agent.rules[{i}].usage_mode`: usage checks relaxed by user_agent_contains, text any client can send to have refused content forwarded; match on `client` (an address), use usage.users, or set trust_client_text: true on this rule to accept it"
                )));
            }
        }
        Ok(())
    }
}
