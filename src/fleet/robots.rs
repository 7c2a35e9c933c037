//! The robots.txt copy a fleet keeps in its backend: a new owner of an origin starts
//! from it instead of fetching again, and a purge reaches every instance.
//!
//! The instance that needs a fetch takes the origin's lock (`rg:{origin}:lock`, `SET NX
//! PX`), fetches, writes the result with a new version (`rg:{origin}:r`: the raw file
//! and its fetch state, times relative to Redis `TIME`) and publishes it; the others
//! wait for that message (or ask again) and parse the shared copy into their own
//! snapshot. Each instance keeps its `arc-swap` snapshot as the hot path: reading
//! robots.txt never touches Redis. A record lives until its copy is no longer fresh, plus a
//! day; each read extends it to at least a day: a day after last use.
//! Scripts: `scripts/robots_*.lua`.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::fleet::backend::{ms, Fleet, Unavailable, CHANNEL};
use crate::fleet::scripts::script;

/// How long a record outlives its last use.
pub const ROBOTS_KEEP: Duration = Duration::from_secs(86_400);

/// What [`Fleet::lock_robots`] found.
#[derive(Debug)]
pub enum FetchLock {
    /// This instance fetches; the token releases the lock with the write.
    Taken(String),
    /// Another instance is fetching.
    Busy,
    /// A copy newer than the caller's was written meanwhile: nothing to fetch.
    Newer,
}

/// The Redis key of `origin`'s shared robots.txt copy.
fn robots_key(origin: &str) -> String {
    format!("rg:{{{origin}}}:r")
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

impl Fleet {
    /// The shared robots.txt of `origin`, if any.
    pub async fn read_robots(
        self: &Arc<Self>,
        origin: &str,
    ) -> Result<Option<SharedRobots>, Unavailable> {
        let key = robots_key(origin);
        let fields: Option<Vec<Vec<u8>>> = self
            .run(
                "robots_read",
                script("robots_read").key(&key).arg(ms(ROBOTS_KEEP)),
            )
            .await?;
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

    /// Takes the fleet-wide fetch lock of `origin` for `ttl`, unless a copy newer than
    /// `seen` (the version the caller read; `None`: a forced refresh) exists.
    pub async fn lock_robots(
        self: &Arc<Self>,
        origin: &str,
        ttl: Duration,
        seen: Option<u64>,
    ) -> Result<FetchLock, Unavailable> {
        let key = format!("rg:{{{origin}}}:lock");
        let token = self.ticket();
        let seen = seen.map_or(-1, |v| i64::try_from(v).unwrap_or(i64::MAX));
        let taken: i64 = self
            .run(
                "robots_lock",
                script("robots_lock")
                    .key(&key)
                    .key(robots_key(origin))
                    .arg(&token)
                    .arg(ms(ttl).max(1))
                    .arg(seen),
            )
            .await?;
        Ok(match taken {
            1 => FetchLock::Taken(token),
            -1 => FetchLock::Newer,
            _ => FetchLock::Busy,
        })
    }

    /// Stores a fetch's result under the lock `token`, publishes it, releases the lock;
    /// returns the new version.
    pub async fn write_robots(
        self: &Arc<Self>,
        origin: &str,
        token: &str,
        robots: &SharedRobots,
        keep: Duration,
    ) -> Result<u64, Unavailable> {
        let key = robots_key(origin);
        let lock_key = format!("rg:{{{origin}}}:lock");
        let optional = |v: Option<i64>| v.map_or(String::new(), |v| v.to_string());
        self.run(
            "robots_write",
            script("robots_write")
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
    pub async fn purge_robots(self: &Arc<Self>, origin: &str) -> Result<(), Unavailable> {
        let key = robots_key(origin);
        let _: i64 = self
            .run(
                "robots_purge",
                script("robots_purge").key(&key).arg(CHANNEL).arg(origin),
            )
            .await?;
        Ok(())
    }
}
