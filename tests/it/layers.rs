//! The module graph has no cycle: reads every `crate::…` path in `src/` (comments
//! skipped), builds the graph of which module uses which, and fails on a cycle, printing
//! it — between files (`origin::store` → `policy::target`) and between the layers, the
//! top-level folders (`origin` → `policy`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`.
pub(crate) fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read dir") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `src/origin/store.rs` → `origin::store`; `src/robots/mod.rs` → `robots`.
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let relative = file.strip_prefix(src).ok()?.with_extension("");
    let mut parts: Vec<String> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    if parts == ["lib"] || parts == ["main"] {
        return None;
    }
    Some(parts.join("::"))
}

/// The modules each module names through `crate::` paths.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let modules: BTreeMap<String, PathBuf> = files
        .iter()
        .filter_map(|f| Some((module_of(&src, f)?, f.clone())))
        .collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, file) in &modules {
        let text = std::fs::read_to_string(file).expect("read source");
        let uses = graph.entry(module.clone()).or_default();
        for line in text.lines() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for (at, _) in line.match_indices("crate::") {
                let path: Vec<&str> = line[at + "crate::".len()..]
                    .split("::")
                    .map(|s| {
                        s.split(|c: char| {
                            !(c.is_ascii_lowercase() || c == '_' || c.is_ascii_digit())
                        })
                        .next()
                        .unwrap_or("")
                    })
                    .take_while(|s| !s.is_empty())
                    .collect();
                // The longest prefix that is a module.
                let target = (1..=path.len())
                    .rev()
                    .map(|n| path[..n].join("::"))
                    .find(|m| modules.contains_key(m));
                if let Some(target) = target {
                    if &target != module {
                        uses.insert(target);
                    }
                }
            }
        }
    }
    graph
}

/// A cycle in `graph`, if there is one, as the modules along it.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(node.to_string(), 1);
        stack.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            match state.get(next.as_str()) {
                Some(1) => {
                    let from = stack.iter().position(|m| m == next).unwrap_or(0);
                    let mut cycle = stack[from..].to_vec();
                    cycle.push(next.clone());
                    return Some(cycle);
                }
                Some(_) => {}
                None => {
                    if let Some(cycle) = visit(next, graph, state, stack) {
                        return Some(cycle);
                    }
                }
            }
        }
        stack.pop();
        state.insert(node.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for node in graph.keys() {
        if !state.contains_key(node) {
            let mut stack = Vec::new();
            if let Some(cycle) = visit(node, graph, &mut state, &mut stack) {
                return Some(cycle);
            }
        }
    }
    None
}

fn listing(graph: &BTreeMap<String, BTreeSet<String>>) -> String {
    graph
        .iter()
        .map(|(m, uses)| {
            format!(
                "{m} → {}",
                uses.iter().cloned().collect::<Vec<_>>().join(", ")
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn modules_form_no_cycle() {
    let graph = graph();
    assert!(graph.contains_key("origin::store") && graph.contains_key("robots::index"));
    if let Some(cycle) = find_cycle(&graph) {
        panic!("module cycle: {}\n\n{}", cycle.join(" → "), listing(&graph));
    }
}

#[test]
fn layers_form_no_cycle() {
    let mut layers: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, uses) in graph() {
        let layer = module.split("::").next().unwrap_or_default().to_string();
        let entry = layers.entry(layer.clone()).or_default();
        for used in uses {
            let used = used.split("::").next().unwrap_or_default().to_string();
            if used != layer {
                entry.insert(used);
            }
        }
    }
    if let Some(cycle) = find_cycle(&layers) {
        panic!("layer cycle: {}\n\n{}", cycle.join(" → "), listing(&layers));
    }
    // Each layer uses only those after it, in the order `src/lib.rs` documents.
    let order = [
        "cli",
        "conformance",
        "proxy",
        "ops",
        "downstream",
        "handover",
        "enforce",
        "origin",
        "fleet",
        "pacing",
        "evidence",
        "telemetry",
        "policy",
        "identity",
        "config",
        "robots",
        "error",
    ];
    let rank = |layer: &str| order.iter().position(|l| *l == layer);
    for (layer, uses) in &layers {
        let here =
            rank(layer).unwrap_or_else(|| panic!("layer `{layer}` is not in the documented order"));
        for used in uses {
            let there = rank(used)
                .unwrap_or_else(|| panic!("layer `{used}` is not in the documented order"));
            assert!(
                there > here,
                "`{layer}` uses `{used}`, which is above it\n\n{}",
                listing(&layers)
            );
        }
    }
    // The engine is pure: it uses nothing else of the crate.
    assert!(layers["robots"].is_empty(), "{:?}", layers["robots"]);
}

#[test]
fn the_check_finds_a_cycle() {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    graph.entry("a".into()).or_default().insert("b".into());
    graph.entry("b".into()).or_default().insert("c".into());
    graph.entry("c".into()).or_default().insert("a".into());
    assert_eq!(
        find_cycle(&graph).map(|c| c.join(" → ")).as_deref(),
        Some("a → b → c → a")
    );
    graph.get_mut("c").map(|c| c.remove("a"));
    assert_eq!(find_cycle(&graph), None);
}
