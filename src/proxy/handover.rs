//! Handing a request to its origin's owner (fleet mode): the owner's peer channel as
//! the upstream, the request as the client sent it plus the `robotsgate-peer` context,
//! and the owner's answer relayed as it came (status, headers with its `X-Robots-*`,
//! body streamed). The owner judges, paces and signs it; this instance only carries it.
//! This is the path of what the front does not relay itself (`downstream::relay` takes
//! plain kept-alive `GET`s and `HEAD`s to a known owner): requests with bodies, HTTP/2
//! streams, a first request before the owner is known, one routed again.
//!
//! Pingora pools the connections to each owner (mutual TLS, see `fleet::channel`), so a
//! hand-over costs one header and one more hop, not a handshake. An attempt is sent
//! again only where Pingora knows the owner never received it (a pooled connection
//! found closed), once; an owner that cannot be reached is answered 503.

use std::net::IpAddr;

use pingora::http::RequestHeader;
use pingora::prelude::*;
use pingora::upstreams::peer::HttpPeer;

use super::context::{RequestContext, Stage};
use super::exchange::UpstreamOptions;
use crate::enforce::{Answer, Enforcer, Refusal};
use crate::fleet::{Owner, PEER_HEADER};

/// The owner's peer channel, as Pingora's upstream.
pub(super) fn owner_peer(
    enforcer: &Enforcer,
    owner: &Owner,
    upstream: &UpstreamOptions,
) -> Result<Box<HttpPeer>> {
    let owners = enforcer.owners().ok_or_else(|| {
        Error::explain(ErrorType::InternalError, "a hand-over outside fleet mode")
    })?;
    let mut peer = owners.peer(owner).ok_or_else(|| {
        Error::explain(
            ErrorType::ConnectNoRoute,
            "the owner's peer address is unusable",
        )
    })?;
    upstream.towards_owner(&mut peer, enforcer.owner_answers_within());
    Ok(Box::new(peer))
}

/// The request as it goes to the owner: as the client sent it (its request target and
/// headers; the owner strips what never goes to an origin), its proxy credentials
/// removed, and this instance's context for it (`client`: its client's address).
pub(super) fn to_owner(
    ctx: &RequestContext,
    client: Option<IpAddr>,
    request: &mut RequestHeader,
) -> Result<()> {
    let context = ctx.client.peer_context(client);
    request.remove_header("proxy-authorization");
    request.remove_header(PEER_HEADER);
    request.insert_header(PEER_HEADER, context.encode())?;
    Ok(())
}

/// The error an owner's giving up is, for Pingora to send the request again (routed
/// once more, see `RobotsGateProxy::route_again`).
pub(super) const GAVE_UP: &str = "owner gave the key up";

/// Whether the owner's answer says it no longer serves the key
/// ([`crate::fleet::owner_gave_up`]): its cached ownership is then forgotten, and the
/// request routed again.
pub(super) fn owner_gave_up(answer: &pingora::http::ResponseHeader) -> bool {
    let decision = answer.headers.get("x-robots-decision");
    crate::fleet::owner_gave_up(answer.status.as_u16(), decision.map(|v| v.as_bytes()))
}

/// The answer for a request the owner could not be asked (the connection failed
/// before any answer came), recorded in its stage; `None` for any other request.
pub(super) fn failed(ctx: &mut RequestContext, written: bool) -> Option<Answer> {
    let Stage::HandedOver { failed, .. } = &mut ctx.stage else {
        return None;
    };
    if written {
        return None;
    }
    let answer = Refusal::FleetUnavailable {
        why: "its owner could not be reached",
    }
    .answer();
    *failed = Some(answer.header.clone());
    Some(answer)
}

/// Whether `e` (as Pingora gave it) says the owner never worked on the request: its head
/// could not be written, or the owner closed or reset the connection before answering a
/// single octet ([`closed_unanswered`]). An owner that stops closes its connections, so
/// a request sent on one meets one of these. (One that died mid-exchange resets it too;
/// its keys cannot be taken over before its exchanges must be over, so routed again such
/// a request finds it gone and is answered 503.)
pub(super) fn never_received(e: &Error) -> bool {
    let context = e.context.as_ref().map_or("", |c| c.as_str());
    let head_unwritten = e.etype() == &ErrorType::WriteError
        && matches!(
            context,
            "while writing request headers" | "flushing request header"
        );
    head_unwritten || closed_unanswered(e)
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

/// Whether a failed attempt to the owner is sent again, and where. An attempt the owner
/// never worked on (`e` says it may be sent again: no connection made, the request
/// never received, a pooled connection found closed) may have met an owner that just
/// left (its listeners close once it has handed its keys over, before the others hear
/// of it): the owner is forgotten and the request routed once more
/// (`RobotsGateProxy::route_again`, which asks Redis who owns the key now). Routed again
/// as often as [`Reroutes`](crate::fleet::Reroutes) allows already: sent to the same
/// owner once more at most.
pub(super) fn retry(enforcer: &Enforcer, e: &mut Error, stage: &mut Stage) {
    let Stage::HandedOver {
        owner,
        attempts,
        gave_up,
        reroutes,
        ..
    } = stage
    else {
        return;
    };
    if reroutes.allowed() && !*gave_up && e.retry() {
        enforcer.forget_owner(owner);
        *gave_up = true;
        e.set_retry(true);
    } else if *attempts > 1 {
        e.set_retry(false);
    }
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
    }
}
