//! What happened recently, over every origin: the robots.txt fetches and the rule
//! changes the admin API lists. A held origin keeps no history of its own (a million
//! origins would hold a million histories): one bounded ring per kind holds the last
//! records of all of them, and an origin's are picked out when asked for.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::origin::snapshot::{Policy, Snapshot};
use crate::policy::target::Origin;

/// One change of an origin's rules, as the admin API lists it.
#[derive(Clone, Debug)]
pub struct ChangeRecord {
    /// When the changed file was fetched.
    pub at: Instant,
    /// What changed, one line (`groups +0 -0; rules +1 -0 (+ *: Disallow: /new)`).
    pub summary: String,
}

/// Rule changes remembered, over all origins (the admin API lists an origin's).
pub(crate) const CHANGES: usize = 256;

/// The most rule changes the admin API lists for one origin.
pub(crate) const CHANGES_PER_ORIGIN: usize = 4;

/// One robots.txt fetch, as the admin API lists it.
#[derive(Clone, Debug)]
pub struct FetchRecord {
    /// When the fetch started.
    pub at: Instant,
    /// `2xx`, `3xx_exhausted`, `4xx`, `5xx`, `network`, `too_large`.
    pub class: &'static str,
    /// What it came to, one line.
    pub outcome: String,
    /// How long it took.
    pub duration: Duration,
}

/// Fetches remembered, over all origins: a held origin keeps no history of its own
/// (a million origins would hold a million histories), and the admin API lists an
/// origin's fetches from here.
pub(crate) const HISTORY: usize = 4096;

/// The most fetches the admin API lists for one origin.
pub(crate) const HISTORY_PER_ORIGIN: usize = 8;

/// What happened recently, over every origin, oldest first, at most `limit`: the fetch
/// history and the rule changes the admin API shows.
pub(crate) struct Recent<T> {
    /// The records with their origin, oldest first.
    records: Mutex<std::collections::VecDeque<(Origin, T)>>,
    /// The most kept.
    limit: usize,
}

impl<T: Clone> Recent<T> {
    /// An empty record keeping at most `limit`.
    pub(crate) fn new(limit: usize) -> Recent<T> {
        Recent {
            records: Mutex::default(),
            limit,
        }
    }

    /// Records `record` for `origin`, forgetting the oldest beyond the limit.
    pub(crate) fn push(&self, origin: &Origin, record: T) {
        let mut records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        if records.len() >= self.limit {
            records.pop_front();
        }
        records.push_back((origin.clone(), record));
    }

    /// `origin`'s records, oldest first, the last `most` of them.
    pub(crate) fn of(&self, origin: &Origin, most: usize) -> Vec<T> {
        let records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        let mut found: Vec<T> = records
            .iter()
            .rev()
            .filter(|(o, _)| o == origin)
            .take(most)
            .map(|(_, r)| r.clone())
            .collect();
        found.reverse();
        found
    }
}

/// What changed between two snapshots' rules, when both are known and they differ
/// (an unreadable robots.txt, or a copy kept while it is, is no change of rules).
pub(crate) fn rules_change(previous: &Snapshot, next: &Snapshot) -> Option<String> {
    if next.cause().is_some() {
        return None;
    }
    let (before, after) = (previous.known_rules()?, next.known_rules()?);
    if let (Policy::Rules(a), Policy::Rules(b)) = (&previous.policy, &next.policy) {
        if a.body == b.body {
            return None;
        }
    }
    crate::robots::RulesChange::between(before, after).map(|c| c.to_string())
}
