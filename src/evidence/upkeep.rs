//! What keeps the evidence directory in order besides writing: a thread that ticks
//! this process's chain (writes, heads, `fdatasync`, segments closed at their age) and
//! applies retention once a minute; at start, the unsigned tail of an earlier chain (a
//! process that crashed between two heads) signed as found, `recovered`.
//!
//! **Retention** drops whole closed segments of any chain under the directory: those
//! older than `retention_seconds` (by their last write), then the oldest while all
//! segments together exceed `retention_bytes`. Each chain's dropped segments are named
//! in a signed cut appended to its `heads.jsonl`, so the verifier tells a deliberate cut
//! from a removal. Heads are never dropped.

use std::path::Path;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant, SystemTime};

use super::chain::Chain;
use super::head::{line_hash, signed, RetentionCut, SegmentHead};
use super::merkle::{leaf_hash, root};
use super::read::{self, ChainFiles};
use super::record::{hex, stamp};
use super::{Evidence, UPKEEP_EVERY};
use crate::identity::key::SigningKey;

/// How long retention keeps segments, and the key its cuts are signed with.
pub struct Retention {
    /// Segments older than this are dropped (zero: none by age).
    pub age: Duration,
    /// Segments beyond this many octets in all are dropped (zero: no bound).
    pub bytes: u64,
    /// Signs the cuts.
    pub key: Arc<SigningKey>,
}

/// How often retention looks.
const RETENTION_EVERY: Duration = Duration::from_secs(60);

/// Starts the upkeep thread; it ends with the evidence.
pub fn start(evidence: &Arc<Evidence>) {
    let weak: Weak<Evidence> = Arc::downgrade(evidence);
    let spawned = std::thread::Builder::new()
        .name("evidence".into())
        .spawn(move || {
            let mut retained = Instant::now();
            while let Some(evidence) = weak.upgrade() {
                evidence.chain.tick();
                if retained.elapsed() >= RETENTION_EVERY {
                    retained = Instant::now();
                    evidence.retention.apply(&evidence.dir, &evidence.chain);
                }
                drop(evidence);
                std::thread::sleep(UPKEEP_EVERY);
            }
        });
    if let Err(e) = spawned {
        log::error!("evidence: no upkeep thread ({e}): heads and syncs come only with writes");
    }
}

/// Signs, for every chain under `root` but `own`'s, each segment whose records go past
/// what its last head signed (a crash between two heads): a `recovered` closing head over
/// its whole lines as found.
pub fn sign_unsigned_tails(root: &Path, own: &str, key: &SigningKey) {
    let Ok(chains) = read::chains(root) else {
        return;
    };
    for chain in chains {
        if chain.instance() == own || alive(&chain.dir) {
            continue;
        }
        if let Err(e) = sign_tail(&chain, key) {
            log::warn!(
                "evidence: {}: its unsigned tail not signed: {e}",
                chain.dir.display()
            );
        }
    }
}

/// Is the chain in `dir` written by a process still running (its `lock` held)?
fn alive(dir: &Path) -> bool {
    match std::fs::File::open(dir.join("lock")) {
        Ok(lock) => !super::files::try_lock(&lock),
        Err(_) => false,
    }
}

/// [`sign_unsigned_tails`] for one chain.
fn sign_tail(chain: &ChainFiles, key: &SigningKey) -> Result<(), super::EvidenceError> {
    let instance = chain.instance();
    let signed_sizes = signed_sizes(&chain.heads);
    let mut appended = Vec::new();
    let mut last = chain
        .heads
        .last()
        .map_or([0; 32], |l| line_hash(l.as_bytes()));
    for (n, path) in &chain.segments {
        let found = read::segment(path)?;
        let (size, closed) = signed_sizes.get(n).copied().unwrap_or((0, false));
        if closed || found.lines.len() as u64 <= size {
            continue;
        }
        let leaves: Vec<_> = found.lines.iter().map(|l| leaf_hash(l)).collect();
        let first_seq = found
            .lines
            .first()
            .and_then(|l| serde_json::from_slice::<serde_json::Value>(l).ok())
            .and_then(|v| v["seq"].as_u64())
            .unwrap_or(0);
        let head = SegmentHead {
            head: 1,
            instance: &instance,
            member: member_of(&instance),
            segment: *n,
            first_seq,
            size: leaves.len() as u64,
            root: hex(&root(&leaves)),
            tip: found
                .lines
                .last()
                .map_or_else(|| hex(&[0; 32]), |l| hex(&line_hash(l))),
            prev_head: hex(&last),
            t: stamp(SystemTime::now()),
            closed: true,
            recovered: true,
            key_id: key.thumbprint(),
            key: key.public_jwk(),
        };
        let line = signed(&head, key);
        last = line_hash(line.as_bytes());
        appended.push(line);
    }
    append_heads(&chain.dir, &appended)
}

/// Each segment's largest size a head signed, and whether a closing head signed it.
fn signed_sizes(heads: &[String]) -> std::collections::HashMap<u32, (u64, bool)> {
    let mut sizes = std::collections::HashMap::new();
    for line in heads {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let (Some(n), Some(size)) = (v["segment"].as_u64(), v["size"].as_u64()) else {
            continue;
        };
        let entry = sizes.entry(n as u32).or_insert((0, false));
        entry.0 = entry.0.max(size);
        entry.1 |= v["closed"].as_bool().unwrap_or(false);
    }
    sizes
}

/// The member an instance id names (`member/start.pid`).
fn member_of(instance: &str) -> &str {
    instance.split_once('/').map_or(instance, |(m, _)| m)
}

/// Appends `lines` to a chain's `heads.jsonl`, synced.
fn append_heads(dir: &Path, lines: &[String]) -> Result<(), super::EvidenceError> {
    if lines.is_empty() {
        return Ok(());
    }
    use std::io::Write;
    let path = dir.join("heads.jsonl");
    let mut file = super::files::append_only(&path)?;
    let mut text = lines.join("\n");
    text.push('\n');
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_data())
        .map_err(|e| {
            super::EvidenceError::new(
                super::EvidenceErrorKind::Io,
                format!("{}: {e}", path.display()),
            )
        })
}

impl Retention {
    /// Drops what retention allows (see the module docs), this process's open segment
    /// aside.
    pub fn apply(&self, root: &Path, own: &Chain) {
        if self.age.is_zero() && self.bytes == 0 {
            return;
        }
        let Ok(chains) = read::chains(root) else {
            return;
        };
        // Every closed segment, oldest first: (last written, octets, chain, number).
        let mut segments = Vec::new();
        let mut total = 0u64;
        for (c, chain) in chains.iter().enumerate() {
            let sizes = signed_sizes(&chain.heads);
            let last = chain.segments.keys().max().copied().unwrap_or(0);
            for (n, path) in &chain.segments {
                let Ok(meta) = std::fs::metadata(path) else {
                    continue;
                };
                total += meta.len();
                // Closed: a later segment follows it, or its closing head is signed (an
                // earlier process's last); never this process's open one.
                let closed = *n < last || sizes.get(n).is_some_and(|s| s.1);
                let open = chain.dir == own.dir() && *n >= own.open_segment();
                if closed && !open {
                    let written = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                    segments.push((written, meta.len(), c, *n));
                }
            }
        }
        segments.sort();
        let now = SystemTime::now();
        let mut dropped: Vec<(usize, u32, &'static str)> = Vec::new();
        for (written, octets, c, n) in segments {
            let old =
                !self.age.is_zero() && now.duration_since(written).unwrap_or_default() > self.age;
            let over = self.bytes != 0 && total > self.bytes;
            if !old && !over {
                continue;
            }
            if std::fs::remove_file(&chains[c].segments[&n]).is_ok() {
                total = total.saturating_sub(octets);
                dropped.push((c, n, if old { "age" } else { "size" }));
            }
        }
        for (c, chain) in chains.iter().enumerate() {
            for reason in ["age", "size"] {
                let cut: Vec<u32> = dropped
                    .iter()
                    .filter(|(d, _, r)| *d == c && *r == reason)
                    .map(|(_, n, _)| *n)
                    .collect();
                if cut.is_empty() {
                    continue;
                }
                log::info!(
                    "evidence: retention ({reason}) dropped segments {cut:?} of {}",
                    chain.dir.display()
                );
                if chain.dir == own.dir() {
                    own.cut(cut, reason);
                } else {
                    self.sign_cut(chain, cut, reason);
                }
            }
        }
    }

    /// Appends a signed cut of `cut` to `chain`'s heads.
    fn sign_cut(&self, chain: &ChainFiles, cut: Vec<u32>, reason: &str) {
        // Read again: this process's own chain may have signed a head since.
        let heads = read::chain(&chain.dir).map(|c| c.heads).unwrap_or_default();
        let instance = chain.instance();
        let line = signed(
            &RetentionCut {
                cut,
                instance: &instance,
                reason,
                prev_head: heads
                    .last()
                    .map_or_else(|| hex(&[0; 32]), |l| hex(&line_hash(l.as_bytes()))),
                t: stamp(SystemTime::now()),
                key_id: self.key.thumbprint(),
            },
            &self.key,
        );
        if let Err(e) = append_heads(&chain.dir, &[line]) {
            log::error!("evidence: a cut could not be signed: {e}");
        }
    }
}
