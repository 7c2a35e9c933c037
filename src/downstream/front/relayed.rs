//! The front's side of a plain request relayed to its origin's owner
//! ([`crate::handover::relay`]): which requests it takes, from the front's own read of
//! the head, and the exchange — Pingora's session over the client's connection, parsed
//! once, the owner asked, its answer passed on — or the proxy's path when the owner
//! never worked on the request.

use std::net::IpAddr;

use bytes::BytesMut;
use pingora::protocols::http::ServerSession;
use pingora::server::ShutdownWatch;

use super::{Connection, ProxyFront};
use crate::downstream::client_stream::ClientStream;
use crate::downstream::context::ClientContext;
use crate::downstream::drain::Serving;
use crate::downstream::head::Head;
use crate::handover::{self, relay, Asked, Candidate};

impl<A: pingora::apps::HttpServerApp + Send + Sync + 'static> ProxyFront<A> {
    /// The request's target and owner when the front relays it to its owner itself
    /// (fleet mode: an HTTP/1.1 `GET` or `HEAD` without a body, not handed over to this
    /// member, whose origin's owner is another member it knows): read from the front's
    /// own read of its head, nothing parsed again.
    pub(super) fn candidate(&self, head: &Head, context: &ClientContext) -> Option<Candidate> {
        // Alone, or not plain: nothing to read (a single instance pays for none of it).
        if !head.plain || context.handed.is_some() || !self.handover.in_fleet() {
            return None;
        }
        let target = context.target(head.target(), head.host()).ok()?;
        self.handover.candidate(target)
    }

    /// Relays a plain request to the member that owns its origin (`handover::relay`): the
    /// connection back, or `None` when it ends. Pingora parses the request once, for
    /// both the relay and the answer to the client; one the relay does not take after
    /// all, or that the owner never worked on, takes the proxy's path from its head
    /// again.
    pub(super) async fn hand_over(
        &self,
        head: Head,
        conn: Connection,
        candidate: Candidate,
        context: &mut ClientContext,
        client: Option<IpAddr>,
        shutdown: &ShutdownWatch,
    ) -> Option<Connection> {
        let serving = Serving::start();
        let started = std::time::Instant::now();
        let again = BytesMut::from(&head.bytes[..head.len]);
        let (mut session, pipelined) = self.prepare(head, conn, context, shutdown);
        let read = matches!(session.read_request().await, Ok(true));
        let relayable = read
            .then(|| {
                let request = session.req_header();
                let user = context.user.as_ref().map(|u| u.name.as_str());
                // Its client holding its share at the owner: the proxy's path answers.
                let share = self.handover.share(candidate.owner(), user, client)?;
                let own = context.peer_header(client)?;
                let mode = context.mode(request.raw_path());
                handover::relayable((candidate, share), request, own, mode)
            })
            .flatten();
        // Not taken after all (or its client holds its share at the owner, which the
        // proxy's path answers): the proxy's path, from the head again.
        let Some((sent, relayable)) = relayable else {
            drop(serving);
            let stream = client_stream(session)?;
            let session = self.session(stream, again, context, shutdown);
            return self.proxy(session, pipelined, context, shutdown).await;
        };
        let client_request = session.req_header();
        let upstream = match self.handover.ask(sent, &relayable, client_request).await {
            Asked::Answer(upstream) => upstream,
            Asked::NotSent => {
                // The owner never worked on it: routed once more on the proxy's path,
                // the count going on from this attempt.
                drop(serving);
                let mut rerouted = context.clone();
                let owner = Some(relayable.owner());
                self.handover.route_again(owner, &mut rerouted.rerouted);
                let stream = client_stream(session)?;
                let session = self.session(stream, again, context, shutdown);
                return self.proxy(session, pipelined, &rerouted, shutdown).await;
            }
            Asked::Silent => {
                let refusal = handover::unavailable(handover::Unreached::Silent);
                let mut stream = client_stream(session)?;
                crate::downstream::refuse::write_answer(&mut *stream, &refusal).await;
                relay::record(&relayable, refusal.status, started);
                return None;
            }
        };
        // The two largest futures, boxed apart: this one is boxed whole, and so copied,
        // on every request it relays (11 KiB before they and a new connection's in `ask`
        // were, 2.8 KiB since).
        let passed = Box::pin(self.handover.pass_on(&mut session, upstream, &relayable));
        let relayed = passed.await;
        relay::record(&relayable, relayed.unwrap_or(0), started);
        relayed.ok()?;
        let (stream, _) = Box::pin(session.finish()).await.ok()??.into_parts();
        self.resume(stream, pipelined).await
    }
}

/// The client's stream under a session whose request was read and nothing answered:
/// what the front wrapped it in, for the proxy's path or a refusal.
fn client_stream(session: ServerSession) -> Option<Box<ClientStream>> {
    let ServerSession::H1(h1) = session else {
        return None;
    };
    match h1.into_inner().into_any().downcast::<ClientStream>() {
        Ok(stream) => Some(stream),
        Err(_) => {
            log::error!("a session over another stream than the client's");
            None
        }
    }
}
