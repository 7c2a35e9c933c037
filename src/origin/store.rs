//! The origin store: one entry per origin ([`OriginEntry`]) holding everything kept about
//! it — its robots.txt snapshot, the fetch in flight, its pacing schedules — so a request
//! touches one entry, found with one lookup.
//!
//! Readers are on every request, writers are rare (one fetch per origin per day), so an
//! entry's robots.txt state is an `ArcSwap<Snapshot>`: a read is an atomic load, and a
//! refresh swaps in a new snapshot without ever blocking a reader. Entries live in a map
//! sharded by origin hash, each shard an LRU bounded to its share of `max_origins`; an
//! entry a request is using (in flight, waiting for a fetch or for its pacing turn), or
//! whose pacing is still in force (a delay since the last end, a pause, a backoff), is
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
//! Fleet mode (`fleet::robots`): only an origin's owner judges its requests, so only it
//! fetches its robots.txt. A fetch first looks at the copy kept in Redis (a new owner
//! starts from the last one's): a usable one (fresh, or failing and not yet due for a
//! retry) is parsed into this instance's snapshot; otherwise this instance fetches
//! under the fleet-wide lock and writes the result back. Other instances' changes (a new
//! copy, a purge) arrive as [`FleetEvent`]s. While Redis is unavailable the owner
//! fetches here (it paces the origin in memory either way) and shares the copy later.
//!
//! **Its other files:** `fetching.rs` (how the store fills an entry), `flight.rs` (one
//! fetch of an origin's own files per origin at a time), `tdm.rs` (TDMRep's file, fetched
//! when a request needs it), `evidence.rs` (what a fetch and an adopted copy leave in the
//! evidence).

mod evidence;
mod fetching;
mod flight;
mod tdm;

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use tokio::time::Instant;

use self::flight::Flights;
use crate::config::RobotsConfig;
use crate::fleet::{Fleet, FleetEvent};
use crate::origin::fetch::Fetcher;
use crate::origin::recent::{
    ChangeRecord, FetchRecord, Recent, CHANGES, CHANGES_PER_ORIGIN, HISTORY, HISTORY_PER_ORIGIN,
};
pub use crate::origin::snapshot::{Failing, Policy, Snapshot};
use crate::pacing::{Pacer, Place, Schedules};
use crate::policy::target::Origin;
pub use tdm::{TdmCopy, TdmUnknown};

/// Everything robotsgate keeps about one origin: its robots.txt snapshot, the fetch in
/// flight, its pacing schedules. A request finds all of it with one lookup.
pub struct OriginEntry {
    /// The origin.
    origin: Origin,
    /// Its robots.txt snapshot, swapped whole (none: not fetched yet).
    state: ArcSwapOption<Snapshot>,
    /// Its TDMRep file, fetched when a request a reservation binds first needs it.
    tdm: ArcSwapOption<TdmCopy>,
    /// A background refresh is under way.
    refreshing: AtomicBool,
    /// Decisions asked for this origin since it entered the store (the status page's
    /// "busiest origins").
    requests: AtomicU64,
    /// Its pacing schedules.
    schedules: Schedules,
    /// Fleet mode: the shared robots.txt version the snapshot is from (0: none).
    version: AtomicU64,
    /// The key its schedules are paced, and in a fleet owned, under: written once, when
    /// first asked for (a fleet member reads it on every request it routes; a single
    /// instance never does, and holds none).
    key: std::sync::OnceLock<Arc<str>>,
    /// Its key in the store (a keyed hash of the origin), also the group key of its
    /// connection pool: origins sharing an address share no connection.
    hash: u64,
}

/// [`OriginEntry::pacing_key`] of `origin`'s entry.
fn pacing_key(origin: &Origin) -> Arc<str> {
    match &origin.host {
        crate::policy::target::Host::Ip(ip) if origin.port == 0 => format!("addr:{ip}").into(),
        _ => origin.to_string().into(),
    }
}

impl OriginEntry {
    /// An entry for `origin`, whose store key is `hash`, with nothing known yet.
    fn new(origin: Origin, hash: u64) -> OriginEntry {
        OriginEntry {
            hash,
            state: ArcSwapOption::empty(),
            tdm: ArcSwapOption::empty(),
            refreshing: AtomicBool::new(false),
            requests: AtomicU64::new(0),
            schedules: Schedules::default(),
            version: AtomicU64::new(0),
            key: std::sync::OnceLock::new(),
            origin,
        }
    }

    /// The key its schedules are paced, and in a fleet owned, under: `addr:<ip>` for an
    /// address's ([`OriginStore::address`] keeps them under port 0), the origin otherwise.
    pub fn pacing_key(&self) -> &Arc<str> {
        self.key.get_or_init(|| pacing_key(&self.origin))
    }

    /// The group key of the origin's upstream connection pool: one pool per origin,
    /// without hashing the origin again for each request.
    pub fn pool_key(&self) -> u64 {
        self.hash
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

    /// Where the origin's pacing schedules are made.
    pub fn place(&self) -> Place<'_> {
        Place {
            schedules: &self.schedules,
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
    /// Hashes origins to shards and keys.
    hasher: std::collections::hash_map::RandomState,
    /// Entries each shard holds at most.
    per_shard: usize,
    /// Fetches robots.txt files.
    fetcher: Arc<Fetcher>,
    /// Every robots.txt fetch takes its turn on the origin's schedules, like a page.
    pacer: Arc<Pacer>,
    /// The `robots:` settings.
    config: RobotsConfig,
    /// The shared backend, in fleet mode.
    fleet: Option<Arc<Fleet>>,
    /// Fleet mode: does this instance own an entry's key now? A robots.txt fetch is a
    /// request to the origin like any other, made only by its owner.
    acting: std::sync::OnceLock<ActingGate>,
    /// The evidence, when it is kept: each robots.txt fetch is recorded before it
    /// leaves, what it brought after it, and every file acted on kept.
    evidence: std::sync::OnceLock<Arc<crate::evidence::Evidence>>,
    /// This store's counts.
    pub stats: Arc<StoreStats>,
    /// Recent fetches, over all origins.
    fetches: Recent<FetchRecord>,
    /// Recent rule changes, over all origins.
    changes: Recent<ChangeRecord>,
    /// One fetch per origin at a time.
    flights: Flights,
}

/// Whether this instance owns an entry's key now (fleet mode).
pub type ActingGate = Box<
    dyn Fn(&OriginEntry) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send>>
        + Send
        + Sync,
>;

/// Shards of the store (each with its own lock).
const SHARDS: usize = 16;

/// One shard: entries by origin hash, least recently used first out.
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
            acting: std::sync::OnceLock::new(),
            evidence: std::sync::OnceLock::new(),
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
    pub fn entry(&self, origin: &Origin) -> Arc<OriginEntry> {
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
            // Nor one whose schedules still hold pacing (a delay not yet over since the
            // last end, a pause, a backoff): forgetting it would let the next request
            // start early.
            let idle =
                Arc::strong_count(lru) == 1 && !lru.schedules.busy() && !lru.schedules.in_force();
            if idle {
                map.pop_lru();
                self.stats.evictions.fetch_add(1, Ordering::Relaxed);
                crate::telemetry::metrics::STORE_EVICTIONS.inc();
            } else if let Some((key, busy)) = map.pop_lru() {
                map.push(key, busy);
            }
        }
        let entry = Arc::new(OriginEntry::new(origin.clone(), key));
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

    /// The entry whose [`OriginEntry::pacing_key`] is `key`, if it is held.
    pub fn peek_key(&self, key: &str) -> Option<Arc<OriginEntry>> {
        let origin = match key.strip_prefix("addr:") {
            Some(ip) => Origin {
                scheme: crate::policy::target::Scheme::Http,
                host: crate::policy::target::Host::Ip(ip.parse().ok()?),
                port: 0,
            },
            None => Origin::parse(key).ok()?,
        };
        self.peek(&origin)
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

    /// The `n` origins with the most requests waiting for or holding a pacing turn
    /// (none with an empty queue), longest first. One pass over the store, a lock per
    /// origin's schedules.
    pub fn longest_queues(&self, n: usize) -> Vec<(Origin, usize)> {
        let mut queues: Vec<(Origin, usize)> = Vec::new();
        for shard in &self.shards {
            let map = shard.lock().unwrap_or_else(|e| e.into_inner());
            queues.extend(map.iter().filter_map(|(_, entry)| {
                let queued = entry.schedules.queued();
                (queued > 0).then(|| (entry.origin.clone(), queued))
            }));
        }
        queues.sort_by_key(|(_, queued)| std::cmp::Reverse(*queued));
        queues.truncate(n);
        queues
    }

    /// Forgets `origin`'s robots.txt copy (fleet-wide in fleet mode), never its pacing:
    /// the next request fetches it again, in its turn. True if a copy was held here.
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

    /// Forgets `origin`'s robots.txt copy here only: the next request fetches it again.
    /// Its pacing schedules stay (turns in flight and queued, the last end, pauses and
    /// backoff): the refetch takes its turn on them like any request, so a purge never
    /// lets a request start early.
    fn forget(&self, origin: &Origin) -> bool {
        let Some(entry) = self.peek(origin) else {
            return false;
        };
        entry.version.store(0, Ordering::Release);
        entry.tdm.store(None);
        entry.state.swap(None).is_some()
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

    /// Applies what another fleet member announced (a new robots.txt copy, a purge).
    fn apply(self: &Arc<Self>, event: FleetEvent) {
        let origin_of = |text: &str| Origin::parse(text).ok();
        match event {
            FleetEvent::RobotsChanged { origin, version } => {
                let Some(entry) = origin_of(&origin).and_then(|o| self.peek(&o)) else {
                    return;
                };
                if entry.version.load(Ordering::Acquire) < version {
                    self.resync(entry, version);
                }
            }
            FleetEvent::Purged { origin } => {
                if let Some(origin) = origin_of(&origin) {
                    self.forget(&origin);
                }
            }
        }
    }

    /// In the background: takes the shared copy of `entry`'s robots.txt, version
    /// `version` (a message said so), if it is newer than the one held.
    fn resync(self: &Arc<Self>, entry: Arc<OriginEntry>, version: u64) {
        let Some(fleet) = self.fleet.clone() else {
            return;
        };
        let store = self.clone();
        fleet.clone().spawn(async move {
            let key = entry.origin.to_string();
            if version <= entry.version.load(Ordering::Acquire) {
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

    /// Fleet mode: robots.txt is fetched only when `gate` says this instance owns the
    /// key then (set once, by the enforcer that owns the fleet's door).
    pub fn act_only_when(&self, gate: ActingGate) {
        let _ = self.acting.set(gate);
    }

    /// Records every robots.txt fetch, and keeps every file acted on, in `evidence`.
    pub fn record_into(&self, evidence: Arc<crate::evidence::Evidence>) {
        let _ = self.evidence.set(evidence);
    }

    /// The entry of `origin` and the policy to apply to a request for it now, fetching
    /// its robots.txt if none is held.
    pub async fn get(self: &Arc<Self>, origin: &Origin) -> (Arc<OriginEntry>, Arc<Snapshot>) {
        let entry = self.entry(origin);
        entry.requests.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
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
}

#[cfg(test)]
mod tests;
