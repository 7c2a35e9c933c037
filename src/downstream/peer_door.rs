//! The peer channel's door (fleet mode): what a connection passes before another
//! member's requests are read from it.
//!
//! In order, each refusal closing the connection and counted in
//! `robotsgate_downstream_refusals_total{reason}`:
//! 1. a slot of the peer channel's own (`fleet.peer_max_connections` in all,
//!    `fleet.peer_max_connections_per_client` per address; the proxy port's slots are
//!    its clients'), held while the connection is open;
//! 2. its address: one a live member advertises, or in `fleet.peer_allow_clients`
//!    (before any TLS work);
//! 3. the mutual TLS handshake, within the first-byte timeout (at least 5 s): a
//!    certificate from the fleet CA;
//! 4. the member that certificate names, live at that address: the connection is that
//!    member's from then on, whatever its requests' headers say;
//! 5. a slot of that member's (`fleet.peer_max_connections_per_member`, from however
//!    many addresses), held while the connection is open.
//!
//! Each request on it is then served only while that member is live
//! ([`PeerDoor::still_member`]), with the context its header gives
//! ([`PeerDoor::handed_context`]), within what that member may name
//! ([`crate::downstream::peer_scope`]), and the connection's member.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use pingora::protocols::l4::stream::Stream as L4Stream;
use pingora::protocols::Stream;

use crate::downstream::access::AccessPolicy;
use crate::downstream::context::{ClientContext, Handed};
use crate::downstream::peer_scope::{OutOfScope, PeerScope};
use crate::downstream::slots::{Full, Slot, SlotKind, Slots};
use crate::fleet::{Owners, PeerContext};
use crate::policy::target::Origin;
use crate::telemetry::metrics::{self, RefusalReason};

/// What admits a connection to the peer channel.
pub struct PeerDoor {
    /// The listener's TLS: a client certificate from the fleet CA required.
    tls: Arc<rustls::ServerConfig>,
    /// The fleet: who the live members are.
    owners: Arc<Owners>,
    /// The peer channel's connection slots.
    slots: Arc<Slots>,
    /// The longest a handshake may take.
    handshake: Duration,
    /// What each member may name.
    scope: PeerScope,
    /// The connections each member holds open.
    members: Arc<MemberSlots>,
}

/// The peer connections each member holds open, each taken from at most `max`
/// (`fleet.peer_max_connections_per_member`): a member's key (a stolen one, a member
/// gone wrong) holds at most that many requests in flight here, from however many
/// addresses (an HTTP/1.1 connection carries one request at a time; a tunnel's HTTP/2
/// streams are bounded per connection by `limits.http2`).
struct MemberSlots {
    /// The most one member holds.
    max: usize,
    /// Open connections, by member instance.
    open: std::sync::Mutex<std::collections::HashMap<String, usize>>,
}

/// One member's connection, given back when dropped.
pub struct MemberSlot {
    /// Whose.
    member: String,
    /// Where it is counted.
    slots: Arc<MemberSlots>,
}

impl MemberSlots {
    /// A slot for `member`, unless it holds `max` already.
    fn take(self: &Arc<Self>, member: &str) -> Option<MemberSlot> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let held = open.entry(member.to_string()).or_insert(0);
        if *held >= self.max {
            return None;
        }
        *held += 1;
        Some(MemberSlot {
            member: member.to_string(),
            slots: self.clone(),
        })
    }
}

impl Drop for MemberSlot {
    fn drop(&mut self) {
        let mut open = self.slots.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(held) = open.get_mut(&self.member) {
            *held -= 1;
            if *held == 0 {
                open.remove(&self.member);
            }
        }
    }
}

/// A connection admitted: its stream after the handshake, the member it is, and its slot.
pub struct Admitted {
    /// The TLS stream.
    pub stream: Stream,
    /// The member instance (its id) the certificate and address say it is.
    pub member: String,
    /// Its slot, given back when the connection closes.
    pub slot: Slot,
    /// Its member's slot, given back with it.
    pub member_slot: MemberSlot,
}

impl PeerDoor {
    /// The door of `owners`' peer channel: `max` connections in all, `per_client` from
    /// one address, `per_member` from one member, handshakes within `handshake`.
    pub fn new(
        owners: Arc<Owners>,
        (max, per_client, per_member): (usize, usize, usize),
        handshake: Duration,
        scope: PeerScope,
    ) -> PeerDoor {
        PeerDoor {
            tls: owners.server_tls(),
            owners,
            slots: Slots::new(max, per_client),
            handshake: handshake.max(Duration::from_secs(5)),
            scope,
            members: Arc::new(MemberSlots {
                max: per_member,
                open: std::sync::Mutex::default(),
            }),
        }
    }

    /// Admits `stream` from `from` (see the module docs); `None`: refused, counted and
    /// logged.
    pub async fn admit(&self, stream: Stream, from: Option<IpAddr>) -> Option<Admitted> {
        let Some(from) = from else {
            return refused(RefusalReason::PeerAddress, None, "no peer address");
        };
        let slot = match self.slots.take(Some(from), SlotKind::Peer) {
            Ok(slot) => slot,
            Err(Full::Client) => {
                let why = "fleet.peer_max_connections_per_client held";
                return refused(RefusalReason::PeerClientConnectionLimit, Some(from), why);
            }
            Err(Full::All) => {
                let why = "fleet.peer_max_connections held";
                return refused(RefusalReason::PeerConnectionLimit, Some(from), why);
            }
        };
        if !self.owners.peer_admitted(from).await {
            let why = "no live member advertises this address (fleet.peer_allow_clients)";
            return refused(RefusalReason::PeerAddress, Some(from), why);
        }
        let (stream, name) = self.handshake(stream, from).await?;
        let Some(member) = self.owners.peer_identified(&name, from).await else {
            if name == self.owners.member_name() {
                // This member checking, before it joins, that its peer channel answers.
                return None;
            }
            let why = format!("its certificate names member {name:?}, not live at this address");
            return refused(RefusalReason::PeerNotMember, Some(from), &why);
        };
        let Some(member_slot) = self.members.take(&member) else {
            let why = format!("{member} holds fleet.peer_max_connections_per_member already");
            return refused(RefusalReason::PeerMemberConnectionLimit, Some(from), &why);
        };
        Some(Admitted {
            stream,
            member,
            slot,
            member_slot,
        })
    }

    /// The mutual TLS handshake, and the member name the client's certificate gives.
    async fn handshake(&self, stream: Stream, from: IpAddr) -> Option<(Stream, String)> {
        let Ok(l4) = stream.into_any().downcast::<L4Stream>() else {
            log::error!("the peer listener is not plain TCP");
            return None;
        };
        let acceptor = pingora::listeners::tls::Acceptor::from_server_config(self.tls.clone());
        let tls = match tokio::time::timeout(self.handshake, acceptor.tls_handshake(*l4)).await {
            Ok(Ok(tls)) => tls,
            Ok(Err(e)) => {
                let why = format!("no certificate from the fleet CA: {e}");
                return refused(RefusalReason::PeerUnauthenticated, Some(from), &why);
            }
            Err(_) => {
                let why = "no handshake in time";
                return refused(RefusalReason::PeerUnauthenticated, Some(from), why);
            }
        };
        let stream: Stream = Box::new(tls);
        let digest = stream.get_ssl_digest();
        match crate::fleet::channel::member_in(digest.as_deref()).map(str::to_string) {
            Some(name) => Some((stream, name)),
            None => {
                let why = "its certificate names no member (robotsgate fleet-cert --member)";
                refused(RefusalReason::PeerNotMember, Some(from), why)
            }
        }
    }

    /// Is `member` still live: may a request it hands over now be served?
    pub fn still_member(&self, member: &str) -> bool {
        self.owners.is_live_member(member)
    }
}

/// Counts and logs a refused peer connection.
fn refused<T>(reason: RefusalReason, from: Option<IpAddr>, why: &str) -> Option<T> {
    metrics::record_refusal(reason);
    log::warn!("peer channel: a connection from {from:?} was refused: {why}");
    None
}

/// Why a handed-over request's context was not taken.
#[derive(Debug)]
pub enum Unheard {
    /// Its `robotsgate-peer` header is unreadable, or names a user this owner does not
    /// know or an unreadable tunnel origin.
    Unreadable,
    /// It names what its member may not (`fleet.peer_scope`).
    OutOfScope(OutOfScope),
}

impl PeerDoor {
    /// A handed-over request's context: what `member` (the connection's instance, named
    /// by its certificate) says of it in its `robotsgate-peer` header, whose value is `value`,
    /// when that is readable, names users `access` knows, and stays within `member`'s
    /// scope.
    pub fn handed_context(
        &self,
        access: &AccessPolicy,
        value: &[u8],
        member: Arc<str>,
    ) -> Result<ClientContext, Unheard> {
        let peer = PeerContext::decode(value).ok_or(Unheard::Unreadable)?;
        let name = crate::fleet::channel::member_of(&member);
        self.scope
            .admits(name, peer.user.as_deref(), peer.client)
            .map_err(Unheard::OutOfScope)?;
        // A member authenticates every client this owner would (the members share one
        // configuration), but for redirected connections, which carry no credentials.
        if peer.user.is_none() && peer.destination.is_none() && access.requires_user() {
            return Err(Unheard::OutOfScope(OutOfScope::NoUser));
        }
        let user = access
            .user_named(peer.user.as_deref())
            .map_err(|_| Unheard::Unreadable)?;
        let tunnel = match &peer.tunnel {
            Some(origin) => Some(Arc::new(
                Origin::parse(origin).map_err(|_| Unheard::Unreadable)?,
            )),
            None => None,
        };
        Ok(ClientContext {
            tunnel,
            user,
            destination: peer.destination,
            protocol: if peer.http2 {
                metrics::Protocol::Http2
            } else {
                metrics::Protocol::Http1
            },
            handed: Some(Handed {
                member,
                client: peer.client,
                read_from: Some(value.into()),
            }),
            started: None,
            relayed_as: None,
            rerouted: Default::default(),
        })
    }
}
