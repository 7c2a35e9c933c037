//! Fleet mode: several instances, one politeness — each origin paced in memory by one
//! instance, its owner, and Redis off the request path.
//!
//! The layer, from the bottom:
//! * [`backend`]: the connection to Redis (one server, a Sentinel-managed master, or a
//!   Cluster), its health, Redis' clock, the Pub/Sub channel; what its health checks
//!   read: `memory` (an evicting policy, a full Redis) and `replicas` (a Sentinel
//!   master that accepts writes with no replica); `down` (why it is down);
//! * [`scripts`]: every Lua script, a `.lua` file each, behind one loader;
//! * [`membership`]: each instance registered with a lease and an epoch, renewed in the
//!   background; every instance learns of a join, a leave or a lapse within a renewal;
//!   and the data set's generation (a new one when Redis lost or may have lost writes);
//!   `redis_clock`: Redis' clock watched for forward steps, which fence takeovers;
//! * [`standing`]: what one instance knows of its own right to act, and every decision
//!   it takes about acting (pure: the model drives it too);
//! * [`ownership`]: one owner per pacing key, decided in Redis from the members' records
//!   and Redis' clock; taken over only once a vanished owner's exchanges must be over,
//!   handed over with its facts by a member leaving, and to the member its traffic comes
//!   from ([`traffic`]); `new_origins`: how many origins new to it each member may make
//!   it claim per second;
//! * [`channel`]: how a request is handed to its owner (mutual TLS from a fleet CA);
//!   `peers`: which live member a peer connection is;
//! * durable records: [`robots`] (the robots.txt copy), [`budgets`] (pay-per-crawl
//!   days), and an owned key's pause and backoff ([`ownership`]), each written when it
//!   happens, never per request;
//! * `model` (tests only): the ownership protocol's invariant checked over every
//!   interleaving, running the very scripts and [`standing`].
//!
//! [`Owners`] is the layer's door for the rest of robotsgate: where a request goes, may
//! this instance act for a key, what to record, and the graceful leave.
//!
//! **Per request: no Redis.** An owner paces its keys in memory with the one pacer a
//! single instance uses (`crate::pacing`); a member that is not the owner hands the
//! request over, to an owner it knows from a cache that membership keeps right.

pub mod backend;
pub mod budgets;
pub mod channel;
mod down;
pub mod membership;
mod memory;
mod new_origins;
pub mod ownership;
mod peers;
mod redis_clock;
mod replicas;
pub mod robots;
mod scripts;
pub mod standing;
mod traffic;

#[cfg(test)]
mod model;

use std::sync::Arc;
use std::time::Duration;

pub use backend::{Fleet, FleetEvent, Unavailable};
pub use budgets::FleetTally;
pub use channel::{answered_by, owner_gave_up, PeerContext, PeerTls, Reroutes, PEER_HEADER};
pub use membership::{Member, MemberState, Membership};
pub use ownership::{Inherited, Owner, Route};
pub use robots::{FetchLock, SharedRobots, ROBOTS_KEEP};

use ownership::{Ownership, REASSERT_EVERY};

use crate::pacing::ScheduleFacts;

/// The fleet as the rest of robotsgate sees it: membership, ownership and the channel
/// between instances, over one backend.
pub struct Owners {
    /// The backend.
    fleet: Arc<Fleet>,
    /// This instance's membership.
    members: Arc<Membership>,
    /// The keys owned, and the owners known.
    ownership: Arc<Ownership>,
    /// The channel's TLS.
    tls: Arc<PeerTls>,
}

impl Owners {
    /// The fleet's ownership over `fleet`: this instance reached at `peer` by the others
    /// through `tls`, leases of `lease`, acted on `grace` past their end without Redis;
    /// `hold` is the longest an exchange can hold a turn (a vanished owner's keys are
    /// taken over its lease end plus `grace` plus `hold`).
    pub fn new(
        fleet: Arc<Fleet>,
        tls: PeerTls,
        peer: String,
        lease: Duration,
        hold: Duration,
        grace: Duration,
    ) -> Arc<Owners> {
        let tls = Arc::new(tls);
        let members = Membership::new(fleet.clone(), tls.clone(), (lease, grace, hold), peer);
        let ownership = Ownership::new(fleet.clone(), members.clone());
        Arc::new(Owners {
            fleet,
            members,
            ownership,
            tls,
        })
    }

    /// Starts what runs beside requests: claims written again after a change of epoch or
    /// generation, and every [`REASSERT_EVERY`].
    pub fn run_in_background(self: &Arc<Self>) {
        let owners = self.clone();
        let mut changes = self.members.changes();
        self.fleet.spawn(async move {
            loop {
                let all = tokio::select! {
                    changed = changes.changed() => {
                        if changed.is_err() {
                            return;
                        }
                        false
                    }
                    () = tokio::time::sleep(REASSERT_EVERY) => true,
                };
                // Until every claim is written again (Redis may be away meanwhile).
                while !owners.ownership.reassert(all).await {
                    tokio::time::sleep(backend::HEALTH_EVERY).await;
                }
            }
        });
    }

    /// Where a request for pacing key `key` goes now (`from`: the member that handed
    /// it over, `None` for this instance's own client).
    pub async fn route(&self, key: &str, from: Option<&str>) -> Route {
        self.ownership.route(key, from).await
    }

    /// May `member` make this owner take on one more host new to it now (see
    /// [`Ownership::new_origin`])?
    pub fn new_origin(&self, member: &str) -> bool {
        self.ownership.new_origin(member)
    }

    /// The other member known to own `key`, when a request for it is to be handed there
    /// without routing it (see [`Ownership::peek`]).
    pub fn peek(&self, key: &str) -> Option<Owner> {
        self.ownership.peek(key)
    }

    /// May this instance act for `key` now: its owner, its lease valid by its own clock?
    pub fn acts_for(&self, key: &str) -> bool {
        self.ownership.acts_for(key)
    }

    /// [`Owners::acts_for`], a provisional claim whose wait is over confirmed first
    /// (see [`Ownership::acts_for_confirmed`]).
    pub async fn acts_for_confirmed(&self, key: &str) -> bool {
        self.ownership.acts_for_confirmed(key).await
    }

    /// [`Owners::acts_for_confirmed`], waited for while the key stays held here, for at
    /// most `within` (see [`Ownership::acts_for_when_due`]).
    pub async fn acts_for_when_due(&self, key: &str, within: std::time::Duration) -> bool {
        self.ownership.acts_for_when_due(key, within).await
    }

    /// Writes a fact of an owned key when it happens, for a new owner to start from.
    pub fn record(&self, key: &str, facts: ScheduleFacts) {
        self.ownership.record(key, facts);
    }

    /// The Pingora peer for `owner`'s peer channel, `None` when its address is not one.
    pub fn peer(&self, owner: &Owner) -> Option<pingora::upstreams::peer::HttpPeer> {
        let addr = owner.peer.parse().ok()?;
        Some(self.tls.peer(addr))
    }

    /// The peer listener's TLS configuration.
    pub fn server_tls(&self) -> Arc<rustls::ServerConfig> {
        self.tls.server_config()
    }

    /// May a connection from `from` reach the peer channel's handshake: an address a
    /// live member advertises, or one `fleet.peer_allow_clients` lists (see `peers`)?
    pub async fn peer_admitted(&self, from: std::net::IpAddr) -> bool {
        peers::admitted(&self.members, self.fleet.config(), from).await
    }

    /// The live member instance a peer connection from `from` is, its certificate
    /// naming member `name`; `None`: no such member is live (see `peers`).
    pub async fn peer_identified(&self, name: &str, from: std::net::IpAddr) -> Option<String> {
        peers::identified(&self.members, self.fleet.config(), name, from).await
    }

    /// The member this instance is (the name its certificate gives it).
    pub fn member_name(&self) -> &str {
        self.tls.member()
    }

    /// Is member instance `id` live now (a request it hands over is served)?
    pub fn is_live_member(&self, id: &str) -> bool {
        self.members.is_live(id)
    }

    /// Is this instance's lease valid by its own clock (its grace included)?
    pub fn lease_valid(&self) -> bool {
        self.members.lease_valid()
    }

    /// Who owns `key`, as this instance knows without asking Redis: `here`, another
    /// member's id, or `None`.
    pub fn known_owner(&self, key: &str) -> Option<String> {
        self.ownership.known(key)
    }

    /// This instance's member id.
    pub fn me(&self) -> &str {
        self.members.me()
    }

    /// Starts the graceful leave: no new ownership, no new turns for owned keys.
    pub fn leave(&self) {
        self.members.leave();
    }

    /// Resolves once this instance begins leaving: a request queued for a turn of a key
    /// it owns stops waiting here (the next owner paces it from the same facts).
    pub async fn leaves(&self) {
        self.members.leaves().await;
    }

    /// The keys this instance owns.
    pub fn owned(&self) -> Vec<String> {
        self.ownership.owned()
    }

    /// Hands `key` over with its groups' facts, Redis told again until `until` if it
    /// does not answer (see [`Ownership::release`]).
    pub async fn release(
        &self,
        key: &str,
        groups: &[ScheduleFacts],
        until: tokio::time::Instant,
    ) -> bool {
        self.ownership.release(key, groups, until).await
    }

    /// Releases `key` if `idle` still says it is (see [`Ownership::release_idle`]).
    pub async fn release_idle(
        &self,
        key: &str,
        idle: impl FnOnce() -> Option<Vec<ScheduleFacts>>,
    ) -> bool {
        self.ownership.release_idle(key, idle).await
    }

    /// The owned keys whose traffic comes from one other member, with that member (see
    /// [`Ownership::followers`]).
    pub fn followers(&self) -> Vec<(String, Member)> {
        self.ownership.followers()
    }

    /// The owned keys nobody asked for for `after` (see [`Ownership::idle`]).
    pub fn idle(&self, after: Duration) -> Vec<String> {
        self.ownership.idle(after)
    }

    /// Hands `key` to `heir` once `quiet` (see [`Ownership::hand_to`]).
    pub async fn hand_to(
        &self,
        key: &str,
        heir: &Member,
        quiet: impl Fn() -> Option<Vec<ScheduleFacts>>,
        within: Duration,
    ) -> bool {
        self.ownership.hand_to(key, heir, quiet, within).await
    }

    /// Forgets `owner` as its key's cached owner (see [`Ownership::forget`]).
    pub fn forget(&self, owner: &Owner) {
        self.ownership.forget(owner);
    }

    /// Leaves the membership, once every key was handed over and nothing is handed on
    /// any more; `false` when this instance is not leaving.
    pub async fn deregister(&self) -> bool {
        self.members.deregister().await
    }

    /// The members, their epochs and how many keys each owns (as this instance knows),
    /// for the admin API.
    pub fn view(&self) -> serde_json::Value {
        let members = self.members.members();
        let (seen, all) = &*members;
        let now = &self.members.aged(*seen);
        let counts = self.ownership.counts();
        let list: Vec<serde_json::Value> = all
            .values()
            .map(|m| {
                serde_json::json!({
                    "member": m.id,
                    "epoch": m.epoch,
                    "peer": m.peer,
                    "state": match m.state {
                        MemberState::Left => "left",
                        _ if m.expires_ms <= *now => "lapsed",
                        state => state.label(),
                    },
                    "lease_left_seconds": (m.expires_ms - now) as f64 / 1000.0,
                    "owns": counts.get(&m.id).copied().unwrap_or(0),
                    "me": m.id == self.me(),
                })
            })
            .collect();
        serde_json::json!({
            "me": self.me(),
            "epoch": self.members.epoch(),
            "lease_valid": self.members.lease_valid(),
            "unavailable": (!self.fleet.up()).then(|| self.fleet.down_reason()),
            "members": list,
        })
    }
}
