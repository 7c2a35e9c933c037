//! Fleet mode over real sockets: several robotsgate processes sharing one real
//! `redis-server` (and a real three-master Redis Cluster), started by the tests on free
//! loopback ports; the origin logs when each request arrives and ends.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{
    assert_gaps_at_least, curl, eventually, free_port, most_at_once, pages, Behaviour, Proxy,
    TestOrigin,
};

/// A `redis-server` on a free loopback port, stopped (by its PID) when dropped.
pub(crate) struct Redis {
    pub(crate) child: Child,
    pub(crate) port: u16,
    _dir: tempfile::TempDir,
}

impl Redis {
    pub(crate) fn start() -> Redis {
        Redis::start_on(free_port(), &[])
    }

    pub(crate) fn start_on(port: u16, extra: &[&str]) -> Redis {
        let dir = tempfile::tempdir().expect("tempdir");
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--dir", &dir.path().to_string_lossy()])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server (installed by scripts/deps.sh)");
        let redis = Redis {
            child,
            port,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while redis_cli(port, &["ping"]) != "PONG" {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        redis
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn redis_cli(port: u16, args: &[&str]) -> String {
    Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// A three-master Redis Cluster on loopback (with a replica each, when asked).
pub(crate) struct Cluster {
    pub(crate) nodes: Vec<Redis>,
}

impl Cluster {
    fn start() -> Cluster {
        Cluster::start_with(0)
    }

    /// Three masters with `replicas` replicas each; a node silent for 1 s is failed over.
    pub(crate) fn start_with(replicas: usize) -> Cluster {
        let nodes: Vec<Redis> = (0..3 * (1 + replicas))
            .map(|_| {
                let port = free_port();
                Redis::start_on(
                    port,
                    &[
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        &format!("nodes-{port}.conf"),
                        "--cluster-node-timeout",
                        "1000",
                    ],
                )
            })
            .collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let created = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("redis-cli --cluster create");
        assert!(created.success());
        let deadline = Instant::now() + Duration::from_secs(20);
        let replicating = |n: &Redis| {
            let info = redis_cli(n.port, &["info", "replication"]);
            info.contains("role:master") || info.contains("master_link_status:up")
        };
        while !nodes.iter().all(|n| {
            redis_cli(n.port, &["cluster", "info"]).contains("cluster_state:ok") && replicating(n)
        }) {
            assert!(Instant::now() < deadline, "cluster did not form");
            std::thread::sleep(Duration::from_millis(50));
        }
        Cluster { nodes }
    }

    /// The port of the master serving `key`'s slot, as `node` sees the cluster (`None`
    /// while that master is failing and no replica has taken over).
    pub(crate) fn master_of(&self, node: u16, key: &str) -> Option<u16> {
        let slot: u16 = redis_cli(node, &["cluster", "keyslot", key])
            .parse()
            .expect("a slot");
        redis_cli(node, &["cluster", "nodes"])
            .lines()
            .filter(|l| l.contains("master") && !l.contains("fail"))
            .find_map(|l| {
                let fields: Vec<&str> = l.split_whitespace().collect();
                let serves = fields.iter().skip(8).any(|range| {
                    let (a, b) = range.split_once('-').unwrap_or((range, range));
                    matches!((a.parse::<u16>(), b.parse::<u16>()), (Ok(a), Ok(b)) if a <= slot && slot <= b)
                });
                let port = fields.get(1)?.split(['@', ':']).nth(1)?.parse().ok()?;
                serves.then_some(port)
            })
    }

    pub(crate) fn yaml(&self) -> String {
        let seeds: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("\"redis://127.0.0.1:{}\"", n.port))
            .collect();
        format!("  fleet:\n    redis_cluster: [{}]\n", seeds.join(", "))
    }
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

/// An admin request: (status, body).
pub(crate) fn admin(proxy: &Proxy, method: &str, path: &str) -> (u16, String) {
    let out = Command::new("curl")
        .args([
            "-s",
            "--max-time",
            "5",
            "-X",
            method,
            "-w",
            "\n%{http_code}",
        ])
        .arg(format!("http://{}{path}", proxy.admin))
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_string())
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
    let origin = TestOrigin::start(vec![(
        "/robots.txt",
        Behaviour::ok("User-agent: *\nCrawl-delay: 0.5\n"),
    )])
    .await;
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
    // Exchanges are cut at 3 s, or after 3 s of silence, and held 3 s after a cut: the
    // lease is 3 + 3 + 3 + 1 = 10 s.
    let yaml = format!(
        "{}  pacing:\n    max_exchange_seconds: 3\n    max_wait_seconds: 30\n  upstream:\n    connect_timeout_seconds: 1\n    read_timeout_seconds: 3\n    write_timeout_seconds: 3\n",
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
    assert!(Command::new("kill")
        .args(["-KILL", &proxies[0].pid().to_string()])
        .status()
        .expect("kill")
        .success());
    assert!(eventually(Duration::from_secs(5), || proxies[0].exited()).await);
    let (status, _, _) = curl(&proxies[1], &origin.url("/after"), &[]);
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
    let _ = stalled.join();
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
    let origin = TestOrigin::start(vec![(
        "/robots.txt",
        Behaviour::ok("User-agent: *\nCrawl-delay: 0.2\n"),
    )])
    .await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_seen_by_one_instance_pauses_the_origin_for_all() {
    let redis = Redis::start();
    let origin = TestOrigin::start(vec![
        ("/robots.txt", Behaviour::ok("User-agent: *\nAllow: /\n")),
        (
            "/busy",
            Behaviour::with_headers(429, &[("Retry-After", "2")], "slow down\n"),
        ),
    ])
    .await;
    let proxies = instances(2, &fleet_yaml(&redis, ""));
    backend_up(&proxies).await;
    // No Crawl-delay: nothing is paced, nothing touches Redis...
    assert_eq!(curl(&proxies[1], &origin.url("/before"), &[]).0, 200);
    // ...until the origin asks one instance to wait.
    assert_eq!(curl(&proxies[0], &origin.url("/busy"), &[]).0, 429);
    let busy_done = pages(&origin, "/busy")[0].done.expect("answered");
    assert_eq!(curl(&proxies[1], &origin.url("/after"), &[]).0, 200);
    let after = pages(&origin, "/after")[0].arrived;
    let paused = after.saturating_duration_since(busy_done);
    assert!(
        paused >= Duration::from_millis(1_900),
        "the other instance went on after {paused:?}, not the 2 s asked"
    );
}

/// A delay longer than a queued ticket's expiry: waiters keep their places (the head's
/// ticket is kept until its turn is due), nobody is dropped or overtaken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crawl_delay_longer_than_a_ticket_lifetime_keeps_every_waiter() {
    let redis = Redis::start();
    let origin = TestOrigin::start(vec![(
        "/robots.txt",
        Behaviour::ok("User-agent: *\nCrawl-delay: 3.5\n"),
    )])
    .await;
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
    let origin = TestOrigin::start(vec![(
        "/robots.txt",
        Behaviour::ok("User-agent: *\nCrawl-delay: 0.3\n"),
    )])
    .await;
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
/// with no Crawl-delay and 200 ms responses, never more than two requests at it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_keep_one_in_flight_limit() {
    let redis = Redis::start();
    let origin = TestOrigin::start(vec![
        ("/robots.txt", Behaviour::ok("User-agent: *\nDisallow:\n")),
        (
            "/f",
            Behaviour::Delayed {
                delay: Duration::from_millis(200),
                body: b"page\n".to_vec(),
            },
        ),
    ])
    .await;
    for i in 0..12 {
        origin.set(
            &format!("/f{i}"),
            Behaviour::Delayed {
                delay: Duration::from_millis(200),
                body: b"page\n".to_vec(),
            },
        );
    }
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
