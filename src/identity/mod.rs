//! Who robotsgate's requests say they are: Web Bot Auth signing identities
//! (draft-ietf-webbotauth-httpsig-protocol). The fleet's private keys live here, in one
//! process the crawlers reach through, instead of in every crawler: an identity's key
//! ([`key`]) signs each request it is chosen for ([`signer`]), and its key directory is
//! what the operator publishes at the identity's `signature_agent` URL.
//!
//! Uses [`crate::config`] only.
//!
//! **Its other files:** `payment.rs` (pay-per-crawl budgets).

pub mod key;
pub mod payment;
pub mod signer;

use std::collections::HashMap;
use std::sync::Arc;

use crate::config::{AgentConfig, SigningConfig};
pub use key::{KeyError, KeyErrorKind};
use payment::Budget;
pub use signer::{Identity, Signed};

/// What one request is signed as, and the budget that pays when it offers to.
#[derive(Clone)]
pub struct Signer {
    /// The identity whose key signs.
    pub identity: Arc<Identity>,
    /// Its agent rule's budget, else the identity's own; `None`: it never offers to pay.
    pub budget: Option<Arc<Budget>>,
}

/// The signing identities, by name, and the pay-per-crawl budgets: read once at start,
/// the keys loaded.
#[derive(Default)]
pub struct Identities {
    /// Every configured identity, by name.
    by_name: HashMap<String, Arc<Identity>>,
    /// Each identity's own budget, by identity name.
    own_budgets: HashMap<String, Arc<Budget>>,
    /// `agent.rules[N].payment`, by `N`.
    rule_budgets: HashMap<usize, Arc<Budget>>,
}

impl Identities {
    /// Loads every identity's keys, and the budgets of identities and agent rules: an
    /// unreadable or malformed key file is an error naming the identity and the file
    /// (never the key).
    pub fn load(config: &SigningConfig, agent: &AgentConfig) -> Result<Identities, KeyError> {
        let mut loaded = Identities::default();
        for identity in &config.identities {
            let key = key::SigningKey::load(&identity.key_file, &identity.name)?;
            let next = identity
                .next_key_file
                .as_deref()
                .map(|path| key::SigningKey::load(path, &identity.name))
                .transpose()?;
            let signer = Identity::new(
                identity.name.clone(),
                key,
                next,
                &identity.signature_agent,
                config.signature_agent_form,
                identity.expires_seconds.duration(),
            );
            loaded
                .by_name
                .insert(identity.name.clone(), Arc::new(signer));
            if let Some(p) = &identity.payment {
                let budget = Budget::new(
                    identity.name.clone(),
                    p.max_price.clone(),
                    p.daily_budget.clone(),
                );
                loaded
                    .own_budgets
                    .insert(identity.name.clone(), Arc::new(budget));
            }
        }
        for (i, rule) in agent.rules.iter().enumerate() {
            if let Some(p) = &rule.payment {
                let name = format!("agent.rules[{i}]");
                let budget = Budget::new(name, p.max_price.clone(), p.daily_budget.clone());
                loaded.rule_budgets.insert(i, Arc::new(budget));
            }
        }
        Ok(loaded)
    }

    /// Every identity, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Identity>> {
        self.by_name.values()
    }

    /// The identity called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<Identity>> {
        self.by_name.get(name)
    }

    /// The identity, when there is exactly one (what a directory request or
    /// `keys directory` without a name means).
    pub fn only(&self) -> Option<&Arc<Identity>> {
        let mut all = self.by_name.values();
        match (all.next(), all.next()) {
            (Some(only), None) => Some(only),
            _ => None,
        }
    }

    /// The identity called `name`, with the budget that pays for a request matched by
    /// agent rule `rule`: the rule's own when it has one, else the identity's.
    pub fn signer(&self, name: &str, rule: Option<usize>) -> Option<Signer> {
        let identity = self.by_name.get(name)?.clone();
        let budget = rule
            .and_then(|i| self.rule_budgets.get(&i))
            .or_else(|| self.own_budgets.get(name))
            .cloned();
        Some(Signer { identity, budget })
    }

    /// Every budget, sorted by name.
    pub fn budgets(&self) -> Vec<&Arc<Budget>> {
        let mut all: Vec<_> = self
            .own_budgets
            .values()
            .chain(self.rule_budgets.values())
            .collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }
}
