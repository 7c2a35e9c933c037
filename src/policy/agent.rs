//! Which crawler is asking: the ordered product-token list a request is judged as.
//!
//! robots.txt groups name product tokens (`Googlebot`), never whole User-Agent headers
//! (SPEC §4), and a fleet's politeness should not hinge on every crawler sending a
//! truthful header. So the tokens come from configuration first:
//! 1. the authenticated proxy user's tokens (`access.credentials_file`);
//! 2. the first `agent.rules` entry matching the client address and/or User-Agent text;
//! 3. otherwise `agent.default_tokens` (or `run --agent`);
//! 4. otherwise, only when `agent.from_user_agent` is on, the User-Agent header's first
//!    product token (`ExampleBot/1.0 (+https://…)` → `ExampleBot`) — off in production,
//!    since a client could then name the most permissive group itself;
//! 5. otherwise no token at all, which selects only the `*` group.
//!
//! [`Tokens::source`] says which of these decided, for `/check` and the access log.
//!
//! **Only the operator chooses.** For an authenticated client (a proxy user) neither the
//! tokens nor the mode ever come from text the client controls: rules that match on
//! `user_agent_contains` and the User-Agent's product token are skipped for it. For the
//! others, a rule that switches to report mode on User-Agent text is a configuration
//! error unless it says `trust_client_text: true`. [`ModeChoice::from`] says which
//! setting chose the mode.

use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::config::{AgentConfig, AgentRule, EnforceConfig, EnforceMode, UsageConfig, UsageMode};
use crate::policy::usage::UsageCheck;
use crate::robots::Purposes;

/// Resolves which robots.txt tokens a request is judged as (see the module docs).
pub struct AgentResolver {
    /// The operator's rules, in order: the first that matches a request decides.
    rules: Vec<AgentRule>,
    /// Tokens for requests no rule or user names.
    default_tokens: Vec<String>,
    /// Whether the User-Agent's product token may name the crawler.
    from_user_agent: bool,
    /// Purposes of requests whose rule or user declares none.
    default_purposes: Purposes,
    /// Who is in report mode.
    enforce: EnforceConfig,
    /// The usage check's settings.
    usage: UsageConfig,
    /// The identity requests are signed as when their rule names none.
    default_identity: Option<String>,
    /// Proxy users' identities (`signing.users`), ahead of any rule's.
    user_identities: BTreeMap<String, String>,
    /// Does any rule name an identity? Without one (and without a default or a user's),
    /// nothing is signed and [`AgentResolver::signing_for`] skips matching the rules
    /// (which lowercases the User-Agent per rule) on every request.
    rules_sign: bool,
}

/// Which identity signs a request, and the agent rule that matched it (whose own
/// `payment`, when it has one, pays instead of the identity's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SignAs<'a> {
    /// The identity's name (`signing.identities[].name`).
    pub identity: &'a str,
    /// The index of the `agent.rules` entry that matched, if one did.
    pub rule: Option<usize>,
}

/// The tokens for one request, borrowed from configuration or from the header, and
/// where they came from.
#[derive(Debug, PartialEq, Eq)]
pub enum Tokens<'a> {
    /// The authenticated proxy user's.
    Credential(&'a [String]),
    /// A matching `agent.rules` entry's.
    Rule(&'a [String]),
    /// `agent.default_tokens`.
    Default(&'a [String]),
    /// The User-Agent header's product token (`agent.from_user_agent`).
    FromHeader([&'a str; 1]),
    /// No token: only the `*` group applies.
    None,
}

impl<'a> Tokens<'a> {
    /// Where the tokens came from: `credential`, `rule`, `default`, `header` or `none`.
    pub fn source(&self) -> &'static str {
        match self {
            Tokens::Credential(_) => "credential",
            Tokens::Rule(_) => "rule",
            Tokens::Default(_) => "default",
            Tokens::FromHeader(_) => "header",
            Tokens::None => "none",
        }
    }

    /// The ordered token list.
    pub fn list(&self) -> Vec<&'a str> {
        match self {
            Tokens::Credential(list) | Tokens::Rule(list) | Tokens::Default(list) => {
                list.iter().map(String::as_str).collect()
            }
            Tokens::FromHeader(one) => one.to_vec(),
            Tokens::None => Vec::new(),
        }
    }
}

/// Whether a request is only reported, and which setting chose that.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModeChoice {
    /// Report mode: forwarded with what enforcing would have answered.
    pub report: bool,
    /// The setting that chose the mode.
    pub from: ModeFrom,
}

/// The setting that chose a request's mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModeFrom {
    /// `enforce.mode`.
    Config,
    /// `enforce.report_users` (the authenticated user).
    User,
    /// `enforce.report_clients` (the client's address).
    Client,
    /// The matching `agent.rules` entry's `mode`.
    Rule,
}

impl ModeFrom {
    /// `config`, `user`, `client` or `rule`: for `/check` and the access log.
    pub fn label(self) -> &'static str {
        match self {
            ModeFrom::Config => "config",
            ModeFrom::User => "user",
            ModeFrom::Client => "client",
            ModeFrom::Rule => "rule",
        }
    }
}

/// Who sends a request: what its robots.txt group is chosen from.
#[derive(Clone, Copy, Debug, Default)]
pub struct Requester<'a> {
    /// The downstream address.
    pub client: Option<IpAddr>,
    /// The `User-Agent` header, if sent.
    pub user_agent: Option<&'a str>,
    /// Tokens of the authenticated proxy user (`access.credentials_file`); when set they
    /// decide, ahead of every rule and header.
    pub tokens: Option<&'a [String]>,
    /// The authenticated proxy user's name.
    pub user: Option<&'a str>,
    /// The authenticated proxy user's purposes, when its credentials line names any.
    pub purposes: Option<Purposes>,
    /// Handed over by another member: its client and user are that member's word.
    pub handed: bool,
}

impl<'a> Requester<'a> {
    /// The User-Agent as far as it may choose anything: never an authenticated
    /// client's (its credentials choose).
    fn trusted_text(&self) -> Option<&'a str> {
        if self.user.is_some() {
            None
        } else {
            self.user_agent
        }
    }

    /// A requester without proxy credentials.
    pub fn new(client: Option<IpAddr>, user_agent: Option<&'a str>) -> Requester<'a> {
        Requester {
            client,
            user_agent,
            tokens: None,
            user: None,
            purposes: None,
            handed: false,
        }
    }
}

/// `Name/1.0 (comment)` → `Name`: the leading run of token characters (RFC 9110).
pub fn product_token(user_agent: &str) -> Option<&str> {
    let end = user_agent
        .find(|c: char| !(c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c)))
        .unwrap_or(user_agent.len());
    let token = &user_agent[..end];
    (!token.is_empty()).then_some(token)
}

impl AgentResolver {
    /// The resolver for `robotsgate.agent` and `robotsgate.enforce`.
    pub fn new(
        config: &AgentConfig,
        enforce: &EnforceConfig,
        usage: &UsageConfig,
        user_identities: &BTreeMap<String, String>,
    ) -> AgentResolver {
        AgentResolver {
            rules: config.rules.clone(),
            default_tokens: config.default_tokens.clone(),
            from_user_agent: config.from_user_agent,
            default_purposes: config.default_purposes.iter().copied().collect(),
            enforce: enforce.clone(),
            usage: usage.clone(),
            default_identity: config.default_identity.clone(),
            user_identities: user_identities.clone(),
            rules_sign: config.rules.iter().any(|r| r.identity.is_some()),
        }
    }

    /// The signing identity `who`'s requests carry: its user's (`signing.users`), else
    /// its agent rule's, else `agent.default_identity`; `None`: unsigned. As for tokens
    /// and mode, an authenticated client's own text chooses none.
    pub fn signing_for(&self, who: &Requester<'_>) -> Option<SignAs<'_>> {
        let user = who.user.and_then(|u| self.user_identities.get(u));
        if user.is_none() && self.default_identity.is_none() && !self.rules_sign {
            return None;
        }
        let matched = self.rule_index(who.client, who.trusted_text());
        let rule = matched.and_then(|i| self.rules.get(i));
        let identity = user
            .or(rule.and_then(|r| r.identity.as_ref()))
            .or(self.default_identity.as_ref())?;
        Some(SignAs {
            identity,
            rule: matched,
        })
    }

    /// The usage check for `who`: its purposes (its user's, else its agent rule's, else
    /// `agent.default_purposes`) and its mode (`usage.users`, else its agent rule's
    /// `usage_mode`, else `usage.mode`). As for tokens and mode, an authenticated
    /// client's own text chooses nothing.
    pub fn usage_for(&self, who: &Requester<'_>) -> UsageCheck {
        let rule = self.rule(who.client, who.trusted_text());
        let purposes = who
            .purposes
            .filter(|p| !p.is_empty())
            .or_else(|| {
                rule.and_then(|r| r.purposes.as_ref())
                    .map(|p| p.iter().copied().collect())
            })
            .unwrap_or(self.default_purposes);
        let mode = who
            .user
            .and_then(|u| self.usage.users.get(u).copied())
            .or_else(|| rule.and_then(|r| r.usage_mode))
            .unwrap_or(self.usage.mode);
        // A peer's word never makes the usage check laxer than `usage.mode` (as it
        // never switches enforcement off), unless `enforce.report_handed_over`.
        let mode = if who.handed && !self.enforce.report_handed_over {
            stricter(mode, self.usage.mode)
        } else {
            mode
        };
        UsageCheck::new(purposes, mode, &self.usage)
    }

    /// The tokens for a request: its user's, else the configured rules' and defaults'.
    pub fn tokens_for<'a>(&'a self, who: &Requester<'a>) -> Tokens<'a> {
        match who.tokens {
            Some(tokens) if !tokens.is_empty() => Tokens::Credential(tokens),
            _ => self.tokens(who.client, who.trusted_text()),
        }
    }

    /// Is `who` enforced or only reported, and which setting said so: `enforce.mode`,
    /// the user in `enforce.report_users`, the address in `enforce.report_clients`, or
    /// the agent rule that matched (never one matched on an authenticated client's own
    /// text).
    pub fn reports(&self, who: &Requester<'_>) -> ModeChoice {
        let e = &self.enforce;
        let report = |from| ModeChoice { report: true, from };
        if e.mode == EnforceMode::Report {
            return report(ModeFrom::Config);
        }
        if who.handed && !e.report_handed_over {
            // A peer's word never switches enforcement off.
            return ModeChoice {
                report: false,
                from: ModeFrom::Config,
            };
        }
        if who
            .user
            .is_some_and(|u| e.report_users.iter().any(|r| r == u))
        {
            return report(ModeFrom::User);
        }
        if who
            .client
            .is_some_and(|ip| e.report_clients.iter().any(|net| net.contains(ip)))
        {
            return report(ModeFrom::Client);
        }
        match self.rule(who.client, who.trusted_text()) {
            Some(rule) if rule.mode == Some(EnforceMode::Report) => report(ModeFrom::Rule),
            Some(rule) if rule.mode.is_some() => ModeChoice {
                report: false,
                from: ModeFrom::Rule,
            },
            _ => ModeChoice {
                report: false,
                from: ModeFrom::Config,
            },
        }
    }

    /// `enforce`, `report`, or `mixed` (some clients, users or agent rules report).
    pub fn mode_label(&self) -> &'static str {
        let e = &self.enforce;
        if e.mode == EnforceMode::Report {
            "report"
        } else if !e.report_clients.is_empty()
            || !e.report_users.is_empty()
            || self
                .rules
                .iter()
                .any(|r| r.mode == Some(EnforceMode::Report))
        {
            "mixed"
        } else {
            "enforce"
        }
    }

    /// The first agent rule matching a client address and User-Agent.
    fn rule(&self, client: Option<IpAddr>, user_agent: Option<&str>) -> Option<&AgentRule> {
        self.rule_index(client, user_agent)
            .and_then(|i| self.rules.get(i))
    }

    /// The index of the rule for a client address and User-Agent: the first that
    /// matches, unless it is chosen by the client's own text (`user_agent_contains`
    /// without `trust_client_text`) while a rule that needs no text identifies the
    /// client by its address: then that one. Text any client can send never
    /// overrides who the operator says a client is.
    fn rule_index(&self, client: Option<IpAddr>, user_agent: Option<&str>) -> Option<usize> {
        let matches = |rule: &AgentRule| {
            let client_ok = rule
                .client
                .is_none_or(|net| client.is_some_and(|ip| net.contains(ip)));
            let ua_ok = rule.user_agent_contains.as_deref().is_none_or(|needle| {
                user_agent.is_some_and(|ua| {
                    ua.to_ascii_lowercase()
                        .contains(&needle.to_ascii_lowercase())
                })
            });
            client_ok && ua_ok
        };
        let by_text =
            |rule: &AgentRule| rule.user_agent_contains.is_some() && !rule.trust_client_text;
        let first = self.rules.iter().position(matches)?;
        if !by_text(&self.rules[first]) {
            return Some(first);
        }
        let by_address = self
            .rules
            .iter()
            .position(|rule| rule.client.is_some() && !by_text(rule) && matches(rule));
        Some(by_address.unwrap_or(first))
    }

    /// The tokens for a client address and User-Agent, by rule, default or header.
    pub fn tokens<'a>(&'a self, client: Option<IpAddr>, user_agent: Option<&'a str>) -> Tokens<'a> {
        if let Some(rule) = self.rule(client, user_agent) {
            return Tokens::Rule(&rule.tokens);
        }
        if !self.default_tokens.is_empty() {
            return Tokens::Default(&self.default_tokens);
        }
        if !self.from_user_agent {
            return Tokens::None;
        }
        match user_agent.and_then(product_token) {
            Some(token) => Tokens::FromHeader([token]),
            None => Tokens::None,
        }
    }
}

/// The stricter of two usage modes (`enforce` over `report` over `off`).
fn stricter(a: UsageMode, b: UsageMode) -> UsageMode {
    let rank = |m: UsageMode| match m {
        UsageMode::Enforce => 2,
        UsageMode::Report => 1,
        UsageMode::Off => 0,
    };
    if rank(a) >= rank(b) {
        a
    } else {
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolver(yaml: &str) -> AgentResolver {
        let config: AgentConfig = serde_yaml::from_str(yaml).expect("agent config");
        AgentResolver::new(
            &config,
            &EnforceConfig::default(),
            &UsageConfig::default(),
            &BTreeMap::new(),
        )
    }

    #[test]
    fn product_tokens() {
        assert_eq!(
            product_token("ExampleBot/1.0 (+https://example.com/bot)"),
            Some("ExampleBot")
        );
        assert_eq!(
            product_token("Mozilla/5.0 (compatible; Googlebot/2.1)"),
            Some("Mozilla")
        );
        assert_eq!(product_token("curl"), Some("curl"));
        assert_eq!(product_token(" x"), None);
        assert_eq!(product_token(""), None);
    }

    #[test]
    fn rules_then_default_then_header() {
        let r = resolver(
            "default_tokens: []\nrules:\n  - client: 10.0.0.0/8\n    tokens: [AcmeNews, AcmeBot]\n  - user_agent_contains: googlebot\n    tokens: [Googlebot]\n",
        );
        let ip = |s: &str| Some(s.parse::<IpAddr>().expect("ip"));
        assert_eq!(
            r.tokens(ip("10.1.1.1"), Some("x/1")).list(),
            ["AcmeNews", "AcmeBot"]
        );
        assert_eq!(
            r.tokens(
                ip("192.0.2.1"),
                Some("Mozilla/5.0 (compatible; Googlebot/2.1)")
            )
            .list(),
            ["Googlebot"]
        );
        assert_eq!(
            r.tokens(ip("192.0.2.1"), Some("ExampleBot/1.0")).list(),
            ["ExampleBot"]
        );
        assert_eq!(r.tokens(None, None), Tokens::None);
        let r = resolver("default_tokens: [FleetBot]\n");
        assert_eq!(r.tokens(None, Some("Other/1")).list(), ["FleetBot"]);
    }

    #[test]
    fn an_authenticated_clients_own_text_chooses_neither_tokens_nor_mode() {
        let r = resolver(
            "default_tokens: []\nfrom_user_agent: true\nrules:\n  - user_agent_contains: canary\n    tokens: [CanaryBot]\n    mode: report\n    trust_client_text: true\n  - client: 10.0.0.0/8\n    tokens: [NetBot]\n    mode: report\n",
        );
        let anonymous = Requester::new(None, Some("Mozilla/5.0 CanaryBot"));
        assert_eq!(r.tokens_for(&anonymous).list(), ["CanaryBot"]);
        assert_eq!(
            r.reports(&anonymous),
            ModeChoice {
                report: true,
                from: ModeFrom::Rule
            }
        );
        let user = Requester {
            user: Some("fleet"),
            ..anonymous
        };
        assert_eq!(
            r.tokens_for(&user),
            Tokens::None,
            "no rule, no header token"
        );
        assert_eq!(
            r.reports(&user),
            ModeChoice {
                report: false,
                from: ModeFrom::Config
            }
        );
        // An address is the operator's to match on, authenticated or not.
        let from_net = Requester {
            client: Some("10.1.2.3".parse().expect("ip")),
            ..user
        };
        assert_eq!(r.tokens_for(&from_net).list(), ["NetBot"]);
        assert!(r.reports(&from_net).report);
        // Handed over by another member: its word about the client chooses the tokens,
        // never report mode (unless enforce.report_handed_over).
        let handed = Requester {
            handed: true,
            ..from_net
        };
        assert_eq!(r.tokens_for(&handed).list(), ["NetBot"]);
        assert!(!r.reports(&handed).report);
    }

    #[test]
    fn purposes_and_usage_mode_come_from_user_then_rule_then_default() {
        use crate::config::Purpose;
        let config: AgentConfig = serde_yaml::from_str(
            "default_purposes: [search]\nrules:\n  - user_agent_contains: trainer\n    tokens: [T]\n    purposes: [train-ai]\n    usage_mode: report\n    trust_client_text: true\n",
        )
        .expect("agent config");
        let usage: UsageConfig = serde_yaml::from_str("users: {alice: off}").expect("usage");
        let r = AgentResolver::new(&config, &EnforceConfig::default(), &usage, &BTreeMap::new());
        let set = |p: &[Purpose]| p.iter().copied().collect::<Purposes>();
        let anonymous = Requester::new(None, Some("trainer/1"));
        let check = r.usage_for(&anonymous);
        assert_eq!(
            (check.purposes, check.mode),
            (set(&[Purpose::TrainAi]), UsageMode::Report)
        );
        let other = r.usage_for(&Requester::new(None, Some("x/1")));
        assert_eq!(
            (other.purposes, other.mode),
            (set(&[Purpose::Search]), UsageMode::Enforce)
        );
        // An authenticated client's own text chooses nothing; its credentials and
        // `usage.users` do.
        let bob = Requester {
            user: Some("bob"),
            ..anonymous
        };
        let check = r.usage_for(&bob);
        assert_eq!(
            (check.purposes, check.mode),
            (set(&[Purpose::Search]), UsageMode::Enforce)
        );
        let alice = Requester {
            user: Some("alice"),
            purposes: Some(set(&[Purpose::AiInput])),
            ..anonymous
        };
        let check = r.usage_for(&alice);
        assert_eq!(
            (check.purposes, check.mode),
            (set(&[Purpose::AiInput]), UsageMode::Off)
        );
        assert!(!check.active());
        // Handed over by another member: its word never makes the check laxer than
        // `usage.mode` (enforce), by user or by rule; the purposes still come from it.
        for who in [alice, anonymous] {
            let handed = Requester {
                handed: true,
                ..who
            };
            assert_eq!(r.usage_for(&handed).mode, UsageMode::Enforce);
        }
        let lenient = UsageConfig {
            mode: UsageMode::Off,
            ..usage.clone()
        };
        let r = AgentResolver::new(
            &config,
            &EnforceConfig::default(),
            &lenient,
            &BTreeMap::new(),
        );
        let handed = Requester {
            handed: true,
            ..anonymous
        };
        assert_eq!(
            r.usage_for(&handed).mode,
            UsageMode::Report,
            "stricter than off"
        );
    }

    #[test]
    fn a_users_identity_then_its_rules_then_the_default_signs() {
        let config: AgentConfig = serde_yaml::from_str(
            "default_identity: main\nrules:\n  - client: 10.0.0.0/8\n    tokens: [A]\n  - user_agent_contains: research\n    tokens: [R]\n    identity: research\n",
        )
        .expect("agent config");
        let users = BTreeMap::from([("alice".to_string(), "alice-id".to_string())]);
        let r = AgentResolver::new(
            &config,
            &EnforceConfig::default(),
            &UsageConfig::default(),
            &users,
        );
        let sign_as = |identity, rule| Some(SignAs { identity, rule });
        let net = Requester::new(Some("10.1.2.3".parse().expect("ip")), None);
        assert_eq!(r.signing_for(&net), sign_as("main", Some(0)));
        let research = Requester::new(None, Some("research/1"));
        assert_eq!(r.signing_for(&research), sign_as("research", Some(1)));
        assert_eq!(
            r.signing_for(&Requester::new(None, None)),
            sign_as("main", None)
        );
        // A user's own identity first; another user's text chooses no rule.
        let alice = Requester {
            user: Some("alice"),
            ..research
        };
        assert_eq!(r.signing_for(&alice), sign_as("alice-id", None));
        let bob = Requester {
            user: Some("bob"),
            ..research
        };
        assert_eq!(r.signing_for(&bob), sign_as("main", None));
    }
}
