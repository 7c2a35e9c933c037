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
use std::net::SocketAddr;
use std::sync::Arc;

use crate::downstream::access::User;
use crate::policy::target::Origin;
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
}

/// Where a request handed over by another member came from.
#[derive(Clone, Debug)]
pub struct Handed {
    /// The member that handed it over (its id; empty when it did not say).
    pub member: String,
    /// Its client's address there.
    pub client: Option<std::net::IpAddr>,
}

tokio::task_local! {
    static CURRENT: Cell<Option<ClientContext>>;
}

impl ClientContext {
    /// Runs `request` (the proxy's future for one request) with this context.
    pub async fn scope<F: Future>(self, request: F) -> F::Output {
        CURRENT.scope(Cell::new(Some(self)), request).await
    }

    /// The context of the request being served, handed over once (Pingora makes a
    /// request's context once); `None` outside [`ClientContext::scope`] (a request that
    /// did not come through the front) or when already taken.
    pub fn take() -> Option<ClientContext> {
        CURRENT.try_with(Cell::take).ok().flatten()
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
