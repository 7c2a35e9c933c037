//! How the store fills an entry: one fetch at a time per origin ([`super::flight`]), a
//! refresh ahead of expiry in the background, the fleet's shared copy first in fleet
//! mode, and the state transition of SPEC §2 from one snapshot and a fetch outcome to
//! the next ([`OriginStore::next_snapshot`], pure).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use super::{OriginEntry, OriginStore};
use crate::config::PacingKey;
use crate::fleet::{FetchLock, Fleet, SharedRobots, Unavailable, ROBOTS_KEEP};
use crate::origin::fetch::{FetchOutcome, OwnFile};
use crate::origin::files;
use crate::origin::recent::{rules_change, ChangeRecord, FetchRecord};
use crate::origin::snapshot::{Failing, Policy, Snapshot};
use crate::pacing::FetchTurns;
use crate::policy::target::Origin;

impl OriginStore {
    /// Runs one fetch for the entry unless a concurrent caller already did.
    pub(super) async fn fetch_once(
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
    pub(super) fn maybe_refresh_ahead(
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
    pub(super) async fn fetch_and_store(
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
            // This instance owns the origin (only its owner judges its requests) and
            // paces it in memory: the fetch needs no Redis, only its sharing does.
            Err(Unavailable) => self.fetch_here(entry, origin).await,
        }
    }

    /// Fleet mode: the shared copy if usable, else one fetch fleet-wide.
    pub(super) async fn fetch_shared(
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
                    + ROBOTS_KEEP;
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
    pub(super) fn adopt(&self, entry: &OriginEntry, shared: &SharedRobots) {
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
        let snapshot = Arc::new(snapshot);
        if let Some(evidence) = self.evidence.get() {
            super::evidence::adopted(evidence, entry.origin(), shared.version, &snapshot);
        }
        entry.state.store(Some(snapshot));
        entry.version.store(shared.version, Ordering::Release);
    }

    /// Fetches robots.txt from the origin and stores the result in `entry`.
    pub(super) async fn fetch_here(&self, entry: &OriginEntry, origin: &Origin) -> Arc<Snapshot> {
        let Some(turns) = self.fetch_turns(entry, origin).await else {
            return not_acting(entry);
        };
        // Evidence: the fetch is recorded before it leaves (refused when it cannot be).
        let recorded = match self.evidence.get() {
            Some(evidence) => {
                match super::evidence::before_fetch(evidence, origin, OwnFile::RobotsTxt).await {
                    Ok(seq) => seq,
                    Err(()) => return super::evidence::unrecorded_fetch(),
                }
            }
            None => None,
        };
        let started = Instant::now();
        let fetched = self.fetcher.fetch_file(origin, OwnFile::RobotsTxt).await;
        drop(turns);
        self.keep_fetched(entry, origin, fetched, (started, recorded))
    }

    /// The turns a fetch of one of `origin`'s own files (robots.txt, tdmrep.json) holds
    /// while it runs: the fetch is a request to the origin like any other, so it waits
    /// for the turn of every schedule the origin has (and, with `pacing.key: address`,
    /// of the address it goes to), and its end starts their next delay. `None` when this
    /// member may not make it (fleet mode: it does not own the key now).
    pub(super) async fn fetch_turns(
        &self,
        entry: &OriginEntry,
        origin: &Origin,
    ) -> Option<FetchTurnsHeld> {
        let address = match self.pacer.config().key {
            PacingKey::Address => self
                .fetcher
                .address(origin)
                .await
                .map(|ip| self.address(ip)),
            PacingKey::Origin => None,
        };
        let keyed = address.as_deref().unwrap_or(entry);
        // Fleet mode, an origin taken over from a vanished owner: the fetch keeps the
        // Crawl-delay from the last exchange that owner may have run, the largest delay
        // of the copy in hand (the fleet's, adopted even when stale), or without one the
        // largest any delay obeyed could ask.
        if self.acting.get().is_some() {
            let copy = entry
                .state
                .load()
                .as_deref()
                .map(Snapshot::largest_crawl_delay);
            if let Some(at) = self.pacer.fetch_not_before(keyed.place(), copy) {
                tokio::time::sleep_until(at).await;
            }
        }
        let turns = self.pacer.turns_for_fetch(entry.place()).await;
        let address_turns = match &address {
            Some(address) => self.pacer.turns_for_fetch(address.place()).await,
            None => None,
        };
        // Fleet mode: only from the key's owner, with its turns (which wait out a pause
        // it inherited: a previous owner's exchanges, the next turn its delay allows).
        if let Some(acting) = self.acting.get() {
            let turned = turns.is_some() && (address.is_none() || address_turns.is_some());
            if !turned || !acting(keyed).await {
                return None;
            }
        }
        Some(FetchTurnsHeld {
            _address: address_turns,
            _origin: turns,
        })
    }

    /// What a fetch of `origin`'s robots.txt begun at `started` brought, made `entry`'s
    /// snapshot (SPEC §2's transition), counted, logged, and recorded after its `fetch`
    /// record (`recorded`, its place in the evidence).
    fn keep_fetched(
        &self,
        entry: &OriginEntry,
        origin: &Origin,
        (outcome, facts): (FetchOutcome, crate::origin::fetch::FetchFacts),
        (started, recorded): (Instant, Option<u64>),
    ) -> Arc<Snapshot> {
        let said = super::evidence::FetchSaid::of(&outcome, &facts, OwnFile::RobotsTxt);
        let duration = started.elapsed();
        let class = outcome.class();
        crate::telemetry::metrics::record_robots_fetch(class, duration);
        let previous = entry.state.load_full();
        let next = self.next_snapshot(previous.as_deref(), outcome, Instant::now());
        self.fetches.push(
            origin,
            FetchRecord {
                at: started,
                class: class.label(),
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
        if let (Some(evidence), Some(seq)) = (self.evidence.get(), recorded) {
            super::evidence::fetched(evidence, seq, origin, &said, &snapshot);
        }
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
            Policy::Rules(file) if file.robots.usage_overflowed() => {
                log::warn!(
                    "robots.txt {} has more than {} usage rules: every purpose one of them refuses is refused on every path",
                    origin.robots_url(),
                    crate::robots::MAX_USAGE_RULES
                )
            }
            _ => {}
        }
        entry.state.store(Some(snapshot.clone()));
        snapshot
    }

    /// The state transition of SPEC §2 (pure: no I/O, time passed in).
    pub(super) fn next_snapshot(
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

/// What a fetch of an origin's own file holds while it runs: its turns (none taken when
/// they were not free within `max_wait_seconds` outside a fleet: the fetch goes anyway).
pub(super) struct FetchTurnsHeld {
    /// The address's, with `pacing.key: address` (ended first).
    _address: Option<FetchTurns>,
    /// The origin's schedules' turns.
    _origin: Option<FetchTurns>,
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

/// What a fetch this instance may not make answers: the copy it holds, or a policy that
/// refuses for now, kept nowhere (no failure is recorded: the origin was not asked).
fn not_acting(entry: &OriginEntry) -> Arc<Snapshot> {
    if let Some(held) = entry.state.load_full() {
        return held;
    }
    Arc::new(Snapshot {
        policy: Policy::DisallowAll {
            why: "this member does not pace the origin now (its ownership is moving)".into(),
        },
        fresh_until: Instant::now(),
        fetched_at: None,
        last_outcome: "not-owner".into(),
        failing: None,
    })
}
