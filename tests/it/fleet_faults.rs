//! Fleet mode at its costs and through failures, measured where the promise is kept:
//! Redis' own command counters, and loopback origins logging when each request arrives
//! and ends. Real `redis-server`s, stopped, killed and restarted by the tests.

use std::process::Command;
use std::time::Duration;

use tokio::time::Instant;

use crate::common::admin;
use crate::common::*;
use crate::fleet::{backend_up, fleet_yaml, instances, paced_origin, slow_origin};
use crate::redis_servers::{redis_cli, Cluster, Redis};

/// How many scripts Redis has run since its counters were reset.
fn script_calls(port: u16) -> u64 {
    let stats = redis_cli(port, &["info", "commandstats"]);
    stats
        .lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// Sends `count` requests one after another, alternating between `proxies`: each
/// answered 200 and received by the origin once.
fn one_by_one(proxies: &[Proxy], origin: &TestOrigin, prefix: &str, count: usize) {
    for i in 0..count {
        let url = origin.url(&format!("{prefix}{i}"));
        assert_eq!(curl(&proxies[i % proxies.len()], &url, &[]).0, 200, "{url}");
    }
    assert_eq!(pages(origin, prefix).len(), count, "at the origin");
}

/// Waits until the script count stops moving (releases are sent after the response;
/// 300 ms without a call) and returns it.
async fn settled_calls(port: u16) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut last = script_calls(port);
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = script_calls(port);
        if now == last {
            return now;
        }
        assert!(
            Instant::now() < deadline,
            "Redis never went quiet: {now} calls"
        );
        last = now;
    }
}

/// Counted by Redis: a request under the in-flight limit costs two scripts (take the
/// turn, give it back), one that waits out a Crawl-delay at most one more, and one
/// with no limit in force none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_calls_per_request_are_two_with_a_limit_and_none_without() {
    let redis = Redis::start();
    let origin = TestOrigin::start(vec![(
        "/robots.txt",
        Behaviour::ok("User-agent: *\nAllow: /\n"),
    )])
    .await;
    let quiet = "    resync_seconds: 600\n";
    let limited = instances(2, &fleet_yaml(&redis, quiet));
    let unlimited = instances(
        2,
        &format!(
            "{}  pacing:\n    max_in_flight: 0\n",
            fleet_yaml(&redis, quiet)
        ),
    );
    backend_up(&limited).await;
    backend_up(&unlimited).await;
    // Each instance reads the shared robots.txt once.
    one_by_one(&limited, &origin, "/warm/", 2);
    one_by_one(&unlimited, &origin, "/warm-u/", 2);
    settled_calls(redis.port).await;

    redis_cli(redis.port, &["config", "resetstat"]);
    one_by_one(&unlimited, &origin, "/free/", 20);
    assert_eq!(
        settled_calls(redis.port).await,
        0,
        "no limit in force: Redis is never asked"
    );

    redis_cli(redis.port, &["config", "resetstat"]);
    one_by_one(&limited, &origin, "/limited/", 20);
    assert_eq!(
        settled_calls(redis.port).await,
        40,
        "in-flight limit: acquire and release, nothing else"
    );

    let paced = paced_origin("0.2").await;
    one_by_one(&limited, &paced, "/warm/", 2);
    settled_calls(redis.port).await;
    redis_cli(redis.port, &["config", "resetstat"]);
    one_by_one(&limited, &paced, "/paced/", 10);
    let calls = settled_calls(redis.port).await;
    assert!(
        (20..=30).contains(&calls),
        "each paced request: acquire, at most one more when due, release: {calls} for 10"
    );
    assert_gaps_at_least(&pages(&paced, "/paced/"), Duration::from_millis(200));
}

/// Runs requests through `proxies` from `clients` concurrent clients until `count`
/// have been sent or `until`, each to its own path under `prefix`; the statuses.
async fn load(
    proxies: &[Proxy],
    origin: &TestOrigin,
    prefix: &str,
    clients: usize,
    count: usize,
    until: Instant,
) -> Vec<u16> {
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for c in 0..clients {
        let client = proxies[c % proxies.len()].client();
        let (next, base) = (next.clone(), origin.url(prefix));
        tasks.push(tokio::spawn(async move {
            let mut statuses = Vec::new();
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= count || Instant::now() >= until {
                    return statuses;
                }
                let status = match client.get(format!("{base}{i}")).send().await {
                    Ok(r) => r.status().as_u16(),
                    Err(_) => 0,
                };
                statuses.push(status);
                if status != 200 {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.expect("client task"));
    }
    all
}

fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
}

/// Every instance serves `origin` again: one request each, answered 200 within 8 s (a
/// turn left held in Redis would keep it waiting for its lease: minutes) and received
/// by the origin once.
fn served_again(proxies: &[Proxy], origin: &TestOrigin, prefix: &str) {
    for (i, proxy) in proxies.iter().enumerate() {
        let url = origin.url(&format!("{prefix}{i}"));
        let (status, head, _) = curl(proxy, &url, &["--max-time", "8"]);
        assert_eq!(
            status,
            200,
            "{url} not served again: {head}\n{}",
            proxy.log()
        );
        let path = format!("{prefix}{i}");
        assert_eq!(origin.count(&path), 1, "{path} at the origin");
    }
}

/// Redis stopped (SIGSTOP) for 3 s under load, longer than the command timeout: the
/// acquires robotsgate gave up on run when Redis resumes, and must not take effect
/// (no phantom holder keeps the origin waiting for a lease); no gap is ever short.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_redis_leaves_no_phantom_holder_and_no_short_gap() {
    let redis = Redis::start();
    let origin = paced_origin("0.2").await;
    let proxies = instances(2, &fleet_yaml(&redis, "    command_timeout_seconds: 0.2\n"));
    backend_up(&proxies).await;
    let until = Instant::now() + Duration::from_secs(6);
    let stall = async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        signal(redis.child.id(), "-STOP");
        tokio::time::sleep(Duration::from_secs(3)).await;
        signal(redis.child.id(), "-CONT");
    };
    let (statuses, ()) = tokio::join!(load(&proxies, &origin, "/p/", 6, 400, until), stall);
    assert!(statuses.contains(&200), "{statuses:?}");
    backend_up(&proxies).await;
    served_again(&proxies, &origin, "/after/");
    assert_gaps_at_least(&pages(&origin, "/"), Duration::from_millis(200));
}

/// A single Redis SIGKILLed under load and restarted empty: the turns held then are
/// written again by their instances, so the origin never has more than `max_in_flight`
/// requests at once, and no gap is short.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restarted_empty_under_load_keeps_the_in_flight_limit_and_the_gaps() {
    let port = free_port();
    let mut redis = Some(Redis::start_on(port, &[]));
    let origin = slow_origin("/s/", 400).await;
    let paced = paced_origin("0.2").await;
    let yaml = fleet_yaml(
        redis.as_ref().expect("redis"),
        "    command_timeout_seconds: 0.2\n",
    );
    let proxies = instances(3, &yaml);
    backend_up(&proxies).await;
    let until = Instant::now() + Duration::from_secs(6);
    let restart = async {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        drop(redis.take());
        redis = Some(Redis::start_on(port, &[]));
    };
    let (slow_statuses, paced_statuses, ()) = tokio::join!(
        load(&proxies, &origin, "/s/", 6, 400, until),
        load(&proxies, &paced, "/p/", 3, 400, until),
        restart
    );
    assert!(slow_statuses.contains(&200) && paced_statuses.contains(&200));
    backend_up(&proxies).await;
    served_again(&proxies, &paced, "/after/");
    let seen = pages(&origin, "/s/");
    assert!(
        most_at_once(&seen) <= 2,
        "{} requests at once for max_in_flight 2",
        most_at_once(&seen)
    );
    assert_gaps_at_least(&pages(&paced, "/"), Duration::from_millis(200));
}

/// An origin's 429 with `Retry-After: 2` seen through one instance pauses the origin
/// through the other, measured at the origin from the 429's end to the next arrival.
/// `pacing` is the pacing section; with `other_served`, the other instance has served
/// the origin before.
async fn a_retry_after_pauses_the_origin_through_another_instance(
    pacing: &str,
    other_served: bool,
) {
    let redis = Redis::start();
    let origin = TestOrigin::start(vec![
        ("/robots.txt", Behaviour::ok("User-agent: *\nAllow: /\n")),
        (
            "/busy",
            Behaviour::with_headers(429, &[("Retry-After", "2")], "slow down\n"),
        ),
    ])
    .await;
    let both = instances(2, &format!("{}{pacing}", fleet_yaml(&redis, "")));
    backend_up(&both).await;
    let (first, other) = (&both[0], &both[1]);
    if other_served {
        assert_eq!(curl(other, &origin.url("/before"), &[]).0, 200);
    }
    assert_eq!(curl(first, &origin.url("/busy"), &[]).0, 429);
    let busy_done = pages(&origin, "/busy")[0].done.expect("answered");
    // The release that records the pause announces it in the same script: once Redis
    // holds it, the other instance has been told.
    let recorded = || {
        redis_cli(redis.port, &["--scan", "--pattern", "rg:*:s:*"])
            .lines()
            .any(|key| !redis_cli(redis.port, &["hget", key, "pause"]).is_empty())
    };
    assert!(
        eventually(Duration::from_secs(5), recorded).await,
        "the pause never reached Redis"
    );
    let (status, _, _) = curl(other, &origin.url("/after"), &["--max-time", "10"]);
    assert_eq!(status, 200);
    let after = pages(&origin, "/after");
    assert_eq!(after.len(), 1);
    let paused = after[0].arrived.saturating_duration_since(busy_done);
    assert!(
        paused >= Duration::from_millis(1_900),
        "the other instance forwarded {paused:?} after the 429 (Retry-After: 2)"
    );
}

/// With the in-flight limit (every request asks Redis), after serving the origin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_seen_by_one_instance_pauses_the_origin_for_all() {
    a_retry_after_pauses_the_origin_through_another_instance("", true).await;
}

/// With no limit in force (nothing else would make it ask Redis), on an instance that
/// has never served the origin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_reaches_an_instance_that_never_served_the_origin() {
    a_retry_after_pauses_the_origin_through_another_instance(
        "  pacing:\n    max_in_flight: 0\n",
        false,
    )
    .await;
}

/// A Redis that can evict robotsgate's keys, or that is out of memory, is not a
/// backend: `/readyz` says why by name, and paced requests get the fallback; fixed, it
/// is used again without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicting_or_full_redis_is_named_in_readyz() {
    let redis = Redis::start_on(free_port(), &["--maxmemory-policy", "volatile-ttl"]);
    let origin = TestOrigin::start(vec![(
        "/robots.txt",
        Behaviour::ok("User-agent: *\nAllow: /\n"),
    )])
    .await;
    let proxy = Proxy::start_for_loopback(&fleet_yaml(&redis, ""));
    assert!(
        eventually(Duration::from_secs(10), || {
            let (code, body) = admin(&proxy, "GET", "/readyz");
            code == 503 && body.contains("volatile-ttl")
        })
        .await,
        "readyz: {:?}",
        admin(&proxy, "GET", "/readyz")
    );
    redis_cli(
        redis.port,
        &["config", "set", "maxmemory-policy", "noeviction"],
    );
    backend_up(std::slice::from_ref(&proxy)).await;
    assert_eq!(curl(&proxy, &origin.url("/ok"), &[]).0, 200);
    // Out of memory.
    redis_cli(redis.port, &["config", "set", "maxmemory", "1"]);
    assert!(
        eventually(Duration::from_secs(10), || {
            let (code, body) = admin(&proxy, "GET", "/readyz");
            code == 503 && body.contains("out of memory")
        })
        .await,
        "readyz: {:?}",
        admin(&proxy, "GET", "/readyz")
    );
    let (status, head, _) = curl(&proxy, &origin.url("/full"), &[]);
    assert_eq!(status, 503, "{head}");
    assert!(head.contains("fleet-backend-unavailable"), "{head}");
    redis_cli(redis.port, &["config", "set", "maxmemory", "0"]);
    backend_up(std::slice::from_ref(&proxy)).await;
    assert_eq!(curl(&proxy, &origin.url("/again"), &[]).0, 200);
    assert_eq!(
        origin.count("/full"),
        0,
        "nothing forwarded while Redis was full"
    );
}

/// Redis unreachable (SIGKILLed, restarted empty 8 s later) under load, with
/// `on_unavailable: local` and timeouts short enough for a 4 s lease: each origin is
/// paced by its owner alone once every turn granted before the outage has ended, the
/// others refuse it; across the outage and the switch back, no gap is short and the
/// in-flight limit holds, at the origins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_outage_in_local_mode_is_paced_by_each_origins_owner() {
    let port = free_port();
    let mut redis = Some(Redis::start_on(port, &[]));
    let mut paced = Vec::new();
    for _ in 0..4 {
        paced.push(paced_origin("0.3").await);
    }
    let limited = slow_origin("/s/", 600).await;
    let yaml = format!(
        "{}{SHORT_LEASE}",
        fleet_yaml(
            redis.as_ref().expect("redis"),
            "    command_timeout_seconds: 0.2\n    on_unavailable: local\n",
        )
    );
    let proxies = instances(3, &yaml);
    backend_up(&proxies).await;
    let until = Instant::now() + Duration::from_secs(14);
    let marks = std::sync::Mutex::new((None, None));
    let outage = async {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        drop(redis.take());
        marks.lock().expect("marks").0 = Some(std::time::Instant::now());
        tokio::time::sleep(Duration::from_secs(8)).await;
        redis = Some(Redis::start_on(port, &[]));
        marks.lock().expect("marks").1 = Some(std::time::Instant::now());
    };
    let loads = futures_util::future::join_all(
        paced
            .iter()
            .map(|o| load(&proxies, o, "/p/", 3, 400, until))
            .chain([load(&proxies, &limited, "/s/", 6, 600, until)]),
    );
    let (statuses, ()) = tokio::join!(loads, outage);
    assert!(statuses.iter().all(|s| s.contains(&200)), "{statuses:?}");
    backend_up(&proxies).await;
    for origin in &paced {
        served_again(&proxies, origin, "/after/");
    }
    let (down, back) = *marks.lock().expect("marks");
    let (down, back) = (down.expect("killed"), back.expect("restarted"));
    // Served by the owners during the outage, once the lease had run out.
    let during: usize = paced
        .iter()
        .chain([&limited])
        .map(|o| {
            o.seen()
                .iter()
                .filter(|s| s.arrived > down + Duration::from_secs(4) && s.arrived < back)
                .count()
        })
        .sum();
    assert!(during > 0, "nothing served during the outage");
    for origin in &paced {
        assert_gaps_at_least(&pages(origin, "/"), Duration::from_millis(300));
    }
    let seen = pages(&limited, "/s/");
    assert!(
        most_at_once(&seen) <= 2,
        "{} requests at once for max_in_flight 2",
        most_at_once(&seen)
    );
}

/// Timeouts short enough for a 4 s lease (the longest hold: max(1 + 1, 1) + 1 = 3 s),
/// so that a killed instance's turns free within the test.
const SHORT_LEASE: &str = "  upstream:\n    read_timeout_seconds: 1\n    write_timeout_seconds: 1\n  pacing:\n    max_exchange_seconds: 1\n  robots:\n    fetch_timeout_seconds: 1\n";

/// A Redis Cluster of three masters with a replica each: the master holding the paced
/// origin's schedule is SIGKILLed under load, together with one robotsgate instance,
/// and its replica is promoted. The surviving instances follow the new master without
/// a restart; no gap is short and the in-flight limit holds, at the origins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_master_killed_and_its_replica_promoted_keeps_every_gap() {
    let mut cluster = Cluster::start_with(1);
    let paced = paced_origin("0.5").await;
    let limited = slow_origin("/s/", 600).await;
    let yaml = format!(
        "{}    command_timeout_seconds: 0.2\n{SHORT_LEASE}",
        cluster.yaml()
    );
    let mut proxies = instances(3, &yaml);
    backend_up(&proxies).await;
    let seed = cluster.nodes[0].port;
    let tag = format!("{{{}}}", paced.url("").trim_end_matches('/'));
    let master = cluster
        .master_of(seed, &tag)
        .expect("a master serves the slot");
    let until = Instant::now() + Duration::from_secs(12);
    let on = |port: u16| redis_cli(port, &["keys", "rg:*"]).contains(&tag);
    let kill = async {
        // Under load, once the schedule is where the test kills it.
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(
            eventually(Duration::from_secs(5), || on(master)).await,
            "{tag} never written to {master}"
        );
        let node = cluster
            .nodes
            .iter()
            .position(|n| n.port == master)
            .expect("the master is one of ours");
        signal(cluster.nodes[node].child.id(), "-KILL");
        signal(proxies[2].pid(), "-KILL");
        let deadline = Instant::now() + Duration::from_secs(20);
        while cluster
            .master_of(seed_other(&cluster, master), &tag)
            .is_none_or(|m| m == master)
        {
            assert!(Instant::now() < deadline, "no replica was promoted");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        node
    };
    let (paced_statuses, limited_statuses, killed) = tokio::join!(
        load(&proxies, &paced, "/p/", 4, 400, until),
        load(&proxies, &limited, "/s/", 6, 600, until),
        kill
    );
    assert!(paced_statuses.contains(&200) && limited_statuses.contains(&200));
    proxies.truncate(2);
    backend_up(&proxies).await;
    served_again(&proxies, &paced, "/after/");
    assert_gaps_at_least(&pages(&paced, "/"), Duration::from_millis(500));
    let seen = pages(&limited, "/s/");
    assert!(
        most_at_once(&seen) <= 2,
        "{} requests at once for max_in_flight 2",
        most_at_once(&seen)
    );
    drop(cluster.nodes.remove(killed));
}

/// A node of `cluster` other than `port` that is still running.
fn seed_other(cluster: &Cluster, port: u16) -> u16 {
    cluster
        .nodes
        .iter()
        .map(|n| n.port)
        .find(|p| *p != port)
        .expect("another node")
}

/// Sentinel-managed Redis: the master SIGKILLed under load, the sentinels promote the
/// replica, and the fleet follows it without a restart (the schedules are then written
/// there); no gap is short at the origin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_is_followed_without_a_restart() {
    let master = Redis::start();
    let replica_port = free_port();
    let replica = Redis::start_on(
        replica_port,
        &["--replicaof", "127.0.0.1", &master.port.to_string()],
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !redis_cli(replica.port, &["info", "replication"]).contains("master_link_status:up") {
        assert!(Instant::now() < deadline, "the replica never synced");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let sentinels: Vec<Redis> = (0..3).map(|_| Redis::sentinel(master.port)).collect();
    // Each sentinel has found the replica and the other sentinels.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !sentinels.iter().all(|s| {
        let info = redis_cli(s.port, &["sentinel", "master", "main"]);
        info.contains("num-slaves\n1") && info.contains("num-other-sentinels\n2")
    }) {
        assert!(Instant::now() < deadline, "sentinels never met");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let paced = paced_origin("0.3").await;
    let addresses: Vec<String> = sentinels
        .iter()
        .map(|s| format!("\"redis://127.0.0.1:{}\"", s.port))
        .collect();
    let yaml = format!(
        "  fleet:\n    redis_sentinel:\n      master: main\n      sentinels: [{}]\n    command_timeout_seconds: 0.2\n{SHORT_LEASE}",
        addresses.join(", ")
    );
    let proxies = instances(2, &yaml);
    backend_up(&proxies).await;
    let tag = format!("{{{}}}", paced.url("").trim_end_matches('/'));
    let until = Instant::now() + Duration::from_secs(12);
    let mut master = Some(master);
    let failover = async {
        // Under load, once the schedule is on the master the test kills.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let old = master.take().expect("master");
        let on_old = || redis_cli(old.port, &["keys", "rg:*"]).contains(&tag);
        assert!(eventually(Duration::from_secs(5), on_old).await);
        drop(old);
        let deadline = Instant::now() + Duration::from_secs(30);
        while sentinels[0].sentinel_master() != Some(replica_port) {
            assert!(
                Instant::now() < deadline,
                "the sentinels never promoted the replica"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let (statuses, ()) = tokio::join!(load(&proxies, &paced, "/p/", 4, 400, until), failover);
    assert!(statuses.contains(&200), "{statuses:?}");
    backend_up(&proxies).await;
    served_again(&proxies, &paced, "/after/");
    // The fleet writes to the promoted replica now: an origin first asked for after the
    // failover has its robots.txt and schedule there (the old master is gone).
    let fresh = paced_origin("0.3").await;
    served_again(&proxies, &fresh, "/new/");
    let fresh_tag = format!("{{{}}}", fresh.url("").trim_end_matches('/'));
    assert!(
        redis_cli(replica_port, &["keys", "rg:*"]).contains(&fresh_tag),
        "nothing written to the promoted replica"
    );
    assert_gaps_at_least(&pages(&fresh, "/"), Duration::from_millis(300));
    assert_gaps_at_least(&pages(&paced, "/"), Duration::from_millis(300));
}
