//! What passes between a member and an origin's owner, whichever path carries a
//! request (the front's relay, the proxy's pass): the request marked for the owner
//! (this member's [`PeerContext`], nothing the client said in its place), and what the
//! owner's side tells — an answer saying it gave the key up, an error saying it never
//! received the request. Both paths route again on these, and only on these; what a
//! member answers when it cannot carry a request to its owner is built here once
//! ([`unavailable`]).

use pingora::http::{RequestHeader, ResponseHeader};
use pingora::prelude::*;

use http::HeaderValue;

use crate::enforce::{Answer, Refusal};
use crate::fleet::{PeerContext, PEER_HEADER};

/// Why a member answers a request for its owner: every path's hand-over ends in one of
/// these when it cannot carry the request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unreached {
    /// No answer could be had from the owner: no connection, or one that failed before
    /// any answer, or an answer that could not be read.
    Unreachable,
    /// The owner took the request and did not answer within its bound.
    Silent,
    /// It was routed again as often as allowed, and its owner still gave it up or never
    /// received it.
    KeptGivingUp,
    /// Its client (its proxy user, or its address) holds its share of this member's
    /// connections at the owner (`share.rs`): not sent.
    OverShare,
}

/// The hand-over's answer when it cannot carry a request (`503 fleet-unavailable`, the
/// `cause` as its reason): the one place it is built.
pub fn unavailable(cause: Unreached) -> Answer {
    let why = match cause {
        Unreached::Unreachable => "its owner could not be reached",
        Unreached::Silent => "its owner did not answer in time",
        Unreached::KeptGivingUp => "its owner kept giving it up",
        Unreached::OverShare => {
            "this client holds its share of this member's connections to the origin's owner (fleet.peer_max_connections_per_member, divided among the clients handing over)"
        }
    };
    Refusal::FleetUnavailable { why }.answer()
}

/// Marks `request` for the owner: its proxy credentials and any `robotsgate-peer` the
/// client sent removed, this member's `context` added, as [`peer_header`] writes it (the
/// owner strips the rest of what never goes to an origin).
pub fn mark_for_owner(request: &mut RequestHeader, context: HeaderValue) -> Result<()> {
    request.remove_header(&http::header::PROXY_AUTHORIZATION);
    // Inserting replaces every value the client sent under the name. The name as static
    // octets: nothing copied to remember its case.
    let name = bytes::Bytes::from_static(PEER_HEADER.as_bytes());
    request.insert_header(name, context)?;
    Ok(())
}

/// This member's `context` for a request it hands over, as the `robotsgate-peer` value.
pub fn peer_header(context: &PeerContext) -> Result<HeaderValue> {
    HeaderValue::try_from(context.encode())
        .or_err(InvalidHTTPHeader, "the peer context as a header value")
}

/// The error a connection to an owner answered by another member's certificate is
/// ([`crate::fleet::answered_by`]): nothing was sent on it, so the owner never received
/// the request ([`never_received`]).
pub const NOT_THE_OWNER: &str =
    "the owner's peer address answered with another member's certificate";

/// The error an owner's giving up is, for Pingora to send the request again (routed
/// once more, see `RobotsGateProxy::route_again`).
pub const GAVE_UP: &str = "owner gave the key up";

/// Whether the owner's answer says it no longer serves the key
/// ([`crate::fleet::owner_gave_up`]): its cached ownership is then forgotten, and the
/// request routed again.
pub fn gave_up(answer: &ResponseHeader) -> bool {
    let decision = answer.headers.get("x-robots-decision");
    crate::fleet::owner_gave_up(answer.status.as_u16(), decision.map(|v| v.as_bytes()))
}

/// Whether `e` (as Pingora gave it) says the owner never worked on the request: its
/// connection was answered by another member ([`NOT_THE_OWNER`]), its head could not be
/// written, or the owner closed or reset the connection before answering a single octet
/// ([`closed_unanswered`]). An owner that stops closes its connections, so
/// a request sent on one meets one of these. (One that died mid-exchange resets it too;
/// its keys cannot be taken over before its exchanges must be over, so routed again such
/// a request finds it gone and is answered 503.)
pub fn never_received(e: &Error) -> bool {
    let context = e.context.as_ref().map_or("", |c| c.as_str());
    let head_unwritten = e.etype() == &ErrorType::WriteError
        && matches!(
            context,
            "while writing request headers" | "flushing request header"
        );
    let not_the_owner = e.etype() == &ErrorType::Custom(NOT_THE_OWNER);
    not_the_owner || head_unwritten || closed_unanswered(e)
}

/// Whether `e` is the owner closing a connection before answering a single octet: over
/// TLS without a `close_notify` (rustls reports it as an unexpected end, which Pingora
/// does not count as the closed connection it is), or with a reset.
fn closed_unanswered(e: &Error) -> bool {
    use std::io::ErrorKind::{ConnectionReset, UnexpectedEof};
    let eof = e
        .cause
        .as_ref()
        .and_then(|c| c.downcast_ref::<std::io::Error>())
        .is_some_and(|io| matches!(io.kind(), UnexpectedEof | ConnectionReset));
    let unanswered = e
        .context
        .as_ref()
        .is_some_and(|c| c.as_str().ends_with("bytes already read: 0"));
    e.etype() == &ErrorType::ReadError && eof && unanswered
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Pingora error of `etype` with `context`, caused by an I/O error of `kind`.
    fn error(etype: ErrorType, context: &'static str, kind: std::io::ErrorKind) -> Box<Error> {
        Error::because(etype, context, std::io::Error::from(kind))
    }

    #[test]
    fn a_request_the_owner_never_received_is_told_from_one_it_may_have() {
        use std::io::ErrorKind::{BrokenPipe, ConnectionRefused, ConnectionReset, UnexpectedEof};
        use ErrorType::{ReadError, WriteError};
        let none = "while reading response headers, bytes already read: 0";
        // Some of the answer came: the owner worked on it.
        let some = "while reading response headers, bytes already read: 12";
        let cases = [
            (
                WriteError,
                "while writing request headers",
                BrokenPipe,
                true,
            ),
            (WriteError, "flushing request header", BrokenPipe, true),
            (ReadError, none, UnexpectedEof, true),
            (ReadError, none, ConnectionReset, true),
            (ReadError, some, UnexpectedEof, false),
            (ReadError, some, ConnectionRefused, false),
            (WriteError, "while writing request body", BrokenPipe, false),
        ];
        for (etype, context, kind, never) in cases {
            let e = error(etype, context, kind);
            assert_eq!(never_received(&e), never, "{context} ({kind:?})");
        }
        // Answered by another member: closed before anything was sent.
        let impostor = Error::explain(ErrorType::Custom(NOT_THE_OWNER), "nothing sent on it");
        assert!(never_received(&impostor));
    }
}
