//! A decision as data: what to do with a request (forward it, in its turn, or answer
//! it), and why an allowed one may go.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::fleet::Owner;
use crate::origin::store::OriginEntry;
use crate::pacing::{DelayRule, PaceRequest, Place};
use crate::policy::usage::UsageVerdict;

use super::Refusal;

/// Why a request may go through; small and `Copy`, formatted only when logged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Allowed {
    /// An `Allow` rule on this line was the longest match.
    Rule {
        /// The rule's line in robots.txt.
        line: u32,
    },
    /// No rule matched the path.
    NoMatchingRule,
    /// No group for the crawler and no `*` group.
    NoGroup,
    /// The origin has no robots.txt (4xx, redirects exhausted, or unreachable for long).
    NoRobotsTxt,
    /// The path is `/robots.txt` itself.
    RobotsTxtItself,
}

impl std::fmt::Display for Allowed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Allowed::Rule { line } => write!(f, "allow rule at line {line}"),
            Allowed::NoMatchingRule => f.write_str("no matching rule"),
            Allowed::NoGroup => f.write_str("no group for this agent"),
            Allowed::NoRobotsTxt => f.write_str("no robots.txt"),
            Allowed::RobotsTxtItself => f.write_str("/robots.txt is always allowed"),
        }
    }
}

/// Where an allowed request queues: its origin's entry, its robots.txt group's schedule
/// there, and the delay in force.
#[derive(Clone)]
pub struct Pace {
    /// The origin's entry.
    pub(super) entry: Arc<OriginEntry>,
    /// With `pacing.key: address`, the entry of the address the request goes to.
    pub(super) address: Option<Arc<OriginEntry>>,
    /// The robots.txt group (its first agent name, lower-cased; empty: none or `*`).
    pub group: String,
    /// The delay between one request's end and the next one's start.
    pub delay: Duration,
    /// Which rule set the delay (`crawl-delay`, `floor`, `override`, `none`).
    pub rule: DelayRule,
    /// Requests in flight to the origin at once (0: no limit).
    pub max_in_flight: usize,
    /// Report mode: record the wait instead of waiting.
    pub report: bool,
    /// When the origin's robots.txt was fetched (that fetch is the schedule's last).
    pub(super) robots_fetched_at: Option<Instant>,
}

impl Pace {
    /// The origin's schedules.
    pub(super) fn place(&self) -> Place<'_> {
        self.entry.place()
    }

    /// The address's, with `pacing.key: address`.
    pub(super) fn address_place(&self) -> Option<Place<'_>> {
        self.address.as_deref().map(OriginEntry::place)
    }

    /// What the pacer is asked for.
    pub(super) fn request(&self) -> PaceRequest<'_> {
        PaceRequest {
            place: self.place(),
            address: self.address_place(),
            group: &self.group,
            delay: self.delay,
            rule: self.rule,
            max_in_flight: self.max_in_flight,
            robots_fetched_at: self.robots_fetched_at,
        }
    }

    /// The group key of the origin's upstream connection pool.
    pub fn pool_key(&self) -> u64 {
        self.entry.pool_key()
    }
}

impl std::fmt::Debug for Pace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pace")
            .field("origin", self.entry.origin())
            .field("group", &self.group)
            .field("delay", &self.delay)
            .finish_non_exhaustive()
    }
}

/// What to do with a request: data. A [`Decision::Refuse`] is answered by robotsgate
/// itself, rendered into the client's answer in one place ([`Refusal::answer`]).
#[derive(Debug)]
pub enum Decision {
    /// Allowed: wait for `pace` (see [`Enforcer::pace`](crate::enforce::Enforcer::pace)), then connect to `addr` and send
    /// the target's canonical path.
    Forward {
        /// The approved address to connect to.
        addr: SocketAddr,
        /// Why it may go.
        why: Allowed,
        /// Its pacing schedule and delay.
        pace: Pace,
        /// Report mode: what enforcing would have answered instead (a robots.txt or a
        /// usage refusal).
        reported: Option<Box<Refusal>>,
        /// The usage verdict for the crawler's declared purposes (none declared, or
        /// `usage.mode: off`: `None`), to mark the response with (`X-Robots-Usage`).
        usage: Option<UsageVerdict>,
    },
    /// Answer the client with this; the origin is not contacted.
    Refuse(Refusal),
    /// Fleet mode: another member owns the origin; carry the request out through it
    /// (it judges, paces and signs it; its answer is the client's).
    HandOver(Owner),
}
