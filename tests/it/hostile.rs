//! Hostile clients: malformed request lines and URIs, Host/authority mismatches, IPv6 and
//! IPv4-mapped literals, userinfo, and a catalogue of path encodings aimed at a disallowed
//! prefix. Raw bytes over real sockets, so nothing is tidied up by a client library.

use crate::common::{raw_exchange, raw_status, Conf, Proxy, TestOrigin};
use crate::fleet_fixture::{
    backend_up, first_owns_second_learns, fleet_conf, handed_over, instances,
};
use crate::redis_servers::Redis;

const ROBOTS: &str = "User-agent: *\nDisallow: /private/\n";

/// How the most lenient origin server might read a path it receives: every escape
/// decoded, `\` as `/`, `;params` dropped from segments, empty segments collapsed, dot
/// segments resolved. Written independently of robotsgate's own code on purpose.
fn as_a_lenient_origin_reads(target: &str) -> String {
    let path = target.split(['?', '#']).next().unwrap_or("");
    let bytes = path.as_bytes();
    let mut decoded = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                decoded.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        decoded.push(bytes[i]);
        i += 1;
    }
    let decoded = String::from_utf8_lossy(&decoded).replace('\\', "/");
    let mut out: Vec<&str> = Vec::new();
    for segment in decoded.split('/') {
        match segment.split(';').next().unwrap_or("") {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            s => out.push(s),
        }
    }
    format!("/{}", out.join("/"))
}

#[test]
fn the_reference_reading_is_itself_lenient() {
    for raw in [
        "/a/%2e%2e/private/x",
        "//private;x/y",
        "/a\\..\\private/b",
        "/%70rivate/",
    ] {
        assert!(
            as_a_lenient_origin_reads(raw).starts_with("/private"),
            "{raw}"
        );
    }
}

/// Spellings of paths under the disallowed `/private/`: escapes, dot segments, doubled
/// and escaped slashes, parameters, backslashes.
const CATALOGUE: [&str; 30] = [
    "/private/x",
    "/%70rivate/x",
    "/privat%65/x",
    "/%2e%2e/private/x",
    "/public/../private/x",
    "/public/%2e%2e/private/x",
    "/public/%2E%2E/private/x",
    "/public/.%2e/private/x",
    "/public/%2e./private/x",
    "/./private/x",
    "/public/./../private/x",
    "//private/x",
    "///private/x",
    "/private%2Fx",
    "/private%2fx",
    "/%2Fprivate/x",
    "/%2fprivate%2fx",
    "/public%2F..%2Fprivate/x",
    "/public/..%2Fprivate/x",
    "/public/%2e%2e%2fprivate/x",
    "/public/..;/private/x",
    "/public/..;x=1/private/x",
    "/private;jsessionid=1/x",
    "/private;/x",
    "/public%5C..%5Cprivate/x",
    "/public%5c..%5cprivate%5cx",
    "/public\\..\\private\\x",
    "/private/x#fragment",
    "/private/x?query=1",
    "/private/",
];

/// Sends every spelling of [`CATALOGUE`] to `proxy` for `origin`, in the explicit proxy
/// form and origin-form (as transparent egress sends it), each on its own connection;
/// each must be refused (403 or 400). Returns each spelling's status.
async fn every_spelling_refused(proxy: &Proxy, origin: &TestOrigin) -> Vec<(&'static str, String)> {
    let mut answers = Vec::new();
    for path in CATALOGUE {
        for request in [
            format!(
                "GET http://{}{path} HTTP/1.1\r\nConnection: close\r\n\r\n",
                origin.addr
            ),
            format!(
                "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
                origin.addr
            ),
        ] {
            let reply = raw_exchange(proxy.addr, request.as_bytes()).await;
            let status = reply.get(9..12).unwrap_or("").to_string();
            assert!(
                status == "403" || status == "400",
                "{path}: must be refused, got {}",
                reply.lines().next().unwrap_or("")
            );
            answers.push((path, status));
        }
    }
    answers
}

/// Asserts that no request `origin` received reads, as a lenient server reads it, as a
/// path under `/private/`, and that it received exactly `expected`.
fn nothing_private_received(origin: &TestOrigin, expected: &[&str]) {
    let seen = origin.seen();
    for request in &seen {
        let read = as_a_lenient_origin_reads(&request.target);
        assert!(
            !read.starts_with("/private/"),
            "the origin received {} (read as {read})",
            request.target
        );
    }
    assert_eq!(
        seen.iter().map(|s| s.target.as_str()).collect::<Vec<_>>(),
        expected
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_spelling_of_a_disallowed_path_reaches_the_origin() {
    let origin = TestOrigin::robots(ROBOTS).await;
    let proxy = Proxy::start_for_loopback(&Conf::new());
    let answers = every_spelling_refused(&proxy, &origin).await;
    // A control: the same client, an allowed path, reaches the origin.
    let _reply = raw_status(
        proxy.addr,
        format!(
            "GET http://{}/public/x HTTP/1.1\r\nConnection: close\r\n\r\n",
            origin.addr
        ),
        200,
    )
    .await;
    nothing_private_received(&origin, &["/robots.txt", "/public/x"]);
    let refused_403 = answers.iter().filter(|(_, s)| s == "403").count();
    println!(
        "{} spellings x 2 forms: {refused_403} answered 403 (robots.txt), {} answered 400 (malformed)",
        CATALOGUE.len(),
        answers.len() - refused_403
    );
}

/// The same catalogue sent to a fleet member that hands the origin's requests to its
/// owner (the front's relay): refused alike, and nothing under `/private/` reaches the
/// origin, whichever member reads the spelling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_spelling_of_a_disallowed_path_reaches_the_origin_through_a_hand_over() {
    let origin = TestOrigin::robots(ROBOTS).await;
    let redis = Redis::start();
    let proxies = instances(2, &fleet_conf(&redis));
    backend_up(&proxies).await;
    first_owns_second_learns(&proxies, &origin);
    let before = handed_over(&proxies[1]);
    let answers = every_spelling_refused(&proxies[1], &origin).await;
    // Every 403 is the owner's judgement, relayed.
    let refused_403 = answers.iter().filter(|(_, s)| s == "403").count() as f64;
    let judged = proxies[0]
        .summed(
            "robotsgate_requests_total",
            "decision=\"disallowed\"",
            refused_403,
        )
        .await;
    assert_eq!(judged, refused_403, "{}", proxies[0].log());
    assert!(refused_403 > 0.0, "{answers:?}");
    let _reply = raw_status(
        proxies[1].addr,
        format!(
            "GET http://{}/public/x HTTP/1.1\r\nConnection: close\r\n\r\n",
            origin.addr
        ),
        200,
    )
    .await;
    assert!(handed_over(&proxies[1]) - before >= 1.0);
    nothing_private_received(&origin, &["/robots.txt", "/first", "/learn", "/public/x"]);
    assert_eq!(answers.len(), 2 * CATALOGUE.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_targets_and_authorities_are_refused_without_contact() {
    let origin = TestOrigin::robots(ROBOTS).await;
    let proxy = Proxy::start_for_loopback(&Conf::new());
    let port = origin.addr.port();
    let cases = [
        format!("GET http://user:pw@127.0.0.1:{port}/public HTTP/1.1\r\n\r\n"),
        format!("GET http://127.0.0.1:{port}@evil.example/public HTTP/1.1\r\n\r\n"),
        "GET http:/// HTTP/1.1\r\n\r\n".to_string(),
        "GET http://[::1 HTTP/1.1\r\n\r\n".to_string(),
        "GET http://127.0.0.1:99999/ HTTP/1.1\r\n\r\n".to_string(),
        "GET http://127.0.0.1:0/ HTTP/1.1\r\n\r\n".to_string(),
        "GET ftp://127.0.0.1/ HTTP/1.1\r\n\r\n".to_string(),
        "GET * HTTP/1.1\r\n\r\n".to_string(),
        "GET /no-host HTTP/1.1\r\n\r\n".to_string(),
        "GET http://exa mple.com/ HTTP/1.1\r\n\r\n".to_string(),
        "GET http://127.0.0.1/\0 HTTP/1.1\r\n\r\n".to_string(),
        "GET http://127.0.0.1/ HTTP/9.9\r\n\r\n".to_string(),
        "GET\thttp://127.0.0.1/\tHTTP/1.1\r\n\r\n".to_string(),
        format!("GET http://127.0.0.1:{port}/public HTTP/1.1\r\nHost: a\r\nHost: b\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"),
    ];
    for request in &cases {
        // Answers to well-formed heads keep the connection open; ask for it closed.
        let request = request.replace("\r\n\r\n", "\r\nConnection: close\r\n\r\n");
        let reply = raw_exchange(proxy.addr, request.as_bytes()).await;
        let status: u16 = reply.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
        assert!(
            (400..500).contains(&status),
            "{request:?} must be refused, got {:?}",
            reply.lines().next()
        );
    }
    assert!(origin.seen().is_empty(), "{:?}", origin.seen());
    // Still serving.
    let _reply = raw_status(
        proxy.addr,
        format!("GET http://127.0.0.1:{port}/public HTTP/1.1\r\nConnection: close\r\n\r\n"),
        200,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_header_naming_another_site_is_refused() {
    let origin = TestOrigin::robots(ROBOTS).await;
    let proxy = Proxy::start_for_loopback(&Conf::new());
    // Which robots.txt would apply is ambiguous: refused, before any contact.
    for path in ["/private/x", "/public"] {
        let reply = raw_status(proxy.addr, format!(
                "GET http://{}{path} HTTP/1.1\r\nHost: allowed.example\r\nConnection: close\r\n\r\n",
                origin.addr
            ), 400).await;
        assert!(reply.contains("Host header differs"), "{reply}");
    }
    assert!(origin.seen().is_empty());
    // The same request with a matching Host goes through, and the origin is told its name.
    let _reply = raw_status(
        proxy.addr,
        format!(
            "GET http://{0}/public HTTP/1.1\r\nHost: {0}\r\nConnection: close\r\n\r\n",
            origin.addr
        ),
        200,
    )
    .await;
    let seen = origin.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(
        seen[1].header("host"),
        Some(origin.addr.to_string().as_str())
    );
    assert_eq!(
        proxy.metric("robotsgate_downstream_refusals_total{reason=\"malformed\"}"),
        Some(2.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ip_literals_cannot_sneak_past_the_egress_policy() {
    let origin = TestOrigin::robots(ROBOTS).await;
    // No destination opened: loopback and private ranges are refused in every spelling.
    let proxy = Proxy::start(&Conf::new(), &[]);
    let port = origin.addr.port();
    for authority in [
        format!("127.0.0.1:{port}"),
        format!("[::1]:{port}"),
        format!("[::ffff:127.0.0.1]:{port}"),
        format!("[::ffff:7f00:1]:{port}"),
        "169.254.169.254".to_string(),
        "[::ffff:169.254.169.254]".to_string(),
        "[fd00::1]".to_string(),
        "10.0.0.1".to_string(),
    ] {
        let reply = raw_exchange(
            proxy.addr,
            format!("GET http://{authority}/public HTTP/1.1\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await;
        assert!(reply.starts_with("HTTP/1.1 403"), "{authority}: {reply}");
        assert!(reply.contains("egress-denied"), "{authority}: {reply}");
    }
    assert!(origin.seen().is_empty());
}
