//! What the front knows about a request that Pingora's session does not, and how the
//! proxy pipeline gets it.
//!
//! The front serves every request — an HTTP/1.1 request or an HTTP/2 stream — by
//! running the proxy's future inside [`ClientContext::scope`]; the proxy takes it back
//! with [`ClientContext::take`] when it makes the request's context. A task-local
//! rather than Pingora's per-connection user context: that one is HTTP/1-only and typed
//! `dyn Any`; this is typed, moves rather than copies (the front's one clone per
//! request, two `Arc`s and an address, is all it costs), and reaches every phase of the
//! request, which runs in that one future.

use std::cell::Cell;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use crate::downstream::access::User;
use crate::fleet::PeerContext;
use crate::policy::target::{Origin, Scheme, Target, TargetError};
use crate::telemetry::metrics::Mode;
pub use crate::telemetry::metrics::Protocol;

/// Which tunnel, user and original destination a request came with.
#[derive(Clone, Debug, Default)]
pub struct ClientContext {
    /// Inside an intercepted CONNECT tunnel: the origin every request there is for
    /// (shared: every request in the tunnel gets it).
    pub tunnel: Option<Arc<Origin>>,
    /// The authenticated user, when `access.credentials_file` is set.
    pub user: Option<Arc<User>>,
    /// On a redirected connection (transparent mode): where it was going, which is where
    /// every request on it goes.
    pub destination: Option<SocketAddr>,
    /// The protocol the request arrived in.
    pub protocol: Protocol,
    /// Handed over by another fleet member: its member id (the request is never handed
    /// on), and the client it came from there.
    pub handed: Option<Handed>,
    /// An HTTP/2 stream's flag, set when its exchange with the origin starts: from then
    /// on a reset of the stream does not end the exchange (`h2_stream`).
    pub started: Option<Arc<crate::downstream::h2_stream::Started>>,
    /// The `robotsgate-peer` value last sent for a request relayed from this connection,
    /// with the context it encodes: a next one with the same context (the usual case:
    /// same client, same user) sends it again rather than encoding it anew.
    pub relayed_as: Option<Arc<(PeerContext, http::HeaderValue)>>,
    /// How many times the request was routed once more before it reached the proxy's
    /// pass (a relay whose owner never worked on it): the count goes on from there.
    pub rerouted: crate::fleet::Reroutes,
}

/// Where a request handed over by another member came from.
#[derive(Clone, Debug)]
pub struct Handed {
    /// The member that handed it over (its instance id, from the connection's
    /// certificate and address): shared, as every request on the connection and each
    /// clone of the context name it.
    pub member: Arc<str>,
    /// Its client's address there.
    pub client: Option<std::net::IpAddr>,
    /// The `robotsgate-peer` value this context was read from (`None` before the
    /// connection's first request): a next request on the connection with the same value
    /// keeps the context, read once.
    pub read_from: Option<Arc<[u8]>>,
}

tokio::task_local! {
    // Boxed: the task-local's value is swapped in and out on every poll of the request's
    // future.
    static CURRENT: Cell<Option<Box<ClientContext>>>;
}

impl ClientContext {
    /// Runs `request` (the proxy's future for one request) with this context.
    pub async fn scope<F: Future>(self, request: F) -> F::Output {
        CURRENT
            .scope(Cell::new(Some(Box::new(self))), request)
            .await
    }

    /// The context of the request being served, handed over once (Pingora makes a
    /// request's context once); `None` outside [`ClientContext::scope`] (a request that
    /// did not come through the front) or when already taken.
    pub fn take() -> Option<ClientContext> {
        CURRENT
            .try_with(Cell::take)
            .ok()
            .flatten()
            .map(|context| *context)
    }

    /// The target of a request whose target is `raw` (as sent) and `Host` is `host`,
    /// as this context reads it: the redirected connection's destination, the tunnel's
    /// origin, or the target itself (`http` for an origin-form one).
    pub fn target(&self, raw: &[u8], host: Option<&[u8]>) -> Result<Target, TargetError> {
        match (&self.tunnel, self.destination) {
            (tls, Some(to)) => Target::redirected(raw, host, to, tls.as_deref()),
            (Some(tunnel), None) => Target::in_tunnel(tunnel, raw, host),
            (None, None) => Target::from_request(raw, host, Scheme::Http),
        }
    }

    /// How a request whose target is `raw` arrived.
    pub fn mode(&self, raw: &[u8]) -> Mode {
        match (self.destination.is_some(), self.tunnel.is_some()) {
            (true, true) => Mode::TransparentTls,
            (true, false) => Mode::Transparent,
            (false, true) => Mode::Tunnel,
            // Origin-form on the proxy listener: a client that treats it as the origin.
            (false, false) if raw.first() == Some(&b'/') => Mode::Transparent,
            (false, false) => Mode::Explicit,
        }
    }

    /// Who sends a request in this context, as the agent rules see it: `client`, the
    /// address its connection came from (a request handed over names its client there
    /// instead), with `user_agent`, and the proxy user's tokens and purposes. Every path
    /// builds its requester here (a request, an HTTP/2 stream, a tunnel, one handed
    /// over), so what chooses a request's robots.txt group is read in one place.
    pub fn requester<'a>(
        &'a self,
        client: Option<IpAddr>,
        user_agent: Option<&'a str>,
    ) -> crate::policy::agent::Requester<'a> {
        let user = self.user.as_deref();
        crate::policy::agent::Requester {
            client: match &self.handed {
                Some(handed) => handed.client,
                None => client,
            },
            user_agent,
            tokens: user.map(|u| u.tokens.as_slice()),
            user: user.map(|u| u.name.as_str()),
            purposes: user.map(|u| u.purposes),
            handed: self.handed.is_some(),
        }
    }

    /// What the owner of a request handed over is told of it: `client`, its client's
    /// address, and this context (the member it comes from is its connection's).
    pub fn peer_context(&self, client: Option<IpAddr>) -> PeerContext {
        PeerContext {
            client,
            user: self.user.as_ref().map(|u| u.name.clone()),
            tunnel: self.tunnel.as_ref().map(|t| t.to_string()),
            destination: self.destination,
            http2: self.protocol == Protocol::Http2,
        }
    }

    /// [`crate::handover::peer_header`] of [`ClientContext::peer_context`]: encoded once
    /// for as long as it stays the same on this connection.
    pub fn peer_header(&mut self, client: Option<IpAddr>) -> Option<http::HeaderValue> {
        let own = self.peer_context(client);
        if let Some(memo) = self.relayed_as.as_deref().filter(|memo| memo.0 == own) {
            return Some(memo.1.clone());
        }
        let value = crate::handover::peer_header(&own).ok()?;
        self.relayed_as = Some(Arc::new((own, value.clone())));
        Some(value)
    }

    /// The request holds its turn: its exchange with the origin has started, and only
    /// the origin's end ends it (HTTP/1.1's client stream needs no word: it is a sink
    /// once the client has gone, and Pingora is told to tolerate its hang-up).
    pub fn exchange_started(&self) {
        if let Some(started) = &self.started {
            started.set();
        }
    }
}
