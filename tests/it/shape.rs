//! The code keeps its shape: no Rust file over 700 lines and no function over 100 (in
//! `src/`, `tests/`, `examples/` and `fuzz/fuzz_targets/`), and one type per name in `src/` (a name
//! says which concept it is wherever it is read). Reads the files as `cargo fmt` lays
//! them out: a function's body ends at the first `}` line indented as its `fn` line, or
//! on the `fn` line itself.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::layers::sources;

/// Longest file, in lines.
const FILE_LINES: usize = 700;
/// Longest function, in lines, its signature and closing brace included.
const FUNCTION_LINES: usize = 100;

/// Every `.rs` file under the crate's `dir`.
fn files(dir: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join(dir), &mut out);
    out.sort();
    out
}

/// The name after `fn ` when `line` opens a function whose body goes on past it (not a
/// trait's declaration, not a one-line body), with its indentation.
fn function_opened(line: &str) -> Option<(&str, &str)> {
    let code = line.trim_start();
    let indent = &line[..line.len() - code.len()];
    let mut words = code.split_whitespace();
    while let Some(word) = words.next() {
        let modifier = word.starts_with("pub")
            || matches!(word, "async" | "const" | "unsafe" | "extern" | "\"C\"");
        if word == "fn" {
            let name = words.next()?.split(['<', '(']).next()?;
            return (!code.ends_with(';') && !code.ends_with('}')).then_some((indent, name));
        }
        if !modifier {
            return None;
        }
    }
    None
}

/// The functions of `text` longer than [`FUNCTION_LINES`]: (name, lines).
fn long_functions(text: &str) -> Vec<(String, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut long = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        let Some((indent, name)) = function_opened(line) else {
            continue;
        };
        let close = format!("{indent}}}");
        if let Some(end) = lines[at + 1..].iter().position(|l| *l == close) {
            if end + 2 > FUNCTION_LINES {
                long.push((name.to_string(), end + 2));
            }
        }
    }
    long
}

/// The names of the types `text` defines: structs, enums, unions, traits, and type
/// aliases (not a trait's associated `type`, which names the trait's concept).
fn types_defined(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    for line in text.lines() {
        let code = line.trim_start();
        let indented = code.len() != line.len();
        let mut words = code.split_whitespace();
        let mut word = words.next();
        let visible = word.is_some_and(|w| w.starts_with("pub"));
        if visible {
            word = words.next();
        }
        let defines = match word {
            Some("struct" | "enum" | "union" | "trait") => true,
            Some("type") => visible || !indented,
            _ => false,
        };
        if let Some(name) = words.next().filter(|_| defines) {
            let name = name.split(['<', '(', ':', ';', '{']).next().unwrap_or(name);
            names.push(name.to_string());
        }
    }
    names
}

/// `path` relative to the crate.
fn shown(path: &Path) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    path.strip_prefix(root)
        .unwrap_or(path)
        .display()
        .to_string()
}

/// Where the crate's Rust files are (the fuzz targets' sources, not `fuzz/target`, where
/// `cargo fuzz` builds and build scripts write generated code).
const DIRS: [&str; 4] = ["src", "tests", "examples", "fuzz/fuzz_targets"];

#[test]
fn no_file_is_over_700_lines() {
    let mut long = Vec::new();
    for dir in DIRS {
        for file in files(dir) {
            let lines = std::fs::read_to_string(&file)
                .expect("read")
                .lines()
                .count();
            if lines > FILE_LINES {
                long.push(format!("{} ({lines} lines)", shown(&file)));
            }
        }
    }
    assert!(long.is_empty(), "over {FILE_LINES} lines: {long:?}");
}

#[test]
fn no_function_is_over_100_lines() {
    let mut long = Vec::new();
    for file in DIRS.into_iter().flat_map(files) {
        let text = std::fs::read_to_string(&file).expect("read");
        for (name, lines) in long_functions(&text) {
            long.push(format!("{} `{name}` ({lines} lines)", shown(&file)));
        }
    }
    assert!(long.is_empty(), "over {FUNCTION_LINES} lines: {long:?}");
}

#[test]
fn each_type_name_in_src_is_defined_once() {
    let mut defined: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for file in files("src") {
        let text = std::fs::read_to_string(&file).expect("read");
        for name in types_defined(&text) {
            defined.entry(name).or_default().push(shown(&file));
        }
    }
    assert!(defined.len() > 100, "{} types found", defined.len());
    let twice: Vec<_> = defined.iter().filter(|(_, at)| at.len() > 1).collect();
    assert!(twice.is_empty(), "defined more than once: {twice:?}");
}

#[test]
fn the_checks_find_what_they_look_for() {
    let body = "    x();\n".repeat(FUNCTION_LINES - 2);
    let text = format!(
        "pub(crate) async fn long<T>(t: T) {{\n{body}}}\nfn one_line() {{}}\n\
         impl A {{\n    fn short(&self) {{\n    }}\n    const fn fits(&self) {{\n{}    }}\n}}\n\
         trait Shape {{\n    fn declared(&self);\n    type Output;\n}}\n",
        "        y();\n".repeat(FUNCTION_LINES - 2)
    );
    assert!(
        long_functions(&text).is_empty(),
        "{:?}",
        long_functions(&text)
    );
    let longer = text.replacen("x();\n", "x();\n    x();\n", 1);
    assert_eq!(long_functions(&longer), [("long".to_string(), 101)]);
    let types = "pub struct A;\nstruct B<'a> {\n}\npub(crate) enum C {\n}\ntrait D {\n    \
                 type Error;\n}\nimpl E for F {\n    type Error = G;\n}\ntype H = u8;\n\
                 pub(super) type I<T> = Vec<T>;\n";
    assert_eq!(types_defined(types), ["A", "B", "C", "D", "H", "I"]);
}
