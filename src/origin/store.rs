//! The origin store: one entry per origin ([`OriginEntry`]) holding everything kept about
//! it — its robots.txt snapshot, the fetch in flight, its pacing schedules — so a request
//! touches one entry, found with one lookup.
//!
//! Readers are on every request, writers are rare (one fetch per origin per day), so an
//! entry's robots.txt state is an `ArcSwap<Snapshot>`: a read is an atomic load, and a
//! refresh swaps in a new snapshot without ever blocking a reader. Entries live in a map
//! sharded by origin hash, each shard an LRU bounded to its share of `max_origins`; an
//! entry a request is using (in flight, waiting for a fetch or for its pacing turn) is
//! never evicted, so no origin's pacing can be reset by churn elsewhere.
//!
//! What a fetch outcome means (SPEC §2):
//! * 2xx → the parsed file, fresh for `max-age` clamped to the configured bounds, else
//!   the TTL (24 h);
//! * 4xx (not 429), too many redirects, loops → allow all;
//! * 429, 5xx, network failure → if a copy from an earlier fetch exists, keep using it
//!   (stale-if-error); otherwise disallow all — until the origin has been unreachable for
//!   `unreachable_allow_after` (30 days), then allow all. Retried with exponential backoff
//!   (503 sooner, `Retry-After` honoured).
//!
//! Concurrency: a request that finds no usable snapshot waits for a fetch; concurrent
//! waiters for one origin share that one fetch (single-flight: an async lock per entry
//! being fetched, re-checked after it is acquired). The fetch runs as its own task, so a client that
//! disconnects does not abort it. A fresh snapshot close to expiry is refreshed in the
//! background while readers keep using it.
//!
//! Fleet mode (`origin::fleet`): a fetch first looks at the shared copy in Redis. A
//! usable one (fresh, or failing and not yet due for a retry) is parsed into this
//! instance's snapshot; otherwise the instance that takes the fleet-wide lock fetches
//! and publishes, and the others wait for its result (or, past the lock's lifetime,
//! fetch themselves). Other instances' changes arrive as [`FleetEvent`]s
//! ([`OriginStore::follow`]); an entry not verified since the fleet's last resync
//! checks its version in the background on its next use, never on the request's path.
//! While Redis is unavailable, `fleet.on_unavailable: local` fetches here as alone;
//! `refuse` answers a request that needs a fetch 503 (`fleet-backend-unavailable`).

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use bytes::Bytes;
use tokio::time::Instant;

use crate::config::{OnUnavailable, PacingKey, RobotsConfig};
use crate::origin::fetch::{FetchOutcome, Fetcher};
use crate::origin::files::{self, RobotsFile};
use crate::origin::fleet::{FetchLock, Fleet, FleetEvent, SharedRobots, Unavailable};
use crate::pacing::{Pacer, Place, Schedules};
use crate::policy::target::Origin;
use crate::robots::RobotsTxt;

/// What an origin's robots.txt currently means.
#[derive(Debug)]
pub enum Policy {
    /// A parsed robots.txt, shared with every origin that sent the same octets.
    Rules(Arc<RobotsFile>),
    /// No robots.txt (4xx, redirects exhausted, or unreachable for 30 days): no limits.
    AllowAll {
        /// Why there is none, for operators.
        why: Box<str>,
    },
    /// Unreachable with no earlier copy: nothing may be fetched for now.
    DisallowAll {
        /// Why it cannot be read, for operators.
        why: Box<str>,
    },
}

/// An origin's state at one moment. Immutable; replaced whole on every change.
#[derive(Debug)]
pub struct Snapshot {
    /// What the robots.txt means now.
    pub policy: Policy,
    /// Usable without refetching until then.
    pub fresh_until: Instant,
    /// When the policy was last confirmed by the origin (successful fetch).
    pub fetched_at: Option<Instant>,
    /// The last fetch's outcome, for operators (logs, 503 bodies).
    pub last_outcome: Box<str>,
    /// While fetches fail (boxed: most origins' fetches do not, and every held origin
    /// has a snapshot); read it with [`Snapshot::retry_at`] and its siblings.
    pub failing: Option<Box<Failing>>,
}

/// The state of an origin whose robots.txt fetches fail.
#[derive(Debug, Default)]
pub struct Failing {
    /// Since when.
    unreachable_since: Option<Instant>,
    /// When to try again.
    retry_at: Option<Instant>,
    /// Consecutive failures, for the backoff.
    failures: u32,
    /// Why the last fetch failed, short and header-safe (`http-500`, `timeout`,
    /// `tls-handshake-failed: …`).
    cause: Option<String>,
}

impl Failing {
    /// `None` when nothing fails.
    pub fn new(
        unreachable_since: Option<Instant>,
        retry_at: Option<Instant>,
        failures: u32,
        cause: Option<String>,
    ) -> Option<Box<Failing>> {
        let failing = Failing {
            unreachable_since,
            retry_at,
            failures,
            cause,
        };
        let nothing = failing.unreachable_since.is_none()
            && failing.retry_at.is_none()
            && failing.failures == 0
            && failing.cause.is_none();
        (!nothing).then(|| Box::new(failing))
    }
}

/// A refetch that changed an origin's rules, as the admin API lists it.
#[derive(Clone, Debug)]
pub struct ChangeRecord {
    /// When the changed file was fetched.
    pub at: Instant,
    /// What changed, one line (`groups +0 -0; rules +1 -0 (+ *: Disallow: /new)`).
    pub summary: String,
}

/// Rule changes remembered, over all origins (the admin API lists an origin's).
const CHANGES: usize = 256;

/// The most rule changes the admin API lists for one origin.
const CHANGES_PER_ORIGIN: usize = 4;

/// The rules a policy enforces, when they are known: a file's, or none (a 4xx: allow
/// all). `None` while robots.txt cannot be read.
fn known_rules(snapshot: &Snapshot) -> Option<Option<&RobotsTxt>> {
    match &snapshot.policy {
        Policy::Rules(file) => Some(Some(&file.robots)),
        Policy::AllowAll { .. } if snapshot.fetched_at.is_some() => Some(None),
        _ => None,
    }
}

/// One robots.txt fetch, as the admin API lists it.
#[derive(Clone, Debug)]
pub struct FetchRecord {
    pub at: Instant,
    /// `2xx`, `3xx_exhausted`, `4xx`, `5xx`, `network`, `too_large`.
    pub class: &'static str,
    pub outcome: String,
    pub duration: Duration,
}

/// Fetches remembered, over all origins: a held origin keeps no history of its own
/// (a million origins would hold a million histories), and the admin API lists an
/// origin's fetches from here.
const HISTORY: usize = 4096;

/// The most fetches the admin API lists for one origin.
const HISTORY_PER_ORIGIN: usize = 8;

/// What happened recently, over every origin, oldest first, at most `limit`: the fetch
/// history and the rule changes the admin API shows.
struct Recent<T> {
    records: Mutex<std::collections::VecDeque<(Origin, T)>>,
    limit: usize,
}

impl<T: Clone> Recent<T> {
    fn new(limit: usize) -> Recent<T> {
        Recent {
            records: Mutex::default(),
            limit,
        }
    }

    fn push(&self, origin: &Origin, record: T) {
        let mut records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        if records.len() >= self.limit {
            records.pop_front();
        }
        records.push_back((origin.clone(), record));
    }

    /// `origin`'s records, oldest first, the last `most` of them.
    fn of(&self, origin: &Origin, most: usize) -> Vec<T> {
        let records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        let mut found: Vec<T> = records
            .iter()
            .rev()
            .filter(|(o, _)| o == origin)
            .take(most)
            .map(|(_, r)| r.clone())
            .collect();
        found.reverse();
        found
    }
}

impl Snapshot {
    /// Set while fetches fail: since when.
    pub fn unreachable_since(&self) -> Option<Instant> {
        self.failing.as_ref()?.unreachable_since
    }

    /// When to try a failing fetch again.
    pub fn retry_at(&self) -> Option<Instant> {
        self.failing.as_ref()?.retry_at
    }

    /// Consecutive failures, for the backoff.
    pub fn failures(&self) -> u32 {
        self.failing.as_ref().map_or(0, |f| f.failures)
    }

    /// Why the last fetch failed, short and header-safe (`http-500`, `timeout`,
    /// `tls-handshake-failed: …`); `None` after a fetch that succeeded.
    pub fn cause(&self) -> Option<&str> {
        self.failing.as_ref()?.cause.as_deref()
    }

    /// Is the policy from an earlier successful fetch, kept while refreshes fail?
    pub fn is_stale_copy(&self) -> bool {
        self.unreachable_since().is_some() && !matches!(self.policy, Policy::DisallowAll { .. })
    }
}

/// Everything robotsgate keeps about one origin: its robots.txt snapshot, the fetch in
/// flight, its pacing schedules. A request finds all of it with one lookup.
pub struct OriginEntry {
    origin: Origin,
    state: ArcSwapOption<Snapshot>,
    refreshing: AtomicBool,
    /// Decisions asked for this origin since it entered the store (the status page's
    /// "busiest origins").
    requests: AtomicU64,
    schedules: Schedules,
    /// Fleet mode: the shared robots.txt version the snapshot is from (0: none), and the
    /// fleet generation it was last checked in.
    version: AtomicU64,
    verified: AtomicU64,
}

impl OriginEntry {
    fn new(origin: Origin) -> OriginEntry {
        OriginEntry {
            state: ArcSwapOption::empty(),
            refreshing: AtomicBool::new(false),
            requests: AtomicU64::new(0),
            schedules: Schedules::default(),
            version: AtomicU64::new(0),
            verified: AtomicU64::new(0),
            origin,
        }
    }

    /// Which origin this is.
    pub fn origin(&self) -> &Origin {
        &self.origin
    }

    /// The robots.txt snapshot held, if any.
    pub fn snapshot(&self) -> Option<Arc<Snapshot>> {
        self.state.load_full()
    }

    /// The origin's pacing schedules.
    pub fn schedules(&self) -> &Schedules {
        &self.schedules
    }

    /// The origin's pacing schedules, with the origin they are for.
    pub fn place(&self) -> Place<'_> {
        Place {
            schedules: &self.schedules,
            origin: &self.origin,
        }
    }

    /// Decisions asked for this origin since it entered the store.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }
}

/// One origin as the state file keeps it: its snapshot, and the pauses and backoffs of
/// its schedules (group, paused until, backoff).
#[derive(Debug)]
pub struct Kept {
    /// The origin.
    pub origin: Origin,
    /// Its robots.txt state.
    pub snapshot: Arc<Snapshot>,
    /// Its schedules' pauses and backoffs.
    pub pauses: Vec<(String, Option<Instant>, Duration)>,
}

/// This store's own counts (the metrics are process-wide).
#[derive(Default)]
pub struct StoreStats {
    /// Origins evicted to stay within `robots.max_origins`.
    pub evictions: AtomicU64,
}

/// The per-origin state of every origin robotsgate has seen: a map sharded by origin
/// hash, each shard an LRU bounded to its share of `robots.max_origins`.
pub struct OriginStore {
    /// Keyed by the origin's hash (an entry knows its origin: the key needs not repeat
    /// it); a lookup checks the entry's origin, and two origins with one hash take turns
    /// in the slot (one evicts the other), so a collision costs a refetch, never a mix-up.
    shards: Vec<Mutex<Shard>>,
    hasher: std::collections::hash_map::RandomState,
    per_shard: usize,
    fetcher: Arc<Fetcher>,
    /// Every robots.txt fetch takes its turn on the origin's schedules, like a page.
    pacer: Arc<Pacer>,
    config: RobotsConfig,
    /// The shared backend, in fleet mode.
    fleet: Option<Arc<Fleet>>,
    /// This store's counts.
    pub stats: Arc<StoreStats>,
    fetches: Recent<FetchRecord>,
    changes: Recent<ChangeRecord>,
    flights: Flights,
}

/// The single-flight locks of the entries being fetched (or waited for), by entry: a
/// lock exists only while someone holds or waits for it, so the many held origins that
/// are not being fetched carry none.
#[derive(Default)]
struct Flights(Mutex<FlightTable>);

type FlightTable = std::collections::HashMap<usize, Arc<tokio::sync::Mutex<()>>>;

/// One entry's fetch, held: the lock (its guard owns it), and the entry (kept alive,
/// so its address, the table's key, names no other entry meanwhile).
struct Flight<'a> {
    flights: &'a Flights,
    entry: Arc<OriginEntry>,
    held: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Flights {
    /// Waits for `entry`'s fetch lock.
    async fn lock(&self, entry: &Arc<OriginEntry>) -> Flight<'_> {
        let key = Arc::as_ptr(entry) as usize;
        let lock = self.table().entry(key).or_default().clone();
        Flight {
            flights: self,
            entry: entry.clone(),
            held: Some(lock.lock_owned().await),
        }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, FlightTable> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Flight<'_> {
    fn drop(&mut self) {
        let key = Arc::as_ptr(&self.entry) as usize;
        let mut table = self.flights.table();
        drop(self.held.take());
        // The table's own reference is the last: nobody holds or waits for it (a waiter
        // took its reference under the table's lock).
        if table
            .get(&key)
            .is_some_and(|lock| Arc::strong_count(lock) == 1)
        {
            table.remove(&key);
        }
    }
}

const SHARDS: usize = 16;

type Shard = lru::LruCache<u64, Arc<OriginEntry>>;

/// How many least-recently-used entries an insertion looks at for one it may evict.
const EVICTION_TRIES: usize = 8;

impl OriginStore {
    /// An empty store whose fetches go through `fetcher` and take turns with `pacer`.
    pub fn new(
        fetcher: Arc<Fetcher>,
        pacer: Arc<Pacer>,
        config: RobotsConfig,
        fleet: Option<Arc<Fleet>>,
    ) -> Arc<OriginStore> {
        Arc::new(OriginStore {
            shards: (0..SHARDS)
                .map(|_| Mutex::new(lru::LruCache::unbounded()))
                .collect(),
            per_shard: config.max_origins.div_ceil(SHARDS).max(1),
            hasher: std::collections::hash_map::RandomState::new(),
            fetcher,
            pacer,
            config,
            fleet,
            stats: Arc::default(),
            fetches: Recent::new(HISTORY),
            changes: Recent::new(CHANGES),
            flights: Flights::default(),
        })
    }

    /// `origin`'s key, and its shard, locked.
    fn shard(&self, origin: &Origin) -> (u64, std::sync::MutexGuard<'_, Shard>) {
        let key = self.hasher.hash_one(origin);
        let shard = &self.shards[(key as usize) % SHARDS];
        (key, shard.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// The entry of `origin`, made (and the least recently used evicted) if there is none.
    fn entry(&self, origin: &Origin) -> Arc<OriginEntry> {
        let (key, mut map) = self.shard(origin);
        if let Some(entry) = map.get(&key).filter(|e| e.origin == *origin) {
            return entry.clone();
        }
        // Over its share: evict the least recently used entry nobody is using — no
        // request holds it (in flight, or waiting for a fetch) and no request waits on
        // its schedules. Busy ones are passed over; if all tried are busy, the shard
        // grows past its share until they finish.
        for _ in 0..EVICTION_TRIES {
            if map.len() < self.per_shard {
                break;
            }
            let Some((_, lru)) = map.peek_lru() else {
                break;
            };
            let idle = Arc::strong_count(lru) == 1 && !lru.schedules.busy();
            if idle {
                map.pop_lru();
                self.stats.evictions.fetch_add(1, Ordering::Relaxed);
                crate::telemetry::metrics::STORE_EVICTIONS.inc();
            } else if let Some((key, busy)) = map.pop_lru() {
                map.push(key, busy);
            }
        }
        let entry = Arc::new(OriginEntry::new(origin.clone()));
        map.push(key, entry.clone());
        entry
    }

    /// The entry of a server address (`pacing.key: address`): its schedules only, kept
    /// beside the origins' under a name no origin has (port 0).
    pub fn address(&self, ip: std::net::IpAddr) -> Arc<OriginEntry> {
        self.entry(&Origin {
            scheme: crate::policy::target::Scheme::Http,
            host: crate::policy::target::Host::Ip(ip),
            port: 0,
        })
    }

    /// Every origin with a robots.txt snapshot, with its pauses (for the state file).
    /// Scans the whole store.
    pub fn export(&self) -> Vec<Kept> {
        let mut kept = Vec::new();
        for shard in &self.shards {
            let map = shard.lock().unwrap_or_else(|e| e.into_inner());
            for entry in map.iter().map(|(_, entry)| entry) {
                let pauses = entry.schedules.pauses();
                match entry.state.load_full() {
                    Some(snapshot) if entry.origin.port != 0 => kept.push(Kept {
                        origin: entry.origin.clone(),
                        snapshot,
                        pauses,
                    }),
                    _ => {}
                }
            }
        }
        kept
    }

    /// Puts back an origin kept across a restart.
    pub fn import(&self, kept: Kept) {
        let entry = self.entry(&kept.origin);
        entry.state.store(Some(kept.snapshot));
        for (group, paused_until, backoff) in kept.pauses {
            self.pacer
                .restore(entry.place(), &group, paused_until, backoff);
        }
    }

    /// Number of origins held.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().map(|m| m.len()).unwrap_or(0))
            .sum()
    }

    /// The entry held for `origin`, if any; never fetches nor makes it recently used
    /// (the admin API's view).
    pub fn peek(&self, origin: &Origin) -> Option<Arc<OriginEntry>> {
        let (key, map) = self.shard(origin);
        map.peek(&key).filter(|e| e.origin == *origin).cloned()
    }

    /// Fetches `origin`'s robots.txt now, fresh or not (after any fetch in progress).
    pub async fn refresh(self: &Arc<Self>, origin: &Origin) -> Arc<Snapshot> {
        let entry = self.entry(origin);
        let _flight = self.flights.lock(&entry).await;
        self.fetch_and_store(&entry, origin, true).await
    }

    /// `origin`'s most recent robots.txt fetches still remembered, oldest first.
    pub fn history(&self, origin: &Origin) -> Vec<FetchRecord> {
        self.fetches.of(origin, HISTORY_PER_ORIGIN)
    }

    /// `origin`'s most recent rule changes still remembered, oldest first.
    pub fn changes(&self, origin: &Origin) -> Vec<ChangeRecord> {
        self.changes.of(origin, CHANGES_PER_ORIGIN)
    }

    /// The `n` origins with the most decisions, busiest first, with their entries.
    /// Scans the whole store (an admin page's cost, not a request's).
    pub fn busiest(&self, n: usize) -> Vec<(Origin, Arc<OriginEntry>)> {
        let mut all: Vec<(Origin, Arc<OriginEntry>)> = Vec::new();
        for shard in &self.shards {
            let map = shard.lock().unwrap_or_else(|e| e.into_inner());
            all.extend(
                map.iter()
                    .map(|(_, entry)| (entry.origin.clone(), entry.clone())),
            );
        }
        all.sort_by_key(|(_, entry)| std::cmp::Reverse(entry.requests()));
        all.truncate(n);
        all
    }

    /// Forgets `origin` (fleet-wide in fleet mode): the next request fetches its
    /// robots.txt again. True if it was held here.
    pub fn purge(&self, origin: &Origin) -> bool {
        // Here first: this instance's own purge message must not find it gone already.
        let held = self.forget(origin);
        if let Some(fleet) = &self.fleet {
            let (fleet, key) = (fleet.clone(), origin.to_string());
            fleet.clone().spawn(async move {
                let _ = fleet.purge_robots(&key).await;
            });
        }
        held
    }

    /// Forgets `origin` here only.
    fn forget(&self, origin: &Origin) -> bool {
        let (key, mut map) = self.shard(origin);
        map.peek(&key).is_some_and(|e| e.origin == *origin) && map.pop(&key).is_some()
    }

    /// Starts what runs beside requests: in fleet mode, the backend's thread and the
    /// application of the changes other instances publish, for as long as the store
    /// lives. Call it once the process is what it will stay (after a daemon's fork).
    pub fn run_in_background(self: &Arc<Self>) -> std::io::Result<()> {
        let Some(fleet) = &self.fleet else {
            return Ok(());
        };
        fleet.run_in_background()?;
        let Some(mut events) = fleet.take_events() else {
            return Ok(());
        };
        let store = Arc::downgrade(self);
        fleet.spawn(async move {
            while let Some(event) = events.recv().await {
                let Some(store) = store.upgrade() else {
                    return;
                };
                store.apply(event);
            }
        });
        Ok(())
    }

    fn apply(self: &Arc<Self>, event: FleetEvent) {
        let origin_of = |text: &str| Origin::parse(text).ok();
        match event {
            FleetEvent::RobotsChanged { origin, version } => {
                let Some(entry) = origin_of(&origin).and_then(|o| self.peek(&o)) else {
                    return;
                };
                if entry.version.load(Ordering::Acquire) < version {
                    self.resync(entry, Some(version));
                }
            }
            FleetEvent::Purged { origin } => {
                if let Some(origin) = origin_of(&origin) {
                    self.forget(&origin);
                }
            }
            FleetEvent::Limit {
                origin,
                group,
                pause,
                backoff,
            } => {
                // Kept even for an origin this instance has not served yet: its first
                // request must wait out the pause too (with `max_in_flight: 0` and no
                // delay it would not ask Redis).
                if let Some(origin) = origin_of(&origin) {
                    let entry = self.entry(&origin);
                    self.pacer.mirror(entry.place(), &group, pause, backoff);
                }
            }
        }
    }

    /// In the background: takes the shared copy of `entry`'s robots.txt if it is newer
    /// than the one held (`version`: the newest one, when a message said so).
    fn resync(self: &Arc<Self>, entry: Arc<OriginEntry>, version: Option<u64>) {
        let Some(fleet) = self.fleet.clone() else {
            return;
        };
        entry.verified.store(fleet.generation(), Ordering::Release);
        let store = self.clone();
        fleet.clone().spawn(async move {
            let key = entry.origin.to_string();
            let held = entry.version.load(Ordering::Acquire);
            let newest = match version {
                Some(version) => Ok(version),
                None => fleet.robots_version(&key).await,
            };
            if newest.is_ok_and(|v| v <= held) {
                return;
            }
            let Ok(Some(shared)) = fleet.read_robots(&key).await else {
                return;
            };
            let _flight = store.flights.lock(&entry).await;
            if shared.version > entry.version.load(Ordering::Acquire) {
                store.adopt(&entry, &shared);
            }
        });
    }

    /// The entry of `origin` and the policy to apply to a request for it now, fetching
    /// its robots.txt if none is held.
    pub async fn get(self: &Arc<Self>, origin: &Origin) -> (Arc<OriginEntry>, Arc<Snapshot>) {
        let entry = self.entry(origin);
        entry.requests.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        if let Some(fleet) = &self.fleet {
            if entry.verified.load(Ordering::Acquire) < fleet.generation() {
                self.resync(entry.clone(), None);
            }
        }
        if let Some(snapshot) = entry.state.load_full() {
            if now < snapshot.fresh_until {
                self.maybe_refresh_ahead(&entry, &snapshot, origin, now);
                return (entry, snapshot);
            }
            // Failing origin, not yet due for a retry: the stale copy or disallow-all.
            if snapshot.retry_at().is_some_and(|at| now < at) {
                return (entry, snapshot);
            }
        }
        let snapshot = self.fetch_once(&entry, origin).await;
        (entry, snapshot)
    }

    /// Runs one fetch for the entry unless a concurrent caller already did.
    async fn fetch_once(
        self: &Arc<Self>,
        entry: &Arc<OriginEntry>,
        origin: &Origin,
    ) -> Arc<Snapshot> {
        let before = entry.state.load_full();
        let _flight = self.flights.lock(entry).await;
        let current = entry.state.load_full();
        let changed = match (&before, &current) {
            (Some(a), Some(b)) => !Arc::ptr_eq(a, b),
            (None, Some(_)) => true,
            _ => false,
        };
        if let (true, Some(current)) = (changed, current) {
            crate::telemetry::metrics::SINGLE_FLIGHT_JOINS.inc();
            return current;
        }
        let store = self.clone();
        let origin = origin.clone();
        let entry_for_task = entry.clone();
        let task =
            tokio::spawn(
                async move { store.fetch_and_store(&entry_for_task, &origin, false).await },
            );
        match task.await {
            Ok(snapshot) => snapshot,
            // The task cannot panic by design; if it did, fail closed.
            Err(e) => Arc::new(Snapshot {
                policy: Policy::DisallowAll {
                    why: format!("robots.txt fetch failed: {e}").into(),
                },
                fresh_until: Instant::now(),
                fetched_at: None,
                last_outcome: "internal error".into(),
                failing: Failing::new(Some(Instant::now()), None, 1, Some("internal-error".into())),
            }),
        }
    }

    /// Starts a background refresh when a fresh snapshot nears its expiry. "Near" is the
    /// last tenth of its lifetime, at most `refresh_ahead_seconds`: a short `max-age`
    /// must not turn every request into a refetch. And never sooner than `min_ttl` after
    /// the previous fetch began.
    fn maybe_refresh_ahead(
        self: &Arc<Self>,
        entry: &Arc<OriginEntry>,
        snapshot: &Snapshot,
        origin: &Origin,
        now: Instant,
    ) {
        let Some(fetched) = snapshot.fetched_at else {
            return;
        };
        if snapshot.retry_at().is_some() {
            return;
        }
        let lifetime = snapshot.fresh_until.saturating_duration_since(fetched);
        let ahead = self
            .config
            .refresh_ahead_seconds
            .duration()
            .min(lifetime / 10);
        if now + ahead < snapshot.fresh_until
            || now < fetched + self.config.min_ttl_seconds.duration()
        {
            return;
        }
        if entry.refreshing.swap(true, Ordering::AcqRel) {
            return;
        }
        let store = self.clone();
        let entry = entry.clone();
        let origin = origin.clone();
        tokio::spawn(async move {
            let _flight = store.flights.lock(&entry).await;
            store.fetch_and_store(&entry, &origin, true).await;
            entry.refreshing.store(false, Ordering::Release);
        });
    }

    /// Brings `entry` up to date: from the fleet's shared copy when one is usable (and
    /// not `force`d), else by fetching (here, or by the instance holding the lock).
    async fn fetch_and_store(
        &self,
        entry: &OriginEntry,
        origin: &Origin,
        force: bool,
    ) -> Arc<Snapshot> {
        let Some(fleet) = &self.fleet else {
            return self.fetch_here(entry, origin).await;
        };
        match self.fetch_shared(fleet, entry, origin, force).await {
            Ok(snapshot) => snapshot,
            // Only the origin's owner during the outage fetches it (see `pacing::outage`).
            Err(Unavailable)
                if fleet.config().on_unavailable == OnUnavailable::Local
                    && self.pacer.may_fetch_alone(entry.place()) =>
            {
                self.fetch_here(entry, origin).await
            }
            Err(Unavailable) => {
                crate::telemetry::metrics::record_fleet_fallback("refuse");
                // Not stored: the next request asks again, and finds Redis back.
                let now = Instant::now();
                Arc::new(Snapshot {
                    policy: Policy::DisallowAll {
                        why: "the fleet backend (Redis) is unavailable".into(),
                    },
                    fresh_until: now,
                    fetched_at: None,
                    last_outcome: "fleet backend unavailable".into(),
                    failing: Failing::new(
                        Some(now),
                        Some(now + Duration::from_secs(2)),
                        0,
                        Some("fleet-backend-unavailable".into()),
                    ),
                })
            }
        }
    }

    /// Fleet mode: the shared copy if usable, else one fetch fleet-wide.
    async fn fetch_shared(
        &self,
        fleet: &Arc<Fleet>,
        entry: &OriginEntry,
        origin: &Origin,
        mut force: bool,
    ) -> Result<Arc<Snapshot>, Unavailable> {
        let key = origin.to_string();
        // The lock outlives a fetch that waits for its pacing turns and then times out;
        // a holder that takes longer (or died) lets the next instance fetch.
        let lock_ttl = self.config.fetch_timeout_seconds.duration() * 2 + Duration::from_secs(5);
        let deadline = Instant::now() + lock_ttl;
        loop {
            let mut seen = 0;
            if let Some(shared) = fleet.read_robots(&key).await? {
                seen = shared.version;
                if shared.version > entry.version.load(Ordering::Acquire) {
                    self.adopt(entry, &shared);
                }
                let usable = shared.fresh_in_ms > 0 || shared.retry_at_ms.is_some_and(|r| r > 0);
                if usable && !force {
                    if let Some(snapshot) = entry.state.load_full() {
                        return Ok(snapshot);
                    }
                }
            }
            let lock = fleet
                .lock_robots(&key, lock_ttl, (!force).then_some(seen))
                .await?;
            if let FetchLock::Taken(token) = lock {
                let snapshot = self.fetch_here(entry, origin).await;
                let keep = snapshot
                    .fresh_until
                    .saturating_duration_since(Instant::now())
                    + crate::origin::fleet::KEEP;
                match fleet
                    .write_robots(&key, &token, &to_shared(&snapshot), keep)
                    .await
                {
                    Ok(version) => entry.version.store(version, Ordering::Release),
                    Err(Unavailable) => log::warn!(
                        "robots.txt {} fetched but not shared: fleet backend unavailable",
                        origin.robots_url()
                    ),
                }
                return Ok(snapshot);
            }
            // Another instance is fetching (or has just written): its result is as
            // new as ours would be.
            force = false;
            if matches!(lock, FetchLock::Newer) {
                continue;
            }
            if Instant::now() >= deadline {
                log::warn!("robots.txt {}: the instance holding the fetch lock did not publish; fetching here", origin.robots_url());
                return Ok(self.fetch_here(entry, origin).await);
            }
            fleet.wait_for_robots(&key, deadline).await;
        }
    }

    /// Makes `shared` (another instance's fetch) `entry`'s snapshot.
    fn adopt(&self, entry: &OriginEntry, shared: &SharedRobots) {
        let now = Instant::now();
        let at = |ms: i64| {
            let d = Duration::from_millis(ms.unsigned_abs());
            if ms >= 0 {
                Some(now + d)
            } else {
                now.checked_sub(d)
            }
        };
        let policy = match shared.kind.as_str() {
            "rules" => Policy::Rules(files::parse(shared.body.clone())),
            "allow" => Policy::AllowAll {
                why: shared.why.as_str().into(),
            },
            _ => Policy::DisallowAll {
                why: shared.why.as_str().into(),
            },
        };
        let snapshot = Snapshot {
            policy,
            fresh_until: at(shared.fresh_in_ms).unwrap_or(now),
            fetched_at: shared.fetched_ms.and_then(at),
            last_outcome: shared.outcome.as_str().into(),
            failing: Failing::new(
                shared.unreachable_since_ms.map(|ms| at(ms).unwrap_or(now)),
                shared.retry_at_ms.and_then(at),
                shared.failures,
                (!shared.cause.is_empty()).then(|| shared.cause.clone()),
            ),
        };
        entry.state.store(Some(Arc::new(snapshot)));
        entry.version.store(shared.version, Ordering::Release);
    }

    /// Fetches robots.txt from the origin and stores the result in `entry`.
    async fn fetch_here(&self, entry: &OriginEntry, origin: &Origin) -> Arc<Snapshot> {
        // The fetch is a request to the origin like any other: it waits for the turn of
        // every schedule the origin has (and, with `pacing.key: address`, of the address
        // it goes to), and its end starts their next delay.
        let turns = self.pacer.turns_for_fetch(entry.place()).await;
        let address = match self.pacer.config().key {
            PacingKey::Address => self
                .fetcher
                .address(origin)
                .await
                .map(|ip| self.address(ip)),
            PacingKey::Origin => None,
        };
        let address_turns = match &address {
            Some(address) => self.pacer.turns_for_fetch_at(address.place()).await,
            None => None,
        };
        let started = Instant::now();
        let outcome = self.fetcher.fetch(origin).await;
        drop(address_turns);
        drop(turns);
        let duration = started.elapsed();
        let class = outcome.class();
        crate::telemetry::metrics::ROBOTS_FETCH_DURATION.observe(duration.as_secs_f64());
        crate::telemetry::metrics::ROBOTS_FETCHES
            .with_label_values(&[class])
            .inc();
        let previous = entry.state.load_full();
        let next = self.next_snapshot(previous.as_deref(), outcome, Instant::now());
        self.fetches.push(
            origin,
            FetchRecord {
                at: started,
                class,
                outcome: next.last_outcome.to_string(),
                duration,
            },
        );
        if let Some(summary) = previous.as_deref().and_then(|p| rules_change(p, &next)) {
            log::info!("robots.txt {} changed: {summary}", origin.robots_url());
            crate::telemetry::metrics::ROBOTS_CHANGES.inc();
            self.changes.push(
                origin,
                ChangeRecord {
                    at: started,
                    summary,
                },
            );
        }
        let snapshot = Arc::new(next);
        match &snapshot.policy {
            Policy::DisallowAll { why } => {
                log::warn!("robots.txt {} unreachable: {why}", origin.robots_url())
            }
            _ if snapshot.is_stale_copy() => {
                log::warn!(
                    "robots.txt {} unreachable, keeping the earlier copy: {}",
                    origin.robots_url(),
                    snapshot.last_outcome
                )
            }
            _ => {}
        }
        entry.state.store(Some(snapshot.clone()));
        snapshot
    }

    /// The state transition of SPEC §2 (pure: no I/O, time passed in).
    fn next_snapshot(
        &self,
        previous: Option<&Snapshot>,
        outcome: FetchOutcome,
        now: Instant,
    ) -> Snapshot {
        let c = &self.config;
        let ttl = |max_age: Option<Duration>| {
            max_age
                .map(|age| age.clamp(c.min_ttl_seconds.duration(), c.max_ttl_seconds.duration()))
                .unwrap_or(c.ttl_seconds.duration())
        };
        let fresh = |policy: Policy, max_age: Option<Duration>, what: String| Snapshot {
            policy,
            fresh_until: now + ttl(max_age),
            fetched_at: Some(now),
            last_outcome: what.into_boxed_str(),
            failing: None,
        };
        match outcome {
            FetchOutcome::Body {
                status,
                body,
                max_age,
                hops,
            } => {
                let what = if hops > 0 {
                    format!("HTTP {status} after {hops} redirect(s)")
                } else {
                    format!("HTTP {status}")
                };
                fresh(Policy::Rules(files::parse(body)), max_age, what)
            }
            FetchOutcome::NoRobots { why, .. } => fresh(
                Policy::AllowAll {
                    why: format!("no robots.txt ({why})").into(),
                },
                None,
                why,
            ),
            FetchOutcome::Unreachable {
                status,
                why,
                cause,
                retry_after,
            } => {
                let failures = previous.map_or(0, |p| p.failures()) + 1;
                let initial = c.retry_initial_seconds.duration();
                let cap = c.retry_max_seconds.duration();
                // 503 is the documented "pause crawling" signal: retried sooner.
                let base = if status == Some(503) {
                    initial / 2
                } else {
                    initial
                };
                let backoff = base.saturating_mul(1u32 << (failures - 1).min(16)).min(cap);
                let wait = retry_after.map_or(backoff, |r| r.min(cap));
                let since = previous.and_then(|p| p.unreachable_since()).unwrap_or(now);
                let retry_at = now + wait;
                let copy = previous.and_then(|p| match &p.policy {
                    Policy::Rules(file) => Some(Policy::Rules(file.clone())),
                    Policy::AllowAll { why } if p.fetched_at.is_some() => {
                        Some(Policy::AllowAll { why: why.clone() })
                    }
                    _ => None,
                });
                let policy = match copy {
                    Some(policy) => policy,
                    None if now.duration_since(since)
                        >= c.unreachable_allow_after_seconds.duration() =>
                    {
                        Policy::AllowAll {
                            why: format!(
                                "robots.txt unreachable for over {:.0} days",
                                c.unreachable_allow_after_seconds.get() / 86_400.0
                            )
                            .into(),
                        }
                    }
                    None => Policy::DisallowAll {
                        why: format!("robots.txt unreachable: {why}").into(),
                    },
                };
                Snapshot {
                    policy,
                    fresh_until: retry_at,
                    fetched_at: previous.and_then(|p| p.fetched_at),
                    last_outcome: why.into_boxed_str(),
                    failing: Failing::new(Some(since), Some(retry_at), failures, Some(cause)),
                }
            }
        }
    }
}

/// What changed between two snapshots' rules, when both are known and they differ
/// (an unreadable robots.txt, or a copy kept while it is, is no change of rules).
fn rules_change(previous: &Snapshot, next: &Snapshot) -> Option<String> {
    if next.cause().is_some() {
        return None;
    }
    let (before, after) = (known_rules(previous)?, known_rules(next)?);
    if let (Policy::Rules(a), Policy::Rules(b)) = (&previous.policy, &next.policy) {
        if a.body == b.body {
            return None;
        }
    }
    crate::robots::RulesChange::between(before, after).map(|c| c.to_string())
}

/// A snapshot as the fleet stores it: the raw file and its fetch state, times relative
/// to now.
fn to_shared(snapshot: &Snapshot) -> SharedRobots {
    let now = Instant::now();
    let relative = |at: Instant| {
        if at >= now {
            at.duration_since(now).as_millis() as i64
        } else {
            -(now.duration_since(at).as_millis() as i64)
        }
    };
    let (kind, body, why) = match &snapshot.policy {
        Policy::Rules(file) => ("rules", Bytes::copy_from_slice(&file.body), String::new()),
        Policy::AllowAll { why } => ("allow", Bytes::new(), why.to_string()),
        Policy::DisallowAll { why } => ("disallow", Bytes::new(), why.to_string()),
    };
    SharedRobots {
        version: 0,
        kind: kind.into(),
        body,
        why,
        fresh_in_ms: relative(snapshot.fresh_until),
        fetched_ms: snapshot.fetched_at.map(relative),
        unreachable_since_ms: snapshot.unreachable_since().map(relative),
        retry_at_ms: snapshot.retry_at().map(relative),
        failures: snapshot.failures(),
        outcome: snapshot.last_outcome.to_string(),
        cause: snapshot.cause().unwrap_or_default().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::EgressConfig;
    use crate::origin::dns::Resolver;
    use crate::policy::egress::EgressPolicy;

    fn store(config: RobotsConfig) -> Arc<OriginStore> {
        let fetcher = Fetcher::new(
            Arc::new(Resolver::from_system()),
            Arc::new(EgressPolicy::new(&EgressConfig::default())),
            Duration::from_secs(1),
            5,
            None,
            "robotsgate-test".into(),
            Default::default(),
        );
        let pacer = Arc::new(Pacer::new(crate::config::PacingConfig::default()));
        OriginStore::new(Arc::new(fetcher), pacer, config, None)
    }

    /// A fetch lock exists while it is held or awaited, and goes with its last user.
    #[tokio::test]
    async fn flight_locks_exist_only_while_used() {
        let flights = Flights::default();
        let entry = Arc::new(OriginEntry::new(
            Origin::parse("http://flight.test").expect("origin"),
        ));
        let first = flights.lock(&entry).await;
        let second = flights.lock(&entry);
        tokio::pin!(second);
        let waited = tokio::time::timeout(Duration::from_millis(50), &mut second).await;
        assert!(waited.is_err(), "one fetch at a time");
        drop(first);
        assert_eq!(flights.table().len(), 1, "still awaited");
        let held = second.await;
        drop(held);
        assert!(flights.table().is_empty());
    }

    fn body(text: &str) -> FetchOutcome {
        FetchOutcome::Body {
            status: 200,
            body: Bytes::from(text.to_string()),
            max_age: None,
            hops: 0,
        }
    }

    fn failure(status: Option<u16>) -> FetchOutcome {
        FetchOutcome::Unreachable {
            status,
            why: "down".into(),
            cause: "http-500".into(),
            retry_after: None,
        }
    }

    #[tokio::test]
    async fn transitions_follow_spec_section_2() {
        let s = store(RobotsConfig::default());
        let now = Instant::now();
        // No copy + 5xx → disallow all, retry soon.
        let down = s.next_snapshot(None, failure(Some(500)), now);
        assert!(matches!(down.policy, Policy::DisallowAll { .. }));
        assert_eq!(down.retry_at(), Some(now + Duration::from_secs(5)));
        // Second failure doubles the wait; 503 halves the base.
        let again = s.next_snapshot(Some(&down), failure(Some(503)), now);
        assert_eq!(again.retry_at(), Some(now + Duration::from_millis(5000)));
        // 30 days unreachable with no copy → allow all.
        let later = now + Duration::from_secs(31 * 86_400);
        let month = s.next_snapshot(Some(&again), failure(None), later);
        assert!(
            matches!(month.policy, Policy::AllowAll { .. }),
            "{:?}",
            month.policy
        );
        // A good copy survives failures (stale-if-error).
        let good = s.next_snapshot(None, body("User-agent: *\nDisallow: /x\n"), now);
        assert_eq!(good.fresh_until, now + Duration::from_secs(86_400));
        let stale = s.next_snapshot(Some(&good), failure(None), now);
        assert!(matches!(stale.policy, Policy::Rules { .. }) && stale.is_stale_copy());
        // 4xx → allow all.
        let none = s.next_snapshot(
            None,
            FetchOutcome::NoRobots {
                status: Some(404),
                why: "HTTP 404".into(),
            },
            now,
        );
        assert!(matches!(none.policy, Policy::AllowAll { .. }));
    }

    #[tokio::test]
    async fn max_age_is_clamped() {
        let s = store(RobotsConfig {
            min_ttl_seconds: crate::config::Seconds(60.0),
            max_ttl_seconds: crate::config::Seconds(3600.0),
            ..RobotsConfig::default()
        });
        let now = Instant::now();
        let short = FetchOutcome::Body {
            status: 200,
            body: Bytes::new(),
            max_age: Some(Duration::from_secs(1)),
            hops: 0,
        };
        assert_eq!(
            s.next_snapshot(None, short, now).fresh_until,
            now + Duration::from_secs(60)
        );
        let long = FetchOutcome::Body {
            status: 200,
            body: Bytes::new(),
            max_age: Some(Duration::from_secs(1 << 30)),
            hops: 0,
        };
        assert_eq!(
            s.next_snapshot(None, long, now).fresh_until,
            now + Duration::from_secs(3600)
        );
    }

    #[tokio::test]
    async fn store_is_bounded() {
        let s = store(RobotsConfig {
            max_origins: 32,
            ..RobotsConfig::default()
        });
        for port in 1..=500u16 {
            let origin = crate::policy::target::parse_authority(
                &format!("127.0.0.1:{port}"),
                crate::policy::target::Scheme::Http,
            )
            .expect("origin");
            s.entry(&origin);
        }
        assert!(s.len() <= 32 + SHARDS, "{}", s.len());
        assert!(s.stats.evictions.load(Ordering::Relaxed) > 0);
    }

    #[tokio::test]
    async fn an_entry_in_use_is_never_evicted() {
        let s = store(RobotsConfig {
            max_origins: 16,
            ..RobotsConfig::default()
        });
        let origin = |port: u16| {
            crate::policy::target::parse_authority(
                &format!("127.0.0.1:{port}"),
                crate::policy::target::Scheme::Http,
            )
            .expect("origin")
        };
        // A request holds the first origin's entry (it is in flight) the whole time.
        let held = s.entry(&origin(1));
        for port in 2..=2000u16 {
            s.entry(&origin(port));
        }
        let still = s.peek(&origin(1)).expect("still held");
        assert!(Arc::ptr_eq(&held, &still));
        assert!(s.len() <= 16 + SHARDS, "{}", s.len());
    }
}
