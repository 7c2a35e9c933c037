//! The egress proxy over real sockets: curl and reqwest as crawlers, test origins that log
//! what reaches them, a real robotsgate process in between.

use std::time::Duration;

use crate::common::{curl, eventually, Behaviour, Conf, Proxy, TestOrigin};

const ROBOTS: &str = "User-agent: *\nDisallow: /disallowed\n\nUser-agent: NewsBot\nDisallow: /\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_allowed_reaches_origin_disallowed_does_not() {
    let origin = TestOrigin::robots(ROBOTS).await;
    let proxy = Proxy::start_for_loopback(&Conf::new());

    let (status, _, body) = curl(&proxy, &origin.url("/allowed?x=1"), &[]);
    assert_eq!(status, 200, "{}", proxy.log());
    assert_eq!(body, "page /allowed?x=1\n");

    let (status, head, body) = curl(&proxy, &origin.url("/disallowed/page"), &[]);
    assert_eq!(status, 403);
    let robots_url = origin.url("/robots.txt");
    assert!(
        body.contains(&robots_url) && body.contains("Disallow: /disallowed (line 2)"),
        "{body}"
    );
    assert!(
        head.contains("X-Robots-Decision: disallowed") && head.contains("line=2"),
        "{head}"
    );

    // What reached the origin: robots.txt once, the allowed page, never the disallowed one.
    let seen: Vec<String> = origin.seen().iter().map(|s| s.target.clone()).collect();
    assert_eq!(seen, ["/robots.txt", "/allowed?x=1"]);
}

/// Two origins on one address (`a.test` and `b.test`, both 127.0.0.1 in the proxy's
/// name server) each keep their own connections: one origin's kept connection is never
/// lent to the other's requests, and each origin's second request reuses its first one's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origins_sharing_an_address_share_no_connection() {
    let origin = TestOrigin::robots(ROBOTS).await;
    let dns = crate::common::static_dns(vec![std::net::Ipv4Addr::LOCALHOST]).await;
    let proxy = Proxy::start_for_loopback(&Conf::new().set("dns.nameservers", [dns.to_string()]));
    let by_name = |name: &str, path: &str| origin.url(path).replace("127.0.0.1", name);
    for round in 0..2 {
        for name in ["a.test", "b.test"] {
            let url = by_name(name, &format!("/{name}/{round}"));
            let (status, _, body) = curl(&proxy, &url, &[]);
            assert_eq!(status, 200, "{url}: {body}");
        }
    }
    let connection = |target: &str| origin.first(target).connection;
    for name in ["a.test", "b.test"] {
        let (first, second) = (
            connection(&format!("/{name}/0")),
            connection(&format!("/{name}/1")),
        );
        assert_eq!(
            first, second,
            "{name}'s second request reuses its connection"
        );
    }
    assert_ne!(
        connection("/a.test/0"),
        connection("/b.test/0"),
        "two origins, one connection: {:?}",
        origin.seen()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reqwest_through_the_proxy_and_agent_from_user_agent() {
    let origin = TestOrigin::robots(ROBOTS).await;
    let proxy = Proxy::start_for_loopback(&Conf::new());
    let client = proxy.client();
    let get =
        |ua: &'static str, path: &str| client.get(origin.url(path)).header("User-Agent", ua).send();

    let r = get("ExampleBot/1.0 (+https://example.com/bot)", "/page")
        .await
        .expect("request");
    assert_eq!(r.status(), 200);
    // The NewsBot group disallows everything: the User-Agent's product token selects it.
    let r = get("NewsBot/2.1", "/page").await.expect("request");
    assert_eq!(r.status(), 403);
    assert!(r.headers()["x-robots-decision"]
        .to_str()
        .unwrap_or("")
        .contains("line=5"));
    // robots.txt was fetched with robotsgate's own User-Agent (`robots.user_agent`),
    // never a crawler's: the copy serves every crawler.
    let robots = origin.first("/robots.txt");
    assert_eq!(
        robots.header("user-agent"),
        Some(concat!("robotsgate/", env!("CARGO_PKG_VERSION")))
    );
    assert_eq!(origin.count("/page"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configured_tokens_override_the_header() {
    let origin = TestOrigin::robots(ROBOTS).await;
    let proxy = Proxy::start(
        &Conf::new(),
        &["--allow-destination", "127.0.0.0/8", "--agent", "NewsBot"],
    );
    let (status, _, _) = curl(&proxy, &origin.url("/page"), &["-A", "ExampleBot/1.0"]);
    assert_eq!(status, 403);
    assert_eq!(origin.count("/page"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transparent_mode_uses_the_host_header() {
    let origin = TestOrigin::robots(ROBOTS).await;
    let proxy = Proxy::start_for_loopback(&Conf::new());
    let client = reqwest::Client::new();
    let send = |path: &str| {
        client
            .get(format!("{}{path}", proxy.url()))
            .header("Host", origin.addr.to_string())
            .send()
    };
    assert_eq!(send("/fine").await.expect("request").status(), 200);
    assert_eq!(send("/disallowed").await.expect("request").status(), 403);
    assert_eq!(origin.count("/fine"), 1);
    assert_eq!(origin.count("/disallowed"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origin_receives_the_canonical_path_the_decision_was_made_on() {
    let origin = TestOrigin::robots(ROBOTS).await;
    let proxy = Proxy::start_for_loopback(&Conf::new());
    for sneaky in [
        "/ok/../disallowed",
        "/%64isallowed",
        "/./disallowed",
        "/ok/%2e%2e/disallowed",
    ] {
        let (status, _, _) = curl(&proxy, &origin.url(sneaky), &["--path-as-is"]);
        assert_eq!(status, 403, "{sneaky}");
    }
    let (status, _, body) = curl(
        &proxy,
        &origin.url("/a/./b/../c%7e?q=%7E"),
        &["--path-as-is"],
    );
    assert_eq!(status, 200);
    assert_eq!(body, "page /a/c~?q=~\n");
    assert!(
        origin
            .seen()
            .iter()
            .all(|s| !s.target.contains("disallowed")),
        "{:?}",
        origin.seen()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loopback_origin_is_refused_without_allow_destination() {
    let origin = TestOrigin::robots(ROBOTS).await;
    let proxy = Proxy::start(&Conf::new(), &[]);
    let (status, head, body) = curl(&proxy, &origin.url("/allowed"), &[]);
    assert_eq!(status, 403);
    assert!(
        head.contains("egress-denied") && body.contains("loopback"),
        "{head}{body}"
    );
    assert!(
        origin.seen().is_empty(),
        "not even robots.txt may be fetched"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ports_outside_the_allow_list_are_refused() {
    let proxy = Proxy::start_for_loopback(&Conf::new());
    let (status, _, body) = curl(&proxy, "http://127.0.0.1:25/", &[]);
    assert_eq!(status, 403);
    assert!(body.contains("port 25"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_first_requests_share_one_robots_fetch() {
    let origin = TestOrigin::start(vec![(
        "/robots.txt",
        Behaviour::Delayed {
            delay: Duration::from_millis(300),
            body: ROBOTS.as_bytes().to_vec(),
        },
    )])
    .await;
    let proxy = Proxy::start_for_loopback(&Conf::new());
    let urls = (0..50)
        .map(|i| (origin.url(&format!("/page/{i}")), "ExampleBot/1.0"))
        .collect();
    let statuses = crate::common::concurrent(&proxy, urls).await;
    assert!(statuses.iter().all(|&s| s == 200), "{statuses:?}");
    assert_eq!(
        origin.count("/robots.txt"),
        1,
        "single-flight: exactly one robots.txt fetch"
    );
    assert_eq!(origin.seen().len(), 51);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn robots_txt_is_answered_from_the_store() {
    let origin = TestOrigin::robots(ROBOTS).await;
    let proxy = Proxy::start_for_loopback(&Conf::new());
    assert_eq!(curl(&proxy, &origin.url("/x"), &[]).0, 200);
    let (status, head, body) = curl(&proxy, &origin.url("/robots.txt"), &[]);
    assert_eq!((status, body.as_str()), (200, ROBOTS));
    assert!(head.contains("robots-txt-from-cache"), "{head}");
    assert_eq!(origin.count("/robots.txt"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_request_targets_get_400() {
    let proxy = Proxy::start_for_loopback(&Conf::new());
    for request in [
        "GET http://user:pw@127.0.0.1:8080/ HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nConnection: close\r\n\r\n",
        "GET ftp://127.0.0.1:8080/ HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nConnection: close\r\n\r\n",
        "GET /no-host HTTP/1.0\r\n\r\n",
    ] {
        let answer = crate::common::raw_exchange(proxy.addr, request.as_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{request:?} → {answer}");
    }
    // Garbage does not take the proxy down.
    let _ = crate::common::raw_exchange(proxy.addr, b"\x00\x01garbage\r\n\r\n").await;
    assert!(
        eventually(Duration::from_secs(5), || std::net::TcpStream::connect(
            proxy.addr
        )
        .is_ok())
        .await
    );
    let answer = crate::common::raw_exchange(proxy.addr, b"GET /no-host HTTP/1.0\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
}
