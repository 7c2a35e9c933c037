//! TDMRep's header at the egress, over real sockets: an origin's answer reserving TDM
//! rights is withheld from a crawler whose declared purposes the reservation binds
//! (451, no body; the origin did receive and answer the request), given to one whose
//! purposes it does not bind, and marked in report mode.

use serde_json::json;

use crate::common::{curl, records, Behaviour, Conf, Proxy, TestOrigin};

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

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| v.trim())
    })
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
        header(&head, "X-Robots-Decision"),
        Some(
            format!("tdm-reserved; source=header; tdm-reservation=1; policy=\"{POLICY}\"").as_str()
        ),
        "{head}"
    );
    assert_eq!(header(&head, "Set-Cookie"), None, "{head}");
    // The exchange was made at the origin: it received the request and answered it.
    assert_eq!(origin.count("/reserved"), 1);
    assert!(origin.first("/reserved").done.is_some());
    // A search crawler is not bound by a TDM reservation.
    let (status, head, body) = curl(&proxy, &url, &["-A", "indexer/1"]);
    assert_eq!(status, 200, "{head}");
    assert_eq!(body, "the reserved page's body");
    assert_eq!(header(&head, "tdm-reservation"), Some("1"), "{head}");
    assert_eq!(origin.count("/reserved"), 2);
    assert_eq!(
        proxy.sum("robotsgate_requests_total", "decision=\"tdm_withheld\""),
        1.0
    );
    // The evidence: the decision to send it, then its outcome naming what was withheld.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
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
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
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
        header(&head, "X-Robots-Decision"),
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
