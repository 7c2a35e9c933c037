//! Each origin's robots.txt versions as this process decided on them, for the admin API
//! and the status page: the interval each was in force (its first and last decision)
//! and the decisions per verdict under it. In memory, for the process's life (an export
//! of the chains answers for any time), at most [`ORIGINS`] origins (the least recently
//! decided on forgotten first) and [`VERSIONS`] versions each.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::SystemTime;

use serde::Serialize;

use super::record::stamp;

/// Origins kept, at most.
const ORIGINS: usize = 4096;

/// Versions kept per origin, at most (the oldest dropped first).
const VERSIONS: usize = 32;

/// One version of an origin's robots.txt, as decided on.
#[derive(Clone, Debug, Serialize)]
pub struct Version {
    /// Its SHA-256, or its case when there was no file (`unavailable`, `unreachable`).
    pub policy: String,
    /// The first decision made under it.
    #[serde(serialize_with = "as_stamp")]
    pub from: SystemTime,
    /// The last.
    #[serde(serialize_with = "as_stamp")]
    pub to: SystemTime,
    /// Decisions under it, by verdict.
    pub decisions: BTreeMap<String, u64>,
}

/// An origin's versions, oldest first.
#[derive(Clone, Debug, Default, Serialize)]
pub struct OriginHistory {
    /// The versions.
    pub versions: Vec<Version>,
}

/// A time as the records write it.
fn as_stamp<S: serde::Serializer>(at: &SystemTime, out: S) -> Result<S::Ok, S::Error> {
    out.serialize_str(&stamp(*at))
}

/// Every origin's history.
pub struct Histories {
    /// By origin, least recently decided on first out.
    origins: Mutex<lru::LruCache<String, OriginHistory>>,
}

impl Default for Histories {
    fn default() -> Self {
        let bound = std::num::NonZeroUsize::new(ORIGINS).unwrap_or(std::num::NonZeroUsize::MIN);
        Histories {
            origins: Mutex::new(lru::LruCache::new(bound)),
        }
    }
}

impl Histories {
    /// A decision on `origin` under `policy`, `verdict`.
    pub fn count(&self, origin: &str, policy: &str, verdict: &str) {
        let now = SystemTime::now();
        let mut origins = self.origins.lock().unwrap_or_else(|e| e.into_inner());
        let history = match origins.get_mut(origin) {
            Some(history) => history,
            None => {
                origins.put(origin.to_string(), OriginHistory::default());
                match origins.get_mut(origin) {
                    Some(history) => history,
                    None => return,
                }
            }
        };
        let same = history.versions.last().is_some_and(|v| v.policy == policy);
        if !same {
            if history.versions.len() == VERSIONS {
                history.versions.remove(0);
            }
            history.versions.push(Version {
                policy: policy.to_string(),
                from: now,
                to: now,
                decisions: BTreeMap::new(),
            });
        }
        if let Some(version) = history.versions.last_mut() {
            version.to = now;
            *version.decisions.entry(verdict.to_string()).or_insert(0) += 1;
        }
    }

    /// `origin`'s history, if it was decided on.
    pub fn of(&self, origin: &str) -> Option<OriginHistory> {
        let mut origins = self.origins.lock().unwrap_or_else(|e| e.into_inner());
        origins.get(origin).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_version_starts_when_the_policy_changes_and_counts_go_to_the_current_one() {
        let history = Histories::default();
        for verdict in ["allowed", "allowed", "disallowed"] {
            history.count("http://a", "aa", verdict);
        }
        history.count("http://a", "bb", "disallowed");
        let versions = history.of("http://a").expect("history").versions;
        assert_eq!(versions.len(), 2);
        assert_eq!(versions[0].decisions.get("allowed"), Some(&2));
        assert_eq!(versions[0].decisions.get("disallowed"), Some(&1));
        assert_eq!(versions[1].policy, "bb");
        assert!(history.of("http://b").is_none());
    }
}
