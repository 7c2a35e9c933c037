//! Politeness beyond Crawl-delay over real sockets: the in-flight limit, the adaptive
//! delay, per-address schedules and operator overrides. The origins log when each
//! request arrived and when its response ended; every check is made there.

use serde_json::json;
use std::time::{Duration, Instant};

use crate::common::{
    concurrent, curl, eventually, gaps, most_at_once, pages, static_dns, Behaviour, Conf, Proxy,
    TestOrigin,
};

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

fn delayed(ms: u64) -> Behaviour {
    Behaviour::Delayed {
        delay: Duration::from_millis(ms),
        body: b"page\n".to_vec(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_two_clients_never_have_more_than_two_requests_at_an_origin() {
    let origin =
        TestOrigin::robots_and("User-agent: *\nDisallow:\n", vec![("/p", delayed(200))]).await;
    // Tight caps: some of the 32 cannot be served within 1 s and must be told so. Only
    // the in-flight limit paces here (the adaptive slow-down a 200 ms origin triggers
    // against its 1 ms /warm is tested on its own).
    let proxy = Proxy::start_for_loopback(
        &Conf::new()
            .set("pacing", json!({"max_wait_seconds": 1, "max_queue": 8}))
            .set("pacing.adaptive.enabled", false),
    );
    assert_eq!(curl(&proxy, &origin.url("/warm"), &[]).0, 200);
    let client = proxy.client();
    let tasks: Vec<_> = (0..32)
        .map(|_| {
            let client = client.clone();
            let url = origin.url("/p");
            tokio::spawn(async move {
                let r = client.get(url).send().await.expect("request");
                let retry = r.headers().get("retry-after").is_some();
                (r.status().as_u16(), retry)
            })
        })
        .collect();
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.expect("task"));
    }
    let served = answers.iter().filter(|(s, _)| *s == 200).count();
    assert!(
        answers
            .iter()
            .all(|&(s, retry)| s == 200 || (s == 503 && retry)),
        "{answers:?}"
    );
    assert!(served >= 4, "{answers:?}");
    assert!(
        served < 32,
        "the caps should have refused some: {answers:?}"
    );
    let seen = pages(&origin, "/p");
    assert_eq!(
        seen.len(),
        served,
        "every 200 reached the origin once, no 503 did"
    );
    assert_eq!(
        most_at_once(&seen),
        2,
        "at most max_in_flight (2) at the origin"
    );
    assert!(
        proxy
            .metric("robotsgate_pacing_in_flight_waits_total")
            .unwrap_or(0.0)
            > 0.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origin_that_slows_down_is_given_more_time() {
    let origin =
        TestOrigin::robots_and("User-agent: *\nDisallow:\n", vec![("/p", delayed(5))]).await;
    let proxy = Proxy::start_for_loopback(&Conf::new());
    assert_eq!(curl(&proxy, &origin.url("/warm"), &[]).0, 200);
    let run = |prefix: &'static str, n: usize| {
        let urls = (0..n)
            .map(|i| (origin.url(&format!("{prefix}{i}")), "X/1"))
            .collect::<Vec<_>>();
        async { concurrent(&proxy, urls).await }
    };
    // Fast: back to back.
    for i in 0..12 {
        origin.set(&format!("/fast{i}"), delayed(5));
    }
    assert_eq!(run("/fast", 12).await, vec![200; 12]);
    let fast = median(gaps(&pages(&origin, "/fast")));
    // Sixty times slower: the origin's own responses raise its delay.
    for i in 0..8 {
        origin.set(&format!("/slow{i}"), delayed(300));
    }
    assert_eq!(run("/slow", 8).await, vec![200; 8]);
    let slow = median(gaps(&pages(&origin, "/slow")));
    assert!(
        fast < Duration::from_millis(50),
        "fast origin spaced by {fast:?}"
    );
    assert!(
        slow >= Duration::from_millis(250),
        "slowed-down origin spaced by only {slow:?}"
    );
    assert!(
        proxy
            .metric("robotsgate_pacing_slow_downs_total{cause=\"latency\"}")
            .unwrap_or(0.0)
            > 0.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_without_retry_after_widen_the_spacing_until_the_origin_recovers() {
    let origin = TestOrigin::robots("User-agent: *\nDisallow:\n").await;
    for (i, status) in [503, 500, 503, 200, 200, 200, 200].iter().enumerate() {
        origin.set(&format!("/e{i}"), Behaviour::status(*status));
    }
    let proxy = Proxy::start_for_loopback(&Conf::new().set("pacing.ceiling_seconds", 2));
    assert_eq!(curl(&proxy, &origin.url("/warm"), &[]).0, 200);
    for i in 0..7 {
        curl(&proxy, &origin.url(&format!("/e{i}")), &[]);
    }
    let g = gaps(&pages(&origin, "/e"));
    // Backoff after each answer: 1 s, 2 s, 2 s (ceiling), then halving: 1, 0.5, 0.25 s.
    let at_least = |i: usize, ms: u64| g[i] >= Duration::from_millis(ms);
    assert!(
        at_least(0, 950) && at_least(1, 1_900) && at_least(2, 1_900),
        "{g:?}"
    );
    assert!(
        g[5] < Duration::from_millis(600) && g[5] < g[3],
        "recovered: {g:?}"
    );
}

/// One origin (Crawl-delay 0.4) that every name resolves to, through a name server of
/// the test's.
struct OneServer {
    dns: std::net::SocketAddr,
    origin: TestOrigin,
}

impl OneServer {
    /// One page per name (`{prefix}{name}`) through `proxy`, all sent at once: each
    /// answered 200.
    async fn all_at_once(&self, proxy: &Proxy, names: &[&str], prefix: &str) {
        let urls = names
            .iter()
            .map(|name| (self.url(name, &format!("{prefix}{name}")), "X/1"))
            .collect();
        assert_eq!(concurrent(proxy, urls).await, vec![200; names.len()]);
    }

    async fn start() -> OneServer {
        OneServer {
            dns: static_dns(vec!["127.0.0.1".parse().expect("ip")]).await,
            origin: TestOrigin::robots("User-agent: *\nCrawl-delay: 0.4\n").await,
        }
    }

    fn url(&self, name: &str, path: &str) -> String {
        format!("http://{name}:{}{path}", self.origin.addr.port())
    }

    /// robotsgate resolving through the test's name server, with `pacing.key: key`.
    fn proxy(&self, key: &str) -> Proxy {
        Proxy::start_for_loopback(
            &Conf::new()
                .set("dns.nameservers", json!([(self.dns)]))
                .set("pacing.key", key),
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_on_one_address_share_its_pace_with_key_address() {
    let server = OneServer::start().await;
    let (origin, url) = (&server.origin, |name: &str, path: &str| {
        server.url(name, path)
    });
    for (key, shared) in [("origin", false), ("address", true)] {
        let proxy = server.proxy(key);
        // robots.txt for each name first; then one page per name, all at once.
        for name in ["a.test", "b.test", "c.test"] {
            assert_eq!(curl(&proxy, &url(name, "/warm"), &[]).0, 200);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let prefix = format!("/{key}/");
        server
            .all_at_once(&proxy, &["a.test", "b.test", "c.test"], &prefix)
            .await;
        let seen = pages(origin, &prefix);
        let smallest = gaps(&seen).into_iter().min().expect("gaps");
        if shared {
            assert!(
                smallest >= Duration::from_millis(400),
                "key: address, gap {smallest:?}"
            );
        } else {
            assert!(
                smallest < Duration::from_millis(200),
                "key: origin, gap {smallest:?}"
            );
        }
    }
}

/// With `pacing.key: address` the robots.txt fetches of names on one server take its
/// turns too: every request the server receives, fetches included, keeps its pace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn robots_txt_fetches_of_names_on_one_address_keep_its_pace() {
    let server = OneServer::start().await;
    let (origin, url) = (&server.origin, |name: &str, path: &str| {
        server.url(name, path)
    });
    let proxy = server.proxy("address");
    assert_eq!(curl(&proxy, &url("a.test", "/warm"), &[]).0, 200);
    server
        .all_at_once(&proxy, &["b.test", "c.test", "d.test"], "/page/")
        .await;
    let seen = pages(origin, "/");
    assert_eq!(
        seen.iter().filter(|s| s.target == "/robots.txt").count(),
        4,
        "{seen:#?}"
    );
    let smallest = gaps(&seen).into_iter().min().expect("gaps");
    assert!(
        smallest >= Duration::from_millis(400),
        "a robots.txt fetch jumped the address's Crawl-delay: gap {smallest:?} in {seen:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_overrides_block_a_domain_and_lengthen_a_delay() {
    let dns = static_dns(vec!["127.0.0.1".parse().expect("ip")]).await;
    let origin = TestOrigin::robots("User-agent: *\nCrawl-delay: 0.1\n").await;
    let port = origin.addr.port();
    let proxy = Proxy::start_for_loopback(&Conf::new().set("log_format", "json").set("dns.nameservers", json!([(dns)])).set("pacing.overrides", json!([{"host": "*.blocked.test", "block": true, "reason": "asked us to stop"}, {"host": "slow.test", "delay_seconds": 0.6}])));
    let (status, head, body) = curl(&proxy, &format!("http://www.blocked.test:{port}/x"), &[]);
    assert_eq!(status, 403);
    assert!(
        head.contains("blocked; override=\"*.blocked.test\"; reason=\"asked us to stop\""),
        "{head}"
    );
    assert!(body.contains("asked us to stop"), "{body}");
    assert_eq!(
        origin.seen().len(),
        0,
        "nothing reached the origin, not even robots.txt"
    );
    // The same decision in /check.
    let check = std::process::Command::new("curl")
        .args([
            "-s",
            &format!(
                "http://{}/check?url=http%3A%2F%2Fblocked.test%3A{port}%2Fy",
                proxy.admin
            ),
        ])
        .output()
        .expect("curl");
    let check: serde_json::Value = serde_json::from_slice(&check.stdout).expect("json");
    assert_eq!(check["decision"], "blocked", "{check}");
    assert!(
        check["why"]
            .as_str()
            .is_some_and(|w| w.contains("*.blocked.test")),
        "{check}"
    );

    let statuses = concurrent(
        &proxy,
        (0..3)
            .map(|i| (format!("http://slow.test:{port}/s{i}"), "X/1"))
            .collect(),
    )
    .await;
    assert_eq!(statuses, vec![200; 3]);
    let smallest = gaps(&pages(&origin, "/s")).into_iter().min().expect("gaps");
    assert!(
        smallest >= Duration::from_millis(600),
        "override delay, gap {smallest:?}"
    );
}

/// A response that waits in robotsgate's socket while robotsgate is off the CPU (here:
/// stopped) is robotsgate's delay, not the origin's: no slow-down, and the origin's next
/// request comes at once. One the origin itself is slow to send still holds the next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_robotsgate_is_slow_to_read_is_not_the_origin_slowing_down() {
    let origin = TestOrigin::robots("User-agent: *\nDisallow:\n").await;
    for path in ["/warm", "/base0", "/base1", "/base2", "/stalled"] {
        origin.set(path, delayed(200));
    }
    origin.set("/slow", delayed(2_000));
    let proxy = Proxy::start_for_loopback(&Conf::new());
    let latency = "robotsgate_pacing_slow_downs_total{cause=\"latency\"}";
    for path in ["/warm", "/base0", "/base1", "/base2"] {
        assert_eq!(curl(&proxy, &origin.url(path), &[]).0, 200);
    }
    assert_eq!(proxy.metric(latency).unwrap_or(0.0), 0.0, "a steady origin");

    // The origin answers in its usual 200 ms, while robotsgate is stopped from the
    // moment the request reaches the origin until 1.5 s later.
    let client = proxy.client();
    let url = origin.url("/stalled");
    let request = tokio::spawn(async move { client.get(url).send().await.map(|r| r.status()) });
    assert!(
        eventually(Duration::from_secs(10), || origin.count("/stalled") == 1).await,
        "the request reached the origin"
    );
    let signal = |name: &str| {
        let status = std::process::Command::new("kill")
            .args([name, &proxy.pid().to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill {name}");
    };
    signal("-STOP");
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    signal("-CONT");
    let status = request.await.expect("join").expect("response");
    assert_eq!(status.as_u16(), 200);
    // Taken for the origin's, 1.7 s from the turn would hold the next request 1.7 s.
    let next_after = |answered: Instant, path: &str| {
        assert_eq!(curl(&proxy, &origin.url(path), &[]).0, 200);
        pages(&origin, path)[0].arrived.duration_since(answered)
    };
    let gap = next_after(Instant::now(), "/next");
    assert!(
        gap < Duration::from_secs(1),
        "1.5 s of 1.7 s sat unread in robotsgate's socket, yet the next request waited {gap:?}"
    );
    assert_eq!(proxy.metric(latency).unwrap_or(0.0), 0.0);

    // Ten times the origin's usual response time, all of it the origin's: the next
    // request waits at least that long.
    assert_eq!(curl(&proxy, &origin.url("/slow"), &[]).0, 200);
    let gap = next_after(Instant::now(), "/after-slow");
    assert!(
        gap >= Duration::from_millis(1_900),
        "a slowed-down origin's next request came after only {gap:?}"
    );
    assert_eq!(proxy.metric(latency).unwrap_or(0.0), 1.0);
}
