//! A peer is a member (`downstream::peer_door`, `fleet::peers`): a certificate from the
//! fleet CA is used only by the live member it names, from an address members advertise;
//! the member a request comes from is its connection's, never what its context says; the
//! peer port has limits of its own. Real members, a real `redis-server`, curl and raw
//! sockets as the strangers.

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use tokio::io::AsyncReadExt;

use crate::common::{admin, curl, eventually, Conf, Proxy, TestOrigin};
use crate::fleet_fixture::{
    as_peer, backend_up, certs, fleet_conf, instances, member_id, owner_index, owner_seen_by,
    paced_origin, Credential,
};
use crate::redis_servers::Redis;

/// `proxy`'s refusals at the door for `reason`.
fn refused(proxy: &Proxy, reason: &str) -> f64 {
    proxy.sum(
        "robotsgate_downstream_refusals_total",
        &format!("reason=\"{reason}\""),
    )
}

/// A certificate from the fleet CA that names no live member, and the certificate of a
/// member that left, are refused before any exchange (nothing reaches the origin); a
/// live member's certificate is served — a stolen member key works only while that
/// member is in the fleet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_live_members_certificate_opens_the_peer_channel() {
    let redis = Redis::start();
    let origin = paced_origin("0").await;
    let mut proxies = instances(2, &fleet_conf(&redis));
    backend_up(&proxies).await;
    let context = r#"{"c":"127.0.0.1"}"#;
    let stranger = (certs().file("member.pem"), certs().file("member.key"));
    let target = origin.url("/stranger");
    assert_eq!(
        as_peer(&proxies[0], &stranger.0, &stranger.1, &target, context),
        0
    );
    assert_eq!(refused(&proxies[0], "peer_not_member"), 1.0);

    let leaver = Credential::of(&proxies[1]);
    let target = origin.url("/while-member");
    assert_eq!(
        as_peer(&proxies[0], &leaver.cert, &leaver.key, &target, context),
        200
    );
    proxies[1].stop();
    let gone = eventually(Duration::from_secs(5), || {
        crate::fleet_fixture::members(&proxies[0]) == 1
    })
    .await;
    assert!(gone, "the member never left:\n{}", proxies[0].log());
    let target = origin.url("/after-leaving");
    assert_eq!(
        as_peer(&proxies[0], &leaver.cert, &leaver.key, &target, context),
        0
    );
    assert_eq!(refused(&proxies[0], "peer_not_member"), 2.0);
    assert_eq!(origin.count("/stranger"), 0);
    assert_eq!(origin.count("/while-member"), 1);
    assert_eq!(origin.count("/after-leaving"), 0);
}

/// The member a request comes from is its connection's certificate's: a member's
/// context naming another member (`"m"`) moves nothing there. Its traffic, all from
/// member 2's connection though it names member 1, makes the origin follow member 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_context_cannot_name_another_member() {
    let redis = Redis::start();
    let origin = paced_origin("0").await;
    let conf = fleet_conf(&redis).set("fleet.follow_traffic_seconds", 1.0);
    let proxies = instances(3, &conf);
    backend_up(&proxies).await;
    assert_eq!(curl(&proxies[0], &origin.url("/p/first"), &[]).0, 200);
    assert_eq!(owner_index(&proxies, &origin), Some(0));
    let named = member_id(&proxies[1]);
    let context = format!(r#"{{"c":"127.0.0.1","m":"{named}"}}"#);
    let sender = Credential::of(&proxies[2]);
    let mut n = 0;
    let moved = eventually(Duration::from_secs(15), || {
        for _ in 0..5 {
            n += 1;
            let target = origin.url(&format!("/p/{n}"));
            let status = as_peer(&proxies[0], &sender.cert, &sender.key, &target, &context);
            assert!(matches!(status, 200 | 503), "{status}");
        }
        owner_index(&proxies, &origin) != Some(0)
    })
    .await;
    assert!(moved, "never followed:\n{}", proxies[0].log());
    // The former owner hands it to the member its traffic came from: the certificate's.
    let went_to = owner_seen_by(&proxies[0], &origin);
    assert_eq!(
        went_to,
        Some(member_id(&proxies[2])),
        "not the certificate's member"
    );
    assert_ne!(owner_index(&proxies, &origin), Some(1));
}

/// The peer port's limits: connections beyond `fleet.peer_max_connections_per_client`
/// from one address are closed at once and counted; one from an address no member
/// advertises (127.0.0.2) never reaches a handshake; silent ones are closed at the
/// handshake timeout, and the members' own hand-overs go on once they are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_peer_port_has_limits_of_its_own() {
    let redis = Redis::start();
    let origin = TestOrigin::robots("User-agent: *\n").await;
    let conf = fleet_conf(&redis)
        .set("fleet.peer_max_connections_per_client", 4)
        .set("fleet.peer_max_connections", 8)
        .set("limits.first_byte_timeout_seconds", 1.0);
    let proxies = instances(2, &conf);
    backend_up(&proxies).await;
    assert_eq!(curl(&proxies[0], &origin.url("/first"), &[]).0, 200);
    let peer = proxies[0].peer.expect("peer");

    let mut silent = Vec::new();
    for _ in 0..10 {
        silent.push(tokio::net::TcpStream::connect(peer).await.expect("connect"));
    }
    let limited = eventually(Duration::from_secs(3), || {
        refused(&proxies[0], "peer_client_connection_limit") == 6.0
    })
    .await;
    assert!(limited, "{}", proxies[0].log());
    assert_eq!(proxies[0].metric("robotsgate_peer_connections"), Some(4.0));
    // The six refused are closed by robotsgate (end of stream, no handshake).
    let mut closed = 0;
    for stream in &mut silent {
        let mut buf = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_millis(200), stream.read(&mut buf)).await;
        if matches!(read, Ok(Ok(0)) | Ok(Err(_))) {
            closed += 1;
        }
    }
    assert_eq!(closed, 6);

    let stranger = stranger_connection(peer).await;
    let away = eventually(Duration::from_secs(5), || {
        refused(&proxies[0], "peer_address") == 1.0
    })
    .await;
    assert!(away, "{}", proxies[0].log());
    drop(stranger);

    // Silent ones go at the handshake timeout (at least 5 s), and a member's hand-over
    // is served again.
    let freed = eventually(Duration::from_secs(10), || {
        proxies[0].metric("robotsgate_peer_connections") == Some(0.0)
    })
    .await;
    assert!(freed);
    assert_eq!(curl(&proxies[1], &origin.url("/handed"), &[]).0, 200);
    assert_eq!(origin.count("/handed"), 1);
}

/// A TCP connection to `peer` from 127.0.0.2, an address no member advertises.
async fn stranger_connection(peer: SocketAddr) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket
        .bind("127.0.0.2:0".parse().expect("addr"))
        .expect("bind 127.0.0.2");
    socket.connect(peer).await.expect("connect")
}

/// A member whose `fleet.peer_address` is another live member's, or an address where
/// no peer channel answers (an origin), is refused at join: it never registers, says
/// why in `/readyz`, `/fleet` and its log, and counts it
/// (`robotsgate_fleet_backend_unavailable{cause="peer_address"}`); the fleet goes on
/// with the members that are right.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_peer_address_is_refused_at_join() {
    let redis = Redis::start();
    let origin = TestOrigin::robots("User-agent: *\n").await;
    let conf = fleet_conf(&redis);
    let first = instances(1, &conf);
    backend_up(&first).await;
    let taken = first[0].peer.expect("peer").to_string();
    let elsewhere = origin
        .url("")
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    for (address, why) in [(taken, "answers there"), (elsewhere, "answered at")] {
        let wrong = Proxy::start_for_loopback(&conf.clone().set("fleet.peer_address", &address));
        let said = eventually(Duration::from_secs(10), || {
            let (status, body) = admin(&wrong, "GET", "/readyz");
            status == 503 && body.contains("fleet.peer_address") && body.contains(why)
        })
        .await;
        assert!(
            said,
            "{address}: {:?}\n{}",
            admin(&wrong, "GET", "/readyz"),
            wrong.log()
        );
        let unavailable = wrong.sum(
            "robotsgate_fleet_backend_unavailable",
            "cause=\"peer_address\"",
        );
        assert_eq!(unavailable, 1.0, "{address}");
        let (_, fleet) = admin(&wrong, "GET", "/fleet");
        let fleet: Value = serde_json::from_str(&fleet).expect("/fleet JSON");
        assert!(
            fleet["unavailable"]
                .as_str()
                .is_some_and(|u| u.contains(why)),
            "{fleet}"
        );
        // Log lines leave the process in batches (`telemetry::sink`, every 20 ms).
        let logged = eventually(Duration::from_secs(5), || {
            wrong.log().contains("not joining")
        });
        assert!(logged.await, "{}", wrong.log());
        assert_eq!(
            crate::fleet_fixture::members(&first[0]),
            1,
            "{address} joined"
        );
    }
    assert_eq!(curl(&first[0], &origin.url("/served"), &[]).0, 200);
}

/// The peer channel's cipher: AES-128-GCM whatever order a member's client offers the
/// TLS 1.3 suites in (OpenSSL's `s_client`, an independent implementation, asked to
/// prefer AES-256-GCM), and AES-256-GCM still for a client offering nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_peer_channel_chooses_aes_128_gcm() {
    let redis = Redis::start();
    let proxies = instances(1, &fleet_conf(&redis));
    backend_up(&proxies).await;
    let member = Credential::of(&proxies[0]);
    let peer = proxies[0].peer.expect("a fleet member");
    let negotiated = |suites: &str| {
        let out = Command::new("openssl")
            .args(["s_client", "-connect", &peer.to_string()])
            .args(["-servername", "robotsgate-fleet", "-alpn", "http/1.1"])
            .arg("-CAfile")
            .arg(certs().file("ca.pem"))
            .arg("-cert")
            .arg(&member.cert)
            .arg("-key")
            .arg(&member.key)
            .args(["-ciphersuites", suites])
            .stdin(std::process::Stdio::null())
            .output()
            .expect("openssl s_client");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.lines()
            .find_map(|l| {
                l.split_once("Cipher is ")
                    .map(|(_, c)| c.trim().to_string())
            })
            .unwrap_or_else(|| panic!("no cipher negotiated:\n{text}"))
    };
    assert_eq!(
        negotiated("TLS_AES_256_GCM_SHA384:TLS_AES_128_GCM_SHA256"),
        "TLS_AES_128_GCM_SHA256"
    );
    assert_eq!(
        negotiated("TLS_AES_256_GCM_SHA384"),
        "TLS_AES_256_GCM_SHA384"
    );
}

/// A member's word cannot switch enforcement off: an owner whose
/// `enforce.report_clients` names 10.9.9.0/24, sent with another member's own key a
/// context naming client 10.9.9.9 and requests for a disallowed path, refuses each one
/// and nothing reaches the origin; only `enforce.report_handed_over: true` lets that
/// word choose report mode (the same requests forwarded).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_members_word_cannot_switch_enforcement_off() {
    let origin = paced_origin("0").await;
    let report = Conf::new().set("enforce.report_clients", vec!["10.9.9.0/24"]);
    handed_naming_10_9_9_9(&origin, &report, "/private/").await;
}

/// Nor can it switch the usage check off: an owner whose agent rule gives clients of
/// 10.9.9.0/24 the purpose `train-ai` with `usage_mode: off`, and whose origin says
/// `Content-Usage: / train-ai=n`, refuses each request another member's key hands it
/// naming client 10.9.9.9 (`usage.mode`, enforce, holds), nothing at the origin; with
/// `enforce.report_handed_over: true` the rule's mode applies (forwarded).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_members_word_cannot_switch_the_usage_check_off() {
    let robots = "User-agent: *\nAllow: /\nContent-Usage: / train-ai=n\n";
    let origin = TestOrigin::robots_and(robots, Vec::new()).await;
    let rule = serde_json::json!([{"client": "10.9.9.0/24", "tokens": ["NetBot"], "purposes": ["train-ai"], "usage_mode": "off"}]);
    handed_naming_10_9_9_9(&origin, &Conf::new().set("agent.rules", rule), "/data/").await;
}

/// Three requests for `prefix`N, handed to the owner of `origin` (members with `extra`)
/// by another member's key naming client 10.9.9.9: without `enforce.report_handed_over`
/// each is refused 403 and none reaches the origin; with it each is forwarded.
async fn handed_naming_10_9_9_9(origin: &TestOrigin, extra: &Conf, prefix: &str) {
    for (reported, expected) in [(false, 403), (true, 200)] {
        let redis = Redis::start();
        let conf = fleet_conf(&redis)
            .with(extra)
            .set("enforce.report_handed_over", reported);
        let proxies = instances(2, &conf);
        backend_up(&proxies).await;
        let first = format!("/first-{reported}");
        assert_eq!(curl(&proxies[0], &origin.url(&first), &[]).0, 200);
        assert_eq!(owner_index(&proxies, origin), Some(0));
        let sender = Credential::of(&proxies[1]);
        let context = r#"{"c":"10.9.9.9"}"#;
        let path = |n: usize| format!("{prefix}{reported}/{n}");
        for n in 0..3 {
            let target = origin.url(&path(n));
            let status = as_peer(&proxies[0], &sender.cert, &sender.key, &target, context);
            assert_eq!(status, expected, "report_handed_over: {reported}");
        }
        let reached: usize = (0..3).map(|n| origin.count(&path(n))).sum();
        assert_eq!(reached, if reported { 3 } else { 0 });
    }
}

/// A certificate from the fleet CA whose subject has two organizations, `head` and
/// `tail` (OpenSSL's `req` and `x509`, not robotsgate's `fleet-cert`, which writes one).
fn two_organizations(head: &str, tail: &str) -> Credential {
    let kept = tempfile::tempdir().expect("tempdir");
    let dir = kept.path();
    let (cert, key, csr) = (
        dir.join("two.pem"),
        dir.join("two.key"),
        dir.join("two.csr"),
    );
    let subject = format!("/CN=robotsgate-fleet/O={head}/O={tail}");
    let made = Command::new("openssl")
        .args([
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ])
        .args(["-nodes", "-subj", &subject, "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&csr)
        .status()
        .expect("openssl req");
    assert!(made.success());
    let extensions = dir.join("ext.cnf");
    std::fs::write(
        &extensions,
        "subjectAltName=DNS:robotsgate-fleet\nextendedKeyUsage=clientAuth,serverAuth\n",
    )
    .expect("ext.cnf");
    let signed = Command::new("openssl")
        .args(["x509", "-req", "-days", "2", "-in"])
        .arg(&csr)
        .arg("-CA")
        .arg(certs().file("ca.pem"))
        .arg("-CAkey")
        .arg(certs().file("ca.key"))
        .args(["-CAcreateserial", "-extfile"])
        .arg(&extensions)
        .arg("-out")
        .arg(&cert)
        .status()
        .expect("openssl x509");
    assert!(signed.success());
    Credential {
        _dir: kept,
        cert,
        key,
    }
}

/// A certificate with two organizations names no member: the peer channel refuses it
/// at the handshake, though Pingora's digest would read the two joined — here, a live
/// member's name split in two — and nothing reaches the origin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_naming_two_organizations_is_refused() {
    let redis = Redis::start();
    let origin = paced_origin("0").await;
    let proxies = instances(2, &fleet_conf(&redis));
    backend_up(&proxies).await;
    let id = member_id(&proxies[1]);
    let name = robotsgate::fleet::channel::member_of(&id);
    let (head, tail) = name.split_at(name.len() / 2);
    let two = two_organizations(head, tail);
    let target = origin.url("/two");
    let status = as_peer(
        &proxies[0],
        &two.cert,
        &two.key,
        &target,
        r#"{"c":"127.0.0.1"}"#,
    );
    assert_eq!(status, 0, "a certificate with two organizations was served");
    assert_eq!(origin.count("/two"), 0);
}

/// A member's word names only what `fleet.peer_scope` lets it: with its own key, member
/// B hands the owner a request naming a user or a client address outside its scope,
/// and it is refused (`403`, `peer_scope`) with nothing at the origin; inside the scope
/// it is served. Naming no user, where the owner requires credentials, is out of scope
/// too, unless the request says it came on a redirected connection (which carries
/// none). A real relay of a user outside B's scope is refused the same way, and a
/// member no entry names may name no client at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_names_only_the_users_and_clients_its_scope_allows() {
    let origin = paced_origin("0").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let users = dir.path().join("users");
    let lines = [
        crate::common::passwd_line("alice", "alice-secret", &["AliceBot"]),
        crate::common::passwd_line("bob", "bob-secret", &["BobBot"]),
    ];
    std::fs::write(&users, lines.join("\n")).expect("write users");
    let scope = |members: &str| serde_json::json!([{"members": [members], "users": ["alice"], "clients": ["127.0.0.0/8"]}]);
    for members in ["*", "nobody"] {
        let redis = Redis::start();
        let conf = fleet_conf(&redis)
            .set("access.credentials_file", users.display().to_string())
            .set("fleet.peer_scope", scope(members));
        let proxies = instances(2, &conf);
        backend_up(&proxies).await;
        let alice = ["--proxy-user", "alice:alice-secret"];
        assert_eq!(curl(&proxies[0], &origin.url("/first"), &alice).0, 200);
        assert_eq!(owner_index(&proxies, &origin), Some(0));
        let sender = Credential::of(&proxies[1]);
        let ask = |path: &str, context: &str| {
            let target = origin.url(&format!("/{members}{path}"));
            as_peer(&proxies[0], &sender.cert, &sender.key, &target, context)
        };
        let named = members == "*";
        // Naming no user where this owner requires one is out of scope, but for a
        // redirected connection (which carries no credentials).
        let port = origin
            .url("")
            .rsplit(':')
            .next()
            .unwrap_or_default()
            .replace('/', "");
        let redirected = format!(r#"{{"d":"127.0.0.1:{port}"}}"#);
        let cases = [
            ("/in-scope", r#"{"c":"127.0.0.1","u":"alice"}"#, named),
            ("/anonymous", r#"{}"#, false),
            ("/redirected", redirected.as_str(), true),
            ("/other-user", r#"{"c":"127.0.0.1","u":"bob"}"#, false),
            ("/other-client", r#"{"c":"10.9.9.9","u":"alice"}"#, false),
        ];
        for (path, context, served) in cases {
            let status = ask(path, context);
            let reached = origin.count(&format!("/{members}{path}"));
            let expected = if served { (200, 1) } else { (403, 0) };
            assert_eq!((status, reached), expected, "{members} {path}");
        }
        let refusals = if named { 3.0 } else { 4.0 };
        assert_eq!(refused(&proxies[0], "peer_scope"), refusals);
        // The relay's own path: B hands over what its clients send, within its scope.
        let bob = ["--proxy-user", "bob:bob-secret"];
        let relayed = |path: &str, user: &[&str]| {
            let url = origin.url(&format!("/{members}/relayed{path}"));
            (
                curl(&proxies[1], &url, user).0,
                origin.count(&url_path(&url)),
            )
        };
        let expected = if named { (200, 1) } else { (403, 0) };
        assert_eq!(
            relayed("/alice", &alice),
            expected,
            "{members}: alice relayed"
        );
        assert_eq!(relayed("/bob", &bob), (403, 0), "{members}: bob relayed");
    }
}

/// The path of `url`.
fn url_path(url: &str) -> String {
    let rest = url.split("://").nth(1).unwrap_or(url);
    rest.find('/')
        .map_or("/".to_string(), |i| rest[i..].to_string())
}

/// One member's handed-over requests may make the owner take on at most
/// `fleet.peer_max_new_origins_per_second` new hosts a second (here 1, held at most
/// 1): a stolen key asking for eight new origins at once gets the first and whatever
/// the bucket refilled meanwhile, the rest `503` with nothing at their origins (no
/// claim, no robots.txt fetch), counted; the owner's own clients are not bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_makes_an_owner_claim_only_so_many_new_origins_a_second() {
    new_origins_bounded("origin").await;
}

/// As above with `pacing.key: address`: the eight origins share one key (127.0.0.1),
/// and new hosts are counted, not new keys (before, every origin after the first was
/// served: its key was held).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_hosts_are_bounded_when_they_share_an_address_key() {
    new_origins_bounded("address").await;
}

/// Eight new origins handed over at once under `pacing.key: key`, a bound of 1 a second.
async fn new_origins_bounded(key: &str) {
    let redis = Redis::start();
    let conf = fleet_conf(&redis)
        .set("fleet.peer_max_new_origins_per_second", 1)
        .set("pacing.key", key);
    let proxies = instances(2, &conf);
    backend_up(&proxies).await;
    let mut origins = Vec::new();
    for _ in 0..8 {
        origins.push(paced_origin("0").await);
    }
    let stolen = Credential::of(&proxies[1]);
    let started = std::time::Instant::now();
    let statuses: Vec<u16> = origins
        .iter()
        .map(|o| {
            let target = o.url("/new");
            as_peer(&proxies[0], &stolen.cert, &stolen.key, &target, "{}")
        })
        .collect();
    let elapsed = started.elapsed().as_secs_f64();
    let served = statuses.iter().filter(|&&s| s == 200).count();
    let refused = statuses.iter().filter(|&&s| s == 503).count();
    assert_eq!(served + refused, 8, "{statuses:?}");
    assert_eq!(statuses[0], 200, "the first new origin is within the bound");
    assert!(
        served as f64 <= 1.0 + elapsed.ceil(),
        "{served} new origins in {elapsed:.2} s: {statuses:?}"
    );
    for (origin, status) in origins.iter().zip(&statuses) {
        let reached = origin.count("/new") + origin.count("/robots.txt");
        match status {
            200 => assert_eq!(origin.count("/new"), 1),
            _ => assert_eq!(reached, 0, "a refused new origin was fetched"),
        }
    }
    let counted = proxies[0].counter("robotsgate_fleet_peer_new_origins_refused_total");
    assert_eq!(counted, refused as f64);
    // The owner's own clients are not bounded: each refused origin, asked for here.
    for (origin, _) in origins.iter().zip(&statuses).filter(|(_, &s)| s == 503) {
        assert_eq!(curl(&proxies[0], &origin.url("/own"), &[]).0, 200);
    }
}

/// A redirected connection's destination, as another member's key names it, is
/// checked by the egress rules before its address can be claimed as a pacing key
/// (`pacing.key: address`): named as the owner's own proxy listener, the request is
/// refused `403` and no claim of that address is written to Redis (before, the claim
/// came first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peers_destination_is_checked_before_its_address_is_claimed() {
    let redis = Redis::start();
    let conf = fleet_conf(&redis).set("pacing.key", "address");
    let proxies = instances(2, &conf);
    backend_up(&proxies).await;
    let stolen = Credential::of(&proxies[1]);
    let own = proxies[0].addr;
    let context = format!(r#"{{"d":"{own}"}}"#);
    let target = format!("http://localhost:{}/loop", own.port());
    let status = as_peer(&proxies[0], &stolen.cert, &stolen.key, &target, &context);
    assert_eq!(status, 403, "{}", proxies[0].log());
    let claims = crate::redis_servers::redis_cli(redis.port, &["KEYS", "{robotsgate}:own:*"]);
    assert!(claims.trim().is_empty(), "claimed: {claims}");
}

/// A member holds at most `fleet.peer_max_connections_per_member` peer connections at
/// an owner (here 2), whatever address they come from: with a member's key, two
/// connections held open (OpenSSL's `s_client`) leave a third closed after its
/// handshake, counted, with nothing at the origin; once one closes, the next is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_holds_only_so_many_connections_at_an_owner() {
    use std::io::BufRead;
    let redis = Redis::start();
    let conf = fleet_conf(&redis).set("fleet.peer_max_connections_per_member", 2);
    let proxies = instances(2, &conf);
    backend_up(&proxies).await;
    let origin = paced_origin("0").await;
    let stolen = Credential::of(&proxies[1]);
    let peer = proxies[0].peer.expect("a fleet member");
    let hold = || {
        let mut child = Command::new("openssl")
            .args(["s_client", "-connect", &peer.to_string()])
            .args(["-servername", "robotsgate-fleet", "-CAfile"])
            .arg(certs().file("ca.pem"))
            .arg("-cert")
            .arg(&stolen.cert)
            .arg("-key")
            .arg(&stolen.key)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("openssl s_client");
        // Its output read to the end on a thread of its own (a closed pipe would end
        // it), the handshake's verdict passed back.
        let out = child.stdout.take().expect("stdout");
        let (tell, verdict) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                if line.contains("Verify return code: 0") {
                    let _ = tell.send(());
                }
            }
        });
        let verified = verdict.recv_timeout(Duration::from_secs(10)).is_ok();
        assert!(verified, "s_client's handshake failed");
        child
    };
    let mut held = vec![hold(), hold()];
    let context = r#"{"c":"127.0.0.1"}"#;
    let ask = |path: &str| {
        as_peer(
            &proxies[0],
            &stolen.cert,
            &stolen.key,
            &origin.url(path),
            context,
        )
    };
    assert_eq!(ask("/third"), 0, "a third connection was served");
    assert_eq!(origin.count("/third"), 0);
    assert_eq!(refused(&proxies[0], "peer_member_connection_limit"), 1.0);
    let mut first = held.remove(0);
    first.kill().expect("kill s_client");
    first.wait().expect("wait");
    let served = eventually(Duration::from_secs(5), || ask("/after") == 200).await;
    assert!(served, "no slot came back:\n{}", proxies[0].log());
    assert!(origin.count("/after") >= 1);
    for mut child in held {
        let _ = child.kill();
        let _ = child.wait();
    }
}
