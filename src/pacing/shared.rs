//! The shared backend of pacing: an origin's schedules in Redis, so that delays and
//! in-flight limits hold across every instance of a fleet.
//!
//! **Keys.** Every key of an origin carries the origin as its hash tag
//! (`rg:{https://example.com:443}:…`), so each script touches one Cluster slot:
//!
//! * `…:s:<group>` — the group's schedule (hash): the last end, the origin's pause,
//!   backoff and adaptive slow-down, the delay in force, the holder of the group's turn
//!   and its lease; kept `KEEP` after last use (plus any pause), and only written
//!   once something is in force there (most origins never have one);
//! * `…:f` — the origin's in-flight turns (sorted set: ticket → lease end);
//! * `…:q:<group>`, `…:x:<group>` — the group's queue (tickets by arrival: FIFO across
//!   instances) and each ticket's expiry: a waiter's own deadline, shortened to its due
//!   time plus [`GRACE`] once it heads the queue, or once the turn is free and another
//!   ticket asks for it (a live head asks at least every [`POLL`]): a dead instance's
//!   ticket is dropped then, lazily, by the next call that meets it.
//!
//! **Calls.** A request takes every turn it needs on an origin in one `ACQUIRE`
//! (scripts in `scripts/*.lua`): the group's turn when a delay or pause is in force,
//! and an in-flight turn; `RELEASE` at the exchange's end records the end, applies the
//! origin's answer (Retry-After, backoff, slow-down) and wakes the next in line. A
//! request that does not wait makes two calls; one that waits makes one more per
//! wake-up. A waiter sleeps until its wake-up or its due time (Pub/Sub on the waiter's
//! own instance channel: one delivery per wake-up, whatever the fleet's size), falling
//! back to asking again after [`POLL`] behind a holder whose release never comes.
//! Costs: `ACQUIRE` runs 6–12 commands, `RELEASE` 5–9, none of them a scan.
//!
//! **Failures.** Every `ACQUIRE` carries a fence, the Redis time past which its caller
//! no longer waits for it (`Fleet::fence`): a call delayed in a stalled Redis does
//! nothing when it finally runs. It also carries what the caller knows that Redis may
//! have lost (its last end there, the pause and backoff it saw), which the script never
//! goes below; a schedule with a delay in force and no record at all starts its delay
//! from now. The [`Ledger`] keeps this instance's held turns and unacknowledged
//! releases, and replays them when the backend returns.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use redis::{Script, ScriptInvocation};
use tokio::time::Instant;

use crate::pacing::backend::{lock, ms, Fleet, Unavailable, CHANNEL, REPLAY_FOR, WAKE_PREFIX};

/// A waiter behind a holder asks again this often (the fallback when a release never
/// comes: its holder's instance died or lost Redis).
pub const POLL: Duration = Duration::from_millis(2_000);
/// A queue's head is kept this long past its due time for its instance to claim it.
pub const GRACE: Duration = Duration::from_millis(3_000);
/// How long a schedule's keys outlive their last use.
const KEEP: Duration = Duration::from_secs(86_400);

static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/acquire.lua")));
static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/release.lua")));
static ABANDON: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/abandon.lua")));
static REASSERT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/reassert.lua")));
/// This process's ledger.
static LEDGER: LazyLock<Ledger> = LazyLock::new(Ledger::default);
/// Has the replay of [`LEDGER`] on the backend's returns been started?
static FOLLOWING: std::sync::Once = std::sync::Once::new();

/// Starts replaying [`LEDGER`] each time `fleet` returns (once per process).
fn follow_returns(fleet: &Arc<Fleet>) {
    FOLLOWING.call_once(|| {
        let (fleet, mut returns) = (fleet.clone(), fleet.returns());
        fleet.clone().spawn(async move {
            while returns.changed().await.is_ok() {
                LEDGER.replay(&fleet).await;
            }
        });
    });
}

static VIEW: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("scripts/view.lua")));

/// The Redis names of one shared schedule (origin and robots.txt group).
#[derive(Clone, Debug)]
pub struct ScheduleKeys {
    schedule: String,
    in_flight: String,
    queue: String,
    expiry: String,
    robots: String,
    group: String,
    origin: String,
}

impl ScheduleKeys {
    /// `script` with the four keys `ACQUIRE`, `RELEASE` and `ABANDON` begin with:
    /// schedule, in-flight holders, queue, queue expiry.
    fn invoke<'a>(&self, script: &'a Script) -> ScriptInvocation<'a> {
        let mut invocation = script.prepare_invoke();
        invocation
            .key(&self.schedule)
            .key(&self.in_flight)
            .key(&self.queue)
            .key(&self.expiry);
        invocation
    }

    /// The place the schedule paces (an origin, or an address).
    pub fn place(&self) -> &str {
        &self.origin
    }

    /// The keys of `group`'s schedule on `origin` (`scheme://authority`).
    pub fn new(origin: &str, group: &str) -> ScheduleKeys {
        let base = format!("rg:{{{origin}}}");
        ScheduleKeys {
            schedule: format!("{base}:s:{group}"),
            in_flight: format!("{base}:f"),
            queue: format!("{base}:q:{group}"),
            expiry: format!("{base}:x:{group}"),
            robots: format!("{base}:r"),
            group: group.to_string(),
            origin: origin.to_string(),
        }
    }
}

/// How a shared pacing request ended when it got no turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoTurn {
    /// `max_queue` requests already wait, fleet-wide.
    QueueFull(Duration),
    /// The wait would pass `max_wait_seconds` (the estimate, or the real wait).
    WaitTooLong(Duration),
}

/// What an instance knows of a schedule that Redis may have lost; the script never
/// goes below it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Known {
    /// This instance's last end on the schedule.
    pub last_end: Option<Instant>,
    /// The end of the pause it saw.
    pub paused_until: Option<Instant>,
    /// The backoff it saw.
    pub backoff: Duration,
}

/// What was in force on a shared schedule at the last call (for the local mirror).
#[derive(Clone, Copy, Debug, Default)]
pub struct InForce {
    /// The origin's pause, still to run.
    pub pause_left: Duration,
    /// The backoff after 429/5xx without Retry-After.
    pub backoff: Duration,
    /// The adaptive slow-down, as the last instance to hear the origin set it.
    pub slow_down: Duration,
}

/// One request for turns on a shared schedule.
pub struct Ask {
    /// Whose.
    pub keys: Arc<ScheduleKeys>,
    /// The origin's in-flight limit (0: none).
    pub capacity: usize,
    /// The delay in force (`None`: the schedule's own, as a robots.txt fetch asks).
    pub delay: Option<Duration>,
    /// Tickets allowed to wait, fleet-wide.
    pub max_queue: usize,
    /// The longest wait.
    pub max_wait: Duration,
    /// What this instance knows.
    pub known: Known,
}

/// A fleet-wide schedule as the admin API shows it.
#[derive(Clone, Debug)]
pub struct SharedSchedule {
    /// The ticket holding the group's turn (`<instance>:<n>`), if any.
    pub holder: Option<String>,
    /// In-flight turns held at the origin.
    pub holding: u64,
    /// Requests queued across the fleet.
    pub queued: u64,
}

/// The origin's answer, given to the schedule at release.
#[derive(Clone, Copy, Debug, Default)]
struct Acquired {
    status: u16,
    retry_after: Option<Duration>,
    slow_down: Option<Duration>,
}

/// A call this instance owes Redis (a release, or the abandoning of a ticket whose
/// fate it never learnt), sent again when the backend returns.
#[derive(Clone)]
struct Owed {
    keys: Arc<ScheduleKeys>,
    ticket: String,
    /// `None`: abandon.
    answer: Option<Acquired>,
    ceiling: Duration,
    at: Instant,
    acknowledged: bool,
}

/// A turn this instance holds in Redis.
#[derive(Clone)]
struct Holding {
    keys: Arc<ScheduleKeys>,
    group_turn: bool,
    in_flight: bool,
    lease_ends: Instant,
}

/// This instance's part of the shared state that Redis may lose: the turns it holds and
/// the calls it owes (releases not yet acknowledged, and those of the last
/// [`REPLAY_FOR`]). Replayed, in that order, each time the backend returns. One per
/// process ([`LEDGER`]): a process has one fleet backend.
#[derive(Default)]
pub struct Ledger {
    held: Mutex<HashMap<String, Holding>>,
    owed: Mutex<VecDeque<Owed>>,
}

impl Owed {
    /// A call owed now, not yet acknowledged.
    fn new(
        keys: Arc<ScheduleKeys>,
        ticket: &str,
        answer: Option<Acquired>,
        ceiling: Duration,
    ) -> Owed {
        Owed {
            keys,
            ticket: ticket.to_string(),
            answer,
            ceiling,
            at: Instant::now(),
            acknowledged: false,
        }
    }
}

impl Ledger {
    fn owe(&self, owed: Owed) {
        let mut list = lock(&self.owed);
        let now = Instant::now();
        while list
            .front()
            .is_some_and(|o| o.acknowledged && now.duration_since(o.at) > REPLAY_FOR)
        {
            list.pop_front();
        }
        // Bounded: an instance cut off from Redis for long refuses (or paces locally),
        // so few calls are owed; past this, the oldest are dropped (their leases end).
        if list.len() >= 65_536 {
            list.pop_front();
        }
        list.push_back(owed);
    }

    /// Writes again every held turn, then sends every owed call.
    pub(crate) async fn replay(&self, fleet: &Arc<Fleet>) {
        let now = Instant::now();
        let held: Vec<(String, Holding)> = lock(&self.held)
            .iter()
            .filter(|(_, h)| h.lease_ends > now)
            .map(|(t, h)| (t.clone(), h.clone()))
            .collect();
        for (ticket, h) in held {
            let _: Result<i64, _> = fleet
                .run(
                    "reassert",
                    REASSERT
                        .key(&h.keys.schedule)
                        .key(&h.keys.in_flight)
                        .arg(&ticket)
                        .arg(ms(h.lease_ends.saturating_duration_since(now)).max(1))
                        .arg(u8::from(h.group_turn))
                        .arg(u8::from(h.in_flight))
                        .arg(ms(KEEP)),
                )
                .await;
        }
        let owed: Vec<Owed> = lock(&self.owed)
            .iter()
            .filter(|o| !o.acknowledged || now.duration_since(o.at) <= REPLAY_FOR)
            .cloned()
            .collect();
        for o in owed {
            // An acknowledged call is replayed without its answer: its pause or backoff
            // reached Redis already (or is carried by the next acquire's `Known`); only
            // the end and the turns count. One never acknowledged applies it now (a
            // pause from now, later than the real one).
            let replay = Owed {
                answer: o.answer.map(|a| {
                    if o.acknowledged {
                        Acquired::default()
                    } else {
                        a
                    }
                }),
                ..o
            };
            let _ = fleet.send(&replay).await;
        }
    }
}

/// A ticket in a shared queue; leaving without the turn (refused, timed out, client
/// gone) gives up whatever it holds or waits for, and wakes whoever is next.
struct Queued<'a> {
    fleet: &'a Arc<Fleet>,
    keys: &'a Arc<ScheduleKeys>,
    ticket: &'a str,
    granted: bool,
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.fleet.unregister_waiter(self.ticket);
        if self.granted {
            return;
        }
        let owed = Owed::new(self.keys.clone(), self.ticket, None, Duration::ZERO);
        let fleet = self.fleet.clone();
        self.fleet.spawn(async move { fleet.settle(owed).await });
    }
}

/// The turns of a shared schedule held for one exchange. Their lease, set when they
/// were granted, already covers the longest a turn can be held, so a live holder never
/// renews it (a holder cut off from Redis cannot) and a dead one frees it when the
/// lease runs out; [`SharedTurn::release`] at the exchange's end frees them and reports
/// the origin's answer.
pub struct SharedTurn {
    fleet: Arc<Fleet>,
    keys: Arc<ScheduleKeys>,
    ticket: String,
    answered: Mutex<Option<Acquired>>,
}

impl SharedTurn {
    /// Records the origin's answer (and the adaptive slow-down this instance now
    /// wants, if it changed), applied to the shared schedule at release.
    pub fn origin_answered(
        &self,
        status: u16,
        retry_after: Option<Duration>,
        slow_down: Option<Duration>,
    ) {
        *lock(&self.answered) = Some(Acquired {
            status,
            retry_after,
            slow_down,
        });
    }

    /// Releases the turns (at the exchange's end); `ceiling` caps a pause or backoff.
    pub fn release(self, ceiling: Duration) {
        lock(&LEDGER.held).remove(&self.ticket);
        let answer = Some(lock(&self.answered).unwrap_or_default());
        let owed = Owed::new(self.keys.clone(), &self.ticket, answer, ceiling);
        let fleet = self.fleet.clone();
        self.fleet.spawn(async move { fleet.settle(owed).await });
    }
}

impl Fleet {
    /// A turn that the owner of an origin took from its local schedule during an outage
    /// (`outage`): written into the ledger like a granted one, so that the backend's
    /// return writes it back (still held) or its end (given back). `group_turn`: the
    /// group's turn, else an in-flight one.
    pub(crate) fn record_local_turn(
        self: &Arc<Self>,
        keys: Arc<ScheduleKeys>,
        group_turn: bool,
    ) -> SharedTurn {
        let ticket = self.ticket();
        self.hold(keys, ticket, group_turn, !group_turn)
    }

    /// The turns this instance holds from now under `ticket`, kept in the ledger (and
    /// written again on each return of the backend) until released.
    fn hold(
        self: &Arc<Self>,
        keys: Arc<ScheduleKeys>,
        ticket: String,
        group_turn: bool,
        in_flight: bool,
    ) -> SharedTurn {
        follow_returns(self);
        lock(&LEDGER.held).insert(
            ticket.clone(),
            Holding {
                keys: keys.clone(),
                group_turn,
                in_flight,
                lease_ends: Instant::now() + self.lease,
            },
        );
        SharedTurn {
            fleet: self.clone(),
            keys,
            ticket,
            answered: Mutex::new(None),
        }
    }

    /// Waits for the turns `ask` needs. `Ok((Err(_), _))` is a refusal, as a single
    /// instance would give it; the [`InForce`] is what the schedule showed last.
    pub async fn acquire(
        self: &Arc<Self>,
        ask: Ask,
    ) -> Result<(Result<SharedTurn, NoTurn>, InForce), Unavailable> {
        let started = Instant::now();
        let deadline = started + ask.max_wait;
        let ticket = self.ticket();
        let wake = self.register_waiter(&ticket);
        let keys = ask.keys;
        let mut queued = Queued {
            fleet: self,
            keys: &keys,
            ticket: &ticket,
            granted: false,
        };
        let delay_ms = ask.delay.map_or(-1, ms);
        let own_deadline = self.redis_time_of(deadline).ok_or(Unavailable)?;
        loop {
            let fence = self.fence().ok_or(Unavailable)?;
            // Relative to the moment of each call: the script reads them against `TIME`.
            let now = Instant::now();
            let known = ask.known;
            let since_end = known
                .last_end
                .map_or(-1, |e| ms(now.saturating_duration_since(e)));
            let pause_left = known
                .paused_until
                .map_or(0, |u| ms(u.saturating_duration_since(now)));
            let (state, wait_ms, now, pause, backoff, slow, group_turn): (
                String,
                i64,
                i64,
                i64,
                i64,
                i64,
                i64,
            ) = self
                .run(
                    "acquire",
                    keys.invoke(&ACQUIRE)
                        .key(&keys.robots)
                        .arg(&ticket)
                        .arg(fence)
                        .arg(delay_ms)
                        .arg(ask.capacity)
                        .arg(ms(self.lease))
                        .arg(ask.max_queue)
                        .arg(ms(ask.max_wait))
                        .arg(ms(GRACE))
                        .arg(ms(KEEP))
                        .arg(own_deadline)
                        .arg(WAKE_PREFIX)
                        .arg(since_end)
                        .arg(pause_left)
                        .arg(ms(known.backoff)),
                )
                .await?;
            self.saw_redis_time(now);
            let in_force = InForce {
                pause_left: Duration::from_millis(pause.max(0) as u64),
                backoff: Duration::from_millis(backoff.max(0) as u64),
                slow_down: Duration::from_millis(slow.max(0) as u64),
            };
            let estimate = Duration::from_millis(wait_ms.max(0) as u64);
            match state.as_str() {
                "go" => {
                    queued.granted = true;
                    let turn = self.hold(
                        keys.clone(),
                        ticket.clone(),
                        group_turn == 1,
                        ask.capacity > 0,
                    );
                    return Ok((Ok(turn), in_force));
                }
                "full" => return Ok((Err(NoTurn::QueueFull(estimate)), in_force)),
                "long" => return Ok((Err(NoTurn::WaitTooLong(estimate)), in_force)),
                "late" => return Err(Unavailable),
                _ => {}
            }
            let now = Instant::now();
            if now >= deadline {
                let retry = estimate.max(Duration::from_secs(1));
                return Ok((Err(NoTurn::WaitTooLong(retry)), in_force));
            }
            // The head sleeps until its turn is due; the others until a release wakes
            // them, or the next poll.
            let nap = if wait_ms >= 0 { estimate } else { POLL };
            let woken = tokio::time::timeout_at((now + nap).min(deadline), wake.notify.notified())
                .await
                .is_ok();
            // Woken by a release: the turn is due one delay after it; ask then, once.
            let due_in = wake.due_in_ms.swap(0, Ordering::AcqRel);
            if woken && due_in > 0 {
                let due = Instant::now() + Duration::from_millis(due_in as u64);
                tokio::time::sleep_until(due.min(deadline)).await;
            }
        }
    }

    /// Tells the shared schedule how the origin answered a request that held no turn
    /// (an unpaced 429/503): the pause or backoff then holds fleet-wide.
    pub fn report(
        self: &Arc<Self>,
        keys: Arc<ScheduleKeys>,
        status: u16,
        retry_after: Option<Duration>,
        ceiling: Duration,
    ) {
        let answer = Acquired {
            status,
            retry_after,
            slow_down: None,
        };
        let owed = Owed::new(keys, "-", Some(answer), ceiling);
        let fleet = self.clone();
        self.spawn(async move {
            let _ = fleet.send(&owed).await;
        });
    }

    /// Sends an owed call once; kept in the ledger (acknowledged or not) for replay.
    async fn settle(self: Arc<Self>, mut owed: Owed) {
        owed.acknowledged = self.send(&owed).await.is_ok();
        LEDGER.owe(owed);
    }

    async fn send(self: &Arc<Self>, owed: &Owed) -> Result<i64, Unavailable> {
        let keys = &owed.keys;
        let Some(answer) = owed.answer else {
            return self
                .run(
                    "abandon",
                    keys.invoke(&ABANDON)
                        .arg(&owed.ticket)
                        .arg(WAKE_PREFIX)
                        .arg(ms(KEEP)),
                )
                .await;
        };
        self.run(
            "release",
            keys.invoke(&RELEASE)
                .arg(&owed.ticket)
                .arg(answer.status)
                .arg(answer.retry_after.map_or(-1, ms))
                .arg(ms(owed.ceiling))
                .arg(ms(KEEP))
                .arg(CHANNEL)
                .arg(&keys.group)
                .arg(&keys.origin)
                .arg(ms(GRACE))
                .arg(answer.slow_down.map_or(-1, ms))
                .arg(WAKE_PREFIX),
        )
        .await
    }

    /// Fleet-wide state of a schedule, for the admin API.
    pub async fn schedule(
        self: &Arc<Self>,
        keys: &ScheduleKeys,
    ) -> Result<SharedSchedule, Unavailable> {
        let (holder, holding, queued): (Option<String>, u64, u64) = self
            .run(
                "view",
                VIEW.key(&keys.schedule)
                    .key(&keys.in_flight)
                    .key(&keys.queue),
            )
            .await?;
        Ok(SharedSchedule {
            holder,
            holding,
            queued,
        })
    }
}
