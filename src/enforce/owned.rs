//! Fleet mode at the enforcer: which member decides a request, and keeping that member's
//! right to do so.
//!
//! Before anything else is decided, a request's pacing key (its origin, or with
//! `pacing.key: address` the address it goes to) is routed ([`Enforcer::route`]): here
//! when this instance owns the key — a new owner first puts back what it inherits into
//! the key's schedules — to its owner otherwise ([`Decision::HandOver`]), and refused
//! (503) when no member may pace it now. A request handed over by another member is
//! never handed on: if its key moved meanwhile, it is refused, so a request crosses the
//! peer channel at most once.
//!
//! A turn granted to an owned key is checked once more ([`Enforcer::acts_for`]): an
//! instance stalled past its lease (by its own clock) must not start an exchange. A
//! pause or backoff an origin asks for is recorded when it starts, for a next owner.
//!
//! Costs: an owned key's route is a hash-map lookup; a key owned elsewhere, an LRU
//! lookup; Redis only the first time an instance meets a key (see `fleet::ownership`).

use std::net::IpAddr;
use std::sync::Arc;

use crate::fleet::{Owners, Route};
use crate::origin::store::OriginEntry;
use crate::policy::target::Origin;

use super::{Decision, Enforcer, Refusal};

/// Where a request's decision is made.
pub(super) enum Routed {
    /// Here: this instance owns its key (or there is no fleet).
    Here,
    /// Elsewhere, or nowhere now: the decision already made.
    Decided(Decision),
}

impl Enforcer {
    /// Routes a request for `origin` (going to `addrs`, its approved addresses; a
    /// request `handed` over by another member is never handed on).
    pub(super) async fn route(&self, origin: &Origin, addrs: &[IpAddr], handed: bool) -> Routed {
        let Some(owners) = &self.owners else {
            return Routed::Here;
        };
        let (key, entry) = self.fleet_key(origin, addrs);
        match owners.route(&key).await {
            Route::Here(inherited) => {
                if let Some(inherited) = inherited {
                    self.pacer
                        .inherit(entry.place(), inherited.not_before, &inherited.groups);
                }
                Routed::Here
            }
            Route::Peer(owner) if !handed => Routed::Decided(Decision::HandOver(owner)),
            Route::Peer(_) => Routed::Decided(Decision::Refuse(Refusal::FleetUnavailable {
                why: "its owner changed while the request was handed over",
            })),
            Route::Unavailable(why) => {
                Routed::Decided(Decision::Refuse(Refusal::FleetUnavailable { why }))
            }
        }
    }

    /// The pacing key of a request for `origin` going to `addrs` and the entry its
    /// schedules live in: the origin's, or with `pacing.key: address` the first
    /// address's (the one it connects to).
    fn fleet_key(&self, origin: &Origin, addrs: &[IpAddr]) -> (String, Arc<OriginEntry>) {
        let entry = match addrs.first() {
            Some(ip) if self.pacer.config().key == crate::config::PacingKey::Address => {
                self.store.address(*ip)
            }
            _ => self.store.entry(origin),
        };
        (key_of(&entry), entry)
    }

    /// May this instance start an exchange on `entry`'s key now (always, alone)?
    pub(super) fn acts_for(&self, entry: &OriginEntry) -> bool {
        self.owners
            .as_ref()
            .is_none_or(|owners| owners.acts_for(&key_of(entry)))
    }

    /// The longest an owner can take to start answering a request handed to it: its
    /// longest wait for a turn, then the longest an exchange can hold one.
    pub fn owner_answers_within(&self) -> std::time::Duration {
        self.pacer.config().max_wait_seconds.duration() + self.bounds.longest_hold()
    }

    /// The fleet's door, in fleet mode.
    pub(crate) fn owners(&self) -> Option<&Arc<Owners>> {
        self.owners.as_ref()
    }

    /// Leaves the fleet gracefully: no new turns for the keys this instance owns, their
    /// exchanges left to end (at most the longest hold), then each key handed over with
    /// its schedules' facts, and the membership left. Alone: nothing to do.
    pub async fn leave_fleet(&self) {
        let Some(owners) = &self.owners else {
            return;
        };
        owners.leave();
        let keys = owners.owned();
        log::info!("fleet: leaving; handing over {} origins", keys.len());
        let deadline = tokio::time::Instant::now() + self.bounds.longest_hold();
        let mut handed = 0;
        for key in keys {
            let entry = self.entry_of_key(&key);
            if let Some(entry) = &entry {
                while entry.schedules().busy() && tokio::time::Instant::now() < deadline {
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                }
            }
            let facts = entry.map(|e| e.schedules().facts()).unwrap_or_default();
            handed += usize::from(owners.release(&key, &facts).await);
        }
        owners.deregister().await;
        log::info!("fleet: left; {handed} origins handed over");
    }

    /// The store's entry of a pacing key, if it is held.
    fn entry_of_key(&self, key: &str) -> Option<Arc<OriginEntry>> {
        if let Some(ip) = key.strip_prefix("addr:") {
            return Some(self.store.address(ip.parse().ok()?));
        }
        self.store.peek(&Origin::parse(key).ok()?)
    }
}

/// The pacing key of `entry`'s schedules: `addr:<ip>` for an address's
/// (`OriginStore::address` keeps them under port 0), the origin otherwise.
pub(super) fn key_of(entry: &OriginEntry) -> String {
    match &entry.origin().host {
        crate::policy::target::Host::Ip(ip) if entry.origin().port == 0 => format!("addr:{ip}"),
        _ => entry.origin().to_string(),
    }
}
