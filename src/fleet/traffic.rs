//! Where an owned key's requests come from, so that ownership follows traffic.
//!
//! **Algorithm.** Per key this instance owns, the current streak: how many requests in a
//! row were handed over by one other member. A request from this instance's own client,
//! or from another member, ends it (a new streak starts with that member). Every
//! `fleet.follow_traffic_seconds` the owner looks ([`Traffic::followers`]): a key whose
//! streak reached [`FOLLOW_AFTER`] is handed to that member (`Ownership::hand_to`), and
//! a key nobody asked for since the last look is forgotten.
//!
//! A streak, not a share: with a front that routes by host, every request of a host the
//! front moved comes from its new member, and the streak grows with each; with members
//! picked at random, a streak of [`FOLLOW_AFTER`] from one other member is rare (one in
//! 2¹⁶ with two members), so hosts do not wander between members.
//!
//! Costs: one uncontended lock and a hash-map update per request routed to an owned key
//! (an allocation only for a key's first request since the last look, and when its
//! streak changes member); memory: one entry per owned key asked for since the last look.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::fleet::backend::lock;

/// How many requests in a row handed over by one member make a key follow them there.
pub const FOLLOW_AFTER: u32 = 16;

/// Per owned key, the streak of its requests.
#[derive(Default)]
pub struct Traffic {
    /// The streaks, by key.
    keys: Mutex<HashMap<String, Streak>>,
}

/// One key's current streak.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Streak {
    /// The member the streak's requests came from; `None`: the last request came from a
    /// client here (or from a member that did not say).
    via: Option<String>,
    /// How many requests in a row came from `via`.
    length: u32,
    /// Asked for since the last look.
    seen: bool,
}

impl Streak {
    /// Counts one request, `from` a member (its id) or this instance's own client.
    fn count(&mut self, from: Option<&str>) {
        self.seen = true;
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
            Some(streak) => streak.count(from),
            None => {
                let mut streak = Streak::default();
                streak.count(from);
                keys.insert(key.to_string(), streak);
            }
        }
    }

    /// The keys whose streak reached [`FOLLOW_AFTER`], each with its member (forgotten
    /// here: it is being handed over); keys nobody asked for since the last look are
    /// forgotten too, and the next look starts.
    pub fn followers(&self) -> Vec<(String, String)> {
        let mut keys = lock(&self.keys);
        let mut followers = Vec::new();
        keys.retain(|key, streak| {
            if let Some(via) = streak
                .via
                .as_ref()
                .filter(|_| streak.length >= FOLLOW_AFTER)
            {
                followers.push((key.clone(), via.clone()));
                return false;
            }
            std::mem::replace(&mut streak.seen, false)
        });
        followers
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The followers after `requests` for key `k` (a member id, or `None` for a local
    /// one), `n` times each.
    fn after(requests: &[(Option<&str>, u32)]) -> Vec<(String, String)> {
        let traffic = Traffic::default();
        for (from, n) in requests {
            for _ in 0..*n {
                traffic.note("k", *from);
            }
        }
        traffic.followers()
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
    fn a_streak_spans_looks_and_an_unasked_key_is_forgotten() {
        let traffic = Traffic::default();
        for _ in 0..FOLLOW_AFTER - 1 {
            traffic.note("k", Some("b"));
        }
        traffic.note("idle", None);
        assert!(traffic.followers().is_empty());
        traffic.note("k", Some("b"));
        assert_eq!(traffic.followers(), vec![("k".into(), "b".into())]);
        assert!(traffic.followers().is_empty());
        assert!(lock(&traffic.keys).is_empty(), "both forgotten");
    }
}
