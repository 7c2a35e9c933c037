//! Reload and stop without dropping requests: a client loop runs across Pingora's
//! graceful upgrade (what `systemctl reload robotsgate` does) while the configuration
//! changes, and the change — a pacing floor — shows at the origin afterwards; a graceful
//! stop (`systemctl stop`) lets the requests in progress end.

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{admin, eventually, Behaviour, Conf, Proxy, TestOrigin};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_changes_config_without_failing_a_request() {
    let origin = TestOrigin::robots("User-agent: *\nAllow: /\n").await;
    let mut old = Proxy::start_for_loopback(&Conf::new().set("pacing.floor_seconds", 0));

    // The client: requests back to back, each on a new connection (what a reload must
    // not refuse), until told to stop. (With keep-alive, a request sent just as the old
    // process closes an idle connection fails with "incomplete message" — the HTTP/1.1
    // idle-close race every server has; clients retry those.)
    let stop = Arc::new(AtomicBool::new(false));
    let client = {
        let (stop, url, proxy) = (stop.clone(), origin.url("/page"), old.url());
        tokio::spawn(async move {
            let client = reqwest::Client::builder()
                .proxy(reqwest::Proxy::http(proxy).expect("proxy"))
                .pool_max_idle_per_host(0)
                .timeout(Duration::from_secs(20))
                .build()
                .expect("client");
            let (mut ok, mut failed) = (0u32, Vec::new());
            while !stop.load(Ordering::Relaxed) {
                match client.get(&url).send().await {
                    Ok(r) if r.status() == 200 => ok += 1,
                    Ok(r) => failed.push(format!("status {}", r.status())),
                    Err(e) => failed.push(format!("{e:?}")),
                }
            }
            (ok, failed)
        })
    };
    assert!(eventually(Duration::from_secs(10), || origin.count("/page") >= 20).await);

    // New configuration: a 0.3 s floor between requests to an origin.
    let config = std::fs::read_to_string(old.config_path()).expect("config");
    std::fs::write(
        old.config_path(),
        config.replace("floor_seconds: 0\n", "floor_seconds: 0.3\n"),
    )
    .expect("write config");
    let before = origin.count("/page");
    // Blocking (it polls the new process); the client and origin run on other threads.
    let new = tokio::task::block_in_place(|| old.upgrade());
    tokio::task::block_in_place(|| old.wait_exit(Duration::from_secs(20)));
    // Keep going on the new process for a while, then stop the client.
    let after_handover = origin.count("/page");
    assert!(
        eventually(Duration::from_secs(10), || origin.count("/page")
            >= after_handover + 5)
        .await
    );
    stop.store(true, Ordering::Relaxed);
    let (ok, failed) = client.await.expect("client");
    assert!(
        failed.is_empty(),
        "failed during reload: {failed:?}\n{}\n{}",
        old.log(),
        new.log()
    );
    assert!(ok as usize > before, "{ok}");

    // The new floor holds at the origin: the last requests arrived ≥ 0.3 s apart.
    let seen = origin.seen();
    let pages: Vec<Instant> = seen
        .iter()
        .filter(|s| s.target == "/page")
        .map(|s| s.arrived)
        .collect();
    let last = &pages[pages.len() - 4..];
    for pair in last.windows(2) {
        let gap = pair[1].duration_since(pair[0]);
        assert!(
            gap >= Duration::from_millis(300),
            "gap {gap:?} after reload"
        );
    }
    // Before the reload there was no floor: some gap was well under it.
    let early = &pages[..before.min(pages.len())];
    assert!(early
        .windows(2)
        .any(|p| p[1].duration_since(p[0]) < Duration::from_millis(100)));
}

/// A graceful stop (SIGTERM) lets the requests in progress end: a request the origin
/// takes 3 s to answer, in progress when the signal comes, is answered in full, and
/// the process exits after it (not a fixed `grace_period_seconds` later), `/readyz`
/// answering 503 and idle connections closing meanwhile (Pingora alone drops what is
/// in progress once `grace_period_seconds` have passed, and always waits them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_lets_requests_in_progress_end() {
    let origin = slow_origin(3000).await;
    // Pingora's fixed wait after the drain is skipped: the exit follows the drain.
    let conf = Conf::new()
        .server("graceful_shutdown_timeout_seconds", 10)
        .server("grace_period_seconds", 30);
    let mut proxy = Proxy::start_for_loopback(&conf);
    let (client, url) = (proxy.client(), origin.url("/slow"));
    let request = tokio::spawn(async move { client.get(url).send().await?.text().await });
    assert!(eventually(Duration::from_secs(10), || origin.count("/slow") == 1).await);
    assert_eq!(admin(&proxy, "GET", "/readyz").0, 200);
    let mut idle = kept_alive(&proxy, &origin.url("/fast"));
    let term = std::process::Command::new("kill")
        .args(["-TERM", &proxy.pid().to_string()])
        .status();
    assert!(term.expect("kill").success());
    // Meanwhile a front checking it sends it nothing new.
    let unready = eventually(Duration::from_secs(5), || {
        admin(&proxy, "GET", "/readyz").0 == 503
    });
    assert!(unready.await, "{}", proxy.log());
    // An idle kept-alive connection closes at once, not when the process exits.
    let mut rest = Vec::new();
    let closed = tokio::task::block_in_place(|| idle.read_to_end(&mut rest));
    assert!(closed.is_ok() && rest.is_empty(), "{closed:?} {rest:?}");
    assert!(
        !request.is_finished(),
        "closed only once the slow request ended"
    );
    let body = request.await.expect("task").map_err(|e| e.to_string());
    assert_eq!(body, Ok("slow\n".to_string()), "{}", proxy.log());
    assert_eq!(origin.count("/slow"), 1);
    tokio::task::block_in_place(|| proxy.wait_exit(Duration::from_secs(10)));
}

/// A graceful stop answers every request still waiting for its turn before it ends:
/// four requests queued behind a Crawl-delay of 5 s when SIGTERM comes, with
/// `graceful_shutdown_timeout_seconds: 2`, are each answered 503 `reason=stopping`
/// with `Retry-After` (none closed unanswered), and none reaches the origin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_answers_the_requests_waiting_for_their_turns() {
    let origin = TestOrigin::robots("User-agent: *\nCrawl-delay: 5\n").await;
    let conf = Conf::new().server("graceful_shutdown_timeout_seconds", 2);
    let mut proxy = Proxy::start_for_loopback(&conf);
    assert_eq!(
        crate::common::curl(&proxy, &origin.url("/first"), &[]).0,
        200
    );
    let client = proxy.client();
    let queued: Vec<_> = (0..4)
        .map(|i| {
            let (client, url) = (client.clone(), origin.url(&format!("/queued-{i}")));
            tokio::spawn(async move {
                let answer = client.get(url).send().await.map_err(|e| e.to_string())?;
                let header = |name: &str| {
                    let value = answer.headers().get(name);
                    value.and_then(|v| v.to_str().ok()).map(str::to_string)
                };
                let decision = header("x-robots-decision").unwrap_or_default();
                Ok::<_, String>((answer.status().as_u16(), decision, header("retry-after")))
            })
        })
        .collect();
    let waiting = eventually(Duration::from_secs(5), || {
        proxy.metric("robotsgate_pacing_queued_requests") == Some(4.0)
    });
    assert!(waiting.await, "never queued");
    let term = std::process::Command::new("kill")
        .args(["-TERM", &proxy.pid().to_string()])
        .status();
    assert!(term.expect("kill").success());
    for task in queued {
        let answer = task.await.expect("task");
        let (status, decision, retry) = answer.unwrap_or_else(|e| panic!("{e}\n{}", proxy.log()));
        assert_eq!(status, 503, "{decision}");
        assert!(decision.contains("reason=stopping"), "{decision}");
        assert_eq!(retry.as_deref(), Some("1"));
    }
    tokio::task::block_in_place(|| proxy.wait_exit(Duration::from_secs(10)));
    assert_eq!(crate::common::pages(&origin, "/queued").len(), 0);
}

/// A reload's old process serves what it has in progress for Pingora's 5 s and
/// `grace_period_seconds` more after handing its listeners over: a request the origin
/// takes 6.5 s to answer, in progress at the reload, is answered in full.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_lets_requests_in_progress_end_on_the_old_process() {
    let origin = slow_origin(6500).await;
    let mut old = Proxy::start_for_loopback(&Conf::new().server("grace_period_seconds", 4));
    let (client, url) = (old.client(), origin.url("/slow"));
    let request = tokio::spawn(async move { client.get(url).send().await?.text().await });
    assert!(eventually(Duration::from_secs(10), || origin.count("/slow") == 1).await);
    let new = tokio::task::block_in_place(|| old.upgrade());
    let body = request.await.expect("task").map_err(|e| e.to_string());
    assert_eq!(
        body,
        Ok("slow\n".to_string()),
        "{}\n{}",
        old.log(),
        new.log()
    );
    assert_eq!(origin.count("/slow"), 1);
    tokio::task::block_in_place(|| old.wait_exit(Duration::from_secs(20)));
}

/// An origin allowing everything whose `/slow` takes `millis` to answer `slow\n`, and
/// whose `/fast` answers `fast\n` at once.
async fn slow_origin(millis: u64) -> TestOrigin {
    TestOrigin::start_owned(&[
        (
            "/robots.txt".into(),
            Behaviour::ok("User-agent: *\nAllow: /\n"),
        ),
        ("/slow".into(), Behaviour::delayed(millis, "slow\n")),
        ("/fast".into(), Behaviour::ok("fast\n")),
    ])
    .await
}

/// A connection to `proxy` that fetched `url` (an answer of `fast\n`) and is kept alive,
/// idle; reads on it time out after 5 s.
fn kept_alive(proxy: &Proxy, url: &str) -> std::net::TcpStream {
    let mut stream = std::net::TcpStream::connect(proxy.addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let host = url.split('/').nth(2).expect("host");
    let request = format!("GET {url} HTTP/1.1\r\nHost: {host}\r\n\r\n");
    stream.write_all(request.as_bytes()).expect("write");
    let mut answer = Vec::new();
    let mut chunk = [0u8; 4096];
    while !answer.ends_with(b"fast\n") {
        let n = stream.read(&mut chunk).expect("read the answer");
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&answer));
        answer.extend_from_slice(&chunk[..n]);
    }
    stream
}
