//! Module docs say what the code is: a module with files of its own (a folder, with
//! `mod.rs` or beside `name.rs`) names every one of them in its `//!` doc (in
//! backticks: `` `name` ``, `` [`name`] `` or `` `name.rs` ``; a folder's `tests.rs`,
//! the module's own tests, aside), and every `name.rs` a module doc names exists (a
//! bare name under `src/`, a path from the repository or from a folder the naming file
//! is in).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The `//!` lines of `file`, joined.
fn module_doc(file: &Path) -> String {
    std::fs::read_to_string(file)
        .expect("read source")
        .lines()
        .map(str::trim_start)
        .take_while(|l| l.starts_with("//!") || l.is_empty())
        .filter_map(|l| l.strip_prefix("//!"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Each folder module: the file whose doc speaks for it, and the folder.
fn folder_modules(src: &Path) -> Vec<(PathBuf, PathBuf)> {
    let mut files = Vec::new();
    crate::layers::sources(src, &mut files);
    let mut out = Vec::new();
    for file in files {
        let dir = file.parent().expect("a folder").to_path_buf();
        if file.file_name().is_some_and(|n| n == "mod.rs") {
            out.push((file.clone(), dir));
        } else {
            let beside = file.with_extension("");
            if beside.is_dir() {
                out.push((file.clone(), beside));
            }
        }
    }
    out.sort();
    out
}

/// The names a folder's doc must give: its files' stems and its sub-folders.
fn members_of(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .expect("read dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter_map(|p| {
            let name = p.file_name()?.to_string_lossy().into_owned();
            match name.strip_suffix(".rs") {
                Some("mod" | "tests") => None,
                Some(stem) => Some(stem.to_string()),
                // A folder beside its `name.rs` is that file's, named with it.
                None if p.is_dir() && !p.with_extension("rs").exists() => Some(name),
                None if p.is_dir() => Some(name),
                None => None,
            }
        })
        .collect()
}

/// Does `doc` name `stem` in backticks?
fn names(doc: &str, stem: &str) -> bool {
    [
        format!("`{stem}`"),
        format!("`{stem}.rs`"),
        format!("`{stem}/"),
    ]
    .iter()
    .any(|form| doc.contains(form.as_str()))
}

#[test]
fn every_module_doc_names_its_files() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut unnamed = Vec::new();
    for (doc_file, dir) in folder_modules(&src) {
        let doc = module_doc(&doc_file);
        for member in members_of(&dir) {
            if !names(&doc, &member) {
                let shown = doc_file.strip_prefix(&src).unwrap_or(&doc_file).display();
                unnamed.push(format!("{shown} does not name {member}"));
            }
        }
    }
    assert!(
        unnamed.is_empty(),
        "module docs missing files:\n{}",
        unnamed.join("\n")
    );
}

#[test]
fn every_file_a_module_doc_names_exists() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    crate::layers::sources(&src, &mut files);
    let stems: BTreeSet<String> = files
        .iter()
        .filter_map(|f| f.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    let root = src.parent().expect("the repository");
    let mut missing = Vec::new();
    for file in &files {
        let doc = module_doc(file);
        for piece in doc.split('`').skip(1).step_by(2) {
            if !piece.ends_with(".rs") || piece.contains(' ') {
                continue;
            }
            // A path is the repository's, or from a folder the naming file is in; a bare
            // name, any file's in `src/`.
            let found = match piece.rsplit_once('/') {
                Some(_) => {
                    root.join(piece).exists()
                        || file
                            .ancestors()
                            .any(|dir| dir.starts_with(&src) && dir.join(piece).exists())
                }
                None => stems.contains(piece),
            };
            if !found {
                let shown = file.strip_prefix(&src).unwrap_or(file).display();
                missing.push(format!("{shown} names {piece}, which is not in src/"));
            }
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}
