//! Report-only mode over real sockets: what would be refused is forwarded, counted,
//! logged and labelled; pacing records its wait without holding; egress is enforced.

use serde_json::json;
use std::time::Duration;

use crate::common::{curl, gaps, pages, Behaviour, Conf, Proxy, TestOrigin};

const ROBOTS: &str = "User-agent: *\nCrawl-delay: 1\nDisallow: /private\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_mode_forwards_what_it_would_refuse_and_says_so() {
    let origin = TestOrigin::robots(ROBOTS).await;
    let proxy = Proxy::start_for_loopback(
        &Conf::new()
            .set("log_format", "json")
            .set("enforce.mode", "report"),
    );
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
        proxy.counted(
            "robotsgate_requests_total{decision=\"would_disallow\",mode=\"explicit\",protocol=\"http/1.1\",scheme=\"http\"}",
            1.0
        ).await,
        1.0
    );
    proxy
        .log_with_all(&[
            "\"decision\":\"would_disallow\"",
            "\"line\":3",
            "would-disallow",
        ])
        .await;
    // Egress refusals are never report-only.
    let (status, _, _) = curl(&proxy, "http://10.255.255.1/x", &[]);
    assert_eq!(status, 403);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_rule_can_be_in_report_mode_while_the_rest_is_enforced() {
    let origin = TestOrigin::robots("User-agent: *\nDisallow: /private\n").await;
    let proxy = Proxy::start_for_loopback(
        &Conf::new().set("agent.default_tokens", ["ExampleBot"]).set("agent.rules", json!([{"user_agent_contains": "trial", "tokens": ["ExampleBot"], "mode": "report", "trust_client_text": true}])),
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
    assert_eq!(v["mode_from"], "rule", "{v}");
}

/// The operator, never the client, chooses the mode: an authenticated user's own
/// User-Agent text cannot switch it to report mode through a rule that trusts such text
/// for unauthenticated clients, and a rule that would let any client do so without
/// saying `trust_client_text: true` stops the start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_text_never_chooses_report_mode_for_an_authenticated_user() {
    let origin = TestOrigin::robots("User-agent: *\nDisallow: /private\n").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let users = dir.path().join("users");
    let lines = format!(
        "{}\n{}\n",
        crate::common::passwd_line("fleet", "fleet-secret", &["FleetBot"]),
        crate::common::passwd_line("bare", "bare-secret", &[]),
    );
    std::fs::write(&users, lines).expect("users");
    let rule = |trusted: bool| {
        let mut rule = json!({
            "user_agent_contains": "CanaryBot",
            "tokens": ["CanaryBot"],
            "mode": "report",
        });
        if trusted {
            rule["trust_client_text"] = true.into();
        }
        Conf::new()
            .set("agent.default_tokens", ["ExampleBot"])
            .set("agent.rules", [rule])
    };
    let proxy = Proxy::start_for_loopback(
        &rule(true)
            .set("log_format", "json")
            .set("access.credentials_file", users.display().to_string()),
    );
    for (user, tokens_from) in [
        ("fleet:fleet-secret", "credential"),
        ("bare:bare-secret", "default"),
    ] {
        let page = origin.url(&format!("/private/{}", &user[..4]));
        let args = ["--proxy-user", user, "-A", "Mozilla/5.0 CanaryBot"];
        let (status, head, _) = curl(&proxy, &page, &args);
        assert_eq!(status, 403, "{user}: {head}");
        let logged = || {
            proxy.log().lines().any(|l| {
                l.contains(&format!("/private/{}", &user[..4]))
                    && l.contains("\"mode_from\":\"config\"")
                    && l.contains(&format!("\"tokens_from\":\"{tokens_from}\""))
            })
        };
        assert!(
            crate::common::eventually(Duration::from_secs(5), logged).await,
            "{}",
            proxy.log()
        );
    }
    assert_eq!(
        origin.count("/private/flee") + origin.count("/private/bare"),
        0
    );

    let config = dir.path().join("robotsgate.yaml");
    std::fs::write(&config, rule(false).file(&[])).expect("config");
    let err = crate::common::config_refusal(&config);
    assert!(
        err.contains("agent.rules[0].mode") && err.contains("trust_client_text"),
        "{err}"
    );
}

/// An origin's own `X-Robots-Decision` (or `X-Robots-Usage`) never reaches the client:
/// robotsgate removes it, logs and counts it, and only its own remain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origins_copy_of_robotsgates_headers_is_removed() {
    let forged = Behaviour::with_headers(
        200,
        &[
            ("X-Robots-Decision", "disallowed; robots=\"forged\"; line=1"),
            ("x-robots-usage", "train-ai=y"),
        ],
        "page\n",
    );
    let origin = TestOrigin::robots_and(
        ROBOTS,
        vec![("/forged", forged.clone()), ("/private/forged", forged)],
    )
    .await;
    let proxy =
        Proxy::start_for_loopback(&Conf::new().set("enforce.report_clients", ["127.0.0.1/32"]));
    let (status, head, _) = curl(&proxy, &origin.url("/forged"), &[]);
    assert_eq!(status, 200, "{head}");
    let lower = head.to_ascii_lowercase();
    assert!(
        !lower.contains("x-robots-decision") && !lower.contains("x-robots-usage"),
        "{head}"
    );
    // Report mode: robotsgate's own header, once, and not the origin's.
    let (status, head, _) = curl(&proxy, &origin.url("/private/forged"), &[]);
    assert_eq!(status, 200, "{head}");
    let decisions: Vec<_> = head
        .lines()
        .filter(|l| l.to_ascii_lowercase().starts_with("x-robots-decision"))
        .collect();
    assert_eq!(decisions.len(), 1, "{head}");
    assert!(
        decisions[0].contains("would-disallow") && !decisions[0].contains("forged"),
        "{head}"
    );
    let warned = || {
        proxy
            .log()
            .contains("sent robotsgate's own response header")
    };
    assert!(
        crate::common::eventually(Duration::from_secs(5), warned).await,
        "{}",
        proxy.log()
    );
    assert_eq!(
        proxy.metric("robotsgate_upstream_forged_headers_total"),
        Some(4.0)
    );
}

/// A rule chosen by User-Agent text gives way to a rule that identifies the client by
/// address: text never chooses another crawler's tokens for that client; and such a
/// rule may set no purposes, identity or payment without `trust_client_text: true`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_text_never_chooses_tokens_purposes_identity_or_payment() {
    let robots = "User-agent: AcmeAI\nDisallow: /private\nContent-Usage: /news train-ai=n\n\nUser-agent: ExampleBot\nAllow: /\n";
    let origin = TestOrigin::robots(robots).await;
    let rules = Conf::new().set("agent.default_tokens", ["Other"]).set("agent.rules", json!([{"user_agent_contains": "ExampleBot", "tokens": ["ExampleBot"]}, {"client": "127.0.0.0/8", "tokens": ["AcmeAI"], "purposes": ["train-ai"]}]));
    let proxy = Proxy::start_for_loopback(&rules);
    for path in ["/private/x", "/news/1"] {
        let (status, head, _) = curl(&proxy, &origin.url(path), &["-A", "ExampleBot/2.1"]);
        assert_eq!(status, 403, "{path}: {head}");
    }
    assert_eq!(origin.count("/private/x") + origin.count("/news/1"), 0);
    // The text rule still names clients no address rule identifies (here none: its
    // tokens would apply to others), and a client without the text gets the address rule.
    let (status, _, _) = curl(&proxy, &origin.url("/public"), &["-A", "curl/8"]);
    assert_eq!(status, 200);

    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("robotsgate.yaml");
    for (key, value) in [
        ("purposes", json!(["search"])),
        ("identity", json!("main")),
        (
            "payment",
            json!({"max_price": "USD 0.01", "daily_budget": "USD 1.00"}),
        ),
    ] {
        let mut rule = json!({"user_agent_contains": "NewsBot", "tokens": ["NewsBot"]});
        rule[key] = value;
        let conf = Conf::new().set("agent.rules", [rule]);
        std::fs::write(&config, conf.file(&[])).expect("config");
        let err = crate::common::config_refusal(&config);
        assert!(
            err.contains(&format!("agent.rules[0].{key}")) && err.contains("trust_client_text"),
            "{key}: {err}"
        );
    }
}
