//! `evidence`: the tamper-evident record of every decision (see `evidence`).

use std::path::PathBuf;

use serde::Deserialize;

use super::{ConfigError, Seconds, Timeout};

/// Evidence of compliance: with `dir` set, every decision robotsgate makes (and every
/// robots.txt fetch) is recorded before the request it decides is sent, in append-only
/// segments chained by hash, under heads signed with the operator's Ed25519 key; every
/// robots.txt acted on is kept once by its SHA-256. Unset: nothing is recorded.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EvidenceConfig {
    /// Where the evidence is kept: one chain of segments per process start under
    /// `chains/`, the robots.txt files acted on under `policies/`. Files are readable by
    /// the service user and its group only. Unset: evidence is off.
    pub dir: Option<PathBuf>,
    /// The Ed25519 key (a JWK, as `robotsgate keys generate` writes it; a Web Bot Auth
    /// key may serve) the heads are signed with. Unset: `<dir>/evidence-key.jwk`, made
    /// at the first start.
    pub key_file: Option<PathBuf>,
    /// The written records reach the disk (`fdatasync`) at least this often: a power
    /// loss can lose that much; a crash of the process loses nothing written.
    pub sync_interval_seconds: Timeout,
    /// A segment open this long gets a signed head, so a record is under a signature
    /// within this long of being written.
    pub head_interval_seconds: Timeout,
    /// A segment is closed (its last head written) once it holds this many bytes.
    pub segment_bytes: u64,
    /// ... or once it has been open this long.
    pub segment_seconds: Timeout,
    /// Closed segments older than this are dropped whole (their heads kept, and the cut
    /// signed); 0: kept by age forever.
    pub retention_seconds: Seconds,
    /// Closed segments are dropped, oldest first, while the chains hold more than this;
    /// 0: no bound by size.
    pub retention_bytes: u64,
    /// What a request gets when its record cannot be written (a full or unwritable
    /// disk, a disk so slow that `max_pending_bytes` fill).
    pub on_failure: EvidenceFailure,
    /// Records waiting to be written, at most: past it, a request is treated as one
    /// whose record could not be written. Bounds memory while a disk stalls.
    pub max_pending_bytes: usize,
    /// How long a request waits for its record to be written: past it (a frozen
    /// filesystem, a hung network disk), the request is treated as one whose record
    /// could not be written (`on_failure`), and its client answered. The one request
    /// whose process is in the write itself waits for the disk.
    pub max_wait_seconds: Timeout,
    /// Each forwarded request's outcome record carries the SHA-256 of the body the
    /// crawler received (costs one pass of SHA-256 over every body; docs/evidence.md
    /// gives the measured cost).
    pub body_digest: bool,
    /// How a client's address is recorded.
    pub client_addresses: ClientAddresses,
    /// The key (32 octets or more, any format) client addresses are made pseudonyms
    /// with; unset: `<dir>/pseudonym.key`, made at the first start. Keep it to tell two
    /// records of one client apart from two clients; lose it and nobody can.
    pub pseudonym_key_file: Option<PathBuf>,
}

/// `evidence.on_failure`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EvidenceFailure {
    /// The request is refused, `503` with `Retry-After`, and nothing is sent: no request
    /// reaches an origin unrecorded.
    #[default]
    Refuse,
    /// The request goes on unrecorded; counted in
    /// `robotsgate_evidence_failures_total` and logged (an alert fires on it).
    Continue,
}

/// `evidence.client_addresses`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClientAddresses {
    /// A keyed pseudonym (HMAC-SHA-256 of the address, 16 octets, hex): one client's
    /// records are told together, its address is not kept.
    #[default]
    Pseudonym,
    /// The address itself.
    Keep,
    /// Nothing.
    Omit,
}

impl Default for EvidenceConfig {
    fn default() -> Self {
        EvidenceConfig {
            dir: None,
            key_file: None,
            sync_interval_seconds: Timeout::new(1.0),
            head_interval_seconds: Timeout::new(5.0),
            segment_bytes: 64 * 1024 * 1024,
            segment_seconds: Timeout::new(3600.0),
            retention_seconds: Seconds::new(0.0),
            retention_bytes: 0,
            on_failure: EvidenceFailure::Refuse,
            max_pending_bytes: 8 * 1024 * 1024,
            max_wait_seconds: Timeout::new(5.0),
            body_digest: false,
            client_addresses: ClientAddresses::Pseudonym,
            pseudonym_key_file: None,
        }
    }
}

impl EvidenceConfig {
    /// Checks across its keys.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.segment_bytes < 4096 {
            return Err(ConfigError::invalid(
                "key `robotsgate.evidence.segment_bytes`: at least 4096",
            ));
        }
        if self.max_pending_bytes < 65_536 {
            return Err(ConfigError::invalid(
                "key `robotsgate.evidence.max_pending_bytes`: at least 65536 (a record is up to a few KiB)",
            ));
        }
        Ok(())
    }

    /// Is evidence on?
    pub fn on(&self) -> bool {
        self.dir.is_some()
    }
}
