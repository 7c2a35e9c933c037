//! Reading what robotsgate's evidence holds, three ways: the records on disk as written
//! (`records`), robotsgate's own `evidence` commands (`evidence_cli`), and the
//! independent readers under `tests/helpers/` (`independent`: Python, `cryptography`'s
//! Ed25519, its own Merkle proofs; `warcio` for WARC).

use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// Every record of every chain under `dir` as written (segments in order), parsed.
pub fn records(dir: &Path) -> Vec<Value> {
    let mut out = Vec::new();
    let Ok(chains) = std::fs::read_dir(dir.join("chains")) else {
        return out;
    };
    let mut chains: Vec<_> = chains.filter_map(|e| e.ok().map(|e| e.path())).collect();
    chains.sort();
    for chain in chains {
        let mut segments: Vec<_> = std::fs::read_dir(&chain)
            .expect("chain dir")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().ends_with(".jsonl") && n != "heads.jsonl")
            })
            .collect();
        segments.sort();
        for segment in segments {
            let text = std::fs::read_to_string(&segment).expect("segment");
            out.extend(
                text.lines()
                    .filter_map(|l| serde_json::from_str::<Value>(l).ok()),
            );
        }
    }
    out
}

/// The decision records under `dir`.
pub fn decisions(dir: &Path) -> Vec<Value> {
    records(dir)
        .into_iter()
        .filter(|r| r["type"] == "decision")
        .collect()
}

/// The decisions under `dir` for `url`.
pub fn decisions_of(dir: &Path, url: &str) -> Vec<Value> {
    decisions(dir)
        .into_iter()
        .filter(|r| r["url"] == url)
        .collect()
}

/// The one decision under `dir` for `url`, once written (a refusal's record is queued,
/// written with the next write or tick); panics when there is none, or more than one.
pub async fn recorded_once(dir: &Path, url: &str) -> Value {
    let one = || decisions_of(dir, url).len() == 1;
    let written = crate::common::eventually(std::time::Duration::from_secs(5), one).await;
    assert!(written, "{url}: {:#?}", decisions(dir));
    decisions_of(dir, url).remove(0)
}

/// `robotsgate evidence ARGS…`: whether it exited 0, and what it printed.
pub fn evidence_cli(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_robotsgate"))
        .arg("evidence")
        .args(args)
        .output()
        .expect("run robotsgate evidence");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// `tests/helpers/{reader}` on `file` (the `python3` first on PATH): what it printed.
pub fn independent(reader: &str, file: &Path) -> Value {
    let script = crate::common::repo_root()
        .join("tests/helpers")
        .join(reader);
    let out = Command::new("python3")
        .arg(script)
        .arg(file)
        .output()
        .expect("run python3");
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim()).unwrap_or_else(|_| {
        panic!(
            "{reader} printed no JSON: {text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// `from` copied to `to`, files and directories.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let path = entry.expect("entry").path();
        let target = to.join(path.file_name().expect("name"));
        if path.is_dir() {
            copy_dir(&path, &target);
        } else {
            std::fs::copy(&path, &target).expect("copy");
        }
    }
}
