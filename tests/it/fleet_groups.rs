//! A request handed over keeps what chose its robots.txt group. On every path a member
//! hands a request to its origin's owner by — the proxy pass, the front's relay, a
//! request inside an intercepted tunnel in HTTP/1.1 and in HTTP/2, a blind tunnel — a
//! proxy user whose tokens name a group stricter than the default's is judged by that
//! group at the owner, as it is at the owner itself: refused, with nothing at the
//! origin. A user under the lenient group is served on the same path (the path works),
//! and the owner's access line says the tokens came from the credential.

use crate::common::{curl, passwd_line, Conf, Proxy, TestOrigin};
use crate::fleet_fixture::HttpsFleet;

/// The default group allows everything; `StrictBot`'s allows nothing.
const ROBOTS: &str = "User-agent: StrictBot\nDisallow: /\n\nUser-agent: *\nAllow: /\n";

/// `strict` (tokens `StrictBot`) and `open` (tokens `OpenBot`, the default group), in
/// a credentials file kept by the directory returned.
fn users() -> (tempfile::TempDir, Conf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("users");
    let lines = [
        passwd_line("strict", "strict-secret", &["StrictBot"]),
        passwd_line("open", "open-secret", &["OpenBot"]),
    ];
    std::fs::write(&file, lines.join("\n")).expect("write users");
    let conf = Conf::new().set("access.credentials_file", file.display().to_string());
    (dir, conf)
}

const STRICT: [&str; 2] = ["--proxy-user", "strict:strict-secret"];
const OPEN: [&str; 2] = ["--proxy-user", "open:open-secret"];

/// The owner's access line for `path`, once written (a thread of its own writes it).
async fn owners_line(owner: &Proxy, path: &str) -> String {
    let field = format!("path=\"{path}\"");
    let log = owner
        .log_with(|l| l.contains(" access: ") && l.contains(&field))
        .await;
    log.lines()
        .find(|l| l.contains(" access: ") && l.contains(&field))
        .unwrap_or_else(|| panic!("no access line for {path} at the owner:\n{log}"))
        .to_string()
}

/// `path` sent through member 1 (which does not own the origin) as `strict` is refused
/// by the owner's `StrictBot` group and never reaches the origin; as `open` it is served.
async fn judged_by_the_users_group(
    fleet: &HttpsFleet,
    origin: &TestOrigin,
    path: &str,
    send: impl Fn(&str, &[&str]) -> (u16, String, String),
) {
    let strict = format!("{path}/strict");
    let (status, head, _) = send(&origin.url(&strict), &STRICT);
    assert_eq!(status, 403, "{path}: {head}\n{}", fleet.member(1).log());
    assert!(head.contains("disallowed"), "{path}: {head}");
    assert_eq!(origin.count(&strict), 0, "{path}: at the origin");
    let line = owners_line(fleet.member(0), &strict).await;
    assert!(line.contains("tokens_from=\"credential\""), "{line}");
    let open = format!("{path}/open");
    let (status, head, _) = send(&origin.url(&open), &OPEN);
    assert_eq!(status, 200, "{path}: {head}");
    assert_eq!(origin.count(&open), 1, "{path}: at the origin");
}

/// Plain HTTP by the proxy pass (the owner not yet known, or a request with a body)
/// and by the front's relay; HTTPS intercepted, in HTTP/1.1 and HTTP/2 inside the
/// tunnel: each handed over with its user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_path_a_request_is_handed_over_by_keeps_its_users_group() {
    let (_users, conf) = users();
    let fleet = HttpsFleet::start(&conf).await;
    let plain = TestOrigin::robots(ROBOTS).await;
    let tls = fleet.origin(ROBOTS).await;
    assert_eq!(curl(fleet.member(0), &plain.url("/claim"), &OPEN).0, 200);
    let fleet = &fleet;
    let intercepted = |i: usize, protocol: &'static str| {
        move |url: &str, user: &[&str]| {
            fleet.curl(i, url, "operator-ca.pem", &[&[protocol][..], user].concat())
        }
    };
    assert_eq!(
        intercepted(0, "--http1.1")(&tls.url("/claim"), &OPEN).0,
        200
    );
    // Member 1 meets the plain origin first with a strict request: not knowing the
    // owner, it takes the proxy's pass.
    let through_1 = |url: &str, user: &[&str]| curl(fleet.member(1), url, user);
    judged_by_the_users_group(fleet, &plain, "/pass", through_1).await;
    // Now it knows the owner: a GET is relayed by the front, a body takes the pass.
    judged_by_the_users_group(fleet, &plain, "/relay", through_1).await;
    let with_body = |url: &str, user: &[&str]| {
        let args = [user, &["--data", "x=1"][..]].concat();
        curl(fleet.member(1), url, &args)
    };
    judged_by_the_users_group(fleet, &plain, "/body", with_body).await;
    judged_by_the_users_group(fleet, &tls, "/h1", intercepted(1, "--http1.1")).await;
    judged_by_the_users_group(fleet, &tls, "/h2", intercepted(1, "--http2")).await;
    let handed = crate::fleet_fixture::handed_over_reaching(fleet.member(1), 10.0).await;
    assert_eq!(
        handed, 10.0,
        "every request through member 1 was handed over"
    );
}

/// A blind tunnel handed to its owner is judged by its proxy user's group there (the
/// hole: it was judged by the default group, and the tunnel opened); without proxy
/// users, by the agent rule its CONNECT's `User-Agent` matches. Refused tunnels open no
/// connection to the origin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blind_tunnel_handed_over_keeps_its_users_group() {
    let (_users, conf) = users();
    let blind = Conf::new().set("tls.blind_tunnel", ["localhost"]);
    let fleet = HttpsFleet::start(&conf.with(&blind)).await;
    let origin = fleet.origin(ROBOTS).await;
    // Not `HttpsFleet::curl`, which hides the CONNECT's answer: a refusal is its 403.
    let ca = fleet.setup.dir.path().join("origin-ca.pem");
    let ca = ca.to_str().expect("path").to_string();
    let through = |i: usize| {
        let (fleet, ca) = (&fleet, ca.clone());
        move |url: &str, user: &[&str]| {
            curl(
                fleet.member(i),
                url,
                &[&["--cacert", &ca][..], user].concat(),
            )
        }
    };
    assert_eq!(through(0)(&origin.url("/claim"), &OPEN).0, 200);
    let before = origin.accepted().len();
    assert_eq!(
        through(0)(&origin.url("/own"), &STRICT).0,
        403,
        "at the owner"
    );
    let (status, head, _) = through(1)(&origin.url("/handed"), &STRICT);
    assert_eq!(status, 403, "{head}\n{}", fleet.member(1).log());
    assert_eq!(
        origin.accepted().len(),
        before,
        "a refused tunnel opened a connection"
    );
    assert_eq!(origin.count("/handed"), 0);
    assert_eq!(through(1)(&origin.url("/open"), &OPEN).0, 200);
    assert_eq!(origin.count("/open"), 1);
    drop(fleet);

    // No proxy users: the group comes from the rule the CONNECT's User-Agent matches.
    let rule =
        serde_json::json!([{"user_agent_contains": "StrictCrawler", "tokens": ["StrictBot"]}]);
    let fleet = HttpsFleet::start(&blind.set("agent.rules", rule)).await;
    let origin = fleet.origin(ROBOTS).await;
    let ca = fleet.setup.dir.path().join("origin-ca.pem");
    let as_agent = |i: usize, path: &str, agent: &str| {
        let args = ["--cacert", ca.to_str().expect("path"), "-A", agent];
        curl(fleet.member(i), &origin.url(path), &args).0
    };
    assert_eq!(as_agent(0, "/claim", "OtherCrawler/1.0"), 200);
    assert_eq!(as_agent(1, "/ua", "StrictCrawler/1.0"), 403);
    assert_eq!(origin.count("/ua"), 0);
    assert_eq!(as_agent(1, "/other", "OtherCrawler/1.0"), 200);
}
