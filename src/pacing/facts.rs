//! What a schedule's state is worth keeping when its origin changes hands in a fleet:
//! when its last exchange ended, the pause the origin asked for, the backoff in force
//! ([`ScheduleFacts`]); read from an owner's schedules ([`Schedules::facts`]) and put
//! back into a new owner's ([`Pacer::inherit`]), so that the next request keeps the gap
//! from the last one, wherever it ran.
//!
//! Costs: one small record per schedule, read or written only when ownership changes
//! or a pause or backoff starts; nothing per request.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::pacing::local::{lock, Schedule, Schedules, IN_FLIGHT};
use crate::pacing::{Pacer, Place};

/// One schedule's durable state: what a new owner starts it from.
#[derive(Clone, Debug, PartialEq)]
pub struct ScheduleFacts {
    /// The robots.txt group (`#in-flight` for the in-flight limit).
    pub group: String,
    /// When its last exchange ended.
    pub last_end: Option<Instant>,
    /// Until when no request may start: the pause the origin asked for, or the next
    /// turn the delay in force allows after the last end, whichever is later (a new
    /// owner that has not read the origin's robots.txt yet does not know its
    /// Crawl-delay: its first request, a robots.txt fetch, waits for this).
    pub paused_until: Option<Instant>,
    /// The backoff in force.
    pub backoff: Duration,
}

impl ScheduleFacts {
    /// `schedule`'s facts now.
    pub(super) fn of(schedule: &Schedule) -> ScheduleFacts {
        let now = Instant::now();
        let t = lock(&schedule.timing);
        let next = crate::pacing::rules::next_start(&t, now).filter(|at| *at > now);
        ScheduleFacts {
            group: schedule.group.clone(),
            last_end: t.last_end,
            paused_until: later(t.paused_until.filter(|p| *p > now), next),
            backoff: t.backoff,
        }
    }
}

impl Schedules {
    /// Every schedule's facts (a graceful hand-over).
    pub fn facts(&self) -> Vec<ScheduleFacts> {
        let list: Vec<Arc<Schedule>> = lock(&self.list).schedules.clone();
        list.iter().map(|s| ScheduleFacts::of(s)).collect()
    }
}

impl Pacer {
    /// A new owner's start at `place`: nothing before `not_before` (the previous owner
    /// vanished without handing over, and an exchange of its may run until then: every
    /// schedule, made now or later, starts paused until then, and its delay counts from
    /// then), and each schedule from the facts handed over (the later end, pause and
    /// the larger backoff win over what this instance knew).
    pub fn inherit(&self, place: Place<'_>, not_before: Option<Instant>, facts: &[ScheduleFacts]) {
        if let Some(at) = not_before {
            let mut list = lock(&place.schedules.list);
            list.not_before = Some(list.not_before.map_or(at, |n| n.max(at)));
            for schedule in &list.schedules {
                let mut t = lock(&schedule.timing);
                t.last_end = Some(t.last_end.map_or(at, |e| e.max(at)));
                t.paused_until = Some(t.paused_until.map_or(at, |p| p.max(at)));
            }
        }
        for fact in facts {
            let capacity = if fact.group == IN_FLIGHT {
                self.config.max_in_flight
            } else {
                1
            };
            let schedule = self.schedule(place, &fact.group, capacity);
            let mut t = lock(&schedule.timing);
            t.last_end = later(t.last_end, fact.last_end);
            t.paused_until = later(t.paused_until, fact.paused_until);
            t.backoff = t
                .backoff
                .max(fact.backoff)
                .min(self.config.ceiling_seconds.duration());
        }
    }

    /// A new owner took `place`'s key over from a member that vanished: that member's
    /// last exchange may have ended as late as `until` (the takeover's bound), under a
    /// Crawl-delay this instance knows only from the fleet's robots.txt copy, or the
    /// operator's delay for the origin, `override_seconds`, when longer.
    pub fn vanished(&self, place: Place<'_>, until: Instant, override_seconds: Option<f64>) {
        let mut list = lock(&place.schedules.list);
        let until = later(list.vanished.map(|v| v.until), Some(until)).unwrap_or(until);
        list.vanished = Some(crate::pacing::local::Vanished {
            until,
            override_seconds,
            held: until + self.config.ceiling_seconds.duration(),
        });
    }
}

/// The later of two optional instants.
fn later(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PacingConfig;

    /// A new owner keeps the gap from the previous owner's last end, and waits out a
    /// vanished owner's longest hold on schedules made afterwards too.
    #[tokio::test(start_paused = true)]
    async fn an_inherited_end_and_a_vanished_owners_hold_are_kept() {
        let pacer = Pacer::new(PacingConfig::default());
        let schedules = Schedules::default();
        let place = Place {
            schedules: &schedules,
        };
        let now = Instant::now();
        let handed = ScheduleFacts {
            group: "bot".into(),
            last_end: Some(now),
            paused_until: None,
            backoff: Duration::from_secs(2),
        };
        pacer.inherit(place, Some(now + Duration::from_secs(5)), &[handed]);
        let facts = schedules.facts();
        assert_eq!(facts.len(), 1);
        assert_eq!(facts[0].last_end, Some(now + Duration::from_secs(5)));
        assert_eq!(facts[0].backoff, Duration::from_secs(2));
        // A schedule made later starts paused too.
        let later = pacer.schedule(place, IN_FLIGHT, 2);
        assert_eq!(
            ScheduleFacts::of(&later).paused_until,
            Some(now + Duration::from_secs(5))
        );
    }

    /// A bound inherited from a vanished owner is in force before any schedule is made
    /// (an origin with no request yet): the store does not evict the entry, nor does an
    /// idle sweep hand the key on without it (#83: it was lost with the entry). It ends
    /// once the bound and the longest delay after it are past.
    #[tokio::test(start_paused = true)]
    async fn an_inherited_bound_is_in_force_before_any_schedule() {
        let pacer = Pacer::new(PacingConfig::default());
        let schedules = Schedules::default();
        let place = Place {
            schedules: &schedules,
        };
        assert!(!schedules.in_force());
        let until = Instant::now() + Duration::from_secs(5);
        pacer.inherit(place, Some(until), &[]);
        pacer.vanished(place, until, None);
        assert!(schedules.facts().is_empty());
        assert!(schedules.in_force());
        tokio::time::advance(Duration::from_secs(6)).await;
        // Past the bound; the delay a robots.txt it has not read may ask is not.
        assert!(schedules.in_force());
        let ceiling = PacingConfig::default().ceiling_seconds.duration();
        tokio::time::advance(ceiling).await;
        assert!(!schedules.in_force());
    }
}
