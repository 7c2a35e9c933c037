//! The state file over real processes: robotsgate stopped and started again (and
//! upgraded in place) keeps its robots.txt copies, their ages and its backoffs.

use std::time::Duration;

use crate::common::{curl, eventually, static_dns, Behaviour, Conf, Proxy, TestOrigin};

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
    conf: Conf,
}

/// The state file's HMAC key the tests' robotsgates share.
const KEY: &[u8] = b"state key of the state tests";

impl Setup {
    async fn new(extra: &Conf) -> Setup {
        let dir = tempfile::tempdir().expect("tempdir");
        let dns = static_dns(vec!["127.0.0.1".parse().expect("ip")]).await;
        std::fs::write(dir.path().join("state.key"), KEY).expect("key");
        let file = |name: &str| dir.path().join(name).display().to_string();
        let conf = Conf::new()
            .set("dns.nameservers", [dns.to_string()])
            .set("robots.state_file", file("state.bin"))
            .set("robots.state_key_file", file("state.key"))
            .set("robots.min_ttl_seconds", 1)
            .set("robots.retry_initial_seconds", 120)
            .with(extra);
        Setup { dir, conf }
    }

    fn key(&self) -> std::path::PathBuf {
        self.dir.path().join("state.key")
    }

    fn start(&self) -> Proxy {
        Proxy::start_for_loopback(&self.conf)
    }

    fn state(&self) -> std::path::PathBuf {
        self.dir.path().join("state.bin")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_keeps_fresh_copies_refreshes_expired_ones_and_keeps_backoffs() {
    let origin = TestOrigin::robots("User-agent: *\nDisallow: /private\n").await;
    let short = TestOrigin::robots_for("User-agent: *\nDisallow: /s\n", 1).await;
    let failing = TestOrigin::start(vec![("/robots.txt", Behaviour::status(503))]).await;
    let setup = Setup::new(&Conf::new()).await;
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
    let origin = TestOrigin::robots("User-agent: *\nDisallow: /private\n").await;
    let setup = Setup::new(&Conf::new()).await;
    let mut proxy = setup.start();
    assert_eq!(curl(&proxy, &origin.url("/a"), &[]).0, 200);
    proxy.stop();
    let good = std::fs::read(setup.state()).expect("state written");
    let check = |path: &std::path::Path| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_robotsgate"))
            .arg("check-state")
            .arg(path)
            .arg("--key")
            .arg(setup.key())
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
    let origin = TestOrigin::robots("User-agent: *\nDisallow: /private\n").await;
    let setup = Setup::new(&Conf::new()).await;
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

/// A well-formed state file, written by hand: `origin` allowed everything, fresh for
/// ten years, paused for ten years, sealed with `key` (HMAC-SHA256, the file's trailer):
/// robotsgate's own key for a file an earlier, looser configuration wrote; any other for
/// a forgery.
fn forged_allow_all(origin: &str, key: &[u8]) -> Vec<u8> {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64;
    let ten_years = 10 * 365 * 86_400_000i64;
    let string = |out: &mut Vec<u8>, s: &[u8]| {
        out.extend_from_slice(&(s.len() as u32).to_le_bytes());
        out.extend_from_slice(s);
    };
    let mut out = b"RGSTATE\0".to_vec();
    out.extend_from_slice(&2u32.to_le_bytes());
    out.extend_from_slice(&1u64.to_le_bytes());
    string(&mut out, origin.as_bytes());
    out.push(1); // allow all
    string(&mut out, b"forged");
    out.extend_from_slice(&(now_ms + ten_years).to_le_bytes()); // fresh until
    out.extend_from_slice(&(now_ms + ten_years).to_le_bytes()); // fetched (in the future)
    out.extend_from_slice(&i64::MIN.to_le_bytes()); // unreachable since
    out.extend_from_slice(&i64::MIN.to_le_bytes()); // retry at
    out.extend_from_slice(&0u32.to_le_bytes());
    string(&mut out, b"HTTP 404");
    string(&mut out, b"");
    out.extend_from_slice(&1u32.to_le_bytes());
    string(&mut out, b"");
    out.extend_from_slice(&(now_ms + ten_years).to_le_bytes()); // paused until
    out.extend_from_slice(&(ten_years as u64).to_le_bytes()); // backoff ms
    out.extend_from_slice(b"RGEND\0\0\0");
    let tag = ring::hmac::sign(&ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key), &out);
    out.extend_from_slice(tag.as_ref());
    out
}

/// Puts something at the state path.
type MakeFile = dyn Fn(&std::path::Path);

fn check_state(path: &std::path::Path, config: Option<&std::path::Path>) -> (bool, String) {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_robotsgate"));
    command.arg("check-state").arg(path);
    if config.is_none() {
        let key = path.with_file_name("state.key");
        command.arg("--key").arg(key);
    }
    if let Some(config) = config {
        command.arg("--config").arg(config);
    }
    let out = command.output().expect("check-state");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// Only a file robotsgate wrote with its key is loaded: a forged one (well formed, owned
/// by robotsgate's user, mode 0600) is refused by its HMAC; a file of its own written
/// under looser limits has its lifetimes clamped to this configuration's; and only a
/// regular file of robotsgate's own user, writable by no one else, is read at all — a
/// FIFO, a symbolic link, another owner or a group-writable file is refused with a WARN
/// naming it, never waited on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_file_is_trusted_no_further_than_its_owner_and_the_limits() {
    use std::os::unix::fs::PermissionsExt;
    let origin = TestOrigin::robots("User-agent: *\nDisallow: /private\n").await;
    let setup = Setup::new(
        &Conf::new()
            .set("robots.max_ttl_seconds", 3600)
            .set("pacing.ceiling_seconds", 30),
    )
    .await;
    let config = setup.dir.path().join("limits.yaml");
    let conf = Conf::new()
        .set("robots.max_ttl_seconds", 3600)
        .set("robots.state_file", setup.state().display().to_string())
        .set("robots.state_key_file", setup.key().display().to_string())
        .set("pacing.ceiling_seconds", 30);
    std::fs::write(&config, conf.file(&[])).expect("config");
    let site = origin.url("");
    // A forger without the key: refused whole, however well formed and owned.
    std::fs::write(
        setup.state(),
        forged_allow_all(site.trim_end_matches('/'), b"the forger's own key"),
    )
    .expect("forge");
    std::fs::set_permissions(setup.state(), std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let (ok, said) = check_state(&setup.state(), Some(&config));
    assert!(!ok && said.contains("HMAC"), "{said}");
    {
        let proxy = setup.start();
        let log = proxy.log();
        assert!(
            log.contains("state.bin not loaded") && log.contains("HMAC"),
            "{log}"
        );
        assert_eq!(curl(&proxy, &origin.url("/private/x"), &[]).0, 403);
    }
    // Written with robotsgate's key under looser limits: loaded, lifetimes clamped.
    std::fs::write(
        setup.state(),
        forged_allow_all(site.trim_end_matches('/'), KEY),
    )
    .expect("write");
    let (ok, said) = check_state(&setup.state(), Some(&config));
    assert!(
        ok && said.contains("OK, 1 origins") && said.contains("4 lifetimes"),
        "{said}"
    );

    let proxy = setup.start();
    let warned = || {
        proxy
            .log()
            .contains("4 lifetimes beyond this configuration's limits")
    };
    assert!(
        eventually(Duration::from_secs(5), warned).await,
        "{}",
        proxy.log()
    );
    let encoded = site
        .trim_end_matches('/')
        .replace(':', "%3A")
        .replace('/', "%2F");
    let out = std::process::Command::new("curl")
        .args(["-s", &format!("http://{}/origins/{encoded}", proxy.admin)])
        .output()
        .expect("curl");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let fresh = v["robots"]["fresh_for_seconds"]
        .as_f64()
        .expect("fresh_for_seconds");
    assert!(fresh <= 3600.0, "clamped to max_ttl_seconds: {v}");
    let pause = v["pacing"][0]["next_slot_in_seconds"]
        .as_f64()
        .unwrap_or(0.0);
    assert!(pause <= 30.0, "clamped to the ceiling: {v}");
    drop(proxy);

    files_it_did_not_write_are_refused(&setup, &origin).await;
}

/// Files robotsgate did not write, or cannot be sure it did (a FIFO, a symbolic link,
/// one others may write or another uid owns): refused by `check state` and at start-up,
/// each by name, and the origin's robots.txt judges as if no state were kept.
async fn files_it_did_not_write_are_refused(setup: &Setup, origin: &TestOrigin) {
    use std::os::unix::fs::PermissionsExt;
    let refusals: [(&str, &MakeFile); 4] = [
        ("not a regular file", &|p| {
            crate::common::run_ok(std::process::Command::new("mkfifo").arg(p));
        }),
        ("symbolic link", &|p| {
            let target = p.with_extension("target");
            std::fs::write(&target, forged_allow_all("http://a.test", KEY)).expect("target");
            std::os::unix::fs::symlink(&target, p).expect("symlink");
        }),
        ("writable by group or others", &|p| {
            std::fs::write(p, forged_allow_all("http://a.test", KEY)).expect("write");
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o666)).expect("chmod");
        }),
        ("owned by uid 65534", &|p| {
            std::fs::write(p, forged_allow_all("http://a.test", KEY)).expect("write");
            std::os::unix::fs::chown(p, Some(65534), Some(65534)).expect("chown");
        }),
    ];
    for (why, make) in refusals {
        let _ = std::fs::remove_file(setup.state());
        make(&setup.state());
        let (ok, said) = check_state(&setup.state(), None);
        assert!(!ok && said.contains(why), "{why}: {said}");
        let proxy = setup.start();
        let log = proxy.log();
        assert!(
            log.contains("WARN") && log.contains("state.bin not loaded") && log.contains(why),
            "{why}: {log}"
        );
        assert_eq!(curl(&proxy, &origin.url("/private/x"), &[]).0, 403, "{why}");
    }
}
