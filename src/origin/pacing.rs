//! Pacing: every origin is visited no faster than its robots.txt allows (SPEC §6).
//!
//! A *schedule* exists per origin and robots.txt group: crawlers that fall into the same
//! group share it, crawlers in different groups have their own. Crawl-delay is the
//! minimum time from the **end** of one download to the **start** of the next, so a
//! schedule lets one request through at a time:
//!
//! 1. An arriving request estimates its wait (time until the next slot, plus one delay
//!    per request ahead of it). Past `max_wait`, or with `max_queue` requests already
//!    waiting, it is refused at once (503 + `Retry-After`): memory never grows unbounded.
//! 2. Otherwise it queues for the schedule's turn. `tokio::sync::Mutex` hands the turn out
//!    in arrival order (FIFO) and a waiter that is dropped — its client went away —
//!    leaves the queue without a trace.
//! 3. Holding the turn, it sleeps until `previous end + delay` (and past any pause the
//!    origin asked for), then goes upstream. The turn is held in a [`Permit`] until the
//!    response has been fully sent; dropping the permit records the end time.
//!
//! With no delay in force (no Crawl-delay, floor 0, no backoff or pause) a schedule does
//! not serialise anything: requests go upstream concurrently.
//!
//! The delay is `max(floor, Crawl-delay, backoff)`, capped by `ceiling` (a larger
//! Crawl-delay is clamped and logged, never turned into "disallow all"), plus a small
//! `margin` (5 ms) so that timer and scheduling jitter never shows at the origin as a gap
//! below the delay. An origin's 429
//! or 503 with `Retry-After` pauses its schedules until then; without it the backoff
//! doubles (up to the ceiling); a success halves it again. The robots.txt fetch counts as
//! a request on every schedule of its origin: the first page follows it by one delay.
//!
//! An origin's schedules ([`Schedules`]) live in its entry of the origin store
//! (`origin::store`), beside its robots.txt: a request finds both with one lookup, and
//! the schedules go when the entry does. [`Pacer`] holds the settings and the
//! process-wide count of queued requests.
//!
//! **Backends.** Alone, an instance keeps its schedules in memory (above). In fleet mode
//! ([`crate::origin::fleet`]) a request with a limit in force takes its turn from the
//! shared schedule in Redis instead, so the delay holds across every instance; the local
//! schedule still counts the request (eviction, gauges) and mirrors the origin's pauses
//! published by the other instances. A request with no limit in force never touches
//! Redis. While Redis is unavailable, `fleet.on_unavailable` decides: refuse (503), or
//! pace locally at `delay × fleet.instances`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::config::{seconds, OnUnavailable, PacingConfig};
use crate::origin::fleet::{Fleet, FleetTurn, NoTurn, ScheduleKeys};
use crate::policy::target::Origin;

#[derive(Debug, Default)]
struct Timing {
    /// When the last request (or robots.txt fetch) on this schedule ended.
    last_end: Option<Instant>,
    /// The origin asked for a pause (429/503 + Retry-After) until then.
    paused_until: Option<Instant>,
    /// Extra delay from 429/503 without Retry-After; doubles, decays on success.
    backoff: Duration,
    /// The delay in force, for the wait estimate of newcomers.
    delay: Duration,
}

impl Timing {
    /// Is anything in force that spaces requests (a delay, a backoff, a pause)?
    fn limited(&self, now: Instant) -> bool {
        !self.delay.max(self.backoff).is_zero() || self.paused_until.is_some_and(|u| u > now)
    }

    /// The remaining pause the origin asked for, else the backoff in force.
    fn backed_off_for(&self, now: Instant) -> Option<Duration> {
        self.paused_until
            .map(|until| until.saturating_duration_since(now))
            .filter(|p| !p.is_zero())
            .or((!self.backoff.is_zero()).then_some(self.backoff))
    }
}

struct Schedule {
    /// The robots.txt group, and the origin (`scheme://authority`): its shared keys.
    group: String,
    origin: Arc<str>,
    turn: Arc<tokio::sync::Mutex<()>>,
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
        ScheduleKeys::new(&self.origin, &self.group)
    }

    /// Holding the turn: sleeps until the next start is due (the previous end plus the
    /// delay, past any pause; re-read on waking, as backoff may grow meanwhile). `Err`
    /// carries the start when it would come after `deadline`.
    async fn sleep_until_due(&self, deadline: Instant) -> Result<(), Instant> {
        loop {
            let wake = next_start(&lock(&self.timing));
            match wake {
                Some(at) if at > deadline => return Err(at),
                Some(at) if at > Instant::now() => tokio::time::sleep_until(at).await,
                _ => return Ok(()),
            }
        }
    }
}

/// The pacing schedules of one origin, one per robots.txt group seen (usually one): the
/// pacing half of an origin's entry.
#[derive(Default)]
pub struct Schedules {
    origin: Arc<str>,
    list: Mutex<Vec<Arc<Schedule>>>,
}

impl Schedules {
    /// The schedules of `origin`, none made yet.
    pub fn new(origin: &Origin) -> Schedules {
        Schedules {
            origin: origin.to_string().into(),
            list: Mutex::default(),
        }
    }

    /// The schedule of `group`, made on first use.
    fn get(&self, group: &str, total: &Arc<AtomicUsize>) -> Arc<Schedule> {
        let mut list = lock(&self.list);
        if let Some(found) = list.iter().find(|s| s.group == group) {
            return found.clone();
        }
        let schedule = Arc::new(Schedule {
            group: group.to_string(),
            origin: self.origin.clone(),
            turn: Arc::new(tokio::sync::Mutex::new(())),
            timing: Mutex::new(Timing::default()),
            pending: AtomicUsize::new(0),
            total: total.clone(),
        });
        list.push(schedule.clone());
        schedule
    }

    /// Does a request wait for or hold a turn here? (Such an origin is never evicted.)
    pub fn busy(&self) -> bool {
        lock(&self.list)
            .iter()
            .any(|s| s.pending.load(Ordering::Acquire) > 0)
    }

    /// Applies a pause or backoff another instance published for `group`, so that this
    /// instance knows a limit is in force (and asks the shared schedule).
    pub fn mirror(&self, group: &str, pause: Duration, backoff: Duration) {
        if let Some(schedule) = lock(&self.list).iter().find(|s| s.group == group) {
            let mut t = lock(&schedule.timing);
            let until = Instant::now() + pause;
            t.paused_until = Some(t.paused_until.map_or(until, |p| p.max(until)));
            t.backoff = backoff;
        }
    }

    /// Each schedule as the admin API shows it.
    pub fn states(&self) -> Vec<ScheduleState> {
        let now = Instant::now();
        lock(&self.list)
            .iter()
            .map(|s| {
                let t = lock(&s.timing);
                ScheduleState {
                    group: s.group.clone(),
                    delay: t.delay,
                    backoff: t.backoff,
                    queued: s.pending.load(Ordering::Acquire),
                    next_slot_in: next_start(&t).map(|at| at.saturating_duration_since(now)),
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

/// What a [`Permit`] holds.
enum Turn {
    /// Nothing: no limit in force, requests run concurrently.
    Free,
    /// The local schedule's one turn.
    Local {
        _turn: tokio::sync::OwnedMutexGuard<()>,
    },
    /// The shared schedule's turn (fleet mode).
    Shared(Box<FleetTurn>),
}

/// Leave to go upstream, held until the response has been sent. On a paced schedule it
/// is the schedule's one turn (local, or fleet-wide); with no delay in force it holds
/// nothing (requests run concurrently) but still carries the origin's answer back to
/// the schedule.
pub struct Permit {
    schedule: Arc<Schedule>,
    turn: Turn,
    /// In fleet mode, where an unpaced request's 429/503 is reported.
    fleet: Option<Arc<Fleet>>,
    /// How long the request waited for its slot.
    pub waited: Duration,
    ceiling: Duration,
}

impl Permit {
    /// Tells the schedule how the origin answered (429/503 back off, success decays).
    pub fn origin_answered(&self, status: u16, retry_after: Option<Duration>) {
        {
            let mut t = lock(&self.schedule.timing);
            match (status, retry_after) {
                (429 | 503, Some(wait)) => {
                    let until = Instant::now() + wait.min(self.ceiling);
                    t.paused_until = Some(t.paused_until.map_or(until, |p| p.max(until)));
                }
                (429 | 503, None) => {
                    let base = t.delay.max(Duration::from_secs(1));
                    t.backoff = (t.backoff * 2).max(base).min(self.ceiling);
                }
                _ => t.backoff /= 2,
            }
        }
        match (&self.turn, &self.fleet) {
            (Turn::Shared(turn), _) => turn.origin_answered(status, retry_after),
            (Turn::Free, Some(fleet)) if matches!(status, 429 | 503) => {
                fleet.report(self.schedule.keys(), status, retry_after, self.ceiling)
            }
            _ => {}
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        lock(&self.schedule.timing).last_end = Some(Instant::now());
        match std::mem::replace(&mut self.turn, Turn::Free) {
            Turn::Free => return,
            Turn::Local { .. } => {}
            Turn::Shared(turn) => turn.release(self.ceiling),
        }
        self.schedule.dequeue();
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
    /// The robots.txt group (its first agent name; empty: none or `*`).
    pub group: String,
    pub delay: Duration,
    pub backoff: Duration,
    /// Requests waiting for or holding the turn (on this instance).
    pub queued: usize,
    /// Until the next request may start (zero: now).
    pub next_slot_in: Option<Duration>,
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
    _held: Vec<Permit>,
}

/// When a schedule's holder may start: the previous end plus the delay in force, and
/// past any pause the origin asked for.
fn next_start(t: &Timing) -> Option<Instant> {
    let effective = t.delay.max(t.backoff);
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

    fn permit(&self, schedule: Arc<Schedule>, turn: Turn, waited: Duration) -> Permit {
        Permit {
            schedule,
            turn,
            fleet: self.fleet.clone(),
            waited,
            ceiling: self.config.ceiling_seconds.duration(),
        }
    }

    /// Waits for the turn of every one of an origin's `schedules`, for a robots.txt
    /// fetch. `None` when they are not all free within `max_wait_seconds` (a long pause,
    /// a long queue): the caller then postpones the fetch rather than jump the queue.
    pub async fn turns_for_fetch(&self, schedules: &Schedules) -> Option<FetchTurns> {
        let mut list: Vec<Arc<Schedule>> = lock(&schedules.list).clone();
        // One order for every fetch of the origin (only one runs at a time anyway).
        list.sort_by(|a, b| a.group.cmp(&b.group));
        let now = Instant::now();
        let deadline = now + self.config.max_wait_seconds.duration();
        let mut held = Vec::new();
        for schedule in list {
            let limited = lock(&schedule.timing).limited(now);
            if let (true, Some(fleet)) = (limited, &self.fleet) {
                let shared = fleet
                    .acquire(
                        &schedule.keys(),
                        None,
                        usize::MAX,
                        self.config.max_wait_seconds.duration(),
                    )
                    .await;
                match shared {
                    Ok(Ok(turn)) => {
                        schedule.enqueue();
                        held.push(self.permit(
                            schedule,
                            Turn::Shared(Box::new(turn)),
                            Duration::ZERO,
                        ));
                        continue;
                    }
                    Ok(Err(_)) => return None,
                    Err(_) => crate::telemetry::metrics::record_fleet_fallback("local"),
                }
            }
            let turn = self.local_turn(&schedule, deadline).await.ok()?;
            held.push(self.permit(schedule, Turn::Local { _turn: turn }, Duration::ZERO));
        }
        Some(FetchTurns { _held: held })
    }

    /// Queues for the local turn of `schedule`, then sleeps out its delay. `Err` carries
    /// the start when it would come after `deadline`.
    async fn local_turn(
        &self,
        schedule: &Schedule,
        deadline: Instant,
    ) -> Result<tokio::sync::OwnedMutexGuard<()>, Instant> {
        schedule.enqueue();
        let mut waiting = Waiting(schedule, false);
        let turn = tokio::time::timeout_at(deadline, schedule.turn.clone().lock_owned())
            .await
            .map_err(|_| deadline)?;
        schedule.sleep_until_due(deadline).await?;
        waiting.1 = true;
        Ok(turn)
    }

    /// The delay for `group`'s schedule among `schedules` (of `origin`, for the log),
    /// given the robots.txt Crawl-delay (seconds).
    pub fn delay_for(
        &self,
        schedules: &Schedules,
        origin: &Origin,
        group: &str,
        crawl_delay: Option<f64>,
    ) -> Duration {
        // Clamped as numbers first: a `Crawl-delay: 1e20` is the ceiling, never a value
        // that overflows a conversion (which once fell back to zero: no pacing at all).
        let (floor, ceiling) = (
            self.config.floor_seconds.get(),
            self.config.ceiling_seconds.get(),
        );
        let asked_seconds = crawl_delay.filter(|d| !d.is_nan()).unwrap_or(0.0);
        let delay = seconds(asked_seconds.max(floor).min(ceiling));
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
                .iter()
                .find(|s| s.group == group)
                .is_some_and(|s| lock(&s.timing).delay == delay)
        };
        if asked_seconds > self.config.ceiling_seconds.get() && !already_clamped() {
            log::warn!(
                "Crawl-delay {asked_seconds:.1} s of {origin} (group {group}) is above the ceiling; pacing at {:.1} s",
                ceiling.as_secs_f64()
            );
        }
        delay
    }

    /// Waits for the schedule's next slot; `Err` when the wait would be too long or the
    /// queue is full. `robots_fetched_at` is when the origin's robots.txt was last
    /// fetched: that fetch counts as the schedule's previous request.
    pub async fn acquire(
        &self,
        schedules: &Schedules,
        group: &str,
        delay: Duration,
        robots_fetched_at: Option<Instant>,
    ) -> Result<Permit, Refused> {
        let schedule = schedules.get(group, &self.total);
        let now = Instant::now();
        let (limited, backed_off_for) = {
            let mut t = lock(&schedule.timing);
            if let Some(fetched) = robots_fetched_at {
                t.last_end = Some(t.last_end.map_or(fetched, |e| e.max(fetched)));
            }
            t.delay = delay;
            (t.limited(now), t.backed_off_for(now))
        };
        // No delay, no backoff, no pause: pacing is off, requests run concurrently.
        if !limited {
            return Ok(self.permit(schedule, Turn::Free, Duration::ZERO));
        }
        let mut delay = delay;
        if let Some(fleet) = &self.fleet {
            match self
                .acquire_shared(fleet, &schedule, delay, backed_off_for)
                .await
            {
                Ok(result) => return result,
                Err(action) => {
                    crate::telemetry::metrics::record_fleet_fallback(match action {
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
                    // Alone, each of N instances keeps N delays: the fleet keeps one.
                    delay = delay.saturating_mul(fleet.config().instances);
                    lock(&schedule.timing).delay = delay;
                }
            }
        }
        self.acquire_local(schedule, now, backed_off_for).await
    }

    /// The turn of the shared schedule; `Err` (what `fleet.on_unavailable` says) when
    /// Redis cannot be asked.
    async fn acquire_shared(
        &self,
        fleet: &Arc<Fleet>,
        schedule: &Arc<Schedule>,
        delay: Duration,
        backed_off_for: Option<Duration>,
    ) -> Result<Result<Permit, Refused>, OnUnavailable> {
        schedule.enqueue();
        let mut waiting = Waiting(schedule, false);
        let shared = fleet
            .acquire(
                &schedule.keys(),
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
                let waited = turn.waited;
                Ok(self.permit(schedule.clone(), Turn::Shared(Box::new(turn)), waited))
            }
            Err(NoTurn::QueueFull(estimate)) => Err(refused(RefusalReason::QueueFull, estimate)),
            Err(NoTurn::WaitTooLong(estimate)) => {
                Err(refused(RefusalReason::WaitTooLong, estimate))
            }
        })
    }

    /// The turn of the local schedule, within the queue and wait bounds.
    async fn acquire_local(
        &self,
        schedule: Arc<Schedule>,
        now: Instant,
        backed_off_for: Option<Duration>,
    ) -> Result<Permit, Refused> {
        let estimate = {
            let t = lock(&schedule.timing);
            let next_slot =
                next_start(&t).map_or(Duration::ZERO, |at| at.saturating_duration_since(now));
            let ahead = schedule.pending.load(Ordering::Acquire) as u32;
            next_slot + t.delay.max(t.backoff) * ahead
        };
        let retry_after = estimate.max(Duration::from_secs(1));
        if schedule.pending.load(Ordering::Acquire) >= self.config.max_queue {
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
        let deadline = now + self.config.max_wait_seconds.duration();
        let turn = self
            .local_turn(&schedule, deadline)
            .await
            .map_err(|at| Refused {
                reason: RefusalReason::WaitTooLong,
                retry_after: at
                    .saturating_duration_since(now)
                    .max(Duration::from_secs(1)),
                backed_off_for,
            })?;
        Ok(self.permit(schedule, Turn::Local { _turn: turn }, now.elapsed()))
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
            p.delay_for(&k, &origin(), "*", None),
            Duration::from_millis(200)
        );
        assert_eq!(
            p.delay_for(&k, &origin(), "*", Some(4.5)),
            Duration::from_millis(4500)
        );
        assert_eq!(
            p.delay_for(&k, &origin(), "*", Some(86_400.0)),
            Duration::from_secs(30)
        );
        assert_eq!(
            p.delay_for(&k, &origin(), "*", Some(1e20)),
            Duration::from_secs(30)
        );
        assert_eq!(
            p.delay_for(&k, &origin(), "*", Some(f64::MAX)),
            Duration::from_secs(30)
        );
        assert_eq!(
            p.delay_for(&k, &origin(), "*", Some(f64::INFINITY)),
            Duration::from_secs(30)
        );
        // The default margin is added to non-zero delays only.
        let p = Pacer::new(PacingConfig::default());
        assert_eq!(p.delay_for(&k, &origin(), "*", None), Duration::ZERO);
        assert_eq!(
            p.delay_for(&k, &origin(), "*", Some(0.5)),
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
            let got = p.delay_for(&schedules(), &origin(), "*", Some(d)).as_secs_f64();
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
