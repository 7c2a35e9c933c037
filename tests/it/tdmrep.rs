//! TDMRep at the egress, over real sockets. The header: an origin's answer reserving
//! TDM rights is withheld from a crawler whose declared purposes the reservation binds
//! (451, no body; the origin did receive and answer the request), given to one whose
//! purposes it does not bind, and marked in report mode. The file: fetched in its turn
//! before a bound request is sent, its reservation refused with nothing sent (403) or
//! marked in report mode, recorded in the evidence and judged again by `verify`; a
//! slow, huge or looping file is bounded and reads as unset.

use serde_json::json;

use std::time::Duration;

use crate::common::{
    assert_gaps_at_least, curl, evidence_cli, header_of, records, targets, Behaviour, Conf, Proxy,
    TestOrigin,
};

const POLICY: &str = "https://rights.example/tdm-policy.json";

/// Crawlers told apart by their User-Agent: `trainer` trains AI, `indexer` searches.
fn crawlers(mode: &str) -> Conf {
    let rule = |word: &str, purpose: &str| {
        json!({
            "user_agent_contains": word,
            "tokens": ["OtherBot"],
            "purposes": [purpose],
            "trust_client_text": true,
        })
    };
    Conf::new()
        .set(
            "agent.rules",
            vec![rule("trainer", "train-ai"), rule("indexer", "search")],
        )
        .set("usage.mode", mode)
}

/// An origin whose `/reserved` page reserves TDM rights in its header.
async fn origin() -> TestOrigin {
    TestOrigin::robots_and(
        "User-agent: *\nAllow: /\n",
        vec![(
            "/reserved",
            Behaviour::with_headers(
                200,
                &[
                    ("TDM-Reservation", "1"),
                    ("tdm-policy", POLICY),
                    ("Set-Cookie", "s=1"),
                ],
                "the reserved page's body",
            ),
        )],
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reserved_answer_is_withheld_from_the_purposes_it_binds() {
    let origin = origin().await;
    let evidence = tempfile::tempdir().expect("tempdir");
    let conf = crawlers("enforce").set("evidence.dir", evidence.path().to_str().expect("path"));
    let proxy = Proxy::start_for_loopback(&conf);
    let url = origin.url("/reserved");
    let (status, head, body) = curl(&proxy, &url, &["-A", "trainer/1"]);
    assert_eq!(status, 451, "{head}");
    assert_eq!(body, "", "{head}");
    assert_eq!(
        header_of(&head, "X-Robots-Decision"),
        Some(
            format!("tdm-reserved; source=header; tdm-reservation=1; policy=\"{POLICY}\"").as_str()
        ),
        "{head}"
    );
    assert_eq!(header_of(&head, "Set-Cookie"), None, "{head}");
    // The exchange was made at the origin: it received the request and answered it.
    assert_eq!(origin.count("/reserved"), 1);
    assert!(origin.first("/reserved").done.is_some());
    // A search crawler is not bound by a TDM reservation.
    let (status, head, body) = curl(&proxy, &url, &["-A", "indexer/1"]);
    assert_eq!(status, 200, "{head}");
    assert_eq!(body, "the reserved page's body");
    assert_eq!(header_of(&head, "tdm-reservation"), Some("1"), "{head}");
    assert_eq!(origin.count("/reserved"), 2);
    assert_eq!(
        proxy.sum("robotsgate_requests_total", "decision=\"tdm_withheld\""),
        1.0
    );
    // The evidence: the decision to send it, then its outcome naming what was withheld.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let withheld = loop {
        let all = records(evidence.path());
        let outcome = all.iter().find(|r| {
            r["type"] == "outcome"
                && r["answered"]
                    .as_str()
                    .is_some_and(|a| a.starts_with("tdm-reserved;"))
        });
        if let Some(outcome) = outcome {
            let decision = all
                .iter()
                .find(|r| r["type"] == "decision" && r["seq"] == outcome["decision"])
                .cloned()
                .expect("its decision");
            break (decision, outcome.clone());
        }
        assert!(std::time::Instant::now() < deadline, "no outcome: {all:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(withheld.0["url"], url.as_str(), "{withheld:?}");
    assert_eq!(withheld.1["status"], 200, "{withheld:?}");
    assert!(
        withheld.1["answered"]
            .as_str()
            .is_some_and(|a| a.contains(POLICY)),
        "{withheld:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_mode_gives_the_reserved_answer_marked() {
    let origin = origin().await;
    let proxy = Proxy::start_for_loopback(&crawlers("report"));
    let (status, head, body) = curl(&proxy, &origin.url("/reserved"), &["-A", "trainer/1"]);
    assert_eq!(status, 200, "{head}");
    assert_eq!(body, "the reserved page's body");
    assert_eq!(
        header_of(&head, "X-Robots-Decision"),
        Some(
            format!("would-tdm-withhold; source=header; tdm-reservation=1; policy=\"{POLICY}\"")
                .as_str()
        ),
        "{head}"
    );
    assert_eq!(
        proxy.sum(
            "robotsgate_requests_total",
            "decision=\"would_tdm_withhold\""
        ),
        1.0
    );
}

/// A TDMRep file reserving `/private/` with a policy, and leaving the rest open.
const FILE: &str = r#"[{"location":"/private/*","tdm-reservation":1,"tdm-policy":"https://rights.example/tdm-policy.json"},
 {"location":"/","tdm-reservation":0}]"#;

/// An origin with Crawl-delay 1, [`FILE`], and two pages.
async fn origin_with_file() -> TestOrigin {
    TestOrigin::robots_and(
        "User-agent: *\nCrawl-delay: 1\nAllow: /\n",
        vec![
            (
                "/.well-known/tdmrep.json",
                Behaviour::with_headers(200, &[("Content-Type", "application/json")], FILE),
            ),
            ("/private/a", Behaviour::ok("private")),
            ("/public", Behaviour::ok("public")),
        ],
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_file_refuses_before_anything_is_sent_in_its_own_turn() {
    let origin = origin_with_file().await;
    let evidence = tempfile::tempdir().expect("tempdir");
    let conf = crawlers("enforce").set("evidence.dir", evidence.path().to_str().expect("path"));
    let proxy = Proxy::start_for_loopback(&conf);
    let tdmrep = origin.url("/.well-known/tdmrep.json");
    let (status, head, _) = curl(&proxy, &origin.url("/private/a"), &["-A", "trainer/1"]);
    assert_eq!(status, 403, "{head}");
    assert_eq!(
        header_of(&head, "X-Robots-Decision"),
        Some(format!("tdm-reserved; source=file; tdmrep=\"{tdmrep}\"; rule=0; location=\"/private/*\"; tdm-reservation=1; policy=\"{POLICY}\"").as_str()),
        "{head}"
    );
    let (status, _, body) = curl(&proxy, &origin.url("/public"), &["-A", "trainer/1"]);
    assert_eq!((status, body.as_str()), (200, "public"));
    // A search crawler is not bound: it never needs the file.
    let (status, _, _) = curl(&proxy, &origin.url("/private/a"), &["-A", "indexer/1"]);
    assert_eq!(status, 200);
    // At the origin: the refused page never arrived; the file was fetched once, in its
    // own turn (a Crawl-delay after robots.txt), and the next page a delay after it.
    let seen = origin.seen();
    assert_eq!(
        targets(&seen),
        [
            "/robots.txt",
            "/.well-known/tdmrep.json",
            "/public",
            "/private/a"
        ],
        "{seen:?}"
    );
    assert_gaps_at_least(&seen, Duration::from_secs(1));
    assert_eq!(
        seen[1].header("User-Agent"),
        seen[0].header("User-Agent"),
        "fetched as robots.txt is"
    );
    assert_eq!(
        proxy.sum("robotsgate_tdmrep_fetches_total", "outcome=\"2xx\""),
        1.0
    );
    // The evidence: the fetch recorded before it left and the file kept by its hash;
    // the refusal names that file and rule; verify judges it again and agrees.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let (fetched, refused) = loop {
        let all = records(evidence.path());
        let fetched = all
            .iter()
            .find(|r| r["type"] == "fetched" && r["url"] == tdmrep.as_str())
            .cloned();
        let refused = all
            .iter()
            .find(|r| r["type"] == "decision" && r["verdict"] == "usage_refused")
            .cloned();
        if let (Some(fetched), Some(refused)) = (fetched, refused) {
            assert!(
                all.iter()
                    .any(|r| r["type"] == "fetch" && r["url"] == tdmrep.as_str()),
                "{all:?}"
            );
            break (fetched, refused);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not recorded: {all:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let sha = fetched["sha256"].as_str().expect("the file kept");
    assert_eq!(refused["tdmrep"]["sha256"], sha, "{refused}");
    assert_eq!(refused["tdmrep"]["rule"], 0, "{refused}");
    let kept = std::fs::read(evidence.path().join("policies").join(sha)).expect("kept");
    assert_eq!(kept, FILE.as_bytes());
    drop(proxy);
    let (ok, said) = evidence_cli(&["verify", evidence.path().to_str().expect("path")]);
    assert!(ok, "{said}");
    assert!(said.contains(" 0 breaks, 0 decided otherwise"), "{said}");
    // A file changed under the record: verify finds it changed.
    std::fs::write(
        evidence.path().join("policies").join(sha),
        FILE.replace("\"tdm-reservation\":1", "\"tdm-reservation\":0"),
    )
    .expect("write");
    let (ok, said) = evidence_cli(&["verify", evidence.path().to_str().expect("path")]);
    assert!(!ok && said.contains(&format!("policy {sha}")), "{said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_mode_sends_what_the_file_reserves_marked() {
    let origin = origin_with_file().await;
    let proxy = Proxy::start_for_loopback(&crawlers("report"));
    let (status, head, body) = curl(&proxy, &origin.url("/private/a"), &["-A", "trainer/1"]);
    assert_eq!((status, body.as_str()), (200, "private"), "{head}");
    let decision = header_of(&head, "X-Robots-Decision").unwrap_or_default();
    assert!(
        decision.starts_with("would-tdm-reserve; source=file; tdmrep=")
            && decision.contains("rule=0"),
        "{head}"
    );
    assert_eq!(origin.count("/private/a"), 1);
    assert_eq!(
        proxy.sum(
            "robotsgate_requests_total",
            "decision=\"would_usage_refuse\""
        ),
        1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_huge_or_looping_file_is_bounded_and_reads_as_unset() {
    let reserve_all = r#"[{"location":"/","tdm-reservation":1}]"#;
    let huge = format!(
        "{}{}]",
        &reserve_all[..reserve_all.len() - 1],
        r#",{"location":"/x","tdm-reservation":0}"#.repeat(8_000)
    );
    assert!(huge.len() > 256 * 1024);
    let cases = [
        ("slow", Behaviour::delayed(4_000, reserve_all)),
        (
            "huge",
            Behaviour::with_headers(200, &[("Content-Type", "application/json")], &huge),
        ),
        ("loop", Behaviour::redirect(302, "/.well-known/tdmrep.json")),
    ];
    let proxy =
        Proxy::start_for_loopback(&crawlers("enforce").set("robots.fetch_timeout_seconds", 1));
    for (name, file) in cases {
        let origin = TestOrigin::robots_and(
            "User-agent: *\nAllow: /\n",
            vec![
                ("/.well-known/tdmrep.json", file),
                ("/page", Behaviour::ok("page")),
            ],
        )
        .await;
        let (status, head, body) = curl(&proxy, &origin.url("/page"), &["-A", "trainer/1"]);
        assert_eq!((status, body.as_str()), (200, "page"), "{name}: {head}");
        assert_eq!(origin.count("/page"), 1, "{name}");
        assert!(origin.count("/.well-known/tdmrep.json") >= 1, "{name}");
    }
    for outcome in ["network", "too_large", "3xx_exhausted"] {
        assert_eq!(
            proxy.sum(
                "robotsgate_tdmrep_fetches_total",
                &format!("outcome=\"{outcome}\"")
            ),
            1.0,
            "{outcome}"
        );
    }
}

/// In a fleet the file is read by the origin's owner alone, and a request handed to it
/// (relayed in plain HTTP; inside an intercepted tunnel, in HTTP/2) is refused there by
/// the file with nothing sent to the origin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_fleet_the_owner_reads_the_file_for_each_path() {
    let fleet = crate::fleet_fixture::HttpsFleet::start(&crawlers("enforce")).await;
    let plain = origin_with_file().await;
    let tls = fleet.origin("User-agent: *\nAllow: /\n").await;
    let json = [("Content-Type", "application/json")];
    tls.set(
        "/.well-known/tdmrep.json",
        Behaviour::with_headers(200, &json, FILE),
    );
    let indexer = ["-A", "indexer/1"];
    assert_eq!(
        curl(fleet.member(0), &plain.url("/public"), &indexer).0,
        200
    );
    let claimed = fleet.curl(0, &tls.url("/claim"), "operator-ca.pem", &indexer);
    assert_eq!(claimed.0, 200, "{}", claimed.1);
    let (status, head, _) = curl(
        fleet.member(1),
        &plain.url("/private/a"),
        &["-A", "trainer/1"],
    );
    assert_eq!(status, 403, "{head}\n{}", fleet.member(1).log());
    assert!(head.contains("tdm-reserved; source=file;"), "{head}");
    let h2 = ["--http2", "-A", "trainer/1"];
    let (status, head, _) = fleet.curl(1, &tls.url("/private/a"), "operator-ca.pem", &h2);
    assert_eq!(status, 403, "{head}\n{}", fleet.member(1).log());
    assert!(head.contains("tdm-reserved; source=file;"), "{head}");
    for origin in [&plain, &tls] {
        assert_eq!(origin.count("/private/a"), 0, "{:?}", origin.seen());
        assert_eq!(
            origin.count("/.well-known/tdmrep.json"),
            1,
            "{:?}",
            origin.seen()
        );
    }
    let handed = crate::fleet_fixture::handed_over_reaching(fleet.member(1), 2.0).await;
    assert_eq!(handed, 2.0, "both were handed over");
}

/// TDMRep's file judges redirected requests as proxied ones: a crawler declaring
/// `train-ai` (by an agent rule on its User-Agent) is refused a path the file reserves,
/// in plain HTTP and in TLS, with nothing sent; the file is fetched once per origin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirected_requests_are_judged_by_the_file() {
    use crate::transparent::{decision, Rules, World, ROBOTS};
    let rule = serde_json::json!([{
        "user_agent_contains": "trainer",
        "tokens": ["OtherBot"],
        "purposes": ["train-ai"],
        "trust_client_text": true,
    }]);
    let w = World::new(
        ROBOTS,
        Rules::Iptables,
        &Conf::new().set("agent.rules", rule),
    )
    .await;
    let file = r#"[{"location":"/tdm/*","tdm-reservation":1}]"#;
    for origin in [&w.site, &w.site_tls] {
        origin.set(
            "/.well-known/tdmrep.json",
            Behaviour::with_headers(200, &[("Content-Type", "application/json")], file),
        );
    }
    for url in ["http://site.test/tdm/a", "https://site.test/tdm/a"] {
        let (status, head, _) = w.crawl(url, &["-A", "trainer/1"]);
        assert_eq!(status, 403, "{url}: {head}\n{}", w.proxy.log());
        assert!(
            decision(&head).contains("tdm-reserved; source=file;"),
            "{url}: {head}"
        );
        let (status, _, _) = w.crawl(&url.replace("/tdm/", "/open/"), &["-A", "trainer/1"]);
        assert_eq!(status, 200, "{url}");
    }
    for origin in [&w.site, &w.site_tls] {
        assert_eq!(origin.count("/tdm/a"), 0, "{:?}", origin.seen());
        assert_eq!(origin.count("/open/a"), 1, "{:?}", origin.seen());
        assert_eq!(origin.count("/.well-known/tdmrep.json"), 1);
    }
}
