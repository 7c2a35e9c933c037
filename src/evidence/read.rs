//! Reading an evidence directory back: its chains, each with its heads and its
//! segments' records, as the octets on disk say (nothing trusted: `verify.rs` judges).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{EvidenceError, EvidenceErrorKind};

/// One chain's files.
#[derive(Debug)]
pub struct ChainFiles {
    /// Its directory.
    pub dir: PathBuf,
    /// `heads.jsonl`'s lines.
    pub heads: Vec<String>,
    /// Its segments, by number.
    pub segments: BTreeMap<u32, PathBuf>,
}

impl ChainFiles {
    /// The process the chain is (its heads name it; its directory's name else).
    pub fn instance(&self) -> String {
        self.heads
            .iter()
            .find_map(|line| {
                let v: serde_json::Value = serde_json::from_str(line).ok()?;
                v["instance"].as_str().map(str::to_string)
            })
            .unwrap_or_else(|| {
                self.dir
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default()
            })
    }
}

/// A segment's records: its whole lines (without their newlines, octets as on disk),
/// and the octets of a last line cut short (a write the process did not finish), if any.
#[derive(Debug, Default)]
pub struct SegmentLines {
    /// The whole lines.
    pub lines: Vec<Vec<u8>>,
    /// Octets after the last newline.
    pub torn: usize,
}

/// Every chain under `root` (`chains/*/`), by directory name.
pub fn chains(root: &Path) -> Result<Vec<ChainFiles>, EvidenceError> {
    let base = root.join("chains");
    let entries = std::fs::read_dir(&base).map_err(|e| {
        EvidenceError::new(
            EvidenceErrorKind::Io,
            format!("{}: not an evidence directory: {e}", root.display()),
        )
    })?;
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    dirs.into_iter().map(|dir| chain(&dir)).collect()
}

/// One chain's files.
pub fn chain(dir: &Path) -> Result<ChainFiles, EvidenceError> {
    let heads = match std::fs::read_to_string(dir.join("heads.jsonl")) {
        Ok(text) => text
            .lines()
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(io(dir, e)),
    };
    let mut segments = BTreeMap::new();
    for entry in std::fs::read_dir(dir).map_err(|e| io(dir, e))? {
        let path = entry.map_err(|e| io(dir, e))?.path();
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        let number = name
            .as_deref()
            .and_then(|n| n.strip_suffix(".jsonl"))
            .and_then(|n| n.parse::<u32>().ok());
        if let Some(n) = number {
            segments.insert(n, path);
        }
    }
    Ok(ChainFiles {
        dir: dir.to_path_buf(),
        heads,
        segments,
    })
}

/// A segment's records.
pub fn segment(path: &Path) -> Result<SegmentLines, EvidenceError> {
    let octets = std::fs::read(path).map_err(|e| io(path, e))?;
    let whole = octets
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(0, |at| at + 1);
    let lines = octets[..whole]
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    Ok(SegmentLines {
        lines,
        torn: octets.len() - whole,
    })
}

/// An I/O error reading `path`.
fn io(path: &Path, e: std::io::Error) -> EvidenceError {
    EvidenceError::new(EvidenceErrorKind::Io, format!("{}: {e}", path.display())).because(e)
}
