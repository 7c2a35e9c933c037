//! Fleet mode over real sockets: several robotsgate processes sharing one real
//! `redis-server` (and a real three-master Redis Cluster), started by the tests on free
//! loopback ports; the origin logs when each request arrives and ends.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{
    admin, assert_gaps_at_least, curl, eventually, free_port, min_gap, most_at_once, pages,
    Behaviour, Proxy, TestOrigin,
};
use crate::redis_servers::{redis_cli, Cluster, Redis};

/// An origin whose robots.txt asks every crawler for `delay` seconds between requests.
pub(crate) async fn paced_origin(delay: &str) -> TestOrigin {
    let robots = format!("User-agent: *\nCrawl-delay: {delay}\n");
    TestOrigin::start(vec![("/robots.txt", Behaviour::ok(&robots))]).await
}

/// An origin allowing everything, with no Crawl-delay, whose pages `{prefix}0` to
/// `{prefix}{count - 1}` take 300 ms each to answer: what the in-flight limit guards.
pub(crate) async fn slow_origin(prefix: &str, count: usize) -> TestOrigin {
    let slow = || Behaviour::Delayed {
        delay: Duration::from_millis(300),
        body: b"slow\n".to_vec(),
    };
    let routes: Vec<(String, Behaviour)> = std::iter::once((
        "/robots.txt".to_string(),
        Behaviour::ok("User-agent: *\nAllow: /\n"),
    ))
    .chain((0..count).map(|i| (format!("{prefix}{i}"), slow())))
    .collect();
    TestOrigin::start_owned(&routes).await
}

pub(crate) fn fleet_yaml(redis: &Redis, extra: &str) -> String {
    format!("  fleet:\n    redis: \"{}\"\n{extra}", redis.url())
}

/// `n` robotsgate processes with the same settings.
pub(crate) fn instances(n: usize, yaml: &str) -> Vec<Proxy> {
    (0..n).map(|_| Proxy::start_for_loopback(yaml)).collect()
}

/// Waits until every instance's `/readyz` says the backend is up.
pub(crate) async fn backend_up(proxies: &[Proxy]) {
    for proxy in proxies {
        assert!(
            eventually(Duration::from_secs(15), || admin(proxy, "GET", "/readyz").0
                == 200)
            .await,
            "fleet backend never came up:\n{}",
            proxy.log()
        );
    }
}

/// GETs `count` pages through the instances in turn, all at once; the statuses.
async fn spread(proxies: &[Proxy], origin: &TestOrigin, prefix: &str, count: usize) -> Vec<u16> {
    let clients: Vec<reqwest::Client> = proxies.iter().map(|p| p.client()).collect();
    let tasks: Vec<_> = (0..count)
        .map(|i| {
            let client = clients[i % clients.len()].clone();
            let url = origin.url(&format!("{prefix}{i}"));
            tokio::spawn(async move {
                client
                    .get(url)
                    .header("User-Agent", "ExampleBot/1.0")
                    .send()
                    .await
                    .map(|r| r.status().as_u16())
            })
        })
        .collect();
    let mut statuses = Vec::new();
    for task in tasks {
        statuses.push(task.await.expect("task").expect("request"));
    }
    statuses
}

/// Twelve clients over three instances, one origin with Crawl-delay 0.5: every gap at
/// the origin is at least the delay, and nothing is lost.
async fn three_instances_keep_one_crawl_delay(yaml: &str) {
    let origin = paced_origin("0.5").await;
    let proxies = instances(3, yaml);
    backend_up(&proxies).await;
    let statuses = spread(&proxies, &origin, "/p/", 12).await;
    assert!(statuses.iter().all(|&s| s == 200), "{statuses:?}");
    let seen = pages(&origin, "/p/");
    assert_eq!(seen.len(), 12, "every request reached the origin once");
    assert_gaps_at_least(&seen, Duration::from_millis(500));
    assert_eq!(
        origin.count("/robots.txt"),
        1,
        "one robots.txt fetch fleet-wide"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_keep_one_crawl_delay_with_redis() {
    let redis = Redis::start();
    three_instances_keep_one_crawl_delay(&fleet_yaml(&redis, "")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_keep_one_crawl_delay_with_a_redis_cluster() {
    let cluster = Cluster::start();
    three_instances_keep_one_crawl_delay(&cluster.yaml()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_first_requests_over_three_instances_fetch_robots_txt_once() {
    let redis = Redis::start();
    let origin = TestOrigin::start(vec![(
        "/robots.txt",
        Behaviour::Delayed {
            delay: Duration::from_millis(300),
            body: b"User-agent: *\nDisallow: /private\n".to_vec(),
        },
    )])
    .await;
    let proxies = instances(3, &fleet_yaml(&redis, ""));
    backend_up(&proxies).await;
    let statuses = spread(&proxies, &origin, "/page/", 50).await;
    assert!(statuses.iter().all(|&s| s == 200), "{statuses:?}");
    assert_eq!(origin.count("/robots.txt"), 1);
    // And every instance enforces that one copy.
    for proxy in &proxies {
        assert_eq!(curl(proxy, &origin.url("/private/x"), &[]).0, 403);
    }
    assert_eq!(origin.count("/robots.txt"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refresh_through_one_instance_reaches_the_others_within_a_second() {
    let redis = Redis::start();
    let origin = TestOrigin::start(vec![(
        "/robots.txt",
        Behaviour::ok("User-agent: *\nDisallow: /old\n"),
    )])
    .await;
    let proxies = instances(3, &fleet_yaml(&redis, ""));
    backend_up(&proxies).await;
    for proxy in &proxies {
        assert_eq!(curl(proxy, &origin.url("/new/a"), &[]).0, 200);
    }
    origin.set(
        "/robots.txt",
        Behaviour::ok("User-agent: *\nDisallow: /new\n"),
    );
    let spec = format!("/origins/{}/refresh", origin.url("").trim_end_matches('/'));
    assert_eq!(admin(&proxies[0], "POST", &spec).0, 200);
    let refreshed = Instant::now();
    for proxy in &proxies[1..] {
        assert!(
            eventually(Duration::from_secs(1), || curl(
                proxy,
                &origin.url("/new/b"),
                &[]
            )
            .0 == 403)
            .await,
            "instance did not take the new rules within 1 s of the refresh ({:?})",
            refreshed.elapsed()
        );
        assert_eq!(curl(proxy, &origin.url("/old/b"), &[]).0, 200);
    }
    assert_eq!(
        origin.count("/robots.txt"),
        2,
        "the first fetch and the refresh"
    );
    // A purge through one instance is a purge everywhere: the next request refetches once.
    let purge = format!("/origins/{}", origin.url("").trim_end_matches('/'));
    assert_eq!(admin(&proxies[1], "DELETE", &purge).0, 200);
    assert!(
        eventually(Duration::from_secs(1), || admin(&proxies[2], "GET", &purge)
            .0
            == 404)
        .await,
        "the purge did not reach the third instance"
    );
}

/// A fleet instance SIGKILLed in the middle of a response: the origin is still
/// answering it (its connection closed under it, as a dying host's does), so no other
/// instance may send a request until the dead holder's lease — the longest a turn can
/// be held — has run out; then the schedule is free again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_killed_mid_response_keeps_its_turn_until_the_lease_covers_the_exchange() {
    let redis = Redis::start();
    let origin = TestOrigin::start(vec![
        (
            "/robots.txt",
            Behaviour::ok("User-agent: *\nCrawl-delay: 0.2\n"),
        ),
        (
            "/slow",
            Behaviour::Delayed {
                delay: Duration::from_millis(2500),
                body: b"slow\n".to_vec(),
            },
        ),
    ])
    .await;
    // Exchanges are cut at 3 s, or after 3 s of silence, and held 3 s after a cut (a
    // robots.txt fetch takes at most 3 s): the lease is 3 + 3 + 3 + 1 = 10 s.
    let yaml = format!(
        "{}  pacing:\n    max_exchange_seconds: 3\n    max_wait_seconds: 30\n  upstream:\n    connect_timeout_seconds: 1\n    read_timeout_seconds: 3\n    write_timeout_seconds: 3\n  robots:\n    fetch_timeout_seconds: 3\n",
        fleet_yaml(&redis, "")
    );
    let mut proxies = instances(2, &yaml);
    backend_up(&proxies).await;
    assert_eq!(curl(&proxies[1], &origin.url("/warm"), &[]).0, 200);
    let holder = proxies[0].url();
    let slow = origin.url("/slow");
    let stalled = std::thread::spawn(move || {
        Command::new("curl")
            .args(["-s", "--max-time", "20", "-x", &holder, &slow])
            .output()
    });
    assert!(eventually(Duration::from_secs(5), || origin.count("/slow") == 1).await);
    // A second request through the same instance waits behind it, at the head of the
    // fleet's queue: killed too, it will never claim its turn.
    let waiter = proxies[0].url();
    let queued = origin.url("/queued");
    let waiting = std::thread::spawn(move || {
        Command::new("curl")
            .args(["-s", "--max-time", "20", "-x", &waiter, &queued])
            .output()
    });
    let queue_length = || {
        let key = redis_cli(redis.port, &["--scan", "--pattern", "rg:*:q:*"]);
        let key = key.lines().next().unwrap_or("none").to_string();
        redis_cli(redis.port, &["zcard", &key]) == "1"
    };
    assert!(eventually(Duration::from_secs(5), queue_length).await);
    assert!(Command::new("kill")
        .args(["-KILL", &proxies[0].pid().to_string()])
        .status()
        .expect("kill")
        .success());
    assert!(eventually(Duration::from_secs(5), || proxies[0].exited()).await);
    let (status, _, _) = curl(&proxies[1], &origin.url("/after"), &["--max-time", "30"]);
    assert_eq!(status, 200, "{}", proxies[1].log());
    let seen = pages(&origin, "/");
    assert!(
        most_at_once(&seen) <= 1,
        "the origin was still answering the dead instance's request: {seen:#?}"
    );
    let slow_seen = &pages(&origin, "/slow")[0];
    let after = &pages(&origin, "/after")[0];
    assert!(
        after.arrived >= slow_seen.done.expect("the origin ended /slow"),
        "{seen:#?}"
    );
    // The dead holder's turn was leased for 10 s from its grant (the first request's
    // arrival, give or take the round trip).
    let held = after.arrived - slow_seen.arrived;
    assert!(
        held >= Duration::from_millis(9_500),
        "the schedule was free {held:?} after the dead holder's grant: {seen:#?}"
    );
    // Nor does its dead waiter hold the queue until its own deadline (30 s): a head
    // that does not claim a free turn within the grace (3 s; a live one asks every 2 s)
    // is dropped.
    assert!(
        held < Duration::from_millis(18_000),
        "the dead waiter held the queue: /after came {held:?} after the grant"
    );
    assert_eq!(origin.count("/queued"), 0);
    let _ = stalled.join();
    let _ = waiting.join();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_lease_shorter_than_an_exchange_is_a_configuration_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("robotsgate.yaml");
    std::fs::write(
        &config,
        "robotsgate:\n  fleet:\n    redis: redis://127.0.0.1:1/0\n    lease_seconds: 10\n",
    )
    .expect("config");
    let err = crate::common::config_refusal(&config);
    assert!(
        err.contains("fleet.lease_seconds") && err.contains("245.0 s"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stopped_and_restarted_each_mode_behaves_as_documented_and_recovers() {
    let port = free_port();
    let redis = Redis::start_on(port, &[]);
    let origin = paced_origin("0.2").await;
    let common = "    command_timeout_seconds: 0.2\n";
    let refuse = Proxy::start_for_loopback(&fleet_yaml(
        &redis,
        &format!("{common}    on_unavailable: refuse\n"),
    ));
    let local = Proxy::start_for_loopback(&fleet_yaml(
        &redis,
        &format!("{common}    on_unavailable: local\n"),
    ));
    let both = [refuse, local];
    backend_up(&both).await;
    let [refuse, local] = &both;
    assert_eq!(curl(refuse, &origin.url("/a"), &[]).0, 200);
    assert_eq!(curl(local, &origin.url("/a"), &[]).0, 200);

    drop(redis);
    assert!(
        eventually(Duration::from_secs(10), || admin(refuse, "GET", "/readyz")
            .0
            == 503)
        .await,
        "refuse mode should report not ready"
    );
    assert!(
        eventually(Duration::from_secs(10), || {
            let (code, body) = admin(local, "GET", "/readyz");
            code == 200 && body.contains("degraded")
        })
        .await,
        "local mode should report itself degraded, and ready"
    );
    assert_eq!(refuse.metric("robotsgate_fleet_backend_up"), Some(0.0));
    // refuse: a paced request is answered 503 and never reaches the origin.
    let before = origin.count("/during/refuse");
    let (status, head, _) = curl(refuse, &origin.url("/during/refuse"), &[]);
    assert_eq!(status, 503);
    assert!(head.contains("fleet-backend-unavailable"), "{head}");
    assert!(head.to_ascii_lowercase().contains("retry-after"), "{head}");
    assert_eq!(origin.count("/during/refuse"), before);
    // refuse: an origin whose robots.txt is not held is not fetched either.
    let fresh = TestOrigin::start(vec![]).await;
    let (status, head, _) = curl(refuse, &fresh.url("/x"), &[]);
    assert_eq!(status, 503);
    assert!(head.contains("fleet-backend-unavailable"), "{head}");
    assert_eq!(fresh.seen().len(), 0, "nothing reached the new origin");
    // local: within the lease after the outage began (minutes by default), a turn
    // granted before it may still run: nothing that needs a turn goes, whichever
    // instance owns the origin (`fleet_faults` tests the owner pacing after it).
    let (status, head, _) = curl(local, &origin.url("/during/local"), &[]);
    assert_eq!(status, 503, "{head}");
    assert!(head.contains("fleet-backend-unavailable"), "{head}");
    assert_eq!(origin.count("/during/local"), 0);
    let (status, _, _) = curl(local, &fresh.url("/y"), &[]);
    assert_eq!(status, 503);
    assert_eq!(fresh.seen().len(), 0, "nothing reached the new origin");

    // Redis back on the same port: both recover without a restart.
    let _redis = Redis::start_on(port, &[]);
    backend_up(&both).await;
    assert_eq!(curl(refuse, &origin.url("/after"), &[]).0, 200);
    assert_eq!(refuse.metric("robotsgate_fleet_backend_up"), Some(1.0));
}

/// A delay longer than a queued ticket's expiry: waiters keep their places (the head's
/// ticket is kept until its turn is due), nobody is dropped or overtaken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crawl_delay_longer_than_a_ticket_lifetime_keeps_every_waiter() {
    let redis = Redis::start();
    let origin = paced_origin("3.5").await;
    let proxies = instances(2, &fleet_yaml(&redis, ""));
    backend_up(&proxies).await;
    let statuses = spread(&proxies, &origin, "/long/", 3).await;
    assert_eq!(statuses, vec![200, 200, 200]);
    let seen = pages(&origin, "/long/");
    assert_eq!(seen.len(), 3);
    assert_gaps_at_least(&seen, Duration::from_millis(3_500));
}

/// `rediss://`: Redis over TLS, its certificate from a CA made here and trusted through
/// `SSL_CERT_FILE` (as an operator would point at a private CA).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_over_tls_works_like_a_plain_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = |name: &str| dir.path().join(name).to_string_lossy().into_owned();
    let openssl = |args: &[&str]| {
        let ok = Command::new("openssl")
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("openssl")
            .success();
        assert!(ok, "openssl {args:?}");
    };
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=test redis ca",
        "-keyout",
        &path("ca.key"),
        "-out",
        &path("ca.pem"),
    ]);
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        &path("leaf.key"),
        "-out",
        &path("leaf.csr"),
    ]);
    std::fs::write(path("ext"), "subjectAltName=IP:127.0.0.1\n").expect("ext");
    openssl(&[
        "x509",
        "-req",
        "-days",
        "1",
        "-in",
        &path("leaf.csr"),
        "-CA",
        &path("ca.pem"),
        "-CAkey",
        &path("ca.key"),
        "-CAcreateserial",
        "-extfile",
        &path("ext"),
        "-out",
        &path("leaf.pem"),
    ]);
    let port = free_port();
    let child = Command::new("redis-server")
        .args([
            "--port",
            "0",
            "--tls-port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
        ])
        .args([
            "--tls-cert-file",
            &path("leaf.pem"),
            "--tls-key-file",
            &path("leaf.key"),
        ])
        .args([
            "--tls-ca-cert-file",
            &path("ca.pem"),
            "--tls-auth-clients",
            "no",
        ])
        .args(["--save", "", "--appendonly", "no", "--dir", &path("")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server");
    // Stopped by its PID when the test ends, however it ends.
    let _redis = Redis {
        child,
        port,
        _dir: tempfile::tempdir().expect("tempdir"),
    };
    let origin = paced_origin("0.3").await;
    let yaml = format!("  fleet:\n    redis: \"rediss://127.0.0.1:{port}/0\"\n");
    let ca = path("ca.pem");
    let env = [("SSL_CERT_FILE", ca.as_str())];
    let proxies: Vec<Proxy> = (0..2)
        .map(|_| Proxy::start_with_env(&yaml, &["--allow-destination", "127.0.0.0/8"], &env))
        .collect();
    backend_up(&proxies).await;
    let statuses = spread(&proxies, &origin, "/tls/", 4).await;
    assert_eq!(statuses, vec![200; 4]);
    assert_gaps_at_least(&pages(&origin, "/tls/"), Duration::from_millis(300));
    assert_eq!(origin.count("/robots.txt"), 1);
}

/// The in-flight limit holds fleet-wide: twelve clients over two instances, an origin
/// with no Crawl-delay and 300 ms responses, never more than two requests at it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_keep_one_in_flight_limit() {
    let redis = Redis::start();
    let origin = slow_origin("/f", 12).await;
    let proxies = instances(2, &fleet_yaml(&redis, ""));
    backend_up(&proxies).await;
    let statuses = spread(&proxies, &origin, "/f", 12).await;
    assert_eq!(statuses, vec![200; 12]);
    let seen = pages(&origin, "/f");
    assert_eq!(seen.len(), 12);
    let t0 = seen[0].arrived;
    let spans: Vec<(u128, u128)> = seen
        .iter()
        .map(|s| {
            let ms = |t: std::time::Instant| t.duration_since(t0).as_millis();
            (ms(s.arrived), s.done.map_or(u128::MAX, ms))
        })
        .collect();
    assert_eq!(
        most_at_once(&seen),
        2,
        "max_in_flight 2, fleet-wide: {spans:?}"
    );
}

/// A latency slow-down is fleet-wide: an origin answering one instance far slower than
/// its baseline is spaced out through another instance that never saw it slow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_latency_slow_down_seen_through_one_instance_spaces_requests_through_another() {
    let redis = Redis::start();
    let origin = TestOrigin::start(vec![
        ("/robots.txt", Behaviour::ok("User-agent: *\nAllow: /\n")),
        (
            "/struggling",
            Behaviour::Delayed {
                delay: Duration::from_millis(800),
                body: b"slow\n".to_vec(),
            },
        ),
    ])
    .await;
    let proxies = instances(2, &fleet_yaml(&redis, ""));
    backend_up(&proxies).await;
    // A baseline of fast answers through the first instance, then one 800 ms answer:
    // far above four times the baseline, a slow-down of at least that long.
    for i in 0..10 {
        assert_eq!(
            curl(&proxies[0], &origin.url(&format!("/fast/{i}")), &[]).0,
            200
        );
    }
    assert_eq!(curl(&proxies[0], &origin.url("/struggling"), &[]).0, 200);
    // The second instance has served nothing there.
    for i in 0..2 {
        assert_eq!(
            curl(&proxies[1], &origin.url(&format!("/other/{i}")), &[]).0,
            200
        );
    }
    let slow = &pages(&origin, "/struggling")[0];
    let next = &pages(&origin, "/other/")[0];
    let gap = next
        .arrived
        .saturating_duration_since(slow.done.expect("answered"));
    assert!(
        gap >= Duration::from_millis(750),
        "the other instance went {gap:?} after the slow answer"
    );
    // Before it, fast answers came back to back.
    assert!(min_gap(&pages(&origin, "/fast/")) < Duration::from_millis(200));
}
