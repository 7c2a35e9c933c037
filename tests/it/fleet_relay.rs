//! Plain requests relayed by a member's front to their origin's owner
//! (`handover::relay`): the owner's answer passed on whatever its framing, and the
//! client's connection kept for its next request. Real members, a real `redis-server`,
//! an origin that logs each request.

use std::time::Duration;

use crate::common::{curl, eventually, passwd_line, raw_status, Behaviour, Proxy, TestOrigin};
use crate::fleet_fixture::{
    backend_up, first_owns_second_learns, fleet_conf, handed_over, handed_over_reaching, instances,
    owner_index,
};
use crate::redis_servers::Redis;

/// What a client got: status, the headers robotsgate and the origin set that must
/// match, and the body.
type Got = (u16, Vec<(String, String)>, Vec<u8>);

/// `method` of `url` with `client`.
async fn fetch(client: &reqwest::Client, method: reqwest::Method, url: &str) -> Got {
    let answer = client.request(method, url).send().await.expect("answer");
    let status = answer.status().as_u16();
    let headers = answer
        .headers()
        .iter()
        .filter(|(name, _)| {
            let name = name.as_str();
            name.starts_with("x-robots") || name == "content-length" || name == "x-origin"
        })
        .map(|(n, v)| (n.to_string(), v.to_str().unwrap_or("").to_string()))
        .collect();
    let body = answer.bytes().await.expect("body").to_vec();
    (status, headers, body)
}

/// Through a member that does not own the origin and already knows its owner, the
/// front relays each request itself: the owner's answer comes back as through the owner
/// — a length, chunks split across reads with a trailer, a body the origin ends by
/// closing, 1 MB streamed, `HEAD`, `304` — each request reaches the origin once, is
/// counted as handed over, and one kept-alive connection carries them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relayed_answers_keep_their_framing() {
    let big: Vec<u8> = (0..1_000_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    let chunked: Vec<u8> = big[..100_000].to_vec();
    let routes = [
        (
            "/robots.txt",
            Behaviour::ok("User-agent: *\nDisallow: /private\n"),
        ),
        ("/first", Behaviour::ok("first\n")),
        ("/learn", Behaviour::ok("learn\n")),
        (
            "/length",
            Behaviour::with_headers(200, &[("X-Origin", "o")], "length\n"),
        ),
        (
            "/chunked",
            Behaviour::Chunked {
                body: chunked.clone(),
                chunk: 7000,
            },
        ),
        (
            "/close",
            Behaviour::UntilClose {
                body: b"closed\n".to_vec(),
            },
        ),
        (
            "/big",
            Behaviour::Respond {
                status: 200,
                headers: vec![],
                body: big.clone(),
            },
        ),
        ("/not-modified", Behaviour::with_headers(304, &[], "")),
        ("/private", Behaviour::ok("never\n")),
    ];
    let routes: Vec<(String, Behaviour)> = routes
        .into_iter()
        .map(|(p, b)| (p.to_string(), b))
        .collect();
    let origin = TestOrigin::start_owned(&routes).await;
    let redis = Redis::start();
    let proxies = instances(2, &fleet_conf(&redis));
    backend_up(&proxies).await;
    first_owns_second_learns(&proxies, &origin);

    let (owner, relay) = (proxies[0].client(), proxies[1].client());
    let paths = [
        "/length",
        "/chunked",
        "/close",
        "/big",
        "/not-modified",
        "/private",
    ];
    for method in [reqwest::Method::GET, reqwest::Method::HEAD] {
        for path in paths {
            let url = origin.url(path);
            let direct = fetch(&owner, method.clone(), &url).await;
            let relayed = fetch(&relay, method.clone(), &url).await;
            assert_eq!(relayed, direct, "{method} {path}");
        }
    }
    let (_, _, body) = fetch(&relay, reqwest::Method::GET, &origin.url("/chunked")).await;
    assert_eq!(body, chunked);
    let (_, _, body) = fetch(&relay, reqwest::Method::GET, &origin.url("/big")).await;
    assert_eq!(body, big);

    // Each reached the origin once per member (never `/private`), all handed over by the
    // front's relay (its access lines), on connections it kept.
    for path in ["/length", "/close", "/not-modified"] {
        assert_eq!(origin.count(path), 4, "{path}");
    }
    assert_eq!(origin.count("/chunked"), 5);
    assert_eq!(origin.count("/big"), 5);
    assert_eq!(origin.count("/private"), 0);
    let relayed = 2 * paths.len() + 2;
    let handed = (relayed + 1) as f64;
    assert_eq!(handed_over_reaching(&proxies[1], handed).await, handed);
    // Access lines are written just after the answer: polled for.
    let by_relay = || {
        let log = proxies[1].log();
        log.lines()
            .filter(|l| l.contains("why=\"handed to "))
            .count()
    };
    let logged = eventually(Duration::from_secs(5), || by_relay() == relayed).await;
    assert!(logged, "{} of {relayed}\n{}", by_relay(), proxies[1].log());
}

/// A hostile origin's answer framed with a coding Pingora does not read as chunked
/// (`Transfer-Encoding: xchunked`, a chunked-looking end and a forged answer after it,
/// `Connection: keep-alive`): the relaying member reads it as the owner wrote it
/// (Pingora on both hops) — close-delimited — and never pools the connection it came
/// on. Another client's requests through the same member, for another origin of the
/// same owner, get their own answers, each from its origin, in every round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_answers_framing_never_reaches_another_client() {
    let forged = b"HTTP/1.1 200 OK\r\nContent-Length: 17\r\n\r\nSMUGGLED-ANSWER!\n";
    let mut octets =
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: xchunked\r\nConnection: keep-alive\r\n\r\n0\r\n\r\n"
            .to_vec();
    octets.extend_from_slice(forged);
    let hostile = TestOrigin::robots_and(
        "User-agent: *\n",
        vec![("/smuggle", Behaviour::Raw { octets })],
    )
    .await;
    let victim = TestOrigin::robots("User-agent: *\n").await;
    let redis = Redis::start();
    let proxies = instances(2, &fleet_conf(&redis));
    backend_up(&proxies).await;
    for origin in [&hostile, &victim] {
        first_owns_second_learns(&proxies, origin);
    }
    let (attacker, bystander) = (proxies[1].client(), proxies[1].client());
    for round in 0..5 {
        let smuggled = fetch(&attacker, reqwest::Method::GET, &hostile.url("/smuggle")).await;
        assert_eq!(smuggled.0, 200, "round {round}");
        for n in 0..3 {
            let path = format!("/victim-{round}-{n}");
            let (status, _, body) =
                fetch(&bystander, reqwest::Method::GET, &victim.url(&path)).await;
            let body = String::from_utf8_lossy(&body);
            assert_eq!(
                (status, body.as_ref()),
                (200, format!("page {path}\n").as_str())
            );
            assert_eq!(victim.count(&path), 1, "{path} reached its origin once");
        }
    }
    assert!(handed_over_reaching(&proxies[1], 20.0).await >= 20.0);
}

/// What the proxy's path serves, the relay serves the same: request heads whose lines
/// end in a bare LF (the head is rebuilt from the parsed request, not spliced as text),
/// and an answer whose `Content-Length` repeats one value (`2, 2`, RFC 9110 §8.6). Each
/// reaches the origin once and comes back whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heads_with_bare_lf_and_repeated_lengths_are_relayed_as_served() {
    let twice = b"HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\n\r\nok".to_vec();
    let origin = TestOrigin::robots_and(
        "User-agent: *\n",
        vec![("/twice", Behaviour::Raw { octets: twice })],
    )
    .await;
    let redis = Redis::start();
    let proxies = instances(2, &fleet_conf(&redis));
    backend_up(&proxies).await;
    first_owns_second_learns(&proxies, &origin);
    let before = handed_over(&proxies[1]);

    let (_, _, body) = fetch(
        &proxies[1].client(),
        reqwest::Method::GET,
        &origin.url("/twice"),
    )
    .await;
    assert_eq!(body, b"ok");
    assert_eq!(origin.count("/twice"), 1);

    let host = origin
        .url("/")
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    for (n, (line, end)) in [("\n", "\n"), ("\r\n", "\n"), ("\n", "\r\n")]
        .into_iter()
        .enumerate()
    {
        let path = format!("/bare-{n}");
        let head = format!(
            "GET http://{host}{path} HTTP/1.1{line}Host: {host}{line}Connection: close{line}{end}"
        );
        let reply = raw_status(proxies[1].addr, head, 200).await;
        assert!(reply.ends_with(&format!("page {path}\n")), "{reply}");
        assert_eq!(origin.count(&path), 1, "{path}");
    }
    assert_eq!(
        handed_over_reaching(&proxies[1], before + 4.0).await - before,
        4.0
    );
}

/// A connection the relay keeps idle for an owner that closed it meanwhile (the owner's
/// idle timeout shorter than the relaying member's): the next request goes on a new
/// connection, reaches the origin once and is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_connection_the_owner_closed_is_replaced_and_the_request_sent_once() {
    let origin = TestOrigin::robots_and("User-agent: *\n", vec![]).await;
    let redis = Redis::start();
    let owner =
        Proxy::start_for_loopback(&fleet_conf(&redis).set("limits.idle_timeout_seconds", 1));
    // The relay's retries logged (debug).
    let log = [("RUST_LOG", "info,robotsgate::handover=debug")];
    let loopback = ["--allow-destination", "127.0.0.0/8"];
    let relay = Proxy::start_with_env(&fleet_conf(&redis), &loopback, &log);
    let proxies = [owner, relay];
    backend_up(&proxies).await;
    first_owns_second_learns(&proxies, &origin);
    let before = handed_over(&proxies[1]);
    for round in 0..3 {
        let path = format!("/kept-{round}");
        assert_eq!(curl(&proxies[1], &origin.url(&path), &[]).0, 200, "{path}");
        assert_eq!(origin.count(&path), 1, "{path}");
        // The owner closes the relay's idle connection after its idle timeout.
        let open = || {
            proxies[0]
                .metric("robotsgate_peer_connections")
                .unwrap_or(-1.0)
        };
        let closed = eventually(Duration::from_secs(10), || open() == 0.0).await;
        assert!(closed, "{} peer connections open", open());
    }
    // Access lines are written just after the answer: polled for.
    let relayed = || {
        proxies[1]
            .log()
            .lines()
            .filter(|l| l.contains("/kept-") && l.contains("why=\"handed to "))
            .count()
    };
    eventually(Duration::from_secs(5), || relayed() >= 3).await;
    assert_eq!(relayed(), 3, "{}", proxies[1].log());
    assert_eq!(
        handed_over_reaching(&proxies[1], before + 3.0).await - before,
        3.0
    );
    // The last two met a kept connection the owner had closed: passed over when the
    // runtime had seen it close, else sent on it and then on a new one.
    let again = proxies[1].log().matches("a kept connection to ").count();
    assert_eq!(again, 2, "{}", proxies[1].log());
}

/// Two proxy users taking turns on one kept-alive connection to a relaying member: the
/// owner judges each request as its own user (the user's tokens choose the robots.txt
/// group), so what reaches the origin is what each user may fetch, never what the
/// previous request's user could.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_relayed_request_carries_its_own_user() {
    let origin = TestOrigin::robots(
        "User-agent: TeamBot\nDisallow: /team-only/\n\nUser-agent: *\nDisallow: /everyone/\n",
    )
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let users = dir.path().join("users");
    let lines = [
        passwd_line("team", "team-secret", &["TeamBot"]),
        passwd_line("plain", "plain-secret", &[]),
    ];
    std::fs::write(&users, lines.join("\n")).expect("write users");
    let redis = Redis::start();
    let conf = fleet_conf(&redis).set("access.credentials_file", users.display().to_string());
    let proxies = instances(2, &conf);
    backend_up(&proxies).await;
    let team = ["--proxy-user", "team:team-secret"];
    assert_eq!(curl(&proxies[0], &origin.url("/first"), &team).0, 200);
    assert_eq!(owner_index(&proxies, &origin), Some(0));
    assert_eq!(curl(&proxies[1], &origin.url("/learn"), &team).0, 200);

    let basic = |user: &str| {
        use base64::Engine;
        let credentials = base64::engine::general_purpose::STANDARD.encode(user);
        format!("Basic {credentials}")
    };
    // One client, so one kept connection, the user changing from request to request.
    let relay = proxies[1].client();
    let before = handed_over(&proxies[1]);
    let turns = [
        ("team:team-secret", "/team-only/1", 403),
        ("plain:plain-secret", "/team-only/2", 200),
        ("team:team-secret", "/everyone/3", 200),
        ("plain:plain-secret", "/everyone/4", 403),
        ("plain:plain-secret", "/team-only/5", 200),
        ("team:team-secret", "/team-only/6", 403),
    ];
    for (user, path, status) in turns {
        let answer = relay
            .get(origin.url(path))
            .header("Proxy-Authorization", basic(user))
            .send()
            .await
            .expect("answer");
        assert_eq!(answer.status().as_u16(), status, "{user} {path}");
    }
    let sent = turns.len() as f64;
    assert_eq!(
        handed_over_reaching(&proxies[1], before + sent).await - before,
        sent
    );
    let fetched: Vec<String> = origin
        .seen()
        .iter()
        .map(|s| s.target.clone())
        .filter(|t| t.starts_with("/team-only/") || t.starts_with("/everyone/"))
        .collect();
    assert_eq!(fetched, ["/team-only/2", "/everyone/3", "/team-only/5"]);
}
