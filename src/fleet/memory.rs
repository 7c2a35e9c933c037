//! Whether a Redis can hold the fleet's records (membership, claims, robots.txt copies,
//! budgets), from its `INFO memory`: a `maxmemory-policy` that evicts them, or no
//! memory left (checked at every health check: a script that has begun to write is let
//! finish past `maxmemory`, so the scripts' own errors cannot be relied on to say so).

use redis::Value;

use super::down::Down;
use crate::telemetry::metrics::DownCause;

/// A `maxmemory-policy` under which Redis may evict keys robotsgate wrote (its keys all
/// carry a TTL, so `volatile-*` policies reach them too).
fn evicts(policy: &str) -> bool {
    policy.starts_with("allkeys-") || policy.starts_with("volatile-")
}

/// The text answers in `value` (one, or one per node of a Cluster).
pub(super) fn texts(value: Value) -> Vec<String> {
    match value {
        Value::BulkString(bytes) => vec![String::from_utf8_lossy(&bytes).into_owned()],
        Value::VerbatimString { text, .. } => vec![text],
        Value::SimpleString(text) => vec![text],
        Value::Map(pairs) => pairs.into_iter().flat_map(|(_, v)| texts(v)).collect(),
        Value::Array(values) => values.into_iter().flat_map(texts).collect(),
        _ => Vec::new(),
    }
}

/// Can this Redis (its `INFO memory`) hold the fleet's records? `Err` names why not: a
/// policy that evicts them (unless `allow_eviction`), or no memory left.
pub(super) fn memory_fit(info: &str, allow_eviction: bool) -> Result<(), Down> {
    let policy = info_field(info, "maxmemory_policy").unwrap_or("noeviction");
    if evicts(policy) && !allow_eviction {
        return Err(Down::new(DownCause::EvictionPolicy, format!(
            "Redis maxmemory-policy {policy} can evict the fleet's claims and records (set it to noeviction, or fleet.allow_eviction)"
        )));
    }
    let number = |field| info_field(info, field).and_then(|v| v.parse::<u64>().ok());
    if let (Some(used), Some(max)) = (number("used_memory"), number("maxmemory")) {
        if max > 0 && used >= max && !evicts(policy) {
            return Err(Down::new(
                DownCause::OutOfMemory,
                format!(
                    "Redis out of memory (used_memory {used} >= maxmemory {max}, policy {policy})"
                ),
            ));
        }
    }
    Ok(())
}

/// `field:value` from an `INFO` answer.
pub(super) fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .map(str::trim)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_settings_that_lose_schedules_are_named() {
        let info = |policy: &str, used: u64, max: u64| {
            format!("# Memory\r\nused_memory:{used}\r\nmaxmemory:{max}\r\nmaxmemory_policy:{policy}\r\n")
        };
        assert!(memory_fit(&info("noeviction", 10, 0), false).is_ok());
        assert!(memory_fit(&info("noeviction", 10, 100), false).is_ok());
        let full = memory_fit(&info("noeviction", 100, 100), false).unwrap_err();
        assert_eq!(full.cause, DownCause::OutOfMemory);
        assert!(full.detail.contains("out of memory"), "{full}");
        for policy in [
            "allkeys-lru",
            "volatile-ttl",
            "volatile-lfu",
            "allkeys-random",
        ] {
            let why = memory_fit(&info(policy, 1, 100), false).unwrap_err();
            assert_eq!(why.cause, DownCause::EvictionPolicy);
            assert!(why.detail.contains(policy), "{why}");
            assert!(memory_fit(&info(policy, 1, 100), true).is_ok());
        }
        let cluster = Value::Map(vec![
            (
                Value::SimpleString("a".into()),
                Value::BulkString(info("noeviction", 1, 0).into()),
            ),
            (
                Value::SimpleString("b".into()),
                Value::VerbatimString {
                    format: redis::VerbatimFormat::Text,
                    text: info("allkeys-lru", 1, 9),
                },
            ),
        ]);
        let nodes = texts(cluster);
        assert_eq!(nodes.len(), 2);
        assert!(memory_fit(&nodes[1], false).is_err());
    }
}
