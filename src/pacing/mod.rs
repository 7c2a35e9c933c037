//! Pacing: every origin is visited no faster than its robots.txt allows (SPEC §6), and
//! no harder than the operator allows when it says nothing.
//!
//! A *schedule* exists per origin and robots.txt group: crawlers that fall into the same
//! group share it, crawlers in different groups have their own. Crawl-delay is the
//! minimum time from the **end** of one download to the **start** of the next, so a
//! schedule with a delay in force lets one request through at a time:
//!
//! 1. An arriving request estimates its wait (time until the next start, plus one delay
//!    per request ahead of it). Past `max_wait`, or with `max_queue` requests already
//!    waiting, it is refused at once (503 + `Retry-After`): memory never grows unbounded.
//! 2. Otherwise it queues for the schedule's turn. A fair `tokio::sync::Semaphore` hands
//!    turns out in arrival order (FIFO) and a waiter that is dropped — its client went
//!    away — leaves the queue without a trace.
//! 3. Holding the turn, it sleeps until `previous end + delay` (and past any pause the
//!    origin asked for), then goes upstream. The turn is held in a [`Turns`] until the
//!    exchange with the origin has ended; dropping the turn records the end time.
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
//! **One pacer.** An instance alone and a fleet pace the same way: in fleet mode each
//! origin (or address) has one owner at a time (`crate::fleet`), which paces it here, in
//! memory; a new owner starts from what the previous one handed over
//! ([`Pacer::inherit`], [`Schedules::facts`]).
//!
//! **Its other files:** `facts.rs` (what a schedule's state is worth keeping when its
//! origin changes hands), `fetch_turns.rs` (the turns of a robots.txt fetch),
//! `local.rs` (an origin's schedules in this process's memory), `no_turn.rs` (why
//! pacing refused a request, and when to come back), `rules.rs` (what delay is in force
//! on a schedule and why).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::{seconds, AdaptiveConfig, PacingConfig};
use crate::pacing::local::{lock, Schedule, Waiting, IN_FLIGHT};
use crate::pacing::rules::SLOW_AT_LEAST;
use crate::policy::target::Origin;
use crate::telemetry::metrics;

mod facts;
mod fetch_turns;
mod local;
mod no_turn;
mod rules;

pub use facts::ScheduleFacts;
pub use fetch_turns::FetchTurns;
pub use local::{Place, ScheduleState, Schedules};
pub use no_turn::{Refused, TurnRefusal};
pub use rules::DelayRule;

/// A turn and its schedule; dropping it ends the request there (the end starts the
/// schedule's next delay) and hands the turn on.
struct HeldTurn {
    /// The schedule the turn is on.
    schedule: Arc<Schedule>,
    /// The turn: a share of the schedule's semaphore.
    _turn: tokio::sync::OwnedSemaphorePermit,
    /// An exchange may have used it (so it ended now); `false`: given back unused.
    used: bool,
}

impl Drop for HeldTurn {
    fn drop(&mut self) {
        if self.used {
            lock(&self.schedule.timing).last_end = Some(Instant::now());
        }
        self.schedule.dequeue();
    }
}

/// Leave to go upstream, held until the exchange has ended: the turns in force
/// (the group's when a delay is, the in-flight one, the address's). With nothing in
/// force it holds nothing but still carries the origin's answer back to the schedule.
pub struct Turns {
    /// The origin's group schedule: answers and response times go there.
    schedule: Arc<Schedule>,
    /// The turns held, released when this is dropped.
    held: Vec<HeldTurn>,
    /// An exchange may have used them (so they end when dropped); `false`: forgone.
    used: bool,
    /// The adaptive delay's settings.
    adaptive: AdaptiveConfig,
    /// How long the request waited for its turn.
    pub waited: Duration,
    /// When it got its turns (its response time counts from here).
    granted: Instant,
    /// `pacing.ceiling_seconds`: no wait is computed past it.
    ceiling: Duration,
}

impl Turns {
    /// Tells the schedule how the origin answered (429/5xx back off, success decays,
    /// response times feed the adaptive delay).
    pub fn origin_answered(&self, status: u16, retry_after: Option<Duration>) {
        self.origin_answered_read_late(status, retry_after, || Duration::ZERO);
    }

    /// The origin refused the request without working on it (an HTTP/2 stream refused,
    /// a GOAWAY that did not cover it): it backs the origin off as a 503 without
    /// `Retry-After` does, so a refusal slows robotsgate down, never the reverse.
    pub fn origin_refused(&self) {
        self.origin_answered(503, None);
    }

    /// [`Turns::origin_answered`] for a caller that can tell how long the response
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
    }

    /// Gives the turns back unused: no exchange was started with them (this instance
    /// turned out not to act for the origin), so the schedules' last end stays the last
    /// exchange's, and the next request is due when this one was.
    pub fn forgo(mut self) {
        self.used = false;
        for held in &mut self.held {
            held.used = false;
        }
    }

    /// The facts of the origin's group schedule now (its pause and backoff), for a
    /// fleet to keep when they change.
    pub fn facts(&self) -> ScheduleFacts {
        ScheduleFacts::of(&self.schedule)
    }
}

impl Drop for Turns {
    fn drop(&mut self) {
        if self.used {
            lock(&self.schedule.timing).last_end = Some(Instant::now());
        }
    }
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
    /// The rule that set the delay.
    pub rule: DelayRule,
    /// Requests in flight to the origin at once (0: no limit).
    pub max_in_flight: usize,
    /// When the origin's robots.txt was last fetched: that fetch counts as the
    /// schedule's previous request.
    pub robots_fetched_at: Option<Instant>,
}

/// Sets `group`'s delay and rule from `request`, and at the origin (`is_origin`) the
/// robots.txt fetch as its previous request.
fn timed(group: &Schedule, request: &PaceRequest<'_>, is_origin: bool) {
    let mut t = lock(&group.timing);
    if let Some(fetched) = request.robots_fetched_at.filter(|_| is_origin) {
        t.last_end = Some(t.last_end.map_or(fetched, |e| e.max(fetched)));
    }
    t.delay = request.delay;
    t.rule = request.rule;
}

/// The pacing settings and the process-wide count of queued requests.
pub struct Pacer {
    /// `pacing`.
    config: PacingConfig,
    /// Requests waiting for or holding a turn, over every schedule.
    total: Arc<AtomicUsize>,
}

impl Pacer {
    /// Pacing in memory with `config`.
    pub fn new(config: PacingConfig) -> Pacer {
        Pacer {
            config,
            total: Arc::default(),
        }
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

    /// The schedule of `group` at `place` (made with `capacity` turns when new).
    fn schedule(&self, place: Place<'_>, group: &str, capacity: usize) -> Arc<Schedule> {
        Schedules::get(place, group, capacity, &self.total)
    }

    /// A turn on `schedule`, held until dropped.
    fn held(&self, schedule: Arc<Schedule>, turn: tokio::sync::OwnedSemaphorePermit) -> HeldTurn {
        HeldTurn {
            schedule,
            _turn: turn,
            used: true,
        }
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
        let (delay, rule) = self.wanted(crawl_delay, override_delay);
        let asked_seconds = crawl_delay.filter(|d| !d.is_nan()).unwrap_or(0.0);
        let ceiling = self.config.ceiling_seconds.get();
        // Say so once per schedule, not on every request: a schedule already running at
        // the clamped delay has been reported.
        let already_clamped = || {
            lock(&schedules.list)
                .schedules
                .iter()
                .find(|s| s.group == group)
                .is_some_and(|s| lock(&s.timing).delay == delay)
        };
        if asked_seconds > ceiling && !already_clamped() {
            metrics::CRAWL_DELAYS_CLAMPED.inc();
            log::warn!(
                "Crawl-delay {asked_seconds:.1} s of {origin} (group {group}) is above the ceiling; pacing at {ceiling:.1} s"
            );
        }
        (delay, rule)
    }

    /// The delay a Crawl-delay (seconds) and an operator override (seconds, used when
    /// longer) come to, and the rule that set it: the longest of them and
    /// `pacing.floor_seconds`, at most `pacing.ceiling_seconds`, plus the margin.
    pub(crate) fn wanted(
        &self,
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
        let delay = if delay.is_zero() {
            delay
        } else {
            delay + self.config.margin_seconds.duration()
        };
        (delay, rule)
    }

    /// Report mode: the wait `request` would have had for its group's turn (an estimate:
    /// until the next start, plus one delay per request queued ahead), and turns that
    /// holds no turn but still carries the origin's answers to the schedule.
    pub fn report(&self, request: PaceRequest<'_>) -> (Turns, Duration) {
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
        (self.turns(schedule, Vec::new(), now), would_wait)
    }

    /// Sets the timing of `request`'s group schedule at its origin as its own
    /// [`Pacer::pace`] would (its delay and rule; the robots.txt fetch as its previous
    /// request), without taking a turn: a fetch made on its behalf (TDMRep's file), which
    /// takes every schedule's turn, then waits for that delay too.
    pub fn prime(&self, request: &PaceRequest<'_>) {
        timed(
            &self.schedule(request.place, request.group, 1),
            request,
            true,
        );
    }

    /// Waits for every turn in force for `request` (its group's when a delay is, then
    /// the in-flight one; then the address's); `Err` when a wait would be too long or a
    /// queue is full.
    pub async fn pace(&self, request: PaceRequest<'_>) -> Result<Turns, Refused> {
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
            timed(&group, &request, is_origin);
            self.local_turns(place, &group, request.max_in_flight, &mut held)
                .await?;
        }
        Ok(self.turns(schedule, held, started))
    }

    /// The local turns of one place: its group's when a delay is in force, then an
    /// in-flight one (`max_in_flight` turns). A request holding an in-flight turn never queues for a group
    /// turn (whose holder may be queued for an in-flight turn: a deadlock): one that
    /// came into force meanwhile is taken at once or not at all.
    async fn local_turns(
        &self,
        place: Place<'_>,
        group: &Arc<Schedule>,
        max_in_flight: usize,
        held: &mut Vec<HeldTurn>,
    ) -> Result<(), Refused> {
        // Set once the request gave an in-flight turn back: it was admitted, so it
        // queues again without a new estimate, within its first deadline.
        let mut admitted = None;
        loop {
            let group_turn = self.turn(group, 1, false, admitted).await?;
            let took_group = group_turn.is_some();
            if let Some(turn) = group_turn {
                held.push(self.held(group.clone(), turn));
            }
            if max_in_flight == 0 {
                return Ok(());
            }
            let in_flight = self.schedule(place, IN_FLIGHT, max_in_flight);
            let Some(turn) = self.turn(&in_flight, max_in_flight, true, admitted).await? else {
                return Ok(());
            };
            let in_flight_turn = self.held(in_flight, turn);
            // While it waited for an in-flight turn, the origin may have asked for a
            // delay (a slow or failing response): then it takes the group's turn if
            // it is free (and sleeps until due), or gives the in-flight turn back and
            // queues for the group's first.
            if took_group || !lock(&group.timing).limited(Instant::now()) {
                held.push(in_flight_turn);
                return Ok(());
            }
            // Each queue a request waits in is bounded by `max_wait` from when it
            // joined it (as a group turn taken after an in-flight one always was).
            let now = Instant::now();
            let deadline = now + self.config.max_wait_seconds.duration();
            let free = self.free_local_turn(group, deadline).await;
            if let Some(turn) = free.map_err(|at| Refused::comes_at(at, now, None))? {
                held.push(self.held(group.clone(), turn));
                held.push(in_flight_turn);
                return Ok(());
            }
            drop(in_flight_turn);
            admitted = Some(deadline);
        }
    }

    /// The turn for a request to `schedule` holding `held`, asked for at `started`.
    fn turns(&self, schedule: Arc<Schedule>, held: Vec<HeldTurn>, started: Instant) -> Turns {
        let granted = Instant::now();
        Turns {
            schedule,
            held,
            used: true,
            adaptive: self.config.adaptive.clone(),
            waited: granted.saturating_duration_since(started),
            granted,
            ceiling: self.config.ceiling_seconds.duration(),
        }
    }

    /// The local turn of one schedule when something is in force there (an in-flight
    /// schedule always is; `capacity` of its turns usable), `None` when nothing is.
    /// `admitted`: the request passed the queue and wait bounds already and must have
    /// its turn by then.
    async fn turn(
        &self,
        schedule: &Arc<Schedule>,
        capacity: usize,
        in_flight: bool,
        admitted: Option<Instant>,
    ) -> Result<Option<tokio::sync::OwnedSemaphorePermit>, Refused> {
        let now = Instant::now();
        let (limited, backed_off_for) = {
            let t = lock(&schedule.timing);
            (in_flight || t.limited(now), t.backed_off_for(now))
        };
        if !limited {
            return Ok(None);
        }
        self.local(schedule, capacity, now, backed_off_for, admitted)
            .await
            .map(Some)
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
        // Fewer turns than the schedule was made with (a request whose limit is lower
        // than the one the schedule was made for): each takes a larger share of them.
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
                reason: TurnRefusal::QueueFull,
                retry_after,
                backed_off_for,
            });
        }
        if estimate > self.config.max_wait_seconds.duration() {
            return Err(Refused {
                reason: TurnRefusal::WaitTooLong,
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
mod tests;
