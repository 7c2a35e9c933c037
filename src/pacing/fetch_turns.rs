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
    /// When a robots.txt fetch at `place` may go, for an owner that took the key over
    /// from a vanished owner ([`Pacer::vanished`]): a request to the origin like its
    /// pages, it keeps the Crawl-delay from that owner's last exchange, which may have
    /// ended as late as the takeover's bound. The delay is the longest that owner could
    /// have paced the origin at: with a copy of robots.txt in hand, its largest
    /// Crawl-delay (`copy`: `Some`, its value), or the operator's delay when longer, as
    /// [`Pacer::delay_for`] sets them; with none, `pacing.ceiling_seconds`, which no
    /// delay in force there can exceed. `None` when the key was not taken over from a
    /// vanished owner: the schedules' turns pace the fetch.
    pub fn fetch_not_before(&self, place: Place<'_>, copy: Option<Option<f64>>) -> Option<Instant> {
        let vanished = lock(&place.schedules.list).vanished?;
        let delay = match copy {
            Some(asked) => self.wanted(asked, vanished.override_seconds).0,
            None => self.config.ceiling_seconds.duration(),
        };
        Some(vanished.until + delay)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PacingConfig;
    use crate::pacing::Schedules;
    use std::time::Duration;

    /// A robots.txt fetch after a takeover from a vanished owner keeps the longest
    /// delay that owner could have paced the origin at: the copy's largest Crawl-delay,
    /// the operator's when longer, the ceiling without a copy, never more than it.
    #[tokio::test(start_paused = true)]
    async fn a_fetch_after_a_vanished_owner_waits_the_longest_delay_it_could_have_kept() {
        let pacer = Pacer::new(PacingConfig::default());
        let margin = pacer.config().margin_seconds.duration();
        let ceiling = pacer.config().ceiling_seconds.duration();
        let schedules = Schedules::default();
        let place = Place {
            schedules: &schedules,
        };
        assert_eq!(pacer.fetch_not_before(place, Some(Some(5.0))), None);
        let until = Instant::now() + Duration::from_secs(3);
        pacer.vanished(place, until, None);
        let secs = Duration::from_secs;
        let cases = [
            (Some(Some(5.0)), until + secs(5) + margin),
            (Some(None), until),
            (Some(Some(1e20)), until + ceiling + margin),
            (None, until + ceiling),
        ];
        for (copy, want) in cases {
            assert_eq!(pacer.fetch_not_before(place, copy), Some(want), "{copy:?}");
        }
        // The operator's delay, when longer; a later bound wins, an earlier one not.
        pacer.vanished(place, until - secs(1), Some(12.0));
        let want = until + secs(12) + margin;
        assert_eq!(pacer.fetch_not_before(place, Some(Some(5.0))), Some(want));
        assert_eq!(
            pacer.fetch_not_before(place, Some(Some(20.0))),
            Some(want + secs(8))
        );
    }
}
