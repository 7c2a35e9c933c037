//! Where and when an owned key's requests come from: what ownership follows, and what
//! tells an idle key.
//!
//! **Algorithm.** Per key this instance owns, when it was last asked for and the current
//! streak: how many requests in a row were handed over by one other member. A request
//! from this instance's own client, or from another member, ends the streak (a new one
//! starts with that member). Every `fleet.follow_traffic_seconds` the owner looks
//! ([`Traffic::followers`]): a key whose streak reached [`FOLLOW_AFTER`] is handed to
//! that member (`Ownership::hand_to`). Every sweep of idle keys
//! ([`Traffic::idle`]) names those nobody asked for for `fleet.release_idle_seconds`.
//! Both looks first forget the keys this instance no longer owns.
//!
//! A streak, not a share: with a front that routes by host, every request of a host the
//! front moved comes from its new member, and the streak grows with each; with members
//! picked at random, a streak of [`FOLLOW_AFTER`] from one other member is rare (one in
//! 2¹⁶ with two members), so hosts do not wander between members.
//!
//! Costs: one uncontended lock, a hash-map update and a clock read per request routed
//! to an owned key (an allocation only for a key's first request, and when its streak
//! changes member); memory: one entry per owned key.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::fleet::backend::lock;

/// How many requests in a row handed over by one member make a key follow them there.
pub const FOLLOW_AFTER: u32 = 16;

/// Per owned key, when it was last asked for and the streak of its requests.
#[derive(Default)]
pub struct Traffic {
    /// By key.
    keys: Mutex<HashMap<String, KeyTraffic>>,
}

/// When one key was last asked for, and its current streak.
#[derive(Clone, Debug, PartialEq, Eq)]
struct KeyTraffic {
    /// Its last request.
    at: Instant,
    /// The member the streak's requests came from; `None`: the last request came from a
    /// client here (or from a member that did not say).
    via: Option<String>,
    /// How many requests in a row came from `via`.
    length: u32,
}

impl KeyTraffic {
    /// Counts one request, `from` a member (its id) or this instance's own client.
    fn count(&mut self, from: Option<&str>) {
        self.at = Instant::now();
        match from.filter(|m| !m.is_empty()) {
            Some(member) if self.via.as_deref() == Some(member) => {
                self.length = self.length.saturating_add(1);
            }
            Some(member) => (self.via, self.length) = (Some(member.to_string()), 1),
            None => (self.via, self.length) = (None, 0),
        }
    }
}

impl Traffic {
    /// Counts a request for owned `key`, `from` a member (its id) or a client here.
    pub fn note(&self, key: &str, from: Option<&str>) {
        let mut keys = lock(&self.keys);
        match keys.get_mut(key) {
            Some(asked) => asked.count(from),
            None => {
                let mut asked = KeyTraffic {
                    at: Instant::now(),
                    via: None,
                    length: 0,
                };
                asked.count(from);
                keys.insert(key.to_string(), asked);
            }
        }
    }

    /// The keys of `owned` whose streak reached [`FOLLOW_AFTER`], each with its member
    /// (the streak starts again: the key is being handed over).
    pub fn followers(&self, owned: &HashSet<String>) -> Vec<(String, String)> {
        let mut keys = lock(&self.keys);
        keys.retain(|key, _| owned.contains(key));
        let mut followers = Vec::new();
        for (key, asked) in keys.iter_mut() {
            if asked.length >= FOLLOW_AFTER {
                if let Some(via) = asked.via.take() {
                    followers.push((key.clone(), via));
                }
                asked.length = 0;
            }
        }
        followers
    }

    /// The keys of `owned` nobody asked for for `after`.
    pub fn idle(&self, owned: &HashSet<String>, after: Duration) -> Vec<String> {
        let mut keys = lock(&self.keys);
        keys.retain(|key, _| owned.contains(key));
        let now = Instant::now();
        keys.iter()
            .filter(|(_, asked)| now.duration_since(asked.at) >= after)
            .map(|(key, _)| key.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The set of one key, `k`.
    fn only_k() -> HashSet<String> {
        HashSet::from(["k".to_string()])
    }

    /// The followers after `requests` for key `k` (a member id, or `None` for a local
    /// one), `n` times each.
    fn after(requests: &[(Option<&str>, u32)]) -> Vec<(String, String)> {
        let traffic = Traffic::default();
        for (from, n) in requests {
            for _ in 0..*n {
                traffic.note("k", *from);
            }
        }
        traffic.followers(&only_k())
    }

    #[test]
    fn a_key_follows_one_members_streak_only() {
        let k = |m: &str| vec![("k".to_string(), m.to_string())];
        assert_eq!(after(&[(Some("b"), FOLLOW_AFTER)]), k("b"));
        assert_eq!(after(&[(None, 5), (Some("b"), FOLLOW_AFTER)]), k("b"));
        assert!(after(&[(Some("b"), FOLLOW_AFTER - 1)]).is_empty());
        let broken = [(Some("b"), FOLLOW_AFTER - 1), (None, 1), (Some("b"), 1)];
        assert!(after(&broken).is_empty(), "a local request ends it");
        let other = [
            (Some("b"), FOLLOW_AFTER - 1),
            (Some("c"), 1),
            (Some("b"), 1),
        ];
        assert!(after(&other).is_empty(), "another member ends it");
        assert!(after(&[(Some(""), FOLLOW_AFTER * 2)]).is_empty(), "unnamed");
    }

    #[test]
    fn a_streak_spans_looks_and_a_key_no_longer_owned_is_forgotten() {
        let traffic = Traffic::default();
        for _ in 0..FOLLOW_AFTER - 1 {
            traffic.note("k", Some("b"));
        }
        traffic.note("gone", None);
        assert!(traffic.followers(&only_k()).is_empty());
        traffic.note("k", Some("b"));
        assert_eq!(traffic.followers(&only_k()), vec![("k".into(), "b".into())]);
        assert!(traffic.followers(&only_k()).is_empty(), "starts again");
        assert_eq!(lock(&traffic.keys).len(), 1, "`gone` forgotten");
    }

    #[test]
    fn a_key_is_idle_once_nobody_asked_for_it_for_the_time_given() {
        let traffic = Traffic::default();
        traffic.note("k", None);
        assert!(traffic.idle(&only_k(), Duration::from_secs(60)).is_empty());
        assert_eq!(
            traffic.idle(&only_k(), Duration::ZERO),
            vec!["k".to_string()]
        );
        assert!(traffic.idle(&HashSet::new(), Duration::ZERO).is_empty());
        assert!(lock(&traffic.keys).is_empty(), "no longer owned: forgotten");
    }
}
