//! Who may use the proxy: client networks and `Proxy-Authorization: Basic` with users
//! from a credentials file written by the real `robotsgate passwd`. Real sockets, curl
//! as the crawler, a loopback origin that records what reaches it.

use crate::common::{curl, passwd_line, Conf, Proxy, TestOrigin};

const ROBOTS: &str =
    "User-agent: TeamBot\nDisallow: /team-only/\n\nUser-agent: *\nDisallow: /everyone/\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_outside_the_allowed_networks_are_refused() {
    let origin = TestOrigin::robots(ROBOTS).await;
    // Loopback is not in the list, so this test's own client is outside it.
    let proxy = Proxy::start_for_loopback(&Conf::new().set("access.allow_clients", ["10.0.0.0/8"]));
    let (status, head, body) = curl(&proxy, &origin.url("/page"), &[]);
    assert_eq!(status, 403, "{head}");
    assert!(
        head.contains("refused; reason=\"client_network\""),
        "{head}"
    );
    assert!(body.contains("access.allow_clients"), "{body}");
    assert!(origin.seen().is_empty(), "nothing reached the origin");
    assert_eq!(
        proxy.metric("robotsgate_downstream_refusals_total{reason=\"client_network\"}"),
        Some(1.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_auth_identifies_the_team_and_never_travels_upstream() {
    let origin = TestOrigin::robots(ROBOTS).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let users = dir.path().join("users");
    let lines = format!(
        "# crawler teams\n{}\n{}\n",
        passwd_line("team", "team-secret", &["TeamBot"]),
        passwd_line("plain", "plain-secret", &[]),
    );
    std::fs::write(&users, lines).expect("write users");
    let proxy = Proxy::start_for_loopback(
        &Conf::new()
            .set("access.credentials_file", users.display().to_string())
            .set("access.realm", "crawl-fleet"),
    );
    let page = origin.url("/team-only/a");

    // No credentials, then wrong ones: 407 with the challenge; nothing goes upstream.
    let (status, head, _) = curl(&proxy, &page, &[]);
    assert_eq!(status, 407, "{head}");
    assert!(
        head.contains("Proxy-Authenticate: Basic realm=\"crawl-fleet\""),
        "{head}"
    );
    let (status, _, _) = curl(&proxy, &page, &["--proxy-user", "team:wrong"]);
    assert_eq!(status, 407);
    let (status, _, _) = curl(&proxy, &page, &["--proxy-user", "nobody:team-secret"]);
    assert_eq!(status, 407);
    assert!(origin.seen().is_empty());

    // The user's tokens decide the group, whatever the User-Agent says.
    let team = [
        "--proxy-user",
        "team:team-secret",
        "-A",
        "SomethingElse/1.0",
    ];
    let (status, head, _) = curl(&proxy, &page, &team);
    assert_eq!(status, 403, "TeamBot's group applies: {head}");
    let (status, _, body) = curl(&proxy, &origin.url("/everyone/b"), &team);
    assert_eq!(status, 200, "TeamBot's group does not disallow /everyone/");
    assert_eq!(body, "page /everyone/b\n");
    // A user without tokens is judged by the usual rules (here: the `*` group).
    let plain = [
        "--proxy-user",
        "plain:plain-secret",
        "-A",
        "SomethingElse/1.0",
    ];
    assert_eq!(curl(&proxy, &origin.url("/everyone/c"), &plain).0, 403);
    assert_eq!(curl(&proxy, &origin.url("/team-only/d"), &plain).0, 200);

    // Never forwarded: neither to the page nor with the robots.txt fetch.
    let seen = origin.seen();
    assert_eq!(
        seen.iter().map(|s| s.target.as_str()).collect::<Vec<_>>(),
        ["/robots.txt", "/everyone/b", "/team-only/d"]
    );
    for request in &seen {
        assert_eq!(request.header("proxy-authorization"), None, "{request:?}");
    }
    let refused = |reason: &str| {
        proxy
            .metric(&format!(
                "robotsgate_downstream_refusals_total{{reason=\"{reason}\"}}"
            ))
            .unwrap_or(0.0)
    };
    assert_eq!(refused("auth_required"), 1.0);
    assert_eq!(refused("auth_failed"), 2.0);
}

#[test]
fn a_bad_credentials_file_stops_the_start_naming_the_key_and_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let users = dir.path().join("users");
    std::fs::write(&users, "alice:not-a-hash\n").expect("write");
    let config = dir.path().join("robotsgate.yaml");
    let conf = Conf::new().set("access.credentials_file", users.display().to_string());
    std::fs::write(&config, conf.file(&[])).expect("write");
    let stderr = crate::common::config_refusal(&config);
    assert!(
        stderr.contains("robotsgate.access.credentials_file") && stderr.contains("line 1"),
        "{stderr}"
    );
}
