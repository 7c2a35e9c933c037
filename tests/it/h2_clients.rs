//! HTTP/2 from crawlers (`tls.http2: auto`, the default): inside an intercepted CONNECT
//! tunnel a client that picks `h2` gets it, and every stream is a request through the
//! same pipeline as over HTTP/1.1: robots.txt, pacing at the origin, metrics with
//! `protocol="h2"`, the access log. A refused stream gets its answer on that stream
//! and the others go on. Clients: curl (nghttp2), an h2-only client on PyPI `h2`
//! (`tests/helpers/crawler/h2_client.py`, ALPN `h2` alone) and headless Chromium. The
//! transparent TLS listener is tested in `transparent.rs`, attacks in `h2_attacks.rs`.

use std::process::Command;
use std::time::Duration;

use crate::common::{curl, eventually, min_gap, most_at_once, pages, Behaviour, Conf};
use crate::https::Setup;

const ROBOTS: &str = "User-agent: *\nDisallow: /private\nCrawl-delay: 0.3\n";

/// The h2-only client's path.
pub(crate) const H2_CLIENT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/helpers/crawler/h2_client.py"
);

/// Runs the h2-only client through `s`'s proxy for `target` (host:port): its JSON
/// report, or its failure (exit status and stderr).
pub(crate) fn h2_client(
    s: &Setup,
    target: &str,
    args: &[&str],
) -> Result<serde_json::Value, String> {
    let out = Command::new("python3")
        .arg(H2_CLIENT)
        .args(args)
        .args(["--target", target, "--proxy", &s.proxy.addr.to_string()])
        .arg("--cafile")
        .arg(&s.operator_ca)
        .output()
        .expect("python3");
    if !out.status.success() {
        return Err(format!(
            "{}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// The statuses of a `get` report, by path.
pub(crate) fn statuses(report: &serde_json::Value) -> Vec<(String, u64)> {
    report["responses"]
        .as_array()
        .expect("responses")
        .iter()
        .map(|r| {
            (
                r["path"].as_str().unwrap_or("").to_string(),
                r["status"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

/// curl through the proxy, trusting the operator CA, with `extra` options.
fn curl_h2(s: &Setup, url: &str, extra: &[&str]) -> (u16, String, String) {
    let ca = s.operator_ca.to_string_lossy().into_owned();
    let mut args = vec!["--cacert", ca.as_str(), "--suppress-connect-headers"];
    args.extend_from_slice(extra);
    curl(&s.proxy, url, &args)
}

/// curl fetching `urls` at once over h2 through the proxy (`--parallel`: streams of
/// as few connections as robotsgate's stream limit allows): how many came back `200`
/// over HTTP/2, and what curl said.
fn curl_parallel(s: &Setup, urls: &[String]) -> (usize, String) {
    let (fetched, said) = curl_parallel_once(s, urls);
    // curl 7.88 in `--parallel` through a proxy sometimes fails a transfer inside curl,
    // before it sends a single octet ("send: no filter connected"), and aborts the
    // others: nothing reached robotsgate, so the same transfers are started once more.
    if fetched == 0 && said.contains("no filter connected") {
        return curl_parallel_once(s, urls);
    }
    (fetched, said)
}

/// [`curl_parallel`]'s one run of curl.
fn curl_parallel_once(s: &Setup, urls: &[String]) -> (usize, String) {
    let ca = s.operator_ca.to_string_lossy().into_owned();
    let out = Command::new("curl")
        .args(["-s", "-S", "--max-time", "30", "--http2", "--parallel"])
        .args(["--parallel-max", "6", "-x", &s.proxy.url(), "--cacert", &ca])
        .args(["-o", "/dev/null", "-w", "%{http_version} %{http_code}\\n"])
        .args(urls)
        .output()
        .expect("curl");
    let printed = String::from_utf8_lossy(&out.stdout);
    let fetched = printed.lines().filter(|l| *l == "2 200").count();
    (
        fetched,
        format!("{printed}{}", String::from_utf8_lossy(&out.stderr)),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_over_h2_is_judged_and_paced_stream_by_stream() {
    let s = Setup::start(&Conf::new()).await;
    let origin = s.origin(ROBOTS).await;

    let (status, head, _) = curl_h2(&s, &origin.url("/page/a"), &["--http2"]);
    assert_eq!(status, 200, "{head}\n{}", s.proxy.log());
    assert!(head.starts_with("HTTP/2 200"), "{head}");
    let (status, head, body) = curl_h2(&s, &origin.url("/private/x"), &["--http2"]);
    assert!(head.starts_with("HTTP/2 403"), "{head}");
    assert_eq!(status, 403);
    assert!(body.contains("robots.txt"), "{body}");
    assert_eq!(origin.count("/private/x"), 0);
    // `:authority` names the origin as `Host` does: another one is misdirected.
    let (status, head, _) = curl_h2(
        &s,
        &origin.url("/page/b"),
        &["--http2", "-H", "Host: elsewhere.example"],
    );
    assert_eq!(status, 421, "{head}");
    assert_eq!(origin.count("/page/b"), 0);

    // Six requests multiplexed on one connection (`--parallel`): each one paced.
    let urls: Vec<String> = (0..6).map(|i| origin.url(&format!("/many/{i}"))).collect();
    let (fetched, said) = curl_parallel(&s, &urls);
    assert_eq!(fetched, 6, "{said}");
    let seen = pages(&origin, "/many/");
    assert_eq!(seen.len(), 6);
    assert!(most_at_once(&seen) <= 1, "{seen:?}");
    let gap = min_gap(&seen);
    assert!(gap >= Duration::from_millis(300), "gap {gap:?}");

    assert_eq!(
        s.proxy.counted(
            "robotsgate_requests_total{decision=\"allowed\",mode=\"tunnel\",protocol=\"h2\",scheme=\"https\"}",
            7.0
        ).await,
        7.0
    );
    assert_eq!(
        s.proxy.counted(
            "robotsgate_requests_total{decision=\"disallowed\",mode=\"tunnel\",protocol=\"h2\",scheme=\"https\"}",
            1.0
        ).await,
        1.0
    );
    s.proxy.log_with(|l| l.contains("protocol=\"h2\"")).await;
    // Every stream's slot is given back.
    assert!(
        eventually(Duration::from_secs(5), || {
            s.proxy.metric("robotsgate_downstream_h2_streams") == Some(0.0)
        })
        .await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h2_only_client_gets_each_answer_on_its_own_stream() {
    let s = Setup::start(&Conf::new()).await;
    let origin = s.origin(ROBOTS).await;
    let target = format!("localhost:{}", origin.addr.port());
    let report = h2_client(
        &s,
        &target,
        &["get", "/p/1", "/private/a", "/p/2", "/p/3", "/private/b"],
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", s.proxy.log()));
    assert_eq!(report["alpn"], "h2");
    let got = statuses(&report);
    let want: Vec<(String, u64)> = [
        ("/p/1", 200),
        ("/private/a", 403),
        ("/p/2", 200),
        ("/p/3", 200),
        ("/private/b", 403),
    ]
    .iter()
    .map(|(p, s)| (p.to_string(), *s))
    .collect();
    assert_eq!(got, want, "{}", s.proxy.log());
    let seen = pages(&origin, "/p/");
    assert_eq!(seen.len(), 3);
    assert!(min_gap(&seen) >= Duration::from_millis(300));
    assert_eq!(origin.count("/private/a") + origin.count("/private/b"), 0);
    // The refusal is the proxy's own, with its decision header.
    let responses = report["responses"].as_array().expect("responses");
    assert!(responses[1]["headers"]["x-robots-decision"]
        .as_str()
        .is_some_and(|d| d.starts_with("disallowed")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_count_against_the_clients_share_and_the_connections_limit() {
    // One client: its connection and two streams fill its three slots; the other
    // streams are answered 503 on their own streams while the first two go on.
    let s = Setup::start(
        &Conf::new()
            .set("limits.max_connections_per_client", 3)
            .set("pacing.max_in_flight", 10),
    )
    .await;
    let origin = s.origin("User-agent: *\nAllow: /\n").await;
    origin.set("/slow", Behaviour::delayed(800, "slow\n"));
    let target = format!("localhost:{}", origin.addr.port());
    let report = h2_client(
        &s,
        &target,
        &["get", "/slow", "/slow", "/slow", "/slow", "/slow"],
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", s.proxy.log()));
    let mut got: Vec<u64> = statuses(&report).iter().map(|(_, s)| *s).collect();
    got.sort_unstable();
    assert_eq!(got, [200, 200, 503, 503, 503], "{}", s.proxy.log());
    assert_eq!(origin.count("/slow"), 2);
    assert!(
        s.proxy
            .counter("robotsgate_downstream_refusals_total{reason=\"client_connection_limit\"}")
            >= 3.0
    );

    assert_eq!(report["max_concurrent_streams"], 100);

    // Streams per connection: robotsgate says two at once, and a client keeps to it
    // (curl opens a connection per two of its six parallel requests).
    let s = Setup::start(
        &Conf::new()
            .set("limits.max_streams_per_connection", 2)
            .set("pacing.max_in_flight", 10),
    )
    .await;
    let origin = s.origin("User-agent: *\nAllow: /\n").await;
    for i in 0..6 {
        origin.set(&format!("/slow/{i}"), Behaviour::delayed(300, "slow\n"));
    }
    let target = format!("localhost:{}", origin.addr.port());
    let report = h2_client(&s, &target, &["get", "/slow/0"]).expect("h2 client");
    assert_eq!(report["max_concurrent_streams"], 2);
    let urls: Vec<String> = (0..6).map(|i| origin.url(&format!("/slow/{i}"))).collect();
    let (fetched, said) = curl_parallel(&s, &urls);
    assert_eq!(fetched, 6, "{said}\n{}", s.proxy.log());
    assert_eq!(pages(&origin, "/slow/").len(), 7, "one stream, then six");
    let tunnels = s
        .proxy
        .counter("robotsgate_connect_tunnels_total{mode=\"intercepted\",outcome=\"established\"}");
    assert!(
        tunnels >= 4.0,
        "{tunnels} tunnels for 1 + 6 requests two at a time"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_http2_off_tunnels_speak_http1_only() {
    let s = Setup::start(&Conf::new().set("tls.http2", "off")).await;
    let origin = s.origin(ROBOTS).await;
    let (status, head, _) = curl_h2(&s, &origin.url("/page"), &["--http2"]);
    assert_eq!(status, 200);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // A client that speaks h2 only finds no protocol in common: the handshake fails.
    let target = format!("localhost:{}", origin.addr.port());
    let refused = h2_client(&s, &target, &["get", "/page"]);
    assert!(refused.is_err(), "{refused:?}");
    assert_eq!(origin.count("/page"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_negotiates_h2_and_its_subresources_are_judged_and_paced() {
    let s = Setup::start(&Conf::new()).await;
    let origin = s
        .origin("User-agent: *\nDisallow: /private/\nCrawl-delay: 0.3\n")
        .await;
    let page = "<html><body><p id=done>page</p>\
        <img src=\"/img/a.png\"><img src=\"/private/b.png\"><img src=\"/img/c.png\">\
        <script src=\"/js/d.js\"></script></body></html>";
    origin.set(
        "/index.html",
        Behaviour::with_headers(200, &[("Content-Type", "text/html")], page),
    );
    let profile = tempfile::tempdir().expect("profile");
    let proxy = format!("--proxy-server=http://{}", s.proxy.addr);
    let dom = crate::status_page::chromium(
        profile.path(),
        &[
            &proxy,
            "--proxy-bypass-list=<-loopback>",
            // The operator CA is not in the profile's store; the leaf is robotsgate's.
            "--ignore-certificate-errors",
            "--dump-dom",
        ],
        &origin.url("/index.html"),
    );
    assert!(dom.contains("id=\"done\""), "{dom}");
    // The page and its allowed subresources reached the origin; the disallowed one
    // did not.
    for path in ["/index.html", "/img/a.png", "/img/c.png", "/js/d.js"] {
        assert_eq!(origin.count(path), 1, "{path}: {:?}", origin.seen());
    }
    assert_eq!(origin.count("/private/b.png"), 0);
    // Every request Chromium made went over h2, each paced at the origin.
    // (Chromium's own background requests to Google go through the proxy too.)
    let ours = format!("origin=\"https://localhost:{}\"", origin.addr.port());
    // Access lines are written just after each answer: polled for.
    let count = || s.proxy.log().lines().filter(|l| l.contains(&ours)).count();
    eventually(Duration::from_secs(5), || count() >= 5).await;
    let log = s.proxy.log();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains(&ours)).collect();
    assert!(lines.len() >= 5, "{log}");
    assert!(lines.iter().all(|l| l.contains("protocol=\"h2\"")), "{log}");
    assert!(lines
        .iter()
        .any(|l| l.contains("/private/b.png") && l.contains("decision=\"disallowed\"")));
    let mut seen = origin.seen();
    seen.retain(|r| r.target != "/robots.txt");
    assert!(min_gap(&seen) >= Duration::from_millis(300), "{seen:?}");
}

/// A client that resets its streams once their exchanges have started does not end
/// them: each stream becomes a sink, the origin's responses are read to their end, the
/// turns end with them (not a read timeout later), and the resets are counted as the
/// client leaving, not as upstream errors. Another client is then served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_streams_are_read_out_and_the_origin_is_not_frozen() {
    use crate::common::Behaviour;
    let s = Setup::start(&Conf::new().set("pacing.max_in_flight", 2)).await;
    let origin = s.origin("User-agent: *\nAllow: /\n").await;
    origin.set(
        "/slow",
        Behaviour::Delayed {
            delay: std::time::Duration::from_secs(1),
            body: b"slow\n".to_vec(),
        },
    );
    let target = origin
        .url("")
        .trim_start_matches("https://")
        .trim_end_matches('/')
        .to_string();
    let report = h2_client(
        &s,
        &target,
        &[
            "rapid-reset",
            "2",
            "--batch",
            "2",
            "--gap",
            "0.3",
            "--path",
            "/slow",
            "--hold",
            "0.2",
        ],
    )
    .expect("h2 client");
    assert_eq!(report["sent"], 2, "{report}");
    // The bystander queues behind the two turns and is served once they end.
    let (status, _, _) = curl(
        &s.proxy,
        &origin.url("/after"),
        &[
            "--cacert",
            &s.operator_ca.to_string_lossy(),
            "--suppress-connect-headers",
            "--http2",
        ],
    );
    assert_eq!(status, 200, "{}", s.proxy.log());
    // The origin notes an answer's end (the moment of its last write) once its handler
    // has returned, which may be after the bystander's answer came back: polled.
    let ended = || {
        let slow = pages(&origin, "/slow");
        slow.len() == 2 && slow.iter().all(|r| r.done.is_some())
    };
    let both_ended = eventually(Duration::from_secs(10), ended).await;
    let slow = pages(&origin, "/slow");
    assert!(both_ended, "both answered to their end: {slow:?}");
    let after = origin.first("/after");
    assert!(
        slow.iter().all(|r| r
            .done
            .is_some_and(|d| d <= after.arrived + crate::common::JITTER)),
        "the bystander came after both ends: {slow:?} {after:?}"
    );
    let metric = |name: &str| s.proxy.counter(name);
    assert_eq!(
        metric("robotsgate_upstream_exchange_ends_total{end=\"cut_other\"}"),
        0.0
    );
    assert_eq!(metric("robotsgate_downstream_clients_left_total"), 2.0);
    assert_eq!(
        metric("robotsgate_requests_total{decision=\"upstream_error\",mode=\"tunnel\",protocol=\"h2\",scheme=\"https\"}"),
        0.0
    );
}
