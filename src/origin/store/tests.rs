//! The origin store's unit tests: entries, fetch locks, the fetch outcomes' transitions
//! (SPEC §2), TTL bounds and eviction.

use super::*;
use crate::config::EgressConfig;
use crate::origin::dns::Resolver;
use crate::origin::fetch::FetchOutcome;
use crate::policy::egress::EgressPolicy;
use bytes::Bytes;

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

/// An entry's pacing key is its origin, or `addr:<ip>` for an address's, written once;
/// the store finds the entry again by it.
#[test]
fn an_entry_is_found_again_by_its_pacing_key() {
    let store = store(RobotsConfig::default());
    let entries = [
        store.entry(&Origin::parse("https://a.example:8443").expect("origin")),
        store.entry(&Origin::parse("http://10.0.0.1:8080").expect("origin")),
        store.address("10.0.0.1".parse().expect("ip")),
        store.address("2001:db8::1".parse().expect("ip")),
    ];
    let keys: Vec<&str> = entries.iter().map(|e| &**e.pacing_key()).collect();
    let written = [
        "https://a.example:8443",
        "http://10.0.0.1:8080",
        "addr:10.0.0.1",
        "addr:2001:db8::1",
    ];
    assert_eq!(keys, written);
    for entry in &entries {
        assert!(Arc::ptr_eq(entry.pacing_key(), entry.pacing_key()));
        let found = store.peek_key(entry.pacing_key()).expect("held");
        assert!(Arc::ptr_eq(&found, entry));
    }
    for unknown in ["http://b.example", "addr:10.0.0.2", "addr:", "nonsense"] {
        assert!(store.peek_key(unknown).is_none(), "{unknown}");
    }
}

/// A fetch lock exists while it is held or awaited, and goes with its last user.
#[tokio::test]
async fn flight_locks_exist_only_while_used() {
    let flights = Flights::default();
    let entry = Arc::new(OriginEntry::new(
        Origin::parse("http://flight.test").expect("origin"),
        1,
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
        min_ttl_seconds: crate::config::Seconds::new(60.0),
        max_ttl_seconds: crate::config::Seconds::new(3600.0),
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
