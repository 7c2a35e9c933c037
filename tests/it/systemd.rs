//! The shipped systemd unit and production configuration: `systemd-analyze` judges the
//! unit (exposure ≤ 2.0, no verification errors) and `robotsgate check-config`, which the
//! unit runs before every start and reload, accepts the production file and refuses a bad
//! one naming the key.

use crate::common::Conf;
use std::path::Path;
use std::process::Command;

const UNIT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/systemd/robotsgate.service");
const PRODUCTION: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/conf/production.yaml");

/// Runs a command: whether it succeeded, and stdout followed by stderr.
fn run(command: &mut Command, what: &str) -> (bool, String) {
    let out = command.output().expect(what);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn systemd_analyze(args: &[&str]) -> (bool, String) {
    run(
        Command::new("systemd-analyze").args(args),
        "systemd-analyze (Debian package `systemd`; scripts/deps.sh installs it)",
    )
}

/// `systemd-analyze security`'s overall exposure of the unit at `path`, and its report.
fn exposure(path: &str) -> (f64, String) {
    let (_, text) = systemd_analyze(&["security", "--offline=true", path]);
    let exposure: f64 = text
        .lines()
        .find_map(|l| l.split_once("Overall exposure level for robotsgate.service: "))
        .and_then(|(_, rest)| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no overall exposure in:\n{text}"));
    (exposure, text)
}

#[test]
fn unit_exposure_is_at_most_2() {
    let (exposure, text) = exposure(UNIT);
    assert!(exposure <= 2.0, "exposure {exposure}:\n{text}");
}

/// The unit written into `dir` as installed: the binary where `ExecStart=` names it (here,
/// the one just built). Its path.
fn installed_unit(dir: &std::path::Path) -> std::path::PathBuf {
    let unit = std::fs::read_to_string(UNIT)
        .expect("unit")
        .replace("/usr/bin/robotsgate", env!("CARGO_BIN_EXE_robotsgate"));
    let path = dir.join("robotsgate.service");
    std::fs::write(&path, unit).expect("write unit");
    path
}

#[test]
fn unit_verifies_without_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = installed_unit(dir.path());
    let (ok, text) = systemd_analyze(&["verify", path.to_str().expect("utf-8")]);
    let ours: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("robotsgate.service"))
        .collect();
    assert!(ok && ours.is_empty(), "{text}");
}

fn check_config(args: &[&str]) -> (bool, String) {
    run(
        Command::new(env!("CARGO_BIN_EXE_robotsgate"))
            .arg("check-config")
            .args(args),
        "run check-config",
    )
}

#[test]
fn check_config_accepts_production_and_names_bad_keys() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (cert, key) = crate::common::operator_ca(dir.path());
    let s = |p: &Path| p.to_str().expect("utf-8").to_string();

    // The production file, with the CA where this test made it (the unit's credential
    // path exists only under systemd).
    let token = dir.path().join("admin.token");
    std::fs::write(&token, "an-admin-token-of-32-characters\n").expect("token");
    let (cert, key) = (s(&cert), s(&key));
    let with_ca = ["--config", PRODUCTION, "--ca-cert", &cert, "--ca-key", &key];
    let (ok, text) = check_config(&[&with_ca[..], &["--admin-token", &s(&token)]].concat());
    assert!(ok, "{text}");
    assert!(
        text.contains("OK") && text.contains("HTTPS interception on"),
        "{text}"
    );

    // As written, its CA key path does not exist here: refused, naming the key.
    let (ok, text) = check_config(&["--config", PRODUCTION, "--admin-token", &s(&token)]);
    assert!(!ok);
    assert!(
        text.contains("tls.ca_cert") || text.contains("tls.ca_key"),
        "{text}"
    );
    // Nor does its admin token (a credential under systemd): refused, naming the key.
    let (ok, text) = check_config(&with_ca);
    assert!(!ok);
    assert!(text.contains("admin.token_file"), "{text}");

    let bad = dir.path().join("bad.yaml");
    let conf = Conf::new().set("pacing.floor_seconds", -1);
    std::fs::write(&bad, conf.file(&[])).expect("write");
    let (ok, text) = check_config(&["--config", &s(&bad)]);
    assert!(!ok);
    assert!(text.contains("robotsgate.pacing.floor_seconds"), "{text}");
}

/// The CAP_NET_ADMIN drop-in (TPROXY, upstream mark) applies, verifies, and keeps the
/// unit's exposure within 2.0.
#[test]
fn net_admin_drop_in_verifies_and_stays_hardened() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = installed_unit(dir.path());
    let drop_ins = dir.path().join("robotsgate.service.d");
    std::fs::create_dir(&drop_ins).expect("drop-in dir");
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/systemd/robotsgate-net-admin.conf"
        ),
        drop_ins.join("net-admin.conf"),
    )
    .expect("copy drop-in");
    let path = path.to_str().expect("utf-8");
    let (ok, text) = systemd_analyze(&["verify", path]);
    assert!(ok, "{text}");
    let (with_drop_in, text) = exposure(path);
    let (without, _) = exposure(UNIT);
    assert!(with_drop_in > without, "the drop-in is applied:\n{text}");
    assert!(with_drop_in <= 2.0, "exposure {with_drop_in}:\n{text}");
}

/// The unit's `TimeoutStopSec` leaves a stop what robotsgate takes: each shipped
/// configuration's `graceful_shutdown_timeout_seconds` (from the signal, the fleet's
/// leave included), then the membership's leave (`LEFT_WITHIN` in
/// `src/proxy/signals.rs`), and 5 s for the state file and the process's end. The order
/// under such bounds is tested by
/// `fleet_follow::a_slow_exchange_takes_its_time_from_the_stops_bound_not_beyond_it`.
#[test]
fn the_units_stop_timeout_covers_the_drain_and_the_leave() {
    let root = crate::common::repo_root();
    let unit = std::fs::read_to_string(root.join("systemd/robotsgate.service")).expect("unit");
    let stop: f64 = unit
        .lines()
        .find_map(|l| l.strip_prefix("TimeoutStopSec="))
        .expect("TimeoutStopSec")
        .parse()
        .expect("seconds");
    let signals = std::fs::read_to_string(root.join("src/proxy/signals.rs")).expect("signals.rs");
    let left: f64 = signals
        .split("LEFT_WITHIN: Duration = Duration::from_secs(")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .expect("LEFT_WITHIN")
        .parse()
        .expect("seconds");
    for name in ["production.yaml", "fleet.yaml", "robotsgate.yaml"] {
        let text = std::fs::read_to_string(root.join("conf").join(name)).expect("conf");
        let drain: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("graceful_shutdown_timeout_seconds:"))
            .expect("graceful_shutdown_timeout_seconds")
            .trim()
            .parse()
            .expect("seconds");
        assert!(
            drain + left + 5.0 <= stop,
            "{name}: {drain} s + {left} s + 5 s is over TimeoutStopSec={stop}"
        );
    }
}
