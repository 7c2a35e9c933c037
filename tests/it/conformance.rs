//! Every public conformance case (SPEC §7) passes, through the library and through the
//! `robotsgate conformance` command exactly as CI and other tools call it.

use std::path::PathBuf;
use std::process::Command;

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn case_count(name: &str) -> usize {
    std::fs::read_to_string(data(name))
        .expect("data file")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .count()
}

fn run_library(name: &str) -> (robotsgate::conformance::Tally, String) {
    let input = std::io::BufReader::new(std::fs::File::open(data(name)).expect("data file"));
    let mut out = Vec::new();
    let tally = robotsgate::conformance::run(input, &mut out).expect("run");
    (tally, String::from_utf8(out).expect("utf-8"))
}

/// Runs the cases of `name` through the library: every one passes, none skipped.
fn all_pass(name: &str) {
    let (tally, out) = run_library(name);
    assert_eq!(tally.failed, 0, "{out}");
    assert_eq!(tally.passed, case_count(name));
}

#[test]
fn verdict_cases_all_pass() {
    all_pass("cases.jsonl");
}

#[test]
fn crawl_delay_cases_all_pass() {
    all_pass("crawl_delay.jsonl");
}

#[test]
fn usage_cases_all_pass() {
    all_pass("usage_cases.jsonl");
}

#[test]
fn command_prints_summary_last_and_exits_zero() {
    let out = Command::new(env!("CARGO_BIN_EXE_robotsgate"))
        .arg("conformance")
        .arg(data("cases.jsonl"))
        .output()
        .expect("run robotsgate");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let expected = format!("{} passed, 0 failed", case_count("cases.jsonl"));
    assert_eq!(stdout.lines().last(), Some(expected.as_str()));
}

#[test]
fn command_reports_mismatches_and_exits_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("wrong.jsonl");
    std::fs::write(
        &file,
        concat!(
            r#"{"id":"right","robots":"User-agent: *\nDisallow: /x\n","agent":"a","url":"http://h/x","allowed":false}"#,
            "\n",
            r#"{"id":"wrong","robots":"User-agent: *\nDisallow: /x\n","agent":"a","url":"http://h/x","allowed":true}"#,
            "\n",
            "not json at all\n",
            r#"{"id":"delay","robots":"User-agent: *\nCrawl-delay: 2\n","agent":"a","crawl_delay_seconds":null}"#,
            "\n",
        ),
    )
    .expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_robotsgate"))
        .arg("conformance")
        .arg(&file)
        .output()
        .expect("run robotsgate");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("wrong: http://h/x"), "{stdout}");
    assert!(stdout.contains("Disallow: /x (line 2)"), "{stdout}");
    assert!(stdout.contains("unreadable case"), "{stdout}");
    assert!(stdout.contains("delay: crawl-delay"), "{stdout}");
    assert_eq!(stdout.lines().last(), Some("1 passed, 3 failed"));
}

/// TDMRep cases (the file, the header and HTML meta, resolved together), through the
/// command as held-out cases are run.
#[test]
fn tdmrep_cases_all_pass_through_the_command() {
    all_pass("tdmrep_cases.jsonl");
    let out = Command::new(env!("CARGO_BIN_EXE_robotsgate"))
        .arg("conformance")
        .arg(data("tdmrep_cases.jsonl"))
        .output()
        .expect("run robotsgate");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let expected = format!("{} passed, 0 failed", case_count("tdmrep_cases.jsonl"));
    assert_eq!(stdout.lines().last(), Some(expected.as_str()));
}

/// A TDMRep case robotsgate resolves otherwise is named with what each side says.
#[test]
fn a_tdmrep_case_resolved_otherwise_is_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("wrong.jsonl");
    std::fs::write(
        &file,
        concat!(
            r#"{"id":"first-wins","url":"https://e.com/b/x","tdmrep":"[{\"location\":\"/b/*\",\"tdm-reservation\":0},{\"location\":\"/b/x\",\"tdm-reservation\":1}]","reservation":1}"#,
            "\n",
        ),
    )
    .expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_robotsgate"))
        .arg("conformance")
        .arg(&file)
        .output()
        .expect("run robotsgate");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains(
            "first-wins: https://e.com/b/x: expected tdm-reservation 1, got 0 (from file)"
        ),
        "{stdout}"
    );
}
