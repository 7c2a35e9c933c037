//! The local backend: an origin's schedules in this process's memory (a fair semaphore
//! per schedule, its [`Timing`] under a mutex), how they are made, forgotten when idle,
//! and shown.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::pacing::rules::{next_start, DelayRule, Timing};

/// The group name of an origin's in-flight schedule (`#` never appears in a robots.txt
/// group name: it starts a comment there).
pub(super) const IN_FLIGHT: &str = "#in-flight";

/// One schedule: a robots.txt group's turn at an origin (or the origin's in-flight
/// limit), its timing, and who waits for it.
pub(super) struct Schedule {
    /// The robots.txt group (or [`IN_FLIGHT`]).
    pub(super) group: String,
    /// Turns given out at once: 1 for a group, `max_in_flight` for the in-flight one.
    pub(super) capacity: usize,
    /// The turns: `capacity` permits.
    pub(super) turn: Arc<tokio::sync::Semaphore>,
    /// When the next start may come: last end, delay, pause, backoff.
    pub(super) timing: Mutex<Timing>,
    /// Requests waiting for or holding the turn.
    pub(super) pending: AtomicUsize,
    /// The same, over every schedule of the process (a gauge).
    pub(super) total: Arc<AtomicUsize>,
}

impl Schedule {
    /// Counts one more request waiting for or holding the turn.
    pub(super) fn enqueue(&self) {
        self.pending.fetch_add(1, Ordering::AcqRel);
        self.total.fetch_add(1, Ordering::AcqRel);
    }

    /// Counts one request fewer.
    pub(super) fn dequeue(&self) {
        self.pending.fetch_sub(1, Ordering::AcqRel);
        self.total.fetch_sub(1, Ordering::AcqRel);
    }

    /// Holding the turn: sleeps until the next start is due (the previous end plus the
    /// delay, past any pause; re-read on waking, as backoff may grow meanwhile). `Err`
    /// carries the start when it would come after `deadline`.
    pub(super) async fn sleep_until_due(&self, deadline: Instant) -> Result<(), Instant> {
        loop {
            let wake = next_start(&lock(&self.timing), Instant::now());
            match wake {
                Some(at) if at > deadline => return Err(at),
                Some(at) if at > Instant::now() => tokio::time::sleep_until(at).await,
                _ => return Ok(()),
            }
        }
    }
}

/// The pacing schedules of one origin (or, with `pacing.key: address`, of one address):
/// one per robots.txt group seen (usually one), and the in-flight one.
#[derive(Default)]
pub struct Schedules {
    /// The schedules and what outlives them.
    pub(super) list: Mutex<ScheduleList>,
}

/// What [`Schedules`] guards: the schedules, and what an origin has learned that must
/// outlive them.
#[derive(Default)]
pub(super) struct ScheduleList {
    /// One per robots.txt group seen, and the in-flight one.
    pub(super) schedules: Vec<Arc<Schedule>>,
    /// The origin's response-time baseline from its last forgotten schedule, in
    /// microseconds (0: none yet). A schedule made afresh starts from it, so forgetting
    /// an idle schedule (about 300 bytes) does not forget what is normal for the origin:
    /// 4 bytes kept instead.
    pub(super) baseline: u32,
    /// Nothing starts here before then (a fleet's new owner of a key whose previous
    /// owner vanished: an exchange of its may still run until then). Every schedule made
    /// here starts paused until then.
    pub(super) not_before: Option<Instant>,
    /// A fleet's new owner that took the key over from a vanished owner: when that
    /// owner's last exchange may have ended, under a delay this instance may not know
    /// (see `Pacer::fetch_not_before`).
    pub(super) vanished: Option<Vanished>,
}

/// A key taken over from a member that vanished without handing it over.
#[derive(Clone, Copy, Debug)]
pub(super) struct Vanished {
    /// Its last exchange may have ended as late as this (the takeover's bound).
    pub(super) until: Instant,
    /// The operator's delay for the origin (`pacing.overrides`), in seconds, when it
    /// sets one: it paced the origin by it too when it was longer than the Crawl-delay.
    pub(super) override_seconds: Option<f64>,
    /// Until when the bound can still space a request: `until` and the longest delay
    /// any rule may set (`pacing.ceiling_seconds`).
    pub(super) held: Instant,
}

impl ScheduleList {
    /// The remembered response-time baseline, if any.
    pub(super) fn baseline(&self) -> Option<Duration> {
        (self.baseline > 0).then(|| Duration::from_micros(u64::from(self.baseline)))
    }

    /// Remembers a forgotten schedule's baseline.
    pub(super) fn remember(&mut self, baseline: Option<Duration>) {
        if let Some(baseline) = baseline {
            let micros = u32::try_from(baseline.as_micros()).unwrap_or(u32::MAX);
            self.baseline = micros.max(1);
        }
    }
}

/// Where a schedule is made: an origin's (or an address's) schedules.
#[derive(Clone, Copy)]
pub struct Place<'a> {
    /// The schedules.
    pub schedules: &'a Schedules,
}

impl Schedules {
    /// The schedule of `group` among `place`'s, made on first use with `capacity` turns.
    pub(super) fn get(
        place: Place<'_>,
        group: &str,
        capacity: usize,
        total: &Arc<AtomicUsize>,
    ) -> Arc<Schedule> {
        let mut list = lock(&place.schedules.list);
        if let Some(found) = list.schedules.iter().find(|s| s.group == group) {
            return found.clone();
        }
        let capacity = capacity.clamp(1, tokio::sync::Semaphore::MAX_PERMITS);
        let schedule = Arc::new(Schedule {
            group: group.to_string(),
            capacity,
            turn: Arc::new(tokio::sync::Semaphore::new(capacity)),
            timing: Mutex::new(Timing {
                baseline: list.baseline(),
                paused_until: list.not_before.filter(|at| *at > Instant::now()),
                // Past or not: a previous owner's last exchange ended by then, and the
                // delay counts from it.
                last_end: list.not_before,
                ..Timing::default()
            }),
            pending: AtomicUsize::new(0),
            total: total.clone(),
        });
        list.schedules.push(schedule.clone());
        schedule
    }

    /// Drops the schedules no request holds and nothing is in force on (most origins
    /// publish no Crawl-delay: their schedules are forgotten when each request ends and
    /// made again by the next). An origin held for its robots.txt then keeps no pacing
    /// state at all. Race-free: a schedule is only ever handed out from this list, under
    /// its lock, so one referenced by the list alone is referenced by no request.
    pub fn forget_idle(&self) {
        let now = Instant::now();
        let mut list = lock(&self.list);
        let mut baseline = None;
        list.schedules.retain(|s| {
            let timing = lock(&s.timing);
            let keep = Arc::strong_count(s) > 1 || !timing.forgettable(now);
            if !keep {
                baseline = baseline.or(timing.baseline);
            }
            keep
        });
        list.remember(baseline);
        if list.schedules.is_empty() {
            list.schedules = Vec::new();
        }
    }

    /// The schedules, for a robots.txt fetch to take each one's turn.
    pub(super) fn list(&self) -> Vec<Arc<Schedule>> {
        lock(&self.list).schedules.clone()
    }

    /// Does a request wait for or hold a turn here? (Such an origin is never evicted.)
    pub fn busy(&self) -> bool {
        lock(&self.list)
            .schedules
            .iter()
            .any(|s| s.pending.load(Ordering::Acquire) > 0)
    }

    /// Does a schedule here still hold pacing in force (a delay since the last end not
    /// yet over, a pause, a backoff), or the key a bound it inherited from a vanished
    /// owner (`not_before`, and the delay that may follow it), even before any schedule
    /// was made? Forgetting such an origin, or handing its key on without it, would let
    /// its next request start early.
    pub fn in_force(&self) -> bool {
        let now = Instant::now();
        let list = lock(&self.list);
        list.not_before.is_some_and(|at| at > now)
            || list.vanished.is_some_and(|v| v.held > now)
            || list
                .schedules
                .iter()
                .any(|s| !lock(&s.timing).forgettable(now))
    }

    /// Requests waiting for or holding a turn here, over all groups.
    pub fn queued(&self) -> usize {
        lock(&self.list)
            .schedules
            .iter()
            .map(|s| s.pending.load(Ordering::Acquire))
            .sum()
    }

    /// The pauses and backoffs in force, per group (for the state file).
    pub fn pauses(&self) -> Vec<(String, Option<Instant>, Duration)> {
        let now = Instant::now();
        lock(&self.list)
            .schedules
            .iter()
            .filter_map(|s| {
                let t = lock(&s.timing);
                let paused = t.paused_until.filter(|u| *u > now);
                (paused.is_some() || !t.backoff.is_zero())
                    .then(|| (s.group.clone(), paused, t.backoff))
            })
            .collect()
    }

    /// Each schedule as the admin API shows it.
    pub fn states(&self) -> Vec<ScheduleState> {
        let now = Instant::now();
        lock(&self.list)
            .schedules
            .iter()
            .map(|s| {
                let t = lock(&s.timing);
                let (delay, rule) = t.effective(now);
                ScheduleState {
                    group: s.group.clone(),
                    delay,
                    rule,
                    backoff: t.backoff,
                    capacity: s.capacity,
                    queued: s.pending.load(Ordering::Acquire),
                    next_slot_in: next_start(&t, now).map(|at| at.saturating_duration_since(now)),
                }
            })
            .collect()
    }
}

/// A poisoned lock is still used: the state it guards stays consistent.
pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Decrements `pending` if the waiting future is dropped before it gets its turn.
pub(super) struct Waiting<'a>(pub(super) &'a Schedule, pub(super) bool);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if !self.1 {
            self.0.dequeue();
        }
    }
}

/// One schedule as the admin API shows it.
#[derive(Clone, Debug)]
pub struct ScheduleState {
    /// The robots.txt group (its first agent name; empty: none or `*`), or `#in-flight`.
    pub group: String,
    /// The delay in force, and the rule that set it.
    pub delay: Duration,
    /// The rule that set the delay.
    pub rule: DelayRule,
    /// The backoff in force.
    pub backoff: Duration,
    /// Turns given out at once (1 for a group, `max_in_flight` for the in-flight one).
    pub capacity: usize,
    /// Requests waiting for or holding a turn (on this instance).
    pub queued: usize,
    /// Until the next request may start (zero: now).
    pub next_slot_in: Option<Duration>,
}
