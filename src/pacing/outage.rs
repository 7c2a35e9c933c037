//! Pacing through an outage of the shared backend, with `fleet.on_unavailable: local`:
//! each origin is paced by one instance alone, its *owner*, so that its end-to-start gap
//! and in-flight limit hold with no Redis to share them.
//!
//! **Membership.** Every health check writes this instance's name into a sorted set
//! (`robotsgate:members`, scored by Redis time) and reads back the names seen in the last
//! [`MEMBER_FOR`]: the membership. While Redis answers, it only serves this.
//!
//! **Ownership.** During an outage the owner of a place (an origin, or an address with
//! `pacing.key: address`) is the member of the last membership seen with the highest
//! weight for it (rendezvous hashing: FNV-1a of the member and the place, through the
//! SplitMix64 finaliser). Every instance computes the same owner from the same
//! membership, with no message; when a member is missing, only its places move. The
//! owner paces the place with its local schedules (the full delay and in-flight limit);
//! every other instance refuses its requests that need a turn (503 + `Retry-After`), and
//! an instance that never saw a membership owns nothing.
//!
//! **Entering.** Turns granted through Redis before the outage are unknown to the owner
//! and may still run: a turn lasts at most the fleet lease. So the owner's first turn on
//! a place comes no earlier than the outage's start (as this instance saw it: never
//! earlier than Redis' last grant), plus the lease, plus the delay in force. With the
//! default lease (the longest a turn can be held: minutes) a short outage is therefore
//! refused like `refuse` does; a shorter `pacing.max_exchange_seconds` and upstream
//! timeouts shorten it.
//!
//! **Leaving.** The owner's local turns are recorded in the ledger of the shared backend
//! like granted ones (`shared::SharedTurn::recorded`): on the backend's return it writes
//! back the turns it still holds and the ends of those it gave back. Every instance
//! waits [`handover`] after it saw the backend return before asking Redis for a turn, so
//! the owner (which may see the return up to one health check and a command timeout
//! later) has written them first.
//!
//! **Costs.** Outside outages: three commands in one pipeline per health check (every
//! 0.5 s per instance). During an outage: one hash per member per request that needs a
//! turn. **Limits.** An instance that joined or left within [`MEMBER_FOR`] of an outage
//! can be seen differently by two instances, and a network partition that cuts one
//! instance from Redis while the others reach it gives that instance's places two
//! schedules: the README says so.

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::time::Instant;

/// The sorted set of members (name → Redis time last seen).
pub(crate) const MEMBER_KEY: &str = "robotsgate:members";
/// A member not seen for this long has left.
pub(crate) const MEMBER_FOR: Duration = Duration::from_secs(3);

/// Where this instance stands on a place during an outage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Standing {
    /// It owns the place: it paces it alone, from `not_before` on.
    Owner {
        /// Every turn granted before the outage has ended, and one delay more.
        not_before: Instant,
    },
    /// Another instance owns it (or no membership was ever seen).
    Other,
}

/// What this instance knows of outages: the membership seen last, when the backend
/// went down, and until when it holds back after the last return.
#[derive(Default)]
pub struct Outages {
    members: ArcSwap<Vec<String>>,
    went_down: Mutex<Option<Instant>>,
    handover_until: Mutex<Option<Instant>>,
}

impl Outages {
    /// The membership Redis has just answered.
    pub(crate) fn saw_members(&self, mut members: Vec<String>) {
        members.sort();
        if **self.members.load() != members {
            self.members.store(members.into());
        }
    }

    /// The backend is down from `at` (it was up).
    pub(crate) fn down(&self, at: Instant) {
        *lock(&self.went_down) = Some(at);
    }

    /// The backend is back at `at`; `settle`: how late another instance may see the
    /// same return.
    pub(crate) fn up(&self, at: Instant, settle: Duration) {
        if lock(&self.went_down).is_some() {
            *lock(&self.handover_until) = Some(at + settle);
        }
    }

    /// Where `me` stands on `place` during the outage: with `lease` (the longest a turn
    /// granted before it can run) and `delay` (in force there).
    pub fn standing(&self, me: &str, place: &str, lease: Duration, delay: Duration) -> Standing {
        let members = self.members.load();
        let went_down = *lock(&self.went_down);
        match (owner(&members, place), went_down) {
            (Some(owner), Some(down)) if owner == me => Standing::Owner {
                not_before: down + lease + delay,
            },
            _ => Standing::Other,
        }
    }

    /// Until when this instance holds back from Redis after the backend's last return,
    /// if that is still to come.
    pub fn handover_until(&self) -> Option<Instant> {
        lock(&self.handover_until).filter(|until| *until > Instant::now())
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The owner of `place` among `members`: the one with the highest weight for it.
pub fn owner<'a>(members: &'a [String], place: &str) -> Option<&'a str> {
    members
        .iter()
        .max_by_key(|m| (weight(m, place), m.as_str()))
        .map(String::as_str)
}

/// The rendezvous weight of `member` for `place`: FNV-1a over both (a zero byte
/// between), mixed by the SplitMix64 finaliser so that similar names spread. Stable
/// across builds and platforms, unlike the standard library's hasher.
fn weight(member: &str, place: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in member.bytes().chain([0]).chain(place.bytes()) {
        h ^= u64::from(byte);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("{i:x}.{}", 1000 + i)).collect()
    }

    #[test]
    fn every_place_has_one_owner_and_places_spread() {
        let m = members(4);
        let mut counts = [0usize; 4];
        for i in 0..4000 {
            let place = format!("https://site{i}.example:443");
            let o = owner(&m, &place).expect("an owner");
            counts[m.iter().position(|x| x == o).expect("a member")] += 1;
        }
        // Each of 4 members owns about a quarter (binomial: ±10% is > 6 sigma).
        for c in counts {
            assert!((800..1200).contains(&c), "{counts:?}");
        }
    }

    #[test]
    fn a_member_leaving_moves_only_its_places() {
        let all = members(5);
        let fewer: Vec<String> = all[..4].to_vec();
        for i in 0..2000 {
            let place = format!("http://h{i}.example:80");
            let before = owner(&all, &place).expect("owner");
            let after = owner(&fewer, &place).expect("owner");
            if before != all[4] {
                assert_eq!(before, after, "{place}");
            }
        }
    }

    #[test]
    fn the_owner_waits_out_the_lease_and_the_delay_and_others_refuse() {
        let outages = Outages::default();
        let m = members(3);
        outages.saw_members(m.clone());
        let place = "https://a.example:443";
        let me = owner(&m, place).expect("owner").to_string();
        let other = m.iter().find(|x| **x != me).expect("another");
        // Up all along: no outage start known, nobody owns anything.
        let lease = Duration::from_secs(4);
        let delay = Duration::from_millis(500);
        assert_eq!(outages.standing(&me, place, lease, delay), Standing::Other);
        let down = Instant::now();
        outages.down(down);
        assert_eq!(
            outages.standing(&me, place, lease, delay),
            Standing::Owner {
                not_before: down + lease + delay
            }
        );
        assert_eq!(
            outages.standing(other, place, lease, delay),
            Standing::Other
        );
        assert_eq!(outages.handover_until(), None);
        outages.up(Instant::now(), Duration::from_secs(2));
        assert!(outages.handover_until().is_some());
    }

    #[test]
    fn no_membership_owns_nothing() {
        let outages = Outages::default();
        outages.down(Instant::now());
        assert_eq!(
            outages.standing("me", "http://x:80", Duration::ZERO, Duration::ZERO),
            Standing::Other
        );
    }
}
