//! Evidence of compliance: every decision robotsgate makes, tied to the exact robots.txt
//! and rule that made it, kept where nobody can change or remove a record unseen, and
//! exported and checked offline.
//!
//! **What is kept** (under `evidence.dir`):
//! * `policies/<sha256>`: every robots.txt robotsgate acted on, once, by the SHA-256 of
//!   its octets (`files.rs`);
//! * `chains/<instance>/`: this process's records (`record.rs`: a chain's start, each
//!   robots.txt fetch before it leaves and what it brought, each request's decision
//!   before the request leaves, each exchange's outcome after it), in numbered
//!   segments, each record naming the SHA-256 of the one before it (`chain.rs`), and
//!   `heads.jsonl`: heads signed with the operator's Ed25519 key over each segment's
//!   Merkle root (`head.rs`, `merkle.rs`), and the cuts retention makes.
//!
//! **The promise.** No request reaches an origin before its record is written to the
//! file (`write(2)` returned: it survives a crash of the process, and reaches the disk
//! within `evidence.sync_interval_seconds`): [`Evidence::record`] returns once it is,
//! and a record that cannot be written refuses its request (`on_failure: refuse`) or
//! lets it go unrecorded, counted (`continue`). One chain per process: the member and
//! the process are in its start record, and a fleet's chains merge by time on export.
//!
//! **Reading.** `read.rs` reads a directory's chains back; `bundle.rs` writes a
//! self-contained export (JSON lines, or WARC 1.1: `warc.rs`) with every policy its
//! records name, their heads and each record's inclusion proof; `verify.rs` checks a
//! bundle (signatures, the heads' chain, every proof, the records' links, segments
//! missing without a signed cut) and judges every decision again with this build's
//! matcher. `upkeep.rs` signs a crashed chain's unsigned tail at the next start and
//! keeps retention. `history.rs` keeps, for the admin API, each origin's robots.txt
//! versions with the decisions made under each.
//!
//! Costs: see `chain.rs` per record; one SHA-256 per robots.txt fetched; a thread of
//! its own for syncing, heads and retention (woken five times a second).

pub mod bundle;
mod chain;
pub mod files;
pub mod head;
mod history;
pub mod merkle;
pub mod read;
pub mod record;
#[cfg(test)]
mod tests;
mod upkeep;
pub mod verify;
mod warc;

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::config::{ClientAddresses, EvidenceConfig, EvidenceFailure};
use crate::error::Failure;
use crate::identity::key::SigningKey;
use chain::{Chain, ChainLimits};
pub use history::OriginHistory;
pub use record::{Concluded, Decided, Entry, Fetch, Fetched, PolicyRef, RuleRef, TdmRuleRef};

/// What kind of problem an [`EvidenceError`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvidenceErrorKind {
    /// A file or directory cannot be read or written.
    Io,
    /// The signing or pseudonym key cannot be used.
    Key,
    /// A bundle or record is not what it should be.
    Format,
}

/// Why evidence cannot be kept, read or written.
pub type EvidenceError = Failure<EvidenceErrorKind>;

/// Why a record was not written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unwritten {
    /// Records waiting to be written fill `max_pending_bytes` (a disk too slow).
    Full,
    /// The write failed (a full or unwritable disk).
    Failed,
    /// The write did not end within `evidence.max_wait_seconds` (a stalled disk).
    Stalled,
}

/// What a request may do, its record being written or not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recorded {
    /// Its record is written: it is record `seq` of this process's chain.
    At(u64),
    /// Its record could not be written and `on_failure: continue`: it goes on.
    Unrecorded,
}

/// The robots.txt matcher's version: what a chain's verdicts were decided by. A change
/// of what any robots.txt means for any path (a fix, a new reading) takes a new one.
pub const MATCHER: &str = concat!("robotsgate-robots/", env!("CARGO_PKG_VERSION"));

/// This process's evidence: its chain, the policies kept, how clients are named.
pub struct Evidence {
    /// The chain.
    chain: Chain,
    /// `policies/`.
    policies: files::Policies,
    /// The directory.
    dir: PathBuf,
    /// The pseudonym key, when clients are recorded as pseudonyms.
    pseudonyms: Option<ring::hmac::Key>,
    /// How clients are recorded.
    clients: ClientAddresses,
    /// Pseudonyms already made, by address (a fleet's crawlers are few: at most
    /// [`PSEUDONYMS`] kept, all forgotten when full).
    named: std::sync::Mutex<std::collections::HashMap<IpAddr, Arc<str>>>,
    /// What a request gets when its record cannot be written.
    on_failure: EvidenceFailure,
    /// Outcomes carry the body's digest.
    body_digest: bool,
    /// How long a request waits for its record (`evidence.max_wait_seconds`).
    max_wait: Duration,
    /// Each origin's versions and verdicts, for the admin API.
    history: history::Histories,
    /// Retention's settings.
    retention: upkeep::Retention,
}

impl Evidence {
    /// Opens `config.dir` for the process `instance` of `member`: the key and the
    /// pseudonym key read (or made), an earlier chain's unsigned tail signed, this
    /// process's chain started, its upkeep thread running. `None` when evidence is off.
    pub fn open(
        config: &EvidenceConfig,
        instance: &str,
        member: &str,
    ) -> Result<Option<Arc<Evidence>>, EvidenceError> {
        let Some(dir) = &config.dir else {
            return Ok(None);
        };
        files::directory(dir)?;
        let key = Arc::new(signing_key(dir, config.key_file.as_deref())?);
        let pseudonyms = match config.client_addresses {
            ClientAddresses::Pseudonym => {
                let path = config
                    .pseudonym_key_file
                    .clone()
                    .unwrap_or_else(|| dir.join("pseudonym.key"));
                let octets = files::pseudonym_key(&path)?;
                Some(ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &octets))
            }
            ClientAddresses::Keep | ClientAddresses::Omit => None,
        };
        upkeep::sign_unsigned_tails(dir, instance, &key);
        let limits = ChainLimits {
            segment_bytes: config.segment_bytes,
            segment_age: config.segment_seconds.duration(),
            head_every: config.head_interval_seconds.duration(),
            sync_every: config.sync_interval_seconds.duration(),
            max_pending: config.max_pending_bytes,
            lost_requests: match config.on_failure {
                EvidenceFailure::Refuse => "refused",
                EvidenceFailure::Continue => "sent",
            },
        };
        let start = |key: &SigningKey| {
            let entry = Entry::Start(record::Start {
                schema: record::SCHEMA,
                instance,
                member,
                build: env!("CARGO_PKG_VERSION"),
                matcher: MATCHER,
                key: key.public_jwk(),
                key_id: key.thumbprint(),
            });
            serde_json::to_string(&entry).unwrap_or_default()
        };
        let chain = Chain::create(dir, (instance, member), key.clone(), limits, start)?;
        let evidence = Arc::new(Evidence {
            chain,
            policies: files::Policies::open(dir)?,
            dir: dir.clone(),
            pseudonyms,
            clients: config.client_addresses,
            named: std::sync::Mutex::default(),
            on_failure: config.on_failure,
            body_digest: config.body_digest,
            max_wait: config.max_wait_seconds.duration(),
            history: history::Histories::default(),
            retention: upkeep::Retention {
                age: config.retention_seconds.duration(),
                bytes: config.retention_bytes,
                key,
            },
        });
        log::info!(
            "evidence: recording every decision under {} (chain {})",
            dir.display(),
            evidence.chain.dir().display()
        );
        Ok(Some(evidence))
    }

    /// Starts the upkeep thread (heads, syncs, retention), once the process is what it
    /// will be (a daemon forks first).
    pub fn run_in_background(self: &Arc<Self>) {
        upkeep::start(self);
    }

    /// How `client` is written in a record (`evidence.client_addresses`).
    pub fn client(&self, client: Option<IpAddr>) -> Option<String> {
        let ip = client?;
        match (self.clients, &self.pseudonyms) {
            (ClientAddresses::Keep, _) => Some(ip.to_string()),
            (ClientAddresses::Pseudonym, Some(key)) => {
                let mut named = self.named.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(name) = named.get(&ip) {
                    return Some(name.to_string());
                }
                let tag = ring::hmac::sign(key, ip.to_canonical().to_string().as_bytes());
                let name = format!("p:{}", record::hex(&tag.as_ref()[..16]));
                if named.len() >= PSEUDONYMS {
                    named.clear();
                }
                named.insert(ip, name.as_str().into());
                Some(name)
            }
            _ => None,
        }
    }

    /// Writes `entry` before what it records may happen: `Ok` once it is written (or,
    /// with `on_failure: continue`, once it is known it cannot be); `Err` when the
    /// request must not go (`on_failure: refuse`).
    /// A record not written within `evidence.max_wait_seconds` counts as unwritten; it is
    /// still written once the disk answers, followed (with `refuse`) by an `outcome`
    /// saying that what it recorded was not sent.
    pub async fn record(&self, entry: &Entry<'_>) -> Result<Recorded, Unwritten> {
        let written = match self.chain.append(entry) {
            Ok(seq) => match tokio::time::timeout(self.max_wait, self.chain.written(seq)).await {
                Ok(written) => written.map(|()| seq),
                Err(_) => {
                    crate::telemetry::metrics::record_evidence_failure(1);
                    if self.on_failure == EvidenceFailure::Refuse {
                        // Written with the record once the disk answers: what it
                        // recorded did not happen.
                        self.note(&Entry::Outcome(Concluded {
                            decision: seq,
                            status: None,
                            ended: "not-sent: its record was not written within evidence.max_wait_seconds",
                            payment: None,
                            answered: None,
                            body_sha256: None,
                            body_bytes: None,
                        }));
                    }
                    Err(Unwritten::Stalled)
                }
            },
            Err(e) => {
                crate::telemetry::metrics::record_evidence_failure(1);
                Err(e)
            }
        };
        match (written, self.on_failure) {
            (Ok(seq), _) => Ok(Recorded::At(seq)),
            (Err(_), EvidenceFailure::Continue) => Ok(Recorded::Unrecorded),
            (Err(e), EvidenceFailure::Refuse) => Err(e),
        }
    }

    /// Queues `entry`, whose event does not wait for it (a refusal, an outcome): written
    /// with the next write. `None` when it cannot be.
    pub fn note(&self, entry: &Entry<'_>) -> Option<u64> {
        match self.chain.append(entry) {
            Ok(seq) => Some(seq),
            Err(_) => {
                crate::telemetry::metrics::record_evidence_failure(1);
                None
            }
        }
    }

    /// Keeps a robots.txt's octets under `policies/`; their SHA-256, hex.
    pub fn keep_policy(&self, octets: &[u8]) -> Result<String, EvidenceError> {
        self.policies.keep(octets)
    }

    /// Whether outcomes carry the body's digest.
    pub fn digests_bodies(&self) -> bool {
        self.body_digest
    }

    /// Counts a decision on `origin` under the policy `policy` (its SHA-256, or its
    /// case when it has none) as `verdict`, for the admin API.
    pub fn count(&self, origin: &str, policy: &str, verdict: &str) {
        self.history.count(origin, policy, verdict);
    }

    /// `origin`'s robots.txt versions as this process decided on them.
    pub fn history(&self, origin: &str) -> Option<OriginHistory> {
        self.history.of(origin)
    }

    /// The evidence directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// At a stop: everything written, the segment closed under a last head.
    pub fn close(&self) {
        self.chain.close();
    }
}

/// This process's instance id and member when it is alone (a fleet member's are its
/// fleet's): the host name, and `host/start.pid` as a fleet names its instances.
pub fn lone_instance() -> (String, String) {
    let member = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| {
            (1..=64).contains(&h.len())
                && h.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        })
        .unwrap_or_else(|| "robotsgate".into());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let instance = format!(
        "{member}/{:x}.{}",
        nanos & 0xffff_ffff_ffff,
        std::process::id()
    );
    (instance, member)
}

/// The signing key: `key_file`, or `<dir>/evidence-key.jwk`, made when missing.
fn signing_key(dir: &Path, key_file: Option<&Path>) -> Result<SigningKey, EvidenceError> {
    let path = key_file.map_or_else(|| dir.join("evidence-key.jwk"), Path::to_path_buf);
    if key_file.is_none() && !path.exists() {
        // Another process sharing the directory may make it first: then its key is read.
        match crate::identity::key::generate_file(&path) {
            Ok(_) => log::info!("evidence: made a signing key, {}", path.display()),
            Err(_) if path.exists() => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => {
                return Err(EvidenceError::new(EvidenceErrorKind::Key, e.to_string()).because(e))
            }
        }
    }
    SigningKey::load(&path, "evidence")
        .map_err(|e| EvidenceError::new(EvidenceErrorKind::Key, e.to_string()).because(e))
}

/// Client pseudonyms kept made, at most.
const PSEUDONYMS: usize = 4096;

/// How often the upkeep thread wakes.
const UPKEEP_EVERY: Duration = Duration::from_millis(200);
