//! Fault injection: loopback origins that misbehave on purpose, all at once, while a
//! healthy origin is crawled through the same proxy. Each fault must get the SPEC's
//! decision within the configured timeouts, the healthy origin must keep being served
//! meanwhile (its latency is printed), and the proxy's memory must stay bounded.

use serde_json::json;
use std::time::{Duration, Instant};

use crate::common::{get_status, rss_bytes, servfail_dns, Behaviour, Conf, Proxy, TestOrigin};

const RULES: &str = "User-agent: *\nDisallow: /private\n";

/// One misbehaving origin and what a request to it must get.
struct Fault {
    name: &'static str,
    url: String,
    status: u16,
    /// Text the `X-Robots-Decision` header (or, for the origin's own answer, nothing) has.
    decision: &'static str,
}

fn big_robots() -> Behaviour {
    // The rules up front, then 10 MB that must never be held.
    let mut body = RULES.as_bytes().to_vec();
    body.extend(std::iter::repeat_n(b'#', 10 * 1024 * 1024));
    Behaviour::Respond {
        status: 200,
        headers: vec![],
        body,
    }
}

fn garbage() -> Behaviour {
    // Deterministic binary noise (xorshift), NULs and invalid UTF-8 included.
    let mut x: u32 = 0x9e37_79b9;
    let body = (0..64 * 1024)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect();
    Behaviour::Respond {
        status: 200,
        headers: vec![("Content-Type".into(), "application/octet-stream".into())],
        body,
    }
}

fn chain(hops: usize) -> Vec<(String, Behaviour)> {
    let mut routes: Vec<(String, Behaviour)> = (0..hops)
        .map(|i| {
            let from = if i == 0 {
                "/robots.txt".to_string()
            } else {
                format!("/hop{i}.txt")
            };
            (
                from,
                Behaviour::redirect(301, &format!("/hop{}.txt", i + 1)),
            )
        })
        .collect();
    routes.push((
        format!("/hop{hops}.txt"),
        Behaviour::ok("User-agent: *\nDisallow: /\n"),
    ));
    routes
}

async fn origin(routes: Vec<(String, Behaviour)>) -> TestOrigin {
    TestOrigin::start_owned(&routes).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fault_gets_its_decision_while_a_healthy_origin_is_served() {
    let dns = servfail_dns().await;
    let proxy = Proxy::start_for_loopback(
        &Conf::new()
            .set("dns.nameservers", json!([(dns)]))
            .set("robots.fetch_timeout_seconds", 2)
            .set("upstream.read_timeout_seconds", 2)
            .set("pacing.max_wait_seconds", 3),
    );
    let healthy = TestOrigin::robots(RULES).await;
    let (faults, _origins) = faulty_origins(&healthy).await;

    // Warm up, then take the memory baseline.
    let client = proxy.client();
    assert_eq!(
        client
            .get(healthy.url("/warm"))
            .send()
            .await
            .expect("warm")
            .status(),
        200
    );
    let rss_before = rss_bytes(proxy.pid());

    let started = Instant::now();
    let tasks: Vec<_> = faults
        .into_iter()
        .map(|fault| {
            let client = client.clone();
            tokio::spawn(async move {
                let response = client.get(&fault.url).send().await;
                (
                    fault,
                    response.map(|r| {
                        let decision = r
                            .headers()
                            .get("x-robots-decision")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or("")
                            .to_string();
                        (r.status().as_u16(), decision)
                    }),
                    started.elapsed(),
                )
            })
        })
        .collect();

    // The healthy origin is crawled while the faults play out.
    let mut latencies = Vec::new();
    let mut during_faults = 0;
    while tasks.iter().any(|t| !t.is_finished()) {
        let sent = Instant::now();
        let status = client
            .get(healthy.url(&format!("/page/{}", latencies.len())))
            .send()
            .await
            .expect("healthy request")
            .status();
        assert_eq!(status, 200);
        latencies.push(sent.elapsed());
        if tasks.iter().any(|t| !t.is_finished()) {
            during_faults += 1;
        }
    }
    for task in tasks {
        let (fault, result, took) = task.await.expect("task");
        fault.was_decided(result, took, &proxy);
    }
    assert!(
        during_faults >= 10,
        "the healthy origin was served meanwhile ({during_faults})"
    );
    latencies.sort();
    let pct = |p: usize| latencies[(latencies.len() - 1) * p / 100].as_secs_f64() * 1e3;
    println!(
        "healthy origin during the faults: {} requests, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        latencies.len(),
        pct(50),
        pct(99),
        pct(100)
    );
    // 6 × 10 MB robots.txt were offered; at most 500 KiB of each was read.
    let rss_after = rss_bytes(proxy.pid());
    let grew = rss_after.saturating_sub(rss_before);
    println!(
        "proxy RSS {:.1} MiB -> {:.1} MiB",
        rss_before as f64 / 1048576.0,
        rss_after as f64 / 1048576.0
    );
    assert!(grew < 40 * 1024 * 1024, "RSS grew by {grew} bytes");
}

/// The origins each fault comes from (kept until the test ends) and each fault's URL,
/// with the answer and decision expected: robots.txt trickling, reset, 10 MB (six),
/// binary, HTML, redirecting in a loop or six times, an unresolvable name, an origin
/// that never answers.
async fn faulty_origins(healthy: &TestOrigin) -> (Vec<Fault>, Vec<TestOrigin>) {
    let one = |b: Behaviour| vec![("/robots.txt".to_string(), b)];

    let trickle = origin(one(Behaviour::Trickle {
        body: RULES.as_bytes().to_vec(),
        every: Duration::from_secs(1),
    }))
    .await;
    let reset = origin(one(Behaviour::ResetMidBody {
        body: RULES.as_bytes().to_vec(),
        total: 100_000,
    }))
    .await;
    let mut big = Vec::new();
    for _ in 0..6 {
        big.push(origin(one(big_robots())).await);
    }
    let binary = origin(one(garbage())).await;
    let html = origin(one(Behaviour::ok(
        "<!DOCTYPE html><html><body><h1>Welcome</h1><p>Not a robots.txt</p></body></html>\n",
    )))
    .await;
    let looping = origin(vec![
        ("/robots.txt".into(), Behaviour::redirect(302, "/loop.txt")),
        ("/loop.txt".into(), Behaviour::redirect(302, "/robots.txt")),
    ])
    .await;
    let six_hops = origin(chain(6)).await;
    let hanging = origin(vec![
        ("/robots.txt".into(), Behaviour::ok(RULES)),
        (
            "/hang".into(),
            Behaviour::Delayed {
                delay: Duration::from_secs(3600),
                body: vec![],
            },
        ),
    ])
    .await;

    let mut faults = vec![
        Fault::new(
            "robots.txt trickles 1 octet/s",
            trickle.url("/page"),
            503,
            "robots-unreachable",
        ),
        Fault::new(
            "robots.txt resets mid-body",
            reset.url("/page"),
            503,
            "robots-unreachable",
        ),
        Fault::new(
            "robots.txt is binary garbage",
            binary.url("/private"),
            200,
            "",
        ),
        Fault::new("robots.txt is an HTML page", html.url("/private"), 200, ""),
        Fault::new(
            "robots.txt redirects in a loop",
            looping.url("/private"),
            200,
            "",
        ),
        Fault::new(
            "robots.txt behind 6 redirects",
            six_hops.url("/private"),
            200,
            "",
        ),
        Fault::new(
            "name does not resolve",
            format!("http://unresolvable.test:{}/page", healthy.addr.port()),
            503,
            "robots-unreachable",
        ),
        Fault::new(
            "origin accepts and never answers",
            hanging.url("/hang"),
            504,
            "upstream-error; reason=\"timeout\"",
        ),
    ];
    for (i, b) in big.iter().enumerate() {
        // The first 500 KiB hold the rules: /private is disallowed, the rest ignored.
        let url = b.url(&format!("/private/{i}"));
        faults.push(Fault::new("robots.txt is 10 MB", url, 403, "disallowed"));
    }
    let mut origins = vec![trickle, reset, binary, html, looping, six_hops, hanging];
    origins.extend(big);
    (faults, origins)
}

impl Fault {
    /// A fault named `name`, met by a GET of `url`, expected to be answered `status` with
    /// `decision` in `X-Robots-Decision`.
    fn new(name: &'static str, url: String, status: u16, decision: &'static str) -> Fault {
        Fault {
            name,
            url,
            status,
            decision,
        }
    }

    /// Asserts the answer this fault's request got after `took`: its status and decision.
    fn was_decided(&self, result: reqwest::Result<(u16, String)>, took: Duration, proxy: &Proxy) {
        let (status, decision) = result.unwrap_or_else(|e| panic!("{}: {e}", self.name));
        println!(
            "{:<36} {status} after {:.2} s  {decision}",
            self.name,
            took.as_secs_f64()
        );
        assert_eq!(
            status,
            self.status,
            "{}: {decision}\n{}",
            self.name,
            proxy.log()
        );
        assert!(
            decision.contains(self.decision),
            "{}: {decision}",
            self.name
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_5xx_storm_is_backed_off_not_amplified() {
    let proxy = Proxy::start_for_loopback(&Conf::new().set("pacing.max_wait_seconds", 3));
    let storm = TestOrigin::robots("User-agent: *\n").await;
    let healthy = TestOrigin::robots("User-agent: *\n").await;
    for i in 0..10 {
        storm.set(&format!("/p{i}"), Behaviour::status(503));
    }
    let client = proxy.client();
    let mut statuses = Vec::new();
    for i in 0..10 {
        let response = client
            .get(storm.url(&format!("/p{i}")))
            .send()
            .await
            .expect("storm");
        statuses.push(response.status().as_u16());
        // Other origins are not held up by this one's backoff.
        assert_eq!(
            get_status(&client, healthy.url(&format!("/h{i}"))).await,
            200
        );
    }
    assert!(statuses.iter().all(|s| *s == 503), "{statuses:?}");
    let reached = storm
        .seen()
        .iter()
        .filter(|s| s.target.starts_with("/p"))
        .count();
    // Backoff doubles from 1 s; waits over pacing.max_wait_seconds are answered at once.
    assert!(
        reached < 10,
        "the origin saw {reached} of 10 during its storm"
    );
    let paced = proxy
        .counted("robotsgate_requests_total{decision=\"paced_rejected\",mode=\"explicit\",protocol=\"http/1.1\",scheme=\"http\"}", 10.0 - reached as f64)
        .await;
    assert_eq!(
        paced as usize + reached,
        10,
        "each request went up or was answered 503 by robotsgate"
    );
    println!("5xx storm: origin reached {reached} times, robotsgate answered {paced} itself");
}
