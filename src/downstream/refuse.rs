//! The front's own answers: a [`FrontRefusal`] (counted, logged, answered), and an
//! [`Answer`] written on a client stream Pingora's session does not own (refusals and
//! CONNECT answers). The header fields are the answer's own ([`Answer::fields`]); on a
//! raw stream this adds only the status line and `Connection: close`.

use std::net::IpAddr;

use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::policy::answer::{Answer, Outcome};
use crate::telemetry::metrics;

/// A refusal by the front: its status, `reason` (the counter label), why (for the
/// client), and what the answer adds (`Retry-After`, a `Proxy-Authenticate` challenge).
#[derive(Debug)]
pub struct FrontRefusal<'a> {
    /// The status answered.
    status: u16,
    /// The reason counted in `robotsgate_downstream_refusals_total`.
    reason: metrics::RefusalReason,
    /// Why, for the `X-Robots-Decision` header and the body.
    why: &'a str,
    /// `Retry-After`, in seconds.
    retry_after: Option<u64>,
    /// `Proxy-Authenticate`, for a 407.
    challenge: Option<String>,
}

impl<'a> FrontRefusal<'a> {
    /// Refuses with `status`, counted under `reason`, telling the client `why`.
    pub fn new(status: u16, reason: metrics::RefusalReason, why: &'a str) -> FrontRefusal<'a> {
        FrontRefusal {
            status,
            reason,
            why,
            retry_after: None,
            challenge: None,
        }
    }

    /// Adds `Retry-After: seconds`.
    pub fn retry_after(self, seconds: u64) -> Self {
        FrontRefusal {
            retry_after: Some(seconds),
            ..self
        }
    }

    /// Adds a `Proxy-Authenticate` challenge.
    pub fn challenge(self, challenge: String) -> Self {
        FrontRefusal {
            challenge: Some(challenge),
            ..self
        }
    }

    /// Counts and logs the refusal of `client`'s request; the answer to send.
    pub fn record(self, client: Option<IpAddr>) -> Answer {
        let FrontRefusal {
            status,
            reason,
            why,
            retry_after,
            challenge,
        } = self;
        metrics::record_refusal(reason);
        let reason = reason.label();
        tracing::info!(
            target: "access",
            client = client.map(|c| c.to_string()),
            decision = "refused",
            reason,
            status,
        );
        let mut answer = Answer::text(
            status,
            Outcome::BadRequest,
            format!("refused; reason=\"{reason}\""),
            format!("robotsgate: {why}"),
        );
        answer.retry_after = retry_after;
        answer.challenge = challenge;
        answer
    }
}

/// Counts, logs and answers a refusal on a raw client stream, then closes it.
pub async fn refuse<S: AsyncWrite + Unpin + ?Sized>(
    stream: &mut S,
    client: Option<IpAddr>,
    refusal: FrontRefusal<'_>,
) {
    write_answer(stream, &refusal.record(client)).await;
}

/// Writes `answer` as a complete HTTP/1.1 response, then closes the stream.
pub async fn write_answer<S: AsyncWrite + Unpin + ?Sized>(stream: &mut S, answer: &Answer) {
    let reason = http::StatusCode::from_u16(answer.status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("");
    let mut head = format!("HTTP/1.1 {} {reason}\r\n", answer.status);
    for (name, value) in answer.fields() {
        head.push_str(name);
        head.push_str(": ");
        head.push_str(&value);
        head.push_str("\r\n");
    }
    head.push_str("Connection: close\r\n\r\n");
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(&answer.body).await;
    let _ = stream.flush().await;
    let _ = stream.shutdown().await;
}
