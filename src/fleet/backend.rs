//! The fleet's backend: one connection to Redis (one server, a Sentinel-managed master,
//! or a Redis Cluster), its health, Redis' clock, and the Pub/Sub listener that carries
//! the other instances' news.
//!
//! **Health.** A background task asks Redis for `TIME` every [`HEALTH_EVERY`] (which
//! also keeps the estimate of Redis' clock that converts this process's instants into
//! the Redis times durable records use, [`Fleet::redis_time_of`]) and `INFO memory`; a
//! failed or slow command marks the backend down at once, and the next good answer marks
//! it up. A `maxmemory-policy` that can evict robotsgate's keys (unless
//! `fleet.allow_eviction`), a Redis out of memory, or a Sentinel-managed master that
//! accepts writes with no replica (`replicas.rs`), keeps the backend down, the reason
//! named in `/readyz` ([`Fleet::down_reason`]). A return (down → up) is only that: whether
//! Redis lost writes meanwhile is for Redis to say (the generation, `membership.rs`).
//!
//! **Pub/Sub.** One channel, [`CHANNEL`], which every instance hears: a new robots.txt
//! copy, a purge. Rare, and never per request.
//!
//! **Per request: nothing.** Requests never wait on Redis here: membership, ownership
//! and durable records (`fleet/mod.rs`) call it when the fleet changes or a fact
//! happens.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::{ArcSwap, ArcSwapOption};
use futures_util::StreamExt;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, FromRedisValue, Pipeline, RedisFuture, ScriptInvocation, Value};
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;

use crate::config::FleetConfig;
use crate::fleet::down::Down;
use crate::fleet::memory::{memory_fit, texts};
use crate::fleet::redis_clock::Reading;
use crate::fleet::replicas::replicated_writes;
use crate::telemetry::metrics;
use crate::telemetry::metrics::DownCause;

/// The Pub/Sub channel every instance listens on.
pub(crate) const CHANNEL: &str = "robotsgate:fleet";
/// How often the backend's health is checked.
pub const HEALTH_EVERY: Duration = Duration::from_millis(500);

/// The backend could not answer (down, slow, or an error): the caller falls back as
/// `fleet.on_unavailable` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unavailable;

/// A connection to one Redis or to a Redis Cluster; both reconnect on their own (a
/// Sentinel-managed master is found again by the health task).
#[derive(Clone)]
enum Conn {
    /// A single Redis (or the master Sentinel names).
    Single(ConnectionManager),
    /// A Redis Cluster.
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
}

/// The connection to the shared backend, its health, Redis' clock, and the Pub/Sub
/// listener.
pub struct Fleet {
    /// The `fleet` settings.
    config: FleetConfig,
    /// The connection, once made.
    conn: ArcSwapOption<Conn>,
    /// Redis answers.
    up: AtomicBool,
    /// Why the backend is down (stale while up).
    down: ArcSwap<Down>,
    /// Has the health been checked once (the first result is logged either way)?
    checked: AtomicBool,
    /// This instance's member id: unique fleet-wide (also in tickets and lock tokens).
    pub(crate) instance: String,
    /// The beat (the membership's renewal) is running: its own calls go through while
    /// the backend is not yet up.
    beating: AtomicBool,
    /// Tickets handed out so far.
    tickets: AtomicU64,
    /// Redis' clock minus this process's ([`Fleet::local_ms`]), at least: from the last
    /// answer, as if Redis read its clock when the answer arrived.
    clock_offset_ms: AtomicI64,
    /// Redis' clock minus this process's, at most: as if Redis read its clock when the
    /// call was sent.
    clock_offset_high_ms: AtomicI64,
    /// This process's clock: counts a suspend ([`LeaseClock`]).
    clock: LeaseClock,
    /// Instances waiting for another's robots.txt fetch, by origin.
    robots_waiters: Mutex<HashMap<String, Arc<Notify>>>,
    /// Where the other instances' news go.
    events: mpsc::Sender<FleetEvent>,
    /// The other end, until its consumer takes it ([`Fleet::take_events`]).
    received: Mutex<Option<mpsc::Receiver<FleetEvent>>>,
    /// The backend's own runtime, once [`Fleet::run_in_background`] has started it.
    runtime: std::sync::OnceLock<tokio::runtime::Handle>,
    /// What runs on every health check beside it (the membership's renewal), once set.
    beat: std::sync::OnceLock<Arc<dyn Beat>>,
}

/// Something the backend's health task runs on every check while Redis answers (the
/// membership renews its lease there).
#[async_trait::async_trait]
pub(crate) trait Beat: Send + Sync {
    /// One beat; `Err` marks the backend down.
    async fn beat(&self, fleet: &Arc<Fleet>) -> Result<(), Down>;
}

/// Locks `m`, usable after a panic elsewhere (the fleet layer's state stays consistent per update).
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// `d` in whole milliseconds, as Redis keys and scripts count time.
pub(crate) fn ms(d: Duration) -> i64 {
    d.as_millis().min(i64::MAX as u128) as i64
}

impl Fleet {
    /// The backend of member `member` (the name its certificate gives it), not yet
    /// connected: [`Fleet::run_in_background`] starts it (after a daemon's fork: threads
    /// do not survive one).
    pub fn new(config: &FleetConfig, member: &str) -> Arc<Fleet> {
        let (events, received) = mpsc::channel(4096);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        metrics::FLEET_BACKEND_UP.set(0);
        Arc::new(Fleet {
            config: config.clone(),
            conn: ArcSwapOption::empty(),
            up: AtomicBool::new(false),
            down: ArcSwap::from_pointee(Down::new(DownCause::Connecting, "not connected yet")),
            checked: AtomicBool::new(false),
            beating: AtomicBool::new(false),
            instance: format!(
                "{member}/{:x}.{}",
                nanos & 0xffff_ffff_ffff,
                std::process::id()
            ),
            tickets: AtomicU64::new(0),
            clock_offset_ms: AtomicI64::new(i64::MIN),
            clock_offset_high_ms: AtomicI64::new(i64::MIN),
            clock: LeaseClock::new(),
            robots_waiters: Mutex::default(),
            events,
            received: Mutex::new(Some(received)),
            runtime: std::sync::OnceLock::new(),
            beat: std::sync::OnceLock::new(),
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
        metrics::init_fleet();
        let background = self.clone();
        std::thread::Builder::new()
            .name("robotsgate-fleet".into())
            .spawn(move || {
                runtime.block_on(async move {
                    tokio::spawn(background.clone().listen());
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

    /// Why the backend is down, for `/readyz` (empty while up).
    pub fn down_reason(&self) -> String {
        if self.up() {
            String::new()
        } else {
            self.down.load().to_string()
        }
    }

    /// Sets what runs on every health check (the membership's renewal); once.
    pub(crate) fn set_beat(&self, beat: Arc<dyn Beat>) {
        let _ = self.beat.set(beat);
    }

    /// This instance's member id.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// The settings.
    pub fn config(&self) -> &FleetConfig {
        &self.config
    }

    /// A new ticket (or lock token): `<instance>:<n>`, unique fleet-wide.
    pub(crate) fn ticket(&self) -> String {
        format!(
            "{}:{}",
            self.instance,
            self.tickets.fetch_add(1, Ordering::Relaxed)
        )
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

    /// This process's clock in milliseconds since the backend was made, counting a
    /// suspend (for lease arithmetic: [`LeaseClock`]).
    pub(crate) fn local_ms(&self) -> i64 {
        self.clock.ms()
    }

    /// `local` (this process's milliseconds, see [`Fleet::local_ms`]) as an instant of
    /// the runtime's clock, counted from now (the two clocks differ by any suspend; a
    /// time before the backend was made is that moment, later and so on the safe side).
    pub(crate) fn local_instant(&self, local: i64) -> Instant {
        let (now, now_ms) = (Instant::now(), self.local_ms());
        let local = local.max(0);
        if local >= now_ms {
            now + Duration::from_millis((local - now_ms).unsigned_abs())
        } else {
            let back = Duration::from_millis((now_ms - local).unsigned_abs());
            now.checked_sub(back).unwrap_or(now)
        }
    }

    /// `instant` of the runtime's clock in this process's milliseconds (as
    /// [`Fleet::local_instant`], the other way).
    fn local_of(&self, instant: Instant) -> i64 {
        let (now, now_ms) = (Instant::now(), self.local_ms());
        match instant.checked_duration_since(now) {
            Some(ahead) => now_ms + ms(ahead),
            None => now_ms - ms(now.saturating_duration_since(instant)),
        }
    }

    /// Learns Redis' clock from an answer carrying its `TIME` (ms), to a call sent at
    /// `sent` (this process's ms) and received now. Redis read its clock in between: its
    /// offset from this process's clock lies between the two readings, each used on the
    /// safe side of a conversion (see [`Fleet::redis_time_of`], [`Fleet::instant_of`]).
    pub(crate) fn saw_redis_time(&self, redis_now_ms: i64, sent: i64) {
        let reading = Reading {
            sent,
            received: self.local_ms(),
            redis: redis_now_ms,
        };
        self.clock_offset_high_ms
            .store(reading.offset_at_sending(), Ordering::Release);
        self.clock_offset_ms
            .store(reading.offset_at_receipt(), Ordering::Release);
    }

    /// `instant` (in this process) in Redis time (ms), when Redis' clock is known: never
    /// earlier than it was (the offset as if Redis read its clock when the call left),
    /// so a last end or a pause handed to another member is never shortened.
    pub(crate) fn redis_time_of(&self, instant: Instant) -> Option<i64> {
        let offset = self.clock_offset_high_ms.load(Ordering::Acquire);
        (offset != i64::MIN).then(|| self.local_of(instant) + offset)
    }

    /// A Redis time (ms) in this process's clock, when Redis' clock is known: never
    /// earlier than it is (the offset as if Redis read its clock when its answer
    /// arrived), so a bound handed over is never shortened.
    pub(crate) fn instant_of(&self, redis_ms: i64) -> Option<Instant> {
        let offset = self.clock_offset_ms.load(Ordering::Acquire);
        (offset != i64::MIN).then(|| self.local_instant(redis_ms - offset))
    }

    /// Marks the backend up (`Ok`) or down, and why.
    fn set_up(self: &Arc<Self>, health: Result<(), Down>) {
        let first = !self.checked.swap(true, Ordering::AcqRel);
        let up = health.is_ok();
        let changed = self.up.swap(up, Ordering::AcqRel) != up || first;
        if changed {
            metrics::FLEET_BACKEND_UP.set(i64::from(up));
        }
        match health {
            Ok(()) if changed => {
                metrics::set_fleet_backend_unavailable(None);
                log::info!("fleet backend up");
            }
            Ok(()) => {}
            Err(down) => {
                if changed || self.down.load().cause != down.cause {
                    metrics::set_fleet_backend_unavailable(Some(down.cause));
                }
                if changed {
                    log::warn!("fleet backend unavailable: {down}");
                }
                self.down.store(Arc::new(down));
            }
        }
    }

    /// Opens a connection to the configured backend (single, Sentinel's master, or Cluster).
    async fn connect(&self) -> redis::RedisResult<Conn> {
        let timeout = self.config.command_timeout_seconds.duration();
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(timeout))
            .set_connection_timeout(Some(timeout.max(Duration::from_secs(1))))
            .set_number_of_retries(1);
        if let Some(url) = &self.config.redis {
            let client = redis::Client::open(url.as_str())?;
            Ok(Conn::Single(
                client.get_connection_manager_with_config(config).await?,
            ))
        } else if self.config.redis_sentinel.is_some() {
            let client = self.sentinel_master().await?;
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

    /// The master Sentinel names now (asked afresh each time: after a failover, the
    /// promoted replica).
    async fn sentinel_master(&self) -> redis::RedisResult<redis::Client> {
        let Some(sentinel) = &self.config.redis_sentinel else {
            return Err(redis::RedisError::from((
                redis::ErrorKind::Client,
                "no sentinel configured",
            )));
        };
        let mut client = redis::sentinel::SentinelClient::build(
            sentinel.sentinels.clone(),
            sentinel.master.clone(),
            None,
            redis::sentinel::SentinelServerType::Master,
        )?;
        client.async_get_client().await
    }

    /// Connects, then checks the backend every [`HEALTH_EVERY`], marking it up and down.
    async fn watch_health(self: Arc<Self>) {
        loop {
            if self.conn.load().is_none() {
                match tokio::time::timeout(Duration::from_secs(5), self.connect()).await {
                    Ok(Ok(conn)) => self.conn.store(Some(Arc::new(conn))),
                    Ok(Err(e)) => self.set_up(Err(Down::of(&e))),
                    Err(_) => self.set_up(Err(Down::timed_out("connect"))),
                }
            }
            if let Some(conn) = self.conn.load_full() {
                let mut conn = (*conn).clone();
                let mut health = self.check(&mut conn).await;
                if let (Ok(()), Some(beat)) = (&health, self.beat.get()) {
                    // Up for the beat's own calls, quietly: its failure keeps the backend
                    // down (a member refused at join is not up and down every beat).
                    self.beating.store(true, Ordering::Release);
                    health = beat.beat(&self).await;
                    self.beating.store(false, Ordering::Release);
                }
                let down = health.is_err();
                self.set_up(health);
                if down && self.config.redis_sentinel.is_some() {
                    // Ask the sentinels again: the master may have moved.
                    self.conn.store(None);
                }
            }
            tokio::time::sleep(HEALTH_EVERY).await;
        }
    }

    /// One health check: `TIME` (Redis' clock), the eviction policy and whether Redis
    /// is out of memory (a script that has begun to write is let finish past
    /// `maxmemory`, so the scripts' own errors cannot be relied on to say so).
    async fn check(&self, conn: &mut Conn) -> Result<(), Down> {
        let timeout = self.config.command_timeout_seconds.duration();
        let started = Instant::now();
        let sent = self.local_ms();
        let time =
            tokio::time::timeout(timeout, redis::cmd("TIME").query_async::<(i64, i64)>(conn)).await;
        metrics::observe_fleet_command("time", started.elapsed().as_secs_f64());
        match time {
            Ok(Ok((seconds, micros))) => self.saw_redis_time(seconds * 1000 + micros / 1000, sent),
            Ok(Err(e)) => return Err(Down::of(&e)),
            Err(_) => return Err(Down::timed_out("TIME")),
        }
        for node in Fleet::info(conn, "memory", timeout).await? {
            memory_fit(&node, self.config.allow_eviction)?;
        }
        if let Some(sentinel) = &self.config.redis_sentinel {
            for node in Fleet::info(conn, "replication", timeout).await? {
                replicated_writes(&node, sentinel.allow_unreplicated_writes)?;
            }
        }
        Ok(())
    }

    /// `INFO section`'s text: one, or one per master of a Cluster (which answers per
    /// node, a map).
    async fn info(conn: &mut Conn, section: &str, timeout: Duration) -> Result<Vec<String>, Down> {
        let info = tokio::time::timeout(
            timeout,
            redis::cmd("INFO").arg(section).query_async::<Value>(conn),
        )
        .await;
        match info {
            Ok(Ok(info)) => Ok(texts(info)),
            Ok(Err(e)) => Err(Down::of(&e)),
            Err(_) => Err(Down::timed_out("INFO")),
        }
    }

    /// Listens on [`CHANNEL`], reconnecting (to each seed in turn, or where Sentinel
    /// says the master is) when it drops.
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
            let url = urls.get(next % urls.len().max(1)).cloned();
            next += 1;
            let subscribed = async {
                let client = match &url {
                    Some(url) => redis::Client::open(url.as_str())?,
                    None => self.sentinel_master().await?,
                };
                let mut pubsub = client.get_async_pubsub().await?;
                pubsub.subscribe(CHANNEL).await?;
                redis::RedisResult::Ok(pubsub)
            };
            match tokio::time::timeout(Duration::from_secs(5), subscribed).await {
                Ok(Ok(pubsub)) => {
                    let mut messages = pubsub.into_on_message();
                    while let Some(message) = messages.next().await {
                        if let Ok(payload) = message.get_payload::<Vec<u8>>() {
                            self.dispatch(&payload);
                        }
                    }
                    log::warn!("fleet Pub/Sub connection closed; reconnecting");
                }
                Ok(Err(e)) => log::debug!("fleet Pub/Sub: {e}"),
                Err(_) => log::debug!("fleet Pub/Sub: timed out"),
            }
            tokio::time::sleep(HEALTH_EVERY).await;
        }
    }

    /// One message: `r` a new robots.txt version, `p` a purge; fields separated by
    /// newlines, the origin last.
    fn dispatch(&self, payload: &[u8]) {
        let text = String::from_utf8_lossy(payload);
        let fields: Vec<&str> = text.split('\n').collect();
        let event = match fields.as_slice() {
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
            _ => {
                log::debug!("fleet: unknown message {text:?}");
                return;
            }
        };
        // A full channel loses the event; the renewal's member list catches up.
        let _ = self.events.try_send(event);
    }

    /// Wakes the requests waiting for `origin`'s robots.txt from another member.
    fn wake_robots_waiters(&self, origin: &str) {
        if let Some(waiter) = lock(&self.robots_waiters).get(origin) {
            waiter.notify_waiters();
        }
    }

    /// Waits until another instance publishes `origin`'s robots.txt, or `until` (at
    /// most a second: the caller asks again).
    pub async fn wait_for_robots(&self, origin: &str, until: Instant) {
        let notify = lock(&self.robots_waiters)
            .entry(origin.to_string())
            .or_default()
            .clone();
        let _ = tokio::time::timeout_at(
            until.min(Instant::now() + Duration::from_secs(1)),
            notify.notified(),
        )
        .await;
        let mut waiters = lock(&self.robots_waiters);
        if waiters
            .get(origin)
            .is_some_and(|n| Arc::strong_count(n) <= 2)
        {
            waiters.remove(origin);
        }
    }

    /// Runs one script against the backend within the command timeout; any failure
    /// is [`Unavailable`], and a connection failure, a timeout or Redis out of memory
    /// marks the backend down.
    pub(crate) async fn run<T: FromRedisValue>(
        self: &Arc<Self>,
        name: &'static str,
        invocation: &mut ScriptInvocation<'_>,
    ) -> Result<T, Unavailable> {
        if !self.up() && !self.beating.load(Ordering::Acquire) {
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
                let down = Down::of(&e);
                match down.cause {
                    DownCause::OutOfMemory => self.set_up(Err(down)),
                    DownCause::Unreachable | DownCause::Timeout | DownCause::ReadOnly => {
                        self.set_up(Err(down));
                        if self.config.redis_sentinel.is_some() {
                            self.conn.store(None);
                        }
                    }
                    _ => log::error!("fleet command {name} failed: {e}"),
                }
                Err(Unavailable)
            }
            Err(_) => {
                self.set_up(Err(Down::timed_out(name)));
                Err(Unavailable)
            }
        }
    }
}

/// This process's clock for leases: `CLOCK_BOOTTIME`, which goes on counting while the
/// host is suspended (`CLOCK_MONOTONIC`, the runtime's, stops then): a member resumed
/// from a suspend finds its lease as old as it really is, and does not act on it.
struct LeaseClock {
    /// The clock's reading when this one was made (ms).
    origin: i64,
}

impl LeaseClock {
    /// A clock counting from now.
    fn new() -> LeaseClock {
        LeaseClock {
            origin: boottime_ms(),
        }
    }

    /// Milliseconds since the clock was made.
    fn ms(&self) -> i64 {
        boottime_ms() - self.origin
    }
}

/// `CLOCK_BOOTTIME` in milliseconds (Linux; `CLOCK_MONOTONIC` elsewhere).
fn boottime_ms() -> i64 {
    #[cfg(target_os = "linux")]
    const CLOCK: libc::clockid_t = libc::CLOCK_BOOTTIME;
    #[cfg(not(target_os = "linux"))]
    const CLOCK: libc::clockid_t = libc::CLOCK_MONOTONIC;
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant the
    // platform defines. The call cannot fail for it (and a failure leaves 0).
    unsafe { libc::clock_gettime(CLOCK, &mut ts) };
    ts.tv_sec.saturating_mul(1000) + ts.tv_nsec / 1_000_000
}
