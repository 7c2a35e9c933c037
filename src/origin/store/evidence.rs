//! What robots.txt fetches leave in the evidence (`evidence.dir` set): a `fetch` record
//! before the request leaves (no fetch goes unrecorded: one whose record cannot be
//! written is not made, with `on_failure: refuse`), then a `fetched` record with what
//! it brought — the file kept by its SHA-256, or its absence and why — and the RFC 9309
//! case the store put it in; a copy a fleet member adopts from another's fetch, an
//! `adopted` record.

use std::sync::Arc;

use tokio::time::Instant;

use crate::evidence::{Entry, Evidence, Fetch, Fetched, Recorded};
use crate::origin::fetch::{FetchFacts, FetchOutcome, OwnFile};
use crate::origin::snapshot::{Policy, Snapshot};
use crate::policy::target::Origin;

/// Records a fetch of `origin`'s `file` about to leave: `Ok(Some(seq))`, written;
/// `Ok(None)`, unrecorded (`on_failure: continue`); `Err`, not written: nothing may be
/// sent.
pub(super) async fn before_fetch(
    evidence: &Evidence,
    origin: &Origin,
    file: OwnFile,
) -> Result<Option<u64>, ()> {
    let (name, url) = (origin.to_string(), file.url(origin));
    let entry = Entry::Fetch(Fetch {
        origin: &name,
        url: &url,
    });
    match evidence.record(&entry).await {
        Ok(Recorded::At(seq)) => Ok(Some(seq)),
        Ok(Recorded::Unrecorded) => Ok(None),
        Err(_) => Err(()),
    }
}

/// The snapshot a robots.txt fetch whose record could not be written answers with
/// (nothing was fetched).
pub(super) fn unrecorded_fetch() -> Arc<Snapshot> {
    Arc::new(Snapshot {
        policy: Policy::DisallowAll {
            why: "the robots.txt fetch's evidence record could not be written; nothing was fetched"
                .into(),
        },
        fresh_until: Instant::now(),
        fetched_at: None,
        last_outcome: "evidence-unwritable".into(),
        failing: None,
    })
}

/// What a fetch said, taken before its outcome is consumed.
pub(super) struct FetchSaid {
    /// The final status.
    status: Option<u16>,
    /// What happened.
    outcome: String,
    /// Octets of the body.
    bytes: Option<usize>,
    /// The answers' facts.
    facts: FetchFacts,
}

impl FetchSaid {
    /// What `outcome` and `facts` say.
    pub(super) fn of(outcome: &FetchOutcome, facts: &FetchFacts, file: OwnFile) -> FetchSaid {
        let (status, outcome_said, bytes) = match outcome {
            FetchOutcome::Body { status, body, .. } => {
                let said = match body.len() > file.max_bytes() {
                    true => format!(
                        "HTTP {status}, too large: more than {} KiB",
                        file.max_bytes() / 1024
                    ),
                    false => format!("HTTP {status}"),
                };
                (Some(*status), said, Some(body.len()))
            }
            FetchOutcome::NoRobots { status, why } => (*status, why.clone(), None),
            FetchOutcome::Unreachable { status, why, .. } => (*status, why.clone(), None),
        };
        FetchSaid {
            status,
            outcome: outcome_said,
            bytes,
            facts: facts.clone(),
        }
    }
}

/// Records what fetch `seq` of `origin`'s robots.txt brought, the store having made
/// `snapshot` of it; the file is kept first.
pub(super) fn fetched(
    evidence: &Evidence,
    seq: u64,
    origin: &Origin,
    said: &FetchSaid,
    snapshot: &Snapshot,
) {
    let sha256 = keep(evidence, snapshot);
    let case = snapshot.case(Instant::now());
    note_fetched(
        evidence,
        (seq, OwnFile::RobotsTxt),
        origin,
        said,
        (sha256, case),
    );
}

/// Records what fetch `seq` of `origin`'s TDMRep file brought: its octets (`body`, kept
/// by their SHA-256) or their absence, and what they came to.
pub(super) fn tdm_fetched(
    evidence: &Evidence,
    seq: u64,
    origin: &Origin,
    said: &FetchSaid,
    body: Option<&[u8]>,
) {
    let sha256 = body.and_then(|octets| match evidence.keep_policy(octets) {
        Ok(sha) => Some(sha),
        Err(e) => {
            log::error!("evidence: a tdmrep.json could not be kept: {e}");
            None
        }
    });
    let case = match (&sha256, said.status) {
        (Some(_), _) => "fresh",
        (None, Some(400..=499)) => "unavailable",
        (None, _) => "unreachable",
    };
    note_fetched(
        evidence,
        (seq, OwnFile::TdmRep),
        origin,
        said,
        (sha256, case),
    );
}

/// The `fetched` record of fetch `seq` of `origin`'s `file`: what `said`, the file's
/// SHA-256 when kept, and the case it is in.
fn note_fetched(
    evidence: &Evidence,
    (seq, file): (u64, OwnFile),
    origin: &Origin,
    said: &FetchSaid,
    (sha256, case): (Option<String>, &'static str),
) {
    let (name, url) = (origin.to_string(), file.url(origin));
    evidence.note(&Entry::Fetched(Fetched {
        fetch: seq,
        origin: &name,
        url: &url,
        redirects: &said.facts.redirects,
        status: said.status,
        cache_control: said.facts.cache_control.as_deref(),
        etag: said.facts.etag.as_deref(),
        last_modified: said.facts.last_modified.as_deref(),
        sha256,
        bytes: said.bytes,
        case,
        outcome: &said.outcome,
    }));
}

/// Records that this member took another's copy of `origin`'s robots.txt.
pub(super) fn adopted(evidence: &Evidence, origin: &Origin, version: u64, snapshot: &Snapshot) {
    let sha256 = keep(evidence, snapshot);
    let name = origin.to_string();
    evidence.note(&Entry::Adopted(crate::evidence::record::Adopted {
        origin: &name,
        sha256,
        version,
        case: snapshot.case(Instant::now()),
    }));
}

/// Keeps the file `snapshot` holds, if any: its SHA-256 (none when it cannot be kept,
/// logged: a decision naming it would name a file the bundle lacks).
fn keep(evidence: &Evidence, snapshot: &Snapshot) -> Option<String> {
    let Policy::Rules(file) = &snapshot.policy else {
        return None;
    };
    match evidence.keep_policy(&file.body) {
        Ok(sha) => Some(sha),
        Err(e) => {
            log::error!("evidence: a robots.txt could not be kept: {e}");
            None
        }
    }
}
