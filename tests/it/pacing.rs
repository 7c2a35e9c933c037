//! Pacing by Crawl-delay over real sockets: the origin logs when each request arrives and
//! when its response was written, and the gaps are checked there, not at the client.

use serde_json::json;
use std::time::{Duration, Instant};

use crate::common::{concurrent, curl, min_gap, pages, Behaviour, Conf, Proxy, Seen, TestOrigin};

/// Time between the first and the last arrival of these requests at the origin.
fn arrival_spread(seen: &[Seen]) -> Duration {
    let first = seen.iter().map(|s| s.arrived).min().expect("requests");
    let last = seen.iter().map(|s| s.arrived).max().expect("requests");
    last.duration_since(first)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_concurrent_clients_are_spaced_by_crawl_delay() {
    let origin = TestOrigin::robots("User-agent: *\nCrawl-delay: 0.5\n").await;
    let proxy = Proxy::start_for_loopback(&Conf::new());
    // Fetch robots.txt first: the timed run then measures pacing alone.
    assert_eq!(curl(&proxy, &origin.url("/warm"), &[]).0, 200);
    let start = Instant::now();
    let statuses = concurrent(
        &proxy,
        (0..8)
            .map(|i| (origin.url(&format!("/p/{i}")), "ExampleBot/1.0"))
            .collect(),
    )
    .await;
    let elapsed = start.elapsed();
    assert!(statuses.iter().all(|&s| s == 200), "{statuses:?}");
    let seen = pages(&origin, "/p/");
    assert_eq!(seen.len(), 8);
    assert!(
        min_gap(&seen) >= Duration::from_millis(500),
        "gap {:?}",
        min_gap(&seen)
    );
    // Ideal: 8 slots of 0.5 s (the first follows /warm by one delay).
    let ideal = Duration::from_millis(8 * 500);
    assert!(
        elapsed < ideal.mul_f64(1.2),
        "{elapsed:?} vs ideal {ideal:?}"
    );
    // The first page also kept its distance from the robots.txt fetch.
    let robots = origin.first("/robots.txt");
    assert!(
        pages(&origin, "/warm")[0]
            .arrived
            .duration_since(robots.done.expect("done"))
            >= Duration::from_millis(500)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_origins_are_paced_independently_and_in_parallel() {
    let robots = "User-agent: *\nCrawl-delay: 0.5\n";
    let a = TestOrigin::robots(robots).await;
    let b = TestOrigin::robots(robots).await;
    let proxy = Proxy::start_for_loopback(&Conf::new());
    let urls = (0..4)
        .flat_map(|i| {
            [
                (a.url(&format!("/p/{i}")), "X/1"),
                (b.url(&format!("/p/{i}")), "X/1"),
            ]
        })
        .collect();
    let statuses = concurrent(&proxy, urls).await;
    assert!(statuses.iter().all(|&s| s == 200), "{statuses:?}");
    for origin in [&a, &b] {
        assert!(min_gap(&pages(origin, "/p/")) >= Duration::from_millis(500));
    }
    // In parallel: both origins' four slots overlap in time (serial would take 8 slots).
    let mut all = pages(&a, "/p/");
    all.extend(pages(&b, "/p/"));
    assert!(
        arrival_spread(&all) < Duration::from_millis(3000),
        "{:?}",
        arrival_spread(&all)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crawlers_in_different_groups_have_their_own_schedules() {
    let robots = "User-agent: SlowBot\nCrawl-delay: 1\n\nUser-agent: *\nCrawl-delay: 1\n";
    let origin = TestOrigin::robots(robots).await;
    let proxy = Proxy::start_for_loopback(&Conf::new());
    assert_eq!(
        curl(&proxy, &origin.url("/warm"), &["-A", "SlowBot/1"]).0,
        200
    );
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let statuses = concurrent(
        &proxy,
        vec![
            (origin.url("/slow/1"), "SlowBot/1"),
            (origin.url("/other/1"), "OtherBot/1"),
        ],
    )
    .await;
    assert_eq!(statuses, [200, 200]);
    // Different groups: at the origin they arrived together, neither waiting out the
    // other's 1 s delay.
    let mut both = pages(&origin, "/slow/");
    both.extend(pages(&origin, "/other/"));
    assert!(
        arrival_spread(&both) < Duration::from_millis(900),
        "{:?}",
        arrival_spread(&both)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_and_wait_bounds_answer_503_with_retry_after() {
    let origin = TestOrigin::robots("User-agent: *\nCrawl-delay: 2\n").await;
    let proxy = Proxy::start_for_loopback(
        &Conf::new().set("pacing", json!({"max_wait_seconds": 3, "max_queue": 100})),
    );
    // Right after the robots.txt fetch, the first page waits ~2 s; a second would wait ~4 s.
    let first = proxy.spawn_get(origin.url("/one"));
    // The first request is queued for its slot once the proxy's queue gauge says so.
    assert!(proxy.queued(1.0).await);
    let (status, head, body) = curl(&proxy, &origin.url("/two"), &[]);
    assert_eq!(status, 503, "{head}{body}");
    let retry: u64 = head
        .lines()
        .find_map(|l| l.strip_prefix("Retry-After: "))
        .and_then(|v| v.trim().parse().ok())
        .expect("Retry-After");
    assert!((3..=5).contains(&retry), "Retry-After {retry}");
    assert!(head.contains("paced; reason=wait-too-long"), "{head}");
    assert_eq!(first.await.expect("task").expect("request"), 200);
    assert_eq!(origin.count("/two"), 0);

    // Queue bound: one may wait, the next is refused at once.
    let proxy = Proxy::start_for_loopback(
        &Conf::new().set("pacing", json!({"max_wait_seconds": 30, "max_queue": 1})),
    );
    let origin = TestOrigin::robots("User-agent: *\nCrawl-delay: 1\n").await;
    let waiting = proxy.spawn_get(origin.url("/queued"));
    // The first request is queued for its slot once the proxy's queue gauge says so.
    assert!(proxy.queued(1.0).await);
    let (status, head, _) = curl(&proxy, &origin.url("/refused"), &[]);
    assert_eq!(status, 503);
    assert!(
        head.contains("reason=queue-full") && head.contains("Retry-After: "),
        "{head}"
    );
    assert_eq!(waiting.await.expect("task").expect("request"), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_disconnects_gives_up_its_place() {
    let origin = TestOrigin::robots("User-agent: *\nCrawl-delay: 1.5\n").await;
    let proxy = Proxy::start_for_loopback(&Conf::new());
    assert_eq!(curl(&proxy, &origin.url("/first"), &[]).0, 200);
    // Queued behind /first's delay, then gone after 0.3 s.
    let (status, _, _) = curl(&proxy, &origin.url("/impatient"), &["--max-time", "0.3"]);
    assert_eq!(status, 0);
    assert_eq!(curl(&proxy, &origin.url("/patient"), &[]).0, 200);

    assert_eq!(
        origin.count("/impatient"),
        0,
        "a request whose client left never reaches the origin"
    );
    let first = pages(&origin, "/first");
    let patient = pages(&origin, "/patient");
    let gap = patient[0]
        .arrived
        .duration_since(first[0].done.expect("done"));
    // One delay after /first, not two: /impatient's place was given up.
    assert!(
        gap >= Duration::from_millis(1500) && gap < Duration::from_millis(2900),
        "{gap:?}"
    );
    // Logged and counted as a client that left while queued, with the time it waited.
    let log = proxy
        .log_with_all(&["/impatient", "decision=\"left_while_queued\""])
        .await;
    let line = log
        .lines()
        .find(|l| l.contains("/impatient") && l.contains("decision="))
        .expect("the access line");
    assert!(
        !log.lines()
            .any(|l| l.contains("/impatient") && l.contains("ERROR")),
        "a client leaving is no error: {log}"
    );
    let waited: f64 = line
        .split("pacing_wait_seconds=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("a wait in {line}"));
    assert!((0.2..1.5).contains(&waited), "{line}");
    assert!(line.contains("status=0"), "{line}");
    assert_eq!(
        proxy.counted("robotsgate_requests_total{decision=\"left_while_queued\",mode=\"explicit\",protocol=\"http/1.1\",scheme=\"http\"}", 1.0).await,
        1.0
    );
    assert_eq!(
        proxy.metric("robotsgate_pacing_left_wait_seconds_count"),
        Some(1.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origin_429_with_retry_after_pauses_the_schedule() {
    let origin = TestOrigin::robots_and(
        "User-agent: *\nDisallow: /private\n",
        vec![(
            "/busy",
            Behaviour::with_headers(429, &[("Retry-After", "2")], "slow down"),
        )],
    )
    .await;
    let proxy = Proxy::start_for_loopback(&Conf::new());
    assert_eq!(curl(&proxy, &origin.url("/busy"), &[]).0, 429);
    let after_429 = Instant::now();
    assert_eq!(curl(&proxy, &origin.url("/next"), &[]).0, 200);
    assert!(
        after_429.elapsed() >= Duration::from_millis(1900),
        "{:?}",
        after_429.elapsed()
    );
    let busy = pages(&origin, "/busy");
    let next = pages(&origin, "/next");
    assert!(
        next[0].arrived.duration_since(busy[0].done.expect("done")) >= Duration::from_millis(1900)
    );
}

/// Without a Crawl-delay nothing is spaced: only `pacing.max_in_flight` bounds how many
/// run at once (here lifted to 4; `tests/it/politeness.rs` tests the default of 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_crawl_delay_requests_are_not_serialised() {
    let origin = TestOrigin::robots_and(
        "User-agent: *\nDisallow: /private\n",
        vec![("/slow", Behaviour::delayed(600, "slow\n"))],
    )
    .await;
    let proxy = Proxy::start_for_loopback(&Conf::new().set("pacing.max_in_flight", 4));
    assert_eq!(curl(&proxy, &origin.url("/warm"), &[]).0, 200);
    let statuses = concurrent(
        &proxy,
        (0..4).map(|_| (origin.url("/slow"), "X/1")).collect(),
    )
    .await;
    assert_eq!(statuses, [200; 4]);
    // Four 0.6 s responses side by side: all four arrived before the first could end.
    let slow = pages(&origin, "/slow");
    assert!(
        arrival_spread(&slow) < Duration::from_millis(500),
        "{:?}",
        arrival_spread(&slow)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_during_an_origin_pause_says_so() {
    let origin = TestOrigin::start(vec![(
        "/busy",
        Behaviour::with_headers(503, &[("Retry-After", "30")], "maintenance"),
    )])
    .await;
    let proxy = Proxy::start_for_loopback(&Conf::new().set("pacing.max_wait_seconds", 5));
    assert_eq!(curl(&proxy, &origin.url("/busy"), &[]).0, 503);
    let (status, head, body) = curl(&proxy, &origin.url("/later"), &[]);
    assert_eq!(status, 503);
    assert!(
        head.contains("reason=wait-too-long") && head.contains("backed-off-for="),
        "{head}"
    );
    assert!(body.contains("origin asked to back off"), "{body}");
    assert_eq!(origin.count("/later"), 0);
}
