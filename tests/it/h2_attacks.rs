//! The known HTTP/2 attacks against robotsgate's h2 listener (inside an intercepted
//! tunnel), each from `tests/helpers/crawler/h2_client.py` on PyPI `h2`: robotsgate's memory
//! stays bounded, every stream slot is given back, and another client is served during
//! and after the attack.

use serde_json::json;
use std::time::Duration;

use crate::common::{curl, eventually, rss_bytes, Behaviour, Conf, TestOrigin};
use crate::h2_clients::h2_client;
use crate::https::Setup;

/// Growth of robotsgate's resident memory an attack may cause.
const MAX_GROWTH: u64 = 64 * 1024 * 1024;

/// A proxy, an origin for the attacker and another for the bystander.
struct Arena {
    s: Setup,
    target: TestOrigin,
    bystander: TestOrigin,
    baseline: u64,
}

impl Arena {
    async fn new(conf: &Conf) -> Arena {
        let s = Setup::start(conf).await;
        let target = s.origin("User-agent: *\nAllow: /\n").await;
        target.set("/big", Behaviour::ok(&"x".repeat(1024 * 1024)));
        let bystander = s.origin("User-agent: *\nAllow: /\n").await;
        let arena = Arena {
            s,
            target,
            bystander,
            baseline: 0,
        };
        // Warm: both robots.txt cached, the TLS paths taken once.
        assert_eq!(arena.bystander_served(), 200);
        assert_eq!(
            curl(
                &arena.s.proxy,
                &arena.target.url("/warm"),
                &[
                    "--cacert",
                    &arena.ca(),
                    "--suppress-connect-headers",
                    "--http2"
                ]
            )
            .0,
            200
        );
        Arena {
            baseline: rss_bytes(arena.s.proxy.pid()),
            ..arena
        }
    }

    fn ca(&self) -> String {
        self.s.operator_ca.to_string_lossy().into_owned()
    }

    /// A bystander's request over h2: its status.
    fn bystander_served(&self) -> u16 {
        let url = self.bystander.url("/page");
        curl(
            &self.s.proxy,
            &url,
            &[
                "--cacert",
                &self.ca(),
                "--suppress-connect-headers",
                "--http2",
            ],
        )
        .0
    }

    fn attack(&self, args: &[&str]) -> serde_json::Value {
        let target = format!("localhost:{}", self.target.addr.port());
        h2_client(&self.s, &target, args).unwrap_or_else(|e| panic!("{e}"))
    }

    /// After an attack: memory bounded, no stream slot left held, the bystander served.
    async fn assert_unharmed(&self, what: &str) {
        let grown = rss_bytes(self.s.proxy.pid()).saturating_sub(self.baseline);
        assert!(
            grown < MAX_GROWTH,
            "{what}: resident memory grew {grown} bytes"
        );
        let released = eventually(Duration::from_secs(10), || {
            self.s.proxy.metric("robotsgate_downstream_h2_streams") == Some(0.0)
        })
        .await;
        assert!(released, "{what}: stream slots still held");
        assert_eq!(
            self.bystander_served(),
            200,
            "{what}: {}",
            self.s.proxy.log()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rapid_reset_is_bounded() {
    let a = Arena::new(&Conf::new()).await;
    // Streams reset right behind their HEADERS: `h2` counts them and ends the
    // connection long before the 20,000 are sent.
    let report = a.attack(&["rapid-reset", "20000", "--hold", "3"]);
    eprintln!("rapid reset: {report}");
    assert_eq!(report["closed"], true, "{report}");
    let sent = report["sent"].as_u64().unwrap_or(u64::MAX);
    assert!(sent < 20000, "{report}");
    // No amplification: at most one request at the origin per stream opened.
    let reached = a.target.count("/page") as u64;
    assert!(reached <= sent, "{reached} requests from {sent} streams");
    a.assert_unharmed("rapid reset").await;

    // Resets that come once robotsgate has accepted the streams (and queued them for
    // the origin's turn): every stream holds a client slot until it ends, and each
    // reset stream leaves the pacing queue.
    a.target.set("/page", Behaviour::delayed(200, "page\n"));
    let report = a.attack(&[
        "rapid-reset",
        "3000",
        "--batch",
        "100",
        "--gap",
        "0.05",
        "--hold",
        "2",
    ]);
    eprintln!("rapid reset, after accept: {report}");
    a.assert_unharmed("rapid reset after accept").await;
    let reached = a.target.count("/page");
    assert!(reached < 100, "{reached} requests reached the origin");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_continuation_flood_ends_the_connection() {
    let a = Arena::new(&Conf::new()).await;
    let report = a.attack(&["continuation", "1000000", "--hold", "3"]);
    eprintln!("continuation flood: {report}");
    assert!(
        report["closed"] == true || report["goaway"].is_u64(),
        "the connection outlived the flood: {report}"
    );
    assert!(report["sent"].as_u64().unwrap_or(0) < 1_000_000, "{report}");
    assert_eq!(a.target.count("/page"), 0);
    a.assert_unharmed("continuation flood").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_hpack_bomb_is_refused() {
    let a = Arena::new(&Conf::new()).await;
    // 12,000 references to a 4 KiB field: 48 MiB decoded from a 16 KiB block.
    let report = a.attack(&["hpack-bomb", "12000", "--hold", "3"]);
    eprintln!("hpack bomb: {report}");
    let refused =
        report["statuses"] == json!([431]) || report["goaway"].is_u64() || report["closed"] == true;
    assert!(refused, "{report}");
    assert_eq!(a.target.count("/page"), 0);
    a.assert_unharmed("hpack bomb").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zero_window_stall_is_cut() {
    // Streams whose client never opens its window: cut after the write timeout, as an
    // HTTP/1.1 client that takes no bytes is.
    let a = Arena::new(
        &Conf::new()
            .set("upstream.write_timeout_seconds", 1)
            .set("pacing.max_in_flight", 50),
    )
    .await;
    let report = a.attack(&["zero-window", "50", "/big", "--hold", "5"]);
    eprintln!("zero window: {report}");
    assert_eq!(
        report["statuses"].as_array().map(Vec::len),
        Some(50),
        "{report}"
    );
    assert!(
        report["resets"].as_u64().unwrap_or(0) >= 1 || report["closed"] == true,
        "{report}"
    );
    a.assert_unharmed("zero window").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settings_flood_waits_on_the_flooder() {
    let a = Arena::new(&Conf::new()).await;
    let report = a.attack(&["settings-flood", "3000000"]);
    eprintln!("settings flood: {report}");
    // robotsgate stopped reading once its ACKs filled the socket: the flooder blocked.
    assert!(report["sent"].as_u64().unwrap_or(0) < 3_000_000, "{report}");
    a.assert_unharmed("settings flood").await;
}
