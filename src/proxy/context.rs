//! What robotsgate knows of one request as it goes through Pingora's phases (the
//! typed context of its `ProxyHttp`), and how a request's stage comes to an end: its
//! outcome, and for a forwarded one its turn ended as its exchange did.

use std::net::SocketAddr;
use std::os::unix::io::RawFd;
use std::sync::Arc;
use std::time::Instant;

use super::exchange::exchange_end;
use crate::downstream::context::ClientContext;
use crate::enforce::{Allowed, Answer, DelayRule, ExchangeEnd, Pace, Reported, Turn};
use crate::identity::payment::Reservation;
use crate::identity::{Identity, Signer};
use crate::policy::target::Target;
use crate::policy::usage::UsageVerdict;
use crate::telemetry::metrics::Outcome;

/// What robotsgate knows of one request as it goes through Pingora's phases.
#[derive(Default)]
pub struct RequestContext {
    /// From the front: the tunnel and user the request arrived with.
    pub(super) client: ClientContext,
    /// The request came without the front's context: it is refused rather than judged
    /// without its tunnel (as if it were plain `http://`).
    pub(super) client_unknown: bool,
    /// When the request arrived (for the access log's duration).
    pub(super) started: Option<Instant>,
    /// Where the request's robots.txt tokens came from (for the access log).
    pub(super) tokens_from: &'static str,
    /// Which setting chose enforce or report mode (for the access log).
    pub(super) mode_from: &'static str,
    /// Request body octets read so far (a body without `Content-Length` is bounded as it streams).
    pub(super) body_bytes: u64,
    /// Where the request goes, once understood.
    pub(super) target: Option<Target>,
    /// Where the request stands.
    pub(super) stage: Stage,
    /// The upstream connection's socket (held by this request until its response
    /// ends), to ask the kernel how long a slow response sat unread
    /// ([`Turns::origin_answered_read_late`](crate::pacing::Turns::origin_answered_read_late)).
    pub(super) upstream_fd: Option<RawFd>,
    /// robotsgate's own answer to write when an attempt sent again found no turn.
    pub(super) unsent: Option<Box<Answer>>,
    /// The protocol the answer came in from upstream (the origin, or a fleet owner):
    /// `http/1.1` or `h2`, once a response head arrived.
    pub(super) upstream_protocol: Option<&'static str>,
}

/// Where a request stands: undecided, answered by robotsgate, or forwarded.
// A stage's large parts are boxed: one allocation per forwarded or handed-over request
// keeps the context that every request carries through every phase at a few hundred
// octets (`the_context_is_small`).
#[derive(Default)]
pub(super) enum Stage {
    /// Not decided yet.
    #[default]
    Received,
    /// The client left while the request waited for its turn: nothing was sent.
    Left {
        /// How long it had waited.
        waited: std::time::Duration,
    },
    /// robotsgate answered instead of the origin.
    Answered {
        /// How it ended, for the metrics.
        outcome: Outcome,
        /// The answer's `X-Robots-Decision`.
        why: String,
        /// The robots.txt line that decided, when a rule did.
        line: Option<u32>,
    },
    /// Allowed and paced: sent to its origin (boxed: the context stays small).
    Forwarded(Box<Forwarded>),
    /// Fleet mode: carried out through the origin's owner, another member.
    HandedOver(Box<crate::handover::Passed>),
}

/// A request allowed and paced, as it goes to its origin.
pub(super) struct Forwarded {
    /// The origin address it goes to.
    pub(super) addr: SocketAddr,
    /// Why it was allowed.
    pub(super) allowed: Allowed,
    /// What set its delay.
    pub(super) rule: DelayRule,
    /// Report mode: the refusal it replaces (its `X-Robots-Decision`, line and
    /// outcome).
    pub(super) reported: Option<Reported>,
    /// The usage verdict for the crawler's purposes, marked on the response.
    pub(super) usage: Option<UsageVerdict>,
    /// What the request is signed as (and whose budget pays), if anything.
    pub(super) signer: Option<Signer>,
    /// Pay per crawl: the budget held for it while it offers to pay.
    pub(super) payment: Option<Reservation>,
    /// What the origin's answer said of payment, for the access log.
    pub(super) paid: Option<String>,
    /// Where it queues: an attempt sent again takes a turn of its own there.
    pub(super) pace: Pace,
    /// The pacing turn, held until the origin's exchange has ended (`None` only
    /// between a failed attempt and the next one's turn).
    pub(super) turn: Option<Turn>,
    /// Attempts sent to the origin so far (Pingora sends again what the origin
    /// never worked on, within `upstream.max_retries`).
    pub(super) attempts: u8,
    /// How the last failed attempt ended, for its turn to end so before the next.
    pub(super) retried: Option<ExchangeEnd>,
    /// The origin's status.
    pub(super) upstream_status: Option<u16>,
    /// The `X-Robots-Decision` robotsgate answered with when the origin failed.
    pub(super) failed: Option<String>,
    /// Its decision's place in the evidence chain, when it was recorded.
    pub(super) recorded: Option<u64>,
    /// With `evidence.body_digest`: the body's SHA-256 so far, and its length.
    pub(super) digest: Option<(Box<ring::digest::Context>, u64)>,
    /// The origin's answer reserved TDM rights for the crawler's purposes (TDMRep):
    /// withheld (its body dropped) or, in report mode, marked: the outcome and its
    /// `X-Robots-Decision`.
    pub(super) tdm: Option<(Outcome, String)>,
}

/// A body's SHA-256 and its length (`evidence.body_digest`).
pub(super) type Digested = ([u8; 32], u64);

/// Why a request ended as it did, for the access log: the `X-Robots-Decision` of
/// robotsgate's own answer, or why it was allowed (written only when the line is).
pub(super) enum Why {
    /// robotsgate answered: its `X-Robots-Decision`.
    Answer(String),
    /// Forwarded: why it was allowed.
    Allowed(Allowed),
}

impl std::fmt::Display for Why {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Why::Answer(header) => f.write_str(header),
            Why::Allowed(allowed) => allowed.fmt(f),
        }
    }
}

impl Stage {
    /// The request as it goes to its origin, when it was forwarded.
    pub(super) fn forwarded_mut(&mut self) -> Option<&mut Forwarded> {
        match self {
            Stage::Forwarded(f) => Some(f),
            _ => None,
        }
    }
}

impl RequestContext {
    /// The request's hand-over, when it was handed to its origin's owner.
    pub(super) fn handed_over(&self) -> Option<&crate::handover::Passed> {
        match &self.stage {
            Stage::HandedOver(passed) => Some(passed),
            _ => None,
        }
    }

    /// As [`RequestContext::handed_over`], to record what came of it.
    pub(super) fn handed_over_mut(&mut self) -> Option<&mut crate::handover::Passed> {
        match &mut self.stage {
            Stage::HandedOver(passed) => Some(passed),
            _ => None,
        }
    }

    /// Records that robotsgate answered `answer` instead of the origin.
    pub(super) fn answered(&mut self, answer: &Answer) {
        self.stage = Stage::Answered {
            outcome: answer.decision,
            why: answer.header.clone(),
            line: answer.rule_line,
        };
    }
}

/// What a request's end leaves for its access log line.
pub(super) struct Ended {
    /// How long it waited for its turn, in seconds.
    pub(super) pacing_wait: f64,
    /// The origin's status, when it answered.
    pub(super) upstream_status: Option<u16>,
    /// The robots.txt line that decided, when a rule did.
    pub(super) line: Option<u32>,
    /// Why it ended as it did.
    pub(super) why: Why,
    /// What set its delay.
    pub(super) delay_rule: Option<&'static str>,
    /// Its usage verdict.
    pub(super) usage: Option<UsageVerdict>,
    /// The identity it was signed as, and what its answer said of payment.
    pub(super) signed: Option<(Arc<Identity>, Option<String>)>,
    /// Its decision's place in the evidence chain, and its body's digest and length.
    pub(super) recorded: Option<(u64, Option<Digested>)>,
}

impl RequestContext {
    /// The request's outcome, for the metrics and the log.
    pub(super) fn outcome(&self, error: Option<&pingora::Error>) -> Outcome {
        match (&self.stage, error) {
            (Stage::Received, _) => Outcome::BadRequest,
            (Stage::Left { .. }, _) => Outcome::LeftWhileQueued,
            (Stage::Answered { outcome, .. }, _) => *outcome,
            (Stage::Forwarded(f), None) if f.failed.is_none() => f
                .tdm
                .as_ref()
                .map(|(outcome, _)| *outcome)
                .or(f.reported.as_ref().map(|r| r.outcome))
                .unwrap_or(Outcome::Allowed),
            (Stage::Forwarded(_), _) => Outcome::UpstreamError,
            (Stage::HandedOver(passed), None) if passed.answered_by_owner() => Outcome::HandedOver,
            (Stage::HandedOver(_), _) => Outcome::FleetUnavailable,
        }
    }

    /// Ends the request's stage: a forwarded one's turn ends as its exchange did
    /// (`error`), held a while more when cut. What the log needs of it is returned.
    pub(super) fn end(&mut self, error: Option<&pingora::Error>) -> Ended {
        let answered = |why, line| Ended {
            pacing_wait: 0.0,
            upstream_status: None,
            line,
            why: Why::Answer(why),
            delay_rule: None,
            usage: None,
            signed: None,
            recorded: None,
        };
        match std::mem::take(&mut self.stage) {
            Stage::Received => answered(String::new(), None),
            Stage::Left { waited } => Ended {
                pacing_wait: waited.as_secs_f64(),
                ..answered("client-left; while=queued".into(), None)
            },
            Stage::Answered { why, line, .. } => answered(why, line),
            Stage::HandedOver(passed) => {
                let (upstream_status, why) = passed.ended();
                Ended {
                    upstream_status,
                    ..answered(why, None)
                }
            }
            Stage::Forwarded(f) => {
                let Forwarded {
                    allowed,
                    rule,
                    reported,
                    turn,
                    upstream_status,
                    failed,
                    usage,
                    signer,
                    paid,
                    recorded,
                    digest,
                    tdm,
                    ..
                } = *f;
                let (line, why) = match (tdm, reported, allowed) {
                    (Some((_, decision)), reported, _) => {
                        (reported.and_then(|r| r.line), Why::Answer(decision))
                    }
                    (None, Some(reported), _) => (reported.line, Why::Answer(reported.header)),
                    (None, None, Allowed::Rule { line }) => (Some(line), Why::Allowed(allowed)),
                    (None, None, _) => (None, Why::Allowed(allowed)),
                };
                let pacing_wait = turn.as_ref().map_or(0.0, |p| p.waited().as_secs_f64());
                if let Some(turn) = turn {
                    turn.end(exchange_end(error));
                }
                Ended {
                    pacing_wait,
                    upstream_status,
                    line,
                    why: failed.map_or(why, Why::Answer),
                    delay_rule: Some(rule.label()),
                    usage,
                    signed: signer.map(|s| (s.identity, paid)),
                    recorded: recorded.map(|seq| {
                        let body = digest.map(|(context, n)| {
                            let mut sha = [0u8; 32];
                            sha.copy_from_slice(context.finish().as_ref());
                            (sha, n)
                        });
                        (seq, body)
                    }),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    /// Every request carries its context through every phase: its large parts are
    /// boxed, so that it stays at about a third of the 952 octets it had with them
    /// inline (320 on x86-64 with today's types).
    #[test]
    fn the_context_is_small() {
        let size = std::mem::size_of::<super::RequestContext>();
        eprintln!("RequestContext: {size} octets");
        assert!(size <= 320, "{size} octets");
    }
}
