//! Where an owned key's requests come from, so that ownership follows traffic.
//!
//! **Algorithm.** Per key this instance owns, counts since the last look: requests from
//! its own clients, and requests handed over by other members, with the one member they
//! came from (a second one marks the key as mixed). Every `fleet.follow_traffic_seconds`
//! the owner takes the counts ([`Traffic::take`]) and, for each key whose requests all
//! came from one other member ([`Sources::follower`]), hands the key to that member
//! (`Ownership::hand_to`). Counts start again from zero at every look, so a key follows
//! only traffic that lasted a whole window, and at most once per window.
//!
//! Costs: one uncontended lock and a hash-map update per request routed to an owned key
//! (an allocation only for a key's first request in a window); memory: one entry per
//! owned key asked for within the window.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::fleet::backend::lock;

/// The fewest requests handed over by one member, within a window, for a key to follow
/// them: a single request is not a pattern.
pub const FOLLOW_AFTER: u32 = 2;

/// Per owned key, where its requests came from since the last look.
#[derive(Default)]
pub struct Traffic {
    /// The counts, by key.
    keys: Mutex<HashMap<String, Sources>>,
}

/// Where one key's requests came from within a window.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sources {
    /// From this instance's own clients.
    local: u32,
    /// Handed over by other members.
    handed: u32,
    /// The member the first of them came from.
    via: Option<String>,
    /// Some came from another member than `via`, or from one that did not say.
    mixed: bool,
}

impl Sources {
    /// The member every request came from, when there were enough of them
    /// ([`FOLLOW_AFTER`]) and none from this instance's own clients or another member.
    pub fn follower(&self) -> Option<&str> {
        match (&self.via, self.local, self.mixed) {
            (Some(via), 0, false) if self.handed >= FOLLOW_AFTER => Some(via),
            _ => None,
        }
    }

    /// Counts one request, `from` a member (its id) or this instance's own client.
    fn count(&mut self, from: Option<&str>) {
        let Some(member) = from else {
            self.local = self.local.saturating_add(1);
            return;
        };
        self.handed = self.handed.saturating_add(1);
        match &self.via {
            _ if member.is_empty() => self.mixed = true,
            None => self.via = Some(member.to_string()),
            Some(via) if via != member => self.mixed = true,
            Some(_) => {}
        }
    }
}

impl Traffic {
    /// Counts a request for owned `key`, `from` a member (its id) or a client here.
    pub fn note(&self, key: &str, from: Option<&str>) {
        let mut keys = lock(&self.keys);
        match keys.get_mut(key) {
            Some(sources) => sources.count(from),
            None => {
                let mut sources = Sources::default();
                sources.count(from);
                keys.insert(key.to_string(), sources);
            }
        }
    }

    /// The window's counts, by key; the next window starts empty.
    pub fn take(&self) -> HashMap<String, Sources> {
        std::mem::take(&mut *lock(&self.keys))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The counts of one key after `requests` (a member id, or `None` for a local one).
    fn after(requests: &[Option<&str>]) -> Sources {
        let traffic = Traffic::default();
        for from in requests {
            traffic.note("k", *from);
        }
        traffic.take().remove("k").unwrap_or_default()
    }

    #[test]
    fn a_key_follows_only_one_members_lasting_traffic() {
        assert_eq!(after(&[Some("b"), Some("b")]).follower(), Some("b"));
        assert_eq!(after(&[Some("b")]).follower(), None, "one request");
        assert_eq!(
            after(&[Some("b"), None, Some("b")]).follower(),
            None,
            "a local one"
        );
        assert_eq!(after(&[Some("b"), Some("c"), Some("b")]).follower(), None);
        assert_eq!(after(&[Some(""), Some("")]).follower(), None, "unnamed");
        assert_eq!(after(&[]).follower(), None);
    }

    #[test]
    fn a_look_starts_the_next_window_empty() {
        let traffic = Traffic::default();
        traffic.note("k", Some("b"));
        traffic.note("k", Some("b"));
        assert_eq!(traffic.take().len(), 1);
        traffic.note("k", Some("b"));
        let window = traffic.take();
        assert_eq!(window.get("k").and_then(Sources::follower), None);
    }
}
