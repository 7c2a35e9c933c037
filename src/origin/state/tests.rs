//! The state file's format: round trips, damage and forgery refused whole, scale.
use super::*;

const LIMITS: Limits = Limits {
    fresh: Duration::from_secs(7 * 86_400),
    retry: Duration::from_secs(600),
    pause: Duration::from_secs(120),
};

fn key() -> StateKey {
    StateKey::new(b"a test key of some length").expect("key")
}

fn kept(origin: &str, body: &str, fresh_in: Duration, clock: Clock) -> Kept {
    let body = Bytes::copy_from_slice(body.as_bytes());
    Kept {
        origin: Origin::parse(origin).expect("origin"),
        snapshot: Arc::new(Snapshot {
            policy: Policy::Rules(crate::origin::files::parse(body)),
            fresh_until: clock.instant + fresh_in,
            fetched_at: Some(clock.instant),
            last_outcome: "HTTP 200".into(),
            failing: None,
        }),
        pauses: vec![(
            "*".into(),
            Some(clock.instant + fresh_in),
            Duration::from_secs(2),
        )],
    }
}

#[tokio::test]
async fn round_trip_keeps_policies_times_and_pauses() {
    let clock = Clock::now();
    let data = encode(
        &[kept(
            "https://example.com",
            "User-agent: *\nDisallow: /x\n",
            Duration::from_secs(60),
            clock,
        )],
        clock,
        &key(),
    );
    let back = decode(&data, clock, LIMITS, &key()).expect("decodes").kept;
    assert_eq!(back.len(), 1);
    assert_eq!(back[0].origin.to_string(), "https://example.com");
    let fresh = back[0].snapshot.fresh_until.duration_since(clock.instant);
    assert!(
        fresh >= Duration::from_millis(59_990) && fresh <= Duration::from_secs(60),
        "{fresh:?}"
    );
    assert!(
        matches!(&back[0].snapshot.policy, Policy::Rules(file) if &*file.body == b"User-agent: *\nDisallow: /x\n")
    );
    assert_eq!(back[0].pauses[0].2, Duration::from_secs(2));
}

#[tokio::test]
async fn every_damage_is_refused_whole() {
    let clock = Clock::now();
    let data = encode(
        &[
            kept(
                "http://a.test",
                "User-agent: *\nDisallow: /\n",
                Duration::from_secs(5),
                clock,
            ),
            kept("http://b.test:8080", "", Duration::from_secs(5), clock),
        ],
        clock,
        &key(),
    );
    for cut in 0..data.len() {
        assert!(
            decode(&data[..cut], clock, LIMITS, &key()).is_err(),
            "truncated at {cut}"
        );
    }
    for at in (0..data.len()).step_by(7) {
        let mut bad = data.clone();
        bad[at] ^= 0x55;
        assert!(
            decode(&bad, clock, LIMITS, &key()).is_err(),
            "flipped at {at}"
        );
    }
    let mut future = data.clone();
    future[8] = 9;
    let err = decode(&future, clock, LIMITS, &key())
        .map(|d| d.kept.len())
        .expect_err("future version")
        .to_string();
    assert!(err.contains("version 9"), "{err}");
    // Written with another key: refused whole, however well formed.
    let other = StateKey::new(b"another key, another robotsgate").expect("key");
    let err = decode(&data, clock, LIMITS, &other)
        .map(|d| d.kept.len())
        .expect_err("another key")
        .to_string();
    assert!(err.contains("HMAC"), "{err}");
    assert!(StateKey::new(b"short").is_err());
}

/// 100,000 origins with a five-line robots.txt: the size and the load time are
/// printed (`cargo test --release state -- --nocapture`), the count checked.
#[tokio::test]
async fn a_hundred_thousand_origins_round_trip() {
    let clock = Clock::now();
    let robots = "User-agent: *\nDisallow: /private\nDisallow: /tmp\nAllow: /tmp/public\nSitemap: https://example.com/sitemap.xml\n";
    let kept: Vec<Kept> = (0..100_000)
        .map(|i| {
            kept(
                &format!("https://host{i}.example.com"),
                robots,
                Duration::from_secs(3600),
                clock,
            )
        })
        .collect();
    let started = std::time::Instant::now();
    let data = encode(&kept, clock, &key());
    let encoded = started.elapsed();
    let started = std::time::Instant::now();
    let back = decode(&data, clock, LIMITS, &key()).expect("decodes").kept;
    let decoded = started.elapsed();
    assert_eq!(back.len(), 100_000);
    println!(
        "100000 origins: {} bytes ({} per origin), encoded in {:.0} ms, loaded in {:.0} ms",
        data.len(),
        data.len() / 100_000,
        encoded.as_secs_f64() * 1000.0,
        decoded.as_secs_f64() * 1000.0
    );
}

proptest::proptest! {
    /// Any bytes: an error or a load, never a panic.
    #[test]
    fn any_bytes_never_panic(data in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
        let clock = Clock::now();
        let _ = decode(&data, clock, LIMITS, &key());
        let mut framed = MAGIC.to_vec();
        framed.extend_from_slice(&VERSION.to_le_bytes());
        framed.extend_from_slice(&data);
        let _ = decode(&framed, clock, LIMITS, &key());
    }
}
