//! Pay per crawl (Cloudflare's documented semantics, on Web Bot Auth signatures): budgets
//! of identities and agent rules, per instance and shared by a fleet, against a
//! pay-per-crawl origin that verifies the signature covers the price it is paid with
//! (`tests/helpers/verifying_origin.py` with `PRICE`).

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::{curl, free_port, passwd_line, Conf, Proxy};
use crate::signing::{generate, one_key, VerifyingOrigin};

/// Pay per crawl: the budget pays (a signed `crawler-max-price`) while the day's budget
/// covers `max_price`, sums `crawler-charged` exactly, then stops offering, and the
/// origin's 402 reaches the crawler; an identity without a budget never offers.
#[test]
fn a_budget_pays_until_spent_then_the_402_reaches_the_crawler() {
    let (dir, signed) = one_key("string");
    let paying = signed.with_identity(
        "payment",
        json!({"max_price": "USD 0.02", "daily_budget": "USD 0.05"}),
    );
    let origin = VerifyingOrigin::start_priced(dir.path(), &signed.printed, "USD 0.01");
    let proxy = Proxy::start_for_loopback(&paying);
    // A client's own offer is not the fleet's to pay.
    let statuses: Vec<u16> = (0..6)
        .map(|i| {
            let url = format!("http://127.0.0.1:{}/page{i}", origin.port);
            curl(&proxy, &url, &["-H", "crawler-max-price: USD 9.99"]).0
        })
        .collect();
    // Each request holds USD 0.02 until its answer: after four charges of 0.01, 0.01 is
    // left, less than max_price, so the fifth offers nothing.
    assert_eq!(statuses, [200, 200, 200, 200, 402, 402]);
    for i in 0..4 {
        let v = origin.verdict(&format!("/page{i}"));
        assert_eq!(
            (&v["offered"], &v["price_covered"], &v["paid"]),
            (
                &Value::from("USD 0.02"),
                &Value::from(true),
                &Value::from(true)
            ),
            "{v}"
        );
    }
    let unpaid = origin.verdict("/page4");
    assert_eq!(
        (&unpaid["offered"], &unpaid["verified"]),
        (&Value::Null, &Value::from(true))
    );
    assert_eq!(
        proxy.counter("robotsgate_crawl_charges_total{currency=\"USD\",identity=\"main\"}"),
        0.04
    );
    assert_eq!(
        proxy.counter("robotsgate_payment_required_total{identity=\"main\"}"),
        2.0
    );
    // The access log names the identity and the charge (written by its own thread).
    let logged = |path: &str, what: &str| {
        proxy.log().lines().any(|l| {
            l.contains(path) && l.contains("identity") && l.contains("main") && l.contains(what)
        })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !(logged("/page0", "charged USD 0.01") && logged("/page4", "payment-required USD 0.01")) {
        assert!(Instant::now() < deadline, "{}", proxy.log());
        std::thread::sleep(Duration::from_millis(50));
    }

    // The status page's budget: exact, and the charges per identity.
    let (code, status) = crate::common::admin(&proxy, "GET", "/status.json");
    assert_eq!(code, 200, "{status}");
    let status: Value = serde_json::from_str(&status).expect("JSON");
    assert_eq!(
        status["budgets"],
        json!([{"budget": "main", "max_price": "USD 0.02", "daily": "USD 0.05",
            "spent_today": "USD 0.04", "reserved": "USD 0.00"}])
    );
    assert_eq!(
        status["charges"],
        json!([{"identity": "main", "currency": "USD", "charged": 0.04}])
    );
    // And in a browser, as the status page draws it.
    let profile = tempfile::tempdir().expect("tempdir");
    let page = format!("http://{}/", proxy.admin);
    let dom = crate::status_page::chromium(profile.path(), &["--dump-dom"], &page);
    assert!(
        dom.contains(
            "main: USD 0.04 of USD 0.05 spent today (USD 0.00 held; at most USD 0.02 a request)"
        ) && dom.contains("charged to main since start: USD 0.04"),
        "{dom}"
    );

    // Without a budget: never an offer, the 402 passed through and counted (the same
    // directory listener address: one proxy at a time).
    drop(proxy);
    let free = Proxy::start_for_loopback(&signed.conf);
    let url = format!("http://127.0.0.1:{}/free", origin.port);
    let (status, head, _) = curl(&free, &url, &["-H", "crawler-max-price: USD 9.99"]);
    assert_eq!(status, 402);
    assert!(
        head.to_ascii_lowercase()
            .contains("crawler-price: usd 0.01"),
        "{head}"
    );
    assert_eq!(origin.verdict("/free")["offered"], Value::Null);
    assert_eq!(
        free.counter("robotsgate_payment_required_total{identity=\"main\"}"),
        1.0
    );
}

/// A proxy user's own identity (`signing.users`) signs its requests, with its own key
/// and `Signature-Agent`; an agent rule's budget pays for every request the rule
/// matches, whichever identity signs it, and stops at its limit.
#[test]
fn a_users_identity_signs_and_a_rules_budget_pays() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (main, research) = (dir.path().join("main.jwk"), dir.path().join("research.jwk"));
    generate(&main);
    generate(&research);
    let users = dir.path().join("users");
    std::fs::write(
        &users,
        format!(
            "{}\n{}\n",
            passwd_line("alice", "alice-secret", &[]),
            passwd_line("bob", "bob-secret", &[])
        ),
    )
    .expect("users");
    let port = free_port();
    let yaml = Conf::new().set("access.credentials_file", users.display().to_string()).set("signing.directory_listen", format!("127.0.0.1:{}", port)).set("signing.users.alice", "research").set("signing.identities", json!([{"name": "main", "key_file": (main.display().to_string()), "signature_agent": "https://crawler.example"}, {"name": "research", "key_file": (research.display().to_string()), "signature_agent": "https://research.example/bots"}])).set("agent.default_identity", "main").set("agent.rules", json!([{"client": "127.0.0.1/32", "tokens": ["FleetBot"], "payment": {"max_price": "USD 0.01", "daily_budget": "USD 0.02"}}]));
    let origin =
        VerifyingOrigin::start_priced(dir.path(), &format!("http://127.0.0.1:{port}"), "USD 0.01");
    let proxy = Proxy::start_for_loopback(&yaml);
    let fetch = |user: &str, path: &str| {
        let url = format!("http://127.0.0.1:{}{path}", origin.port);
        curl(&proxy, &url, &["--proxy-user", user]).0
    };
    assert_eq!(fetch("alice:alice-secret", "/alice0"), 200);
    assert_eq!(fetch("bob:bob-secret", "/bob0"), 200);
    // The rule's USD 0.02 is spent: no offer, the origin's 402.
    assert_eq!(fetch("alice:alice-secret", "/alice1"), 402);
    let alice = origin.verdict("/alice0");
    assert_eq!(
        (&alice["verified"], &alice["paid"]),
        (&Value::from(true), &Value::from(true)),
        "{alice}"
    );
    assert_eq!(
        alice["signature_agent"][0],
        "\"https://research.example/bots\""
    );
    let bob = origin.verdict("/bob0");
    assert_eq!(bob["verified"], true, "{bob}");
    assert_eq!(bob["signature_agent"][0], "\"https://crawler.example\"");
    let keyid = |verdict: &Value| {
        let input = verdict["signature_input"][0].as_str().unwrap_or_default();
        input.split("keyid=").nth(1).map(str::to_string)
    };
    assert_ne!(keyid(&alice), keyid(&bob));
    let late = origin.verdict("/alice1");
    assert_eq!(
        (&late["verified"], &late["offered"]),
        (&Value::from(true), &Value::Null)
    );
    for identity in ["main", "research"] {
        assert_eq!(
            proxy.counter(&format!(
                "robotsgate_crawl_charges_total{{currency=\"USD\",identity=\"{identity}\"}}"
            )),
            0.01
        );
    }
    let (_, status) = crate::common::admin(&proxy, "GET", "/status.json");
    let status: Value = serde_json::from_str(&status).expect("JSON");
    assert_eq!(status["budgets"][0]["budget"], "agent.rules[0]", "{status}");
    assert_eq!(status["budgets"][0]["spent_today"], "USD 0.02", "{status}");
}

/// A fleet's budget is one: instances sharing the fleet backend reserve from and
/// settle to the same day, so together they pay for exactly what the budget covers,
/// whatever runs at once and through whichever instance; their status pages show the
/// fleet's spend. A tally the backend cannot read pays for nothing.
async fn a_budget_shared_by_the_fleet(fleet: &Conf, redis_cli: impl Fn(&[&str]) -> String) {
    let (dir, signed) = one_key("string");
    // One directory listener per address: these instances serve none.
    let conf = signed
        .with_identity(
            "payment",
            json!({"max_price": "USD 0.01", "daily_budget": "USD 0.03"}),
        )
        .without("signing.directory_listen");
    let origin = VerifyingOrigin::start_priced(dir.path(), &signed.printed, "USD 0.01");
    let proxies = crate::fleet_fixture::instances(2, &fleet.clone().with(&conf));
    crate::fleet_fixture::backend_up(&proxies).await;
    // Eight requests at once, four through each instance. A 503 (a turn not granted in
    // time, or the backend slow to answer on a loaded host) is retried, as a crawler
    // would after its Retry-After: it never reached the origin, so it spent nothing.
    let statuses: Vec<u16> = std::thread::scope(|scope| {
        let running: Vec<_> = (0..8)
            .map(|i| {
                let (proxy, port) = (&proxies[i % 2], origin.port);
                scope.spawn(move || {
                    let url = format!("http://127.0.0.1:{port}/page{i}");
                    let deadline = Instant::now() + Duration::from_secs(60);
                    loop {
                        let status = curl(proxy, &url, &[]).0;
                        if status != 503 || Instant::now() > deadline {
                            return status;
                        }
                        std::thread::sleep(Duration::from_millis(200));
                    }
                })
            })
            .collect();
        running
            .into_iter()
            .map(|r| r.join().expect("request"))
            .collect()
    });
    let paid = statuses.iter().filter(|&&s| s == 200).count();
    assert_eq!(paid, 3, "USD 0.03 pays three: {statuses:?}");
    assert_eq!(
        statuses.iter().filter(|&&s| s == 402).count(),
        5,
        "{statuses:?}\n{}\n{}",
        proxies[0].log(),
        proxies[1].log()
    );
    let offered = origin
        .seen()
        .iter()
        .filter(|v| v["offered"] == "USD 0.01")
        .count();
    assert_eq!(offered, 3, "{:?}", origin.seen());
    let charged: f64 = proxies
        .iter()
        .map(|p| p.counter("robotsgate_crawl_charges_total{currency=\"USD\",identity=\"main\"}"))
        .sum();
    assert!((charged - 0.03).abs() < 1e-9, "{charged}");
    // Settled in the background: every instance's status page comes to the fleet's day.
    for proxy in &proxies {
        let settled = crate::common::eventually(Duration::from_secs(10), || {
            let (_, status) = crate::common::admin(proxy, "GET", "/status.json");
            let status: Value = serde_json::from_str(&status).unwrap_or_default();
            status["budgets"][0]["spent_today"] == "USD 0.03"
                && status["budgets"][0]["reserved"] == "USD 0.00"
        })
        .await;
        assert!(
            settled,
            "{}",
            crate::common::admin(proxy, "GET", "/status.json").1
        );
    }
    // A tally that cannot answer (here: garbage where the day's count should be) is
    // no count: no offer, the origin's 402. A new day's count pays again.
    let day = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 86_400);
    let tally = format!("rg:{{budget:main}}:{day}");
    redis_cli(&["DEL", &tally, &format!("{tally}:held")]);
    let url = |path: &str| format!("http://127.0.0.1:{}{path}", origin.port);
    assert_eq!(curl(&proxies[0], &url("/new-day"), &[]).0, 200);
    assert_eq!(origin.verdict("/new-day")["offered"], "USD 0.01");
    redis_cli(&["SET", &tally, "not a tally"]);
    assert_eq!(curl(&proxies[1], &url("/unchecked"), &[]).0, 402);
    assert_eq!(origin.verdict("/unchecked")["offered"], Value::Null);
    // Logged by the member that judged it: the origin's owner.
    let logged = crate::common::eventually(Duration::from_secs(10), || {
        proxies
            .iter()
            .any(|p| p.log().contains("fleet command budget_reserve failed"))
    })
    .await;
    assert!(logged, "{}", proxies[0].log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_is_shared_by_the_fleet_through_redis() {
    let redis = crate::redis_servers::Redis::start();
    let fleet = crate::fleet_fixture::fleet_conf(&redis);
    let cli = |args: &[&str]| crate::redis_servers::redis_cli(redis.port, args);
    a_budget_shared_by_the_fleet(&fleet, cli).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_is_shared_by_the_fleet_through_a_redis_cluster() {
    let cluster = crate::redis_servers::Cluster::start();
    let fleet = cluster.conf();
    let cli = |args: &[&str]| {
        let args: Vec<&str> = std::iter::once("-c").chain(args.iter().copied()).collect();
        crate::redis_servers::redis_cli(cluster.nodes[0].port, &args)
    };
    a_budget_shared_by_the_fleet(&fleet, cli).await;
}

/// An origin's charge counts against the budget at most as the offer: above it, in
/// another currency, or unreadable, the offer is what the budget counts (fail closed),
/// and the overcharge is logged and counted by origin. Only the configured currency is
/// ever a metric label, whatever currencies origins make up. A client's own signature
/// and price headers never reach the origin, signed or not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overcharges_count_as_the_offer_and_origins_name_no_labels() {
    use crate::common::{Behaviour, TestOrigin};
    let (_dir, signed) = one_key("string");
    let paying = signed.with_identity(
        "payment",
        json!({"max_price": "USD 0.01", "daily_budget": "USD 0.03"}),
    );
    let charging =
        |charged: &str| Behaviour::with_headers(200, &[("crawler-charged", charged)], "page\n");
    let mut routes = vec![
        ("/robots.txt", Behaviour::ok("User-agent: *\nAllow: /\n")),
        ("/over", charging("USD 1.50")),
        ("/garbage", charging("lots of money")),
        ("/other", charging("XYZ 0.001")),
    ];
    // Made-up currency codes (`QAA`, `QAB`, …), one per request.
    let made_up: Vec<String> = (0..40u8)
        .map(|n| {
            format!(
                "Q{}{} 0.000001",
                (b'A' + n / 26) as char,
                (b'A' + n % 26) as char
            )
        })
        .collect();
    let made_up_routes: Vec<(String, Behaviour)> = made_up
        .iter()
        .enumerate()
        .map(|(n, c)| (format!("/made-up/{n}"), charging(c)))
        .collect();
    for (path, behaviour) in &made_up_routes {
        routes.push((path.as_str(), behaviour.clone()));
    }
    let origin = TestOrigin::start(routes).await;
    let proxy = Proxy::start_for_loopback(&paying);
    let forged = [
        "-H",
        "Signature: sig1=:AAAA:",
        "-H",
        "Signature-Input: sig1=(\"@authority\")",
        "-H",
        "Signature-Agent: \"https://evil.example\"",
        "-H",
        "crawler-exact-price: USD 9.99",
    ];
    for path in ["/over", "/garbage", "/other"] {
        assert_eq!(curl(&proxy, &origin.url(path), &forged).0, 200);
    }
    // The day's USD 0.03 is spent (three offers counted in full): no more offers.
    for n in 0..made_up.len() {
        assert_eq!(
            curl(&proxy, &origin.url(&format!("/made-up/{n}")), &forged).0,
            200
        );
    }
    let seen = origin.seen();
    let offered: Vec<Option<&str>> = seen
        .iter()
        .filter(|s| s.target != "/robots.txt")
        .map(|s| s.header("crawler-max-price"))
        .collect();
    assert_eq!(&offered[..3], [Some("USD 0.01"); 3], "{seen:?}");
    assert!(offered[3..].iter().all(Option::is_none), "{offered:?}");
    for s in seen.iter().filter(|s| s.target != "/robots.txt") {
        assert_eq!(s.header("crawler-exact-price"), None, "{s:?}");
        assert_ne!(
            s.header("Signature-Agent"),
            Some("\"https://evil.example\""),
            "{s:?}"
        );
        assert!(
            s.header("Signature").is_none_or(|v| v != "sig1=:AAAA:"),
            "{s:?}"
        );
    }
    overcharges_are_counted(&proxy).await;
}

/// What the test above counted: USD 0.03 charged, in USD alone (the one currency a
/// label); overcharges by kind (one above the offer, one unreadable, one in another
/// currency, 40 never offered) and by origin (one origin, 43).
async fn overcharges_are_counted(proxy: &Proxy) {
    assert_eq!(
        proxy.counter("robotsgate_crawl_charges_total{currency=\"USD\",identity=\"main\"}"),
        0.03
    );
    let page = reqwest::get(format!("http://{}/metrics", proxy.admin))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    let charge_series = page
        .lines()
        .filter(|l| l.starts_with("robotsgate_crawl_charges_total{"))
        .count();
    assert_eq!(charge_series, 1, "only the configured currency is a label");
    for (kind, n) in [
        ("above_offer", 1.0),
        ("unreadable", 1.0),
        ("other_currency", 1.0),
        ("unoffered", 40.0),
    ] {
        assert_eq!(
            proxy.counter(&format!(
                "robotsgate_crawl_overcharges_total{{identity=\"main\",kind=\"{kind}\"}}"
            )),
            n,
            "{kind}"
        );
    }
    let (_, status) = crate::common::admin(proxy, "GET", "/status.json");
    let status: Value = serde_json::from_str(&status).expect("JSON");
    let by_origin = status["overcharges"].as_array().expect("overcharges");
    assert_eq!(by_origin.len(), 1, "{status}");
    assert_eq!(by_origin[0]["count"], 43, "{status}");
    assert_eq!(
        status["charges"].as_array().map(Vec::len),
        Some(1),
        "{status}"
    );
}
