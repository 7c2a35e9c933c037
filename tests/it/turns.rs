//! A turn lasts as long as the origin's exchange: clients that hang up (FIN, RST, curl's
//! timeout, python-requests' timeout), send their next request early, or are handed a
//! `103 Early Hints` cannot end it early, and a response that never ends is cut at
//! `pacing.max_exchange_seconds`. Every check is made at the origin, which logs when each
//! request arrived and when its response ended.

use serde_json::json;
use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::{
    curl, eventually, min_gap, most_at_once, pages, Behaviour, Conf, Proxy, TestOrigin,
};

fn slow(ms: u64) -> Behaviour {
    Behaviour::Delayed {
        delay: Duration::from_millis(ms),
        body: b"slow\n".to_vec(),
    }
}

/// The standard robots.txt for these tests.
const PRIVATE: &str = "User-agent: *\nDisallow: /private\n";

/// A chunked response that never ends, a chunk every `ms`.
fn endless(ms: u64) -> Behaviour {
    Behaviour::Endless {
        every: Duration::from_millis(ms),
        chunk: 6,
    }
}

/// An origin serving `robots` and `routes`.
async fn origin_with(robots: &str, mut routes: Vec<(&str, Behaviour)>) -> TestOrigin {
    routes.push(("/robots.txt", Behaviour::ok(robots)));
    TestOrigin::start(routes).await
}

/// robotsgate with `yaml`, its robots.txt copy of `origin` fetched by a first request.
fn warm_proxy(origin: &TestOrigin, conf: &Conf) -> Proxy {
    let proxy = Proxy::start_for_loopback(conf);
    assert_eq!(curl(&proxy, &origin.url("/warm"), &[]).0, 200);
    proxy
}

/// How a client leaves before its answer.
#[derive(Clone, Copy, Debug)]
enum HangUp {
    /// Closes its socket with RST (SO_LINGER 0).
    Reset,
    /// Closes its socket (FIN).
    Close,
    /// curl's `--max-time`.
    Curl,
    /// python-requests' `timeout=`.
    Python,
}

/// curl through `proxy` for `url`, giving up after `max_time` (`--max-time`).
async fn curl_giving_up(proxy: String, url: String, max_time: Duration) {
    let max_time = format!("{:.1}", max_time.as_secs_f64());
    tokio::task::spawn_blocking(move || {
        Command::new("curl")
            .args([
                "-s",
                "-o",
                "/dev/null",
                "--max-time",
                &max_time,
                "-x",
                &proxy,
                &url,
            ])
            .status()
    })
    .await
    .expect("join")
    .expect("curl");
}

/// One request for `url` through `proxy`, given up `after` its start the way `how` does.
async fn hang_up(proxy: SocketAddr, url: String, after: Duration, how: HangUp) {
    match how {
        HangUp::Reset | HangUp::Close => {
            let mut stream = TcpStream::connect(proxy).await.expect("connect");
            let host = url.split('/').nth(2).unwrap_or_default().to_string();
            let request = format!("GET {url} HTTP/1.1\r\nHost: {host}\r\n\r\n");
            stream.write_all(request.as_bytes()).await.expect("write");
            tokio::time::sleep(after).await;
            if matches!(how, HangUp::Reset) {
                #[allow(deprecated)]
                stream.set_linger(Some(Duration::ZERO)).expect("linger");
            }
            drop(stream);
        }
        HangUp::Curl => curl_giving_up(format!("http://{proxy}"), url, after).await,
        HangUp::Python => {
            let script = format!(
                "import requests\ntry:\n    requests.get({url:?}, proxies={{'http': 'http://{proxy}'}}, timeout={})\nexcept requests.exceptions.RequestException:\n    pass\n",
                after.as_secs_f64()
            );
            tokio::task::spawn_blocking(move || {
                Command::new("python3").args(["-c", &script]).status()
            })
            .await
            .expect("join")
            .expect("python3");
        }
    }
}

/// Clients arriving every 200 ms that each give up 300 ms in, while each response takes
/// 1.2 s: every turn must last until the origin's end, not the client's.
async fn staggered_hang_ups(proxy: &Proxy, origin: &TestOrigin) {
    let hows = [HangUp::Reset, HangUp::Close, HangUp::Curl, HangUp::Python];
    let tasks: Vec<_> = (0..12)
        .map(|i| {
            let (addr, url, how) = (proxy.addr, origin.url(&format!("/slow?{i}")), hows[i % 4]);
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(200 * i as u64)).await;
                hang_up(addr, url, Duration::from_millis(300), how).await;
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("client");
    }
    // A patient client last: it is answered once the origin is free.
    let (status, _, body) = curl(proxy, &origin.url("/slow?last"), &[]);
    assert_eq!((status, body.as_str()), (200, "slow\n"), "{}", proxy.log());
    assert!(
        eventually(Duration::from_secs(10), || pages(origin, "/slow")
            .iter()
            .all(|s| s.done.is_some()))
        .await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_hanging_up_never_put_more_than_max_in_flight_at_the_origin() {
    let origin = origin_with(PRIVATE, vec![("/slow", slow(1200))]).await;
    let proxy = warm_proxy(
        &origin,
        &Conf::new().set(
            "pacing",
            json!({"max_in_flight": 2, "max_wait_seconds": 30}),
        ),
    );
    staggered_hang_ups(&proxy, &origin).await;
    let seen = pages(&origin, "/slow");
    assert!(seen.len() >= 3, "{seen:#?}");
    assert!(
        most_at_once(&seen) <= 2,
        "max_in_flight 2, yet the origin served more at once: {seen:#?}"
    );
    assert!(
        proxy
            .metric("robotsgate_downstream_clients_left_total")
            .unwrap_or(0.0)
            >= 1.0,
        "a reset client is counted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_hanging_up_never_shorten_a_crawl_delay() {
    let origin = origin_with(
        "User-agent: *\nCrawl-delay: 0.5\n",
        vec![("/slow", slow(1200))],
    )
    .await;
    let proxy = warm_proxy(&origin, &Conf::new().set("pacing.max_wait_seconds", 30));
    staggered_hang_ups(&proxy, &origin).await;
    let seen = pages(&origin, "/");
    assert!(seen.len() >= 3, "{seen:#?}");
    assert_eq!(most_at_once(&seen), 1, "{seen:#?}");
    let gap = min_gap(&seen);
    assert!(
        gap >= Duration::from_millis(490),
        "Crawl-delay 0.5, yet a request started {gap:?} after the previous one ended: {seen:#?}"
    );
}

/// Reads one response (head and `Content-Length` body) from `stream`, after `already`.
async fn read_response(stream: &mut TcpStream, already: &mut Vec<u8>) -> String {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let text = String::from_utf8_lossy(already).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let length: usize = text[..end]
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })
                .unwrap_or(0);
            if already.len() >= end + 4 + length {
                let rest = already.split_off(end + 4 + length);
                let response = String::from_utf8_lossy(already).into_owned();
                *already = rest;
                return response;
            }
        }
        let mut buf = [0u8; 4096];
        let n = tokio::time::timeout_at(deadline.into(), stream.read(&mut buf))
            .await
            .expect("a response in time")
            .expect("read");
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(already));
        already.extend_from_slice(&buf[..n]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_next_request_sent_early_waits_for_the_pending_exchange() {
    let origin = origin_with(PRIVATE, vec![("/slow", slow(1000))]).await;
    let proxy = warm_proxy(
        &origin,
        &Conf::new().set(
            "pacing",
            json!({"max_in_flight": 2, "max_wait_seconds": 30}),
        ),
    );
    let host = origin.addr.to_string();
    let tasks: Vec<_> = (0..4)
        .map(|i| {
            let (addr, host) = (proxy.addr, host.clone());
            tokio::spawn(async move {
                let mut stream = TcpStream::connect(addr).await.expect("connect");
                let first = format!("GET http://{host}/slow?{i}a HTTP/1.1\r\nHost: {host}\r\n\r\n");
                stream.write_all(first.as_bytes()).await.expect("write");
                tokio::time::sleep(Duration::from_millis(300)).await;
                // The next request, long before the first is answered.
                let next = format!("GET http://{host}/slow?{i}b HTTP/1.1\r\nHost: {host}\r\n\r\n");
                stream.write_all(next.as_bytes()).await.expect("write");
                let mut already = Vec::new();
                let one = read_response(&mut stream, &mut already).await;
                let two = read_response(&mut stream, &mut already).await;
                (one, two)
            })
        })
        .collect();
    for task in tasks {
        let (one, two) = task
            .await
            .unwrap_or_else(|e| panic!("{e}\n{}", proxy.log()));
        assert!(
            one.starts_with("HTTP/1.1 200") && one.ends_with("slow\n"),
            "{one}"
        );
        assert!(
            two.starts_with("HTTP/1.1 200") && two.ends_with("slow\n"),
            "{two}"
        );
    }
    let seen = pages(&origin, "/slow");
    assert_eq!(seen.len(), 8, "{seen:#?}");
    assert!(most_at_once(&seen) <= 2, "{seen:#?}");
    for i in 0..4 {
        let a = seen
            .iter()
            .find(|s| s.target == format!("/slow?{i}a"))
            .expect("a");
        let b = seen
            .iter()
            .find(|s| s.target == format!("/slow?{i}b"))
            .expect("b");
        assert!(
            b.arrived >= a.done.expect("done"),
            "in order, one after the other"
        );
    }
}

/// A client that closes its sending side once its request is out (FIN, as netcat and
/// some HTTP/1.0 clients do) still gets its answer once its turn is granted, and its turn
/// lasts until the origin's end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_half_closing_after_its_request_still_gets_the_answer() {
    let origin = origin_with(PRIVATE, vec![("/slow", slow(800))]).await;
    let proxy = warm_proxy(
        &origin,
        &Conf::new().set(
            "pacing",
            json!({"max_in_flight": 1, "max_wait_seconds": 30}),
        ),
    );
    let host = origin.addr;
    let half = tokio::spawn(async move {
        let mut stream = TcpStream::connect(proxy.addr).await.expect("connect");
        let request = format!("GET http://{host}/slow?half HTTP/1.1\r\nHost: {host}\r\n\r\n");
        stream.write_all(request.as_bytes()).await.expect("write");
        tokio::time::sleep(Duration::from_millis(200)).await;
        stream.shutdown().await.expect("FIN");
        let response = read_response(&mut stream, &mut Vec::new()).await;
        (proxy, response)
    });
    assert!(eventually(Duration::from_secs(5), || origin.count("/slow?half") == 1).await);
    let (proxy, response) = half.await.expect("client");
    assert!(
        response.starts_with("HTTP/1.1 200") && response.ends_with("slow\n"),
        "{response}"
    );
    let (status, _, _) = curl(&proxy, &origin.url("/slow?next"), &[]);
    assert_eq!(status, 200);
    let seen = pages(&origin, "/slow");
    assert_eq!(seen.len(), 2, "{seen:#?}");
    assert_eq!(most_at_once(&seen), 1, "{seen:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_hints_reach_no_client_and_python_requests_keeps_its_turns() {
    let hinted = |codes: Vec<u16>| Behaviour::Informational {
        codes,
        delay: Duration::from_millis(400),
        body: b"hinted\n".to_vec(),
    };
    let origin = origin_with(
        PRIVATE,
        vec![
            ("/hints", hinted(vec![103])),
            ("/processing", hinted(vec![102, 103])),
        ],
    )
    .await;
    let proxy = warm_proxy(
        &origin,
        &Conf::new().set(
            "pacing",
            json!({"max_in_flight": 2, "max_wait_seconds": 30}),
        ),
    );
    // python-requests, 4 threads with one keep-alive Session each, for 3 s.
    let script = format!(
        r#"
import threading, time, requests
proxies = {{'http': '{proxy}'}}
bad = []
count = [0]
def crawl(path):
    s = requests.Session()
    end = time.time() + 3
    while time.time() < end:
        r = s.get('{base}' + path, proxies=proxies, timeout=20)
        count[0] += 1
        if r.status_code != 200 or r.text != 'hinted\n':
            bad.append((r.status_code, r.text[:80]))
threads = [threading.Thread(target=crawl, args=(p,)) for p in ['/hints', '/processing'] * 2]
[t.start() for t in threads]
[t.join() for t in threads]
print(count[0], bad)
"#,
        proxy = proxy.url(),
        base = origin.url(""),
    );
    let printed = tokio::task::spawn_blocking(move || {
        crate::common::run_ok(Command::new("python3").args(["-c", &script]))
    })
    .await
    .expect("join");
    assert!(
        printed.trim().ends_with("[]"),
        "every answer the final one: {printed}"
    );
    let seen: Vec<_> = pages(&origin, "/")
        .into_iter()
        .filter(|s| s.target != "/warm" && s.target != "/robots.txt")
        .collect();
    assert!(seen.len() >= 4 && seen.len() <= 20, "{}", seen.len());
    assert!(most_at_once(&seen) <= 2, "{seen:#?}");
    // On the wire: no 1xx reaches an HTTP/1.1 client, nor an HTTP/1.0 one.
    for version in ["1.1", "1.0"] {
        let mut stream = TcpStream::connect(proxy.addr).await.expect("connect");
        let host = origin.addr;
        let request = format!("GET http://{host}/hints HTTP/{version}\r\nHost: {host}\r\n\r\n");
        stream.write_all(request.as_bytes()).await.expect("write");
        let response = read_response(&mut stream, &mut Vec::new()).await;
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        assert!(!response.contains(" 103 "), "{response}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_never_ending_response_is_cut_at_max_exchange_and_the_origin_served_after_it() {
    let origin = origin_with(PRIVATE, vec![("/endless", endless(50))]).await;
    let proxy = warm_proxy(
        &origin,
        &Conf::new()
            .set(
                "pacing",
                json!({"max_in_flight": 1, "max_exchange_seconds": 1.5, "max_wait_seconds": 30}),
            )
            .set("upstream.read_timeout_seconds", 1),
    );
    let endless = tokio::spawn(curl_giving_up(
        proxy.url(),
        origin.url("/endless"),
        Duration::from_secs(10),
    ));
    assert!(eventually(Duration::from_secs(5), || origin.count("/endless") == 1).await);
    let (status, _, body) = curl(&proxy, &origin.url("/after"), &[]);
    assert_eq!(
        (status, body.as_str()),
        (200, "page /after\n"),
        "{}",
        proxy.log()
    );
    endless.await.expect("curl");
    let cut = &pages(&origin, "/endless")[0];
    let after = &pages(&origin, "/after")[0];
    let ended = cut
        .done
        .expect("the origin's endless response ended when cut");
    assert!(after.arrived >= ended, "{cut:#?} {after:#?}");
    // Cut at 1.5 s, then held the read timeout (1 s) more.
    let held = after.arrived - cut.arrived;
    assert!(held >= Duration::from_millis(2400), "{held:?}");
    assert_eq!(
        proxy.metric("robotsgate_upstream_exchange_ends_total{end=\"cut_max_exchange\"}"),
        Some(1.0)
    );
}

/// The review's last row: one client holds two never-ending responses and reads
/// nothing. Both are cut at `max_exchange_seconds` and counted, and the origin's other
/// clients are served once the cut turns' linger has passed, never beside them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_ending_responses_held_unread_free_the_origin_after_the_cut() {
    let origin = origin_with(PRIVATE, vec![("/endless", endless(20))]).await;
    let proxy = warm_proxy(
        &origin,
        &Conf::new()
            .set(
                "pacing",
                json!({"max_in_flight": 2, "max_exchange_seconds": 1.5, "max_wait_seconds": 60}),
            )
            .set(
                "upstream",
                json!({"read_timeout_seconds": 1, "write_timeout_seconds": 1}),
            ),
    );
    let mut unread = Vec::new();
    for i in 0..2 {
        let mut stream = TcpStream::connect(proxy.addr).await.expect("connect");
        let host = origin.addr;
        let request = format!("GET http://{host}/endless?{i} HTTP/1.1\r\nHost: {host}\r\n\r\n");
        stream.write_all(request.as_bytes()).await.expect("write");
        unread.push(stream);
    }
    assert!(
        eventually(Duration::from_secs(5), || pages(&origin, "/endless").len()
            == 2)
        .await
    );
    let (status, _, _) = curl(&proxy, &origin.url("/after"), &[]);
    assert_eq!(status, 200, "{}", proxy.log());
    let after = &pages(&origin, "/after")[0];
    for cut in pages(&origin, "/endless") {
        assert!(
            after.arrived >= cut.done.expect("cut"),
            "served while an endless response ran: {cut:#?} {after:#?}"
        );
    }
    assert_eq!(
        proxy.metric("robotsgate_upstream_exchange_ends_total{end=\"cut_max_exchange\"}"),
        Some(2.0)
    );
    drop(unread);
}
