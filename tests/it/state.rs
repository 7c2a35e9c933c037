//! The state file over real processes: robotsgate stopped and started again (and
//! upgraded in place) keeps its robots.txt copies, their ages and its backoffs.

use std::time::Duration;

use crate::common::{curl, static_dns, Behaviour, Proxy, TestOrigin};

const NAMES: usize = 200;

/// robots.txt fetches the origin received for `host`.
fn fetches(origin: &TestOrigin, host: &str) -> usize {
    origin
        .seen()
        .iter()
        .filter(|s| {
            s.target == "/robots.txt" && s.header("host").is_some_and(|h| h.starts_with(host))
        })
        .count()
}

fn all_fetches(origin: &TestOrigin) -> usize {
    origin.count("/robots.txt")
}

struct Setup {
    dir: tempfile::TempDir,
    yaml: String,
}

impl Setup {
    async fn new(extra: &str) -> Setup {
        let dir = tempfile::tempdir().expect("tempdir");
        let dns = static_dns(vec!["127.0.0.1".parse().expect("ip")]).await;
        let yaml = format!(
            "  dns:\n    nameservers: [\"{dns}\"]\n  robots:\n    state_file: {}\n    min_ttl_seconds: 1\n    retry_initial_seconds: 120\n{extra}",
            dir.path().join("state.bin").display()
        );
        Setup { dir, yaml }
    }

    fn start(&self) -> Proxy {
        Proxy::start_for_loopback(&self.yaml)
    }

    fn state(&self) -> std::path::PathBuf {
        self.dir.path().join("state.bin")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_keeps_fresh_copies_refreshes_expired_ones_and_keeps_backoffs() {
    let origin = TestOrigin::start(vec![(
        "/robots.txt",
        Behaviour::ok("User-agent: *\nDisallow: /private\n"),
    )])
    .await;
    let short = TestOrigin::start(vec![(
        "/robots.txt",
        Behaviour::with_headers(
            200,
            &[("Cache-Control", "max-age=1")],
            "User-agent: *\nDisallow: /s\n",
        ),
    )])
    .await;
    let failing = TestOrigin::start(vec![("/robots.txt", Behaviour::status(503))]).await;
    let setup = Setup::new("").await;
    let mut proxy = setup.start();
    let port = origin.addr.port();
    let url = |i: usize, path: &str| format!("http://n{i}.test:{port}{path}");
    for i in 0..NAMES {
        assert_eq!(curl(&proxy, &url(i, "/a"), &[]).0, 200);
    }
    assert_eq!(curl(&proxy, &short.url("/a"), &[]).0, 200);
    assert_eq!(curl(&proxy, &failing.url("/a"), &[]).0, 503);
    assert_eq!(all_fetches(&origin), NAMES);
    proxy.stop();
    assert!(proxy.log().contains("written (stop)"), "{}", proxy.log());
    // The short-lived copy expires while robotsgate is down.
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let proxy = setup.start();
    let loaded = format!("{} origins", NAMES + 2);
    assert!(
        crate::common::eventually(Duration::from_secs(5), || proxy.log().contains(&loaded)).await,
        "{}",
        proxy.log()
    );
    for i in 0..NAMES {
        assert_eq!(curl(&proxy, &url(i, "/private/x"), &[]).0, 403);
    }
    assert_eq!(all_fetches(&origin), NAMES, "no refetch for fresh copies");
    assert_eq!(fetches(&origin, "n7.test"), 1);
    assert_eq!(curl(&proxy, &short.url("/b"), &[]).0, 200);
    assert_eq!(all_fetches(&short), 2, "one refetch for the expired copy");
    // Still backed off: answered from the state, not fetched again.
    let (status, head, _) = curl(&proxy, &failing.url("/b"), &[]);
    assert_eq!(status, 503, "{head}");
    assert_eq!(all_fetches(&failing), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_state_file_is_a_warning_and_an_empty_start() {
    let origin = TestOrigin::start(vec![(
        "/robots.txt",
        Behaviour::ok("User-agent: *\nDisallow: /private\n"),
    )])
    .await;
    let setup = Setup::new("").await;
    let mut proxy = setup.start();
    assert_eq!(curl(&proxy, &origin.url("/a"), &[]).0, 200);
    proxy.stop();
    let good = std::fs::read(setup.state()).expect("state written");
    let check = |path: &std::path::Path| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_robotsgate"))
            .arg("check-state")
            .arg(path)
            .output()
            .expect("check-state");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (ok, said) = check(&setup.state());
    assert!(ok && said.contains("OK, 1 origins"), "{said}");
    let mut future = good.clone();
    future[8] = 99; // the format version
    let damaged: Vec<(&str, Vec<u8>)> = vec![
        ("truncated", good[..good.len() / 2].to_vec()),
        (
            "random bytes",
            (0..4096u32)
                .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
                .collect(),
        ),
        ("future version", future),
        ("empty", Vec::new()),
    ];
    for (what, bytes) in damaged {
        std::fs::write(setup.state(), &bytes).expect("write");
        let (ok, said) = check(&setup.state());
        assert!(
            !ok && said.contains("would not be loaded"),
            "{what}: {said}"
        );
        let proxy = setup.start();
        let log = proxy.log();
        assert!(
            log.contains("WARN") && log.contains("state.bin not loaded"),
            "{what}: {log}"
        );
        let before = origin.count("/robots.txt");
        assert_eq!(
            curl(&proxy, &origin.url("/private/x"), &[]).0,
            403,
            "{what}"
        );
        assert_eq!(
            origin.count("/robots.txt"),
            before + 1,
            "{what}: started empty"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_upgrade_hands_the_state_over_without_a_refetch() {
    let origin = TestOrigin::start(vec![(
        "/robots.txt",
        Behaviour::ok("User-agent: *\nDisallow: /private\n"),
    )])
    .await;
    let setup = Setup::new("").await;
    let proxy = setup.start();
    let port = origin.addr.port();
    let url = |i: usize, path: &str| format!("http://n{i}.test:{port}{path}");
    for i in 0..NAMES {
        assert_eq!(curl(&proxy, &url(i, "/a"), &[]).0, 200);
    }
    let upgraded = proxy.upgrade();
    for i in 0..NAMES {
        assert_eq!(curl(&upgraded, &url(i, "/private/y"), &[]).0, 403);
    }
    assert_eq!(all_fetches(&origin), NAMES, "{}", upgraded.log());
    drop(proxy);
}
