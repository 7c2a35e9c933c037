//! Blind tunnels (`tls.blind_tunnel`): judged at the host level only (egress, robots.txt's
//! verdict on `/`), their connection starts paced, their bytes relayed unseen; over real
//! sockets, with HTTPS origins holding certificates from a test CA.

use std::time::Duration;

use crate::common::{curl, Behaviour, Conf, TestOrigin};
use crate::https::{path, Setup, ROBOTS};

/// Blind: the origin's own certificate reaches the client and no path is seen; the
/// connection starts keep the Crawl-delay; `Disallow: /` refuses the CONNECT itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blind_tunnel_host_level_checks_and_paced_connection_starts() {
    let s = Setup::start(&Conf::new().set("tls.blind_tunnel", ["localhost"])).await;
    let origin = s
        .origin("User-agent: *\nDisallow: /private\nCrawl-delay: 1\n")
        .await;
    let blocked = s.origin("User-agent: *\nDisallow: /\n").await;

    // Blind: the client sees the origin's own certificate (trusts the origin CA, not the
    // operator's) and robotsgate sees no path — even /private goes through.
    let origin_ca = s.dir.path().join("origin-ca.pem");
    let curl_blind = |url: &str| {
        curl(
            &s.proxy,
            url,
            &["--cacert", path(&origin_ca), "--suppress-connect-headers"],
        )
    };
    let (status, _, body) = curl_blind(&origin.url("/private"));
    assert_eq!(status, 200, "{}", s.proxy.log());
    assert_eq!(body, "page /private\n");
    // Connection starts are paced by Crawl-delay: the origin accepts the second tunnel's
    // connection at least a second after the first (connections: robots.txt fetch, then
    // the two tunnels).
    assert_eq!(curl_blind(&origin.url("/again")).0, 200);
    let accepted = origin.accepted();
    assert_eq!(accepted.len(), 3, "one connection each");
    let gap = accepted[2].duration_since(accepted[1]);
    eprintln!("blind tunnel connection gap {gap:?}");
    assert!(gap >= Duration::from_millis(1000), "{gap:?}");

    // `Disallow: /` for the agent refuses the CONNECT itself (curl shows that answer).
    let (status, head, _) = curl(
        &s.proxy,
        &blocked.url("/anything"),
        &["--cacert", path(&origin_ca)],
    );
    assert_eq!(status, 403, "{head}");
    assert!(head.contains("X-Robots-Decision: disallowed"), "{head}");
    assert_eq!(blocked.count("/anything"), 0);

    assert_eq!(
        s.metric("robotsgate_connect_tunnels_total{mode=\"blind\",outcome=\"established\"}"),
        2.0
    );
    assert_eq!(
        s.metric("robotsgate_connect_tunnels_total{mode=\"blind\",outcome=\"refused\"}"),
        1.0
    );
    assert_eq!(s.metric("robotsgate_tls_leaf_mints_total"), 0.0);
}

/// A blind-tunnel network rule holds only when every address of the name is inside it:
/// a name resolving to one address inside and one outside is intercepted (and judged
/// path by path), never tunnelled blind towards the address outside.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blind_tunnel_networks_must_hold_every_address() {
    let dns = crate::common::static_dns(vec![
        "127.0.0.1".parse().expect("ip"),
        "127.0.1.5".parse().expect("ip"),
    ])
    .await;
    let s =
        Setup::start_with_dns(dns, &Conf::new().set("tls.blind_tunnel", ["127.0.1.0/24"])).await;
    let origin = TestOrigin::start_tls(
        vec![("/robots.txt", Behaviour::ok(ROBOTS))],
        s.origin_ca.server_config(&["mixed.test"]),
        "mixed.test",
    )
    .await;
    // Only an intercepted tunnel shows the operator CA's certificate (curl trusts only
    // it), and only it can refuse a path.
    let (status, head, body) = s.curl(&origin.url("/disallowed/x"));
    assert_eq!(status, 403, "{head}{body}\n{}", s.proxy.log());
    assert_eq!(s.curl(&origin.url("/ok")).0, 200);
    assert_eq!(
        s.metric("robotsgate_connect_tunnels_total{mode=\"blind\",outcome=\"established\"}"),
        0.0
    );
    assert_eq!(origin.count("/disallowed/x"), 0);
}
