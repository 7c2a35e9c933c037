//! Ownership: one owner per pacing key (an origin, or an address with `pacing.key:
//! address`) at any moment, which paces it in memory with the single-node pacer; the
//! others hand their requests for it to the owner.
//!
//! **Algorithm.** A key's claim is a hash in Redis (`{robotsgate}:own:<key>`: owner
//! member, epoch, the generation it was written in, a not-before, and the facts a next
//! owner starts from), in the hash slot of the members' records. Who may hold it is
//! decided there, atomically, by `scripts/own_claim.lua`, from the records and Redis'
//! clock — never from a member's view of the membership:
//! * nobody holds it: the caller takes it (the instance that meets an origin first owns
//!   it — with a front that routes by host, the instance that serves the host);
//! * a live member holds it: that is the owner to hand requests to, remembered (an LRU of
//!   [`OWNERS_KEPT`] keys) while that member stays in the membership with that epoch, or
//!   until it answers that it no longer serves the key ([`Ownership::forget`]);
//! * a member that is no longer live holds it: the caller takes it over, acting not
//!   before that member's lease end plus its `after` (its grace and longest hold, from
//!   its own record): no exchange it left running can still be going on then.
//!
//! A member acts for a key only per its [`Standing`](crate::fleet::standing::Standing): its lease valid by its own clock,
//! the claim written in its current epoch and generation, past the not-before. A member
//! leaving gracefully, an idle key, and a key whose traffic comes from another member
//! release the claim with the key's facts (`letting_go.rs`). A pause or backoff is
//! written when it happens (`own_record.lua`). When a renewal brings a new epoch or
//! generation, every claim is written again (`own_claim.lua`'s reassert and vouch
//! modes); one another member holds now is lost.
//!
//! The protocol's invariant — at no time may two members act for one key, nor one start
//! an exchange while another's may still run — is checked by the model in `model/`
//! over every interleaving of renewals, claims, releases, crashes, pauses, lost
//! messages, Redis restarts and failovers it can reach, running these very scripts.
//!
//! Costs: one script call the first time an instance meets a key, none per request;
//! one per key written again after a change and every [`REASSERT_EVERY`]; one per idle
//! key released, one per key handed to its traffic (and the heir's claim); memory: one
//! cache entry per key met (bounded), one per key owned. Every ownership key lives in one
//! hash slot: on a Redis Cluster, ownership (a few calls per origin per idle period)
//! runs on one shard, while robots.txt copies and budgets spread.
//!
//! **Its other files:** `answer.rs` (what `own_claim.lua` and `own_look.lua` answer,
//! read once into a type), `letting_go.rs` (releases: leaving, idle, following
//! traffic), `words.rs` (a group's facts as a claim keeps them, read strictly).

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::fleet::backend::{lock, ms, Fleet, Unavailable};
use crate::fleet::membership::{Membership, FENCE, GENERATION, MEMBERS, SERVER};
use crate::fleet::new_origins::NewOrigins;
use crate::fleet::scripts::script;
use crate::fleet::standing::{Held, Here, Reassert};
use crate::fleet::traffic::Traffic;
use crate::pacing::ScheduleFacts;
use crate::telemetry::metrics;

pub mod answer;
mod letting_go;
pub mod words;

pub use answer::ClaimAnswer;
use answer::{ClaimCall, ClaimEffect};
pub use words::Words;

/// Keys whose owner (another member) is remembered.
pub const OWNERS_KEPT: usize = 100_000;

/// How long a claim's record outlives its last write: an owner writes its claims again
/// well within it ([`REASSERT_EVERY`]).
const KEEP: Duration = Duration::from_secs(7 * 86_400);

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
    /// A previous owner's exchanges may run until then: nothing starts before it, and
    /// the delay in force counts from it (past or not: a takeover asked for long after
    /// the owner vanished still keeps the Crawl-delay from its last possible end).
    pub not_before: Option<Instant>,
    /// Per robots.txt group: its last end, its pause, its backoff.
    pub groups: Vec<ScheduleFacts>,
    /// Taken over from a member that vanished, which handed no facts over: the
    /// Crawl-delay in force is known only from the fleet's robots.txt copy.
    pub vanished: bool,
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

/// Why no member can serve a key now, when Redis cannot say who owns it.
const NO_ANSWER: &str = "the fleet backend cannot say who owns it";

/// The pacing keys this instance owns (in its standing), and the owners it knows of the
/// others.
pub struct Ownership {
    /// The backend.
    fleet: Arc<Fleet>,
    /// The membership, and this instance's standing.
    members: Arc<Membership>,
    /// Owners of others' keys, as learnt.
    owners: Mutex<lru::LruCache<String, Owner>>,
    /// When and where from the owned keys are asked for.
    traffic: Traffic,
    /// How many new origins each member may make this instance claim.
    new_origins: NewOrigins,
}

impl Ownership {
    /// Ownership through `fleet` for `members`.
    pub fn new(fleet: Arc<Fleet>, members: Arc<Membership>) -> Arc<Ownership> {
        Arc::new(Ownership {
            members,
            owners: Mutex::new(lru::LruCache::new(
                NonZeroUsize::new(OWNERS_KEPT).unwrap_or(NonZeroUsize::MIN),
            )),
            traffic: Traffic::default(),
            new_origins: NewOrigins::new(fleet.config().peer_max_new_origins_per_second),
            fleet,
        })
    }

    /// May `member` make this owner take on one more origin new to it now
    /// (`fleet.peer_max_new_origins_per_second`, see `new_origins.rs`)? Asked by the
    /// caller for a host this owner holds nothing of, before its name is looked up:
    /// new hosts are counted, not new keys (with `pacing.key: address` many hosts share
    /// one key, each still a look-up and a robots.txt fetch).
    pub fn new_origin(&self, member: &str) -> bool {
        self.new_origins.take(member)
    }

    /// Where a request for `key` goes now (`from`: the member that handed it over, or
    /// `None` for this instance's own client); Redis is asked only for a key this
    /// instance neither holds nor knows a live owner of.
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
        let now = self.members.now();
        let (holding, here, may_own) = {
            let standing = self.members.standing();
            let holding = standing.holding(key).cloned();
            (holding, standing.here(key, now), standing.may_own(now))
        };
        if let Some(holding) = holding {
            if holding.held != Held::In {
                self.wait_released(key).await;
                return Box::pin(self.route_once(key, from)).await;
            }
            return match here {
                Some(Here::Acting | Here::From(_)) => Route::Here(None),
                _ if !may_own => Route::Unavailable("this instance's lease lapsed"),
                // Written before a change of epoch or generation: written again first
                // (the background re-assertion may not have reached it yet).
                _ => match self.reassert_key(key, Reassert::Plain).await {
                    Ok(Some(not_before)) => Route::Here(Some(Inherited {
                        not_before,
                        groups: Vec::new(),
                        vanished: false,
                    })),
                    Ok(None) => Box::pin(self.route_once(key, from)).await,
                    Err(Unavailable) => Route::Unavailable(NO_ANSWER),
                },
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
        if !may_own {
            // Its lease lapsed: it may still find the owner, never become it.
            return match self.look(key).await {
                Ok(Some(owner)) => Route::Peer(owner),
                _ => Route::Unavailable("this instance cannot take ownership now"),
            };
        }
        match self.claim(key).await {
            Ok(route) => route,
            Err(Unavailable) => Route::Unavailable(NO_ANSWER),
        }
    }

    /// Where a request for `key` from this instance's own clients goes when that is
    /// known without waiting or asking Redis: another member that owns it, as learnt.
    /// `None` when it is held here, this instance is leaving, or its owner is unknown
    /// ([`Ownership::route`] decides those).
    pub fn peek(&self, key: &str) -> Option<Owner> {
        {
            let standing = self.members.standing();
            if standing.leaving() || standing.holding(key).is_some() {
                return None;
            }
        }
        self.known_owner(key)
    }

    /// May this instance act for `key` now (checked when a turn is granted: a process
    /// stalled past its lease must not act)?
    pub fn acts_for(&self, key: &str) -> bool {
        let now = self.members.now();
        self.members.standing().acts_for(key, now)
    }

    /// [`Ownership::acts_for`], confirming first a claim taken provisionally (a
    /// takeover, or a claim made while a fence held) whose wait is over: written again
    /// in Redis, which applies a fence extended meanwhile (a step of its clock, a lost
    /// data set), so it may still not act. ClaimCall by a turn granted and by a robots.txt
    /// fetch, both past the claim's not-before.
    pub async fn acts_for_confirmed(&self, key: &str) -> bool {
        if self.acts_for(key) {
            return true;
        }
        let now = self.members.now();
        let due = self.members.standing().confirmation_due(key, now);
        if due && self.reassert_key(key, Reassert::Plain).await.is_err() {
            return false;
        }
        self.acts_for(key)
    }

    /// [`Ownership::acts_for_confirmed`], waited for while the key stays held here, for
    /// at most `within`: a claim made inside a fence or a takeover's confirmation
    /// window acts from its not-before, a claim being written again or a renewal
    /// answered late acts again once they are done. ClaimCall by a robots.txt fetch, which
    /// a claim's first request waits for anyway: refused at once, that request would
    /// be answered 503.
    pub async fn acts_for_when_due(&self, key: &str, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        loop {
            if self.acts_for_confirmed(key).await {
                return true;
            }
            let now = self.members.now();
            let wait = match self.members.standing().here(key, now) {
                None => return false,
                Some(Here::From(from)) => u64::try_from(from - now).unwrap_or(0) + 1,
                Some(_) => 50,
            };
            let wait = Duration::from_millis(wait);
            if Instant::now() + wait > deadline {
                return false;
            }
            tokio::time::sleep(wait).await;
        }
    }

    /// A leaving instance's route: a key it still holds waits for its hand-over (its
    /// exchanges ending, at most the longest hold); then the request goes to the key's
    /// owner, or — nobody has claimed it yet — to a member that stays, chosen by
    /// rendezvous hashing, which claims it.
    async fn route_leaving(&self, key: &str) -> Route {
        let deadline = Instant::now() + self.members.after() + self.members.lease();
        while self.holds(key) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if self.holds(key) {
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
            Err(Unavailable) => Route::Unavailable(NO_ANSWER),
        }
    }

    /// Does this instance hold `key` (in any way)?
    fn holds(&self, key: &str) -> bool {
        self.members.standing().holding(key).is_some()
    }

    /// Who owns `key` as this instance knows: `here` (it acts for it now), `pending`
    /// (held here, acting once a previous owner's exchanges must be over), `stopped`
    /// (held here, not acted for now: its claim is being written again or released, or
    /// this instance's lease lapsed), another member's id, or `None`.
    pub fn known(&self, key: &str) -> Option<String> {
        let now = self.members.now();
        let here = self.members.standing().here(key, now);
        match here {
            Some(Here::Acting) => Some("here".into()),
            Some(Here::From(_)) => Some("pending".into()),
            Some(Here::Stopped) => Some("stopped".into()),
            None => lock(&self.owners).peek(key).map(|o| o.member.clone()),
        }
    }

    /// The keys this instance owns.
    pub fn owned(&self) -> Vec<String> {
        self.members.standing().keys()
    }

    /// How many keys each member owns, as far as this instance knows (its own exactly,
    /// the others' from the owners it learnt).
    pub fn counts(&self) -> HashMap<String, usize> {
        let mut counts = HashMap::new();
        counts.insert(self.members.me().to_string(), self.members.standing().len());
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

    /// Runs `own_claim.lua` for `key` in `mode`, as this instance's current epoch and
    /// generation: the answer, those, and when it arrived.
    async fn own_claim(
        &self,
        key: &str,
        mode: &str,
    ) -> Result<(ClaimAnswer, u64, String, i64), Unavailable> {
        let (epoch, generation) = {
            let standing = self.members.standing();
            (standing.epoch(), standing.generation().to_string())
        };
        let mut call = script("own_claim").prepare_invoke();
        call.key(claim_key(key))
            .key(MEMBERS)
            .key(GENERATION)
            .key(FENCE)
            .key(SERVER)
            .arg(self.members.me())
            .arg(epoch)
            .arg(&generation)
            .arg(ms(KEEP))
            .arg(mode)
            .arg(ms(self.members.news_within()));
        let answer: Vec<String> = self.fleet.run("own_claim", &mut call).await?;
        let received = self.members.now();
        let answer = ClaimAnswer::parse(&answer).ok_or(Unavailable)?;
        Ok((answer, epoch, generation, received))
    }

    /// Claims `key`, and says where its requests go.
    async fn claim(&self, key: &str) -> Result<Route, Unavailable> {
        let (answer, epoch, generation, received) = self.own_claim(key, "claim").await?;
        let asked = ClaimCall {
            key,
            epoch,
            generation: &generation,
            again: false,
        };
        let applied = answer.apply(&mut self.members.standing(), asked, received);
        match answer {
            ClaimAnswer::Taken { how, facts, .. } => {
                let bound = match applied {
                    ClaimEffect::Took { bound } => bound,
                    _ => None,
                };
                Ok(Route::Here(Some(self.taken(key, &how, bound, &facts))))
            }
            ClaimAnswer::Held {
                member,
                epoch,
                peer,
                leaving,
            } => {
                let owner = Owner {
                    key: key.to_string(),
                    member,
                    epoch,
                    peer,
                };
                // One that is leaving holds the request until it has handed the key
                // over, then refuses it, and this instance routes it once more: not
                // remembered.
                if !leaving {
                    lock(&self.owners).put(key.to_string(), owner.clone());
                }
                Ok(Route::Peer(owner))
            }
            ClaimAnswer::Stale => Ok(Route::Unavailable(
                "Redis' data set changed; this instance renews its membership first",
            )),
            ClaimAnswer::Unregistered => Ok(Route::Unavailable(
                "this instance is not a live member of the fleet now",
            )),
            ClaimAnswer::Free | ClaimAnswer::Lost => Err(Unavailable),
        }
    }

    /// The claim of `key` is this instance's now, `how` it came to be, bounded by the
    /// answer's not-before when it set one: what it starts from.
    fn taken(
        &self,
        key: &str,
        how: &str,
        bound: Option<i64>,
        facts: &[(String, String)],
    ) -> Inherited {
        let inherited = Inherited {
            // A bound in the past is kept too: a vanished owner's last exchange ended by
            // then at the latest, and the Crawl-delay in force counts from it, however
            // late the key is taken over.
            not_before: bound.map(|b| self.fleet.local_instant(b)),
            vanished: how == "taken_over",
            groups: facts
                .iter()
                .map(|(group, value)| self.group_facts(group, value))
                .collect(),
        };
        if let Some(how) = metrics::OWNERSHIP_CHANGES.iter().find(|h| **h == how) {
            metrics::record_ownership(how);
        }
        metrics::FLEET_OWNED.set(self.members.standing().len() as i64);
        log::debug!("fleet: {key} owned here ({how}), from {inherited:?}");
        inherited
    }

    /// Who holds `key`'s claim, asked without taking it: the owner when it is a live
    /// member that is not leaving.
    async fn look(&self, key: &str) -> Result<Option<Owner>, Unavailable> {
        let mut call = script("own_look").prepare_invoke();
        call.key(claim_key(key)).key(MEMBERS);
        let answer: Vec<String> = self.fleet.run("own_look", &mut call).await?;
        Ok(match ClaimAnswer::parse(&answer) {
            Some(ClaimAnswer::Held {
                member,
                epoch,
                peer,
                leaving: false,
            }) if member != self.members.me() => Some(Owner {
                key: key.to_string(),
                member,
                epoch,
                peer,
            }),
            _ => None,
        })
    }

    /// A group's facts from the words a claim keeps ([`Words`]). Words that cannot be
    /// read, or a moment that cannot be converted, count against this reader: the last
    /// exchange is taken to have ended now, so the Crawl-delay counts from here.
    fn group_facts(&self, group: &str, value: &str) -> ScheduleFacts {
        let now = Instant::now();
        let group = group.to_string();
        let words = match Words::parse(value) {
            Ok(words) => words,
            Err(e) => {
                log::warn!("fleet: group {group:?}: {e}; its last exchange is taken to end now");
                return ScheduleFacts {
                    group,
                    last_end: Some(now),
                    paused_until: None,
                    backoff: Duration::ZERO,
                };
            }
        };
        // A moment Redis' clock cannot be converted from (no offset known) is now.
        let at = |t: Option<i64>| t.map(|t| self.fleet.instant_of(t).unwrap_or(now));
        ScheduleFacts {
            group,
            last_end: at(words.last_end),
            paused_until: at(words.paused_until),
            backoff: Duration::from_millis(words.backoff_ms),
        }
    }

    /// `facts` as a claim keeps them ([`Words`]).
    fn encode(&self, facts: &ScheduleFacts) -> String {
        let at = |i: Option<Instant>| i.and_then(|i| self.fleet.redis_time_of(i));
        Words {
            last_end: at(facts.last_end),
            paused_until: at(facts.paused_until),
            backoff_ms: u64::try_from(facts.backoff.as_millis()).unwrap_or(u64::MAX),
        }
        .write()
    }

    /// Writes a fact of an owned key when it happens (a pause, a backoff), for a new
    /// owner to start from; in the background.
    pub fn record(&self, key: &str, facts: ScheduleFacts) {
        let (epoch, token) = match self.members.standing().holding(key) {
            Some(h) if h.held != Held::Releasing => (h.epoch, h.token),
            _ => return,
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
                .arg(token)
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

    /// Writes this instance's claims again: those a change of epoch or generation left
    /// unconfirmed (vouched for when it acted for them up to the change), and with
    /// `all`, every key it holds (refreshing their records). A claim another member
    /// holds now is lost, its key no longer this instance's. `false` when Redis could
    /// not answer for every key (to be tried again).
    pub async fn reassert(&self, all: bool) -> bool {
        let now = self.members.now();
        let mut keys = self.members.standing().unconfirmed(now);
        if all {
            let unconfirmed: Vec<String> = keys.iter().map(|(k, _)| k.clone()).collect();
            let confirmed = self
                .owned()
                .into_iter()
                .filter(|k| !unconfirmed.contains(k));
            keys.extend(confirmed.map(|k| (k, Reassert::Plain)));
        }
        for (key, how) in keys {
            if self.reassert_key(&key, how).await.is_err() {
                return false;
            }
        }
        true
    }

    /// Writes `key`'s claim again, `how` (only while it is held in, not moving or
    /// releasing): `Some(not before)` when it is still this instance's (`None` inside
    /// when it may act at once), `None` when another member holds it now or it was let go
    /// (no longer held here).
    async fn reassert_key(
        &self,
        key: &str,
        how: Reassert,
    ) -> Result<Option<Option<Instant>>, Unavailable> {
        let (answer, epoch, generation, received) = self.own_claim(key, how.mode()).await?;
        let asked = ClaimCall {
            key,
            epoch,
            generation: &generation,
            again: true,
        };
        let mut standing = self.members.standing();
        match answer.apply(&mut standing, asked, received) {
            ClaimEffect::Took { bound } => Ok(Some(bound.map(|b| self.fleet.local_instant(b)))),
            ClaimEffect::Passed => Ok(None), // released or handed on meanwhile: that decides
            ClaimEffect::Lost => {
                log::warn!("fleet: {key} is another member's now; handed over");
                metrics::record_ownership("lost");
                metrics::FLEET_OWNED.set(standing.len() as i64);
                Ok(None)
            }
            ClaimEffect::Unchanged => Err(Unavailable),
        }
    }
}

/// The claim's key in Redis (in the membership's hash slot).
pub(crate) fn claim_key(key: &str) -> String {
    format!("{{robotsgate}}:own:{key}")
}
