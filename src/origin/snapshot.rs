//! An origin's robots.txt state at one moment ([`Snapshot`]): what its file means now
//! ([`Policy`]), until when that holds, and, while fetches fail, since when and when to
//! try again ([`Failing`]). Immutable: the store swaps in a new one on every change, so
//! a reader holds a consistent view for as long as it needs (SPEC §2).

use std::sync::Arc;

use tokio::time::Instant;

use crate::origin::files::RobotsFile;
use crate::robots::RobotsTxt;

/// What an origin's robots.txt currently means.
#[derive(Debug)]
pub enum Policy {
    /// A parsed robots.txt, shared with every origin that sent the same octets.
    Rules(Arc<RobotsFile>),
    /// No robots.txt (4xx, redirects exhausted, or unreachable for 30 days): no limits.
    AllowAll {
        /// Why there is none, for operators.
        why: Box<str>,
    },
    /// Unreachable with no earlier copy: nothing may be fetched for now.
    DisallowAll {
        /// Why it cannot be read, for operators.
        why: Box<str>,
    },
}

/// An origin's state at one moment. Immutable; replaced whole on every change.
#[derive(Debug)]
pub struct Snapshot {
    /// What the robots.txt means now.
    pub policy: Policy,
    /// Usable without refetching until then.
    pub fresh_until: Instant,
    /// When the policy was last confirmed by the origin (successful fetch).
    pub fetched_at: Option<Instant>,
    /// The last fetch's outcome, for operators (logs, 503 bodies).
    pub last_outcome: Box<str>,
    /// While fetches fail (boxed: most origins' fetches do not, and every held origin
    /// has a snapshot); read it with [`Snapshot::retry_at`] and its siblings.
    pub failing: Option<Box<Failing>>,
}

/// The state of an origin whose robots.txt fetches fail.
#[derive(Debug, Default)]
pub struct Failing {
    /// Since when.
    unreachable_since: Option<Instant>,
    /// When to try again.
    retry_at: Option<Instant>,
    /// Consecutive failures, for the backoff.
    failures: u32,
    /// Why the last fetch failed, short and header-safe (`http-500`, `timeout`,
    /// `tls-handshake-failed: …`).
    cause: Option<String>,
}

impl Failing {
    /// `None` when nothing fails.
    pub fn new(
        unreachable_since: Option<Instant>,
        retry_at: Option<Instant>,
        failures: u32,
        cause: Option<String>,
    ) -> Option<Box<Failing>> {
        let failing = Failing {
            unreachable_since,
            retry_at,
            failures,
            cause,
        };
        let nothing = failing.unreachable_since.is_none()
            && failing.retry_at.is_none()
            && failing.failures == 0
            && failing.cause.is_none();
        (!nothing).then(|| Box::new(failing))
    }
}

impl Snapshot {
    /// The largest Crawl-delay the file held sets for any group, in seconds (none for an
    /// allow-all or disallow-all policy).
    pub fn largest_crawl_delay(&self) -> Option<f64> {
        match &self.policy {
            Policy::Rules(file) => file.robots.largest_crawl_delay(),
            Policy::AllowAll { .. } | Policy::DisallowAll { .. } => None,
        }
    }

    /// The RFC 9309 case the copy is in now, as the evidence names it: `fresh` (a file,
    /// within its lifetime), `expired` (a file past it, a refetch due), `stale-if-error`
    /// (a file kept while fetches fail), `unavailable` (4xx, redirects exhausted: allow
    /// all), `unreachable` (5xx or network, no copy: disallow all), `unreachable-long`
    /// (unreachable past `unreachable_allow_after`: allow all), `not-owner` (a fleet
    /// member that does not act for the origin now: disallow, nothing fetched).
    pub fn case(&self, now: Instant) -> &'static str {
        match &self.policy {
            Policy::Rules(_) if self.is_stale_copy() => "stale-if-error",
            Policy::Rules(_) if now >= self.fresh_until => "expired",
            Policy::Rules(_) => "fresh",
            Policy::AllowAll { why } if why.starts_with("robots.txt unreachable for over") => {
                "unreachable-long"
            }
            Policy::AllowAll { .. } if self.is_stale_copy() => "stale-if-error",
            Policy::AllowAll { .. } => "unavailable",
            Policy::DisallowAll { .. } if &*self.last_outcome == "not-owner" => "not-owner",
            Policy::DisallowAll { .. } => "unreachable",
        }
    }

    /// The SHA-256 of the file the policy holds, in hex, if it holds one.
    pub fn sha256(&self) -> Option<&str> {
        match &self.policy {
            Policy::Rules(file) => Some(&file.sha256_hex),
            _ => None,
        }
    }

    /// Set while fetches fail: since when.
    pub fn unreachable_since(&self) -> Option<Instant> {
        self.failing.as_ref()?.unreachable_since
    }

    /// When to try a failing fetch again.
    pub fn retry_at(&self) -> Option<Instant> {
        self.failing.as_ref()?.retry_at
    }

    /// Consecutive failures, for the backoff.
    pub fn failures(&self) -> u32 {
        self.failing.as_ref().map_or(0, |f| f.failures)
    }

    /// Why the last fetch failed, short and header-safe (`http-500`, `timeout`,
    /// `tls-handshake-failed: …`); `None` after a fetch that succeeded.
    pub fn cause(&self) -> Option<&str> {
        self.failing.as_ref()?.cause.as_deref()
    }

    /// Is the policy from an earlier successful fetch, kept while refreshes fail?
    pub fn is_stale_copy(&self) -> bool {
        self.unreachable_since().is_some() && !matches!(self.policy, Policy::DisallowAll { .. })
    }

    /// The rules a policy enforces, when they are known: a file's, or none (a 4xx: allow
    /// all). `None` while robots.txt cannot be read.
    pub(crate) fn known_rules(&self) -> Option<Option<&RobotsTxt>> {
        match &self.policy {
            Policy::Rules(file) => Some(Some(&file.robots)),
            Policy::AllowAll { .. } if self.fetched_at.is_some() => Some(None),
            _ => None,
        }
    }
}
