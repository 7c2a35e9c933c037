//! TDMRep's file, `/.well-known/tdmrep.json`, per origin: fetched only when a request
//! whose purposes a reservation binds needs it, before that request is sent; one fetch
//! per origin at a time (the entry's flight, shared with robots.txt's), in the turns of
//! every schedule the origin has and after a vanished owner's gap, as robots.txt's
//! fetch is ([`OriginStore::fetch_turns`]); recorded in the evidence before it leaves
//! and what it brought after (the file kept by its SHA-256), like robots.txt's.
//!
//! What a fetch means (the TDMRep report: an absent or unreadable file is unset):
//! * 2xx: the parsed file, fresh for `max-age` clamped to the robots.txt bounds, else
//!   `robots.ttl_seconds`; a body over [`crate::robots::tdmrep::MAX_TDMREP_BYTES`], or
//!   one that is not a JSON array of rules, holds no rule;
//! * 4xx, redirects exhausted or looping: no file, for `robots.ttl_seconds`;
//! * 429, 5xx, a network failure or a timeout (`robots.fetch_timeout_seconds`): the
//!   copy held before, if any (a reservation is not forgotten because the origin failed
//!   once), else no file, until `robots.retry_initial_seconds` later.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{OriginEntry, OriginStore};
use crate::origin::fetch::{FetchOutcome, OwnFile};
use crate::robots::tdmrep::TdmFile;

/// One origin's TDMRep file as last fetched.
#[derive(Debug)]
pub struct TdmCopy {
    /// The parsed file; `None` when the origin serves none that could be read (unset).
    file: Option<Arc<TdmFile>>,
    /// The SHA-256 of its octets (hex), as the evidence keeps it.
    sha256: Option<Arc<str>>,
    /// Until when it is used without fetching again.
    fresh_until: Instant,
    /// What its fetch came to, for people (`HTTP 200`, `HTTP 404`, `timeout`, …).
    outcome: Box<str>,
}

impl TdmCopy {
    /// The file and the SHA-256 of its octets (hex); `None` when there is none (unset).
    pub fn file(&self) -> Option<(&TdmFile, &Arc<str>)> {
        Some((self.file.as_deref()?, self.sha256.as_ref()?))
    }
}

/// Why no TDMRep file is known for a request that needs one: it is not sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TdmUnknown {
    /// Fleet mode: this member does not pace the origin now.
    NotActing,
    /// The fetch's evidence record could not be written (`on_failure: refuse`).
    Unrecorded,
}

impl OriginStore {
    /// `entry`'s TDMRep file: the copy held while fresh, else fetched (once for every
    /// request waiting), in its turns.
    pub async fn tdm_file(
        self: &Arc<Self>,
        entry: &Arc<OriginEntry>,
    ) -> Result<Arc<TdmCopy>, TdmUnknown> {
        let fresh = || {
            entry
                .tdm
                .load_full()
                .filter(|c| c.fresh_until > Instant::now())
        };
        if let Some(copy) = fresh() {
            return Ok(copy);
        }
        let _flight = self.flights.lock(entry).await;
        if let Some(copy) = fresh() {
            return Ok(copy);
        }
        // Its own task: a client that leaves does not cut the fetch (or its record) off.
        let (store, entry) = (self.clone(), entry.clone());
        tokio::spawn(async move { store.fetch_tdm(&entry).await })
            .await
            .unwrap_or(Err(TdmUnknown::NotActing))
    }

    /// Fetches `entry`'s TDMRep file in its turns, recorded, and keeps what it brought.
    async fn fetch_tdm(&self, entry: &Arc<OriginEntry>) -> Result<Arc<TdmCopy>, TdmUnknown> {
        let origin = entry.origin().clone();
        let turns = self
            .fetch_turns(entry, &origin)
            .await
            .ok_or(TdmUnknown::NotActing)?;
        let recorded = match self.evidence.get() {
            Some(evidence) => super::evidence::before_fetch(evidence, &origin, OwnFile::TdmRep)
                .await
                .map_err(|()| TdmUnknown::Unrecorded)?,
            None => None,
        };
        let started = Instant::now();
        let (outcome, facts) = self.fetcher.fetch_file(&origin, OwnFile::TdmRep).await;
        drop(turns);
        let said = super::evidence::FetchSaid::of(&outcome, &facts, OwnFile::TdmRep);
        let body = match &outcome {
            FetchOutcome::Body { body, .. } => Some(body.clone()),
            _ => None,
        };
        crate::telemetry::metrics::record_tdmrep_fetch(match &outcome {
            FetchOutcome::Body { body, .. } if body.len() > OwnFile::TdmRep.max_bytes() => {
                crate::telemetry::metrics::RobotsFetch::TooLarge
            }
            outcome => outcome.class(),
        });
        let previous = entry.tdm.load_full();
        let copy = Arc::new(self.next_tdm(previous.as_deref(), outcome, Instant::now()));
        if let (Some(evidence), Some(seq)) = (self.evidence.get(), recorded) {
            super::evidence::tdm_fetched(evidence, seq, &origin, &said, body.as_deref());
        }
        log::debug!(
            "tdmrep.json {} fetched in {:?}: {}",
            OwnFile::TdmRep.url(&origin),
            started.elapsed(),
            copy.outcome
        );
        entry.tdm.store(Some(copy.clone()));
        Ok(copy)
    }

    /// The copy a fetch's `outcome` makes, `previous` being held (pure).
    fn next_tdm(&self, previous: Option<&TdmCopy>, outcome: FetchOutcome, now: Instant) -> TdmCopy {
        let c = &self.config;
        match outcome {
            FetchOutcome::Body {
                status,
                body,
                max_age,
                ..
            } => {
                let ttl = max_age
                    .map(|age| {
                        age.clamp(c.min_ttl_seconds.duration(), c.max_ttl_seconds.duration())
                    })
                    .unwrap_or(c.ttl_seconds.duration());
                let too_large = body.len() > OwnFile::TdmRep.max_bytes();
                TdmCopy {
                    file: Some(Arc::new(TdmFile::parse(&body))),
                    sha256: Some(crate::evidence::record::hex(&sha256(&body)).into()),
                    fresh_until: now + ttl,
                    outcome: match too_large {
                        true => format!("HTTP {status}, too large: no rule read").into(),
                        false => format!("HTTP {status}").into(),
                    },
                }
            }
            FetchOutcome::NoRobots { why, .. } => TdmCopy {
                file: None,
                sha256: None,
                fresh_until: now + c.ttl_seconds.duration(),
                outcome: why.into(),
            },
            FetchOutcome::Unreachable { why, .. } => {
                let retry = now
                    + c.retry_initial_seconds
                        .duration()
                        .max(Duration::from_secs(1));
                match previous {
                    Some(held) if held.file.is_some() => TdmCopy {
                        file: held.file.clone(),
                        sha256: held.sha256.clone(),
                        fresh_until: retry,
                        outcome: format!("{why}; the copy held before kept").into(),
                    },
                    _ => TdmCopy {
                        file: None,
                        sha256: None,
                        fresh_until: retry,
                        outcome: why.into(),
                    },
                }
            }
        }
    }
}

/// SHA-256 of `octets`.
fn sha256(octets: &[u8]) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, octets);
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    out
}
