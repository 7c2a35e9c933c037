//! A bundle: evidence exported from one or more evidence directories (a fleet's members
//! each keep their own), self-contained — the records chosen, the chains' start records
//! and heads, every robots.txt the records name, and each record's inclusion proof
//! against its segment's signed head — so it is checked with nothing else at hand
//! (`verify.rs`).
//!
//! **The JSON-lines form** (`robotsgate evidence export --format jsonl`), one object a
//! line, each with a `kind`:
//! * `bundle` (first): `version`, `created`, the `filter` applied, `complete` (no
//!   filter: every record of every segment found is in it);
//! * `head`: a chain's `heads.jsonl` line as written (`line`), all of them, in order;
//! * `policy`: a robots.txt by `sha256`, its octets in base64 (`bytes`);
//! * `record`: a record's `line` as written (or `line_b64` when it is not UTF-8), its
//!   `chain`, `segment`, `index` in the segment, the head `size` its `proof` (hex
//!   hashes, nearest the leaf first) is against, or none when no head signs it yet;
//! * `segment` (complete bundles only): a segment and how many records it held.
//!
//! Records of several chains are merged by time. A filtered bundle proves each record
//! it holds; that it holds every record of a kind, only a complete one shows.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::{json, Value};

use super::merkle::{leaf_hash, Hash, Tree};
use super::read;
use super::record::{hex, stamp};
use super::{EvidenceError, EvidenceErrorKind};

/// What records an export takes.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// Only this origin's (`scheme://host:port`).
    pub origin: Option<String>,
    /// Only this URL's decisions (and its origin's robots.txt records).
    pub url: Option<String>,
    /// Only records written at or after this time (the records' own form).
    pub from: Option<String>,
    /// Only records written before it.
    pub to: Option<String>,
}

impl Filter {
    /// No filter at all: every record.
    pub fn is_empty(&self) -> bool {
        self.origin.is_none() && self.url.is_none() && self.from.is_none() && self.to.is_none()
    }

    /// Does `record` (parsed) pass?
    fn takes(&self, record: &Value) -> bool {
        let t = record["t"].as_str().unwrap_or("");
        if self.from.as_deref().is_some_and(|from| t < from)
            || self.to.as_deref().is_some_and(|to| t >= to)
        {
            return false;
        }
        let origin = record["origin"].as_str();
        let url = record["url"].as_str();
        let is_decision = record["type"] == "decision";
        if let Some(wanted) = &self.url {
            let own = origin_of(wanted);
            return if is_decision {
                url == Some(wanted)
            } else {
                origin == Some(own.as_str())
            };
        }
        if let Some(wanted) = &self.origin {
            return origin == Some(origin_of(wanted).as_str());
        }
        true
    }
}

/// The origin of a URL (or of an origin), as records name origins
/// (`policy::target::Origin`'s form: the default port left out); the text itself, its
/// path cut, when it is not one.
pub fn origin_of(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("http", url));
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let origin = format!("{scheme}://{authority}");
    crate::policy::target::Origin::parse(&origin).map_or(origin, |o| o.to_string())
}

/// One record in a bundle.
#[derive(Clone, Debug)]
pub struct Item {
    /// Its chain (the instance).
    pub chain: String,
    /// Its segment.
    pub segment: u32,
    /// Its index there.
    pub index: usize,
    /// The head size its proof is against (none: no head signs it).
    pub size: Option<u64>,
    /// The line as written.
    pub line: Vec<u8>,
    /// Its inclusion proof.
    pub proof: Vec<Hash>,
    /// The line read (`Null` when it does not read).
    pub json: Value,
}

/// A bundle in memory: what export writes and verify reads.
#[derive(Debug, Default)]
pub struct Bundle {
    /// The `bundle` line.
    pub header: Value,
    /// Each chain's head lines, in order.
    pub heads: BTreeMap<String, Vec<String>>,
    /// The robots.txt files, by SHA-256.
    pub policies: BTreeMap<String, Vec<u8>>,
    /// The records, by time.
    pub records: Vec<Item>,
    /// Complete segments: (chain, segment) and how many records.
    pub segments: BTreeMap<(String, u32), usize>,
}

/// What an export wrote.
#[derive(Debug, Default)]
pub struct Exported {
    /// Records.
    pub records: usize,
    /// Of which decisions.
    pub decisions: usize,
    /// Policies.
    pub policies: usize,
    /// Chains.
    pub chains: usize,
}

/// Gathers the bundle of `dirs` under `filter`.
pub fn gather(dirs: &[PathBuf], filter: &Filter) -> Result<Bundle, EvidenceError> {
    let mut bundle = Bundle {
        header: json!({
            "kind": "bundle",
            "bundle": "robotsgate-evidence",
            "version": 1,
            "created": stamp(std::time::SystemTime::now()),
            "filter": {
                "origin": filter.origin, "url": filter.url,
                "from": filter.from, "to": filter.to,
            },
            "complete": filter.is_empty(),
        }),
        ..Bundle::default()
    };
    let mut wanted: BTreeMap<String, PathBuf> = BTreeMap::new();
    for dir in dirs {
        for chain in read::chains(dir)? {
            let instance = chain.instance();
            let items = chain_items(&chain, &instance, filter, &mut bundle.segments)?;
            if items
                .iter()
                .all(|i| i.index == 0 && i.segment == first_segment(&chain))
            {
                // Nothing of the chain passed but its start record.
                if !filter.is_empty() {
                    continue;
                }
            }
            for item in &items {
                for sha in named_policies(&item.json) {
                    wanted.insert(sha, dir.join("policies"));
                }
            }
            bundle.heads.insert(instance, chain.heads.clone());
            bundle.records.extend(items);
        }
    }
    for (sha, dir) in wanted {
        // A policy file missing is the verifier's to name: the bundle says what it has.
        if let Ok(octets) = std::fs::read(dir.join(&sha)) {
            bundle.policies.insert(sha, octets);
        }
    }
    // Merged by time (a chain's own order kept for equal times).
    bundle
        .records
        .sort_by(|a, b| a.json["t"].as_str().cmp(&b.json["t"].as_str()));
    Ok(bundle)
}

/// The number of a chain's first segment on disk.
fn first_segment(chain: &read::ChainFiles) -> u32 {
    chain.segments.keys().next().copied().unwrap_or(1)
}

/// The SHA-256 values a record names (its policy, a fetched or adopted file).
pub fn named_policies(record: &Value) -> Vec<String> {
    [
        &record["policy"]["sha256"],
        &record["sha256"],
        &record["tdmrep"]["sha256"],
    ]
    .into_iter()
    .filter_map(|v| v.as_str().map(str::to_string))
    .collect()
}

/// One chain's records that `filter` takes (with its start record, the outcomes of the
/// decisions taken, and its gaps), each with its proof; `complete` gets each segment
/// when no filter applies.
fn chain_items(
    chain: &read::ChainFiles,
    instance: &str,
    filter: &Filter,
    complete: &mut BTreeMap<(String, u32), usize>,
) -> Result<Vec<Item>, EvidenceError> {
    let sizes = head_sizes(&chain.heads);
    let mut items = Vec::new();
    let mut decisions = BTreeSet::new();
    for (n, file) in &chain.segments {
        let found = read::segment(file)?;
        let leaves: Vec<Hash> = found.lines.iter().map(|l| leaf_hash(l)).collect();
        let size = sizes
            .get(n)
            .copied()
            .filter(|s| *s as usize <= leaves.len());
        // One tree for the segment's signed size; every record's proof read off it.
        let tree = size.map(|s| Tree::new(&leaves[..s as usize]));
        if filter.is_empty() {
            complete.insert((instance.to_string(), *n), leaves.len());
        }
        for (index, line) in found.lines.iter().enumerate() {
            let json: Value = serde_json::from_slice(line).unwrap_or(Value::Null);
            let always = json["type"] == "start" || json["type"] == "gap" || json.is_null();
            let outcome_of_taken = json["type"] == "outcome"
                && json["decision"]
                    .as_u64()
                    .is_some_and(|d| decisions.contains(&d));
            if !(always || outcome_of_taken || filter.takes(&json)) {
                continue;
            }
            if json["type"] == "decision" {
                if let Some(seq) = json["seq"].as_u64() {
                    decisions.insert(seq);
                }
            }
            let signed = size.filter(|s| (index as u64) < *s);
            let proof = match (&tree, signed) {
                (Some(tree), Some(_)) => tree.path(index),
                _ => Vec::new(),
            };
            items.push(Item {
                chain: instance.to_string(),
                segment: *n,
                index,
                size: signed,
                line: line.clone(),
                proof,
                json,
            });
        }
    }
    Ok(items)
}

/// Each segment's largest head size.
fn head_sizes(heads: &[String]) -> BTreeMap<u32, u64> {
    let mut sizes = BTreeMap::new();
    for line in heads {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if let (Some(n), Some(size)) = (v["segment"].as_u64(), v["size"].as_u64()) {
            let entry = sizes.entry(n as u32).or_insert(0);
            *entry = (*entry).max(size);
        }
    }
    sizes
}

impl Bundle {
    /// Writes the JSON-lines form to `out`.
    pub fn write_jsonl(&self, out: &mut impl Write) -> std::io::Result<Exported> {
        writeln!(out, "{}", self.header)?;
        for (chain, heads) in &self.heads {
            for line in heads {
                writeln!(
                    out,
                    "{}",
                    json!({"kind": "head", "chain": chain, "line": line})
                )?;
            }
        }
        for (sha, octets) in &self.policies {
            let bytes = STANDARD.encode(octets);
            writeln!(
                out,
                "{}",
                json!({"kind": "policy", "sha256": sha, "bytes": bytes})
            )?;
        }
        let mut exported = Exported {
            chains: self.heads.len(),
            policies: self.policies.len(),
            ..Exported::default()
        };
        for item in &self.records {
            let mut record = json!({
                "kind": "record", "chain": item.chain, "segment": item.segment,
                "index": item.index, "size": item.size,
                "proof": item.proof.iter().map(|h| hex(h)).collect::<Vec<_>>(),
            });
            match std::str::from_utf8(&item.line) {
                Ok(line) => record["line"] = Value::from(line),
                Err(_) => record["line_b64"] = Value::from(STANDARD.encode(&item.line)),
            }
            writeln!(out, "{record}")?;
            exported.records += 1;
            exported.decisions += usize::from(item.json["type"] == "decision");
        }
        for ((chain, segment), records) in &self.segments {
            let line =
                json!({"kind": "segment", "chain": chain, "segment": segment, "records": records});
            writeln!(out, "{line}")?;
        }
        out.flush()?;
        Ok(exported)
    }

    /// Reads a JSON-lines bundle; an error names the first line that is not one.
    pub fn read_jsonl(text: &str) -> Result<Bundle, EvidenceError> {
        let mut bundle = Bundle::default();
        for (n, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            let bad = |what: &str| {
                EvidenceError::new(
                    EvidenceErrorKind::Format,
                    format!("bundle line {}: {what}", n + 1),
                )
            };
            let v: Value = serde_json::from_str(line).map_err(|_| bad("not JSON"))?;
            let chain = v["chain"].as_str().unwrap_or("").to_string();
            match v["kind"].as_str() {
                Some("bundle") => bundle.header = v,
                Some("head") => {
                    let head = v["line"]
                        .as_str()
                        .ok_or_else(|| bad("a head without its line"))?;
                    bundle
                        .heads
                        .entry(chain)
                        .or_default()
                        .push(head.to_string());
                }
                Some("policy") => {
                    let sha = v["sha256"]
                        .as_str()
                        .ok_or_else(|| bad("a policy without sha256"))?;
                    let octets = STANDARD
                        .decode(v["bytes"].as_str().unwrap_or(""))
                        .map_err(|_| bad("a policy's bytes are not base64"))?;
                    bundle.policies.insert(sha.to_string(), octets);
                }
                Some("record") => bundle
                    .records
                    .push(read_item(&v, chain).ok_or_else(|| bad("an unreadable record entry"))?),
                Some("segment") => {
                    let segment = v["segment"]
                        .as_u64()
                        .ok_or_else(|| bad("a segment without its number"))?;
                    let records = v["records"].as_u64().unwrap_or(0) as usize;
                    bundle.segments.insert((chain, segment as u32), records);
                }
                _ => return Err(bad("an unknown kind")),
            }
        }
        if bundle.header.is_null() {
            return Err(EvidenceError::new(
                EvidenceErrorKind::Format,
                "not a robotsgate evidence bundle (no bundle line)",
            ));
        }
        Ok(bundle)
    }

    /// Writes the bundle to `out` in `format`.
    pub fn write(&self, format: Format, out: &Path) -> Result<Exported, EvidenceError> {
        let file = std::fs::File::create(out).map_err(|e| {
            EvidenceError::new(EvidenceErrorKind::Io, format!("{}: {e}", out.display()))
        })?;
        let mut out_file = std::io::BufWriter::new(file);
        let written = match format {
            Format::Jsonl => self.write_jsonl(&mut out_file),
            Format::Warc => super::warc::write(self, &mut out_file),
        };
        written.map_err(|e| {
            EvidenceError::new(EvidenceErrorKind::Io, format!("{}: {e}", out.display()))
        })
    }
}

/// A `record` entry read back.
fn read_item(v: &Value, chain: String) -> Option<Item> {
    let line = match (v["line"].as_str(), v["line_b64"].as_str()) {
        (Some(line), _) => line.as_bytes().to_vec(),
        (None, Some(b64)) => STANDARD.decode(b64).ok()?,
        _ => return None,
    };
    let proof = v["proof"]
        .as_array()?
        .iter()
        .map(|h| unhex(h.as_str()?))
        .collect::<Option<Vec<Hash>>>()?;
    Some(Item {
        chain,
        segment: v["segment"].as_u64()? as u32,
        index: v["index"].as_u64()? as usize,
        size: v["size"].as_u64(),
        json: serde_json::from_slice(&line).unwrap_or(Value::Null),
        line,
        proof,
    })
}

/// A SHA-256 from 64 hex digits.
pub fn unhex(text: &str) -> Option<Hash> {
    if text.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in text.as_bytes().chunks(2).enumerate() {
        let digit = |c: u8| (c as char).to_digit(16);
        out[i] = u8::try_from(digit(pair[0])? * 16 + digit(pair[1])?).ok()?;
    }
    Some(out)
}

/// An export's form.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// JSON lines (what `verify` reads).
    Jsonl,
    /// WARC 1.1: each robots.txt a `response` record, each record a `metadata` one.
    Warc,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_named_as_records_name_them() {
        assert_eq!(origin_of("http://A.example:80/x?y"), "http://a.example");
        assert_eq!(
            origin_of("https://a.example:8443/"),
            "https://a.example:8443"
        );
        assert_eq!(
            origin_of("https://[2001:db8::1]/p"),
            "https://[2001:db8::1]"
        );
        assert_eq!(origin_of("http://127.0.0.1:9/p"), "http://127.0.0.1:9");
    }

    #[test]
    fn hashes_read_back_and_anything_else_does_not() {
        let h = leaf_hash(b"x");
        assert_eq!(unhex(&hex(&h)), Some(h));
        assert_eq!(unhex("zz"), None);
        assert_eq!(unhex(&"g".repeat(64)), None);
    }
}
