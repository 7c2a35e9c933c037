//! The crawler's statement: `robotsgate statement` writes the JSON, the page and an
//! Atom feed that gains an entry exactly when what is stated changes, read back by
//! feedparser; the admin listener serves the statement of the configuration in force,
//! its page checked in headless Chromium.

use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};

use crate::common::{admin, independent, Conf, Proxy};

/// A crawler fleet: a search crawler by default, and a training crawler by address.
fn fleet() -> Conf {
    Conf::new()
        .set("agent.default_tokens", ["SearchBot"])
        .set("agent.default_purposes", ["search"])
        .set(
            "robots.user_agent",
            "SearchBot/2.0 (+https://crawler.example/about)",
        )
}

/// `robotsgate statement` on `conf` into `out`: what it printed.
fn statement(conf: &Conf, out: &Path) -> String {
    let file = out.with_extension("yaml");
    std::fs::write(&file, conf.file(&[])).expect("write conf");
    let run = Command::new(env!("CARGO_BIN_EXE_robotsgate"))
        .args(["statement", "--config"])
        .arg(&file)
        .arg("--out")
        .arg(out)
        .output()
        .expect("run robotsgate statement");
    let said = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(
        run.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    said
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("read")).expect("json")
}

#[test]
fn the_feed_gains_an_entry_exactly_when_the_statement_changes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("published");
    assert!(statement(&fleet(), &out).ends_with("(new)\n"));
    assert!(statement(&fleet(), &out).ends_with("(unchanged)\n"));
    let first = read_json(&out.join("statement.json"));
    assert_eq!(first["crawlers"][0]["tokens"], json!(["SearchBot"]));
    assert_eq!(first["crawlers"][0]["purposes"], json!(["search"]));
    assert_eq!(first["protocols"]["robots_txt"]["spec"], "RFC 9309");
    assert_eq!(
        first["protocols"]["tdmrep"]["tdm_purposes"],
        json!(["train-ai", "ai-input"])
    );
    let feed = independent("feed_reader.py", &out.join("statement.atom"));
    assert_eq!(feed["bozo"], 0, "{feed}");
    assert_eq!(feed["entries"].as_array().map(Vec::len), Some(1), "{feed}");
    // A training crawler added: a new statement, a second entry, newest first.
    let changed = fleet().set(
        "agent.rules",
        vec![json!({"client": "10.0.0.0/8", "tokens": ["TrainBot"], "purposes": ["train-ai"]})],
    );
    assert!(statement(&changed, &out).ends_with("(new)\n"));
    let second = read_json(&out.join("statement.json"));
    assert_eq!(second["crawlers"][1]["tokens"], json!(["TrainBot"]));
    assert_eq!(second["crawlers"][1]["matches"], "clients in 10.0.0.0/8");
    let feed = independent("feed_reader.py", &out.join("statement.atom"));
    assert_eq!(feed["bozo"], 0, "{feed}");
    let ids: Vec<&str> = feed["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter_map(|e| e["id"].as_str())
        .collect();
    assert_eq!(
        ids,
        [
            format!("urn:sha256:{}", second["fingerprint"].as_str().expect("fp")),
            format!("urn:sha256:{}", first["fingerprint"].as_str().expect("fp")),
        ],
        "{feed}"
    );
    // Back to the first configuration: a third entry (a change back is a change).
    assert!(statement(&fleet(), &out).ends_with("(new)\n"));
    let feed = independent("feed_reader.py", &out.join("statement.atom"));
    assert_eq!(feed["entries"].as_array().map(Vec::len), Some(3), "{feed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_listener_serves_the_statement_in_force() {
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = fleet();
    statement(&conf, &dir.path().join("cli"));
    let cli = read_json(&dir.path().join("cli").join("statement.json"));
    let proxy = Proxy::start_for_loopback(&conf);
    let (status, body) = admin(&proxy, "GET", "/statement.json");
    assert_eq!(status, 200, "{body}");
    let served: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(served["fingerprint"], cli["fingerprint"], "{served}");
    let (status, atom) = admin(&proxy, "GET", "/statement.atom");
    assert_eq!(status, 200, "{atom}");
    let atom_file = dir.path().join("served.atom");
    std::fs::write(&atom_file, atom).expect("write");
    let feed = independent("feed_reader.py", &atom_file);
    assert_eq!(feed["bozo"], 0, "{feed}");
    assert_eq!(
        feed["entries"][0]["id"],
        format!("urn:sha256:{}", cli["fingerprint"].as_str().expect("fp")).as_str()
    );
    // The page, as a browser renders it: the crawlers' table names the tokens.
    let profile = tempfile::tempdir().expect("tempdir");
    let page = format!("http://{}/statement.html", proxy.admin);
    let dom = tokio::task::block_in_place(|| {
        crate::status_page::chromium(profile.path(), &["--dump-dom"], &page)
    });
    assert!(dom.contains("<table id=\"crawlers\">"), "{dom}");
    assert!(dom.contains("<td>SearchBot</td>"), "{dom}");
    assert!(
        dom.contains(cli["fingerprint"].as_str().expect("fp")),
        "{dom}"
    );
}

/// A reload (Pingora's graceful upgrade, as the unit's `ExecReload` makes it) that
/// changes what is stated gives the admin listener's feed a new entry, which a feed
/// reader sees as new; one that changes nothing stated keeps the entry's id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_gives_the_feed_a_new_entry_exactly_when_the_statement_changes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let entry = |proxy: &Proxy, name: &str| -> Value {
        let (status, atom) = admin(proxy, "GET", "/statement.atom");
        assert_eq!(status, 200, "{atom}");
        let file = dir.path().join(format!("{name}.atom"));
        std::fs::write(&file, atom).expect("write");
        let feed = independent("feed_reader.py", &file);
        assert_eq!(feed["bozo"], 0, "{feed}");
        feed["entries"][0].clone()
    };
    let mut first = Proxy::start_for_loopback(&fleet());
    let before = entry(&first, "first");
    let mut second = tokio::task::block_in_place(|| first.upgrade());
    tokio::task::block_in_place(|| first.wait_exit(std::time::Duration::from_secs(20)));
    let unchanged = entry(&second, "second");
    assert_eq!(unchanged["id"], before["id"], "nothing stated changed");
    let config = std::fs::read_to_string(second.config_path()).expect("config");
    assert!(config.contains("SearchBot/2.0"), "{config}");
    std::fs::write(
        second.config_path(),
        config.replace("SearchBot/2.0", "SearchBot/3.0"),
    )
    .expect("write config");
    let third = tokio::task::block_in_place(|| second.upgrade());
    tokio::task::block_in_place(|| second.wait_exit(std::time::Duration::from_secs(20)));
    let changed = entry(&third, "third");
    assert_ne!(
        changed["id"], unchanged["id"],
        "the User-Agent stated changed"
    );
    let (_, json) = admin(&third, "GET", "/statement.json");
    assert!(json.contains("SearchBot/3.0"), "{json}");
}
