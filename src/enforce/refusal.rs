//! What robotsgate answers instead of the origin ([`Refusal`]), rendered once into the
//! client's [`Answer`] ([`Refusal::answer`]), and what report mode marks a forwarded
//! response with instead ([`Refusal::reported`]).

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::time::Instant;

use super::{Policy, ResolveError, Snapshot};
use crate::config::Purpose;
use crate::policy::answer::{egress_denied, param_safe, Answer, FileRule, Outcome};
use crate::policy::egress::Forbidden;
use crate::policy::usage::UsageVerdict;

/// What robotsgate answers instead of the origin, and why.
#[derive(Debug)]
pub enum Refusal {
    /// A robots.txt rule disallows the path (or the spelling a lenient origin may read).
    Disallowed {
        /// The robots.txt that decided.
        robots_url: String,
        /// The canonical path judged.
        path: String,
        /// The rule as written (`Disallow: /private`), its canonical pattern and line.
        rule: String,
        /// The deciding rule's canonical pattern.
        pattern: String,
        /// The deciding rule's line.
        line: u32,
        /// The lenient origin's reading that was disallowed, when it was that one.
        read_as: Option<String>,
    },
    /// The site's usage preferences refuse every purpose the crawler declared (or one,
    /// with `usage.refuse_when: any`).
    UsageRefused {
        /// The robots.txt that stated them.
        robots_url: String,
        /// The canonical path judged.
        path: String,
        /// The purpose named: the first refused.
        purpose: Purpose,
        /// The statement that refused it (`Content-Usage: / train-ai=n (line 4)`); `None`
        /// when the site states nothing and `usage.unknown: refuse` decided.
        rule: Option<String>,
        /// Its line.
        line: Option<u32>,
        /// Every declared purpose's verdict.
        verdict: UsageVerdict,
    },
    /// The origin's TDMRep file reserves text-and-data-mining rights on the path, and a
    /// reservation binds the crawler's declared purposes.
    TdmReserved {
        /// The file's URL.
        tdmrep_url: String,
        /// The canonical path judged (or the spelling a lenient origin may read).
        path: String,
        /// The rule that reserved, by its index in the file (from 0), and the file.
        rule: FileRule,
        /// Its `location`, as written.
        location: String,
        /// Its `tdm-policy`, when it names one.
        policy: Option<String>,
    },
    /// The request's evidence could not be written (`evidence.on_failure: refuse`), or
    /// that of a fetch it needed first: nothing was sent.
    EvidenceUnwritable,
    /// The client's own request for `/robots.txt`, answered from this snapshot.
    RobotsTxt {
        /// The origin's robots.txt URL.
        robots_url: String,
        /// The snapshot the copy is served from.
        snapshot: Arc<Snapshot>,
    },
    /// robots.txt cannot be read and no copy is held: nothing may be fetched.
    RobotsUnreachable {
        /// The origin's robots.txt URL.
        robots_url: String,
        /// The snapshot saying why (cause, retry time).
        snapshot: Arc<Snapshot>,
    },
    /// The destination is refused (port, address range).
    EgressDenied(Forbidden),
    /// An operator override (`pacing.overrides`) blocks the host.
    Blocked {
        /// The override's host pattern.
        pattern: String,
        /// Its reason, if given.
        reason: Option<String>,
    },
    /// A redirected connection's original destination is not an address of the origin
    /// its request names (`Host`, or the TLS SNI): its robots.txt does not govern what
    /// that address serves (409, as Squid's `host_verify_strict`).
    HostMismatch {
        /// The origin the request names.
        origin: String,
        /// Where the client's connection was going.
        destination: SocketAddr,
    },
    /// Fleet mode: no member may pace the origin now (see `enforce::owned`).
    FleetUnavailable {
        /// Why not.
        why: &'static str,
    },
    /// The origin's name does not resolve (while its robots.txt is held).
    DnsFailure {
        /// The origin whose name failed.
        origin: String,
        /// What the resolver said.
        error: ResolveError,
    },
}

impl Refusal {
    /// In report mode, what the forwarded response is marked with instead of this
    /// answer: `would-disallow; …` (a robots.txt refusal, or the unreadable robots.txt's
    /// reason) or `would-usage-refuse; …`, and what it is counted as.
    pub fn reported(&self) -> Reported {
        let answer = self.answer();
        let (prefix, outcome) = match self {
            Refusal::UsageRefused { .. } => ("would-usage-refuse", Outcome::WouldUsageRefuse),
            Refusal::TdmReserved { .. } => ("would-tdm-reserve", Outcome::WouldUsageRefuse),
            _ => ("would-disallow", Outcome::WouldDisallow),
        };
        let rest = answer
            .header
            .split_once("; ")
            .map_or(answer.header.as_str(), |(_, rest)| rest);
        Reported {
            header: format!("{prefix}; {rest}"),
            line: answer.rule_line,
            outcome,
            file_rule: answer.file_rule,
        }
    }

    /// The answer the client gets: the one rendering of a decision robotsgate answers.
    pub fn answer(&self) -> Answer {
        match self {
            Refusal::Disallowed {
                robots_url,
                path,
                rule,
                pattern,
                line,
                read_as,
            } => {
                let read_as = read_as
                    .as_ref()
                    .map(|l| format!(" (read as {l}, as origins may)"))
                    .unwrap_or_default();
                let mut answer = Answer::text(
                    403,
                    Outcome::Disallowed,
                    format!("disallowed; robots=\"{robots_url}\"; rule=\"{pattern}\"; line={line}"),
                    format!("robotsgate: {path}{read_as} is disallowed by {robots_url}: {rule}"),
                );
                answer.rule_line = Some(*line);
                answer
            }
            Refusal::UsageRefused {
                robots_url,
                path,
                purpose,
                rule,
                line,
                ..
            } => usage_answer(robots_url, path, *purpose, (rule.as_deref(), *line)),
            Refusal::TdmReserved {
                tdmrep_url,
                path,
                rule,
                location,
                policy,
            } => tdm_answer(tdmrep_url, path, rule, location, policy.as_deref()),
            Refusal::EvidenceUnwritable => {
                let mut answer = Answer::text(
                    503,
                    Outcome::EvidenceUnwritable,
                    "refused; reason=\"evidence-unwritable\"".into(),
                    "robotsgate: this request's record could not be written (evidence.dir full or unwritable), so it was not sent. Retry in 1 s.".into(),
                );
                answer.retry_after = Some(1);
                answer
            }
            Refusal::RobotsTxt {
                robots_url,
                snapshot,
            } => robots_txt_answer(snapshot, robots_url),
            Refusal::RobotsUnreachable {
                robots_url,
                snapshot,
            } => unreachable_answer(snapshot, robots_url),
            Refusal::EgressDenied(why) => egress_denied(why.to_string()),
            Refusal::Blocked { pattern, reason } => {
                let reason = reason.as_deref().unwrap_or("blocked by the operator");
                Answer::text(
                    403,
                    Outcome::Blocked,
                    format!("blocked; override=\"{pattern}\"; reason=\"{}\"", reason.replace('"', "'")),
                    format!("robotsgate: {pattern} is blocked by the operator (pacing.overrides): {reason}"),
                )
            }
            Refusal::HostMismatch {
                origin,
                destination,
            } => Answer::text(
                409,
                Outcome::BadRequest,
                format!(
                    "refused; reason=\"host-mismatch\"; origin=\"{origin}\"; destination=\"{destination}\""
                ),
                format!("robotsgate: the connection was going to {destination}, which is not an address of {origin} (as robotsgate resolves it); its robots.txt cannot vouch for that server"),
            ),
            Refusal::FleetUnavailable { why } => {
                let mut answer = Answer::text(
                    503,
                    Outcome::FleetUnavailable,
                    "fleet-unavailable; reason=fleet-backend-unavailable".into(),
                    format!("robotsgate: no fleet member may pace this origin now: {why}. Retry in 1 s."),
                );
                answer.retry_after = Some(1);
                answer
            }
            Refusal::DnsFailure { origin, error } => Answer::text(
                502,
                Outcome::UpstreamError,
                format!(
                    "dns-failure; reason=\"{}\"; origin=\"{origin}\"",
                    error.cause
                ),
                format!("robotsgate: {error}"),
            ),
        }
    }
}

/// A usage refusal's answer: the statement that refused `purpose` on `path` (its text
/// and line), or none when `usage.unknown: refuse` decided.
fn usage_answer(
    robots_url: &str,
    path: &str,
    purpose: Purpose,
    (rule, line): (Option<&str>, Option<u32>),
) -> Answer {
    let purpose = purpose.label();
    let (header, body) = match (rule, line) {
        (Some(rule), Some(line)) => (
            format!(
                "usage-refused; robots=\"{robots_url}\"; purpose={purpose}; line={line}; rule=\"{}\"",
                rule.replace(['"', '\\'], "'")
            ),
            format!("robotsgate: {path} may not be used for {purpose}: {robots_url} states {rule}"),
        ),
        _ => (
            format!("usage-refused; robots=\"{robots_url}\"; purpose={purpose}; reason=unknown"),
            format!("robotsgate: {robots_url} states no preference for {purpose} on {path}, and usage.unknown is refuse"),
        ),
    };
    let mut answer = Answer::text(403, Outcome::UsageRefused, header, body);
    answer.rule_line = line;
    answer
}

/// A TDMRep file's reservation's answer: the file, its rule, the rule's `location`,
/// and the policy it names.
fn tdm_answer(
    tdmrep_url: &str,
    path: &str,
    rule: &FileRule,
    location: &str,
    policy: Option<&str>,
) -> Answer {
    let named = policy
        .map(|p| format!("; policy=\"{}\"", param_safe(p)))
        .unwrap_or_default();
    let mut answer = Answer::text(
        403,
        Outcome::UsageRefused,
        format!(
            "tdm-reserved; source=file; tdmrep=\"{tdmrep_url}\"; rule={}; location=\"{}\"; tdm-reservation=1{named}",
            rule.rule,
            param_safe(location)
        ),
        format!(
            "robotsgate: {path}: text and data mining rights are reserved by {tdmrep_url} (rule {}, location {location}){}",
            rule.rule,
            policy.map(|p| format!("; the policy: {p}")).unwrap_or_default()
        ),
    );
    answer.file_rule = Some(rule.clone());
    answer
}

/// Whole seconds until `at` (at least 1), for `Retry-After`.
fn retry_seconds(at: Option<Instant>) -> u64 {
    at.map_or(1, |at| {
        at.saturating_duration_since(Instant::now())
            .as_secs_f64()
            .ceil()
            .max(1.0) as u64
    })
}

/// The answer while an origin's robots.txt cannot be read and no copy is held: 503 with
/// `Retry-After`, or 502 when the origin's certificate fails verification (no retry will
/// fix that soon). The cause is named either way (`reason="http-500"`, `timeout`, …).
fn unreachable_answer(snapshot: &Snapshot, robots_url: &str) -> Answer {
    let why = match &snapshot.policy {
        Policy::DisallowAll { why } => why,
        _ => &snapshot.last_outcome,
    };
    let cause = snapshot.cause().unwrap_or("unknown");
    let retry = retry_seconds(snapshot.retry_at());
    let status = if crate::origin::fetch::is_certificate_failure(cause) {
        502
    } else {
        503
    };
    let mut answer = Answer::text(
        status,
        Outcome::RobotsUnreachable,
        format!("robots-unreachable; robots=\"{robots_url}\"; reason=\"{cause}\"; retry-after={retry}"),
        format!("robotsgate: {why} ({cause}); nothing on this origin may be fetched until {robots_url} can be read. Retry in {retry} s."),
    );
    answer.retry_after = Some(retry);
    answer
}

/// A client's request for `/robots.txt` itself, answered from the store: the held copy
/// (also a stale one kept while the origin fails), 404 when the origin has none, or the
/// unreachable answer.
fn robots_txt_answer(snapshot: &Snapshot, robots_url: &str) -> Answer {
    match &snapshot.policy {
        Policy::Rules(file) => Answer {
            status: 200,
            decision: Outcome::RobotsTxtCached,
            header: format!("robots-txt-from-cache; robots=\"{robots_url}\""),
            content_type: "text/plain",
            body: bytes::Bytes::copy_from_slice(&file.body),
            retry_after: None,
            rule_line: None,
            challenge: None,
            file_rule: None,
        },
        Policy::AllowAll { why } => Answer::text(
            404,
            Outcome::RobotsTxtCached,
            format!("robots-txt-from-cache; robots=\"{robots_url}\"; none"),
            format!("robotsgate: {why}"),
        ),
        Policy::DisallowAll { .. } => unreachable_answer(snapshot, robots_url),
    }
}

/// A report-mode request's mark: the `X-Robots-Decision` of the forwarded response
/// (what enforcing would have answered), the robots.txt line behind it, and what the
/// request is counted as.
#[derive(Clone, Debug)]
pub struct Reported {
    /// `would-disallow; …` or `would-usage-refuse; …`.
    pub header: String,
    /// The deciding robots.txt line, when a rule decided.
    pub line: Option<u32>,
    /// [`Outcome::WouldDisallow`] or [`Outcome::WouldUsageRefuse`].
    pub outcome: Outcome,
    /// The TDMRep rule that would have refused, when one would.
    pub file_rule: Option<FileRule>,
}
