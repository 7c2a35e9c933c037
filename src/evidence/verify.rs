//! Checking a bundle offline (`robotsgate evidence verify`): that every head is signed
//! by its chain's key and chained to the head before it, that every record is the one
//! its segment's signed head holds at its place (its inclusion proof), that in a
//! complete bundle every record follows the one before it (`seq` and `prev`) and no
//! segment a head names is missing without a signed cut, and that every decision is the
//! one this build's matcher makes from the robots.txt it names.
//!
//! A **break** is a change: a record changed, moved, inserted or removed, a segment
//! missing, a head forged or dropped, a policy file not the one named. A **difference**
//! is a decision this build's matcher would make otherwise (a later parser's reading),
//! named but not a break. A **note** is what the bundle says that a reader should know
//! (records lost to a failed write, segments dropped by retention, a tail no head signed
//! yet).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::bundle::{Bundle, Item};
use super::head::{line_hash, line_hex, public_key, signature_holds};
use super::merkle::{leaf_hash, proves, Hash};
use super::record::hex;

/// What checking a bundle found.
#[derive(Debug, Default)]
pub struct Report {
    /// Changes: each makes the bundle fail.
    pub breaks: Vec<String>,
    /// Decisions this build would make otherwise.
    pub differs: Vec<String>,
    /// What a reader should know.
    pub notes: Vec<String>,
    /// Chains checked.
    pub chains: usize,
    /// Records checked.
    pub records: usize,
    /// Of which decisions.
    pub decisions: usize,
    /// Decisions judged again by this build's matcher.
    pub rederived: usize,
}

/// How a decision is judged again: from a file it names (which file, its SHA-256 in
/// hex, which names it for a cache of parsed files, and its octets) and the decision
/// record, `Some(what this build decides instead)` when it differs, `None` when it
/// agrees.
pub type Rederive<'a> = &'a dyn Fn(JudgedOn, &str, &[u8], &Value) -> Option<String>;

/// The file a decision is judged again on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JudgedOn {
    /// Its robots.txt (`policy`).
    RobotsTxt,
    /// The TDMRep file whose rule refused it (`tdmrep`).
    TdmRep,
}

/// One chain's heads, read and checked.
#[derive(Default)]
struct Heads {
    /// Per segment: each head's size and root.
    roots: BTreeMap<u32, BTreeMap<u64, Hash>>,
    /// Per segment: the largest size a head signed, and whether it was closed.
    last: BTreeMap<u32, (u64, bool)>,
    /// Segments a signed cut dropped.
    cut: BTreeSet<u32>,
}

/// Checks `bundle`; `pinned`, a public key every chain must be signed with.
pub fn verify(bundle: &Bundle, pinned: Option<&[u8]>, rederive: Rederive<'_>) -> Report {
    let mut report = Report::default();
    let mut by_chain: BTreeMap<&str, Vec<&Item>> = BTreeMap::new();
    for item in &bundle.records {
        by_chain.entry(item.chain.as_str()).or_default().push(item);
    }
    for chain in bundle.heads.keys() {
        by_chain.entry(chain.as_str()).or_default();
    }
    let complete = bundle.header["complete"].as_bool().unwrap_or(false);
    // Each policy's octets hashed once: whether they are the ones their name says.
    let intact: BTreeMap<&str, bool> = bundle
        .policies
        .iter()
        .map(|(sha, octets)| (sha.as_str(), hex(&ring_sha256(octets)) == *sha))
        .collect();
    for (chain, mut items) in by_chain {
        items.sort_by_key(|i| (i.segment, i.index));
        report.chains += 1;
        let Some(key) = chain_key(chain, &items, bundle.heads.get(chain), pinned, &mut report)
        else {
            continue;
        };
        let heads = check_heads(chain, bundle.heads.get(chain), &key, &mut report);
        check_records(chain, &items, &heads, &mut report);
        if complete {
            check_complete(chain, &items, &heads, bundle, &mut report);
        }
        for item in &items {
            check_decision(chain, item, bundle, &intact, rederive, &mut report);
        }
    }
    report
}

/// The key a chain's heads are signed with: its start record's (which must be its
/// `seq` 0, `prev` zeros) or, once retention dropped that, its first head's; the pinned
/// key when one is given.
fn chain_key(
    chain: &str,
    items: &[&Item],
    heads: Option<&Vec<String>>,
    pinned: Option<&[u8]>,
    report: &mut Report,
) -> Option<Vec<u8>> {
    let start = items.iter().find(|i| i.json["type"] == "start");
    if let Some(start) = start {
        if start.json["seq"] != 0 || start.json["prev"] != hex(&[0; 32]) {
            report
                .breaks
                .push(format!("chain {chain}: its start record is not its first"));
        }
    }
    let first_head = heads
        .into_iter()
        .flatten()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|h| h["head"] == 1);
    let named = start
        .map(|s| &s.json["key"])
        .or(first_head.as_ref().map(|h| &h["key"]));
    let Some(key) = named.and_then(public_key) else {
        report.breaks.push(format!(
            "chain {chain}: no Ed25519 key to check it by (its start record and heads are missing)"
        ));
        return None;
    };
    if pinned.is_some_and(|p| p != key.as_slice()) {
        report.breaks.push(format!(
            "chain {chain}: signed with another key than the one given"
        ));
    }
    Some(key)
}

/// Checks a chain's heads: signatures, their chain; what they sign, read.
fn check_heads(chain: &str, lines: Option<&Vec<String>>, key: &[u8], report: &mut Report) -> Heads {
    let mut heads = Heads::default();
    let mut prev = [0u8; 32];
    for (n, line) in lines.into_iter().flatten().enumerate() {
        let where_ = format!("chain {chain}: head line {}", n + 1);
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            report.breaks.push(format!("{where_}: not JSON"));
            continue;
        };
        if !signature_holds(line, key) {
            report.breaks.push(format!(
                "{where_}: its signature does not hold (changed, or forged)"
            ));
        }
        if v["prev_head"] != hex(&prev) {
            report.breaks.push(format!(
                "{where_}: does not follow the line before it (a head removed, inserted or reordered)"
            ));
        }
        prev = line_hash(line.as_bytes());
        if let Some(cut) = v["cut"].as_array() {
            let segments: Vec<u32> = cut
                .iter()
                .filter_map(|s| s.as_u64())
                .map(|s| s as u32)
                .collect();
            report.notes.push(format!(
                "chain {chain}: segments {segments:?} dropped by retention ({}) at {}",
                v["reason"].as_str().unwrap_or("?"),
                v["t"].as_str().unwrap_or("?")
            ));
            heads.cut.extend(segments);
            continue;
        }
        let (Some(segment), Some(size), Some(root)) = (
            v["segment"].as_u64(),
            v["size"].as_u64(),
            v["root"].as_str().and_then(super::bundle::unhex),
        ) else {
            report.breaks.push(format!("{where_}: not a head"));
            continue;
        };
        let segment = segment as u32;
        heads.roots.entry(segment).or_default().insert(size, root);
        let last = heads.last.entry(segment).or_insert((0, false));
        last.0 = last.0.max(size);
        last.1 |= v["closed"].as_bool().unwrap_or(false);
        if v["recovered"].as_bool().unwrap_or(false) {
            report.notes.push(format!(
                "chain {chain}: segment {segment}'s last {size} records were signed by a later process (this one stopped between two heads)"
            ));
        }
    }
    heads
}

/// Checks each record against the head it is proven by.
fn check_records(chain: &str, items: &[&Item], heads: &Heads, report: &mut Report) {
    for item in items {
        report.records += 1;
        let seq = item.json["seq"].as_u64();
        let at = format!(
            "chain {chain}: segment {}, record {} (seq {})",
            item.segment,
            item.index,
            seq.map_or_else(|| "?".into(), |s| s.to_string())
        );
        if item.json.is_null() {
            report
                .breaks
                .push(format!("{at}: does not read as a record (changed)"));
        }
        if item.json["type"] == "gap" {
            report.notes.push(format!(
                "{at}: records {} to {} were never written ({}; their requests {})",
                item.json["from"],
                item.json["to"],
                item.json["error"].as_str().unwrap_or("?"),
                item.json["requests"].as_str().unwrap_or("?")
            ));
        }
        let Some(size) = item.size else {
            continue;
        };
        let root = heads.roots.get(&item.segment).and_then(|r| r.get(&size));
        let Some(root) = root else {
            report.breaks.push(format!(
                "{at}: no signed head of {size} records to prove it by"
            ));
            continue;
        };
        let leaf = leaf_hash(&item.line);
        if !proves(item.index, size as usize, &leaf, &item.proof, root) {
            report.breaks.push(format!(
                "{at}: not the record the signed head holds there (changed, moved or inserted)"
            ));
        }
    }
}

/// A complete bundle: every segment's records all there, in order, each following the
/// one before; every segment a head names there, or cut.
fn check_complete(
    chain: &str,
    items: &[&Item],
    heads: &Heads,
    bundle: &Bundle,
    report: &mut Report,
) {
    let mut segments: BTreeMap<u32, Vec<&Item>> = BTreeMap::new();
    for item in items {
        segments.entry(item.segment).or_default().push(item);
    }
    for (segment, (size, _)) in &heads.last {
        let present = bundle.segments.contains_key(&(chain.to_string(), *segment));
        if !present && !heads.cut.contains(segment) {
            report.breaks.push(format!(
                "chain {chain}: segment {segment} is missing (its heads sign {size} records; no signed cut dropped it)"
            ));
        }
    }
    let mut last: Option<(u64, String)> = None;
    for (segment, records) in &segments {
        if !heads.last.contains_key(segment) {
            report.notes.push(format!(
                "chain {chain}: segment {segment}'s {} records are under no head yet",
                records.len()
            ));
        }
        if let Some((size, closed)) = heads.last.get(segment) {
            if records.len() < *size as usize {
                report.breaks.push(format!(
                    "chain {chain}: segment {segment} holds {} records, its head signs {size} (records removed)",
                    records.len()
                ));
            } else if records.len() > *size as usize && *closed {
                report.breaks.push(format!(
                    "chain {chain}: segment {segment} holds {} records after its closing head signed {size} (records added)",
                    records.len()
                ));
            } else if records.len() > *size as usize {
                report.notes.push(format!(
                    "chain {chain}: segment {segment}'s last {} records are under no head yet",
                    records.len() - *size as usize
                ));
            }
        }
        for item in records {
            let seq = item.json["seq"].as_u64();
            if let (Some((before, hash)), Some(seq)) = (&last, seq) {
                if seq != before + 1 {
                    report.breaks.push(format!(
                        "chain {chain}: seq {seq} follows seq {before} (records removed, inserted or reordered)"
                    ));
                } else if item.json["prev"].as_str() != Some(hash.as_str()) {
                    report.breaks.push(format!(
                        "chain {chain}: seq {seq} does not name seq {before} as the record before it (changed or replaced)"
                    ));
                }
            }
            last = seq.map(|s| (s, line_hex(&item.line)));
        }
        // A segment after one that was cut starts a new run of links.
        if heads.cut.contains(&(segment + 1)) {
            last = None;
        }
    }
}

/// Checks a decision against the policy it names, and judges it again.
fn check_decision(
    chain: &str,
    item: &Item,
    bundle: &Bundle,
    intact: &BTreeMap<&str, bool>,
    rederive: Rederive<'_>,
    report: &mut Report,
) {
    let record = &item.json;
    let named = super::bundle::named_policies(record);
    for sha in &named {
        match intact.get(sha.as_str()) {
            Some(true) => {}
            Some(false) => report.breaks.push(format!(
                "policy {sha}: its octets are not the ones named (changed)"
            )),
            None => report.breaks.push(format!(
                "chain {chain}: seq {} names policy {sha}, which the bundle does not hold",
                record["seq"]
            )),
        }
    }
    if record["type"] != "decision" {
        return;
    }
    report.decisions += 1;
    for (judged, field) in [
        (JudgedOn::RobotsTxt, "policy"),
        (JudgedOn::TdmRep, "tdmrep"),
    ] {
        let Some((sha, octets)) = record[field]["sha256"]
            .as_str()
            .and_then(|sha| Some((sha, bundle.policies.get(sha)?)))
        else {
            continue;
        };
        report.rederived += usize::from(judged == JudgedOn::RobotsTxt);
        if let Some(otherwise) = rederive(judged, sha, octets, record) {
            report.differs.push(format!(
                "chain {chain}: seq {} ({} {}): recorded {}, this build decides {otherwise}",
                record["seq"],
                record["verdict"].as_str().unwrap_or("?"),
                record["url"].as_str().unwrap_or("?"),
                record["why"].as_str().unwrap_or("?"),
            ));
        }
    }
}

/// SHA-256 of `octets`.
fn ring_sha256(octets: &[u8]) -> Vec<u8> {
    ring::digest::digest(&ring::digest::SHA256, octets)
        .as_ref()
        .to_vec()
}
