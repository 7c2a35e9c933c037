//! `robotsgate check`: per-URL verdicts with the deciding rule, URL files, summaries.

use std::path::PathBuf;
use std::process::Command;

fn robotsgate(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_robotsgate"))
        .args(args)
        .output()
        .expect("run robotsgate");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `robotsgate check --robots ROBOTS --agent AGENT REST...`, as [`robotsgate`] runs it.
fn check(args: &[&str]) -> (i32, String, String) {
    let [robots, agent, rest @ ..] = args else {
        panic!("check needs a robots file and an agent");
    };
    let head = ["check", "--robots", robots, "--agent", agent];
    robotsgate(&[&head[..], rest].concat())
}

fn robots_file(dir: &tempfile::TempDir, body: &str) -> String {
    let path = dir.path().join("robots.txt");
    std::fs::write(&path, body).expect("write");
    path.to_string_lossy().into_owned()
}

#[test]
fn prints_verdict_url_and_deciding_rule() {
    let dir = tempfile::tempdir().expect("tempdir");
    let robots = robots_file(&dir, "User-agent: *\nDisallow: /private\n\nUser-agent: googlebot\nAllow: /private/ok\nDisallow: /private\n");
    let (code, out, err) = check(&[
        &robots,
        "googlebot-news",
        "--agent",
        "googlebot",
        "http://example.com/private/ok/1",
        "http://example.com/private/x",
        "http://example.com/public",
    ]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            "allowed http://example.com/private/ok/1 Allow: /private/ok (line 5), group at line 4",
            "disallowed http://example.com/private/x Disallow: /private (line 6), group at line 4",
            "allowed http://example.com/public no matching rule",
        ]
    );
}

#[test]
fn reads_urls_from_a_file_and_summarises() {
    let dir = tempfile::tempdir().expect("tempdir");
    let robots = robots_file(&dir, "User-agent: *\nDisallow: /*.pdf$\n");
    let urls = dir.path().join("urls.txt");
    let mut list = String::new();
    for i in 0..1000 {
        let ext = if i % 4 == 0 { "pdf" } else { "html" };
        list.push_str(&format!("http://example.com/doc/{i}.{ext}\r\n"));
    }
    list.push_str("\n\u{ff}\n"); // blank and odd lines do not stop the run
    std::fs::write(&urls, list).expect("write");
    let urls = urls.to_string_lossy().into_owned();
    let (code, out, err) = check(&[&robots, "x", "--urls", &urls, "--summary"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "allowed 751, disallowed 250");
}

#[test]
fn missing_files_are_named_in_the_error() {
    let (code, _, err) = check(&["/nonexistent/robots.txt", "x", "/"]);
    assert_eq!(code, 2);
    assert!(err.contains("--robots /nonexistent/robots.txt"), "{err}");
}

#[test]
fn large_file_verdicts_match_the_shipped_benchmark_input() {
    // The benchmark file parses and decides; a few hand-checked verdicts from it.
    let large = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/large_robots.txt");
    let large = large.to_string_lossy().into_owned();
    let (code, out, err) = check(&[
        &large,
        "ExampleBot",
        "https://www.example-megasite.com/api/v1/news/x",
        "https://www.example-megasite.com/events/register",
        "https://www.example-megasite.com/robots.txt",
    ]);
    assert_eq!(code, 0, "{err}");
    let verdicts: Vec<&str> = out
        .lines()
        .map(|l| l.split(' ').next().unwrap_or(""))
        .collect();
    assert_eq!(verdicts, ["disallowed", "allowed", "allowed"], "{out}");
}

#[test]
fn run_refuses_a_bad_config_naming_key_and_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("bad.yaml");
    std::fs::write(
        &config,
        "threads: 1\nrobotsgate:\n  listen: 127.0.0.1:0\n  robots:\n    max_origins: lots\n",
    )
    .expect("write");
    let config = config.to_string_lossy().into_owned();
    let (code, _, err) = robotsgate(&["run", "--config", &config]);
    assert_ne!(code, 0);
    assert!(
        err.contains("robotsgate.robots.max_origins")
            && err.contains("line 5")
            && err.contains("bad.yaml"),
        "{err}"
    );
}

/// Two listeners on one address and port (here from the command line, as the test
/// harness once gave them) are refused at start, naming both keys: they would share one
/// socket, and the admin API would answer some of the crawlers' requests. `timeout`: a
/// run that starts anyway fails the test (status 124) instead of holding it.
#[test]
fn run_refuses_two_listeners_on_one_port_naming_both_keys() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("ok.yaml");
    std::fs::write(&config, "threads: 1\n").expect("write");
    let at = format!("127.0.0.1:{}", crate::common::free_port());
    let out = Command::new("timeout")
        .args(["20", env!("CARGO_BIN_EXE_robotsgate"), "run", "--config"])
        .arg(&config)
        .args(["--listen", &at, "--admin-listen", &at])
        .output()
        .expect("timeout robotsgate run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && out.status.code() != Some(124),
        "{:?}: {err}",
        out.status
    );
    assert!(
        err.contains("robotsgate.admin_listen") && err.contains("robotsgate.listen"),
        "{err}"
    );
}
