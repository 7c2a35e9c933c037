//! AI-use preferences at the egress, over real sockets: robots.txt `Content-Usage`
//! (aipref) and `Content-Signal` judged for each crawler's declared purposes, refused
//! before pacing (the origin sees nothing), reported, explained by `/check`, counted, and
//! the origin's own usage headers relayed and marked.

use serde_json::json;
use std::process::{Command, Stdio};

use crate::common::{admin, curl, header_of, Behaviour, Conf, Proxy, TestOrigin};

/// draft-ietf-aipref-attach §3's example file.
const ATTACH: &str = "User-Agent: *\nAllow: /\nDisallow: /never/\nContent-Usage: / train-ai=n\nContent-Usage: /ai-ok/ train-ai=y\n\nUser-Agent: ExampleBot\nAllow: /\nContent-Usage: / train-ai=y\n";

/// Crawlers told apart by their User-Agent, each with its operator-declared purposes.
fn purposes() -> Conf {
    Conf::new()
        .set("log_format", "json")
        .set("agent.default_tokens", ["OtherBot"])
        .set("agent.rules", purpose_rules())
}

/// [`purposes`]'s rules: one per User-Agent word, each trusting the client's text.
fn purpose_rules() -> Vec<serde_json::Value> {
    [
        ("trainer", vec!["train-ai"]),
        ("indexer", vec!["search"]),
        ("both", vec!["search", "train-ai"]),
    ]
    .into_iter()
    .map(|(word, purposes)| {
        json!({
            "user_agent_contains": word,
            "tokens": ["OtherBot"],
            "purposes": purposes,
            "trust_client_text": true,
        })
    })
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attach_example_is_judged_for_each_declared_purpose() {
    let origin = TestOrigin::robots(ATTACH).await;
    let proxy = Proxy::start_for_loopback(&purposes());
    let robots_url = origin.url("/robots.txt");

    // A training crawler: `/test` is refused before anything reaches the origin.
    let (status, head, body) = curl(&proxy, &origin.url("/test"), &["-A", "trainer/1"]);
    assert_eq!(status, 403, "{head}");
    assert_eq!(
        header_of(&head, "X-Robots-Decision"),
        Some(
            format!(
                "usage-refused; robots=\"{robots_url}\"; purpose=train-ai; line=4; rule=\"Content-Usage: / train-ai=n (line 4)\""
            )
            .as_str()
        ),
        "{head}"
    );
    assert!(
        body.contains("/test may not be used for train-ai")
            && body.contains("Content-Usage: / train-ai=n (line 4)"),
        "{body}"
    );
    // The longer path allows it; a disallowed path gets the usual robots.txt 403.
    let (status, head, _) = curl(&proxy, &origin.url("/ai-ok/test"), &["-A", "trainer/1"]);
    assert_eq!(status, 200, "{head}");
    assert_eq!(
        header_of(&head, "X-Robots-Usage"),
        Some("train-ai=y;line=5;source=content-usage")
    );
    let (status, head, _) = curl(&proxy, &origin.url("/never/test"), &["-A", "trainer/1"]);
    assert_eq!(status, 403);
    assert!(
        header_of(&head, "X-Robots-Decision").is_some_and(|d| d.starts_with("disallowed;")),
        "{head}"
    );
    // A search crawler: nothing stated for search, unknown allows (the default).
    let (status, head, _) = curl(&proxy, &origin.url("/test?s"), &["-A", "indexer/1"]);
    assert_eq!(status, 200, "{head}");
    assert_eq!(header_of(&head, "X-Robots-Usage"), Some("search=unknown"));
    // Both purposes: refused only when every one is (`refuse_when: all`), and marked so
    // the pipeline keeps the preference with the content.
    let (status, head, _) = curl(&proxy, &origin.url("/test?b"), &["-A", "both/1"]);
    assert_eq!(status, 200, "{head}");
    assert_eq!(
        header_of(&head, "X-Robots-Usage"),
        Some("search=unknown, train-ai=n;line=4;source=content-usage")
    );
    // No purpose declared: no usage check, no mark.
    let (status, head, _) = curl(&proxy, &origin.url("/test?plain"), &[]);
    assert_eq!(status, 200);
    assert_eq!(header_of(&head, "X-Robots-Usage"), None, "{head}");

    // What the origin received: never the refused or the disallowed request.
    let arrived: Vec<String> = origin.seen().iter().map(|r| r.target.clone()).collect();
    assert_eq!(
        arrived,
        [
            "/robots.txt",
            "/.well-known/tdmrep.json",
            "/ai-ok/test",
            "/test?s",
            "/test?b",
            "/test?plain"
        ]
    );
    let refused =
        "robotsgate_requests_total{decision=\"usage_refused\",mode=\"explicit\",protocol=\"http/1.1\",scheme=\"http\"}";
    assert_eq!(proxy.counted(refused, 1.0).await, 1.0);
    let verdict = |purpose: &str, result: &str, source: &str| {
        proxy.counter(&format!("robotsgate_usage_verdicts_total{{purpose=\"{purpose}\",result=\"{result}\",source=\"{source}\"}}"),
        )
    };
    assert_eq!(verdict("train-ai", "refuse", "content-usage"), 2.0);
    assert_eq!(verdict("train-ai", "allow", "content-usage"), 1.0);
    assert_eq!(verdict("search", "unknown", "none"), 2.0);
    let log = proxy
        .log_with_all(&[
            "\"decision\":\"usage_refused\"",
            "\"line\":4",
            "\"path\":\"/test\"",
        ])
        .await;
    assert!(
        log.lines()
            .any(|l| l
                .contains("\"usage\":\"search=unknown, train-ai=n;line=4;source=content-usage\"")),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cloudflares_managed_block_merges_with_the_sites_own_group() {
    let robots = "# BEGIN Cloudflare Managed content\nUser-agent: *\nContent-Signal: search=yes,ai-train=no\nAllow: /\n\nUser-agent: CCBot\nDisallow: /\n# END Cloudflare Managed Content\n\nUser-agent: *\nDisallow: /admin/\nContent-Usage: /rag/ train-ai=y\n\nUser-agent: RagBot\nContent-Signal: ai-input=no\n";
    let origin = TestOrigin::robots(robots).await;
    let proxy = Proxy::start_for_loopback(
        &Conf::new().set("agent", json!({"default_tokens": ["ExampleBot"], "default_purposes": ["train-ai"]})).set("agent.rules", json!([{"user_agent_contains": "indexer", "tokens": ["ExampleBot"], "purposes": ["search"], "trust_client_text": true}, {"user_agent_contains": "rag", "tokens": ["RagBot", "ExampleBot"], "purposes": ["ai-input"], "trust_client_text": true}, {"user_agent_contains": "grounding", "tokens": ["ExampleBot"], "purposes": ["ai-input"], "trust_client_text": true}])),
    );
    // The managed `ai-train=no` applies to the merged `*` group.
    let (status, head, _) = curl(&proxy, &origin.url("/page"), &[]);
    assert_eq!(status, 403, "{head}");
    assert!(
        head.contains(
            "purpose=train-ai; line=3; rule=\"Content-Signal: search=yes,ai-train=no (line 3)\""
        ),
        "{head}"
    );
    // The site's own longer path wins over the group-wide signal.
    let (status, head, _) = curl(&proxy, &origin.url("/rag/doc"), &[]);
    assert_eq!(status, 200, "{head}");
    assert_eq!(
        header_of(&head, "X-Robots-Usage"),
        Some("train-ai=y;line=12;source=content-usage")
    );
    // Search is welcome; the site's own Disallow still applies.
    let (status, head, _) = curl(&proxy, &origin.url("/page"), &["-A", "indexer/1"]);
    assert_eq!(status, 200);
    assert_eq!(
        header_of(&head, "X-Robots-Usage"),
        Some("search=y;line=3;source=content-signal")
    );
    let (status, head, _) = curl(&proxy, &origin.url("/admin/x"), &["-A", "indexer/1"]);
    assert_eq!(status, 403);
    assert!(head.contains("X-Robots-Decision: disallowed"), "{head}");
    // `ai-input` exists only in Content-Signal: refused for RagBot's own group, unknown
    // (allowed) under the `*` group.
    let (status, head, _) = curl(&proxy, &origin.url("/page"), &["-A", "rag/1"]);
    assert_eq!(status, 403, "{head}");
    assert!(head.contains("purpose=ai-input; line=15"), "{head}");
    let (status, head, _) = curl(&proxy, &origin.url("/page?g"), &["-A", "grounding/1"]);
    assert_eq!(status, 200, "{head}");
    assert_eq!(header_of(&head, "X-Robots-Usage"), Some("ai-input=unknown"));
    assert_eq!(origin.count("/page"), 1, "the indexer's");
    assert_eq!(origin.count("/page?g"), 1);
    assert_eq!(origin.count("/admin/x"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origins_usage_headers_are_relayed_counted_and_marked() {
    let origin = TestOrigin::robots_and(
        "User-agent: *\nAllow: /\n",
        vec![(
            "/page",
            Behaviour::with_headers(
                200,
                &[
                    ("Content-Usage", "train-ai=n"),
                    ("Content-Signal", "search=yes, ai-input=no"),
                    ("X-Robots-Usage", "train-ai=y"),
                ],
                "content\n",
            ),
        )],
    )
    .await;
    let proxy = Proxy::start_for_loopback(
        &Conf::new().set("agent.rules", json!([{"user_agent_contains": "trainer", "tokens": ["Bot"], "purposes": ["train-ai"], "trust_client_text": true}])),
    );
    // No purpose declared: relayed unchanged and marked; the fetch has happened, so a
    // response header never turns into an error.
    let (status, head, body) = curl(&proxy, &origin.url("/page"), &[]);
    assert_eq!((status, body.as_str()), (200, "content\n"), "{head}");
    assert_eq!(header_of(&head, "Content-Usage"), Some("train-ai=n"));
    assert_eq!(
        header_of(&head, "Content-Signal"),
        Some("search=yes, ai-input=no")
    );
    // The origin's forged X-Robots-Usage is replaced by robotsgate's own.
    assert_eq!(
        header_of(&head, "X-Robots-Usage"),
        Some(
            r#"origin-content-usage="train-ai=n", origin-content-signal="search=yes, ai-input=no""#
        ),
        "{head}"
    );
    assert_eq!(head.matches("X-Robots-Usage").count(), 1, "{head}");
    // With a purpose: the robots.txt verdict first, then the origin's headers.
    let (status, head, _) = curl(&proxy, &origin.url("/page"), &["-A", "trainer/1"]);
    assert_eq!(status, 200);
    assert_eq!(
        header_of(&head, "X-Robots-Usage"),
        Some(
            r#"train-ai=unknown, origin-content-usage="train-ai=n", origin-content-signal="search=yes, ai-input=no""#
        )
    );
    let header_verdict = |purpose: &str, result: &str| {
        proxy.counter(&format!("robotsgate_usage_verdicts_total{{purpose=\"{purpose}\",result=\"{result}\",source=\"header\"}}"),
        )
    };
    assert_eq!(header_verdict("train-ai", "refuse"), 2.0);
    assert_eq!(header_verdict("search", "allow"), 2.0);
    assert_eq!(header_verdict("ai-input", "refuse"), 2.0);
    assert_eq!(origin.count("/page"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_mode_forwards_marks_counts_and_logs() {
    let origin = TestOrigin::robots(ATTACH).await;
    let mut rules = purpose_rules();
    rules.push(json!({
        "client": "127.0.0.0/8",
        "tokens": ["OtherBot"],
        "purposes": ["train-ai"],
        "trust_client_text": true,
        "usage_mode": "off",
    }));
    let proxy = Proxy::start_for_loopback(
        &purposes()
            .set("agent.rules", rules)
            .set("usage.mode", "report"),
    );
    let (status, head, _) = curl(&proxy, &origin.url("/test"), &["-A", "trainer/1"]);
    assert_eq!(status, 200, "{head}");
    assert_eq!(
        header_of(&head, "X-Robots-Decision"),
        Some(
            format!(
                "would-usage-refuse; robots=\"{}\"; purpose=train-ai; line=4; rule=\"Content-Usage: / train-ai=n (line 4)\"",
                origin.url("/robots.txt")
            )
            .as_str()
        )
    );
    assert_eq!(
        header_of(&head, "X-Robots-Usage"),
        Some("train-ai=n;line=4;source=content-usage")
    );
    // A rule's own `usage_mode: off`: no check at all.
    let (status, head, _) = curl(&proxy, &origin.url("/test?off"), &["-A", "curl/8"]);
    assert_eq!(status, 200);
    assert_eq!(header_of(&head, "X-Robots-Usage"), None, "{head}");
    assert_eq!(header_of(&head, "X-Robots-Decision"), None, "{head}");
    assert_eq!((origin.count("/test"), origin.count("/test?off")), (1, 1));
    assert_eq!(
        proxy.counted("robotsgate_requests_total{decision=\"would_usage_refuse\",mode=\"explicit\",protocol=\"http/1.1\",scheme=\"http\"}", 1.0
        ).await,
        1.0
    );
    proxy
        .log_with_all(&[
            "\"decision\":\"would_usage_refuse\"",
            "would-usage-refuse",
            "\"line\":4",
        ])
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_explains_the_statement_per_purpose() {
    let origin = TestOrigin::robots(ATTACH).await;
    let proxy = Proxy::start_for_loopback(&Conf::new().set("agent.default_tokens", ["OtherBot"]));
    let check = |query: &str| -> serde_json::Value {
        serde_json::from_str(&admin(&proxy, "GET", &format!("/check?{query}")).1).expect("json")
    };
    let url = origin.url("/test");
    let v = check(&format!("url={url}&purpose=train-ai"));
    assert_eq!(v["decision"], "usage_refused", "{v}");
    assert_eq!(v["status"], 403);
    let purpose = &v["usage"]["purposes"][0];
    assert_eq!(purpose["purpose"], "train-ai");
    assert_eq!(purpose["line"], 4);
    assert_eq!(purpose["result"], "refused");
    assert_eq!(purpose["rule"], "Content-Usage: / train-ai=n (line 4)");
    let v = check(&format!("url={url}&purpose=search,train-ai"));
    assert_eq!(v["decision"], "allowed", "{v}");
    assert_eq!(
        v["usage_header"],
        "search=unknown, train-ai=n;line=4;source=content-usage"
    );
    let v = check(&format!("url={}&purpose=train-ai", origin.url("/ai-ok/x")));
    assert_eq!(v["decision"], "allowed");
    assert_eq!(v["usage"]["purposes"][0]["line"], 5);
    // Without `purpose`, this client declares none: no usage check.
    let v = check(&format!("url={url}"));
    assert_eq!(v["decision"], "allowed");
    assert!(v["usage"].is_null(), "{v}");
    let v = check(&format!("url={url}&purpose=ai-train"));
    assert!(
        v["error"].as_str().is_some_and(|e| e.contains("ai-train")),
        "{v}"
    );
    assert_eq!(origin.count("/test"), 0, "/check never fetches the page");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_statement_is_unknown_and_the_configuration_decides() {
    let robots = "User-agent: *\nContent-Usage: train-ai=N, search=y\n";
    let origin = TestOrigin::robots(robots).await;
    let conf = Conf::new().set(
        "agent",
        json!({"default_tokens": ["Bot"], "default_purposes": ["train-ai"]}),
    );
    let allowing = Proxy::start_for_loopback(&conf);
    let (status, head, _) = curl(&allowing, &origin.url("/a"), &[]);
    assert_eq!(status, 200, "{head}");
    assert_eq!(header_of(&head, "X-Robots-Usage"), Some("train-ai=unknown"));
    let refusing = Proxy::start_for_loopback(&conf.clone().set("usage.unknown", "refuse"));
    let (status, head, body) = curl(&refusing, &origin.url("/b"), &[]);
    assert_eq!(status, 403, "{head}");
    assert!(
        head.contains("usage-refused;") && head.contains("purpose=train-ai; reason=unknown"),
        "{head}"
    );
    assert!(body.contains("usage.unknown is refuse"), "{body}");
    assert_eq!(origin.count("/a"), 1);
    assert_eq!(origin.count("/b"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_users_purposes_come_from_its_credentials_line() {
    let origin = TestOrigin::robots(ATTACH).await;
    let mut passwd = Command::new(env!("CARGO_BIN_EXE_robotsgate"))
        .args(["passwd", "trainer", "--cost", "4", "--purposes", "train-ai"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("robotsgate passwd");
    std::io::Write::write_all(&mut passwd.stdin.take().expect("stdin"), b"pw\n").expect("write");
    let line = String::from_utf8(passwd.wait_with_output().expect("passwd").stdout).expect("utf-8");
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("credentials");
    std::fs::write(&file, line).expect("write credentials");
    // The user's purposes win over the default, whatever its User-Agent says.
    let proxy = Proxy::start_for_loopback(
        &Conf::new()
            .set("access.credentials_file", file.display().to_string())
            .set("agent.default_tokens", ["OtherBot"])
            .set("agent.default_purposes", ["search"]),
    );
    let (status, head, _) = curl(
        &proxy,
        &origin.url("/test"),
        &["-U", "trainer:pw", "-A", "indexer/1"],
    );
    assert_eq!(status, 403, "{head}");
    assert!(head.contains("purpose=train-ai; line=4"), "{head}");
    assert_eq!(origin.count("/test"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_robots_txt_every_purpose_is_unknown() {
    let origin = TestOrigin::start(vec![("/robots.txt", Behaviour::status(404))]).await;
    let conf = Conf::new()
        .set(
            "agent",
            json!({"default_tokens": ["Bot"], "default_purposes": ["train-ai"]}),
        )
        .set("usage.unknown", "refuse");
    let enforcing = Proxy::start_for_loopback(&conf);
    let (status, head, _) = curl(&enforcing, &origin.url("/a"), &[]);
    assert_eq!(status, 403, "{head}");
    assert!(head.contains("purpose=train-ai; reason=unknown"), "{head}");
    let reporting = Proxy::start_for_loopback(&conf.clone().set("usage.mode", "report"));
    let (status, head, _) = curl(&reporting, &origin.url("/b"), &[]);
    assert_eq!(status, 200, "{head}");
    assert!(
        head.contains("X-Robots-Decision: would-usage-refuse;")
            && head.contains("X-Robots-Usage: train-ai=unknown"),
        "{head}"
    );
    let allowing = Proxy::start_for_loopback(&Conf::new().set(
        "agent",
        json!({"default_tokens": ["Bot"], "default_purposes": ["train-ai"]}),
    ));
    let (status, head, _) = curl(&allowing, &origin.url("/c"), &[]);
    assert_eq!(status, 200, "{head}");
    assert!(head.contains("X-Robots-Usage: train-ai=unknown"), "{head}");
    let arrived: Vec<String> = origin
        .seen()
        .iter()
        .map(|r| r.target.clone())
        .filter(|t| t != "/robots.txt")
        .collect();
    // The origin serves no TDMRep file: asked for once, before `/c` (`/b` already
    // carries report mode's usage mark, which the file could not change).
    assert_eq!(arrived, ["/b", "/.well-known/tdmrep.json", "/c"]);
}

/// A robots.txt with more usage rules than robotsgate reads one by one fails closed: a
/// purpose any of its statements refuses is refused everywhere (the origin sees nothing),
/// the fetch logs why, and `/check` says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_usage_rules_fail_closed_for_what_they_refuse() {
    let mut robots = String::from("User-agent: *\nContent-Usage: train-ai=n\n");
    for n in 0..600 {
        robots.push_str(&format!("Content-Usage: /p{n} search=y\n"));
    }
    let origin = TestOrigin::robots(&robots).await;
    let conf = Conf::new().set("agent.default_tokens", ["Bot"]).set("agent.rules", json!([{"user_agent_contains": "trainer", "tokens": ["Bot"], "purposes": ["train-ai"], "trust_client_text": true}, {"user_agent_contains": "indexer", "tokens": ["Bot"], "purposes": ["search"], "trust_client_text": true}]));
    let proxy = Proxy::start_for_loopback(&conf);
    let (status, head, _) = curl(&proxy, &origin.url("/p1/x"), &["-A", "trainer/1"]);
    assert_eq!(status, 403, "{head}");
    assert!(
        header_of(&head, "X-Robots-Decision").is_some_and(|d| d.starts_with("usage-refused;")),
        "{head}"
    );
    // Nothing refuses search: unknown, allowed (`usage.unknown: allow`).
    let (status, head, _) = curl(&proxy, &origin.url("/p1/y"), &["-A", "indexer/1"]);
    assert_eq!(status, 200, "{head}");
    assert_eq!(header_of(&head, "X-Robots-Usage"), Some("search=unknown"));
    assert_eq!(
        origin.count("/p1/x"),
        0,
        "the refused request never reached the origin"
    );
    assert_eq!(origin.count("/p1/y"), 1);
    let v: serde_json::Value = serde_json::from_str(
        &admin(
            &proxy,
            "GET",
            &format!("/check?url={}&purpose=train-ai", origin.url("/p2")),
        )
        .1,
    )
    .expect("json");
    assert_eq!(v["decision"], "usage_refused", "{v}");
    assert_eq!(v["usage"]["too_many_rules"], true, "{v}");
    assert_eq!(v["usage"]["purposes"][0]["source"], "too-many-rules", "{v}");
    proxy
        .log_with(|l| l.contains("usage rules: every purpose one of them refuses"))
        .await;
}

/// Usage rules are grouped as the attach draft groups them: `/check` names the group
/// each statement belongs to, which is not the Allow/Disallow group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_names_the_usage_group_a_statement_came_from() {
    let robots = "User-agent: a\nContent-Usage: train-ai=n\nUser-agent: b\nDisallow: /x\n\nUser-agent: *\nContent-Usage: train-ai=n\n";
    let origin = TestOrigin::robots(robots).await;
    let proxy = Proxy::start_for_loopback(
        &Conf::new()
            .set(
                "agent",
                json!({"default_tokens": ["b"], "default_purposes": ["train-ai"]}),
            )
            .set(
                "agent.rules",
                json!([{"user_agent_contains": "first", "tokens": ["a"]}]),
            ),
    );
    let check = |query: &str| -> serde_json::Value {
        serde_json::from_str(&admin(&proxy, "GET", &format!("/check?{query}")).1).expect("json")
    };
    // `b` shares `a`'s Disallow group (line 1) but not its usage rule: unknown, allowed.
    let v = check(&format!("url={}&purpose=train-ai", origin.url("/p")));
    assert_eq!(v["decision"], "allowed", "{v}");
    assert_eq!(v["group_line"], 1, "{v}");
    assert_eq!(v["usage"]["purposes"][0]["preference"], "unknown", "{v}");
    assert_eq!(v["usage"]["group_line"], 3, "{v}");
    assert_eq!(v["decision"], "allowed");
    // `a`'s own statement, in the usage group of line 1.
    let (status, head, _) = curl(&proxy, &origin.url("/p"), &["-A", "first/1"]);
    assert_eq!(status, 403, "{head}");
    let (status, _, _) = curl(&proxy, &origin.url("/p"), &["-A", "other/1"]);
    assert_eq!(status, 200);
    assert_eq!(origin.count("/p"), 1, "only b's request reached the origin");
}
