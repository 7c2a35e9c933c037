//! A Sentinel-managed master that would keep taking claims on both sides of a
//! partition: `min-replicas-to-write` unset (Redis' default) is refused as a backend,
//! and with it set, a master cut from its replicas takes no claim, so nothing is
//! forwarded for an origin nobody owned. Real `redis-server`s (a master, its replica, a
//! sentinel) and a robotsgate process; the origins log what reached them.

use std::time::Duration;

use crate::common::*;
use crate::fleet_fixture::{backend_up, certs, short_fleet};
use crate::redis_servers::{redis_cli, Redis};

/// A master, a replica synced to it, and a sentinel watching them as `main`.
struct Watched {
    master: Redis,
    replica: Option<Redis>,
    sentinel: Redis,
}

impl Watched {
    async fn start() -> Watched {
        let master = Redis::start();
        let replica = Redis::start_free(&["--replicaof", "127.0.0.1", &master.port.to_string()]);
        let port = replica.port;
        let synced = eventually(Duration::from_secs(10), || {
            redis_cli(port, &["info", "replication"]).contains("master_link_status:up")
        })
        .await;
        assert!(synced, "the replica never synced");
        let sentinel = Redis::sentinel(master.port);
        Watched {
            master,
            replica: Some(replica),
            sentinel,
        }
    }

    /// One member of a fleet on this Sentinel.
    fn member(&self) -> Proxy {
        let conf = certs()
            .conf()
            .set("fleet.redis_sentinel.master", "main")
            .set(
                "fleet.redis_sentinel.sentinels",
                vec![format!("redis://127.0.0.1:{}", self.sentinel.port)],
            )
            .with(&short_fleet("refuse"));
        Proxy::start_for_loopback(&conf)
    }
}

/// Does `proxy`'s `/readyz` answer 503 naming `what`?
fn unready_naming(proxy: &Proxy, what: &str) -> bool {
    let (code, body) = admin(proxy, "GET", "/readyz");
    code == 503 && body.contains(what)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_master_that_writes_with_no_replica_is_refused() {
    let mut watched = Watched::start().await;
    let origin = TestOrigin::robots("User-agent: *\nAllow: /\n").await;
    let proxy = watched.member();
    let named = eventually(Duration::from_secs(15), || {
        unready_naming(&proxy, "min-replicas-to-write")
    })
    .await;
    assert!(named, "{:?}", admin(&proxy, "GET", "/readyz"));
    let label = "cause=\"unreplicated_writes\"";
    assert_eq!(
        proxy.sum("robotsgate_fleet_backend_unavailable", label),
        1.0
    );
    let (status, head, _) = curl(&proxy, &origin.url("/refused"), &[]);
    assert_eq!(status, 503, "{head}");

    // Guarded: the master refuses writes once its replicas fall silent for 2 s.
    let port = watched.master.port;
    redis_cli(port, &["config", "set", "min-replicas-max-lag", "2"]);
    redis_cli(port, &["config", "set", "min-replicas-to-write", "1"]);
    backend_up(std::slice::from_ref(&proxy)).await;
    assert_eq!(
        proxy.sum("robotsgate_fleet_backend_unavailable", label),
        0.0
    );
    assert_eq!(curl(&proxy, &origin.url("/served"), &[]).0, 200);

    // Cut from its replica: no claim is taken, nothing reaches a new origin.
    drop(watched.replica.take());
    let silent = eventually(Duration::from_secs(15), || {
        redis_cli(port, &["info", "replication"]).contains("min_slaves_good_slaves:0")
    })
    .await;
    assert!(silent, "the master still counts its replica");
    let fresh = TestOrigin::robots("User-agent: *\nAllow: /\n").await;
    let (status, head, _) = curl(&proxy, &fresh.url("/cut"), &[]);
    assert_eq!(status, 503, "{head}");
    assert_eq!(
        fresh.count("/cut"),
        0,
        "forwarded by a master cut from its replicas"
    );
    assert_eq!(
        fresh.count("/robots.txt"),
        0,
        "robots.txt fetched without a claim"
    );
    assert_eq!(
        origin.count("/refused"),
        0,
        "forwarded while the backend was refused"
    );
}
