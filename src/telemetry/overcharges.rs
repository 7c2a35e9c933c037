//! Pay per crawl: origins that charged beyond what robotsgate offered. Counted per
//! identity and kind (`robotsgate_crawl_overcharges_total{identity,kind}`: bounded
//! labels, the identities being the configuration's), and per origin in a small table
//! for the status page: the [`MAX_ORIGINS`] origins that overcharged most recently, so
//! a hostile origin set cannot grow it.

use std::sync::{LazyLock, Mutex};

use prometheus::{register_int_counter_vec, IntCounterVec};

/// Origins the table keeps; the least recent is forgotten first.
pub const MAX_ORIGINS: usize = 32;

/// `robotsgate_crawl_overcharges_total`: charges beyond the offer, by identity and kind.
static OVERCHARGES: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "robotsgate_crawl_overcharges_total",
        "Pay-per-crawl answers that charged beyond the offer, by identity and kind: above_offer \
         (more than crawler-max-price; the offer is what the budget counts), other_currency, \
         unreadable (both counted as the offer), unoffered (a charge for a request that offered \
         nothing; nothing counted).",
        &["identity", "kind"]
    )
    .expect("metric registers once")
});

/// One origin's overcharges, as the status page shows them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ByOrigin {
    /// The origin (`https://example.com`).
    pub origin: String,
    /// The identity the last one was signed as.
    pub identity: String,
    /// How many since start (while the origin stays in the table).
    pub count: u64,
    /// The last one's kind.
    pub kind: &'static str,
}

/// The table, most recent last.
static BY_ORIGIN: Mutex<Vec<ByOrigin>> = Mutex::new(Vec::new());

/// Counts one overcharge of `kind` by `origin` to `identity`.
pub fn record(origin: &str, identity: &str, kind: &'static str) {
    OVERCHARGES.with_label_values(&[identity, kind]).inc();
    let mut table = BY_ORIGIN.lock().unwrap_or_else(|e| e.into_inner());
    let count = match table.iter().position(|o| o.origin == origin) {
        Some(at) => table.remove(at).count,
        None => 0,
    };
    if table.len() >= MAX_ORIGINS {
        table.remove(0);
    }
    table.push(ByOrigin {
        origin: origin.to_string(),
        identity: identity.to_string(),
        count: count + 1,
        kind,
    });
}

/// The origins that overcharged, most recent first.
pub fn by_origin() -> Vec<ByOrigin> {
    let table = BY_ORIGIN.lock().unwrap_or_else(|e| e.into_inner());
    table.iter().rev().cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_bounded_and_counts_per_origin() {
        for n in 0..(MAX_ORIGINS + 10) {
            record(&format!("https://o{n}.test"), "main", "unreadable");
        }
        record("https://o40.test", "main", "above_offer");
        let table = by_origin();
        assert!(table.len() <= MAX_ORIGINS);
        assert_eq!(table[0].origin, "https://o40.test");
        assert_eq!((table[0].count, table[0].kind), (2, "above_offer"));
    }
}
