//! Ownership: one owner per pacing key (an origin, or an address with `pacing.key:
//! address`) at any moment, which paces it in memory with the single-node pacer; the
//! others hand their requests for it to the owner.
//!
//! **Algorithm.** A key's claim is a hash in Redis (`rg:{<key>}:own`: owner member and
//! epoch, and the durable facts a new owner starts from). An instance that meets a key it
//! knows no owner of claims it (`scripts/own_claim.lua`, one call): it takes the claim
//! when nobody holds it, so the instance that meets an origin first owns it — with a
//! front that routes by host, the instance that serves the host. When another live
//! member holds it, that member is the owner to hand requests to; the answer is cached
//! (an LRU of [`OWNERS_KEPT`] keys) for as long as that member stays in the membership
//! with that epoch, or until the owner answers that it no longer serves the key
//! ([`Ownership::forget`]). Ownership lives as long as the owner's membership, or until
//! the key is idle (nobody asked for it for `fleet.release_idle_seconds`, nothing in
//! force): it costs nothing per request and nothing to renew.
//!
//! **Changes.** A claim held by a member that is gone (its lease lapsed, or it is not
//! a member any more) is taken over only once no exchange it may have left running can
//! still be going on: its lease's end in Redis time, plus `fleet.outage_grace_seconds`
//! when owners keep acting through outages, plus the longest an exchange can hold a turn
//! (connect, write and read timeouts, or `pacing.max_exchange_seconds`, then a read
//! timeout of linger). A member leaving gracefully releases each key instead
//! (`own_release.lua`), with each robots.txt group's last end, pause and backoff: the
//! next owner starts from them at once. A pause or backoff is written when it happens
//! (`own_record.lua`), so a new owner starts from it too. When Redis may have lost
//! claims (a new boot id, the backend's return), every owner writes its claims again
//! (`own_reassert.lua`); a claim another member took meanwhile is lost, and its key is
//! handed over from then on. For the re-assertions to land first, a key nobody claims is
//! not taken until the membership's news have reached every instance.
//!
//! An idle key is released the same way ([`Ownership::release_idle`]), while it is
//! held as releasing ([`Held`]) so no request is routed here for it meanwhile; a
//! request that comes after finds it free and claims it again, or finds its new owner.
//! A key whose requests all come from one other member is handed to it
//! ([`Ownership::hand_to`]): the claim names that member, marked released, and it takes
//! the key with the facts at its next request (`fleet::traffic`).
//!
//! Costs: one script call the first time an instance meets a key (two for a takeover),
//! none per request; one per idle key released, one per key handed to its traffic
//! (and the heir's claim); memory: one cache entry per key met
//! (bounded), one per key owned (bounded by the keys asked for within the idle time).

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::fleet::backend::{lock, ms, Fleet, Unavailable};
use crate::fleet::membership::{Member, Membership};
use crate::fleet::scripts::script;
use crate::fleet::traffic::Traffic;
use crate::pacing::ScheduleFacts;
use crate::telemetry::metrics;

mod letting_go;

/// Keys whose owner (another member) is remembered.
pub const OWNERS_KEPT: usize = 100_000;

/// How long a claim's record outlives its last write: an owner writes its claims again
/// well within it ([`REASSERT_EVERY`]).
const KEEP: Duration = Duration::from_secs(7 * 86_400);

/// How this instance holds a key it owns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Held {
    /// Claimed in this epoch: it acts for the key.
    In(u64),
    /// Being handed to the member its traffic comes from (claimed in this epoch): turns
    /// already waited for are still taken, new requests wait.
    Moving(u64),
    /// Its release runs: no request is routed here for it, no turn acts for it.
    Releasing,
}

/// How often an owner writes its claims again, whatever happens.
pub const REASSERT_EVERY: Duration = Duration::from_secs(3600);

/// Another member that owns a key: where to hand its requests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    /// The key it owns.
    pub key: String,
    /// Its member id.
    pub member: String,
    /// Its epoch, when it claimed the key.
    pub epoch: u64,
    /// Its peer channel (`host:port`).
    pub peer: String,
}

/// What a new owner starts a key from: the previous owner's facts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Inherited {
    /// Nothing may start before this: the previous owner vanished without handing over,
    /// and an exchange it left running may still be going on until then.
    pub not_before: Option<Instant>,
    /// Per robots.txt group: its last end, its pause, its backoff.
    pub groups: Vec<ScheduleFacts>,
}

/// Where a request for a key goes.
#[derive(Clone, Debug, PartialEq)]
pub enum Route {
    /// This instance owns it; `Some`: it just took it, starting from these facts.
    Here(Option<Inherited>),
    /// Another member owns it.
    Peer(Owner),
    /// Nobody can serve it now (why): the backend cannot say who owns it, the owner is
    /// leaving, or a hand-over is under way.
    Unavailable(&'static str),
}

/// The pacing keys this instance owns, and the owners it knows of the others.
pub struct Ownership {
    /// The backend.
    fleet: Arc<Fleet>,
    /// The membership.
    members: Arc<Membership>,
    /// Owners of others' keys, as learnt.
    owners: Mutex<lru::LruCache<String, Owner>>,
    /// The keys this instance owns, and how it holds each (the epoch it claimed it in).
    owned: Mutex<HashMap<String, Held>>,
    /// How long after a vanished owner's lease its exchanges may still run.
    after_lease: Duration,
    /// When and where from the owned keys are asked for.
    traffic: Traffic,
}

impl Ownership {
    /// Ownership through `fleet` for `members`; `hold` is the longest an exchange can
    /// hold a turn, `grace` how long owners act past their lease during an outage.
    pub fn new(
        fleet: Arc<Fleet>,
        members: Arc<Membership>,
        hold: Duration,
        grace: Duration,
    ) -> Arc<Ownership> {
        Arc::new(Ownership {
            fleet,
            members,
            owners: Mutex::new(lru::LruCache::new(
                NonZeroUsize::new(OWNERS_KEPT).unwrap_or(NonZeroUsize::MIN),
            )),
            owned: Mutex::default(),
            after_lease: hold + grace,
            traffic: Traffic::default(),
        })
    }

    /// Where a request for `key` goes now (`from`: the member that handed it over, or
    /// `None` for this instance's own client); a claim is asked of Redis only for a key
    /// this instance knows no live owner of.
    pub async fn route(&self, key: &str, from: Option<&str>) -> Route {
        let route = self.route_once(key, from).await;
        if let Route::Here(_) = route {
            self.traffic.note(key, from);
        }
        route
    }

    /// Where a request for `key` goes ([`Ownership::route`]), before it is counted.
    async fn route_once(&self, key: &str, from: Option<&str>) -> Route {
        if self.members.leaving() {
            return self.route_leaving(key).await;
        }
        if let Some(held) = self.owns(key) {
            let Held::In(epoch) = held else {
                self.wait_released(key).await;
                return Box::pin(self.route_once(key, from)).await;
            };
            if epoch != self.members.epoch() && self.members.may_own() {
                // Claimed before a new registration: written again first (the
                // background re-assertion may not have reached it, or failed).
                return match self.reassert_key(key, self.members.epoch()).await {
                    Ok(true) => Route::Here(None),
                    Ok(false) => Box::pin(self.route_once(key, from)).await,
                    Err(Unavailable) => {
                        Route::Unavailable("the fleet backend cannot say who owns it")
                    }
                };
            }
            return if self.members.may_own() {
                Route::Here(None)
            } else {
                Route::Unavailable("this instance's lease lapsed")
            };
        }
        if let Some(owner) = self.known_owner(key) {
            if from.is_none() {
                return Route::Peer(owner);
            }
            // Handed here by a member that takes this instance for the owner: one of the
            // two caches is stale (a key handed on while both relayed), and Redis says
            // which; trusting this one could send the request back and forth.
            lock(&self.owners).pop(key);
        }
        if !self.members.may_own() {
            // Its lease lapsed: it may still find the owner, never become it.
            return match self.look(key).await {
                Ok(Some(owner)) => Route::Peer(owner),
                _ => Route::Unavailable("this instance cannot take ownership now"),
            };
        }
        if self.members.settling() {
            return Route::Unavailable("Redis lost claims; the owners are writing theirs again");
        }
        match self.claim(key, None).await {
            Ok(route) => route,
            Err(Unavailable) => Route::Unavailable("the fleet backend cannot say who owns it"),
        }
    }

    /// Where a request for `key` from this instance's own clients goes when that is
    /// known without waiting or asking Redis: another member that owns it, as learnt.
    /// `None` when it is owned here, this instance is leaving, or its owner is unknown
    /// ([`Ownership::route`] decides those).
    pub fn peek(&self, key: &str) -> Option<Owner> {
        if self.members.leaving() || self.owns(key).is_some() {
            return None;
        }
        self.known_owner(key)
    }

    /// Does this instance own `key` and may act on it now (checked again when a turn
    /// is granted: a process stalled past its lease must not act)?
    pub fn acts_for(&self, key: &str) -> bool {
        let epoch = self.members.epoch();
        self.members.may_own()
            && matches!(self.owns(key), Some(Held::In(e) | Held::Moving(e)) if e == epoch)
    }

    /// How this instance holds `key` (the epoch it claimed it in), when it owns it. A key claimed in an
    /// earlier epoch (before a lapse) is acted on only once its claim was written again
    /// in this one ([`Ownership::reassert`]): meanwhile another member may have taken it.
    fn owns(&self, key: &str) -> Option<Held> {
        lock(&self.owned).get(key).copied()
    }

    /// A leaving instance's route: a key it still owns waits for its hand-over (its
    /// exchanges ending, at most the longest hold); then the request goes to the key's
    /// owner, or — nobody has claimed it yet — to a member that stays, chosen by
    /// rendezvous hashing, which claims it.
    async fn route_leaving(&self, key: &str) -> Route {
        let deadline = Instant::now() + self.after_lease + self.members.lease();
        while self.owns(key).is_some() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if self.owns(key).is_some() {
            return Route::Unavailable("this instance is handing it over");
        }
        if let Some(owner) = self.known_owner(key) {
            return Route::Peer(owner);
        }
        match self.look(key).await {
            Ok(Some(owner)) => Route::Peer(owner),
            Ok(None) => self.members.successor(key).map_or(
                Route::Unavailable("no member stays to take it"),
                Route::Peer,
            ),
            Err(Unavailable) => Route::Unavailable("the fleet backend cannot say who owns it"),
        }
    }

    /// Who owns `key` as this instance knows: `here`, another member, or `None`.
    pub fn known(&self, key: &str) -> Option<String> {
        if lock(&self.owned).contains_key(key) {
            return Some("here".into());
        }
        lock(&self.owners).peek(key).map(|o| o.member.clone())
    }

    /// The keys this instance owns.
    pub fn owned(&self) -> Vec<String> {
        lock(&self.owned).keys().cloned().collect()
    }

    /// How many keys each member owns, as far as this instance knows (its own exactly,
    /// the others' from the owners it learnt).
    pub fn counts(&self) -> HashMap<String, usize> {
        let mut counts = HashMap::new();
        counts.insert(self.members.me().to_string(), lock(&self.owned).len());
        for (_, owner) in lock(&self.owners).iter() {
            *counts.entry(owner.member.clone()).or_default() += 1;
        }
        counts
    }

    /// A cached owner of `key` that is still a live member in the same epoch (leaving
    /// or not); a stale entry is dropped.
    fn known_owner(&self, key: &str) -> Option<Owner> {
        let mut owners = lock(&self.owners);
        let owner = owners.get(key)?.clone();
        match self.members.live(&owner.member) {
            // A leaving owner still answers: it holds a request until it has handed the
            // key over, then refuses it, and the request is routed once more.
            Some(m) if m.epoch == owner.epoch => Some(owner),
            _ => {
                owners.pop(key);
                None
            }
        }
    }

    /// Claims `key` (expecting it to name `gone`, an owner found gone), and says where
    /// its requests go.
    async fn claim(&self, key: &str, gone: Option<(&str, u64)>) -> Result<Route, Unavailable> {
        let epoch = self.members.epoch();
        let claim_key = claim_key(key);
        let mut call = script("own_claim").prepare_invoke();
        // Outside a Cluster the data set's boot id shares the server: a claim nobody
        // holds is taken only while it is the one this instance knows (a Redis restarted
        // empty since has lost claims its owners have not written again yet).
        let boot = match self.fleet.config().redis_cluster.is_empty() {
            true => self.members.boot(),
            false => None,
        };
        call.key(&claim_key);
        if boot.is_some() {
            call.key(crate::fleet::membership::BOOT);
        }
        call.arg(self.members.me())
            .arg(epoch)
            .arg(gone.map_or("", |g| g.0))
            .arg(gone.map_or(0, |g| g.1))
            .arg(ms(KEEP))
            .arg(1)
            .arg(boot.unwrap_or_default());
        let answer: Vec<String> = self.fleet.run("own_claim", &mut call).await?;
        match answer.first().map(String::as_str) {
            Some("taken") => Ok(self.taken(key, epoch, &answer[1..], gone)),
            Some("held") => self.held(key, &answer[1..], gone.is_some()).await,
            Some("lost") => Ok(Route::Unavailable(
                "Redis lost claims; the owners are writing theirs again",
            )),
            _ => Err(Unavailable),
        }
    }

    /// Who holds `key`'s claim, asked without taking it: the owner when it is a live
    /// member that is not leaving.
    async fn look(&self, key: &str) -> Result<Option<Owner>, Unavailable> {
        let mut call = script("own_claim").prepare_invoke();
        call.key(claim_key(key))
            .arg(self.members.me())
            .arg(0)
            .arg("")
            .arg(0)
            .arg(ms(KEEP))
            .arg(0)
            .arg("");
        let answer: Vec<String> = self.fleet.run("own_claim", &mut call).await?;
        let (Some("held"), Some(member)) = (answer.first().map(String::as_str), answer.get(1))
        else {
            return Ok(None);
        };
        Ok(self
            .members
            .live(member)
            .filter(|m| !m.leaving && m.id != self.members.me())
            .map(|m| Owner {
                key: key.to_string(),
                member: m.id,
                epoch: m.epoch,
                peer: m.peer,
            }))
    }

    /// The claim is this instance's now: what it starts from.
    fn taken(&self, key: &str, epoch: u64, facts: &[String], gone: Option<(&str, u64)>) -> Route {
        lock(&self.owned).insert(key.to_string(), Held::In(epoch));
        let mut inherited = Inherited::default();
        let mut released = false;
        for pair in facts.get(1..).unwrap_or_default().chunks(2) {
            let [name, value] = pair else { continue };
            if name == "released" {
                released = true;
            } else if let Some(group) = name.strip_prefix("g:") {
                inherited.groups.push(self.group_facts(group, value));
            }
        }
        if let Some((member, _)) = gone.filter(|_| !released) {
            inherited.not_before = Some(self.vanished_until(member));
        } else if !released && inherited.groups.is_empty() {
            // A key nobody claims: after a loss, it may be a vanished member's.
            inherited.not_before = self
                .members
                .orphans_until_ms()
                .and_then(|until| self.fleet.instant_of(until + ms(self.after_lease)))
                .filter(|at| *at > Instant::now());
        }
        let how = match (released, gone.is_some()) {
            (true, _) => "handed",
            (false, true) => "taken_over",
            (false, false) => "claimed",
        };
        metrics::record_ownership(how);
        metrics::FLEET_OWNED.set(lock(&self.owned).len() as i64);
        log::debug!("fleet: {key} owned here (epoch {epoch}, {how}), from {inherited:?}");
        Route::Here(Some(inherited))
    }

    /// Another member holds the claim: the owner to hand to when it is live, else (once)
    /// a takeover.
    async fn held(
        &self,
        key: &str,
        holder: &[String],
        retried: bool,
    ) -> Result<Route, Unavailable> {
        let member = holder.first().cloned().unwrap_or_default();
        let epoch: u64 = holder.get(1).and_then(|e| e.parse().ok()).unwrap_or(0);
        if let Some(live) = self.members.live(&member) {
            // The holder re-registered since it claimed (a lapse): its claims are written
            // again in its new epoch, and it is the owner. One that is leaving holds the
            // request until it has handed the key over, then refuses it, and this
            // instance routes it once more: not remembered.
            let leaving = live.leaving;
            let owner = Owner {
                key: key.to_string(),
                member,
                epoch: live.epoch,
                peer: live.peer,
            };
            if !leaving {
                lock(&self.owners).put(key.to_string(), owner.clone());
            }
            return Ok(Route::Peer(owner));
        }
        if retried {
            return Err(Unavailable);
        }
        Box::pin(self.claim(key, Some((&member, epoch)))).await
    }

    /// Until when an exchange of `member`, gone without handing over, may still run.
    fn vanished_until(&self, member: &str) -> Instant {
        let members = self.members.members();
        let (now, all) = &*members;
        let expires = all.get(member).map_or_else(
            || *now + ms(self.members.lease()),
            |m: &Member| m.expires_ms,
        );
        let until = expires + ms(self.after_lease);
        self.fleet
            .instant_of(until)
            .unwrap_or_else(|| Instant::now() + self.members.lease() + self.after_lease)
    }

    /// A group's facts as a claim keeps them: `last_end|paused_until|backoff` (Redis ms).
    fn group_facts(&self, group: &str, value: &str) -> ScheduleFacts {
        let mut fields = value.split('|').map(|f| f.parse::<i64>().unwrap_or(0));
        let mut at = || {
            fields
                .next()
                .filter(|&t| t > 0)
                .and_then(|t| self.fleet.instant_of(t))
        };
        let (last_end, paused_until) = (at(), at());
        let backoff = value
            .rsplit('|')
            .next()
            .and_then(|b| b.parse::<u64>().ok())
            .map_or(Duration::ZERO, Duration::from_millis);
        ScheduleFacts {
            group: group.to_string(),
            last_end,
            paused_until,
            backoff,
        }
    }

    /// `facts` as a claim keeps them (Redis ms; 0 for none).
    fn encode(&self, facts: &ScheduleFacts) -> String {
        let at = |i: Option<Instant>| i.and_then(|i| self.fleet.redis_time_of(i)).unwrap_or(0);
        format!(
            "{}|{}|{}",
            at(facts.last_end),
            at(facts.paused_until),
            facts.backoff.as_millis()
        )
    }

    /// Writes a fact of an owned key when it happens (a pause, a backoff), for a new
    /// owner to start from; in the background.
    pub fn record(&self, key: &str, facts: ScheduleFacts) {
        let Some(Held::In(epoch) | Held::Moving(epoch)) = lock(&self.owned).get(key).copied()
        else {
            return;
        };
        let (fleet, claim_key, me) = (
            self.fleet.clone(),
            claim_key(key),
            self.members.me().to_string(),
        );
        let value = self.encode(&facts);
        self.fleet.spawn(async move {
            let mut call = script("own_record").prepare_invoke();
            call.key(&claim_key)
                .arg(&me)
                .arg(epoch)
                .arg(&facts.group)
                .arg(&value);
            let _: Result<i64, _> = fleet.run("own_record", &mut call).await;
        });
    }

    /// Forgets `owner` as the cached owner of its key (it answered that it no longer
    /// serves it): the next request looks the owner up again.
    pub fn forget(&self, owner: &Owner) {
        let mut owners = lock(&self.owners);
        if owners.peek(&owner.key) == Some(owner) {
            owners.pop(&owner.key);
        }
    }

    /// Writes every claim of this instance again (Redis may have lost them, or this
    /// instance re-registered with a new epoch); a claim another member holds now is
    /// lost, and its key no longer this instance's.
    pub async fn reassert(&self) {
        let epoch = self.members.epoch();
        for key in self.owned() {
            if !matches!(self.owns(&key), Some(Held::In(_))) {
                continue; // released or handed on meanwhile: written by whoever claims it next
            }
            if self.reassert_key(&key, epoch).await.is_err() {
                return;
            }
        }
    }

    /// Writes `key`'s claim again in `epoch`: `true` when it is still this instance's,
    /// `false` when another member holds it now (it is then no longer owned here).
    async fn reassert_key(&self, key: &str, epoch: u64) -> Result<bool, Unavailable> {
        let mut call = script("own_reassert").prepare_invoke();
        call.key(claim_key(key))
            .arg(self.members.me())
            .arg(epoch)
            .arg(ms(KEEP));
        let kept = self.fleet.run::<i64>("own_reassert", &mut call).await? == 1;
        let mut owned = lock(&self.owned);
        match owned.get(key) {
            None => return Ok(false),
            // Released or handed on meanwhile: that decides.
            Some(Held::Moving(_) | Held::Releasing) => return Ok(kept),
            Some(_) => {}
        }
        if kept {
            owned.insert(key.to_string(), Held::In(epoch));
        } else {
            log::warn!("fleet: {key} was taken by another member; handed over");
            owned.remove(key);
            metrics::record_ownership("lost");
            metrics::FLEET_OWNED.set(owned.len() as i64);
        }
        Ok(kept)
    }
}

/// The claim's key in Redis (its own hash slot).
fn claim_key(key: &str) -> String {
    format!("rg:{{{key}}}:own")
}
