//! Fleet mode through every change of the fleet and every fault of its backend, kept
//! where the promise is kept: loopback origins logging when each request arrives and
//! ends. Real `redis-server`s (one, a Cluster with replicas, Sentinels) and robotsgate
//! processes, signalled by their PIDs; a partition is a relay the test cuts.
//!
//! Under each, a paced origin (Crawl-delay 0.5, a disallowed `/private`) and a slow one
//! (300 ms answers, `max_in_flight: 2`) are crawled through every instance; the promise:
//! no gap under the delay, never more than two requests at once, nothing disallowed,
//! and every origin served again afterwards.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::common::Conf;
use crate::common::*;
use crate::fleet_fixture::{
    backend_up, certs, fleet_conf, instances, load, ownership_changes, paced_origin, short_fleet,
    signal, slow_origin, Relay,
};
use crate::redis_servers::{redis_cli, Cluster, Redis};

/// The origins every scenario crawls.
struct Crawled {
    /// Crawl-delay 0.5, `/private` disallowed.
    paced: TestOrigin,
    /// No delay, 300 ms answers: the in-flight limit's.
    slow: TestOrigin,
}

impl Crawled {
    /// The origins, crawled by `n` members of one Redis (outage mode `refuse`), the
    /// first of which meets both origins first and so owns them.
    async fn owned_by_the_first_of(redis: &Redis, n: usize) -> (Crawled, Vec<Proxy>) {
        let crawled = Crawled::start().await;
        let proxies = members_of(redis, n, "refuse");
        backend_up(&proxies).await;
        crawled.owned_by(&proxies[0]);
        (crawled, proxies)
    }

    /// The statuses of the load sent through `proxies` for `seconds`, during which the
    /// first member gets `signal` once the load reaches both origins.
    async fn signalling_the_first(&self, proxies: &[Proxy], seconds: u64, sig: &str) -> Vec<u16> {
        let until = Instant::now() + Duration::from_secs(seconds);
        let pid = proxies[0].pid();
        let event = async {
            self.under_load().await;
            signal(pid, sig);
        };
        self.during(proxies, until, event).await
    }

    async fn start() -> Crawled {
        Crawled {
            paced: paced_origin("0.5").await,
            slow: slow_origin("/s/", 2000).await,
        }
    }

    /// Crawls both origins (and the disallowed pages) through `proxies` until `until`
    /// while `event` happens; the statuses of the allowed requests.
    async fn during(
        &self,
        proxies: &[Proxy],
        until: Instant,
        event: impl Future<Output = ()>,
    ) -> Vec<u16> {
        let (paced, slow) = ([&self.paced], [&self.slow]);
        let (paced, slow, private, ()) = tokio::join!(
            load(proxies, &paced, "/p/", 4, 2000, until),
            load(proxies, &slow, "/s/", 6, 2000, until),
            load(proxies, &paced, "/private/", 2, 200, until),
            event
        );
        assert!(
            private.iter().all(|&s| s != 200),
            "a disallowed page was answered 200: {private:?}"
        );
        paced.into_iter().chain(slow).collect()
    }

    /// `proxy` meets both origins first: it owns them.
    fn owned_by(&self, proxy: &Proxy) {
        assert_eq!(curl(proxy, &self.paced.url("/p/first"), &[]).0, 200);
        assert_eq!(curl(proxy, &self.slow.url("/s/first"), &[]).0, 200);
    }

    /// Returns once the load reaches both origins (a few pages each), for an event to
    /// happen under it.
    async fn under_load(&self) {
        let loaded = eventually(Duration::from_secs(20), || {
            pages(&self.paced, "/p/").len() >= 3 && pages(&self.slow, "/s/").len() >= 3
        })
        .await;
        assert!(loaded, "the load never reached the origins");
    }

    /// [`Crawled::kept`], and each origin with exactly one owner among `proxies`.
    async fn kept_with_one_owner(&self, proxies: &[Proxy]) {
        self.kept(proxies).await;
        one_owner_each(proxies, self);
    }

    /// The promise, at the origins: no short gap, at most two at once, nothing
    /// disallowed; and `proxies` serve both origins again.
    async fn kept(&self, proxies: &[Proxy]) {
        assert_gaps_at_least(&pages(&self.paced, "/"), Duration::from_millis(500));
        let seen = pages(&self.slow, "/s/");
        assert!(
            most_at_once(&seen) <= 2,
            "{} requests at once for max_in_flight 2",
            most_at_once(&seen)
        );
        assert!(
            pages(&self.paced, "/private").is_empty(),
            "a disallowed page left"
        );
        for (i, proxy) in proxies.iter().enumerate() {
            for (origin, prefix) in [(&self.paced, "/p/after"), (&self.slow, "/s/after")] {
                let path = format!("{prefix}{i}");
                let served = eventually(Duration::from_secs(30), || {
                    curl(proxy, &origin.url(&path), &["--max-time", "8"]).0 == 200
                })
                .await;
                assert!(served, "{path} not served again:\n{}", proxy.log());
            }
        }
        assert_gaps_at_least(&pages(&self.paced, "/"), Duration::from_millis(500));
    }
}

/// A member's settings for one Redis, outage mode `mode`, [`short`] timeouts.
fn member_conf(redis: &Redis, mode: &str) -> Conf {
    fleet_conf(redis).with(&short_fleet(mode))
}

/// The fleet's members for one Redis, `n` of them, outage mode `mode`.
fn members_of(redis: &Redis, n: usize, mode: &str) -> Vec<Proxy> {
    instances(n, &member_conf(redis, mode))
}

/// Waits until `others` took both crawled origins over, probing them (a request routed
/// anew finds the owner gone; the load's own requests may be waiting on it).
async fn taken_over_by(others: &[Proxy], crawled: &Crawled) -> bool {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut probe = 0;
    while Instant::now() < deadline {
        if others
            .iter()
            .map(|p| ownership_changes(p, "taken_over"))
            .sum::<f64>()
            >= 2.0
        {
            return true;
        }
        probe += 1;
        for origin in [&crawled.paced, &crawled.slow] {
            let url = origin.url(&format!("/probe/{probe}"));
            let client = others[probe % others.len()].client();
            let _ = tokio::time::timeout(Duration::from_secs(1), client.get(url).send()).await;
        }
    }
    false
}

/// Each crawled origin has exactly one owner among `proxies`.
fn one_owner_each(proxies: &[Proxy], crawled: &Crawled) {
    for origin in [&crawled.paced, &crawled.slow] {
        let owners = proxies
            .iter()
            .filter(|p| crate::fleet_fixture::owner_seen_by(p, origin).as_deref() == Some("here"))
            .count();
        assert_eq!(owners, 1, "owners of {}", origin.url(""));
    }
}

/// A graceful stop (SIGTERM) of the member that owns the origins, under load: it stops
/// taking turns, lets its exchanges end, and hands each origin with its last end to the
/// next owner, which takes it as handed (not as a vanished owner's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_leaving_gracefully_hands_its_origins_over() {
    let redis = Redis::start();
    let (crawled, mut proxies) = Crawled::owned_by_the_first_of(&redis, 3).await;
    // Its clients keep sending through it until it stops listening.
    let statuses = crawled.signalling_the_first(&proxies, 8, "-TERM").await;
    assert!(statuses.contains(&200));
    let mut leaver = proxies.remove(0);
    let left = eventually(Duration::from_secs(20), || leaver.exited()).await;
    assert!(left, "the member never stopped:\n{}", leaver.log());
    assert!(
        leaver.log().contains("2 origins handed over"),
        "{}",
        leaver.log()
    );
    crawled.kept_with_one_owner(&proxies).await;
    let handed: f64 = proxies.iter().map(|p| ownership_changes(p, "handed")).sum();
    let taken_over: f64 = proxies
        .iter()
        .map(|p| ownership_changes(p, "taken_over"))
        .sum();
    assert_eq!(
        (handed, taken_over),
        (2.0, 0.0),
        "both origins handed over, none taken over"
    );
}

/// The owner's origins crawled only through the other member: ownership follows that
/// member's traffic (`fleet.follow_traffic_seconds`) while the load runs, and the
/// promise holds across the move (the slow origin's turns queued at the old owner end
/// before the new owner starts, from their facts).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origin_following_its_traffic_keeps_the_promise() {
    let redis = Redis::start();
    let crawled = Crawled::start().await;
    let conf = member_conf(&redis, "refuse").set("fleet.follow_traffic_seconds", 1);
    let proxies = instances(2, &conf);
    backend_up(&proxies).await;
    crawled.owned_by(&proxies[0]);
    let until = Instant::now() + Duration::from_secs(8);
    let statuses = crawled.during(&proxies[1..], until, async {}).await;
    assert!(statuses.contains(&200));
    assert!(
        ownership_changes(&proxies[0], "followed") >= 1.0,
        "{}",
        proxies[0].log()
    );
    assert!(ownership_changes(&proxies[1], "handed") >= 1.0);
    crawled.kept_with_one_owner(&proxies).await;
}

/// A rolling restart: each member in turn stopped gracefully and started again, under
/// load; the promise holds throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_keeps_the_promise() {
    let redis = Redis::start();
    let crawled = Crawled::start().await;
    let conf = member_conf(&redis, "refuse");
    let mut proxies = instances(2, &conf);
    backend_up(&proxies).await;
    for round in 0..2 {
        let until = Instant::now() + Duration::from_secs(4);
        let old = proxies.remove(0);
        let restart = async {
            crawled.under_load().await;
            signal(old.pid(), "-TERM");
        };
        let statuses = crawled.during(&proxies, until, restart).await;
        assert!(statuses.contains(&200), "round {round}");
        drop(old);
        proxies.push(Proxy::start_for_loopback(&conf));
        backend_up(&proxies).await;
    }
    crawled.kept_with_one_owner(&proxies).await;
}

/// A graceful upgrade (SIGQUIT, a new process taking over the listeners, as the unit's
/// reload does) of the member that owns the origins, under load: the old process hands
/// the origins over before it gives up its listeners, and the promise holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_upgrade_of_the_owner_keeps_the_promise() {
    let redis = Redis::start();
    let (crawled, mut proxies) = Crawled::owned_by_the_first_of(&redis, 2).await;
    let until = Instant::now() + Duration::from_secs(8);
    let old = &proxies[0];
    let upgraded = std::sync::Mutex::new(None);
    let upgrade = async {
        crawled.under_load().await;
        let next = tokio::task::block_in_place(|| old.upgrade());
        *upgraded.lock().expect("lock") = Some(next);
    };
    let statuses = crawled.during(&proxies, until, upgrade).await;
    assert!(statuses.contains(&200));
    let next = upgraded.into_inner().expect("lock").expect("upgraded");
    let mut old = std::mem::replace(&mut proxies[0], next);
    let left = eventually(Duration::from_secs(20), || old.exited()).await;
    assert!(left, "the old process never stopped:\n{}", old.log());
    assert!(old.log().contains("2 origins handed over"), "{}", old.log());
    backend_up(&proxies).await;
    crawled.kept_with_one_owner(&proxies).await;
}

/// The owner SIGKILLed while serving: its origins wait for its lease and the longest
/// hold (an exchange it left running may still go on), then another member takes them
/// over; no gap is short at the origin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_killed_while_serving_is_taken_over_after_the_longest_hold() {
    let redis = Redis::start();
    let (crawled, mut proxies) = Crawled::owned_by_the_first_of(&redis, 3).await;
    let statuses = crawled.signalling_the_first(&proxies, 10, "-KILL").await;
    assert!(statuses.contains(&200));
    drop(proxies.remove(0));
    crawled.kept_with_one_owner(&proxies).await;
    // Both origins taken over (a member slowed past its lease on a loaded machine may
    // have had one taken over once more).
    let taken_over: f64 = proxies
        .iter()
        .map(|p| ownership_changes(p, "taken_over"))
        .sum();
    assert!(taken_over >= 2.0, "both origins taken over: {taken_over}");
}

/// A zombie: the owner stopped (SIGSTOP) past its lease, its origins taken over, then
/// resumed (SIGCONT) under load. By its own clock its lease lapsed: it must not act as
/// their owner, before or after it registers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_stopped_past_its_lease_and_resumed_never_acts_on_it() {
    let redis = Redis::start();
    let (crawled, proxies) = Crawled::owned_by_the_first_of(&redis, 3).await;
    let until = Instant::now() + Duration::from_secs(14);
    let pid = proxies[0].pid();
    let others = &proxies[1..];
    let zombie = async {
        crawled.under_load().await;
        signal(pid, "-STOP");
        let over = taken_over_by(others, &crawled).await;
        signal(pid, "-CONT");
        assert!(over, "the origins were never taken over");
    };
    // The zombie's clients keep sending through it all along.
    let statuses = crawled.during(&proxies, until, zombie).await;
    assert!(statuses.contains(&200));
    backend_up(&proxies).await;
    crawled.kept_with_one_owner(&proxies).await;
    assert_eq!(
        ownership_changes(&proxies[0], "lost"),
        2.0,
        "the zombie learnt it lost both"
    );
}

/// A member cut from Redis (it still reaches its clients and the origins) while it owns
/// the origins: in each mode it stops acting when its lease (plus the grace, with
/// `keep_owned`) lapses by its own clock, and the others wait that long plus the longest
/// hold before taking over; once the link is back it learns it lost them.
async fn a_partitioned_owner(mode: &str) {
    let redis = Redis::start();
    let mut relay = Relay::start(redis.port).await;
    let crawled = Crawled::start().await;
    let through_relay = certs()
        .conf()
        .set("fleet.redis", format!("redis://127.0.0.1:{}", relay.port))
        .with(&short_fleet(mode));
    let mut proxies = vec![Proxy::start_for_loopback(&through_relay)];
    proxies.extend(members_of(&redis, 2, mode));
    backend_up(&proxies).await;
    crawled.owned_by(&proxies[0]);
    let until = Instant::now() + Duration::from_secs(16);
    let others = &proxies[1..];
    let partition = async {
        crawled.under_load().await;
        relay.cut();
        let over = taken_over_by(others, &crawled).await;
        relay.restore();
        assert!(over, "the origins were never taken over");
    };
    let statuses = crawled.during(&proxies, until, partition).await;
    assert!(statuses.contains(&200));
    backend_up(&proxies).await;
    crawled.kept_with_one_owner(&proxies).await;
    assert_eq!(
        ownership_changes(&proxies[0], "lost"),
        2.0,
        "it learnt it lost both"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_owner_with_refuse() {
    a_partitioned_owner("refuse").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_owner_with_keep_owned() {
    a_partitioned_owner("keep_owned").await;
}

/// Redis killed and restarted empty under load, in each mode: owners write their claims
/// again, no key nobody claims is taken meanwhile, and the promise holds.
async fn redis_restarted_empty(mode: &str) {
    let mut redis = Redis::start();
    let crawled = Crawled::start().await;
    let proxies = members_of(&redis, 3, mode);
    backend_up(&proxies).await;
    let until = Instant::now() + Duration::from_secs(10);
    let restart = async {
        crawled.under_load().await;
        // Down for two seconds: past the lease (1.5 s), within keep_owned's grace.
        redis.kill_and_restart(Duration::from_secs(2)).await;
    };
    let statuses = crawled.during(&proxies, until, restart).await;
    assert!(statuses.contains(&200));
    backend_up(&proxies).await;
    crawled.kept_with_one_owner(&proxies).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restarted_empty_with_refuse() {
    redis_restarted_empty("refuse").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restarted_empty_with_keep_owned() {
    redis_restarted_empty("keep_owned").await;
}

/// Redis stalled (SIGSTOP) past the command timeout for 3 s: owners keep what they own
/// (with `keep_owned`) or stop at their lease (`refuse`); nothing overlaps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_redis_keeps_the_promise() {
    let redis = Redis::start();
    let crawled = Crawled::start().await;
    let proxies = members_of(&redis, 2, "keep_owned");
    backend_up(&proxies).await;
    let until = Instant::now() + Duration::from_secs(8);
    let pid = redis.child.id();
    let stall = async {
        crawled.under_load().await;
        signal(pid, "-STOP");
        // Stalled for three seconds: past the command timeout and the lease.
        tokio::time::sleep(Duration::from_secs(3)).await;
        signal(pid, "-CONT");
    };
    let statuses = crawled.during(&proxies, until, stall).await;
    assert!(statuses.contains(&200));
    backend_up(&proxies).await;
    crawled.kept_with_one_owner(&proxies).await;
}

/// A Redis stall shorter than the outage grace, with `keep_owned`: each of two members
/// owns one origin and both are crawled through both members, Redis paused
/// (`CLIENT PAUSE ALL`) for 8 s, past the lease (1.5 s) and the command timeout, within
/// the grace (30 s, the default). Nothing is lost: every allowed request through either
/// member, handed over or not, is answered 200 during the stall and after it (an owner
/// may still act then, so the other member keeps handing it its origin's requests, and
/// the owner keeps taking them from a member whose lease it saw lapse by its own clock
/// but that may act as long as it may), and the promise holds at the origins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_stall_shorter_than_the_grace_loses_nothing_with_keep_owned() {
    let redis = Redis::start();
    let crawled = Crawled::start().await;
    let conf = member_conf(&redis, "keep_owned").set("fleet.outage_grace_seconds", 30);
    let proxies = instances(2, &conf);
    backend_up(&proxies).await;
    assert_eq!(
        curl(&proxies[0], &crawled.paced.url("/p/first"), &[]).0,
        200
    );
    assert_eq!(curl(&proxies[1], &crawled.slow.url("/s/first"), &[]).0, 200);
    let port = redis.port;
    let stall = async {
        crawled.under_load().await;
        assert_eq!(redis_cli(port, &["CLIENT", "PAUSE", "8000", "ALL"]), "OK");
        tokio::time::sleep(Duration::from_secs(8)).await;
    };
    let until = Instant::now() + Duration::from_secs(12);
    let during = crawled.during(&proxies, until, stall).await;
    let lost: Vec<&u16> = during.iter().filter(|&&s| s != 200).collect();
    assert!(
        lost.is_empty(),
        "{} of {} requests lost in a stall shorter than the grace: {lost:?}\n{}\n{}",
        lost.len(),
        during.len(),
        proxies[0].log(),
        proxies[1].log()
    );
    crawled.kept_with_one_owner(&proxies).await;
}

/// A Cluster master killed and its replica promoted (acknowledged writes may be lost),
/// with the owner of the crawled origins killed too: the promise holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_master_killed_and_its_replica_promoted_keeps_the_promise() {
    let mut cluster = Cluster::start_with(1);
    let crawled = Crawled::start().await;
    let proxies = instances(3, &cluster.conf().with(&short_fleet("refuse")));
    backend_up(&proxies).await;
    assert_eq!(
        curl(&proxies[0], &crawled.paced.url("/p/first"), &[]).0,
        200
    );
    let seed = cluster.nodes[0].port;
    // The master of the ownership records' slot (claims and members).
    let tag = "{robotsgate}".to_string();
    let master = cluster
        .master_of(seed, &tag)
        .expect("a master serves the slot");
    let node = cluster
        .nodes
        .iter()
        .position(|n| n.port == master)
        .expect("the master is one of ours");
    let other = cluster
        .nodes
        .iter()
        .map(|n| n.port)
        .find(|p| *p != master)
        .expect("another node");
    let until = Instant::now() + Duration::from_secs(12);
    let failover = async {
        crawled.under_load().await;
        signal(cluster.nodes[node].child.id(), "-KILL");
        let promoted = eventually(Duration::from_secs(20), || {
            cluster.master_of(other, &tag).is_some_and(|m| m != master)
        })
        .await;
        assert!(promoted, "no replica was promoted");
    };
    let statuses = crawled.during(&proxies, until, failover).await;
    assert!(statuses.contains(&200));
    backend_up(&proxies).await;
    crawled.kept_with_one_owner(&proxies).await;
    drop(cluster.nodes.remove(node));
}

/// Sentinel-managed Redis, as `docs/fleet.md` says to run it (`min-replicas-to-write 1`,
/// two replicas): the master SIGKILLed under load, the sentinels promote a replica, the
/// fleet follows without a restart, and the promise holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_keeps_the_promise() {
    let guarded = [
        "--min-replicas-to-write",
        "1",
        "--min-replicas-max-lag",
        "5",
    ];
    let master = Redis::start_free(&guarded);
    let replicate = [
        &guarded[..],
        &["--replicaof", "127.0.0.1", &master.port.to_string()],
    ];
    let replicas: Vec<Redis> = (0..2)
        .map(|_| Redis::start_free(&replicate.concat()))
        .collect();
    let synced = eventually(Duration::from_secs(10), || {
        replicas
            .iter()
            .all(|r| redis_cli(r.port, &["info", "replication"]).contains("master_link_status:up"))
    })
    .await;
    assert!(synced, "the replicas never synced");
    let sentinels: Vec<Redis> = (0..3).map(|_| Redis::sentinel(master.port)).collect();
    let met = eventually(Duration::from_secs(20), || {
        sentinels.iter().all(|s| {
            let info = redis_cli(s.port, &["sentinel", "master", "main"]);
            info.contains("num-slaves\n2") && info.contains("num-other-sentinels\n2")
        })
    })
    .await;
    assert!(met, "sentinels never met");
    let crawled = Crawled::start().await;
    let addresses: Vec<String> = sentinels
        .iter()
        .map(|s| format!("redis://127.0.0.1:{}", s.port))
        .collect();
    let conf = certs()
        .conf()
        .set("fleet.redis_sentinel.master", "main")
        .set("fleet.redis_sentinel.sentinels", addresses)
        .with(&short_fleet("refuse"));
    let proxies = instances(2, &conf);
    backend_up(&proxies).await;
    let until = Instant::now() + Duration::from_secs(12);
    let mut master = Some(master);
    let failover = async {
        crawled.under_load().await;
        drop(master.take());
        let promoted = eventually(Duration::from_secs(30), || {
            let master = sentinels[0].sentinel_master();
            replicas.iter().any(|r| master == Some(r.port))
        })
        .await;
        assert!(promoted, "the sentinels never promoted the replica");
    };
    let statuses = crawled.during(&proxies, until, failover).await;
    assert!(statuses.contains(&200));
    backend_up(&proxies).await;
    crawled.kept_with_one_owner(&proxies).await;
}

/// An evicting Redis, then a full one, is named in `/readyz`; nothing is forwarded for
/// an origin nobody can claim while it is full.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicting_or_full_redis_is_named_in_readyz() {
    let redis = Redis::start_free(&["--maxmemory-policy", "volatile-ttl"]);
    let origin = TestOrigin::robots("User-agent: *\nAllow: /\n").await;
    let proxy = Proxy::start_for_loopback(&fleet_conf(&redis));
    let named = |what: &'static str| {
        let proxy = &proxy;
        move || {
            let (code, body) = admin(proxy, "GET", "/readyz");
            code == 503 && body.contains(what)
        }
    };
    assert!(eventually(Duration::from_secs(10), named("volatile-ttl")).await);
    redis_cli(
        redis.port,
        &["config", "set", "maxmemory-policy", "noeviction"],
    );
    backend_up(std::slice::from_ref(&proxy)).await;
    assert_eq!(curl(&proxy, &origin.url("/ok"), &[]).0, 200);
    redis_cli(redis.port, &["config", "set", "maxmemory", "1"]);
    let fresh = TestOrigin::robots("User-agent: *\n").await;
    assert!(eventually(Duration::from_secs(10), named("out of memory")).await);
    let (status, head, _) = curl(&proxy, &fresh.url("/full"), &[]);
    assert_eq!(status, 503, "{head}");
    redis_cli(redis.port, &["config", "set", "maxmemory", "0"]);
    backend_up(std::slice::from_ref(&proxy)).await;
    assert_eq!(curl(&proxy, &fresh.url("/again"), &[]).0, 200);
    assert_eq!(
        fresh.count("/full"),
        0,
        "nothing forwarded while Redis was full"
    );
}

/// A new owner that must fetch robots.txt itself (the fleet's copy is gone, as after
/// Redis lost it) keeps the Crawl-delay from the last page the old owner sent: the next
/// turn the delay allows is handed over with the origin, and the robots.txt fetch, a
/// request to the origin like any other, waits for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_owners_robots_fetch_keeps_the_delay_from_the_last_page() {
    let redis = Redis::start();
    let origin = paced_origin("2").await;
    let mut proxies = instances(2, &fleet_conf(&redis));
    backend_up(&proxies).await;
    let first = curl(&proxies[0], &origin.url("/first"), &[]);
    assert_eq!(first.0, 200, "{first:?}\n{}", proxies[0].log());
    assert_eq!(
        crate::fleet_fixture::owner_index(&proxies, &origin),
        Some(0)
    );
    assert_eq!(curl(&proxies[0], &origin.url("/last"), &[]).0, 200);
    let key = crate::fleet_fixture::robots_copy_key(&origin);
    assert_eq!(redis_cli(redis.port, &["DEL", &key]), "1");
    proxies[0].stop();
    let (status, _, body) = curl(&proxies[1], &origin.url("/next"), &[]);
    assert_eq!(status, 200, "{body}\n{}", proxies[1].log());
    let after = received_from(&origin, "/last");
    assert_eq!(targets(&after), ["/last", "/robots.txt", "/next"]);
    assert_gaps_at_least(&after, Duration::from_secs(2));
}
