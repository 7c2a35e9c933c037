//! What robotsgate answers instead of the origin, as data: an [`Answer`] (status,
//! `X-Robots-Decision`, body, `Retry-After`) and its [`Outcome`] (the metrics' and the
//! access log's name for it). [`Answer::fields`] is the one rendering of its header
//! fields; writing them is the caller's (Pingora's session or a raw stream).

use bytes::Bytes;

/// What became of a request: the `decision` label of the request metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Forwarded to the origin.
    Allowed,
    /// Forwarded in report mode, though robots.txt disallows it (or cannot be read).
    WouldDisallow,
    /// Refused by a robots.txt rule (403).
    Disallowed,
    /// Forwarded in report mode, though the site's usage preferences refuse it.
    WouldUsageRefuse,
    /// Refused by the site's usage preferences for the crawler's purposes (403).
    UsageRefused,
    /// robots.txt could not be read (503/502).
    RobotsUnreachable,
    /// `/robots.txt` answered from the store.
    RobotsTxtCached,
    /// The destination is refused (403).
    EgressDenied,
    /// An operator override blocks the host (403).
    Blocked,
    /// Pacing refused to queue it (503).
    PacedRejected,
    /// The origin failed (502/504).
    UpstreamError,
    /// The request could not be understood, or was refused by a limit (4xx).
    BadRequest,
    /// The client left while the request waited for its pacing turn: nothing was sent
    /// to the origin, and nothing answered.
    LeftWhileQueued,
    /// Fleet mode: carried out through the origin's owner (another member), whose
    /// answer the client got.
    HandedOver,
    /// Fleet mode: no member may pace the origin now (Redis cannot say who owns it, its
    /// owner is handing it over, this instance's lease lapsed) (503).
    FleetUnavailable,
    /// Its evidence record could not be written (`evidence.on_failure: refuse`): not
    /// sent (503).
    EvidenceUnwritable,
    /// The origin's answer reserved TDM rights (TDMRep) for the crawler's purposes: its
    /// body withheld, the crawler answered 451 (the exchange was made at the origin).
    TdmWithheld,
    /// Report mode: the origin's answer reserved TDM rights; given to the crawler,
    /// marked.
    WouldTdmWithhold,
}

impl Outcome {
    /// Every outcome, in label order.
    pub const ALL: [Outcome; 18] = [
        Outcome::Allowed,
        Outcome::WouldDisallow,
        Outcome::Disallowed,
        Outcome::WouldUsageRefuse,
        Outcome::UsageRefused,
        Outcome::RobotsUnreachable,
        Outcome::RobotsTxtCached,
        Outcome::EgressDenied,
        Outcome::Blocked,
        Outcome::PacedRejected,
        Outcome::UpstreamError,
        Outcome::BadRequest,
        Outcome::LeftWhileQueued,
        Outcome::HandedOver,
        Outcome::FleetUnavailable,
        Outcome::EvidenceUnwritable,
        Outcome::TdmWithheld,
        Outcome::WouldTdmWithhold,
    ];

    /// The metric label and access-log value.
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::WouldDisallow => "would_disallow",
            Outcome::Disallowed => "disallowed",
            Outcome::WouldUsageRefuse => "would_usage_refuse",
            Outcome::UsageRefused => "usage_refused",
            Outcome::RobotsUnreachable => "robots_unreachable",
            Outcome::RobotsTxtCached => "robots_txt_cached",
            Outcome::EgressDenied => "egress_denied",
            Outcome::Blocked => "blocked",
            Outcome::PacedRejected => "paced_rejected",
            Outcome::UpstreamError => "upstream_error",
            Outcome::BadRequest => "bad_request",
            Outcome::LeftWhileQueued => "left_while_queued",
            Outcome::HandedOver => "handed_over",
            Outcome::FleetUnavailable => "fleet_unavailable",
            Outcome::EvidenceUnwritable => "evidence_unwritable",
            Outcome::TdmWithheld => "tdm_withheld",
            Outcome::WouldTdmWithhold => "would_tdm_withhold",
        }
    }
}

/// A response robotsgate gives instead of the origin's.
#[derive(Clone, Debug)]
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// What the metrics and the access log call it.
    pub decision: Outcome,
    /// Value of the `X-Robots-Decision` response header.
    pub header: String,
    /// The body's `Content-Type`.
    pub content_type: &'static str,
    /// The body.
    pub body: Bytes,
    /// `Retry-After`, in seconds.
    pub retry_after: Option<u64>,
    /// The robots.txt line that decided, when a rule did (for the access log).
    pub rule_line: Option<u32>,
    /// A `Proxy-Authenticate` challenge (407 answers).
    pub challenge: Option<String>,
    /// The file other than robots.txt whose rule decided (TDMRep's), for the evidence.
    pub file_rule: Option<FileRule>,
}

/// A rule of a file other than robots.txt that decided: the file by the SHA-256 of its
/// octets (hex), and the rule by its index in the file (TDMRep's rules, from 0).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileRule {
    /// The file's SHA-256, hex.
    pub sha256: std::sync::Arc<str>,
    /// The rule's index.
    pub rule: usize,
}

/// `text` made safe as a quoted header parameter: printable ASCII kept; a quote, a
/// backslash, spaces, controls and any other octet percent-encoded.
pub fn param_safe(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for &b in text.as_bytes() {
        match b {
            b'"' | b'\\' => out.push_str(&format!("%{b:02X}")),
            0x21..=0x7e => out.push(b as char),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

impl Answer {
    /// A plain-text answer (a newline is added to `body`).
    pub fn text(status: u16, decision: Outcome, header: String, body: String) -> Answer {
        Answer {
            status,
            decision,
            header,
            content_type: "text/plain; charset=utf-8",
            body: Bytes::from(body + "\n"),
            retry_after: None,
            rule_line: None,
            challenge: None,
            file_rule: None,
        }
    }

    /// The response's header fields: the one rendering of an answer, whichever way it is
    /// then written (Pingora's session in `proxy::http`, a raw stream in
    /// `downstream::refuse`).
    pub fn fields(&self) -> impl Iterator<Item = (&'static str, std::borrow::Cow<'_, str>)> {
        use std::borrow::Cow;
        [
            Some(("Content-Type", Cow::Borrowed(self.content_type))),
            Some(("Content-Length", Cow::Owned(self.body.len().to_string()))),
            Some(("X-Robots-Decision", Cow::Borrowed(self.header.as_str()))),
            self.retry_after
                .map(|r| ("Retry-After", Cow::Owned(r.to_string()))),
            self.challenge
                .as_deref()
                .map(|c| ("Proxy-Authenticate", Cow::Borrowed(c))),
        ]
        .into_iter()
        .flatten()
    }
}

/// A request that cannot be understood: 400, or 421 for a request inside a tunnel that
/// names another origin.
pub fn bad_request(status: u16, why: impl std::fmt::Display) -> Answer {
    Answer::text(
        status,
        Outcome::BadRequest,
        format!("bad-request; reason=\"{why}\""),
        format!("robotsgate: {why}"),
    )
}

/// A request that came back through this robotsgate (its own `Via` pseudonym is in
/// the request): 508, rather than forwarded around the loop again.
pub fn forwarding_loop(pseudonym: &str) -> Answer {
    Answer::text(
        508,
        Outcome::BadRequest,
        "refused; reason=\"loop\"".into(),
        format!("robotsgate: this request already went through this robotsgate ({pseudonym}): a redirection loop (the firewall rule must exclude robotsgate's own connections)"),
    )
}

/// A refused destination: 403 naming why.
pub fn egress_denied(why: String) -> Answer {
    Answer::text(
        403,
        Outcome::EgressDenied,
        format!("egress-denied; reason=\"{why}\""),
        format!("robotsgate: {why}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whatever octets an origin's policy holds, the decision is a valid header value.
    #[test]
    fn any_policy_makes_a_header_value() {
        for policy in [
            "https://p.example/a?b=1",
            "https://p.example/é \"x\"\\",
            "a\u{7f}\u{1}",
        ] {
            let safe = param_safe(policy);
            assert!(http::HeaderValue::from_str(&safe).is_ok(), "{safe}");
            assert!(!safe.contains('"') && !safe.contains(' '), "{safe}");
        }
        assert_eq!(
            param_safe("https://p.example/é"),
            "https://p.example/%C3%A9"
        );
    }
}
