//! The manual cannot rot: every configuration key the parser accepts has its entry in
//! `docs/configuration.md` and every entry names a key it accepts; every relative link
//! and anchor in `README.md` and `docs/` resolves; every repository path the docs name
//! exists; every `X-Robots-Decision` token and access-log field the code writes has its
//! row in `decisions.md` and `logs.md`; no task page's paragraph runs over 150 words. The
//! README's tour runs as written in `tour.rs`, the admin reference in
//! `admin_reference.rs`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::common::repo_root;

/// `README.md` and every page of `docs/`, with their text.
fn pages() -> Vec<(PathBuf, String)> {
    let mut files = vec![repo_root().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo_root().join("docs"))
        .expect("docs/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("read page");
            (p, text)
        })
        .collect()
}

/// One step of a path into the configuration: a key, and whether it holds a list of
/// sections (its keys are read inside a list item).
type Step = (String, bool);

/// The keys under `path` the parser names when it meets an unknown one there, and
/// whether they sit in a list item; `None` when `path` is not a section.
fn keys_under(path: &[Step]) -> Option<(Vec<String>, bool)> {
    for in_list in [false, true] {
        let mut yaml = String::from("robotsgate:\n");
        let mut indent = 2;
        let mut dash = "";
        for (name, listed) in path {
            yaml += &format!("{}{dash}{name}:\n", " ".repeat(indent));
            indent += 2 + dash.len();
            dash = if *listed { "- " } else { "" };
        }
        let last = if in_list { "- " } else { "" };
        yaml += &format!("{}{dash}{last}__unknown__: 1\n", " ".repeat(indent));
        let Err(e) = robotsgate::config::Config::from_yaml(&yaml) else {
            continue;
        };
        let message = e.to_string();
        let Some((_, expected)) = message.split_once("unknown field `__unknown__`, expected ")
        else {
            continue;
        };
        let list = expected.split(": ").next().unwrap_or(expected);
        let keys: Vec<String> = list
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect();
        return Some((keys, in_list));
    }
    None
}

/// Every key and section of the `robotsgate:` section, dotted, as the parser knows them.
fn parsed_keys(path: &mut Vec<Step>, found: &mut BTreeSet<String>) {
    let Some((keys, listed)) = keys_under(path) else {
        return;
    };
    if let Some(last) = path.last_mut() {
        last.1 = listed;
    }
    for key in keys {
        path.push((key, false));
        let dotted: Vec<&str> = path.iter().map(|(k, _)| k.as_str()).collect();
        found.insert(dotted.join("."));
        parsed_keys(path, found);
        path.pop();
    }
}

#[test]
fn every_configuration_key_has_its_entry() {
    let mut parsed = BTreeSet::new();
    parsed_keys(&mut Vec::new(), &mut parsed);
    assert!(parsed.len() > 100, "{parsed:?}");
    assert!(parsed.contains("fleet.peer_max_connections_per_client"));
    assert!(
        parsed.contains("agent.rules.tokens"),
        "list items are read too"
    );
    let (documented, _) = reference_entries();
    let missing: Vec<_> = parsed.difference(&documented).collect();
    let unknown: Vec<_> = documented.difference(&parsed).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "run python3 scripts/config_reference.py\nno entry: {missing:?}\nno such key: {unknown:?}"
    );
}

/// Where the reference's section of Pingora's own keys begins.
const PINGORA_SECTION: &str = "## Pingora's server settings";

/// The keys the configuration reference has an entry for: the `robotsgate:` section's,
/// and Pingora's (the file's top level).
fn reference_entries() -> (BTreeSet<String>, BTreeSet<String>) {
    let reference =
        std::fs::read_to_string(repo_root().join("docs/configuration.md")).expect("reference");
    let (ours, pingora) = reference
        .split_once(PINGORA_SECTION)
        .expect("the Pingora section");
    let entries = |text: &str| -> BTreeSet<String> {
        text.lines()
            .filter(|l| l.starts_with("## `") || l.starts_with("### `"))
            .filter_map(|l| l.split('`').nth(1).map(str::to_string))
            .collect()
    };
    (entries(ours), entries(pingora))
}

/// The reference is exactly what its generator writes from the configuration types
/// (keys, types, defaults, docs): `scripts/config_reference.py --check`.
#[test]
fn the_configuration_reference_is_what_its_generator_writes() {
    generator_agrees("scripts/config_reference.py", &[]);
}

/// Runs the generator `script` with `args` and `--check`: it must find its page as it
/// would write it.
fn generator_agrees(script: &str, args: &[&str]) {
    let out = std::process::Command::new("python3")
        .arg(repo_root().join(script))
        .args(args)
        .arg("--check")
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every key the shipped configurations set at the file's top level (Pingora's) has
/// its entry in the reference's Pingora section.
#[test]
fn every_pingora_key_the_shipped_files_set_has_its_entry() {
    let (_, documented) = reference_entries();
    for file in ["robotsgate.yaml", "fleet.yaml", "production.yaml"] {
        let text = std::fs::read_to_string(repo_root().join("conf").join(file)).expect(file);
        let conf: serde_yaml::Mapping = serde_yaml::from_str(&text).expect(file);
        let top: Vec<String> = conf
            .keys()
            .filter_map(|k| k.as_str())
            .filter(|k| *k != "robotsgate")
            .map(str::to_string)
            .collect();
        assert!(top.contains(&"upstream_keepalive_pool_size".to_string()));
        let missing: Vec<&String> = top.iter().filter(|k| !documented.contains(*k)).collect();
        assert!(missing.is_empty(), "conf/{file}: no entry for {missing:?}");
    }
}

/// The anchors of a page's headings, as the repository host makes them.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut fenced = false;
    let mut found = BTreeSet::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let heading = line.trim_start_matches('#').trim();
        let slug: String = heading
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        found.insert(slug);
    }
    found
}

/// The targets of a page's Markdown links `[text](target)`, outside code.
fn links(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut found = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        }
        if fenced {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            found.push(after[..end].to_string());
            rest = &after[end..];
        }
    }
    found
}

#[test]
fn every_link_and_anchor_resolves() {
    let mut broken = Vec::new();
    for (page, text) in pages() {
        for target in links(&text) {
            if target.starts_with("http://") || target.starts_with("https://") {
                continue;
            }
            let (file, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let resolved = if file.is_empty() {
                page.clone()
            } else {
                page.parent().expect("dir").join(file)
            };
            if !resolved.exists() {
                broken.push(format!("{}: {target}: no such file", page.display()));
                continue;
            }
            if !anchor.is_empty() {
                let text = std::fs::read_to_string(&resolved).unwrap_or_default();
                if !anchors(&text).contains(anchor) {
                    broken.push(format!("{}: {target}: no such anchor", page.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// The repository paths a page names in backticks (`src/...`, `tests/...`...).
fn named_paths(text: &str) -> Vec<String> {
    const TOP: [&str; 10] = [
        "src/",
        "tests/",
        "conf/",
        "scripts/",
        "bench/",
        "systemd/",
        "docs/",
        "fuzz/",
        "debian/",
        "examples/",
    ];
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| TOP.iter().any(|t| s.starts_with(t)))
        .filter(|s| !s.contains(['*', '{', '<', ' ', '…']))
        .map(|s| s.split(['#', ':']).next().unwrap_or(s).to_string())
        .collect()
}

#[test]
fn every_path_the_docs_name_exists() {
    let mut missing = Vec::new();
    for (page, text) in pages() {
        for path in named_paths(&text) {
            if !Path::new(&repo_root()).join(&path).exists() {
                missing.push(format!("{}: {path}", page.display()));
            }
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

/// A configuration error names its key and links that key's entry in the reference (an
/// unknown key: its section's).
#[test]
fn a_configuration_error_links_its_entry() {
    let reference =
        std::fs::read_to_string(repo_root().join("docs/configuration.md")).expect("reference");
    let entries = anchors(&reference);
    for (yaml, want) in [
        (
            "robotsgate:\n  pacing:\n    max_in_flight: -1\n",
            "pacingmax_in_flight",
        ),
        (
            "robotsgate:\n  agent:\n    rules:\n      - tokens: 3\n",
            "agentrulestokens",
        ),
        ("robotsgate:\n  fleet:\n    no_such_key: 1\n", "fleet"),
    ] {
        let error = robotsgate::config::Config::from_yaml(yaml)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        let link = format!("(docs/configuration.md#{want})");
        assert!(error.contains(&link), "{yaml}: {error}");
        assert!(entries.contains(want), "{want}");
    }
}

/// `docs/architecture.md`'s embedding example is `examples/embedded.rs`'s own code (the
/// region its comments mark, dedented), which `cargo test` compiles and
/// `embedded_example.rs` runs: the page cannot show code that does not build.
#[test]
fn the_embedding_example_in_the_architecture_page_is_the_compiled_one() {
    let example =
        std::fs::read_to_string(repo_root().join("examples/embedded.rs")).expect("example");
    let lines: Vec<&str> = example.lines().collect();
    let from = lines
        .iter()
        .position(|l| l.contains("docs/architecture.md shows from here"))
        .expect("the region's start");
    let to = lines
        .iter()
        .position(|l| l.trim() == "// to here")
        .expect("the region's end");
    let region = &lines[from + 1..to];
    let indent = region
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .unwrap_or(0);
    let extract: Vec<&str> = region
        .iter()
        .map(|l| l.get(indent..).unwrap_or(""))
        .collect();
    let page = std::fs::read_to_string(repo_root().join("docs/architecture.md")).expect("page");
    let block = page
        .split("```rust\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a rust block");
    assert_eq!(block.trim_end(), extract.join("\n").trim_end());
}

/// `docs/cli.md` is exactly what its generator writes from the binary's own `--help`
/// for every command and subcommand: `scripts/cli_reference.py BINARY --check`.
#[test]
fn the_cli_reference_is_what_the_binary_says() {
    generator_agrees(
        "scripts/cli_reference.py",
        &[env!("CARGO_BIN_EXE_robotsgate")],
    );
}

/// Every `X-Robots-Decision` token the code writes (`"token; name=…` strings in `src/`,
/// and report mode's `("would-…", Outcome…)` pairs) has its row in `docs/decisions.md`,
/// naming each parameter written with it; every row's token is written by the code.
#[test]
fn every_decision_token_in_the_code_has_its_row() {
    let page =
        std::fs::read_to_string(repo_root().join("docs/decisions.md")).expect("decisions.md");
    let rows: std::collections::BTreeMap<String, String> = page
        .lines()
        .filter_map(|l| {
            let token = l.strip_prefix("| `")?.split('`').next()?;
            Some((token.to_string(), l.to_string()))
        })
        .collect();
    let mut written = BTreeSet::new();
    let mut files = Vec::new();
    crate::layers::sources(&repo_root().join("src"), &mut files);
    for path in files {
        // Escaped quotes and quote characters do not end a string here.
        let text = std::fs::read_to_string(&path)
            .expect("source")
            .replace("\\\"", "'")
            .replace("'\"'", "'");
        for literal in text.split('"').skip(1).step_by(2) {
            let Some((token, rest)) = literal.split_once("; ") else {
                continue;
            };
            let word = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
            if token.is_empty() || !token.chars().all(word) || !rest.contains('=') {
                continue;
            }
            let name = rest.split('=').next().unwrap_or_default();
            if !name.chars().all(word) {
                continue;
            }
            written.insert(token.to_string());
            let row = rows
                .get(token)
                .unwrap_or_else(|| panic!("{}: `{token}` has no row", path.display()));
            for param in rest
                .split("; ")
                .filter_map(|p| p.split_once('='))
                .map(|p| p.0)
            {
                assert!(
                    row.contains(&format!("`{param}")),
                    "{}: `{token}`'s row does not name `{param}`",
                    path.display()
                );
            }
        }
        // Report mode's `("would-…", Outcome::…)` pairs.
        for piece in text.split("(\"would-").skip(1) {
            if let Some((rest, _)) = piece.split_once("\", Outcome::") {
                if !rest.contains('"') {
                    written.insert(format!("would-{rest}"));
                }
            }
        }
    }
    let documented: BTreeSet<String> = rows.keys().cloned().collect();
    let unwritten: Vec<_> = documented.difference(&written).collect();
    assert!(unwritten.is_empty(), "rows no code writes: {unwritten:?}");
}

/// Every field robotsgate writes to the access log (`AccessRecord::write_fields`' names,
/// and the fields of every `tracing` line with `target: "access"` in `src/`) has its row
/// in `docs/logs.md`, and every row names such a field.
#[test]
fn every_access_log_field_has_its_row() {
    let page = std::fs::read_to_string(repo_root().join("docs/logs.md")).expect("logs.md");
    let documented: BTreeSet<String> = page
        .lines()
        .filter_map(|l| Some(l.strip_prefix("| `")?.split('`').next()?.to_string()))
        .collect();
    let mut written = BTreeSet::new();
    let mut files = Vec::new();
    crate::layers::sources(&repo_root().join("src"), &mut files);
    for path in files {
        let text = std::fs::read_to_string(&path).expect("source");
        // The access record's writer: f.text("name", …), f.number(…), …
        let writer = text
            .split("fn write_fields(")
            .nth(1)
            .and_then(|body| body.split("\n    }\n").next())
            .unwrap_or_default();
        for call in writer.split("f.").skip(1) {
            let kind = call.split('(').next().unwrap_or_default();
            if matches!(kind, "text" | "number" | "seconds" | "display") {
                if let Some(name) = call.split('"').nth(1) {
                    written.insert(name.to_string());
                }
            }
        }
        // Other lines: `target: "access",` then `name = value,` up to the macro's end.
        for line in text.split("target: \"access\",").skip(1) {
            let fields = line.split(");").next().unwrap_or_default();
            // `name = value`, or `name` alone (a variable of that name).
            for field in fields.split(',') {
                let name = field.split(" = ").next().unwrap_or_default().trim();
                if !name.is_empty() && name.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
                    written.insert(name.to_string());
                }
            }
        }
    }
    let missing: Vec<_> = written.difference(&documented).collect();
    assert!(missing.is_empty(), "fields with no row: {missing:?}");
    let unwritten: Vec<_> = documented.difference(&written).collect();
    assert!(unwritten.is_empty(), "rows no code writes: {unwritten:?}");
}

/// Pages of evidence (measurements, proofs, the rules' sources), whose paragraphs may
/// run long; every other page is a task page.
const EVIDENCE: [&str; 3] = ["benchmarks.md", "fleet-proof.md", "SPEC.md"];

/// The paragraphs and list items of a Markdown text, code blocks, headings and tables
/// left out, each as its words.
fn paragraphs(text: &str) -> Vec<Vec<&str>> {
    let (mut out, mut current, mut code) = (Vec::new(), Vec::new(), false);
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with("```") {
            code = !code;
        }
        let item = line.starts_with("* ")
            || line.starts_with("- ")
            || line
                .split_once(". ")
                .is_some_and(|(n, _)| n.parse::<u32>().is_ok());
        let apart = code || line.is_empty() || line.starts_with('#') || line.starts_with('|');
        if (apart || item) && !current.is_empty() {
            out.push(std::mem::take(&mut current));
        }
        if !apart {
            current.extend(line.split_whitespace());
        }
    }
    out.push(current);
    out
}

/// A task page's paragraphs (and list items) stay under about 150 words.
#[test]
fn no_task_page_paragraph_runs_over_150_words() {
    let mut long = Vec::new();
    for (path, text) in pages() {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if EVIDENCE.contains(&name) {
            continue;
        }
        for words in paragraphs(&text).iter().filter(|w| w.len() > 150) {
            long.push(format!(
                "{name}: {} words: {}",
                words.len(),
                words[..8].join(" ")
            ));
        }
    }
    assert!(long.is_empty(), "{}", long.join("\n"));
}

/// Every metric the code registers has its row in `docs/operations.md`'s metrics table,
/// and every row there is a metric the code registers (names read from `src/`: the
/// `robotsgate_…` literals beside a `register_…!` macro).
#[test]
fn every_metric_has_its_row() {
    let mut files = Vec::new();
    crate::layers::sources(&repo_root().join("src"), &mut files);
    let mut registered = BTreeSet::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("source");
        for (at, _) in text.match_indices("register_") {
            let rest = &text[at..text.len().min(at + 200)];
            if let Some(name) = rest
                .split('"')
                .nth(1)
                .filter(|n| n.starts_with("robotsgate_"))
            {
                registered.insert(name.to_string());
            }
        }
    }
    let page = std::fs::read_to_string(repo_root().join("docs/operations.md")).expect("page");
    let rows: BTreeSet<String> = page
        .lines()
        .filter_map(|l| l.strip_prefix("| `robotsgate_"))
        .filter_map(|l| l.split('`').next())
        .map(|n| format!("robotsgate_{n}"))
        .collect();
    assert!(
        registered.len() > 40,
        "the names were not read: {registered:?}"
    );
    let missing: Vec<_> = registered.difference(&rows).collect();
    let extra: Vec<_> = rows.difference(&registered).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "registered without a row: {missing:?}; rows the code does not register: {extra:?}"
    );
}
