//! The proxy pass's side of the hand-over (the sequence is the room's, `mod.rs`): a
//! request whose origin another member owns, carried by Pingora with the owner's peer
//! channel as its upstream. This path carries what the front does not relay itself:
//! requests with bodies, HTTP/2 streams, a first request before the owner is known, one
//! routed again. Each of the proxy's phases calls one method here: the owner's peer for
//! the next attempt ([`HandOver::peer`]), the request marked for it
//! ([`HandOver::mark`]), the connection checked ([`HandOver::connected`]), the owner's
//! answer read ([`HandOver::answered`]), a failure decided ([`HandOver::retry`],
//! [`Passed::failed`]).
//!
//! Pingora pools the connections to each owner (mutual TLS, see `fleet::channel`), so a
//! hand-over costs one header and one more hop, not a handshake. An attempt is sent
//! again only where the owner never worked on it, and then routed once more
//! ([`HandOver::route_again`]); an owner that cannot be reached is answered 503
//! ([`super::unavailable`]).
//!
//! **A stop's bound.** Pingora reads the owner's answer with the read timeout the
//! attempt was given. A graceful stop that begins meanwhile must still answer the
//! request before the process ends (`enforce/stop.rs`), so while the answer's head is
//! awaited the connection is watched ([`CutAtStop`], one task per attempt): when the
//! stop's bound comes it is shut down, Pingora's read ends, and the request is answered
//! 503 as an owner silent past its bound is, never sent again.

use std::os::fd::{BorrowedFd, RawFd};
use std::sync::Arc;

use pingora::http::{RequestHeader, ResponseHeader};
use pingora::prelude::*;
use pingora::protocols::Digest;
use pingora::upstreams::peer::HttpPeer;

use super::owner::{gave_up, mark_for_owner, never_received, peer_header, GAVE_UP, NOT_THE_OWNER};
use super::{unavailable, HandOver, Share, Unreached};
use crate::enforce::{Answer, Enforcer};
use crate::fleet::{Owner, PeerContext, Reroutes};

/// A request handed to its origin's owner on the proxy pass: the owner, how often it
/// was routed, and what came of its attempt.
#[derive(Debug)]
pub struct Passed {
    /// The owner.
    owner: Owner,
    /// The status its answer carried.
    status: Option<u16>,
    /// robotsgate's own `X-Robots-Decision` when the owner could not be reached.
    failed: Option<String>,
    /// The owner never worked on the request (it gave its key up, or never received
    /// it): it is routed once more before a next attempt.
    route_again: bool,
    /// How many times the request was routed once more, this time included.
    reroutes: Reroutes,
    /// Why it is answered when the owner's answer does not come: unreachable, or
    /// silent past a stop's bound.
    unreached: Unreached,
    /// The attempt's connection, watched while the owner's answer head is awaited.
    cut: Option<CutAtStop>,
    /// Its place in this member's connections at the owner, held until it ends.
    _share: Share,
}

impl Passed {
    /// A request handed to `owner`, routed `reroutes` times before, holding `share`.
    pub fn new(owner: Owner, reroutes: Reroutes, share: Share) -> Passed {
        Passed {
            _share: share,
            owner,
            status: None,
            failed: None,
            route_again: false,
            reroutes,
            unreached: Unreached::Unreachable,
            cut: None,
        }
    }

    /// `Some`: the owner never worked on the request, and it is routed once more before
    /// its next attempt, for the returned time.
    pub fn routed_again(&self) -> Option<Reroutes> {
        self.route_again.then_some(self.reroutes)
    }

    /// Whether a failed attempt (`e`, as Pingora gave it) carried nothing the owner
    /// worked on: it may be sent again whatever its method.
    pub fn never_worked_on(&self, e: &Error) -> bool {
        self.route_again || never_received(e)
    }

    /// The answer for a request the owner could not be asked (the connection failed
    /// before any answer came: nothing `written` to the client), recorded; `None` when
    /// the owner answered.
    pub fn failed(&mut self, written: bool) -> Option<Answer> {
        if written {
            return None;
        }
        let answer = unavailable(self.unreached);
        self.failed = Some(answer.header.clone());
        Some(answer)
    }

    /// Whether the owner answered: `false` once robotsgate answered for it.
    pub fn answered_by_owner(&self) -> bool {
        self.failed.is_none()
    }

    /// What the access log keeps of it: the owner's status, and the `X-Robots-Decision`
    /// robotsgate answered with, or the owner it was handed to.
    pub fn ended(self) -> (Option<u16>, String) {
        let why = self
            .failed
            .unwrap_or_else(|| format!("handed-over; owner={}", self.owner.member));
        (self.status, why)
    }
}

impl HandOver {
    /// The owner's peer channel, as the upstream of `passed`'s attempt.
    pub fn peer(&self, passed: &Passed) -> Result<HttpPeer> {
        let owners = self.enforcer.owners().ok_or_else(|| {
            Error::explain(ErrorType::InternalError, "a hand-over outside fleet mode")
        })?;
        owners.peer(&passed.owner).ok_or_else(|| {
            Error::explain(
                ErrorType::ConnectNoRoute,
                "the owner's peer address is unusable",
            )
        })
    }

    /// The request as it goes to the owner: as the client sent it (its request target
    /// and headers; the owner strips what never goes to an origin), its proxy
    /// credentials removed, and this member's `context` for it.
    pub fn mark(&self, context: &PeerContext, request: &mut RequestHeader) -> Result<()> {
        mark_for_owner(request, peer_header(context)?)
    }

    /// A new connection carries the request only when its owner answered it
    /// ([`crate::fleet::answered_by`], the TLS `digest`; a `reused` one was checked
    /// when it was made). Otherwise the owner never received it ([`NOT_THE_OWNER`]).
    /// The connection (`fd`) is watched for a stop's bound until the answer's head.
    pub fn connected(
        &self,
        passed: &mut Passed,
        reused: bool,
        digest: Option<&Digest>,
        fd: RawFd,
    ) -> Result<()> {
        let answered = digest.and_then(|d| d.ssl_digest.as_deref());
        if reused || crate::fleet::answered_by(&passed.owner.member, answered) {
            passed.cut = CutAtStop::watch(self.enforcer.clone(), fd);
            return Ok(());
        }
        Error::e_explain(ErrorType::Custom(NOT_THE_OWNER), "nothing sent on it")
    }

    /// The owner's answer head, relayed as the owner gave it (its `X-Robots-*`
    /// included) — unless it says the owner gave the key up: then `Err`, and the
    /// request is routed once more while [`HandOver::route_again`] allows.
    pub fn answered(&self, passed: &mut Passed, answer: &ResponseHeader) -> Result<()> {
        passed.cut = None;
        passed.status = Some(answer.status.as_u16());
        if !gave_up(answer) || !self.route_again(Some(&passed.owner), &mut passed.reroutes) {
            return Ok(());
        }
        passed.route_again = true;
        let mut e = Error::explain(
            ErrorType::Custom(GAVE_UP),
            "the owner no longer serves the key",
        );
        e.set_retry(true);
        Err(e)
    }

    /// Whether a failed attempt is sent again: only one the owner never worked on (`e`
    /// says it may be sent again: no connection made, the request never received, a
    /// pooled connection found closed), which may have met an owner that just left (its
    /// listeners close once it has handed its keys over, before the others hear of it).
    /// It is routed once more while [`HandOver::route_again`] allows; every attempt
    /// after the first is such a routing, counted. One whose owner gave the key up was
    /// counted as its answer came ([`HandOver::answered`]).
    pub fn retry(&self, passed: &mut Passed, e: &mut Error) {
        passed.cut = None;
        if self.enforcer.stop_is_due() {
            // Cut at a stop's bound (or met it): the owner may have the request.
            passed.unreached = Unreached::Silent;
            e.set_retry(false);
            return;
        }
        if passed.route_again {
            return;
        }
        let again = e.retry() && self.route_again(Some(&passed.owner), &mut passed.reroutes);
        passed.route_again = again;
        e.set_retry(again);
    }
}

/// A hand-over's connection to its owner while the owner's answer head is awaited:
/// shut down both ways when a graceful stop's bound comes (`Enforcer::stop_due`), so
/// that Pingora's read ends and the request is answered before the process ends. It
/// holds its own descriptor of the socket (a duplicate), so the one it shuts down is
/// always that connection's, whenever Pingora closes its own; dropped, the watch ends.
#[derive(Debug)]
pub(super) struct CutAtStop(tokio::task::JoinHandle<()>);

impl CutAtStop {
    /// Watches the connection Pingora holds as `fd`; `None` when it cannot be
    /// duplicated (then only the attempt's read timeout bounds the wait).
    fn watch(enforcer: Arc<Enforcer>, fd: RawFd) -> Option<CutAtStop> {
        // SAFETY: `fd` is the connection Pingora just made or reused for this attempt,
        // open for the whole call (`connected_to_upstream`); it is only duplicated.
        let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
        let own = borrowed.try_clone_to_owned().ok()?;
        Some(CutAtStop(tokio::spawn(async move {
            enforcer.stop_due().await;
            let _ = socket2::SockRef::from(&own).shutdown(std::net::Shutdown::Both);
        })))
    }
}

impl Drop for CutAtStop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
