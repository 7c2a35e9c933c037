//! Fleet mode over real sockets: several robotsgate processes sharing one real
//! `redis-server` (and a real three-master Redis Cluster), started by the tests on free
//! loopback ports; the origin logs when each request arrives and ends.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{
    admin, assert_gaps_at_least, curl, eventually, free_port, min_gap, most_at_once, pages,
    Behaviour, Conf, Proxy, TestOrigin,
};
use crate::fleet_fixture::{
    backend_up, certs, fleet_conf, handed_over, handed_over_reaching, instances, owner_index,
    ownership_changes, paced_origin, slow_origin, spread, spread_answers,
};
use crate::redis_servers::{Cluster, Redis};

/// Twelve clients over three instances, one origin with Crawl-delay 0.5: every gap at
/// the origin is at least the delay, and nothing is lost.
async fn three_instances_keep_one_crawl_delay(conf: &Conf) {
    let origin = paced_origin("0.5").await;
    let proxies = instances(3, conf);
    backend_up(&proxies).await;
    // Once, in a full run, one of these was answered 404 (a member's proxy and admin
    // listeners on one port, now refused): the answers, the origin's log and the
    // members' logs are kept should another such answer come.
    let answers = spread_answers(&proxies, &origin, "/p/", 12).await;
    let odd: Vec<&(u16, String)> = answers.iter().filter(|(s, _)| *s != 200).collect();
    assert!(
        odd.is_empty(),
        "{odd:#?}\norigin saw {:?}\n{}",
        origin.seen(),
        proxies
            .iter()
            .map(Proxy::log)
            .collect::<Vec<_>>()
            .join("\n----\n")
    );
    let seen = pages(&origin, "/p/");
    assert_eq!(seen.len(), 12, "every request reached the origin once");
    assert_gaps_at_least(&seen, Duration::from_millis(500));
    assert_eq!(
        origin.count("/robots.txt"),
        1,
        "one robots.txt fetch fleet-wide"
    );
    // One owner paced it; the two others handed their requests to it.
    // (Counted as each exchange ends, after its client has the answer.)
    let owner = owner_index(&proxies, &origin).expect("an owner");
    for (i, proxy) in proxies.iter().enumerate() {
        let handed = if i == owner {
            handed_over(proxy)
        } else {
            handed_over_reaching(proxy, 1.0).await
        };
        assert_eq!(
            handed == 0.0,
            i == owner,
            "instance {i} handed over {handed}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_keep_one_crawl_delay_with_redis() {
    let redis = Redis::start();
    three_instances_keep_one_crawl_delay(&fleet_conf(&redis)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_keep_one_crawl_delay_with_a_redis_cluster() {
    let cluster = Cluster::start();
    three_instances_keep_one_crawl_delay(&cluster.conf()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_first_requests_over_three_instances_fetch_robots_txt_once() {
    let redis = Redis::start();
    let origin = TestOrigin::start(vec![(
        "/robots.txt",
        Behaviour::delayed(300, "User-agent: *\nDisallow: /private\n"),
    )])
    .await;
    let proxies = instances(3, &fleet_conf(&redis));
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
    let origin = TestOrigin::robots("User-agent: *\nDisallow: /old\n").await;
    let proxies = instances(3, &fleet_conf(&redis));
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

/// A CA and a leaf certificate for 127.0.0.1 it signed, made by OpenSSL in `dir`:
/// `ca.pem`, `leaf.pem` and `leaf.key`.
fn redis_certificates(dir: &std::path::Path) {
    let path = |name: &str| dir.join(name).to_string_lossy().into_owned();
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
}

/// A new fleet's data set is fenced for its settle window (two renewals and a command
/// timeout: 7 s with a 6 s command timeout): an origin first asked for inside it is
/// claimed provisionally, its robots.txt fetch waits for the fence's end (as the
/// request's turn would), and the page is served, not answered 503 "ownership moving".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origin_first_asked_for_inside_a_new_fleets_fence_is_served() {
    let redis = Redis::start();
    let conf = fleet_conf(&redis)
        .set("fleet.lease_seconds", 9)
        .set("fleet.command_timeout_seconds", 6);
    let proxies = instances(1, &conf);
    backend_up(&proxies).await;
    let origin = paced_origin("0.5").await;
    let (status, head, body) = curl(&proxies[0], &origin.url("/p/first"), &["--max-time", "30"]);
    assert_eq!(status, 200, "{head}\n{body}\n{}", proxies[0].log());
    assert_eq!(origin.count("/robots.txt"), 1);
    assert_eq!(pages(&origin, "/p/").len(), 1);
}

/// Two members on a redis-server reached over TLS (`rediss://`, its CA trusted through
/// `SSL_CERT_FILE`) share an origin's pacing and its robots.txt as over plain TCP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_over_tls_works_like_a_plain_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = |name: &str| dir.path().join(name).to_string_lossy().into_owned();
    redis_certificates(dir.path());
    // A port picked free may be taken before the server binds it: picked again then.
    let (child, port) =
        crate::common::start_listening("redis-server over TLS", free_port, |port| {
            Command::new("redis-server")
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
                .expect("redis-server")
        });
    // Stopped by its PID when the test ends, however it ends.
    let _redis = crate::common::Running(child);
    let origin = paced_origin("0.3").await;
    let conf = certs()
        .conf()
        .set("fleet.redis", format!("rediss://127.0.0.1:{port}/0"));
    let ca = path("ca.pem");
    let env = [("SSL_CERT_FILE", ca.as_str())];
    let proxies: Vec<Proxy> = (0..2)
        .map(|_| Proxy::start_with_env(&conf, &["--allow-destination", "127.0.0.0/8"], &env))
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
    let proxies = instances(2, &fleet_conf(&redis));
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
    let origin = TestOrigin::robots_and(
        "User-agent: *\nAllow: /\n",
        vec![("/struggling", Behaviour::delayed(800, "slow\n"))],
    )
    .await;
    let proxies = instances(2, &fleet_conf(&redis));
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

/// An owned origin nobody asks for (`fleet.release_idle_seconds`) is released: its owner
/// keeps it no more, and the next member to meet it owns it. A member that still knew
/// the old owner hands it one more request, which the old owner refuses as another
/// member's: that member forgets the old owner and routes the request once more, to the
/// new owner. Every request reaches the origin once, none is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_origin_is_released_and_the_next_member_to_meet_it_owns_it() {
    let redis = Redis::start();
    let proxies = instances(3, &fleet_conf(&redis).set("fleet.release_idle_seconds", 1));
    backend_up(&proxies).await;
    let origin = paced_origin("0").await;
    let through = |i: usize, path: &str| curl(&proxies[i], &origin.url(path), &[]);
    assert_eq!(through(0, "/first").0, 200);
    assert_eq!(through(1, "/learnt").0, 200, "handed to the owner");
    assert_eq!(owner_index(&proxies, &origin), Some(0));
    let released = eventually(Duration::from_secs(10), || {
        owner_index(&proxies, &origin).is_none()
    })
    .await;
    assert!(released, "never released:\n{}", proxies[0].log());
    let idle = ownership_changes(&proxies[0], "idle");
    assert_eq!(idle, 1.0);
    assert_eq!(through(2, "/met-again").0, 200);
    assert_eq!(
        owner_index(&proxies, &origin),
        Some(2),
        "the next to meet it"
    );
    let (status, head, _) = through(1, "/stale");
    assert_eq!(status, 200, "routed again: {head}");
    assert_eq!(through(1, "/after").0, 200);
    for path in ["/first", "/learnt", "/met-again", "/stale", "/after"] {
        assert_eq!(origin.count(path), 1, "{path}");
    }
    assert_eq!(owner_index(&proxies, &origin), Some(2));
}

/// An origin whose Crawl-delay still runs is not idle: its owner keeps it past
/// `fleet.release_idle_seconds` until the delay is over, so the member that meets it
/// next cannot start early: the gap at the origin is the Crawl-delay across the release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origin_is_not_released_while_its_crawl_delay_runs() {
    let redis = Redis::start();
    let conf = fleet_conf(&redis).set("fleet.release_idle_seconds", 0.3);
    let proxies = instances(2, &conf);
    backend_up(&proxies).await;
    let origin = paced_origin("2").await;
    // Once, in a full run of 2026-11-28, this first request was answered 404: the test
    // had given the member one port for both its proxy and admin listeners, which
    // shared a socket (now refused at start: check_cli::run_refuses_two_listeners_…). The
    // answer and the member's log are kept should another such answer come.
    let (status, head, body) = curl(&proxies[0], &origin.url("/p/first"), &[]);
    assert_eq!(status, 200, "{head}\n{body}\n{}", proxies[0].log());
    let ended = std::time::Instant::now();
    // Past the idle time (and several sweeps), the delay still runs: still owned.
    while ended.elapsed() < Duration::from_millis(1200) {
        assert_eq!(
            owner_index(&proxies, &origin),
            Some(0),
            "released while in force"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let released = eventually(Duration::from_secs(10), || {
        owner_index(&proxies, &origin).is_none()
    })
    .await;
    assert!(released, "never released:\n{}", proxies[0].log());
    assert_eq!(curl(&proxies[1], &origin.url("/p/next"), &[]).0, 200);
    assert_eq!(owner_index(&proxies, &origin), Some(1));
    assert_gaps_at_least(&pages(&origin, "/p/"), Duration::from_secs(2));
}
