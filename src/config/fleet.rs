//! `fleet`: the shared backend of a fleet of instances (one Redis, a Cluster or a
//! Sentinel-managed Redis) and what an instance does while it is unreachable.

use serde::Deserialize;

use super::{ConfigError, Timeout};

/// Fleet mode (see `pacing::backend`): with `redis` or `redis_cluster` set, every instance
/// pointed at the same Redis shares pacing and robots.txt, and the fleet behaves as one
/// proxy. Unset: each instance keeps its state in memory (the embedded backend).
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FleetConfig {
    /// One Redis: `redis://[user:password@]host:port/db`, or `rediss://` for TLS.
    pub redis: Option<String>,
    /// The seed nodes of a Redis Cluster, instead of `redis`.
    pub redis_cluster: Vec<String>,
    /// A Sentinel-managed Redis, instead of `redis`: the master's name and the
    /// sentinels' addresses. A failover is followed without a restart.
    pub redis_sentinel: Option<SentinelConfig>,
    /// Accept a Redis whose `maxmemory-policy` can evict robotsgate's keys (`allkeys-*`,
    /// `volatile-*`). Off: such a Redis counts as unavailable, named in `/readyz`, since
    /// an evicted schedule forgets the turns held on it.
    pub allow_eviction: bool,
    /// What a request that needs the backend gets while Redis is down or slow.
    pub on_unavailable: OnUnavailable,
    /// Longest wait for one Redis command; slower counts as unavailable.
    pub command_timeout_seconds: Timeout,
    /// How long a turn stays taken in Redis when its holder never gives it back (its
    /// instance died or lost Redis): the longest a turn can be held
    /// ([`ExchangeBounds::longest_hold`]) plus a second, which is the default; a shorter
    /// value is a configuration error (a live holder would lose its turn mid-exchange).
    pub lease_seconds: Option<Timeout>,
    /// How often every held robots.txt is checked against the shared copy, in case an
    /// invalidation message was missed.
    pub resync_seconds: Timeout,
}

impl Default for FleetConfig {
    fn default() -> Self {
        FleetConfig {
            redis: None,
            redis_cluster: Vec::new(),
            redis_sentinel: None,
            allow_eviction: false,
            on_unavailable: OnUnavailable::Refuse,
            command_timeout_seconds: Timeout(0.5),
            lease_seconds: None,
            resync_seconds: Timeout(10.0),
        }
    }
}

impl FleetConfig {
    /// Is fleet mode on?
    pub fn enabled(&self) -> bool {
        self.redis.is_some() || !self.redis_cluster.is_empty() || self.redis_sentinel.is_some()
    }
}

/// `fleet.redis_sentinel`: where Redis Sentinel says the master is.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SentinelConfig {
    /// The master's name in the sentinels' configuration (`sentinel monitor <name> …`).
    pub master: String,
    /// The sentinels: `redis://host:port` each.
    pub sentinels: Vec<String>,
}

/// `fleet.on_unavailable`: what happens while the shared backend cannot be reached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnUnavailable {
    /// 503 + `Retry-After` (`reason="fleet-backend-unavailable"`) for every request that
    /// needs the backend (a paced one, or one whose robots.txt must be read).
    #[default]
    Refuse,
    /// Each origin is paced (and its robots.txt fetched) by one instance alone, its
    /// owner by rendezvous hashing over the last membership seen, once every turn
    /// granted before the outage has ended; the others refuse its requests that need a
    /// turn (see `pacing::outage`).
    Local,
}

impl FleetConfig {
    /// `fleet`: one backend, given as redis:// or rediss:// URLs.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let f = self;
        let backends = usize::from(f.redis.is_some())
            + usize::from(!f.redis_cluster.is_empty())
            + usize::from(f.redis_sentinel.is_some());
        if backends > 1 {
            return Err(ConfigError::invalid(
                "key `robotsgate.fleet.redis`/`redis_cluster`/`redis_sentinel`: set only one",
            ));
        }
        let sentinels = f.redis_sentinel.iter().flat_map(|s| {
            s.sentinels
                .iter()
                .enumerate()
                .map(|(i, u)| (format!("redis_sentinel.sentinels[{i}]"), u))
        });
        if let Some(s) = &f.redis_sentinel {
            if s.master.is_empty() || s.sentinels.is_empty() {
                return Err(ConfigError::invalid(
                    "key `robotsgate.fleet.redis_sentinel`: needs `master` and at least one of `sentinels`",
                ));
            }
        }
        for (key, url) in f
            .redis
            .iter()
            .map(|u| ("redis".to_string(), u))
            .chain(
                f.redis_cluster
                    .iter()
                    .enumerate()
                    .map(|(i, u)| (format!("redis_cluster[{i}]"), u)),
            )
            .chain(sentinels)
        {
            if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
                return Err(ConfigError::invalid(format!(
                    "key `robotsgate.fleet.{key}`: `{url}` is not a redis:// or rediss:// URL"
                )));
            }
        }
        Ok(())
    }
}
