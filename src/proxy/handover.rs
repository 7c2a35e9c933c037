//! The proxy pass's side of the hand-over (the sequence is [`crate::handover`]'s): the
//! owner's peer channel as the upstream, the request marked for the owner, an answer
//! for an owner that could not be asked, and whether a failed attempt is routed again.
//! This path carries what the front does not relay itself: requests with bodies,
//! HTTP/2 streams, a first request before the owner is known, one routed again.
//!
//! Pingora pools the connections to each owner (mutual TLS, see `fleet::channel`), so a
//! hand-over costs one header and one more hop, not a handshake. An attempt is sent
//! again only where the owner never worked on it, routed once more; an owner that
//! cannot be reached is answered 503.

use std::net::IpAddr;

use pingora::http::RequestHeader;
use pingora::prelude::*;
use pingora::upstreams::peer::HttpPeer;

use super::context::{RequestContext, Stage};
use super::exchange::UpstreamOptions;
use crate::enforce::{Answer, Enforcer, Refusal};
use crate::fleet::Owner;

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
    let context = crate::handover::peer_header(&ctx.client.peer_context(client))?;
    crate::handover::mark_for_owner(request, context)
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
