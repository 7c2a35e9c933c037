//! Fleet mode: several robotsgate instances share their pacing and robots.txt through
//! Redis (one server or a Redis Cluster) and behave as one proxy.
//!
//! **What lives in Redis.** Every key of an origin carries the origin as its hash tag
//! (`rg:{https://example.com:443}:…`), so each script below touches one Cluster slot:
//!
//! * `…:s:<group>` — a pacing schedule (hash): the last end, the origin's pause and
//!   backoff, the delay in force; `…:h:<group>` — who holds its turns (sorted set by
//!   lease expiry; one turn for a robots.txt group, `max_in_flight` for the origin's
//!   in-flight schedule, `#in-flight`);
//! * `…:q:<group>` and `…:x:<group>` — its queue: tickets by arrival (sorted set, FIFO
//!   across instances) and each ticket's expiry (a waiter renews it at least every
//!   [`POLL`], the head of the queue when its turn is due; a ticket not renewed within
//!   [`TICKET_TTL`] of that — its instance died — is dropped);
//! * `…:r` — the raw robots.txt with its fetch state and a version number;
//! * `…:lock` — the fleet-wide robots.txt fetch lock (`SET NX PX`).
//!
//! **Clock.** Redis `TIME` is the only clock: every script reads it, and times cross the
//! wire only relative to it, so instances' clocks never meet.
//!
//! **Pacing** (scripts `ACQUIRE`, `RELEASE`, `CANCEL`). A request to an origin
//! with a limit in force takes a ticket: `ACQUIRE` grants a turn when one is free (of
//! the schedule's capacity), the ticket heads the queue and the previous end plus the delay (and any pause)
//! has passed; else it queues the ticket, or refuses it (queue full, wait too long) with
//! the same estimate a single instance makes. The turn is leased for the longest a turn
//! can be held ([`crate::config::ExchangeBounds`]: a dead holder's turn outlives any
//! exchange it may have left running); `RELEASE` at the exchange's end records the end,
//! applies the origin's answer (Retry-After pause, backoff) and publishes a wake-up for
//! the new head of the queue, saying when its turn is due. A waiter sleeps until its wake-up, its due time, or [`POLL`], whichever is
//! first: Pub/Sub is the fast path, polling the fallback. Cost: a request that does not
//! wait makes two round-trips (acquire, release); one that waits makes one more (the
//! acquire when due), plus one per [`POLL`] while it waits behind others.
//!
//! **Robots.txt** (scripts `ROBOTS_READ`, `ROBOTS_WRITE`). The instance that needs a
//! fetch takes the lock, fetches, writes the result with a new version and publishes it;
//! the others wait for that message (or poll) and parse the shared copy into their own
//! snapshot. Each instance keeps its `arc-swap` snapshot as the hot path: reading
//! robots.txt never touches Redis. A missed message is caught by a periodic resync: the
//! [`Fleet::generation`] moves on every [`crate::config::FleetConfig::resync_seconds`]
//! and on every Pub/Sub reconnect, and an entry verified in an older generation checks
//! its version in the background on its next use.
//!
//! **Failures.** A background task pings Redis every [`HEALTH_EVERY`]; a failed or slow
//! command marks the backend down at once, so requests stop waiting on a dead server;
//! the ping marks it up again. What requests do meanwhile is `fleet.on_unavailable`,
//! decided by the callers (`origin::pacing`, `origin::store`): this module only says
//! [`Unavailable`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use bytes::Bytes;
use futures_util::StreamExt;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, FromRedisValue, Pipeline, RedisFuture, Script, ScriptInvocation, Value};
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;

use crate::config::FleetConfig;
use crate::telemetry::metrics;

/// The Pub/Sub channel every instance listens on.
const CHANNEL: &str = "robotsgate:fleet";
/// A waiter behind others asks again this often (the fallback when a wake-up is lost).
pub const POLL: Duration = Duration::from_millis(1_000);
/// A queued ticket not renewed for this long is dropped (its instance died). The head
/// of a queue, sleeping until its turn is due, is kept until then plus this.
pub const TICKET_TTL: Duration = Duration::from_millis(3_000);
/// How often the backend's health is checked.
pub const HEALTH_EVERY: Duration = Duration::from_millis(500);
/// How long a schedule's keys outlive their last use.
const KEEP: Duration = Duration::from_secs(86_400);

/// The backend could not answer (down, slow, or an error): the caller falls back as
/// `fleet.on_unavailable` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unavailable;

/// A connection to one Redis or to a Redis Cluster; both reconnect on their own.
#[derive(Clone)]
enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// What another instance changed, for the origin store to apply to its own entries.
#[derive(Debug)]
pub enum FleetEvent {
    /// An origin's shared robots.txt has a new version.
    RobotsChanged {
        /// The origin (`scheme://authority`).
        origin: String,
        /// The new version.
        version: u64,
    },
    /// An origin was purged by an operator.
    Purged {
        /// The origin (`scheme://authority`).
        origin: String,
    },
    /// An origin's pause or backoff changed (its 429/503, or recovery).
    Limit {
        /// The origin (`scheme://authority`).
        origin: String,
        /// The robots.txt group whose schedule it is.
        group: String,
        /// Remaining pause.
        pause: Duration,
        /// Backoff in force.
        backoff: Duration,
    },
}

/// The Redis names of one pacing schedule (origin and robots.txt group).
#[derive(Clone, Debug)]
pub struct ScheduleKeys {
    schedule: String,
    holders: String,
    queue: String,
    expiry: String,
    robots: String,
    group: String,
    origin: String,
}

impl ScheduleKeys {
    /// The keys of `group`'s schedule on `origin` (`scheme://authority`).
    pub fn new(origin: &str, group: &str) -> ScheduleKeys {
        let base = format!("rg:{{{origin}}}");
        ScheduleKeys {
            schedule: format!("{base}:s:{group}"),
            holders: format!("{base}:h:{group}"),
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

/// A robots.txt as stored in Redis: the raw file and its fetch state, times relative to
/// the moment it was read.
#[derive(Clone, Debug, Default)]
pub struct SharedRobots {
    /// Bumped by every write.
    pub version: u64,
    /// `rules`, `allow` or `disallow` (what `origin::store::Policy` it is).
    pub kind: String,
    /// The octets the origin sent (for `rules`).
    pub body: Bytes,
    /// Why there are no rules (for `allow`, `disallow`).
    pub why: String,
    /// Fresh for this long from now (negative: expired).
    pub fresh_in_ms: i64,
    /// When the policy was last confirmed, relative to now (negative: in the past).
    pub fetched_ms: Option<i64>,
    /// Since when fetches fail, relative to now.
    pub unreachable_since_ms: Option<i64>,
    /// When to retry a failing fetch, relative to now.
    pub retry_at_ms: Option<i64>,
    /// Consecutive failures.
    pub failures: u32,
    /// The last fetch's outcome.
    pub outcome: String,
    /// Why the last fetch failed (empty after a success).
    pub cause: String,
}

/// A fleet-wide schedule as the admin API shows it.
#[derive(Clone, Debug)]
pub struct SharedSchedule {
    /// A ticket holding a turn (`<instance>:<n>`), if any.
    pub holder: Option<String>,
    /// How many turns are held.
    pub holding: u64,
    /// Requests queued across the fleet.
    pub queued: u64,
}

/// The connection to the shared backend, its health, and the Pub/Sub listener that
/// wakes this instance's waiters.
pub struct Fleet {
    config: FleetConfig,
    /// How long a granted turn stays taken when its holder never releases it
    /// ([`crate::config::Config::fleet_lease`]): the longest a turn can be held.
    lease: Duration,
    conn: ArcSwapOption<Conn>,
    up: AtomicBool,
    /// Has the health been checked once (the first result is logged either way)?
    checked: AtomicBool,
    generation: AtomicU64,
    instance: String,
    tickets: AtomicU64,
    /// Waiting tickets of this instance, woken by `w` messages.
    waiters: Mutex<HashMap<String, Arc<Wake>>>,
    /// Instances waiting for another's robots.txt fetch, by origin.
    robots_waiters: Mutex<HashMap<String, Arc<Notify>>>,
    events: mpsc::Sender<FleetEvent>,
    /// The other end, until the origin store takes it ([`Fleet::take_events`]).
    received: Mutex<Option<mpsc::Receiver<FleetEvent>>>,
    /// The backend's own runtime, once [`Fleet::run_in_background`] has started it.
    runtime: std::sync::OnceLock<tokio::runtime::Handle>,
}

/// A waiting ticket's wake-up: the signal, and when its turn is due (ms from the
/// signal; the release that sends it knows), so the woken waiter asks once, when due.
#[derive(Default)]
struct Wake {
    notify: Notify,
    due_in_ms: std::sync::atomic::AtomicI64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn ms(d: Duration) -> i64 {
    d.as_millis().min(i64::MAX as u128) as i64
}

impl Fleet {
    /// The backend, not yet connected: [`Fleet::run_in_background`] starts it (after a
    /// daemon's fork: threads do not survive one).
    pub fn new(config: &FleetConfig, lease: Duration) -> Arc<Fleet> {
        let (events, received) = mpsc::channel(4096);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        metrics::FLEET_BACKEND_UP.set(0);
        Arc::new(Fleet {
            config: config.clone(),
            lease,
            conn: ArcSwapOption::empty(),
            up: AtomicBool::new(false),
            checked: AtomicBool::new(false),
            generation: AtomicU64::new(1),
            instance: format!("{:x}.{}", nanos & 0xffff_ffff_ffff, std::process::id()),
            tickets: AtomicU64::new(0),
            waiters: Mutex::default(),
            robots_waiters: Mutex::default(),
            events,
            received: Mutex::new(Some(received)),
            runtime: std::sync::OnceLock::new(),
        })
    }

    /// Starts the backend's own thread (connection, health checks, Pub/Sub); once only.
    /// A Redis that is down is retried, and requests meanwhile get
    /// `fleet.on_unavailable`.
    pub fn run_in_background(self: &Arc<Self>) -> std::io::Result<()> {
        if self.runtime.get().is_some() {
            return Ok(());
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("robotsgate-fleet")
            .enable_all()
            .build()?;
        if self.runtime.set(runtime.handle().clone()).is_err() {
            return Ok(());
        }
        let background = self.clone();
        std::thread::Builder::new()
            .name("robotsgate-fleet".into())
            .spawn(move || {
                runtime.block_on(async move {
                    tokio::spawn(background.clone().listen());
                    tokio::spawn(background.clone().resync());
                    background.watch_health().await;
                })
            })?;
        Ok(())
    }

    /// The changes other instances publish, for the one consumer (the origin store).
    pub fn take_events(&self) -> Option<mpsc::Receiver<FleetEvent>> {
        lock(&self.received).take()
    }

    /// Is the backend answering?
    pub fn up(&self) -> bool {
        self.up.load(Ordering::Acquire)
    }

    /// Moves on at every resync period and Pub/Sub reconnect: an entry verified in an
    /// older generation re-checks its robots.txt version.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The settings.
    pub fn config(&self) -> &FleetConfig {
        &self.config
    }

    /// Runs `future` on the backend's runtime (releases from `Drop`, event handlers), or
    /// on the caller's before that has started.
    pub fn spawn<F>(&self, future: F) -> tokio::task::JoinHandle<()>
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        match self.runtime.get() {
            Some(runtime) => runtime.spawn(future),
            None => tokio::spawn(future),
        }
    }

    fn set_up(&self, up: bool, why: &str) {
        let first = !self.checked.swap(true, Ordering::AcqRel);
        if self.up.swap(up, Ordering::AcqRel) != up || first {
            metrics::FLEET_BACKEND_UP.set(i64::from(up));
            if up {
                log::info!("fleet backend up");
            } else {
                log::warn!("fleet backend unavailable: {why}");
            }
        }
    }

    async fn connect(&self) -> redis::RedisResult<Conn> {
        let timeout = self.config.command_timeout_seconds.duration();
        if let Some(url) = &self.config.redis {
            let client = redis::Client::open(url.as_str())?;
            let config = ConnectionManagerConfig::new()
                .set_response_timeout(Some(timeout))
                .set_connection_timeout(Some(timeout.max(Duration::from_secs(1))))
                .set_number_of_retries(1);
            Ok(Conn::Single(
                client.get_connection_manager_with_config(config).await?,
            ))
        } else {
            let client = redis::cluster::ClusterClient::builder(self.config.redis_cluster.clone())
                .response_timeout(timeout)
                .connection_timeout(timeout.max(Duration::from_secs(1)))
                .retries(1)
                .build()?;
            Ok(Conn::Cluster(client.get_async_connection().await?))
        }
    }

    /// Connects, then pings every [`HEALTH_EVERY`], marking the backend up and down.
    async fn watch_health(self: Arc<Self>) {
        loop {
            if self.conn.load().is_none() {
                match tokio::time::timeout(Duration::from_secs(5), self.connect()).await {
                    Ok(Ok(conn)) => self.conn.store(Some(Arc::new(conn))),
                    Ok(Err(e)) => self.set_up(false, &e.to_string()),
                    Err(_) => self.set_up(false, "connect timed out"),
                }
            }
            if let Some(conn) = self.conn.load_full() {
                let mut conn = (*conn).clone();
                let started = Instant::now();
                let ping = tokio::time::timeout(
                    self.config.command_timeout_seconds.duration(),
                    redis::cmd("PING").query_async::<String>(&mut conn),
                )
                .await;
                metrics::observe_fleet_command("ping", started.elapsed().as_secs_f64());
                match ping {
                    Ok(Ok(_)) => self.set_up(true, ""),
                    Ok(Err(e)) => self.set_up(false, &e.to_string()),
                    Err(_) => self.set_up(false, "PING timed out"),
                }
            }
            tokio::time::sleep(HEALTH_EVERY).await;
        }
    }

    /// Listens on [`CHANNEL`], reconnecting (to each seed in turn) when it drops.
    async fn listen(self: Arc<Self>) {
        let urls: Vec<String> = self
            .config
            .redis
            .iter()
            .chain(self.config.redis_cluster.iter())
            .cloned()
            .collect();
        let mut next = 0;
        loop {
            let url = &urls[next % urls.len().max(1)];
            next += 1;
            let subscribed = async {
                let client = redis::Client::open(url.as_str())?;
                let mut pubsub = client.get_async_pubsub().await?;
                pubsub.subscribe(CHANNEL).await?;
                redis::RedisResult::Ok(pubsub)
            };
            match tokio::time::timeout(Duration::from_secs(5), subscribed).await {
                Ok(Ok(pubsub)) => {
                    // Messages may have been missed while unsubscribed: re-check.
                    self.generation.fetch_add(1, Ordering::AcqRel);
                    let mut messages = pubsub.into_on_message();
                    while let Some(message) = messages.next().await {
                        if let Ok(payload) = message.get_payload::<Vec<u8>>() {
                            self.dispatch(&payload);
                        }
                    }
                    log::warn!("fleet Pub/Sub connection to {url} closed; reconnecting");
                }
                Ok(Err(e)) => log::debug!("fleet Pub/Sub {url}: {e}"),
                Err(_) => log::debug!("fleet Pub/Sub {url}: timed out"),
            }
            tokio::time::sleep(HEALTH_EVERY).await;
        }
    }

    /// Moves the generation on every `resync_seconds`.
    async fn resync(self: Arc<Self>) {
        loop {
            tokio::time::sleep(self.config.resync_seconds.duration()).await;
            self.generation.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// One message: `w` wakes a ticket, `r` a new robots.txt version, `p` a purge, `l` a
    /// pause or backoff; fields separated by newlines, the origin last.
    fn dispatch(&self, payload: &[u8]) {
        let text = String::from_utf8_lossy(payload);
        let fields: Vec<&str> = text.split('\n').collect();
        let event = match fields.as_slice() {
            ["w", ticket, due_in] => {
                if let Some(waiter) = lock(&self.waiters).get(*ticket) {
                    waiter
                        .due_in_ms
                        .store(due_in.parse().unwrap_or(0), Ordering::Release);
                    waiter.notify.notify_one();
                }
                return;
            }
            ["r", version, origin] => {
                self.wake_robots_waiters(origin);
                FleetEvent::RobotsChanged {
                    origin: origin.to_string(),
                    version: version.parse().unwrap_or(u64::MAX),
                }
            }
            ["p", origin] => {
                self.wake_robots_waiters(origin);
                FleetEvent::Purged {
                    origin: origin.to_string(),
                }
            }
            ["l", pause, backoff, group, origin] => FleetEvent::Limit {
                origin: origin.to_string(),
                group: group.to_string(),
                pause: Duration::from_millis(pause.parse().unwrap_or(0)),
                backoff: Duration::from_millis(backoff.parse().unwrap_or(0)),
            },
            _ => {
                log::debug!("fleet: unknown message {text:?}");
                return;
            }
        };
        // A full channel loses the event; the periodic resync catches up.
        let _ = self.events.try_send(event);
    }

    fn wake_robots_waiters(&self, origin: &str) {
        if let Some(waiter) = lock(&self.robots_waiters).get(origin) {
            waiter.notify_waiters();
        }
    }

    /// Runs one command against the backend within the command timeout; any failure
    /// is [`Unavailable`], and a connection failure or timeout marks the backend down.
    async fn run<T: FromRedisValue>(
        &self,
        name: &'static str,
        invocation: &mut ScriptInvocation<'_>,
    ) -> Result<T, Unavailable> {
        if !self.up() {
            return Err(Unavailable);
        }
        let conn = self.conn.load_full().ok_or(Unavailable)?;
        let mut conn = (*conn).clone();
        let started = Instant::now();
        let result = tokio::time::timeout(
            self.config.command_timeout_seconds.duration(),
            invocation.invoke_async::<T>(&mut conn),
        )
        .await;
        metrics::observe_fleet_command(name, started.elapsed().as_secs_f64());
        match result {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => {
                if e.is_io_error() || e.is_connection_dropped() || e.is_timeout() {
                    self.set_up(false, &e.to_string());
                } else {
                    log::error!("fleet command {name} failed: {e}");
                }
                Err(Unavailable)
            }
            Err(_) => {
                self.set_up(false, &format!("{name} timed out"));
                Err(Unavailable)
            }
        }
    }

    /// Waits for the turn of a shared schedule (`delay`: the delay in force, `None` to
    /// keep the schedule's own, as a robots.txt fetch does). `Ok(Err(_))` is a refusal,
    /// as a single instance would give it.
    pub async fn acquire(
        self: &Arc<Self>,
        keys: &ScheduleKeys,
        capacity: usize,
        delay: Option<Duration>,
        max_queue: usize,
        max_wait: Duration,
    ) -> Result<Result<FleetTurn, NoTurn>, Unavailable> {
        let started = Instant::now();
        let deadline = started + max_wait;
        let ticket = format!(
            "{}:{}",
            self.instance,
            self.tickets.fetch_add(1, Ordering::Relaxed)
        );
        let wake = Arc::new(Wake::default());
        lock(&self.waiters).insert(ticket.clone(), wake.clone());
        let mut queued = Queued {
            fleet: self.clone(),
            keys,
            ticket: &ticket,
            granted: false,
        };
        let delay_ms = delay.map_or(-1, ms);
        loop {
            let (state, wait_ms): (String, i64) = self
                .run(
                    "acquire",
                    ACQUIRE
                        .key(&keys.schedule)
                        .key(&keys.queue)
                        .key(&keys.expiry)
                        .key(&keys.robots)
                        .key(&keys.holders)
                        .arg(&ticket)
                        .arg(delay_ms)
                        .arg(ms(self.lease))
                        .arg(max_queue)
                        .arg(ms(max_wait))
                        .arg(ms(TICKET_TTL))
                        .arg(ms(KEEP))
                        .arg(capacity)
                        .arg(CHANNEL),
                )
                .await?;
            let estimate = Duration::from_millis(wait_ms.max(0) as u64);
            match state.as_str() {
                "go" => {
                    queued.granted = true;
                    return Ok(Ok(FleetTurn::new(
                        self.clone(),
                        keys.clone(),
                        ticket.clone(),
                    )));
                }
                "full" => return Ok(Err(NoTurn::QueueFull(estimate))),
                "long" => return Ok(Err(NoTurn::WaitTooLong(estimate))),
                _ => {}
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(Err(NoTurn::WaitTooLong(
                    estimate.max(Duration::from_secs(1)),
                )));
            }
            // The head sleeps until its turn is due (its ticket is kept until then);
            // the others until a release wakes them, or the next poll.
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
        keys: ScheduleKeys,
        status: u16,
        retry_after: Option<Duration>,
        ceiling: Duration,
    ) {
        let fleet = self.clone();
        self.spawn(async move {
            let _ = fleet
                .release(&keys, "-", status, retry_after, ceiling)
                .await;
        });
    }

    async fn release(
        &self,
        keys: &ScheduleKeys,
        ticket: &str,
        status: u16,
        retry_after: Option<Duration>,
        ceiling: Duration,
    ) -> Result<i64, Unavailable> {
        self.run(
            "release",
            RELEASE
                .key(&keys.schedule)
                .key(&keys.queue)
                .key(&keys.expiry)
                .key(&keys.holders)
                .arg(ticket)
                .arg(status)
                .arg(retry_after.map_or(-1, ms))
                .arg(ms(ceiling))
                .arg(ms(KEEP))
                .arg(CHANNEL)
                .arg(&keys.group)
                .arg(&keys.origin)
                .arg(ms(TICKET_TTL)),
        )
        .await
    }

    /// Fleet-wide state of a schedule, for the admin API.
    pub async fn schedule(&self, keys: &ScheduleKeys) -> Result<SharedSchedule, Unavailable> {
        let (holder, holding, queued): (Option<String>, u64, u64) = self
            .run("view", VIEW.key(&keys.holders).key(&keys.queue))
            .await?;
        Ok(SharedSchedule {
            holder,
            holding,
            queued,
        })
    }

    /// The shared robots.txt of `origin`, if any.
    pub async fn read_robots(&self, origin: &str) -> Result<Option<SharedRobots>, Unavailable> {
        let key = ScheduleKeys::new(origin, "").robots;
        let fields: Option<Vec<Vec<u8>>> =
            self.run("robots_read", &mut ROBOTS_READ.key(&key)).await?;
        let Some(f) = fields else {
            return Ok(None);
        };
        if f.len() < 11 {
            return Ok(None);
        }
        let text = |i: usize| String::from_utf8_lossy(&f[i]).into_owned();
        let number = |i: usize| text(i).parse::<i64>().ok();
        Ok(Some(SharedRobots {
            version: text(0).parse().unwrap_or(0),
            kind: text(1),
            body: Bytes::copy_from_slice(&f[2]),
            why: text(3),
            fresh_in_ms: number(4).unwrap_or(-1),
            fetched_ms: number(5),
            unreachable_since_ms: number(6),
            retry_at_ms: number(7),
            failures: text(8).parse().unwrap_or(0),
            outcome: text(9),
            cause: text(10),
        }))
    }

    /// The version of `origin`'s shared robots.txt (0: none): the cheap check before a
    /// full read.
    pub async fn robots_version(&self, origin: &str) -> Result<u64, Unavailable> {
        let key = ScheduleKeys::new(origin, "").robots;
        let version: Option<u64> = self.run("robots_version", &mut VERSION.key(&key)).await?;
        Ok(version.unwrap_or(0))
    }

    /// Takes the fleet-wide fetch lock of `origin` for `ttl`: `Some(token)` when this
    /// instance is to fetch, `None` when another one is fetching.
    pub async fn lock_robots(
        &self,
        origin: &str,
        ttl: Duration,
    ) -> Result<Option<String>, Unavailable> {
        let key = format!("rg:{{{origin}}}:lock");
        let token = format!(
            "{}:{}",
            self.instance,
            self.tickets.fetch_add(1, Ordering::Relaxed)
        );
        let taken: bool = self
            .run(
                "robots_lock",
                LOCK.key(&key).arg(&token).arg(ms(ttl).max(1)),
            )
            .await?;
        Ok(taken.then_some(token))
    }

    /// Stores a fetch's result under the lock `token`, publishes it, releases the lock;
    /// returns the new version.
    pub async fn write_robots(
        &self,
        origin: &str,
        token: &str,
        robots: &SharedRobots,
        keep: Duration,
    ) -> Result<u64, Unavailable> {
        let key = ScheduleKeys::new(origin, "").robots;
        let lock_key = format!("rg:{{{origin}}}:lock");
        let optional = |v: Option<i64>| v.map_or(String::new(), |v| v.to_string());
        self.run(
            "robots_write",
            ROBOTS_WRITE
                .key(&key)
                .key(&lock_key)
                .arg(token)
                .arg(&robots.kind)
                .arg(robots.body.as_ref())
                .arg(&robots.why)
                .arg(robots.fresh_in_ms)
                .arg(optional(robots.fetched_ms))
                .arg(optional(robots.unreachable_since_ms))
                .arg(optional(robots.retry_at_ms))
                .arg(robots.failures)
                .arg(&robots.outcome)
                .arg(&robots.cause)
                .arg(ms(keep).max(1))
                .arg(CHANNEL)
                .arg(origin),
        )
        .await
    }

    /// Forgets `origin`'s shared robots.txt, everywhere.
    pub async fn purge_robots(&self, origin: &str) -> Result<(), Unavailable> {
        let key = ScheduleKeys::new(origin, "").robots;
        let _: i64 = self
            .run("robots_purge", PURGE.key(&key).arg(CHANNEL).arg(origin))
            .await?;
        Ok(())
    }

    /// Waits until another instance publishes `origin`'s robots.txt, or `until`.
    pub async fn wait_for_robots(&self, origin: &str, until: Instant) {
        let notify = lock(&self.robots_waiters)
            .entry(origin.to_string())
            .or_default()
            .clone();
        let _ = tokio::time::timeout_at(until.min(Instant::now() + POLL), notify.notified()).await;
        let mut waiters = lock(&self.robots_waiters);
        if waiters
            .get(origin)
            .is_some_and(|n| Arc::strong_count(n) <= 2)
        {
            waiters.remove(origin);
        }
    }
}

/// A ticket in a shared queue; leaving without the turn (refused, timed out, client
/// gone) takes it out of the queue and wakes whoever is next.
struct Queued<'a> {
    fleet: Arc<Fleet>,
    keys: &'a ScheduleKeys,
    ticket: &'a str,
    granted: bool,
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        lock(&self.fleet.waiters).remove(self.ticket);
        if self.granted {
            return;
        }
        let fleet = self.fleet.clone();
        let (queue, expiry, ticket) = (
            self.keys.queue.clone(),
            self.keys.expiry.clone(),
            self.ticket.to_string(),
        );
        self.fleet.spawn(async move {
            let _: Result<i64, _> = fleet
                .run(
                    "cancel",
                    CANCEL.key(&queue).key(&expiry).arg(&ticket).arg(CHANNEL),
                )
                .await;
        });
    }
}

/// The turn of a shared schedule, held until its exchange has ended. Its lease, set
/// when it was granted, already covers the longest a turn can be held, so a live holder
/// never renews it (a holder cut off from Redis cannot) and a dead one frees it when the
/// lease runs out; dropping it releases the turn (the end starts the next delay) and
/// reports the origin's answer.
pub struct FleetTurn {
    fleet: Arc<Fleet>,
    keys: ScheduleKeys,
    ticket: String,
    answered: Mutex<Option<(u16, Option<Duration>)>>,
}

impl FleetTurn {
    fn new(fleet: Arc<Fleet>, keys: ScheduleKeys, ticket: String) -> FleetTurn {
        FleetTurn {
            fleet,
            keys,
            ticket,
            answered: Mutex::new(None),
        }
    }

    /// Records the origin's answer, applied to the shared schedule at release.
    pub fn origin_answered(&self, status: u16, retry_after: Option<Duration>) {
        *lock(&self.answered) = Some((status, retry_after));
    }

    /// Releases the turn (at the response's end); `ceiling` caps a pause or backoff.
    pub fn release(self, ceiling: Duration) {
        let (status, retry_after) = lock(&self.answered).unwrap_or((0, None));
        let fleet = self.fleet.clone();
        self.fleet.spawn(async move {
            let _ = fleet
                .release(&self.keys, &self.ticket, status, retry_after, ceiling)
                .await;
        });
    }
}

/// `TIME` as milliseconds, the prologue of every script.
const NOW: &str = "local t = redis.call('TIME')\nlocal now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n";

fn script(body: &str) -> Script {
    Script::new(&format!("{NOW}{body}"))
}

/// KEYS: schedule, queue, expiry, robots, holders. ARGV: ticket, delay ms (-1: the
/// schedule's own), lease ms, max queue, max wait ms, ticket ttl ms, keep ms, capacity.
/// Returns {'go'|'wait'|'full'|'long', ms}: for `wait`, until due (-1: not the head).
static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    script(
        r#"
local s, q, x, r, hs = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local ticket = ARGV[1]
local delay = tonumber(ARGV[2])
local keep = tonumber(ARGV[7])
local capacity = tonumber(ARGV[8])
local h = redis.call('HMGET', s, 'end', 'pause', 'backoff', 'delay')
local last_end = tonumber(h[1]) or 0
local pause = tonumber(h[2]) or 0
local backoff = tonumber(h[3]) or 0
if delay < 0 then delay = tonumber(h[4]) or 0 end
local fetched = tonumber(redis.call('HGET', r, 'end')) or 0
if fetched > last_end then last_end = fetched end
-- Holders whose lease ran out (their instance died): their turn ended then.
local expired = redis.call('ZRANGEBYSCORE', hs, '-inf', now, 'WITHSCORES')
for i = 1, #expired, 2 do
  redis.call('ZREM', hs, expired[i])
  local lease_end = tonumber(expired[i + 1])
  if lease_end > last_end then last_end = lease_end end
  redis.call('HSET', s, 'end', last_end)
end
for _, d in ipairs(redis.call('ZRANGEBYSCORE', x, '-inf', now)) do
  redis.call('ZREM', q, d)
  redis.call('ZREM', x, d)
end
local holding = redis.call('ZCARD', hs)
local effective = math.max(delay, backoff)
local due = pause
if last_end > 0 then due = math.max(last_end + effective, pause) end
local rank = redis.call('ZRANK', q, ticket)
if not rank then
  local ahead = redis.call('ZCARD', q) + holding
  local estimate = math.max(due - now, 0) + effective * math.floor(ahead / capacity)
  if ahead >= tonumber(ARGV[4]) + capacity - 1 then return {'full', estimate} end
  if estimate > tonumber(ARGV[5]) then return {'long', estimate} end
  redis.call('ZADD', q, redis.call('HINCRBY', s, 'seq', 1), ticket)
  rank = redis.call('ZRANK', q, ticket)
end
redis.call('ZADD', x, now + tonumber(ARGV[6]), ticket)
redis.call('PEXPIRE', q, keep)
redis.call('PEXPIRE', x, keep)
redis.call('PEXPIRE', s, keep + math.max(pause - now, 0))
if rank == 0 and holding < capacity then
  if now >= due then
    redis.call('ZREM', q, ticket)
    redis.call('ZREM', x, ticket)
    redis.call('ZADD', hs, now + tonumber(ARGV[3]), ticket)
    redis.call('PEXPIRE', hs, keep)
    redis.call('HSET', s, 'delay', delay)
    -- A turn is still free: the next in line may take it at once.
    if holding + 1 < capacity then
      local head = redis.call('ZRANGE', q, 0, 0)
      if head[1] then redis.call('PUBLISH', ARGV[9], 'w\n' .. head[1] .. '\n0') end
    end
    return {'go', 0}
  end
  redis.call('ZADD', x, due + tonumber(ARGV[6]), ticket)
  return {'wait', due - now}
end
return {'wait', -1}
"#,
    )
});

/// KEYS: schedule, queue, expiry, holders. ARGV: ticket ('-': none held), status (0:
/// none), retry-after ms (-1: none), ceiling ms, keep ms, channel, group, origin, ticket
/// ttl ms.
static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    script(
        r#"
local s, q, x, hs = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local status = tonumber(ARGV[2])
local retry = tonumber(ARGV[3])
local ceiling = tonumber(ARGV[4])
redis.call('ZREM', hs, ARGV[1])
local h = redis.call('HMGET', s, 'end', 'pause', 'backoff', 'delay')
if now > (tonumber(h[1]) or 0) then redis.call('HSET', s, 'end', now) end
local pause = tonumber(h[2]) or 0
local backoff = tonumber(h[3]) or 0
local old_pause, old_backoff = pause, backoff
if status == 429 or status == 503 then
  if retry >= 0 then
    pause = math.max(pause, now + math.min(retry, ceiling))
  else
    backoff = math.min(math.max(backoff * 2, math.max(tonumber(h[4]) or 0, 1000)), ceiling)
  end
elseif status >= 500 then
  backoff = math.min(math.max(backoff * 2, math.max(tonumber(h[4]) or 0, 1000)), ceiling)
elseif status > 0 then
  backoff = math.floor(backoff / 2)
end
redis.call('HSET', s, 'pause', pause, 'backoff', backoff)
redis.call('PEXPIRE', s, tonumber(ARGV[5]) + math.max(pause - now, 0))
local head = redis.call('ZRANGE', q, 0, 0)
if head[1] then
  local due = math.max(now + math.max(tonumber(h[4]) or 0, backoff), pause)
  redis.call('ZADD', x, due + tonumber(ARGV[9]), head[1])
  redis.call('PUBLISH', ARGV[6], 'w\n' .. head[1] .. '\n' .. (due - now))
end
if pause ~= old_pause or backoff ~= old_backoff then
  redis.call('PUBLISH', ARGV[6], 'l\n' .. math.max(pause - now, 0) .. '\n' .. backoff .. '\n' .. ARGV[7] .. '\n' .. ARGV[8])
end
return 1
"#,
    )
});

/// KEYS: queue, expiry. ARGV: ticket, channel.
static CANCEL: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local rank = redis.call('ZRANK', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
if rank == 0 then
  local head = redis.call('ZRANGE', KEYS[1], 0, 0)
  if head[1] then redis.call('PUBLISH', ARGV[2], 'w\n' .. head[1] .. '\n0') end
end
return 1
"#,
    )
});

/// KEYS: holders, queue. The first live holder (or nil), how many hold, the queue's
/// length.
static VIEW: LazyLock<Script> = LazyLock::new(|| {
    script(
        r#"
local live = redis.call('ZRANGEBYSCORE', KEYS[1], now, '+inf')
return {live[1] or false, #live, redis.call('ZCARD', KEYS[2])}
"#,
    )
});

/// KEYS: robots. The fields, times relative to now; nil when none is stored.
static ROBOTS_READ: LazyLock<Script> = LazyLock::new(|| {
    script(
        r#"
local h = redis.call('HMGET', KEYS[1], 'v', 'kind', 'body', 'why', 'fresh', 'fetched', 'since', 'retry', 'failures', 'outcome', 'cause')
if not h[1] then return false end
local function rel(v)
  if not v or v == '' then return '' end
  return tostring(tonumber(v) - now)
end
return {h[1], h[2] or '', h[3] or '', h[4] or '', rel(h[5]), rel(h[6]), rel(h[7]), rel(h[8]), h[9] or '0', h[10] or '', h[11] or ''}
"#,
    )
});

/// KEYS: robots. Its version, or nil.
static VERSION: LazyLock<Script> =
    LazyLock::new(|| Script::new("return redis.call('HGET', KEYS[1], 'v')"));

/// KEYS: lock. ARGV: token, ttl ms. True when taken.
static LOCK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end return 0",
    )
});

/// KEYS: robots, lock. ARGV: token, kind, body, why, fresh ms, fetched ms, since ms,
/// retry ms (relative to now; '' for none), failures, outcome, cause, keep ms,
/// channel, origin. Returns the new version.
static ROBOTS_WRITE: LazyLock<Script> = LazyLock::new(|| {
    script(
        r#"
local function at(rel)
  if rel == '' then return '' end
  return now + tonumber(rel)
end
local v = redis.call('HINCRBY', KEYS[1], 'v', 1)
redis.call('HSET', KEYS[1], 'kind', ARGV[2], 'body', ARGV[3], 'why', ARGV[4], 'fresh', at(ARGV[5]), 'fetched', at(ARGV[6]), 'since', at(ARGV[7]), 'retry', at(ARGV[8]), 'failures', ARGV[9], 'outcome', ARGV[10], 'cause', ARGV[11], 'end', now)
redis.call('PEXPIRE', KEYS[1], ARGV[12])
if redis.call('GET', KEYS[2]) == ARGV[1] then redis.call('DEL', KEYS[2]) end
redis.call('PUBLISH', ARGV[13], 'r\n' .. v .. '\n' .. ARGV[14])
return v
"#,
    )
});

/// KEYS: robots. ARGV: channel, origin.
static PURGE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[1], 'p\n' .. ARGV[2])
return 1
"#,
    )
});
