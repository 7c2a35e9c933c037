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
//! A turn granted to an owned key is checked once more ([`Enforcer::pace`] asks
//! [`Owners::acts_for`](crate::fleet::Owners::acts_for)): an instance stalled past its
//! lease (by its own clock) must not start an exchange. A pause or backoff an origin
//! asks for is recorded when it starts, for a next owner.
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
    /// request `handed` over by another member, named, is never handed on).
    pub(super) async fn route(
        &self,
        origin: &Origin,
        addrs: &[IpAddr],
        handed: Option<&str>,
    ) -> Routed {
        let Some(owners) = &self.owners else {
            return Routed::Here;
        };
        let entry = self.keyed_entry(origin, addrs);
        match owners.route(entry.pacing_key(), handed).await {
            Route::Here(inherited) => {
                if let Some(inherited) = inherited {
                    self.pacer
                        .inherit(entry.place(), inherited.not_before, &inherited.groups);
                    if let (true, Some(until)) = (inherited.vanished, inherited.not_before) {
                        let longer = self.overrides.find(origin);
                        let longer = longer.and_then(|a| a.entry.delay_seconds).map(|s| s.get());
                        self.pacer.vanished(entry.place(), until, longer);
                    }
                }
                Routed::Here
            }
            Route::Peer(owner) if handed.is_none() => Routed::Decided(Decision::HandOver(owner)),
            Route::Peer(_) => Routed::Decided(Decision::Refuse(Refusal::FleetUnavailable {
                why: "its owner changed while the request was handed over",
            })),
            Route::Unavailable(why) => {
                Routed::Decided(Decision::Refuse(Refusal::FleetUnavailable { why }))
            }
        }
    }

    /// The entry whose schedules (and pacing key) a request for `origin` going to
    /// `addrs` is paced by: the origin's, or with `pacing.key: address` the first
    /// address's (the one it connects to).
    fn keyed_entry(&self, origin: &Origin, addrs: &[IpAddr]) -> Arc<OriginEntry> {
        match addrs.first() {
            Some(ip) if self.pacer.config().key == crate::config::PacingKey::Address => {
                self.store.address(*ip)
            }
            _ => self.store.entry(origin),
        }
    }

    /// The member a request of this instance's clients for `origin` is handed to, when
    /// that is known at once: another member owns the origin's key, as learnt (with
    /// `pacing.key: origin`; an address key needs the origin's addresses first).
    /// `None`: the request is routed ([`Enforcer::route`]).
    pub fn known_owner(&self, origin: &Origin) -> Option<crate::fleet::Owner> {
        let owners = self.owners.as_ref()?;
        if self.pacer.config().key != crate::config::PacingKey::Origin {
            return None;
        }
        owners.peek(self.store.entry(origin).pacing_key())
    }

    /// The longest an owner can take to start answering a request handed to it: its
    /// longest wait for a turn, then the longest an exchange can hold one. During a
    /// graceful stop, no longer than is left before waiting requests are answered
    /// (`stop.rs`): a request handed over is answered before the process ends.
    pub fn owner_answers_within(&self) -> std::time::Duration {
        let within = self.pacer.config().max_wait_seconds.duration() + self.bounds.longest_hold();
        self.stop.bound(within)
    }

    /// Resolves when a graceful stop's bound has come for what still waits (never
    /// without a stop): a request handed to an owner before the stop began stops
    /// waiting for its answer then, as one handed over after it does by its bound.
    pub async fn stop_due(&self) {
        self.stop.due().await;
    }

    /// Has a graceful stop's bound come for what still waits?
    pub fn stop_is_due(&self) -> bool {
        self.stop.is_due()
    }

    /// A graceful stop began: requests still waiting for a turn here or for an owner's
    /// answer are answered before `by`.
    pub fn stopping(&self, by: tokio::time::Instant) {
        self.stop.until(by);
    }

    /// The fleet's door, in fleet mode.
    pub(crate) fn owners(&self) -> Option<&Arc<Owners>> {
        self.owners.as_ref()
    }

    /// Leaves the fleet gracefully: no new turns for the keys this instance owns, their
    /// exchanges left to end (at most the longest hold, and no later than `by`), then
    /// each key handed over with its schedules' facts. A key still busy at `by` (a stop's
    /// deadline, before the longest hold) is not handed over: its facts cannot say when
    /// they end, so it is left to lapse, and its next owner waits as for a vanished one.
    /// A release Redis does not answer is sent again until `by`.
    /// It stays a member (`leaving`) until [`Enforcer::left_fleet`], so the next owners
    /// still admit the requests it hands on meanwhile (those that were queued here).
    /// Alone: nothing to do.
    pub async fn leave_fleet(&self, by: tokio::time::Instant) {
        let Some(owners) = &self.owners else {
            return;
        };
        owners.leave();
        let keys = owners.owned();
        log::info!("fleet: leaving; handing over {} origins", keys.len());
        let longest = tokio::time::Instant::now() + self.bounds.longest_hold();
        let (deadline, cut) = (longest.min(by), by < longest);
        // Each key is handed over as soon as its own exchanges end: one origin's slow
        // answer holds no other back.
        let handing = keys.into_iter().map(|key| async move {
            let entry = self.store.peek_key(&key);
            if let Some(entry) = &entry {
                while entry.schedules().busy() && tokio::time::Instant::now() < deadline {
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                }
                if cut && entry.schedules().busy() {
                    log::warn!("fleet: leaving; {key} still has exchanges running at the stop's deadline: left to lapse");
                    return 0;
                }
            }
            let facts = entry.map(|e| e.schedules().facts()).unwrap_or_default();
            usize::from(owners.release(&key, &facts, by).await)
        });
        let handed: usize = futures_util::future::join_all(handing)
            .await
            .into_iter()
            .sum();
        log::info!("fleet: leaving; {handed} origins handed over");
    }

    /// Leaves the membership for good, after [`Enforcer::leave_fleet`] and once nothing
    /// is handed on from here any more (Pingora stopped): the record marked `left`, no
    /// renewal sent any more. Alone, or not leaving (a fast stop): nothing to do.
    pub async fn left_fleet(&self) {
        if let Some(owners) = &self.owners {
            if owners.deregister().await {
                log::info!("fleet: left");
            }
        }
    }

    /// Fleet mode: looks for idle owned keys to release ([`Enforcer::release_idle_keys`])
    /// every quarter of `fleet.release_idle_seconds` (at least 0.25 s, at most a minute).
    pub fn keep_releasing_idle(self: Arc<Self>) {
        if self.owners.is_none() || self.idle_release.is_zero() {
            return;
        }
        let every = (self.idle_release / 4).clamp(
            std::time::Duration::from_millis(250),
            std::time::Duration::from_secs(60),
        );
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                self.release_idle_keys().await;
            }
        });
    }

    /// Releases the keys this instance owns that nobody asked for for
    /// `fleet.release_idle_seconds` and that hold nothing: no request uses their entry,
    /// no turn is waited for or held, no delay, pause or backoff is in force (an entry
    /// the store evicted held none). One still holding something is looked at again at
    /// the next sweep.
    async fn release_idle_keys(&self) {
        let Some(owners) = &self.owners else {
            return;
        };
        for key in owners.idle(self.idle_release) {
            let entry = self.store.peek_key(&key);
            let idle = || match &entry {
                // The store's hold, and this sweep's.
                Some(e) if Arc::strong_count(e) > 2 => None,
                Some(e) if e.schedules().busy() || e.schedules().in_force() => None,
                Some(e) => Some(e.schedules().facts()),
                None => Some(Vec::new()),
            };
            owners.release_idle(&key, idle).await;
        }
    }

    /// Fleet mode: every `fleet.follow_traffic_seconds`, hands each owned key whose
    /// requests all came from one other member to that member
    /// ([`Enforcer::follow_traffic`]).
    pub fn keep_following_traffic(self: Arc<Self>) {
        if self.owners.is_none() || self.follow_traffic.is_zero() {
            return;
        }
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(self.follow_traffic).await;
                self.follow_traffic().await;
            }
        });
    }

    /// Hands each owned key whose traffic came from one other member to that member,
    /// once no turn of it is waited for or held, with its schedules' facts (a key whose
    /// turns never stop within the longest an owner takes to answer is kept, and looked
    /// at again at the next look). The keys are handed at once, each on its own.
    async fn follow_traffic(&self) {
        let Some(owners) = &self.owners else {
            return;
        };
        let within = self.owner_answers_within();
        let handing = owners
            .followers()
            .into_iter()
            .map(|(key, heir)| async move {
                let entry = self.store.peek_key(&key);
                let quiet = || match &entry {
                    Some(e) if e.schedules().busy() => None,
                    Some(e) => Some(e.schedules().facts()),
                    None => Some(Vec::new()),
                };
                if owners.hand_to(&key, &heir, quiet, within).await {
                    log::info!(
                        "fleet: {key} handed to {}, where its requests come from",
                        heir.id
                    );
                }
            });
        futures_util::future::join_all(handing).await;
    }

    /// Forgets `owner` as its key's owner: it answered that it cannot serve the key
    /// (it released it, or is leaving), so the next request looks the owner up again.
    pub fn forget_owner(&self, owner: &crate::fleet::Owner) {
        if let Some(owners) = &self.owners {
            owners.forget(owner);
        }
    }
}
