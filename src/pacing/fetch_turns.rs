//! The pacing turns of a robots.txt fetch: a request to its origin like any other,
//! which takes a turn on every schedule of the origin (in the requests' order: group
//! turns first, then the in-flight one) and whose end starts each one's next delay.

use std::sync::Arc;

use tokio::time::Instant;

use crate::pacing::local::{lock, Schedule, IN_FLIGHT};
use crate::pacing::{HeldTurn, Pacer, Place};

/// The turns a robots.txt fetch holds: one on every schedule of its origin, taken in
/// arrival order like a page's and released when the fetch ends (which starts each
/// schedule's next delay).
pub struct FetchTurns {
    /// The turns, released when the fetch ends.
    _held: Vec<HeldTurn>,
}

impl Pacer {
    /// When a robots.txt fetch at `place` may go for an owner that does not know the
    /// origin's Crawl-delay (no robots.txt in hand, none in the fleet's copy): the bound
    /// of its takeover from a vanished owner ([`Pacer::vanished`]: an exchange of that
    /// owner's may run until then) plus the largest delay obeyed,
    /// `pacing.ceiling_seconds`, which no delay in force there can exceed. `None` when
    /// the key was not taken over from a vanished owner.
    pub fn unknown_delay_bound(&self, place: Place<'_>) -> Option<Instant> {
        let at = lock(&place.schedules.list).vanished_until?;
        Some(at + self.config.ceiling_seconds.duration())
    }

    /// Waits for the turn of every one of `place`'s schedules, for a robots.txt fetch
    /// (its in-flight schedule made if it has none yet, so that a fetch counts against
    /// the in-flight limit from the first, and waits out a pause a new owner inherited).
    /// `None` when they are not all free within `max_wait_seconds` (a long pause, a long
    /// queue): the store fetches without turns then.
    pub async fn turns_for_fetch(&self, place: Place<'_>) -> Option<FetchTurns> {
        if self.config.max_in_flight > 0 {
            self.schedule(place, IN_FLIGHT, self.config.max_in_flight);
        }
        let mut list: Vec<Arc<Schedule>> = place.schedules.list();
        // One order for every fetch of the origin (only one runs at a time anyway), and
        // the requests' order: group turns before the in-flight one, so the fetch never
        // holds an in-flight turn while queued for a group turn.
        list.sort_by(|a, b| {
            (a.group == IN_FLIGHT, &a.group).cmp(&(b.group == IN_FLIGHT, &b.group))
        });
        let deadline = Instant::now() + self.config.max_wait_seconds.duration();
        let mut held = Vec::new();
        for schedule in list {
            let turn = self.local_turn(&schedule, 1, deadline).await.ok()?;
            held.push(self.held(schedule, turn));
        }
        Some(FetchTurns { _held: held })
    }
}
