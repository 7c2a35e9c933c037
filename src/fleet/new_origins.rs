//! How many origins new to this owner each member may make it claim, per second
//! (`fleet.peer_max_new_origins_per_second`): each such request costs the owner a claim
//! in Redis, a DNS look-up and a robots.txt fetch, so a member's key (a stolen one, a
//! member gone wrong) is bounded in what it can make the owner spend.
//!
//! **Algorithm.** A token bucket per member instance, `rate` tokens a second up to
//! `rate` held: a request handed over for a host this owner holds nothing of (no entry
//! in its origin store) takes one before its name is looked up (`enforce::routed`), or
//! is answered `503` (`fleet-unavailable`) and counted in
//! `robotsgate_fleet_peer_new_origins_refused_total`. Hosts are counted, not pacing
//! keys: under `pacing.key: address` many hosts share one key, each still a look-up
//! and a robots.txt fetch. Requests of this instance's own clients, and for hosts it
//! holds, take none. Costs: one map look-up under a
//! lock per such request; memory: one bucket per member that handed over a new origin,
//! dropped a minute after its last (at most [`BUCKETS_KEPT`] kept).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// The most buckets kept; beyond it, those idle for a minute go first.
const BUCKETS_KEPT: usize = 1024;

/// One member's bucket.
#[derive(Debug)]
struct Bucket {
    /// Tokens held at `at`.
    tokens: f64,
    /// When it was last taken from.
    at: Instant,
    /// Its refusals since its last success were logged.
    warned: bool,
}

/// Every member's bucket.
#[derive(Debug)]
pub struct NewOrigins {
    /// Tokens a second, and the most held (0: no bound).
    rate: u32,
    /// By member instance.
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl NewOrigins {
    /// `rate` new origins a second per member (0: any number).
    pub fn new(rate: u32) -> NewOrigins {
        NewOrigins {
            rate,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// May `member` make this owner claim one more new origin now? A refusal is
    /// counted, and logged once per run of refusals.
    pub fn take(&self, member: &str) -> bool {
        if self.rate == 0 {
            return true;
        }
        let rate = f64::from(self.rate);
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if buckets.len() >= BUCKETS_KEPT && !buckets.contains_key(member) {
            buckets.retain(|_, b| now.duration_since(b.at) < Duration::from_secs(60));
        }
        let bucket = buckets.entry(member.to_string()).or_insert(Bucket {
            tokens: rate,
            at: now,
            warned: false,
        });
        let refill = now.duration_since(bucket.at).as_secs_f64() * rate;
        bucket.tokens = (bucket.tokens + refill).min(rate);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            bucket.warned = false;
            return true;
        }
        crate::telemetry::metrics::record_peer_new_origin_refused();
        if !std::mem::replace(&mut bucket.warned, true) {
            log::warn!("fleet: {member} hands over more new origins than fleet.peer_max_new_origins_per_second ({}): refused (503) until its bucket refills", self.rate);
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn each_member_has_its_own_bucket_refilled_at_the_rate() {
        let bound = NewOrigins::new(2);
        assert!(bound.take("a") && bound.take("a"));
        assert!(!bound.take("a"), "a third at once");
        assert!(bound.take("b"), "another member's bucket is full");
        tokio::time::advance(Duration::from_millis(500)).await;
        assert!(bound.take("a"), "one token back after half a second");
        assert!(!bound.take("a"));
        tokio::time::advance(Duration::from_secs(10)).await;
        assert!(
            bound.take("a") && bound.take("a") && !bound.take("a"),
            "held at most 2"
        );
        let unbounded = NewOrigins::new(0);
        assert!((0..1000).all(|_| unbounded.take("a")));
    }
}
