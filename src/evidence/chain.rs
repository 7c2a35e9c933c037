//! One chain: this process's records, in order, each line naming the SHA-256 of the line
//! before it, written into numbered segments under `chains/<instance>/`, with their
//! signed heads in `heads.jsonl` beside them (`head.rs`).
//!
//! **Writing.** A record is made a line under one short lock (its `seq`, the previous
//! line's hash, one SHA-256 of its own) and queued. A request that must not go before
//! its record is written ([`Chain::written`]) waits for a write that includes it: the
//! first waiter to find nobody writing writes everything queued in one `write(2)` (a
//! group commit, so concurrent requests share one system call) and wakes the others. A
//! record that `write(2)` returned for survives a crash of the process; the disk has it
//! after the next `fdatasync` ([`Chain::tick`], every `evidence.sync_interval_seconds`).
//!
//! **Failing.** A write that fails (a full or unwritable disk) is undone (the segment cut
//! back to its last whole record), and every record queued with it is lost: its waiters
//! are told so (their requests are refused, or sent unrecorded: `on_failure`). The chain
//! goes on from its last written record with a [`Gap`] record naming the lost `seq`s,
//! so a reader sees the loss as a loss, not a removal. Queued records beyond
//! `max_pending_bytes` are refused at once: memory stays bounded while a disk stalls.
//!
//! **Segments.** A segment is closed once it holds `segment_bytes` or has been open
//! `segment_seconds`: a closing head is signed and the next segment opened. While open,
//! a head is signed every `head_interval_seconds` if records came. Retention (`tick`)
//! drops whole closed segments, of any chain under the directory, by age and by size,
//! and signs a cut for them.
//!
//! Costs per record: one JSON serialisation, two SHA-256 passes over its line (the
//! chain's, and the Merkle leaf's at the write), a lock, and a share of one `write(2)`;
//! a head, `⌈log₂ n⌉` hashes (the segment's tree is kept as its frontier, `merkle.rs`).

use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use super::head::{line_hash, signed, RetentionCut, SegmentHead};
use super::merkle::{leaf_hash, Frontier, Hash};
use super::record::{hex, stamp, Entry, Gap};
use super::{files, EvidenceError, EvidenceErrorKind, Unwritten};
use crate::identity::key::SigningKey;

/// How a chain's segments are kept.
#[derive(Clone, Copy, Debug)]
pub struct ChainLimits {
    /// A segment is closed at this size.
    pub segment_bytes: u64,
    /// ... or this age.
    pub segment_age: Duration,
    /// A head at least this often while records come.
    pub head_every: Duration,
    /// `fdatasync` at least this often.
    pub sync_every: Duration,
    /// Queued records, at most.
    pub max_pending: usize,
    /// What the requests of lost records got: `refused` or `sent`.
    pub lost_requests: &'static str,
}

/// The records queued, and where the chain stands.
struct Queue {
    /// Lines not yet written, each ending in a newline.
    pending: Vec<u8>,
    /// The buffer the last write emptied, kept for the next batch (no reallocation).
    spare: Vec<u8>,
    /// The next record's `seq`.
    next: u64,
    /// The SHA-256 of the last record's line (queued or written).
    tip: Hash,
}

/// The chain's files.
struct Files {
    /// The open segment (none once a failure left it unusable: the next write opens
    /// another).
    file: Option<File>,
    /// Its number.
    segment: u32,
    /// Octets of whole records written to it.
    bytes: u64,
    /// When it was opened.
    opened: Instant,
    /// The `seq` of its first record.
    first_seq: u64,
    /// The Merkle tree of its records, as its frontier.
    tree: Frontier,
    /// The SHA-256 of the last record written (64 zeros before any).
    tip: Hash,
    /// `heads.jsonl`.
    heads: File,
    /// The SHA-256 of its last line.
    last_head: Hash,
    /// How many of the segment's records the last head signed.
    signed: u64,
    /// When the last head was signed.
    signed_at: Instant,
    /// Written since the last `fdatasync`.
    dirty: bool,
    /// When it was last synced.
    synced_at: Instant,
}

/// This process's chain.
pub struct Chain {
    /// `member/start.pid`.
    instance: String,
    /// The member.
    member: String,
    /// Signs the heads.
    key: Arc<SigningKey>,
    /// `chains/<instance>/`.
    dir: PathBuf,
    /// Its settings.
    limits: ChainLimits,
    /// Records queued.
    queue: Mutex<Queue>,
    /// Every `seq` below this was written, or lost.
    done: AtomicU64,
    /// `seq` ranges lost (inclusive), most recent last; kept short (a failing disk).
    lost: Mutex<Vec<(u64, u64)>>,
    /// Whether any record was ever lost (`lost` is asked only then).
    ever_lost: AtomicBool,
    /// Someone is writing.
    writing: AtomicBool,
    /// Wakes the waiters after each write.
    wrote: tokio::sync::Notify,
    /// The files.
    files: Mutex<Files>,
    /// `lock`, locked (`flock`) for the process's life: a chain whose lock is free is an
    /// earlier process's, whose unsigned tail a later one may sign (`upkeep.rs`).
    _alive: File,
}

/// A mutex's guard, whatever a panicking holder left.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// `chains/<instance>` for an instance id (`/` is not a file name's).
pub fn chain_dir(root: &Path, instance: &str) -> PathBuf {
    root.join("chains").join(instance.replace('/', "_"))
}

/// A segment's file name.
pub fn segment_name(n: u32) -> String {
    format!("{n:06}.jsonl")
}

impl Chain {
    /// A new chain for `instance` of `member` under `root`, its first record written:
    /// the [`Entry::Start`] `start` makes.
    pub fn create(
        root: &Path,
        (instance, member): (&str, &str),
        key: Arc<SigningKey>,
        limits: ChainLimits,
        start: impl FnOnce(&SigningKey) -> String,
    ) -> Result<Chain, EvidenceError> {
        let dir = chain_dir(root, instance);
        files::directory(&dir)?;
        let alive = files::append_only(&dir.join("lock"))?;
        if !files::try_lock(&alive) {
            return Err(EvidenceError::new(
                EvidenceErrorKind::Io,
                format!("{}: another process writes this chain", dir.display()),
            ));
        }
        let heads = files::append_only(&dir.join("heads.jsonl"))?;
        let file = files::new_file(&dir.join(segment_name(1)))?;
        let now = Instant::now();
        let chain = Chain {
            instance: instance.to_string(),
            member: member.to_string(),
            dir,
            limits,
            queue: Mutex::new(Queue {
                pending: Vec::new(),
                spare: Vec::new(),
                next: 0,
                tip: [0; 32],
            }),
            done: AtomicU64::new(0),
            lost: Mutex::default(),
            ever_lost: AtomicBool::new(false),
            writing: AtomicBool::new(false),
            wrote: tokio::sync::Notify::new(),
            files: Mutex::new(Files {
                file: Some(file),
                segment: 1,
                bytes: 0,
                opened: now,
                first_seq: 0,
                tree: Frontier::default(),
                tip: [0; 32],
                heads,
                last_head: [0; 32],
                signed: 0,
                signed_at: now,
                dirty: false,
                synced_at: now,
            }),
            key: key.clone(),
            _alive: alive,
        };
        let body = start(&key);
        chain
            .queue_line(&body)
            .map_err(|_| EvidenceError::new(EvidenceErrorKind::Io, "the chain's first record"))?;
        chain.write_queued();
        if chain.lost_at(0) {
            return Err(EvidenceError::new(
                EvidenceErrorKind::Io,
                format!(
                    "{}: cannot write the chain's first record",
                    chain.dir.display()
                ),
            ));
        }
        Ok(chain)
    }

    /// Queues `entry`; its `seq`. Refused when the queue is full.
    pub fn append(&self, entry: &Entry<'_>) -> Result<u64, Unwritten> {
        let mut body = Vec::with_capacity(768);
        serde_json::to_writer(&mut body, entry).map_err(|_| Unwritten::Failed)?;
        let body = std::str::from_utf8(&body).map_err(|_| Unwritten::Failed)?;
        self.queue_line(body)
    }

    /// Queues a record whose own fields are `body` (a JSON object).
    fn queue_line(&self, body: &str) -> Result<u64, Unwritten> {
        let t = stamp(SystemTime::now());
        let mut queue = lock(&self.queue);
        if queue.pending.len() + body.len() + 160 > self.limits.max_pending {
            return Err(Unwritten::Full);
        }
        let seq = queue.next;
        let start = queue.pending.len();
        let rest = body.strip_prefix('{').unwrap_or(body);
        let tip = queue.tip;
        let line = &mut queue.pending;
        line.extend_from_slice(b"{\"seq\":");
        line.extend_from_slice(itoa::Buffer::new().format(seq).as_bytes());
        line.extend_from_slice(b",\"prev\":\"");
        super::record::hex_into(&tip, line);
        line.extend_from_slice(b"\",\"t\":\"");
        line.extend_from_slice(t.as_bytes());
        line.extend_from_slice(b"\",");
        line.extend_from_slice(rest.as_bytes());
        queue.tip = line_hash(&queue.pending[start..]);
        queue.pending.push(b'\n');
        queue.next += 1;
        Ok(seq)
    }

    /// Resolves once record `seq` is written (`Ok`) or lost (`Err`).
    pub async fn written(&self, seq: u64) -> Result<(), Unwritten> {
        // Once, before writing: the other requests ready to run queue their records
        // meanwhile, and one write takes them all (a group commit under load; alone, a
        // request costs one reschedule more).
        let mut yielded = false;
        loop {
            if let Some(done) = self.settled(seq) {
                return done;
            }
            if !yielded {
                yielded = true;
                tokio::task::yield_now().await;
                continue;
            }
            let woken = self.wrote.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            if let Some(done) = self.settled(seq) {
                return done;
            }
            if !self.writing.swap(true, Ordering::AcqRel) {
                self.write_queued();
                self.writing.store(false, Ordering::Release);
                self.wrote.notify_waiters();
                continue;
            }
            woken.await;
        }
    }

    /// Whether record `seq` is settled: `Some(Ok)` written, `Some(Err)` lost, `None` not
    /// yet.
    fn settled(&self, seq: u64) -> Option<Result<(), Unwritten>> {
        (self.done.load(Ordering::Acquire) > seq).then(|| match self.lost_at(seq) {
            true => Err(Unwritten::Failed),
            false => Ok(()),
        })
    }

    /// Was `seq` lost?
    fn lost_at(&self, seq: u64) -> bool {
        if !self.ever_lost.load(Ordering::Acquire) {
            return false;
        }
        lock(&self.lost)
            .iter()
            .any(|(from, to)| (*from..=*to).contains(&seq))
    }

    /// Writes everything queued (one `write(2)`), or loses it (see the module docs).
    fn write_queued(&self) {
        let mut files = lock(&self.files);
        let (mut batch, next, tip) = {
            let mut queue = lock(&self.queue);
            let spare = std::mem::take(&mut queue.spare);
            let batch = std::mem::replace(&mut queue.pending, spare);
            (batch, queue.next, queue.tip)
        };
        if batch.is_empty() {
            lock(&self.queue).spare = batch;
            return;
        }
        let first = self.done.load(Ordering::Acquire);
        let written = self.write_batch(&mut files, &batch);
        match written {
            Ok(()) => {
                let records = files.absorb(&batch, tip);
                crate::telemetry::metrics::record_evidence_written(records);
                self.done.store(next, Ordering::Release);
                if files.due(&self.limits) {
                    self.rotate(&mut files);
                }
            }
            Err(e) => self.lose(&mut files, first, e),
        }
        batch.clear();
        lock(&self.queue).spare = batch;
    }

    /// Writes `batch` to the open segment (opening the next one when a failure closed
    /// it); on a failure, cuts the segment back to its last whole record.
    fn write_batch(&self, files: &mut Files, batch: &[u8]) -> std::io::Result<()> {
        if files.file.is_none() {
            let next = files.segment + 1;
            let file = files::new_file(&self.dir.join(segment_name(next)))
                .map_err(|e| std::io::Error::other(e.to_string()))?;
            files.reopen(file, next, self.done.load(Ordering::Acquire));
        }
        let Some(file) = files.file.as_mut() else {
            return Err(std::io::Error::other("no segment open"));
        };
        let written = file.write_all(batch);
        if written.is_err() {
            let back = file
                .set_len(files.bytes)
                .and_then(|()| file.seek(SeekFrom::Start(files.bytes)).map(|_| ()));
            if back.is_err() {
                // The segment cannot be cut back: closed as it is (its last head signs
                // what it held whole), the next write opens another.
                files.file = None;
            }
        }
        written
    }

    /// The records from `first` on were not written: each waiter is told, and the chain
    /// goes on from its last written record with a gap record naming them.
    fn lose(&self, files: &mut Files, first: u64, error: std::io::Error) {
        let mut queue = lock(&self.queue);
        let to = queue.next.saturating_sub(1);
        queue.pending.clear();
        queue.tip = files.tip;
        let mut lost = lock(&self.lost);
        lost.push((first, to));
        self.ever_lost.store(true, Ordering::Release);
        let excess = lost.len().saturating_sub(64);
        lost.drain(..excess);
        drop(lost);
        crate::telemetry::metrics::record_evidence_failure(to + 1 - first);
        log::error!(
            "evidence: {} records (seq {first} to {to}) could not be written: {error}; their requests were {}",
            to + 1 - first,
            self.limits.lost_requests
        );
        self.done.store(to + 1, Ordering::Release);
        drop(queue);
        let gap = Entry::Gap(Gap {
            from: first,
            to,
            error: error.to_string(),
            requests: self.limits.lost_requests,
        });
        if let Ok(body) = serde_json::to_string(&gap) {
            let _ = self.queue_line(&body);
        }
    }

    /// Signs a head over the open segment as it stands (`closed`: it closes).
    fn sign_head(&self, files: &mut Files, closed: bool) {
        let head = SegmentHead {
            head: 1,
            instance: &self.instance,
            member: &self.member,
            segment: files.segment,
            first_seq: files.first_seq,
            size: files.tree.size(),
            root: hex(&files.tree.root()),
            tip: hex(&files.tip),
            prev_head: hex(&files.last_head),
            t: stamp(SystemTime::now()),
            closed,
            recovered: false,
            key_id: self.key.thumbprint(),
            key: self.key.public_jwk(),
        };
        let line = signed(&head, &self.key);
        files.last_head = line_hash(line.as_bytes());
        let written = writeln!(files.heads, "{line}");
        if let Err(e) = written {
            log::error!(
                "evidence: a head of {} could not be written: {e}",
                self.dir.display()
            );
        }
        files.signed = files.tree.size();
        files.signed_at = Instant::now();
    }

    /// Closes the open segment (its last head signed, both files synced) and opens the
    /// next.
    fn rotate(&self, files: &mut Files) {
        self.sign_head(files, true);
        files.sync(true);
        let next = files.segment + 1;
        match files::new_file(&self.dir.join(segment_name(next))) {
            Ok(file) => files.reopen(file, next, self.done.load(Ordering::Acquire)),
            Err(e) => {
                log::error!("evidence: {e}");
                files.file = None;
            }
        }
    }

    /// The periodic work: the queue written, a head signed when one is due, the files
    /// synced when due, a segment closed at its age.
    pub fn tick(&self) {
        if !self.writing.swap(true, Ordering::AcqRel) {
            self.write_queued();
            self.writing.store(false, Ordering::Release);
            self.wrote.notify_waiters();
        }
        let mut files = lock(&self.files);
        let unsigned = files.tree.size() > files.signed;
        if files.file.is_some() && files.opened.elapsed() >= self.limits.segment_age && unsigned {
            self.rotate(&mut files);
            return;
        }
        if unsigned && files.signed_at.elapsed() >= self.limits.head_every {
            self.sign_head(&mut files, false);
        }
        if files.synced_at.elapsed() >= self.limits.sync_every {
            files.sync(false);
        }
    }

    /// At a stop: everything queued written, the segment closed by a last head, synced.
    pub fn close(&self) {
        while self.writing.swap(true, Ordering::AcqRel) {
            std::thread::yield_now();
        }
        self.write_queued();
        let mut files = lock(&self.files);
        self.sign_head(&mut files, true);
        files.sync(true);
        drop(files);
        self.writing.store(false, Ordering::Release);
        self.wrote.notify_waiters();
    }

    /// Appends a signed cut of `cut` (segments retention dropped, for `reason`) to this
    /// chain's heads, in their sequence.
    pub fn cut(&self, cut: Vec<u32>, reason: &str) {
        let mut files = lock(&self.files);
        let line = signed(
            &RetentionCut {
                cut,
                instance: &self.instance,
                reason,
                prev_head: hex(&files.last_head),
                t: stamp(SystemTime::now()),
                key_id: self.key.thumbprint(),
            },
            &self.key,
        );
        files.last_head = line_hash(line.as_bytes());
        if let Err(e) = writeln!(files.heads, "{line}").and_then(|()| files.heads.sync_data()) {
            log::error!(
                "evidence: a cut of {} could not be written: {e}",
                self.dir.display()
            );
        }
    }

    /// This chain's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The number of the segment open now (retention leaves it alone).
    pub fn open_segment(&self) -> u32 {
        lock(&self.files).segment
    }
}

impl Files {
    /// Takes in a batch just written: its records' leaves, and `tip`, the SHA-256 of
    /// its last line (the queue's, computed as the line was made); how many records it
    /// held.
    fn absorb(&mut self, batch: &[u8], tip: Hash) -> u64 {
        let mut records = 0;
        let mut start = 0;
        for end in memchr::memchr_iter(b'\n', batch) {
            if end > start {
                self.tree.push(leaf_hash(&batch[start..end]));
                records += 1;
            }
            start = end + 1;
        }
        self.tip = tip;
        self.bytes += batch.len() as u64;
        self.dirty = true;
        records
    }

    /// Is the open segment due to close (`limits`' size or age)?
    fn due(&self, limits: &ChainLimits) -> bool {
        self.bytes >= limits.segment_bytes || self.opened.elapsed() >= limits.segment_age
    }

    /// Segment `n` (`file`) open from `first_seq` on.
    fn reopen(&mut self, file: File, n: u32, first_seq: u64) {
        self.file = Some(file);
        self.segment = n;
        self.bytes = 0;
        self.opened = Instant::now();
        self.first_seq = first_seq;
        self.tree = Frontier::default();
        self.signed = 0;
    }

    /// `fdatasync` of the segment (when written to since) and of the heads (`heads`).
    fn sync(&mut self, heads: bool) {
        if let (true, Some(file)) = (self.dirty, self.file.as_ref()) {
            if let Err(e) = file.sync_data() {
                log::error!("evidence: fdatasync failed: {e}");
            }
            self.dirty = false;
        }
        if heads || self.signed_at >= self.synced_at {
            let _ = self.heads.sync_data();
        }
        self.synced_at = Instant::now();
    }
}
