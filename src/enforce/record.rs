//! What the enforcer writes into the evidence (`evidence`, with `evidence.dir` set): a
//! decision's record, built once from what decided it — the robots.txt copy (by its
//! SHA-256 and RFC 9309 case), the tokens and their source, the purposes, the group and
//! the rule on its line — and what the request arrived and was answered with
//! ([`Said`]). A request about to be sent waits for its record to be written
//! ([`Enforcer::record_forward`]); a refusal's is queued ([`Enforcer::record_refusal`]);
//! an exchange's end, after it ([`Enforcer::record_outcome`]).
//!
//! Every path calls these: the proxy (plain HTTP, a request inside an intercepted
//! tunnel, each HTTP/2 stream, a transparent listener's, one handed over by another
//! member, named in `from`) and the blind tunnels. A member that hands a request over
//! records nothing: its owner decides it, and records it once.

use std::sync::Arc;
use std::time::Duration;

use crate::evidence::{
    Concluded, Decided, Entry, Evidence, PolicyRef, Recorded, RuleRef, TdmRuleRef,
};
use crate::policy::agent::Requester;
use crate::policy::answer::{Answer, FileRule};
use crate::policy::target::Target;
use crate::robots::RuleKind;

use super::{Allowed, Enforcer, Reported, Snapshot};

/// What a request's record says of how it arrived and what was decided for it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Said<'a> {
    /// How it arrived (`explicit`, `transparent`, `tunnel`, `blind`, …).
    pub arrived: &'a str,
    /// The client's protocol (`http/1.1`, `h2`), for a request.
    pub protocol: Option<&'a str>,
    /// Its method, for a request.
    pub method: Option<&'a str>,
    /// The decision label.
    pub verdict: &'a str,
    /// Why: `X-Robots-Decision`, or why it was allowed.
    pub why: &'a str,
    /// Report mode: what enforcing would have answered.
    pub would: Option<&'a str>,
    /// The line of the rule that decided.
    pub line: Option<u32>,
    /// `X-Robots-Usage`.
    pub usage: Option<&'a str>,
    /// Its wait for its pacing turn.
    pub wait: Option<Duration>,
    /// The Web Bot Auth key it is signed with.
    pub key_id: Option<&'a str>,
    /// Report mode.
    pub report: bool,
    /// The member that handed it over, when one did.
    pub from: Option<&'a str>,
    /// The TDMRep rule that refused it (or in report mode would have).
    pub file_rule: Option<&'a FileRule>,
}

impl<'a> Said<'a> {
    /// What a forwarded request's record says of its decision: allowed (`allowed`, and
    /// it in words, `said`), or in report mode what enforcing would have answered.
    pub fn forwarded(allowed: Allowed, said: &'a str, reported: Option<&'a Reported>) -> Said<'a> {
        let (verdict, would, line) = match (reported, allowed) {
            (Some(r), _) => (r.outcome.label(), Some(r.header.as_str()), r.line),
            (None, Allowed::Rule { line }) => ("allowed", None, Some(line)),
            (None, _) => ("allowed", None, None),
        };
        Said {
            verdict,
            why: said,
            would,
            line,
            report: reported.is_some(),
            file_rule: reported.and_then(|r| r.file_rule.as_ref()),
            ..Said::default()
        }
    }

    /// What the record of a request robotsgate answers itself with `answer` says.
    pub fn answered(answer: &'a Answer) -> Said<'a> {
        Said {
            verdict: answer.decision.label(),
            why: &answer.header,
            line: answer.rule_line,
            file_rule: answer.file_rule.as_ref(),
            ..Said::default()
        }
    }

    /// The same, having arrived as `arrival` says (how, in which protocol and method,
    /// from which member).
    pub fn arriving(self, arrival: Said<'a>) -> Said<'a> {
        Said {
            arrived: arrival.arrived,
            protocol: arrival.protocol,
            method: arrival.method,
            from: arrival.from,
            ..self
        }
    }
}

/// The answer to a request whose record cannot be written (`on_failure: refuse`).
fn unrecorded() -> Answer {
    super::Refusal::EvidenceUnwritable.answer()
}

impl Enforcer {
    /// The evidence, when it is kept.
    pub fn evidence(&self) -> Option<&Arc<Evidence>> {
        self.evidence.as_ref()
    }

    /// Writes the decision on `target` from `who` (decided on `snapshot`) of a request
    /// about to be sent, and waits for it: `Ok(Some(seq))`, its place in the chain;
    /// `Ok(None)`, evidence off (or unwritable, `on_failure: continue`); `Err`, the 503 to
    /// answer instead (`refuse`).
    pub async fn record_forward(
        &self,
        target: &Target,
        who: &Requester<'_>,
        snapshot: Option<&Snapshot>,
        said: Said<'_>,
    ) -> Result<Option<u64>, Answer> {
        let Some(evidence) = &self.evidence else {
            return Ok(None);
        };
        let (origin, url) = (target.origin.to_string(), url_of(target));
        let decided = self.decided(evidence, who, snapshot, &said, (&origin, &url));
        count(evidence, &origin, &decided, said.verdict);
        match evidence.record(&Entry::Decision(Box::new(decided))).await {
            Ok(Recorded::At(seq)) => Ok(Some(seq)),
            Ok(Recorded::Unrecorded) => Ok(None),
            Err(_) => Err(unrecorded()),
        }
    }

    /// Queues the record of a request robotsgate answers itself (nothing is sent, so
    /// nothing waits).
    pub fn record_refusal(
        &self,
        target: &Target,
        who: &Requester<'_>,
        snapshot: Option<&Snapshot>,
        said: Said<'_>,
    ) {
        let Some(evidence) = &self.evidence else {
            return;
        };
        let (origin, url) = (target.origin.to_string(), url_of(target));
        let decided = self.decided(evidence, who, snapshot, &said, (&origin, &url));
        count(evidence, &origin, &decided, said.verdict);
        evidence.note(&Entry::Decision(Box::new(decided)));
    }

    /// Queues how the exchange of decision `seq` ended: the origin's `status`, how it
    /// `ended`, the payment receipt, the body's digest and length.
    pub fn record_outcome(
        &self,
        seq: u64,
        status: Option<u16>,
        ended: &str,
        (payment, answered): (Option<&str>, Option<&str>),
        body: Option<([u8; 32], u64)>,
    ) {
        let Some(evidence) = &self.evidence else {
            return;
        };
        evidence.note(&Entry::Outcome(Concluded {
            decision: seq,
            status,
            ended,
            payment,
            answered,
            body_sha256: body.map(|(sha, _)| crate::evidence::record::hex(&sha)),
            body_bytes: body.map(|(_, n)| n),
        }));
    }

    /// A decision's record.
    fn decided<'a>(
        &'a self,
        evidence: &Evidence,
        who: &'a Requester<'a>,
        snapshot: Option<&'a Snapshot>,
        said: &Said<'a>,
        (origin, url): (&'a str, &'a str),
    ) -> Decided<'a> {
        let tokens = self.tokens(who);
        let usage = self.usage_check(who);
        let now = tokio::time::Instant::now();
        let robots = snapshot.and_then(|s| s.known_rules().flatten());
        let group = robots.and_then(|r| {
            let id = r.group_for(&tokens.list())?;
            r.group(id)?.agents.first().map(|a| &**a)
        });
        let rule = robots
            .zip(said.line)
            .and_then(|(r, line)| r.rule_on_line(line))
            .map(|r| RuleRef {
                kind: match r.kind {
                    RuleKind::Allow => "allow",
                    RuleKind::Disallow => "disallow",
                },
                pattern: &r.pattern,
                line: r.line,
            });
        Decided {
            arrived: said.arrived,
            protocol: said.protocol,
            method: said.method,
            origin,
            url,
            client: evidence.client(who.client),
            user: who.user,
            from: said.from,
            tokens: tokens.list(),
            tokens_from: tokens.source(),
            purposes: usage.purposes.iter().map(|p| p.label()).collect(),
            mode: if said.report { "report" } else { "enforce" },
            verdict: said.verdict,
            why: said.why,
            would: said.would,
            policy: snapshot.map(|s| PolicyRef {
                sha256: s.sha256(),
                case: s.case(now),
                age_s: s
                    .fetched_at
                    .map(|f| now.saturating_duration_since(f).as_secs_f64()),
            }),
            group,
            rule,
            tdmrep: said.file_rule.map(|f| TdmRuleRef {
                sha256: &f.sha256,
                rule: f.rule,
            }),
            usage: said.usage,
            wait_s: said.wait.map(|w| w.as_secs_f64()),
            key_id: said.key_id,
        }
    }
}

/// A target's URL, as recorded: its origin and canonical path.
fn url_of(target: &Target) -> String {
    format!("{}{}", target.origin, target.path.as_str())
}

/// Counts a decision in the history the admin API reads.
fn count(evidence: &Evidence, origin: &str, decided: &Decided<'_>, verdict: &str) {
    let policy = decided
        .policy
        .as_ref()
        .map_or("none", |p| p.sha256.unwrap_or(p.case));
    evidence.count(origin, policy, verdict);
}
