//! The hand-over, in one room: how a member that does not own a request's origin
//! carries it to the member that does (fleet mode).
//!
//! **The sequence.** Every request is routed the same way, whatever door it came in by:
//!
//! 1. *Route* — [`crate::enforce`] decides, from Redis' word on who owns the origin
//!    (`enforce/owned.rs`): here (this member paces it), another member (its
//!    [`Owner`]), or nobody reachable (a refusal).
//! 2. *Pace* — here: a turn from the one in-memory pacer, and the exchange.
//! 3. *Hand over* — to another member, on the path the request fits:
//!    * a plain HTTP/1.1 `GET` or `HEAD` whose owner is known is relayed by the front
//!      itself ([`relay`]: [`HandOver::candidate`], [`relayable`], [`HandOver::ask`],
//!      [`HandOver::pass_on`]), one Pingora session each side;
//!    * a blind tunnel is handed over whole ([`HandOver::tunnel`]): a `CONNECT` to the
//!      owner, which paces its start;
//!    * anything else (a body, an HTTP/2 stream, a first request before the owner is
//!      known, one the relay could not deliver) takes the proxy's pass with the owner's
//!      peer channel as its upstream ([`pass`]: [`Passed`], one method per phase).
//! 4. *Route again* — when the owner never received the request (`owner.rs`'s
//!    `never_received`) or answered that it gave the key up (`gave_up`), or this member
//!    gave the key up while the request queued for its turn: [`HandOver::route_again`],
//!    the one rule every path applies, forgets the owner and routes the request once
//!    more from step 1, as often as [`Reroutes`] allows. The count follows the request
//!    from one path to the next (a relay that could not deliver hands the proxy pass its
//!    count). Nothing else is sent twice; a request that cannot be carried is answered
//!    by [`unavailable`], the one place its 503 is built.
//! 5. *Stop* — a graceful stop's bound (`enforce/stop.rs`) ends every path's wait for
//!    the owner's answer, whenever the request was handed over: the relay's and the
//!    tunnel's waits end with `Enforcer::stop_due`, the proxy pass's connection is shut
//!    down (`pass.rs`). The request is answered as by an owner silent past its bound.
//!
//! The owner takes a handed request from the top (its peer door,
//! `downstream/peer_door.rs`, admits only live members; the member it reads is the
//! certificate's): it judges, paces and signs it. This member only carries it.
//!
//! **One HTTP implementation.** Both hops read and write HTTP/1.1 with Pingora's
//! sessions; an answer whose end its framing does not give closes the connection it
//! came on. Connections to owners are mutual TLS (rustls, `fleet::channel`): the relay's
//! kept idle in a pool of its own per listener (`pool.rs`), one per tunnel.
//!
//! Costs (`bench/fleet_bench.py`, `docs/fleet.md`): a relayed request adds one kept
//! connection's exchange to the owner — a parse of the owner's answer head, a copy of
//! each body chunk, a lock and a hash lookup to take the connection and to give it back.
//!
//! **Its other files:** `owner.rs` (what passes between a member and an origin's owner
//! on every path, and the 503 when it cannot be carried), `pass.rs` (the proxy pass),
//! `relay.rs` (the front's relay), `pool.rs` (the relay's idle connections),
//! `share.rs` (this member's connections at each owner, divided among its clients),
//! `tunnel.rs` (a blind tunnel handed to its owner).

mod owner;
pub mod pass;
mod pool;
pub mod relay;
mod share;
mod tunnel;

use std::sync::Arc;
use std::time::Duration;

use pingora::connectors::TransportConnector;

pub use owner::{peer_header, unavailable, Unreached};
pub use pass::Passed;
pub use relay::{relayable, Asked, Candidate, Relayable};
pub use tunnel::Tunnelled;

use crate::config::Config;
use crate::enforce::Enforcer;
use crate::fleet::{Owner, Reroutes};
use pool::Pool;
pub use share::Share;
use share::Shares;

/// The one entry to the hand-over the front, the tunnels and the proxy share: the
/// fleet's door (owners, their peer channels, how long an owner may take to answer),
/// the connector that opens mutual-TLS connections to owners, and the relay's idle ones.
pub struct HandOver {
    /// Owners and their peers.
    enforcer: Arc<Enforcer>,
    /// Opens connections to owners' peer channels.
    connector: TransportConnector,
    /// The relay's idle connections to owners.
    pool: Pool,
    /// The longest wait to connect to an owner.
    connect_timeout: Duration,
    /// This member's connections at each owner, divided among its clients (one count
    /// for every listener).
    shares: Arc<Shares>,
    /// `limits.tunnel_idle_seconds`: a tunnel carrying nothing this long is closed.
    tunnel_idle: Duration,
}

impl HandOver {
    /// The hand-over of `enforcer`'s fleet, with `config`'s bounds: owners connected to
    /// within `upstream.connect_timeout_seconds`, pooled connections kept idle for half
    /// of `limits.idle_timeout_seconds`, each owner's
    /// `fleet.peer_max_connections_per_member` divided among this member's clients, and
    /// tunnels closed after `limits.tunnel_idle_seconds` carrying nothing.
    pub fn new(enforcer: Arc<Enforcer>, config: &Config) -> HandOver {
        HandOver {
            enforcer,
            connector: TransportConnector::new(None),
            pool: Pool::new(config.limits.idle_timeout_seconds.duration() / 2),
            connect_timeout: config.upstream.connect_timeout_seconds.duration(),
            shares: Shares::new(config.fleet.peer_max_connections_per_member),
            tunnel_idle: config.limits.tunnel_idle_seconds.duration(),
        }
    }

    /// The same hand-over with a pool of its own, for another listener: a connection
    /// is polled by the runtime that opened it, so each listener's runtime keeps its
    /// own (see `proxy/server.rs`, `OriginProxies`). The shares are counted together.
    pub fn another(&self) -> HandOver {
        HandOver {
            enforcer: self.enforcer.clone(),
            connector: TransportConnector::new(None),
            pool: Pool::new(self.pool.keep()),
            connect_timeout: self.connect_timeout,
            shares: self.shares.clone(),
            tunnel_idle: self.tunnel_idle,
        }
    }

    /// `limits.tunnel_idle_seconds`: how long a tunnel may carry nothing.
    pub fn tunnel_idle(&self) -> Duration {
        self.tunnel_idle
    }

    /// A place in this member's connections at `owner` for a hand-over from `client` as
    /// `user` (see `share.rs`); `None`: its tenant holds its share, and
    /// `unavailable(Unreached::OverShare)` is the answer (nothing is sent to the owner).
    pub fn share(
        &self,
        owner: &Owner,
        user: Option<&str>,
        client: Option<std::net::IpAddr>,
    ) -> Option<Share> {
        self.shares.take(&owner.member, user, client)
    }

    /// Whether this instance is a fleet member (alone, nothing is ever handed over).
    pub fn in_fleet(&self) -> bool {
        self.enforcer.owners().is_some()
    }

    /// How long an owner may take to answer a request handed to it.
    pub fn owner_answers_within(&self) -> Duration {
        self.enforcer.owner_answers_within()
    }

    /// The rule every path applies when a request's owner never worked on it (it never
    /// received the request, or gave the key up), or this member gave the key up while
    /// the request queued (`owner`: `None`): the owner is forgotten (the next request
    /// looks it up again), and the request is routed once more, counted in
    /// `reroutes`, while [`Reroutes`] allows (`true`).
    pub fn route_again(&self, owner: Option<&Owner>, reroutes: &mut Reroutes) -> bool {
        if let Some(owner) = owner {
            self.enforcer.forget_owner(owner);
        }
        match reroutes.again() {
            Some(again) => {
                *reroutes = again;
                true
            }
            None => false,
        }
    }
}
