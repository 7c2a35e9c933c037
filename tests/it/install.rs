//! The install from source starts: `docs/install.md`'s steps run in a throwaway root
//! (every absolute path under it, `sudo` dropped, the build replaced by this build's
//! binary; the system user and `systemctl` lines checked, not run), the credentials
//! and directories laid out as `systemd/robotsgate.service` declares them, and the
//! unit's `ExecStartPre` and `ExecStart` run there with the installed configuration's
//! paths moved under the root and the test's own ports: `check-config` passes and the
//! daemon answers `/healthz`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{free_ports, healthz, repo_root, run_output};

/// The commands of the page's "From source" block.
fn steps() -> Vec<String> {
    let page = std::fs::read_to_string(repo_root().join("docs/install.md")).expect("install.md");
    let from = page.find("## From source").expect("a From source section");
    let block = page[from..].split("```").nth(1).expect("its code block");
    block
        .lines()
        .skip(1) // the fence's language
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect()
}

/// `text` with every absolute path the install touches moved under `root`.
fn rooted(text: &str, root: &Path) -> String {
    let root = root.to_string_lossy();
    ["/etc/", "/usr/bin/", "/var/", "/run/"]
        .iter()
        .fold(text.to_string(), |t, dir| {
            t.replace(&format!(" {dir}"), &format!(" {root}{dir}"))
                .replace(&format!("'{dir}"), &format!("'{root}{dir}"))
                .replace(&format!(":{dir}"), &format!(":{root}{dir}"))
                .replace(&format!("={dir}"), &format!("={root}{dir}"))
        })
}

/// Runs the install steps under `root`: what they made there.
fn install(root: &Path) {
    // What any Debian system has already.
    for system in [
        "usr/bin",
        "etc/systemd/system",
        "var/lib",
        "var/cache",
        "run",
    ] {
        std::fs::create_dir_all(root.join(system)).expect("a system directory");
    }
    let mut skipped = Vec::new();
    for step in steps() {
        let step = step.replace("sudo ", "");
        let first = step.split_whitespace().next().unwrap_or_default();
        if matches!(first, "adduser" | "systemctl") {
            skipped.push(first.to_string());
            continue;
        }
        let step = step.replace("cargo build --profile dist --locked && ", "");
        let step = step.replace("target/dist/robotsgate", env!("CARGO_BIN_EXE_robotsgate"));
        let step = rooted(&step, root).replace(
            "robotsgate ca init",
            &format!("{}/usr/bin/robotsgate ca init", root.display()),
        );
        let (ok, said) = run_output(
            Command::new("sh")
                .args(["-c", &step])
                .current_dir(repo_root()),
        );
        assert!(ok, "`{step}` failed: {said}");
    }
    assert_eq!(skipped, ["adduser", "systemctl"], "the user and the start");
}

/// The unit's `Key=value` lines for `key`.
fn unit_lines(unit: &str, key: &str) -> Vec<String> {
    let prefix = format!("{key}=");
    unit.lines()
        .filter_map(|l| l.strip_prefix(&prefix).map(str::to_string))
        .collect()
}

/// What systemd does before `ExecStart`: the credentials copied where the unit's
/// `LoadCredential=` puts them, its state, cache and runtime directories made.
fn lay_out(unit: &str, root: &Path) {
    let credentials = root.join("run/credentials/robotsgate.service");
    std::fs::create_dir_all(&credentials).expect("credentials directory");
    for line in unit_lines(unit, "LoadCredential") {
        let (name, from) = line.split_once(':').expect("name:path");
        let from = root.join(from.trim_start_matches('/'));
        assert!(from.exists(), "the install made no {}", from.display());
        std::fs::copy(&from, credentials.join(name)).expect("copy a credential");
    }
    for (key, base) in [
        ("StateDirectory", "var/lib"),
        ("CacheDirectory", "var/cache"),
        ("RuntimeDirectory", "run"),
    ] {
        for name in unit_lines(unit, key) {
            std::fs::create_dir_all(root.join(base).join(name)).expect("directory");
        }
    }
}

/// Runs one of the unit's command lines under `root`, with `extra` arguments, until it
/// exits (a daemon's parent): whether it succeeded, and what it wrote to `log`. Its
/// output goes to a file, as a daemon's child keeps it open.
fn unit_command(line: &str, root: &Path, extra: &[String], log: &Path) -> (bool, String) {
    let line = rooted(&format!(" {line}"), root);
    let mut words = line.split_whitespace();
    let program = words.next().expect("a program");
    let file = std::fs::File::create(log).expect("log");
    let status = Command::new(program)
        .args(words)
        .args(extra)
        .stdout(file.try_clone().expect("log"))
        .stderr(file)
        .status()
        .expect("the unit's command");
    (
        status.success(),
        std::fs::read_to_string(log).unwrap_or_default(),
    )
}

/// The page's steps, then the unit's start, in a throwaway root.
#[test]
fn the_install_from_source_starts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    install(root);
    let unit_file = root.join("etc/systemd/system/robotsgate.service");
    let unit = std::fs::read_to_string(&unit_file).expect("the installed unit");
    lay_out(&unit, root);
    let config = root.join("etc/robotsgate/robotsgate.yaml");
    let text = std::fs::read_to_string(&config).expect("the installed configuration");
    std::fs::write(&config, rooted(&text, root)).expect("configuration under the root");
    let pre = unit_lines(&unit, "ExecStartPre");
    assert_eq!(pre.len(), 1, "{pre:?}");
    let log = root.join("unit.log");
    let (ok, said) = unit_command(&pre[0], root, &[], &log);
    assert!(ok, "ExecStartPre: {said}");
    let [proxy, admin] = free_ports();
    let ports = [
        format!("--listen=127.0.0.1:{proxy}"),
        format!("--admin-listen=127.0.0.1:{admin}"),
    ];
    let start = unit_lines(&unit, "ExecStart");
    assert_eq!(start.len(), 1, "{start:?}");
    let (ok, said) = unit_command(&start[0], root, &ports, &log);
    assert!(ok, "ExecStart: {said}");
    // Type=forking: the daemon's PID is in the unit's PIDFile.
    let pid_file =
        PathBuf::from(rooted(&format!(" {}", unit_lines(&unit, "PIDFile")[0]), root).trim());
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut pid = None;
    while Instant::now() < deadline {
        pid = pid.or_else(|| {
            std::fs::read_to_string(&pid_file)
                .ok()?
                .trim()
                .parse::<i32>()
                .ok()
        });
        if pid.is_some() && healthz(([127, 0, 0, 1], admin).into()) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let served = healthz(([127, 0, 0, 1], admin).into());
    if let Some(pid) = pid {
        let _ = Command::new("kill").arg(pid.to_string()).status();
    }
    assert!(pid.is_some(), "no PID in {}", pid_file.display());
    assert!(served, "the daemon did not answer /healthz");
}
