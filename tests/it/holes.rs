//! Holes a hostile client or origin could use to get past robots.txt or Crawl-delay, each
//! closed and checked over real sockets: a real robotsgate process, origins that log what
//! reaches them, raw bytes or curl as the client.

use serde_json::json;
use std::time::Duration;

use crate::common::{
    curl, get_status, raw_exchange, raw_status, Behaviour, Conf, Proxy, TestOrigin,
};

const ROBOTS: &str = "User-agent: *\nDisallow: /private\n";

/// Gaps at the origin between one request's end and the next one's start, in seconds.
fn gaps(origin: &TestOrigin, skip_robots: bool) -> Vec<f64> {
    let seen: Vec<_> = origin
        .seen()
        .into_iter()
        .filter(|s| !skip_robots || s.target != "/robots.txt")
        .collect();
    seen.windows(2)
        .map(|w| {
            let end = w[0].done.expect("answered");
            w[1].arrived.saturating_duration_since(end).as_secs_f64()
        })
        .collect()
}

/// `Crawl-delay: 1e20` (or any value past the ceiling) paces at the ceiling; it once
/// overflowed a conversion that fell back to zero, and pacing switched off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_crawl_delay_paces_at_the_ceiling() {
    let origin = TestOrigin::robots("User-agent: *\nCrawl-delay: 100000000000000000000\n").await;
    let proxy = Proxy::start_for_loopback(&Conf::new().set(
        "pacing",
        json!({"ceiling_seconds": 0.4, "max_wait_seconds": 30}),
    ));
    let client = proxy.client();
    for n in 0..4 {
        assert_eq!(
            get_status(&client, origin.url(&format!("/page{n}"))).await,
            200
        );
    }
    let gaps = gaps(&origin, false);
    assert_eq!(gaps.len(), 4, "robots.txt and four pages");
    assert!(gaps.iter().all(|g| *g >= 0.4), "{gaps:?}");
    let view = reqwest::get(format!(
        "http://{}/origins/{}",
        proxy.admin,
        origin.url("").trim_end_matches('/')
    ))
    .await
    .expect("admin")
    .text()
    .await
    .expect("body");
    assert!(view.contains("\"delay_seconds\": 0.405"), "{view}");
}

/// A GET or HEAD with a body is refused before anything reaches the origin: a server that
/// ignores GET bodies would read the body as a second, unchecked request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_on_get_never_reaches_the_origin() {
    let origin = TestOrigin::robots(ROBOTS).await;
    let proxy = Proxy::start_for_loopback(&Conf::new());
    let host = origin.addr.to_string();
    let smuggled = format!("GET /private/smuggled HTTP/1.1\r\nHost: {host}\r\n\r\n");
    let requests = [
        format!(
            "GET http://{host}/ok HTTP/1.1\r\nHost: {host}\r\nContent-Length: {}\r\n\r\n{smuggled}",
            smuggled.len()
        ),
        format!(
            "HEAD http://{host}/ok HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{smuggled}\r\n0\r\n\r\n",
            smuggled.len()
        ),
        format!(
            "GET /ok HTTP/1.1\r\nHost: {host}\r\nContent-Length: {}\r\n\r\n{smuggled}",
            smuggled.len()
        ),
    ];
    for request in &requests {
        let reply = raw_status(proxy.addr, request, 400).await;
        assert!(reply.contains("reason=\"body-on-get\""), "{reply}");
    }
    assert_eq!(
        proxy.metric("robotsgate_downstream_refusals_total{reason=\"body-on-get\"}"),
        Some(3.0)
    );
    // Any method: both framings at once are refused (which one a server reads is the
    // smuggling).
    let _reply = raw_status(proxy.addr, format!(
            "POST http://{host}/form HTTP/1.1\r\nHost: {host}\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{smuggled}"
        ), 400).await;
    assert!(origin.seen().is_empty(), "{:?}", origin.seen());
    // An empty body is no body.
    let _reply = raw_status(proxy.addr, format!("GET http://{host}/ok HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"), 200).await;
}

/// `Upgrade` (WebSocket, h2c) is refused: after a 101 the connection would be a tunnel
/// robots.txt never sees. An origin that switches protocols anyway gets nothing relayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrades_are_refused_and_a_101_is_not_relayed() {
    let origin = TestOrigin::robots_and(ROBOTS, vec![("/switch", Behaviour::status(101))]).await;
    let proxy = Proxy::start_for_loopback(&Conf::new());
    let host = origin.addr.to_string();
    for upgrade in ["websocket", "h2c", "anything/1.0"] {
        let reply = raw_status(proxy.addr, format!("GET http://{host}/ws HTTP/1.1\r\nHost: {host}\r\nConnection: Upgrade\r\nUpgrade: {upgrade}\r\n\r\nGET /private/1 HTTP/1.1\r\n\r\n"), 400).await;
        assert!(reply.contains("reason=\"upgrade\""), "{reply}");
    }
    assert!(origin.seen().is_empty());
    // A 101 the client never asked for: the client does not get it, and the bytes it
    // sends next are not relayed to the origin as a tunnel.
    let reply = raw_exchange(
        proxy.addr,
        format!("GET http://{host}/switch HTTP/1.1\r\nHost: {host}\r\n\r\nGET /private/2 HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes(),
    )
    .await;
    assert!(!reply.starts_with("HTTP/1.1 101"), "{reply}");
    assert!(
        origin.seen().iter().all(|s| !s.target.contains("private")),
        "{:?}",
        origin.seen()
    );
}

/// A short `max-age` does not make robots.txt refetch after every page, and every fetch
/// (the admin's refresh included) takes its turn on the origin's schedule like a page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn robots_txt_fetches_are_paced_and_not_per_request() {
    let origin = TestOrigin::robots_for("User-agent: *\nCrawl-delay: 0.3\n", 60).await;
    let proxy = Proxy::start_for_loopback(&Conf::new().set("pacing.max_wait_seconds", 30));
    let client = proxy.client();
    for n in 0..5 {
        assert_eq!(
            get_status(&client, origin.url(&format!("/p{n}"))).await,
            200
        );
    }
    assert_eq!(origin.count("/robots.txt"), 1, "{:?}", origin.seen());
    // An admin refresh while pages keep coming: it waits for its turn, and the next page
    // waits for the refresh to end plus the delay.
    let refresh = tokio::spawn({
        let url = format!(
            "http://{}/origins/{}/refresh",
            proxy.admin,
            origin.url("").trim_end_matches('/')
        );
        async move { reqwest::Client::new().post(url).send().await }
    });
    for n in 5..8 {
        assert_eq!(
            get_status(&client, origin.url(&format!("/p{n}"))).await,
            200
        );
    }
    assert_eq!(refresh.await.expect("task").expect("refresh").status(), 200);
    assert_eq!(origin.count("/robots.txt"), 2);
    let gaps = gaps(&origin, false);
    assert!(gaps.iter().all(|g| *g >= 0.3), "{gaps:?}");
}

/// robots.txt is fetched with `robots.user_agent`, never a client's: the copy serves every
/// crawler, so an origin that varies robots.txt by User-Agent cannot hand one crawler's
/// permissions to another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn robots_txt_is_fetched_with_the_configured_user_agent() {
    let origin = TestOrigin::robots(ROBOTS).await;
    let proxy = Proxy::start_for_loopback(&Conf::new().set(
        "robots.user_agent",
        "FleetBot/2.0 (+https://fleet.example/bot)",
    ));
    let (status, _, _) = curl(&proxy, &origin.url("/a"), &["-A", "FirstCrawler/1.0"]);
    assert_eq!(status, 200);
    let fetch = origin.first("/robots.txt");
    assert_eq!(
        fetch.header("user-agent"),
        Some("FleetBot/2.0 (+https://fleet.example/bot)")
    );
}

/// With `agent.from_user_agent` off, a crawler cannot name the most permissive group in its
/// User-Agent; /check and the access log say where the tokens came from.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_cannot_choose_their_own_group() {
    let origin = TestOrigin::robots(
        "User-agent: FriendBot\nAllow: /\n\nUser-agent: *\nDisallow: /private\n",
    )
    .await;
    let proxy = Proxy::start_for_loopback(&Conf::new().set(
        "agent",
        json!({"from_user_agent": false, "default_tokens": ["FleetBot"]}),
    ));
    let (status, head, _) = curl(&proxy, &origin.url("/private/x"), &["-A", "FriendBot/1"]);
    assert_eq!(status, 403, "{head}");
    assert_eq!(origin.count("/private/x"), 0);
    let check = reqwest::get(format!(
        "http://{}/check?url={}&agent=FriendBot%2F1",
        proxy.admin,
        origin
            .url("/private/x")
            .replace(':', "%3A")
            .replace('/', "%2F")
    ))
    .await
    .expect("check")
    .text()
    .await
    .expect("body");
    let check: serde_json::Value = serde_json::from_str(&check).expect("json");
    assert_eq!(check["decision"], "disallowed", "{check}");
    assert_eq!(check["tokens_from"], "default", "{check}");
    assert!(
        crate::common::eventually(Duration::from_secs(5), || proxy
            .log()
            .contains("tokens_from=\"default\"")
            || proxy.log().contains("tokens_from=default"))
        .await,
        "{}",
        proxy.log()
    );
    // A config that turns the header off must name the fleet's tokens.
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("bad.yaml");
    let conf = Conf::new().set("agent.from_user_agent", false);
    std::fs::write(&bad, conf.file(&[])).expect("write");
    let text = crate::common::config_refusal(&bad);
    assert!(text.contains("robotsgate.agent.default_tokens"), "{text}");
}

/// A client's `/robots.txt` is answered from the store: with the origin's robots.txt
/// unreadable, ten requests for it cause one fetch (the store's), not ten unpaced ones,
/// and each answer names the cause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_robots_txt_requests_never_go_upstream() {
    let failing = TestOrigin::start(vec![("/robots.txt", Behaviour::status(500))]).await;
    let held = TestOrigin::robots(ROBOTS).await;
    let missing = TestOrigin::start(vec![("/robots.txt", Behaviour::status(404))]).await;
    let proxy = Proxy::start_for_loopback(&Conf::new());
    for _ in 0..10 {
        let (status, head, _) = curl(&proxy, &failing.url("/robots.txt"), &[]);
        assert_eq!(status, 503, "{head}");
        assert!(head.contains("reason=\"http-500\""), "{head}");
        assert!(head.contains("Retry-After"), "{head}");
    }
    assert_eq!(failing.count("/robots.txt"), 1);
    let (status, _, body) = curl(&proxy, &held.url("/robots.txt"), &[]);
    assert_eq!((status, body.as_str()), (200, ROBOTS));
    assert_eq!(curl(&proxy, &missing.url("/robots.txt"), &[]).0, 404);
    assert_eq!(held.count("/robots.txt") + missing.count("/robots.txt"), 2);
}

/// Every robots-unreachable answer names its cause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_robots_txt_names_the_cause() {
    let proxy = Proxy::start_for_loopback(&Conf::new().set("robots.fetch_timeout_seconds", 1));
    // Nothing listens on this port: connection refused.
    let closed = crate::common::free_port();
    let (status, head, body) = curl(&proxy, &format!("http://127.0.0.1:{closed}/x"), &[]);
    assert_eq!(status, 503, "{head}");
    assert!(head.contains("reason=\"connect-refused\""), "{head}");
    assert!(body.contains("connect-refused"), "{body}");
    // An origin that accepts and never answers: timeout.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = silent.local_addr().expect("addr").port();
    let _hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = silent.accept().await {
            held.push(s);
        }
    });
    let (status, head, _) = curl(&proxy, &format!("http://127.0.0.1:{port}/x"), &[]);
    assert_eq!(status, 503, "{head}");
    assert!(head.contains("reason=\"timeout\""), "{head}");
}

/// The admin API: clients outside `admin.allow_clients` are refused, changes need the
/// bearer token, and an origin is refreshed at most once per `min_ttl`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_api_is_guarded() {
    let origin = TestOrigin::robots(ROBOTS).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let token = dir.path().join("admin.token");
    std::fs::write(&token, "s3cret-admin-token-0123456789\n").expect("token");
    let proxy = Proxy::start(
        &Conf::new().set("robots.min_ttl_seconds", 60),
        &[
            "--allow-destination",
            "127.0.0.0/8",
            "--admin-token",
            token.to_str().expect("utf-8"),
        ],
    );
    assert_eq!(curl(&proxy, &origin.url("/a"), &[]).0, 200);
    let base = format!(
        "http://{}/origins/{}",
        proxy.admin,
        origin.url("").trim_end_matches('/')
    );
    let client = reqwest::Client::new();
    let refresh = || client.post(format!("{base}/refresh"));
    let no_token = refresh().send().await.expect("post");
    assert_eq!(no_token.status(), 401);
    assert!(no_token.headers().contains_key("www-authenticate"));
    let wrong = refresh()
        .bearer_auth("s3cret-admin-token-0123456780")
        .send()
        .await
        .expect("post");
    assert_eq!(wrong.status(), 401);
    assert_eq!(
        client.delete(&base).send().await.expect("delete").status(),
        401
    );
    let good = refresh()
        .bearer_auth("s3cret-admin-token-0123456789")
        .send()
        .await
        .expect("post");
    assert_eq!(good.status(), 200);
    for _ in 0..6 {
        let again = refresh()
            .bearer_auth("s3cret-admin-token-0123456789")
            .send()
            .await
            .expect("post");
        assert_eq!(again.status(), 429);
        let retry: u64 = again.headers()["retry-after"]
            .to_str()
            .expect("ascii")
            .parse()
            .expect("seconds");
        assert!((1..=60).contains(&retry), "{retry}");
    }
    assert_eq!(
        origin.count("/robots.txt"),
        2,
        "first fetch and one refresh"
    );
    // Reads stay open to allowed clients.
    assert_eq!(client.get(&base).send().await.expect("get").status(), 200);

    // A client outside admin.allow_clients: refused (health checks excepted).
    let outside =
        Proxy::start_for_loopback(&Conf::new().set("admin.allow_clients", ["10.0.0.0/8"]));
    assert_eq!(
        get_status(&client, format!("http://{}/metrics", outside.admin)).await,
        403
    );
}

/// Headers some servers read as the path to serve never reach the origin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_rewriting_headers_are_stripped() {
    let origin = TestOrigin::robots(ROBOTS).await;
    let proxy = Proxy::start_for_loopback(&Conf::new());
    let headers = [
        "X-Original-URL: /private/a",
        "X-Rewrite-URL: /private/b",
        "X-Override-URL: /private/c",
        "X-Original-URI: /private/d",
        "X-Forwarded-Prefix: /private",
        "X-HTTP-Method-Override: DELETE",
        "x-envoy-original-path: /private/e",
        "X-Forwarded-Host: other-site.example",
        "Forwarded: host=other-site.example",
    ];
    let mut args = Vec::new();
    for h in &headers {
        args.push("-H");
        args.push(*h);
    }
    assert_eq!(curl(&proxy, &origin.url("/public"), &args).0, 200);
    let seen = origin.first("/public");
    assert_eq!(seen.method, "GET", "a method override changed nothing");
    for h in &headers {
        let name = h.split(':').next().expect("name");
        assert_eq!(seen.header(name), None, "{name} was forwarded");
    }
}

/// IPv6 forms that embed an IPv4 address are judged by it (6to4, NAT64) or refused
/// (Teredo, local-use NAT64, IPv4-compatible, site-local).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipv6_forms_embedding_ipv4_do_not_pass_egress() {
    let proxy = Proxy::start(&Conf::new(), &[]);
    for host in [
        "[2002:7f00:1::1]",
        "[2002:a9fe:a9fe::]",
        "[64:ff9b::7f00:1]",
        "[64:ff9b:1::7f00:1]",
        "[2001:0:4136:e378:8000:63bf:3fff:fdd2]",
        "[::7f00:1]",
        "[fec0::1]",
        "[100::1]",
    ] {
        let (status, head, _) = curl(&proxy, &format!("http://{host}:8080/x"), &[]);
        assert_eq!(status, 403, "{host}: {head}");
        assert!(head.contains("egress-denied"), "{host}: {head}");
    }
}

/// A rule's `%24`/`%2A` matches the URL's `$`/`*` however the URL writes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escaped_star_and_dollar_rules_match_both_spellings() {
    let origin =
        TestOrigin::robots("User-agent: *\nDisallow: /price%24\nDisallow: /star%2A/\n").await;
    let proxy = Proxy::start_for_loopback(&Conf::new());
    for path in [
        "/price$",
        "/price%24",
        "/star%2A/a",
        "/star%2a/b",
        "/star*/c",
    ] {
        let (status, head, _) = curl(&proxy, &origin.url(path), &["--path-as-is"]);
        assert_eq!(status, 403, "{path}: {head}");
    }
    assert_eq!(curl(&proxy, &origin.url("/price"), &[]).0, 200);
    assert!(origin
        .seen()
        .iter()
        .all(|s| s.target == "/robots.txt" || s.target == "/price"));
}

/// Responses stream as they arrive: the first body octets reach the client while the
/// origin is still stalled (they were once held until the response ended).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_stream_while_the_origin_stalls() {
    let origin = TestOrigin::robots_and(
        ROBOTS,
        vec![(
            "/stall",
            Behaviour::Stall {
                first: vec![b'a'; 1000],
                total: 2000,
                stall: Duration::from_secs(4),
            },
        )],
    )
    .await;
    let proxy = Proxy::start_for_loopback(&Conf::new());
    let mut stream = tokio::net::TcpStream::connect(proxy.addr)
        .await
        .expect("connect");
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\n\r\n",
        origin.url("/stall"),
        origin.addr
    );
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream.write_all(request.as_bytes()).await.expect("write");
    let started = std::time::Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    // Everything the origin sent before stalling arrives well before the stall ends.
    while !got.windows(4).any(|w| w == b"\r\n\r\n")
        || got.len() - got.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or(0) - 4 < 1000
    {
        let n = tokio::time::timeout(Duration::from_secs(3), stream.read(&mut buf))
            .await
            .expect("first bytes within 3 s while the origin stalls 4 s")
            .expect("read");
        assert!(n > 0, "closed early");
        got.extend_from_slice(&buf[..n]);
    }
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(got.starts_with(b"HTTP/1.1 200"));
}

/// Pipelined requests are answered in order, each judged like any other (a disallowed one
/// among them gets its 403 in its place and never reaches the origin).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_are_answered_in_order() {
    let origin = TestOrigin::robots(ROBOTS).await;
    let proxy = Proxy::start_for_loopback(&Conf::new());
    let host = origin.addr.to_string();
    let mut batch = String::new();
    for path in ["/one", "/private/two", "/three"] {
        batch.push_str(&format!(
            "GET http://{host}{path} HTTP/1.1\r\nHost: {host}\r\n\r\n"
        ));
    }
    batch.push_str(&format!(
        "GET http://{host}/four HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    ));
    let reply = raw_exchange(proxy.addr, batch.as_bytes()).await;
    let statuses: Vec<&str> = reply.split("HTTP/1.1 ").skip(1).map(|r| &r[..3]).collect();
    assert_eq!(statuses, ["200", "403", "200", "200"], "{reply}");
    let order: Vec<usize> = ["page /one", "page /three", "page /four"]
        .iter()
        .map(|p| reply.find(p).expect(p))
        .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{reply}");
    let seen: Vec<String> = origin.seen().into_iter().map(|s| s.target).collect();
    assert_eq!(seen, ["/robots.txt", "/one", "/three", "/four"]);
}
