//! The channel between instances: a request that arrives at a member that does not own
//! its origin is carried out through the owner (judged, signed and paced once), only
//! fleet members can use the channel, a client cannot pass for one, and a forwarded
//! request costs Redis nothing (counted by Redis itself).

use std::process::Command;
use std::time::Duration;

use base64::Engine;
use serde_json::Value;

use crate::common::{
    curl, eventually, pages, raw_exchange, status_of, Conf, Proxy, TestCa, TestOrigin,
};
use crate::fleet_fixture::{
    backend_up, certs, fleet_conf, handed_over, handed_over_reaching, instances, owner_index,
    paced_origin, peer_curl, signal, HttpsFleet,
};
use crate::redis_servers::{redis_cli, Redis};
use crate::signing::{generate, signing, VerifyingOrigin};

/// Through the owner and through another member: the same answer (status, the
/// `X-Robots-*` headers, body) for a disallowed page and an allowed one; the allowed one
/// reaches the origin once per request, signed once, by the owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_through_a_non_owner_gets_the_owners_answer_signed_once() {
    let redis = Redis::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let key = dir.path().join("main.jwk");
    generate(&key);
    // The same identity on both members, each with its own directory listener.
    let signed: Vec<_> = (0..2)
        .map(|_| signing(dir.path(), &key, None, "string"))
        .collect();
    let origin = VerifyingOrigin::start(dir.path(), &signed[0].listener);
    let proxies: Vec<Proxy> = signed
        .iter()
        .map(|s| Proxy::start_for_loopback(&fleet_conf(&redis).with(&s.conf)))
        .collect();
    backend_up(&proxies).await;
    let url = |path: &str| format!("http://127.0.0.1:{}{path}", origin.port);
    // The first member to meet the origin owns it.
    assert_eq!(curl(&proxies[0], &url("/first"), &[]).0, 200);
    let (status, _, body) = curl(&proxies[1], &url("/handed"), &[]);
    assert_eq!((status, body.as_str()), (200, "verified"));
    origin.signed_once("/handed");
    let at_origin = origin
        .seen()
        .iter()
        .filter(|l| l["path"] == "/handed")
        .count();
    assert_eq!(at_origin, 1, "one request at the origin");
    let signed_by = |p: &Proxy| p.counter("robotsgate_signed_requests_total{identity=\"main\"}");
    assert_eq!(
        signed_by(&proxies[0]),
        3.0,
        "robots.txt, /first, /handed: by the owner"
    );
    assert_eq!(
        signed_by(&proxies[1]),
        0.0,
        "never by the member that handed over"
    );
    assert_eq!(handed_over_reaching(&proxies[1], 1.0).await, 1.0);

    // A refusal reads the same through either member.
    let refusing = paced_origin("0").await;
    assert_eq!(curl(&proxies[0], &refusing.url("/a"), &[]).0, 200);
    let answers: Vec<(u16, Vec<String>, String)> = proxies
        .iter()
        .map(|p| {
            let (status, head, body) = curl(p, &refusing.url("/private/x"), &[]);
            (status, robots_headers(&head), body)
        })
        .collect();
    assert_eq!(answers[0].0, 403, "{answers:?}\n{}", proxies[0].log());
    assert!(!answers[0].1.is_empty(), "{answers:?}");
    assert_eq!(answers[0], answers[1], "the owner's answer, unchanged");
    assert_eq!(refusing.count("/private/x"), 0);
}

/// The body of a whole HTTP/1.1 answer (`answer` read to its connection's close): its
/// head's `Content-Length` checked against what followed the head.
fn whole_body(answer: &str) -> &str {
    let (head, body) = answer.split_once("\r\n\r\n").expect("a head");
    let length = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length").then_some(value)
        })
        .and_then(|l| l.trim().parse::<usize>().ok())
        .expect("a Content-Length");
    assert_eq!(body.len(), length, "{answer}");
    body
}

/// The `X-Robots-*` lines of a response head, as sent.
fn robots_headers(head: &str) -> Vec<String> {
    head.lines()
        .filter(|l| l.to_ascii_lowercase().starts_with("x-robots"))
        .map(|l| l.trim().to_string())
        .collect()
}

/// Only a member can use the peer channel: no client certificate, one from another CA,
/// or plain HTTP get no exchange at all; a member's request without its context is
/// refused; one with it is judged like any other (a disallowed page never leaves).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_peer_channel_admits_only_fleet_members() {
    let redis = Redis::start();
    let origin = paced_origin("0").await;
    let proxies = instances(1, &fleet_conf(&redis));
    backend_up(&proxies).await;
    let proxy = &proxies[0];
    assert_eq!(peer_curl(proxy.peer, &[], &[]), 0, "no client certificate");
    let other = TestCa::new("not the fleet CA");
    let (pem, key) = other.leaf_pem(&["robotsgate-fleet"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let (cert_file, key_file) = (dir.path().join("c.pem"), dir.path().join("c.key"));
    std::fs::write(&cert_file, pem).expect("write");
    std::fs::write(&key_file, key).expect("write");
    let foreign = [
        "--cert",
        cert_file.to_str().expect("path"),
        "--key",
        key_file.to_str().expect("path"),
    ];
    assert_eq!(
        peer_curl(proxy.peer, &foreign, &[]),
        0,
        "a certificate from another CA"
    );
    let plain =
        status_of(Command::new("curl").arg(format!("http://{}/", proxy.peer.expect("peer"))));
    assert_eq!(plain, 0, "plain HTTP on the peer channel");

    // The member's own credential (as a stolen key would be used).
    let member_cert = proxy.file("member.pem");
    let member_key = proxy.file("member.key");
    let member = [
        "--cert",
        member_cert.to_str().expect("path"),
        "--key",
        member_key.to_str().expect("path"),
    ];
    // A member's request with no context: refused.
    let target = origin.url("/a");
    let absolute = ["--request-target", target.as_str()];
    assert_eq!(
        peer_curl(proxy.peer, &[&member[..], &absolute[..]].concat(), &[]),
        400
    );
    // With one, it is judged: a disallowed page is refused, an allowed one goes once.
    let context = peer_context(r#"{"c":"127.0.0.1","m":"test"}"#);
    let header = format!("robotsgate-peer: {context}");
    for (path, want) in [("/private/x", 403), ("/ok", 200)] {
        let target = origin.url(path);
        let host = format!("Host: {}", target.split('/').nth(2).expect("authority"));
        let args = [
            &member[..],
            &["--request-target", &target, "-H", &header, "-H", &host][..],
        ]
        .concat();
        assert_eq!(peer_curl(proxy.peer, &args, &[]), want, "{path}");
    }
    assert_eq!(origin.count("/private/x"), 0);
    assert_eq!(origin.count("/ok"), 1);
    assert_eq!(origin.count("/a"), 0);
}

/// A peer context as the channel carries it (base64url of its JSON).
fn peer_context(json: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
}

/// A client's own `robotsgate-peer` header, sent to a member's proxy listener (owner or
/// not): judged as the client it is, the header never forwarded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_forged_peer_header_changes_nothing() {
    let redis = Redis::start();
    let origin = paced_origin("0").await;
    let proxies = instances(2, &fleet_conf(&redis));
    backend_up(&proxies).await;
    assert_eq!(curl(&proxies[0], &origin.url("/claim"), &[]).0, 200);
    let forged = format!(
        "robotsgate-peer: {}",
        peer_context(r#"{"c":"10.9.9.9","u":"ops","m":"forged"}"#)
    );
    for (i, proxy) in proxies.iter().enumerate() {
        let private = curl(proxy, &origin.url("/private/y"), &["-H", &forged]).0;
        assert_eq!(private, 403, "member {i}");
        let page = format!("/page{i}");
        assert_eq!(curl(proxy, &origin.url(&page), &["-H", &forged]).0, 200);
        let seen = &pages(&origin, &page)[0];
        assert_eq!(seen.header("robotsgate-peer"), None, "never forwarded");
    }
    assert_eq!(origin.count("/private/y"), 0);
}

/// Counted by Redis: with every origin owned, a thousand requests through two members
/// (half of them handed over) make no Redis call at all; only the members' lease
/// renewals reach it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_request_makes_no_redis_call() {
    let redis = Redis::start();
    let origins = [paced_origin("0").await, paced_origin("0").await];
    let proxies = instances(2, &fleet_conf(&redis));
    backend_up(&proxies).await;
    // Each origin met once through each member: owned by one, known to the other.
    for origin in &origins {
        for proxy in &proxies {
            assert_eq!(curl(proxy, &origin.url("/warm"), &[]).0, 200);
        }
    }
    redis_cli(
        redis.port,
        &["config", "set", "slowlog-log-slower-than", "0"],
    );
    redis_cli(redis.port, &["config", "set", "slowlog-max-len", "100000"]);
    redis_cli(redis.port, &["slowlog", "reset"]);
    let before = commandstats_calls(redis.port);
    let until = tokio::time::Instant::now() + Duration::from_secs(30);
    let origin_refs: Vec<&TestOrigin> = origins.iter().collect();
    let statuses =
        crate::fleet_fixture::load(&proxies, &origin_refs, "/steady/", 8, 1000, until).await;
    let answered = statuses.iter().filter(|&&s| s == 200).count();
    assert_eq!(answered, statuses.len(), "every request answered");
    assert!(answered >= 200, "only {answered} requests");
    let calls = commandstats_calls(redis.port) - before;
    let log = redis_cli(redis.port, &["--json", "slowlog", "get", "-1"]);
    let entries: Vec<Value> = serde_json::from_str(&log).expect("slowlog JSON");
    // Commands a script ran are logged too, from the scripting client (`?:0`): the
    // script's own entry is the one judged.
    let per_request: Vec<&Value> = entries
        .iter()
        .filter(|e| e[4] != "?:0" && !is_background(&e[3]))
        .collect();
    assert!(
        per_request.is_empty(),
        "Redis calls during the load: {per_request:?}"
    );
    // The log saw what ran meanwhile (the members' lease renewals at least).
    assert!(!entries.is_empty() && calls > 0, "Redis logged nothing");
    let handed: f64 = proxies.iter().map(handed_over).sum();
    assert!(handed > 0.0, "requests were handed over");
    println!(
        "{answered} requests ({handed} handed over): {calls} Redis commands, all lease renewals"
    );
}

/// Is a slowlog entry's command line one of the fleet's background calls (a lease
/// renewal, the health check's PING, TIME or INFO, the test's own CONFIG/SLOWLOG)?
fn is_background(args: &Value) -> bool {
    let words: Vec<String> = args
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a.as_str().map(str::to_ascii_lowercase))
        .collect();
    match words.first().map(String::as_str) {
        Some("ping" | "time" | "info" | "config" | "slowlog" | "hello" | "client") => true,
        // A renewal is the one script called with the epoch counter.
        Some("evalsha" | "eval") => words.iter().any(|w| w == "{robotsgate}:epoch"),
        _ => false,
    }
}

/// Every command Redis has run, by its own counters.
fn commandstats_calls(port: u16) -> u64 {
    redis_cli(port, &["info", "commandstats"])
        .lines()
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

/// Which member owns an origin is visible in `/origins/...`: exactly one says `here`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_one_member_owns_an_origin() {
    let redis = Redis::start();
    let origin = TestOrigin::robots("User-agent: *\n").await;
    let proxies = instances(3, &fleet_conf(&redis));
    backend_up(&proxies).await;
    for proxy in proxies.iter().rev() {
        assert_eq!(curl(proxy, &origin.url("/x"), &[]).0, 200);
    }
    assert_eq!(
        origin.count("/x"),
        3,
        "each request reached the origin once"
    );
    assert_eq!(
        owner_index(&proxies, &origin),
        Some(2),
        "the first to meet it"
    );
    let owners = proxies
        .iter()
        .filter(|p| crate::fleet_fixture::owner_seen_by(p, &origin).as_deref() == Some("here"))
        .count();
    assert_eq!(owners, 1);
}

/// Intercepted HTTPS, in HTTP/1.1 and in HTTP/2 inside the tunnel: a request through a
/// member that does not own the origin is handed over with its tunnel's origin, and the
/// owner connects to the origin over TLS itself; a disallowed page is refused the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_intercepted_https_request_is_handed_over_in_both_protocols() {
    let fleet = HttpsFleet::start(&Conf::new()).await;
    let origin = fleet.origin("User-agent: *\nDisallow: /private\n").await;
    let tunnel = |i: usize, path: &str, protocol: &str| {
        fleet.curl(i, &origin.url(path), "operator-ca.pem", &[protocol])
    };
    assert_eq!(tunnel(0, "/claim", "--http1.1").0, 200);
    for (i, protocol) in ["--http1.1", "--http2"].into_iter().enumerate() {
        let page = format!("/page{i}");
        let (status, _, body) = tunnel(1, &page, protocol);
        assert_eq!(status, 200, "{protocol}: {body}");
        assert_eq!(origin.count(&page), 1, "{protocol}");
        assert_eq!(tunnel(1, "/private/x", protocol).0, 403);
    }
    assert_eq!(origin.count("/private/x"), 0);
    assert_eq!(handed_over_reaching(fleet.member(1), 4.0).await, 4.0);
}

/// A blind tunnel through a member that does not own its origin is handed to the owner,
/// which paces its connection start: the origin's own certificate reaches the client
/// (nothing intercepted), and connection starts keep the Crawl-delay whichever member
/// the tunnels arrive at; an origin that disallows `/` is refused the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blind_tunnel_is_handed_to_its_owner_and_paced_there() {
    let fleet = HttpsFleet::start(&Conf::new().set("tls.blind_tunnel", ["localhost"])).await;
    let origin = fleet
        .origin("User-agent: *\nDisallow: /private\nCrawl-delay: 1\n")
        .await;
    let blocked = fleet.origin("User-agent: *\nDisallow: /\n").await;
    let blind = |i: usize, url: &str| fleet.curl(i, url, "origin-ca.pem", &[]);
    let (status, _, body) = blind(0, &origin.url("/first"));
    assert_eq!((status, body.as_str()), (200, "page /first\n"));
    for i in 0..3 {
        let (status, _, body) = blind(1, &origin.url(&format!("/handed{i}")));
        assert_eq!(status, 200, "{body}\n{}", fleet.member(1).log());
        assert_eq!(body, format!("page /handed{i}\n"));
    }
    // robots.txt once, then one connection per tunnel, each start a second apart.
    let accepted = origin.accepted();
    assert_eq!(accepted.len(), 5, "one connection each");
    for pair in accepted[1..].windows(2) {
        let gap = pair[1].duration_since(pair[0]);
        assert!(gap >= Duration::from_millis(1000), "{gap:?}");
    }
    // Refused by the owner (the first member), through either member.
    let ca = fleet.setup.dir.path().join("origin-ca.pem");
    for i in [0, 1] {
        let refused = curl(
            fleet.member(i),
            &blocked.url("/anything"),
            &["--cacert", ca.to_str().expect("path")],
        );
        assert_eq!(refused.0, 403, "{}", refused.1);
        assert!(
            refused.1.contains("X-Robots-Decision: disallowed"),
            "{}",
            refused.1
        );
    }
    // A client's own CONNECT, refused: the owner's refusal arrives whole through the
    // member that relays it (its body as long as its `Content-Length` says, the same as
    // the owner's own answer), not its head alone.
    let authority = blocked.url("").replace("https://", "").replace('/', "");
    let connect = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n");
    let direct = raw_exchange(fleet.member(0).addr, connect.as_bytes()).await;
    let relayed = raw_exchange(fleet.member(1).addr, connect.as_bytes()).await;
    assert!(relayed.starts_with("HTTP/1.1 403"), "{relayed}");
    assert_eq!(whole_body(&relayed), whole_body(&direct), "{relayed}");
    assert!(!whole_body(&direct).is_empty(), "{direct}");
    assert_eq!(blocked.count("/anything"), 0);
    let tunnels = |i: usize| {
        fleet.member(i).sum(
            "robotsgate_connect_tunnels_total",
            "outcome=\"established\"",
        )
    };
    assert_eq!(tunnels(0), 4.0, "the owner established every tunnel");
    assert_eq!(
        fleet.member(1).counter("robotsgate_tls_leaf_mints_total"),
        0.0
    );
}

/// Blind tunnels a member handed to their owner before it was stopped (SIGTERM,
/// `graceful_shutdown_timeout_seconds: 3`), three waiting there for their connection
/// starts under Crawl-delay 2: the member's drain counts each until its client has an
/// answer, and the stop's bound ends the wait for the owner's, so each CONNECT is
/// answered, `200` or `503`, none closed unanswered; the origin is connected to no more
/// often than answered `200`, the Crawl-delay apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blind_tunnels_a_stopping_member_handed_over_are_answered() {
    let conf = Conf::new()
        .set("tls.blind_tunnel", ["localhost"])
        .server("graceful_shutdown_timeout_seconds", 3);
    let fleet = std::sync::Arc::new(HttpsFleet::start(&conf).await);
    let origin = fleet.origin("User-agent: *\nCrawl-delay: 2\n").await;
    assert_eq!(
        fleet.curl(0, &origin.url("/first"), "origin-ca.pem", &[]).0,
        200
    );
    let ca = fleet.setup.dir.path().join("origin-ca.pem");
    let tunnels: Vec<_> = (0..3)
        .map(|i| {
            let (fleet, url, ca) = (fleet.clone(), origin.url(&format!("/t{i}")), ca.clone());
            tokio::task::spawn_blocking(move || {
                curl(
                    fleet.member(1),
                    &url,
                    &["--cacert", ca.to_str().expect("path")],
                )
            })
        })
        .collect();
    let queued = eventually(Duration::from_secs(5), || {
        fleet.member(0).metric("robotsgate_pacing_queued_requests") == Some(3.0)
    });
    assert!(queued.await, "never queued:\n{}", fleet.member(1).log());
    signal(fleet.member(1).pid(), "-TERM");
    let mut established = 0;
    for tunnel in tunnels {
        let (status, head, _) = tunnel.await.expect("task");
        assert!(
            status == 200 || (status == 503 && head.contains("Retry-After")),
            "{status} {head}\n{}",
            fleet.member(1).log()
        );
        established += usize::from(status == 200);
    }
    assert!(established < 3, "the bound was never reached");
    let accepted = origin.accepted();
    assert!(
        accepted.len() <= 2 + established,
        "robots.txt, /first, the tunnels"
    );
    for pair in accepted[1..].windows(2) {
        let gap = pair[1].duration_since(pair[0]);
        assert!(gap >= Duration::from_millis(2000), "{gap:?}");
    }
}

/// Each request on one peer connection is judged by its own context, however many came
/// before it with another (the owner reads a connection's context once while it stays
/// the same): a client address under a report-mode rule has its disallowed page fetched,
/// any other has it refused, alternating on one kept connection (the owner lets its
/// members' word choose report mode: `enforce.report_handed_over`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_request_on_a_peer_connection_has_its_own_context() {
    let redis = Redis::start();
    let origin = paced_origin("0").await;
    let rule =
        serde_json::json!([{"client": "10.9.9.0/24", "tokens": ["ExampleBot"], "mode": "report"}]);
    let conf = fleet_conf(&redis)
        .set("agent.rules", rule)
        .set("enforce.report_handed_over", true);
    let proxies = instances(1, &conf);
    backend_up(&proxies).await;
    let proxy = &proxies[0];
    let peer = proxy.peer.expect("a fleet member");
    let reported = peer_context(r#"{"c":"10.9.9.9"}"#);
    let enforced = peer_context(r#"{"c":"127.0.0.1"}"#);
    let sent = [
        ("/private/a", &reported, 200),
        ("/private/b", &enforced, 403),
        ("/private/c", &reported, 200),
        ("/private/d", &reported, 200),
        ("/private/e", &enforced, 403),
        ("/private/f", &enforced, 403),
        ("/private/g", &reported, 200),
    ];
    let mut curl = Command::new("curl");
    curl.args(["-s", "-o", "/dev/null", "--resolve"])
        .arg(format!("robotsgate-fleet:{}:127.0.0.1", peer.port()));
    for (i, (path, context, _)) in sent.iter().enumerate() {
        if i > 0 {
            curl.arg("--next").args(["-s", "-o", "/dev/null"]);
        }
        let target = origin.url(path);
        let host = target.split('/').nth(2).expect("authority").to_string();
        curl.arg("--cacert")
            .arg(certs().file("ca.pem"))
            .arg("--cert")
            .arg(proxy.file("member.pem"))
            .arg("--key")
            .arg(proxy.file("member.key"))
            .args(["--request-target", &target])
            .args(["-H", &format!("Host: {host}")])
            .args(["-H", &format!("robotsgate-peer: {context}")])
            .args(["-w", "%{http_code} %{num_connects}\n"])
            .arg(format!("https://robotsgate-fleet:{}/", peer.port()));
    }
    let out = curl.output().expect("curl");
    let lines = String::from_utf8_lossy(&out.stdout).to_string();
    let got: Vec<(u16, u32)> = lines
        .lines()
        .map(|l| {
            let (status, connects) = l.split_once(' ').expect("status and connects");
            (
                status.parse().expect("status"),
                connects.parse().expect("connects"),
            )
        })
        .collect();
    assert_eq!(got.len(), sent.len(), "{lines}");
    // One connection for all of them: each after the first reused it.
    assert!(got[1..].iter().all(|(_, c)| *c == 0), "{lines}");
    for ((path, _, want), (status, _)) in sent.iter().zip(&got) {
        assert_eq!(status, want, "{path}: {lines}");
        let received = origin.count(path);
        assert_eq!(received, usize::from(*want == 200), "{path} at the origin");
    }
}

/// One client cannot take every connection its member has at an owner
/// (`fleet.peer_max_connections_per_member`, here 8): eight idle blind tunnels from one
/// address through the member that does not own the origin get four `200`s (half of
/// what others leave) and four `503`s; a second client (another address) is served
/// through the same member meanwhile, the page reaching the origin. Tunnels that carry
/// nothing end after `limits.tunnel_idle_seconds` (3 s here), logged, and the first
/// client is served again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_holding_tunnels_leaves_other_clients_room_and_idle_tunnels_end() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let extra = Conf::new()
        .set("tls.blind_tunnel", ["localhost"])
        .set("fleet.peer_max_connections_per_member", 8)
        .set("limits.tunnel_idle_seconds", 3);
    let fleet = HttpsFleet::start(&extra).await;
    let origin = fleet.origin("User-agent: *\nAllow: /\n").await;
    let (status, _, _) = fleet.curl(0, &origin.url("/first"), "origin-ca.pem", &[]);
    assert_eq!(status, 200, "the first member owns the origin");
    let authority = origin.url("").replace("https://", "").replace('/', "");
    let connect = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n");
    let mut held = Vec::new();
    for _ in 0..8 {
        let mut stream = tokio::net::TcpStream::connect(fleet.member(1).addr)
            .await
            .expect("connect");
        stream.write_all(connect.as_bytes()).await.expect("write");
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            let read = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut byte));
            match read.await {
                Ok(Ok(1)) => head.push(byte[0]),
                other => panic!("no answer head: {other:?} {head:?}"),
            }
        }
        let head = String::from_utf8_lossy(&head).into_owned();
        let status = head.split(' ').nth(1).and_then(|s| s.parse::<u16>().ok());
        held.push((status.unwrap_or(0), stream));
    }
    let statuses: Vec<u16> = held.iter().map(|(status, _)| *status).collect();
    assert_eq!(
        (
            statuses.iter().filter(|&&s| s == 200).count(),
            statuses.iter().filter(|&&s| s == 503).count()
        ),
        (4, 4),
        "{statuses:?}\n{}",
        fleet.member(1).log()
    );
    let other = ["--interface", "127.0.0.2"];
    let (status, _, body) = fleet.curl(1, &origin.url("/another-client"), "origin-ca.pem", &other);
    assert_eq!((status, body.as_str()), (200, "page /another-client\n"));
    assert_eq!(origin.count("/another-client"), 1);
    for (_, mut stream) in held.into_iter().filter(|(status, _)| *status == 200) {
        let mut rest = Vec::new();
        let ended = tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut rest));
        assert!(ended.await.is_ok(), "an idle tunnel stayed open");
    }
    let logs = || format!("{}{}", fleet.member(0).log(), fleet.member(1).log());
    let logged = eventually(Duration::from_secs(5), || {
        logs().contains("(limits.tunnel_idle_seconds)")
    });
    assert!(logged.await, "{}", logs());
    let (status, _, _) = fleet.curl(1, &origin.url("/again"), "origin-ca.pem", &[]);
    assert_eq!(status, 200, "the first client served again");
}
