//! Pacing: every origin is visited no faster than its robots.txt allows (SPEC §6), and
//! no harder than the operator allows when it says nothing.
//!
//! A *schedule* exists per origin and robots.txt group: crawlers that fall into the same
//! group share it, crawlers in different groups have their own. Crawl-delay is the
//! minimum time from the **end** of one download to the **start** of the next, so a
//! schedule with a delay in force lets one request through at a time:
//!
//! 1. An arriving request estimates its wait (time until the next slot, plus one delay
//!    per request ahead of it). Past `max_wait`, or with `max_queue` requests already
//!    waiting, it is refused at once (503 + `Retry-After`): memory never grows unbounded.
//! 2. Otherwise it queues for the schedule's turn. A fair `tokio::sync::Semaphore` hands
//!    turns out in arrival order (FIFO) and a waiter that is dropped — its client went
//!    away — leaves the queue without a trace.
//! 3. Holding the turn, it sleeps until `previous end + delay` (and past any pause the
//!    origin asked for), then goes upstream. The turn is held in a [`Permit`] until the
//!    exchange with the origin has ended; dropping the permit records the end time.
//!
//! **In flight.** Every origin also has an *in-flight* schedule: `max_in_flight` turns
//! (default 2) and no delay, so at most that many requests reach one origin at once,
//! whatever its robots.txt says; it is taken after the group's turn, so a request
//! waiting for a delay holds no in-flight turn meanwhile. With `pacing.key: address`
//! each resolved address has a group schedule and an in-flight schedule too, taken after
//! the origin's: many names on one server share its pace, the stricter rule applying.
//!
//! **The delay** is the largest of the floor, the Crawl-delay (or an operator override
//! when longer), the backoff, and the adaptive delay, capped by `ceiling` (a larger
//! Crawl-delay is clamped and logged, never turned into "disallow all"), plus a small
//! `margin` (5 ms) so that timer and scheduling jitter never shows at the origin as a gap
//! below it. An origin's 429 or 503 with `Retry-After` pauses its schedule until then;
//! without it (and, with `adaptive`, on any 5xx) the backoff doubles (up to the
//! ceiling) and a success halves it again. With `adaptive.enabled` the delay also follows
//! the origin's response times (from the turn to the response head; for one over 20 ms,
//! less the time its head sat received in the socket before robotsgate read it, as the
//! kernel tells: a busy proxy is not a struggling origin): at least
//! `response_time_factor` × the last one (Heritrix's rule; default 0: `max_in_flight`
//! already bounds a healthy origin's load, and a wait proportional to every response
//! would halve the speed of fast sites), and when a response is `latency_factor` times
//! slower than the origin's recent baseline (an average of its response times), a
//! slow-down doubling from that response time (at most twice it) that halves per
//! response once they are back near the baseline (a lasting new level becomes the
//! baseline after some fifty responses). Which rule set the delay is kept
//! ([`DelayRule`]) for the admin API. The robots.txt fetch counts as a request on every
//! schedule of its origin: the first page follows it by one delay.
//!
//! With no delay, backoff or pause in force a group schedule serialises nothing; only
//! the in-flight limit applies.
//!
//! An origin's schedules ([`Schedules`]) live in its entry of the origin store
//! (`origin::store`), beside its robots.txt: a request finds both with one lookup, and
//! the schedules go when the entry does. [`Pacer`] holds the settings and the
//! process-wide count of queued requests.
//!
//! **Backends.** Alone, an instance keeps its schedules in memory (above). In fleet mode
//! ([`crate::origin::fleet`]) a request takes each turn that is in force from the shared
//! schedule in Redis instead, so delays and in-flight limits hold across every instance;
//! the local schedule still counts the request (eviction, gauges) and mirrors the
//! origin's pauses published by the other instances. While Redis is unavailable,
//! `fleet.on_unavailable` decides: refuse (503), or pace locally at `delay ×
//! fleet.instances` (and `max_in_flight ÷ instances`, at least 1).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::config::{seconds, AdaptiveConfig, OnUnavailable, PacingConfig};
use crate::origin::fleet::{Fleet, FleetTurn, NoTurn, ScheduleKeys};
use crate::policy::target::Origin;
use crate::telemetry::metrics;

/// The group name of an origin's in-flight schedule (`#` never appears in a robots.txt
/// group name: it starts a comment there).
const IN_FLIGHT: &str = "#in-flight";

/// A response quicker than this never counts as a sign of strain, however quick the
/// origin's baseline: below it, scheduling jitter is as large as the response time.
const SLOW_AT_LEAST: Duration = Duration::from_millis(20);

/// Which rule set a schedule's delay.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DelayRule {
    /// Nothing: no delay in force.
    #[default]
    None,
    /// `pacing.floor_seconds`.
    Floor,
    /// The robots.txt Crawl-delay.
    CrawlDelay,
    /// A `pacing.overrides` entry.
    Override,
    /// The adaptive delay (response times, latency).
    Adaptive,
    /// The backoff after 429/5xx without `Retry-After`.
    Backoff,
    /// A pause the origin asked for with `Retry-After`.
    RetryAfter,
}

impl DelayRule {
    /// The label (`crawl-delay`, `floor`, `override`, `adaptive`, `backoff`,
    /// `retry-after`, `none`).
    pub fn label(self) -> &'static str {
        match self {
            DelayRule::None => "none",
            DelayRule::Floor => "floor",
            DelayRule::CrawlDelay => "crawl-delay",
            DelayRule::Override => "override",
            DelayRule::Adaptive => "adaptive",
            DelayRule::Backoff => "backoff",
            DelayRule::RetryAfter => "retry-after",
        }
    }
}

#[derive(Debug, Default)]
struct Timing {
    /// When the last request (or robots.txt fetch) on this schedule ended.
    last_end: Option<Instant>,
    /// The origin asked for a pause (429/503 + Retry-After) until then.
    paused_until: Option<Instant>,
    /// Extra delay from 429/5xx without Retry-After; doubles, decays on success.
    backoff: Duration,
    /// The delay from the configuration and robots.txt, and which rule set it.
    delay: Duration,
    rule: DelayRule,
    /// The adaptive delay: max(response_time_factor × last response, slow-down).
    adaptive: Duration,
    /// The slow-down while responses are far above the baseline.
    slow_down: Duration,
    /// The origin's recent response time (an exponential average).
    baseline: Option<Duration>,
}

impl Timing {
    /// The delay in force and the rule that set it.
    fn effective(&self, now: Instant) -> (Duration, DelayRule) {
        let mut best = (self.delay, self.rule);
        for candidate in [
            (self.backoff, DelayRule::Backoff),
            (self.adaptive, DelayRule::Adaptive),
        ] {
            if candidate.0 > best.0 {
                best = candidate;
            }
        }
        if self.paused_until.is_some_and(|u| u > now) {
            best.1 = DelayRule::RetryAfter;
        }
        if best.0.is_zero() && best.1 != DelayRule::RetryAfter {
            best.1 = DelayRule::None;
        }
        best
    }

    /// Would a schedule made afresh (given the origin's baseline, which outlives it:
    /// [`ScheduleList::baseline`]) behave the same from now on? Then this one can be
    /// forgotten: no pause, backoff or slow-down, and no delay still running from the
    /// last request.
    fn forgettable(&self, now: Instant) -> bool {
        self.paused_until.is_none_or(|until| until <= now)
            && self.backoff.is_zero()
            && self.adaptive.is_zero()
            && self.slow_down.is_zero()
            && self
                .last_end
                .is_none_or(|end| end + self.effective(now).0 <= now)
    }

    /// Is anything in force that spaces requests (a delay, a backoff, a pause)?
    fn limited(&self, now: Instant) -> bool {
        self.effective(now).1 != DelayRule::None
    }

    /// The expected wait of a newcomer with `rounds` delays' worth of requests ahead of
    /// it: until the next slot, plus one delay per round.
    fn wait_estimate(&self, now: Instant, rounds: u32) -> Duration {
        let next_slot =
            next_start(self, now).map_or(Duration::ZERO, |at| at.saturating_duration_since(now));
        next_slot + self.effective(now).0 * rounds
    }

    /// The remaining pause the origin asked for, else the backoff in force.
    fn backed_off_for(&self, now: Instant) -> Option<Duration> {
        self.paused_until
            .map(|until| until.saturating_duration_since(now))
            .filter(|p| !p.is_zero())
            .or((!self.backoff.is_zero()).then_some(self.backoff))
    }

    /// The origin answered `status` after `took`: pauses, backoff, adaptive delay.
    fn answered(
        &mut self,
        status: u16,
        retry_after: Option<Duration>,
        took: Duration,
        adaptive: &AdaptiveConfig,
        ceiling: Duration,
    ) {
        let error = status == 429 || status == 503 || (adaptive.enabled && status >= 500);
        match (error, retry_after) {
            (true, Some(wait)) if matches!(status, 429 | 503) => {
                let until = Instant::now() + wait.min(ceiling);
                self.paused_until = Some(self.paused_until.map_or(until, |p| p.max(until)));
            }
            (true, _) => {
                let base = self.delay.max(Duration::from_secs(1));
                self.backoff = (self.backoff * 2).max(base).min(ceiling);
                metrics::record_slow_down("error");
            }
            _ => self.backoff /= 2,
        }
        if !adaptive.enabled {
            return;
        }
        let slow = self.baseline.is_some_and(|baseline| {
            took > baseline.mul_f64(adaptive.latency_factor) && took > SLOW_AT_LEAST
        });
        if slow {
            self.slow_down = (self.slow_down * 2).max(took).min(took * 2).min(ceiling);
            metrics::record_slow_down("latency");
        } else {
            self.slow_down /= 2;
            if self.slow_down < Duration::from_millis(1) {
                self.slow_down = Duration::ZERO;
            }
        }
        // The baseline follows normal responses closely and slow ones slowly: a lasting
        // new level becomes normal after some fifty responses, and the slow-down relaxes.
        let weight = if slow { 0.02 } else { 0.1 };
        self.baseline = Some(match self.baseline {
            Some(b) => b.mul_f64(1.0 - weight) + took.mul_f64(weight),
            None => took,
        });
        self.adaptive = self
            .slow_down
            .max(took.mul_f64(adaptive.response_time_factor))
            .min(ceiling);
    }
}

struct Schedule {
    /// The robots.txt group (or [`IN_FLIGHT`]), and the origin (`scheme://authority`):
    /// its shared keys.
    group: String,
    /// Fleet mode only (`None` alone, where nothing needs it).
    origin: Option<Arc<str>>,
    /// Turns given out at once: 1 for a group, `max_in_flight` for the in-flight one.
    capacity: usize,
    turn: Arc<tokio::sync::Semaphore>,
    timing: Mutex<Timing>,
    /// Requests waiting for or holding the turn.
    pending: AtomicUsize,
    /// The same, over every schedule of the process (a gauge).
    total: Arc<AtomicUsize>,
}

impl Schedule {
    fn enqueue(&self) {
        self.pending.fetch_add(1, Ordering::AcqRel);
        self.total.fetch_add(1, Ordering::AcqRel);
    }

    fn dequeue(&self) {
        self.pending.fetch_sub(1, Ordering::AcqRel);
        self.total.fetch_sub(1, Ordering::AcqRel);
    }

    fn keys(&self) -> ScheduleKeys {
        ScheduleKeys::new(self.origin.as_deref().unwrap_or_default(), &self.group)
    }

    /// Holding the turn: sleeps until the next start is due (the previous end plus the
    /// delay, past any pause; re-read on waking, as backoff may grow meanwhile). `Err`
    /// carries the start when it would come after `deadline`.
    async fn sleep_until_due(&self, deadline: Instant) -> Result<(), Instant> {
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
    list: Mutex<ScheduleList>,
}

/// What [`Schedules`] guards: the schedules, and what an origin has learned that must
/// outlive them.
#[derive(Default)]
struct ScheduleList {
    schedules: Vec<Arc<Schedule>>,
    /// The origin's response-time baseline from its last forgotten schedule, in
    /// microseconds (0: none yet). A schedule made afresh starts from it, so forgetting
    /// an idle schedule (about 300 bytes) does not forget what is normal for the origin:
    /// 4 bytes kept instead.
    baseline: u32,
}

impl ScheduleList {
    fn baseline(&self) -> Option<Duration> {
        (self.baseline > 0).then(|| Duration::from_micros(u64::from(self.baseline)))
    }

    fn remember(&mut self, baseline: Option<Duration>) {
        if let Some(baseline) = baseline {
            let micros = u32::try_from(baseline.as_micros()).unwrap_or(u32::MAX);
            self.baseline = micros.max(1);
        }
    }
}

/// Where a schedule is made: its origin's schedules, and (fleet mode) the origin's key.
#[derive(Clone, Copy)]
pub struct Place<'a> {
    /// The schedules.
    pub schedules: &'a Schedules,
    /// Whose they are.
    pub origin: &'a Origin,
}

impl Schedules {
    /// The schedule of `group` among `place`'s, made on first use with `capacity` turns
    /// (knowing its origin's key when `fleet`).
    fn get(
        place: Place<'_>,
        group: &str,
        capacity: usize,
        total: &Arc<AtomicUsize>,
        fleet: bool,
    ) -> Arc<Schedule> {
        let mut list = lock(&place.schedules.list);
        if let Some(found) = list.schedules.iter().find(|s| s.group == group) {
            return found.clone();
        }
        let capacity = capacity.clamp(1, tokio::sync::Semaphore::MAX_PERMITS);
        let schedule = Arc::new(Schedule {
            group: group.to_string(),
            origin: fleet.then(|| place.origin.to_string().into()),
            capacity,
            turn: Arc::new(tokio::sync::Semaphore::new(capacity)),
            timing: Mutex::new(Timing {
                baseline: list.baseline(),
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

    /// Does a request wait for or hold a turn here? (Such an origin is never evicted.)
    pub fn busy(&self) -> bool {
        lock(&self.list)
            .schedules
            .iter()
            .any(|s| s.pending.load(Ordering::Acquire) > 0)
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

/// Why a request was not queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefusalReason {
    QueueFull,
    WaitTooLong,
    /// Fleet mode, Redis unavailable, `fleet.on_unavailable: refuse`.
    FleetUnavailable,
}

/// A request refused by pacing: why, when to come back, and whether the origin's own
/// 429/503 is what slowed the schedule down.
#[derive(Clone, Debug, PartialEq)]
pub struct Refused {
    pub reason: RefusalReason,
    pub retry_after: Duration,
    /// Remaining pause the origin asked for (or backoff in force), if any.
    pub backed_off_for: Option<Duration>,
}

impl Refused {
    /// A wait that would end at `at`, past the request's deadline (asked at `now`).
    fn comes_at(at: Instant, now: Instant, backed_off_for: Option<Duration>) -> Refused {
        Refused {
            reason: RefusalReason::WaitTooLong,
            retry_after: at
                .saturating_duration_since(now)
                .max(Duration::from_secs(1)),
            backed_off_for,
        }
    }
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.reason {
            RefusalReason::QueueFull => f.write_str("pacing queue full")?,
            RefusalReason::WaitTooLong => write!(
                f,
                "pacing wait of {:.1} s would exceed the limit",
                self.retry_after.as_secs_f64()
            )?,
            RefusalReason::FleetUnavailable => {
                f.write_str("the fleet backend (Redis) is unavailable")?
            }
        }
        if let Some(backoff) = self.backed_off_for {
            write!(
                f,
                " (origin asked to back off for {:.1} s)",
                backoff.as_secs_f64()
            )?;
        }
        Ok(())
    }
}

/// A turn held on one schedule.
enum Turn {
    /// The local schedule's turn.
    Local(#[allow(dead_code)] tokio::sync::OwnedSemaphorePermit),
    /// The shared schedule's turn (fleet mode).
    Shared(Box<FleetTurn>),
}

/// A turn and its schedule; dropping it ends the request there (the end starts the
/// schedule's next delay) and hands the turn on.
struct Held {
    schedule: Arc<Schedule>,
    turn: Option<Turn>,
    ceiling: Duration,
}

impl Drop for Held {
    fn drop(&mut self) {
        lock(&self.schedule.timing).last_end = Some(Instant::now());
        if let Some(Turn::Shared(turn)) = self.turn.take() {
            turn.release(self.ceiling);
        }
        self.schedule.dequeue();
    }
}

/// Leave to go upstream, held until the exchange has ended: the turns in force
/// (the group's when a delay is, the in-flight one, the address's), local or
/// fleet-wide. With nothing in force it holds nothing but still carries the origin's
/// answer back to the schedule.
pub struct Permit {
    /// The origin's group schedule: answers and response times go there.
    schedule: Arc<Schedule>,
    held: Vec<Held>,
    /// In fleet mode, where an unpaced request's 429/503 is reported.
    fleet: Option<Arc<Fleet>>,
    adaptive: AdaptiveConfig,
    /// How long the request waited for its slot.
    pub waited: Duration,
    /// When it got its turns (its response time counts from here).
    granted: Instant,
    ceiling: Duration,
}

impl Permit {
    /// Tells the schedule how the origin answered (429/5xx back off, success decays,
    /// response times feed the adaptive delay).
    pub fn origin_answered(&self, status: u16, retry_after: Option<Duration>) {
        self.origin_answered_read_late(status, retry_after, || Duration::ZERO);
    }

    /// [`Permit::origin_answered`] for a caller that can tell how long the response
    /// head sat received but unread (`unread`, asked only of a response slow enough to
    /// count as strain). That time is the proxy's, not the origin's: a busy proxy slow
    /// to read its sockets must not take every fast origin for a struggling one.
    pub fn origin_answered_read_late(
        &self,
        status: u16,
        retry_after: Option<Duration>,
        unread: impl FnOnce() -> Duration,
    ) {
        let mut took = self.granted.elapsed();
        if self.adaptive.enabled && took > SLOW_AT_LEAST {
            took = took.saturating_sub(unread());
        }
        lock(&self.schedule.timing).answered(
            status,
            retry_after,
            took,
            &self.adaptive,
            self.ceiling,
        );
        let shared = self.held.iter().find_map(|h| match &h.turn {
            Some(Turn::Shared(turn)) if Arc::ptr_eq(&h.schedule, &self.schedule) => Some(turn),
            _ => None,
        });
        match (shared, &self.fleet) {
            (Some(turn), _) => turn.origin_answered(status, retry_after),
            (None, Some(fleet)) if matches!(status, 429 | 503) => {
                fleet.report(self.schedule.keys(), status, retry_after, self.ceiling)
            }
            _ => {}
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        lock(&self.schedule.timing).last_end = Some(Instant::now());
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Decrements `pending` if the waiting future is dropped before it gets its turn.
struct Waiting<'a>(&'a Schedule, bool);

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
    pub rule: DelayRule,
    pub backoff: Duration,
    /// Turns given out at once (1 for a group, `max_in_flight` for the in-flight one).
    pub capacity: usize,
    /// Requests waiting for or holding a turn (on this instance).
    pub queued: usize,
    /// Until the next request may start (zero: now).
    pub next_slot_in: Option<Duration>,
}

/// One request's pacing: where it queues and what is in force for it.
pub struct PaceRequest<'a> {
    /// The origin's schedules.
    pub place: Place<'a>,
    /// The address's, with `pacing.key: address`.
    pub address: Option<Place<'a>>,
    /// Its robots.txt group.
    pub group: &'a str,
    /// The delay from configuration and robots.txt, and its rule.
    pub delay: Duration,
    pub rule: DelayRule,
    /// Requests in flight to the origin at once (0: no limit).
    pub max_in_flight: usize,
    /// When the origin's robots.txt was last fetched: that fetch counts as the
    /// schedule's previous request.
    pub robots_fetched_at: Option<Instant>,
}

/// The pacing settings, the process-wide count of queued requests, and the fleet
/// backend when there is one.
pub struct Pacer {
    config: PacingConfig,
    total: Arc<AtomicUsize>,
    fleet: Option<Arc<Fleet>>,
}

/// The turns a robots.txt fetch holds: one on every schedule of its origin, taken in
/// arrival order like a page's and released when the fetch ends (which starts each
/// schedule's next delay).
pub struct FetchTurns {
    _held: Vec<Held>,
}

/// When a schedule's holder may start: the previous end plus the delay in force, and
/// past any pause the origin asked for.
fn next_start(t: &Timing, now: Instant) -> Option<Instant> {
    let effective = t.effective(now).0;
    [t.last_end.map(|e| e + effective), t.paused_until]
        .into_iter()
        .flatten()
        .max()
}

impl Pacer {
    /// Pacing in memory, for this instance alone.
    #[cfg(test)]
    pub fn new(config: PacingConfig) -> Pacer {
        Pacer::with_fleet(config, None)
    }

    /// Pacing shared through `fleet` when given.
    pub fn with_fleet(config: PacingConfig, fleet: Option<Arc<Fleet>>) -> Pacer {
        Pacer {
            config,
            total: Arc::default(),
            fleet,
        }
    }

    /// Applies a pause or backoff another instance published for `group` (making its
    /// schedule if this instance has none yet), so that this instance knows a limit is in
    /// force and asks the shared schedule.
    pub fn mirror(&self, place: Place<'_>, group: &str, pause: Duration, backoff: Duration) {
        let schedule = self.schedule(place, group, 1);
        let mut t = lock(&schedule.timing);
        let until = Instant::now() + pause;
        t.paused_until = Some(t.paused_until.map_or(until, |p| p.max(until)));
        t.backoff = backoff;
    }

    /// Puts back a pause and backoff kept across a restart.
    pub fn restore(
        &self,
        place: Place<'_>,
        group: &str,
        paused_until: Option<Instant>,
        backoff: Duration,
    ) {
        let capacity = if group == IN_FLIGHT {
            self.config.max_in_flight
        } else {
            1
        };
        let schedule = self.schedule(place, group, capacity);
        let mut t = lock(&schedule.timing);
        t.paused_until = paused_until;
        t.backoff = backoff.min(self.config.ceiling_seconds.duration());
    }

    /// The settings.
    pub fn config(&self) -> &PacingConfig {
        &self.config
    }

    fn schedule(&self, place: Place<'_>, group: &str, capacity: usize) -> Arc<Schedule> {
        Schedules::get(place, group, capacity, &self.total, self.fleet.is_some())
    }

    fn held(&self, schedule: Arc<Schedule>, turn: Turn) -> Held {
        Held {
            schedule,
            turn: Some(turn),
            ceiling: self.config.ceiling_seconds.duration(),
        }
    }

    /// [`Pacer::turns_for_fetch`] at a server address (`pacing.key: address`): its
    /// in-flight schedule is made if it has none yet, so fetches of many names on one
    /// server are limited there from the first, like its pages.
    pub async fn turns_for_fetch_at(&self, place: Place<'_>) -> Option<FetchTurns> {
        if self.config.max_in_flight > 0 {
            self.schedule(place, IN_FLIGHT, self.config.max_in_flight);
        }
        self.turns_for_fetch(place.schedules).await
    }

    /// Waits for the turn of every one of an origin's `schedules`, for a robots.txt
    /// fetch. `None` when they are not all free within `max_wait_seconds` (a long pause,
    /// a long queue): the caller then postpones the fetch rather than jump the queue.
    pub async fn turns_for_fetch(&self, schedules: &Schedules) -> Option<FetchTurns> {
        let mut list: Vec<Arc<Schedule>> = lock(&schedules.list).schedules.clone();
        // One order for every fetch of the origin (only one runs at a time anyway), and
        // the requests' order: group turns before the in-flight one, so the fetch never
        // holds an in-flight turn while queued for a group turn.
        list.sort_by(|a, b| {
            (a.group == IN_FLIGHT, &a.group).cmp(&(b.group == IN_FLIGHT, &b.group))
        });
        let now = Instant::now();
        let deadline = now + self.config.max_wait_seconds.duration();
        let mut held = Vec::new();
        for schedule in list {
            let limited = schedule.group == IN_FLIGHT || lock(&schedule.timing).limited(now);
            if let (true, Some(fleet)) = (limited, &self.fleet) {
                let shared = fleet
                    .acquire(
                        &schedule.keys(),
                        schedule.capacity,
                        None,
                        usize::MAX,
                        self.config.max_wait_seconds.duration(),
                    )
                    .await;
                match shared {
                    Ok(Ok(turn)) => {
                        schedule.enqueue();
                        held.push(self.held(schedule, Turn::Shared(Box::new(turn))));
                        continue;
                    }
                    Ok(Err(_)) => return None,
                    Err(_) => metrics::record_fleet_fallback("local"),
                }
            }
            let turn = self.local_turn(&schedule, 1, deadline).await.ok()?;
            held.push(self.held(schedule, Turn::Local(turn)));
        }
        Some(FetchTurns { _held: held })
    }

    /// Queues for a local turn of `schedule` (`share` of its permits), then sleeps out
    /// its delay. `Err` carries the start when it would come after `deadline`.
    async fn local_turn(
        &self,
        schedule: &Schedule,
        share: u32,
        deadline: Instant,
    ) -> Result<tokio::sync::OwnedSemaphorePermit, Instant> {
        schedule.enqueue();
        let mut waiting = Waiting(schedule, false);
        if share == 1 && schedule.capacity > 1 && schedule.turn.available_permits() == 0 {
            metrics::IN_FLIGHT_WAITS.inc();
        }
        let turn =
            tokio::time::timeout_at(deadline, schedule.turn.clone().acquire_many_owned(share))
                .await
                .map_err(|_| deadline)?
                .map_err(|_| deadline)?;
        schedule.sleep_until_due(deadline).await?;
        waiting.1 = true;
        Ok(turn)
    }

    /// As [`Pacer::local_turn`] when `schedule`'s turn is free now; `Ok(None)` when it is
    /// taken (nothing waits for it).
    async fn free_local_turn(
        &self,
        schedule: &Schedule,
        deadline: Instant,
    ) -> Result<Option<tokio::sync::OwnedSemaphorePermit>, Instant> {
        let Ok(turn) = schedule.turn.clone().try_acquire_owned() else {
            return Ok(None);
        };
        schedule.enqueue();
        let mut waiting = Waiting(schedule, false);
        schedule.sleep_until_due(deadline).await?;
        waiting.1 = true;
        Ok(Some(turn))
    }

    /// The delay for `group`'s schedule among `schedules` (of `origin`, for the log),
    /// given the robots.txt Crawl-delay (seconds) and an operator override (seconds,
    /// used when longer), and the rule that set it.
    pub fn delay_for(
        &self,
        schedules: &Schedules,
        origin: &Origin,
        group: &str,
        crawl_delay: Option<f64>,
        override_delay: Option<f64>,
    ) -> (Duration, DelayRule) {
        // Clamped as numbers first: a `Crawl-delay: 1e20` is the ceiling, never a value
        // that overflows a conversion (which once fell back to zero: no pacing at all).
        let (floor, ceiling) = (
            self.config.floor_seconds.get(),
            self.config.ceiling_seconds.get(),
        );
        let asked_seconds = crawl_delay.filter(|d| !d.is_nan()).unwrap_or(0.0);
        let override_seconds = override_delay.unwrap_or(0.0);
        let (wanted, rule) = [
            (floor, DelayRule::Floor),
            (asked_seconds, DelayRule::CrawlDelay),
            (override_seconds, DelayRule::Override),
        ]
        .into_iter()
        .fold(
            (0.0, DelayRule::None),
            |best, c| if c.0 > best.0 { c } else { best },
        );
        let delay = seconds(wanted.min(ceiling));
        let ceiling = seconds(ceiling);
        let delay = if delay.is_zero() {
            delay
        } else {
            delay + self.config.margin_seconds.duration()
        };
        // Say so once per schedule, not on every request: a schedule already running at
        // the clamped delay has been reported.
        let already_clamped = || {
            lock(&schedules.list)
                .schedules
                .iter()
                .find(|s| s.group == group)
                .is_some_and(|s| lock(&s.timing).delay == delay)
        };
        if asked_seconds > self.config.ceiling_seconds.get() && !already_clamped() {
            metrics::CRAWL_DELAYS_CLAMPED.inc();
            log::warn!(
                "Crawl-delay {asked_seconds:.1} s of {origin} (group {group}) is above the ceiling; pacing at {:.1} s",
                ceiling.as_secs_f64()
            );
        }
        (delay, rule)
    }

    /// Report mode: the wait `request` would have had for its group's turn (an estimate:
    /// until the next slot, plus one delay per request queued ahead), and a permit that
    /// holds no turn but still carries the origin's answers to the schedule.
    pub fn report(&self, request: PaceRequest<'_>) -> (Permit, Duration) {
        let schedule = self.schedule(request.place, request.group, 1);
        let now = Instant::now();
        let would_wait = {
            let mut t = lock(&schedule.timing);
            t.delay = request.delay;
            t.rule = request.rule;
            if t.limited(now) {
                t.wait_estimate(now, schedule.pending.load(Ordering::Acquire) as u32)
            } else {
                Duration::ZERO
            }
        };
        (self.permit(schedule, Vec::new(), now), would_wait)
    }

    /// Waits for every turn in force for `request` (its group's when a delay is, then
    /// the in-flight one; then the address's); `Err` when a wait would be too long or a
    /// queue is full.
    pub async fn pace(&self, request: PaceRequest<'_>) -> Result<Permit, Refused> {
        let started = Instant::now();
        let schedule = self.schedule(request.place, request.group, 1);
        let mut held = Vec::new();
        let places =
            std::iter::once((request.place, true)).chain(request.address.map(|a| (a, false)));
        for (place, is_origin) in places {
            let group = if is_origin {
                schedule.clone()
            } else {
                self.schedule(place, request.group, 1)
            };
            let mut fetched = if is_origin {
                request.robots_fetched_at
            } else {
                None
            };
            let delay = Some((request.delay, request.rule));
            // A request holding an in-flight turn never queues for a group turn (whose
            // holder may be queued for an in-flight turn: a deadlock): the group's turn
            // is taken first when a delay is in force, and one that came into force
            // meanwhile is taken at once or not at all. Set once the request gave an
            // in-flight turn back: it was admitted, so it queues again without a new
            // estimate, within its first deadline.
            let mut admitted = None;
            loop {
                let group_turn = self.turn(&group, delay, fetched.take(), admitted).await?;
                let took_group = group_turn.is_some();
                if let Some(turn) = group_turn {
                    held.push(self.held(group.clone(), turn));
                }
                if request.max_in_flight == 0 {
                    break;
                }
                let in_flight = self.schedule(place, IN_FLIGHT, request.max_in_flight);
                let Some(turn) = self.turn(&in_flight, None, None, admitted).await? else {
                    break;
                };
                let in_flight_turn = self.held(in_flight, turn);
                // While it waited for an in-flight turn, the origin may have asked for a
                // delay (a slow or failing response): then it takes the group's turn if
                // it is free (and sleeps until due), or gives the in-flight turn back and
                // queues for the group's first.
                if took_group || !lock(&group.timing).limited(Instant::now()) {
                    held.push(in_flight_turn);
                    break;
                }
                // Each queue a request waits in is bounded by `max_wait` from when it
                // joined it (as a group turn taken after an in-flight one always was).
                let now = Instant::now();
                let deadline = now + self.config.max_wait_seconds.duration();
                if self.fleet.is_none() {
                    let free = self.free_local_turn(&group, deadline).await;
                    if let Some(turn) = free.map_err(|at| Refused::comes_at(at, now, None))? {
                        held.push(self.held(group.clone(), Turn::Local(turn)));
                        held.push(in_flight_turn);
                        break;
                    }
                }
                drop(in_flight_turn);
                admitted = Some(deadline);
            }
        }
        Ok(self.permit(schedule, held, started))
    }

    /// The permit for a request to `schedule` holding `held`, asked for at `started`.
    fn permit(&self, schedule: Arc<Schedule>, held: Vec<Held>, started: Instant) -> Permit {
        let granted = Instant::now();
        Permit {
            schedule,
            held,
            fleet: self.fleet.clone(),
            adaptive: self.config.adaptive.clone(),
            waited: granted.saturating_duration_since(started),
            granted,
            ceiling: self.config.ceiling_seconds.duration(),
        }
    }

    /// The turn of one schedule when something is in force there (`delay`: the group's
    /// delay and rule; `None` for an in-flight schedule, always in force); `None` when
    /// nothing is. `admitted`: the request passed the queue and wait bounds already and
    /// must have its turn by then.
    async fn turn(
        &self,
        schedule: &Arc<Schedule>,
        delay: Option<(Duration, DelayRule)>,
        robots_fetched_at: Option<Instant>,
        admitted: Option<Instant>,
    ) -> Result<Option<Turn>, Refused> {
        let now = Instant::now();
        let (limited, backed_off_for) = {
            let mut t = lock(&schedule.timing);
            if let Some(fetched) = robots_fetched_at {
                t.last_end = Some(t.last_end.map_or(fetched, |e| e.max(fetched)));
            }
            if let Some((delay, rule)) = delay {
                t.delay = delay;
                t.rule = rule;
            }
            (delay.is_none() || t.limited(now), t.backed_off_for(now))
        };
        if !limited {
            return Ok(None);
        }
        let mut capacity = schedule.capacity;
        if let Some(fleet) = &self.fleet {
            let effective = lock(&schedule.timing).effective(now).0;
            match self
                .shared_turn(fleet, schedule, effective, backed_off_for)
                .await
            {
                Ok(result) => return result.map(Some),
                Err(action) => {
                    metrics::record_fleet_fallback(match action {
                        OnUnavailable::Refuse => "refuse",
                        OnUnavailable::Local => "local",
                    });
                    if action == OnUnavailable::Refuse {
                        return Err(Refused {
                            reason: RefusalReason::FleetUnavailable,
                            retry_after: Duration::from_secs(2),
                            backed_off_for,
                        });
                    }
                    // Alone, each of N instances keeps N delays (and a share of the
                    // in-flight limit): the fleet as a whole keeps one.
                    let instances = fleet.config().instances;
                    {
                        let mut t = lock(&schedule.timing);
                        t.delay = t.delay.saturating_mul(instances);
                    }
                    capacity = (capacity / instances as usize).max(1);
                }
            }
        }
        self.local(schedule, capacity, now, backed_off_for, admitted)
            .await
            .map(|turn| Some(Turn::Local(turn)))
    }

    /// The turn of the shared schedule; `Err` (what `fleet.on_unavailable` says) when
    /// Redis cannot be asked.
    async fn shared_turn(
        &self,
        fleet: &Arc<Fleet>,
        schedule: &Arc<Schedule>,
        delay: Duration,
        backed_off_for: Option<Duration>,
    ) -> Result<Result<Turn, Refused>, OnUnavailable> {
        schedule.enqueue();
        let mut waiting = Waiting(schedule, false);
        let shared = fleet
            .acquire(
                &schedule.keys(),
                schedule.capacity,
                Some(delay),
                self.config.max_queue,
                self.config.max_wait_seconds.duration(),
            )
            .await
            .map_err(|_| fleet.config().on_unavailable)?;
        let refused = |reason, estimate: Duration| Refused {
            reason,
            retry_after: estimate.max(Duration::from_secs(1)),
            backed_off_for,
        };
        Ok(match shared {
            Ok(turn) => {
                waiting.1 = true;
                Ok(Turn::Shared(Box::new(turn)))
            }
            Err(NoTurn::QueueFull(estimate)) => Err(refused(RefusalReason::QueueFull, estimate)),
            Err(NoTurn::WaitTooLong(estimate)) => {
                Err(refused(RefusalReason::WaitTooLong, estimate))
            }
        })
    }

    /// A local turn of `schedule` (at most `capacity` out at once), within the queue and
    /// wait bounds (`admitted`: within that deadline, the bounds already passed).
    async fn local(
        &self,
        schedule: &Arc<Schedule>,
        capacity: usize,
        now: Instant,
        backed_off_for: Option<Duration>,
        admitted: Option<Instant>,
    ) -> Result<tokio::sync::OwnedSemaphorePermit, Refused> {
        // Fewer turns than the schedule was made with (the fleet fallback): each request
        // takes a larger share of them.
        let share = (schedule.capacity / capacity.max(1)).max(1) as u32;
        let deadline = match admitted {
            Some(deadline) => deadline,
            None => self.admit(schedule, capacity, now, backed_off_for)?,
        };
        self.local_turn(schedule, share, deadline)
            .await
            .map_err(|at| Refused::comes_at(at, now, backed_off_for))
    }

    /// Admits a request to `schedule`'s queue: its deadline, or the refusal when the
    /// queue is full or the estimated wait too long.
    fn admit(
        &self,
        schedule: &Schedule,
        capacity: usize,
        now: Instant,
        backed_off_for: Option<Duration>,
    ) -> Result<Instant, Refused> {
        let pending = schedule.pending.load(Ordering::Acquire);
        // Ahead of this request: whoever holds or waits for the turns, `capacity` at a time.
        let rounds = (pending / capacity.max(1)) as u32;
        let estimate = lock(&schedule.timing).wait_estimate(now, rounds);
        let retry_after = estimate.max(Duration::from_secs(1));
        if pending >= self.config.max_queue + capacity - 1 {
            return Err(Refused {
                reason: RefusalReason::QueueFull,
                retry_after,
                backed_off_for,
            });
        }
        if estimate > self.config.max_wait_seconds.duration() {
            return Err(Refused {
                reason: RefusalReason::WaitTooLong,
                retry_after,
                backed_off_for,
            });
        }
        // The estimate can be overtaken (backoff grows while this request waits): the
        // bound holds for the real wait too, answered like an estimate over it.
        Ok(now + self.config.max_wait_seconds.duration())
    }

    /// Requests waiting for or holding a turn, over all schedules (a gauge).
    pub fn queued(&self) -> usize {
        self.total.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schedules() -> Arc<Schedules> {
        Arc::default()
    }

    fn origin() -> Origin {
        crate::policy::target::parse_authority("127.0.0.1:1", crate::policy::target::Scheme::Http)
            .expect("origin")
    }

    impl Pacer {
        /// The convenience form of [`Pacer::pace`]: one group of [`origin`], no in-flight
        /// limit.
        async fn acquire(
            &self,
            schedules: &Schedules,
            group: &str,
            delay: Duration,
            robots_fetched_at: Option<Instant>,
        ) -> Result<Permit, Refused> {
            self.pace(PaceRequest {
                place: Place {
                    schedules,
                    origin: &origin(),
                },
                address: None,
                group,
                delay,
                rule: DelayRule::CrawlDelay,
                max_in_flight: 0,
                robots_fetched_at,
            })
            .await
        }
    }

    fn pacer() -> Pacer {
        Pacer::new(PacingConfig {
            max_wait_seconds: crate::config::Seconds(10.0),
            max_queue: 3,
            ..PacingConfig::default()
        })
    }

    #[tokio::test(start_paused = true)]
    async fn next_start_waits_for_previous_end_plus_delay() {
        let p = pacer();
        let k = schedules();
        let d = Duration::from_millis(500);
        let start = Instant::now();
        drop(p.acquire(&k, "*", d, None).await.expect("first"));
        let second = p.acquire(&k, "*", d, None).await.expect("second");
        assert_eq!(second.waited, d);
        assert_eq!(start.elapsed(), d);
    }

    /// A schedule with nothing in force is forgotten once no request holds it; one with
    /// a delay still running, a backoff, or a holder is kept.
    #[tokio::test(start_paused = true)]
    async fn idle_schedules_are_forgotten() {
        let p = pacer();
        let k = schedules();
        let held = p.acquire(&k, "a", Duration::ZERO, None).await.expect("a");
        k.forget_idle();
        assert_eq!(k.states().len(), 1, "held: kept");
        drop(held);
        k.forget_idle();
        assert!(k.states().is_empty(), "nothing in force: forgotten");

        let d = Duration::from_millis(500);
        drop(p.acquire(&k, "b", d, None).await.expect("b"));
        k.forget_idle();
        assert_eq!(k.states().len(), 1, "its delay still runs: kept");
        tokio::time::advance(d).await;
        k.forget_idle();
        assert!(k.states().is_empty(), "delay over: forgotten");

        let c = p.acquire(&k, "c", Duration::ZERO, None).await.expect("c");
        c.origin_answered(503, None);
        drop(c);
        k.forget_idle();
        assert_eq!(k.states().len(), 1, "backing off: kept");
    }

    /// Forgetting an idle schedule keeps the origin's response-time baseline: a response
    /// far slower than the ones before still slows the next schedule down.
    #[tokio::test(start_paused = true)]
    async fn baseline_outlives_a_forgotten_schedule() {
        // One request on the `*` schedule, answered 200 after `took`; then its end.
        async fn answered_after(p: &Pacer, k: &Schedules, took: Duration) {
            let permit = p.acquire(k, "*", Duration::ZERO, None).await.expect("turn");
            tokio::time::advance(took).await;
            permit.origin_answered(200, None);
            drop(permit);
            k.forget_idle();
        }
        let p = pacer();
        let k = schedules();
        for _ in 0..3 {
            answered_after(&p, &k, Duration::from_millis(10)).await;
            assert!(k.states().is_empty(), "nothing in force: forgotten");
        }
        answered_after(&p, &k, Duration::from_millis(200)).await;
        let states = k.states();
        assert_eq!(states.len(), 1, "slowing down: kept");
        assert_eq!(states[0].rule, DelayRule::Adaptive);
        assert!(states[0].delay >= Duration::from_millis(200), "{states:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn no_delay_means_no_serialisation() {
        let p = pacer();
        let k = schedules();
        let a = p.acquire(&k, "*", Duration::ZERO, None).await.expect("a");
        let b = p.acquire(&k, "*", Duration::ZERO, None).await.expect("b");
        assert_eq!((a.waited, b.waited), (Duration::ZERO, Duration::ZERO));
        assert_eq!(p.queued(), 0);
        // A 503 without Retry-After switches pacing on for the schedule.
        a.origin_answered(503, None);
        drop((a, b));
        let start = Instant::now();
        let c = p.acquire(&k, "*", Duration::ZERO, None).await.expect("c");
        assert_eq!(start.elapsed(), Duration::from_secs(1));
        drop(c);
    }

    #[tokio::test(start_paused = true)]
    async fn delays_clamp_to_floor_and_ceiling() {
        let p = Pacer::new(PacingConfig {
            floor_seconds: crate::config::Seconds(0.2),
            ceiling_seconds: crate::config::Seconds(30.0),
            margin_seconds: crate::config::Seconds(0.0),
            ..PacingConfig::default()
        });
        let k = schedules();
        assert_eq!(
            p.delay_for(&k, &origin(), "*", None, None).0,
            Duration::from_millis(200)
        );
        assert_eq!(
            p.delay_for(&k, &origin(), "*", Some(4.5), None).0,
            Duration::from_millis(4500)
        );
        assert_eq!(
            p.delay_for(&k, &origin(), "*", Some(86_400.0), None).0,
            Duration::from_secs(30)
        );
        assert_eq!(
            p.delay_for(&k, &origin(), "*", Some(1e20), None).0,
            Duration::from_secs(30)
        );
        assert_eq!(
            p.delay_for(&k, &origin(), "*", Some(f64::MAX), None).0,
            Duration::from_secs(30)
        );
        assert_eq!(
            p.delay_for(&k, &origin(), "*", Some(f64::INFINITY), None).0,
            Duration::from_secs(30)
        );
        // The default margin is added to non-zero delays only.
        let p = Pacer::new(PacingConfig::default());
        assert_eq!(
            p.delay_for(&k, &origin(), "*", None, None).0,
            Duration::ZERO
        );
        assert_eq!(
            p.delay_for(&k, &origin(), "*", Some(0.5), None).0,
            Duration::from_millis(505)
        );
    }

    proptest::proptest! {
        /// For any finite non-negative Crawl-delay d, the delay is min(max(d, floor), ceiling).
        #[test]
        fn delay_is_crawl_delay_clamped(
            d in proptest::prop_oneof![0.0f64..1e3, 0.0f64..f64::MAX, proptest::num::f64::POSITIVE | proptest::num::f64::ZERO],
            floor in 0.0f64..10.0,
            extra in 0.0f64..1e6,
        ) {
            let ceiling = floor + extra;
            let p = Pacer::new(PacingConfig {
                floor_seconds: crate::config::Seconds(floor),
                ceiling_seconds: crate::config::Seconds(ceiling),
                margin_seconds: crate::config::Seconds(0.0),
                ..PacingConfig::default()
            });
            let want = d.max(floor).min(ceiling);
            let got = p.delay_for(&schedules(), &origin(), "*", Some(d), None).0.as_secs_f64();
            proptest::prop_assert!((got - want).abs() <= want * 1e-9 + 1e-9, "d={d} got={got} want={want}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn queue_and_wait_bounds_refuse_with_retry_after() {
        let p = pacer();
        let k = schedules();
        let d = Duration::from_secs(2);
        let held = p.acquire(&k, "*", d, None).await.expect("first");
        // One in flight: the next would wait one delay after it ends (≥ 2 s).
        let refused = p
            .acquire(&k, "*", Duration::from_secs(20), None)
            .await
            .err()
            .expect("too long");
        assert_eq!(refused.reason, RefusalReason::WaitTooLong);
        assert_eq!(refused.retry_after, Duration::from_secs(20));
        drop(held);
    }

    #[tokio::test(start_paused = true)]
    async fn pause_from_retry_after_and_backoff() {
        let p = pacer();
        let k = schedules();
        let permit = p
            .acquire(&k, "*", Duration::ZERO, None)
            .await
            .expect("first");
        permit.origin_answered(429, Some(Duration::from_secs(3)));
        drop(permit);
        let start = Instant::now();
        let permit = p
            .acquire(&k, "*", Duration::ZERO, None)
            .await
            .expect("after pause");
        assert!(start.elapsed() >= Duration::from_secs(3) - Duration::from_millis(1));
        permit.origin_answered(503, None);
        drop(permit);
        let start = Instant::now();
        let permit = p
            .acquire(&k, "*", Duration::ZERO, None)
            .await
            .expect("after backoff");
        assert_eq!(start.elapsed(), Duration::from_secs(1));
        permit.origin_answered(200, None);
    }

    #[tokio::test(start_paused = true)]
    async fn the_wait_bound_holds_when_backoff_grows_meanwhile() {
        let p = std::sync::Arc::new(Pacer::new(PacingConfig {
            max_wait_seconds: crate::config::Seconds(3.0),
            ..PacingConfig::default()
        }));
        let k = schedules();
        let first = p
            .acquire(&k, "*", Duration::from_secs(1), None)
            .await
            .expect("first");
        // Admitted: one delay (1 s) after `first` ends is within the bound.
        let second = tokio::spawn({
            let p = p.clone();
            let k = k.clone();
            async move { p.acquire(&k, "*", Duration::from_secs(1), None).await }
        });
        tokio::task::yield_now().await;
        // The origin then answers 503 three times over: backoff 1 → 2 → 4 → 8 s.
        for _ in 0..4 {
            first.origin_answered(503, None);
        }
        let start = Instant::now();
        drop(first);
        let refused = second.await.expect("task").err().expect("refused");
        assert_eq!(refused.reason, RefusalReason::WaitTooLong);
        assert_eq!(
            start.elapsed(),
            Duration::ZERO,
            "refused at once, not after 8 s"
        );
        assert_eq!(p.queued(), 0);
    }
}
