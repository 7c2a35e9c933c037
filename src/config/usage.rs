//! `usage` and the purposes crawlers declare: how a site's AI-use preferences
//! (robots.txt `Content-Usage` and `Content-Signal`, see `robots::usage`) are enforced.
//!
//! A crawler's purposes are the operator's word, never the client's:
//! `agent.rules[].purposes`, a proxy user's purposes (`access.credentials_file`) and
//! `agent.default_purposes`. A crawler with no purpose gets no usage check.

use std::collections::BTreeMap;

use serde::Deserialize;

pub use crate::robots::Purpose;

/// `usage`: what is done with a request whose declared purposes the site refuses.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UsageConfig {
    /// For every request not given another mode below or by its agent rule.
    pub mode: UsageMode,
    /// A purpose the site states nothing about (or nothing readable).
    pub unknown: UnknownUsage,
    /// Refuse when every declared purpose is refused (`all`) or when one is (`any`).
    pub refuse_when: RefuseWhen,
    /// Proxy users (`access.credentials_file`) with their own mode.
    pub users: BTreeMap<String, UsageMode>,
    /// The purposes that are text and data mining: a TDMRep reservation binds them
    /// (combined as `refuse_when` says), and passes the others. Default: `[train-ai,
    /// ai-input]`.
    pub tdm_purposes: Vec<Purpose>,
}

impl Default for UsageConfig {
    fn default() -> UsageConfig {
        UsageConfig {
            mode: UsageMode::default(),
            unknown: UnknownUsage::default(),
            refuse_when: RefuseWhen::default(),
            users: BTreeMap::new(),
            tdm_purposes: vec![Purpose::TrainAi, Purpose::AiInput],
        }
    }
}

/// `usage.mode` (and `agent.rules[].usage_mode`, `usage.users`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UsageMode {
    /// A refused request gets a 403 (`usage-refused`); the origin sees nothing.
    #[default]
    Enforce,
    /// Forwarded, marked `would-usage-refuse`, counted and logged.
    Report,
    /// No usage check.
    Off,
}

/// `usage.unknown`: a purpose with no stated preference.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UnknownUsage {
    /// Counts as allowed (aipref: an unknown preference neither grants nor restricts).
    #[default]
    Allow,
    /// Counts as refused (a fleet that only uses what it was granted).
    Refuse,
}

/// `usage.refuse_when`: how the declared purposes' verdicts combine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RefuseWhen {
    /// Refused only when every declared purpose is refused: the content is still
    /// usable for the others, and `X-Robots-Usage` tells the pipeline which.
    #[default]
    All,
    /// Refused when any declared purpose is.
    Any,
}
