//! Report-only mode over real sockets: what would be refused is forwarded, counted,
//! logged and labelled; pacing records its wait without holding; egress is enforced.

use std::time::Duration;

use crate::common::{curl, gaps, pages, Behaviour, Proxy, TestOrigin};

const ROBOTS: &str = "User-agent: *\nCrawl-delay: 1\nDisallow: /private\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_mode_forwards_what_it_would_refuse_and_says_so() {
    let origin = TestOrigin::start(vec![("/robots.txt", Behaviour::ok(ROBOTS))]).await;
    let proxy = Proxy::start_for_loopback("  log_format: json\n  enforce:\n    mode: report\n");
    let (status, head, _) = curl(&proxy, &origin.url("/private/a"), &[]);
    assert_eq!(status, 200, "{head}");
    assert!(
        head.contains("X-Robots-Decision: would-disallow; robots=\"")
            && head.contains("rule=\"/private\"; line=3"),
        "{head}"
    );
    assert_eq!(origin.count("/private/a"), 1, "forwarded");
    // Pacing is recorded, not imposed: the next request goes at once.
    assert_eq!(curl(&proxy, &origin.url("/b"), &[]).0, 200);
    let seen = pages(&origin, "/");
    let seen: Vec<_> = seen
        .into_iter()
        .filter(|s| s.target != "/robots.txt")
        .collect();
    assert!(
        gaps(&seen)[0] < Duration::from_millis(900),
        "{:?}",
        gaps(&seen)
    );
    assert!(
        proxy
            .metric("robotsgate_pacing_would_wait_seconds_sum")
            .is_some_and(|s| s > 0.5),
        "the second request would have waited about a second"
    );
    assert_eq!(
        proxy.metric(
            "robotsgate_requests_total{decision=\"would_disallow\",mode=\"explicit\",scheme=\"http\"}"
        ),
        Some(1.0)
    );
    let log = proxy.log();
    assert!(
        log.lines()
            .any(|l| l.contains("\"decision\":\"would_disallow\"")
                && l.contains("\"line\":3")
                && l.contains("would-disallow")),
        "{log}"
    );
    // Egress refusals are never report-only.
    let (status, _, _) = curl(&proxy, "http://10.255.255.1/x", &[]);
    assert_eq!(status, 403);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_rule_can_be_in_report_mode_while_the_rest_is_enforced() {
    let origin = TestOrigin::start(vec![(
        "/robots.txt",
        Behaviour::ok("User-agent: *\nDisallow: /private\n"),
    )])
    .await;
    let proxy = Proxy::start_for_loopback(
        "  agent:\n    default_tokens: [ExampleBot]\n    rules:\n      - user_agent_contains: trial\n        tokens: [ExampleBot]\n        mode: report\n",
    );
    assert_eq!(
        curl(&proxy, &origin.url("/private/x"), &["-A", "Enforced/1"]).0,
        403
    );
    let (status, head, _) = curl(&proxy, &origin.url("/private/y"), &["-A", "TrialBot/1"]);
    assert_eq!(status, 200, "{head}");
    assert!(head.contains("would-disallow"), "{head}");
    assert_eq!(origin.count("/private/x"), 0);
    assert_eq!(origin.count("/private/y"), 1);
    // /check shows the same for the same agent.
    let out = std::process::Command::new("curl")
        .args([
            "-s",
            &format!(
                "http://{}/check?url={}&agent=TrialBot%2F1",
                proxy.admin,
                origin
                    .url("/private/z")
                    .replace(':', "%3A")
                    .replace('/', "%2F")
            ),
        ])
        .output()
        .expect("curl");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["decision"], "would_disallow", "{v}");
    assert_eq!(v["mode"], "report", "{v}");
}
