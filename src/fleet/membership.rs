//! Membership: which instances make up the fleet, each with a lease and an epoch.
//!
//! **Algorithm.** Every [`HEALTH_EVERY`] the backend's health task runs this instance's
//! renewal (`scripts/member_renew.lua`): one script call that extends its lease to
//! `fleet.lease_seconds` past Redis' clock, registers it afresh (a new epoch from a
//! counter) when it has no live record — its first start, a lease that lapsed (a stalled
//! process, a partition), a Redis that lost it — and returns every member (id, epoch,
//! lease expiry, state, peer address), and the data set's generation. So every instance
//! learns of a join, a leave or a lapse within one renewal (half a second) of Redis
//! knowing it, and of a lapse at most `lease_seconds` after the member's last renewal.
//! Each record also carries the member's lease and its `after` (its outage grace plus
//! the longest an exchange holds a turn): Redis decides a takeover from them
//! (`scripts/own_claim.lua`), never another member from its view of them.
//!
//! **Own lease, own clock.** An instance acts as an owner only while its lease is valid
//! by its *own* clock (`CLOCK_BOOTTIME`, [`Standing`]): it counts from when it sent the renewal
//! that Redis answered (which is before Redis set the expiry), so it stops at the latest
//! when Redis says its lease ends — a process stopped past its lease and resumed does not
//! act on a lease that lapsed, until a renewal registers it again with a new epoch (its
//! claims then name the old one, and it writes them again, see `ownership`).
//!
//! **Generations.** Redis keeps a generation of its data set, a new one when the data
//! set is new or another server serves it (a restart, a failover: acknowledged writes may
//! be lost), with a fence until which nothing decided before is trusted. A renewal that
//! brings a new epoch or generation makes this instance write its claims again.
//!
//! Costs: one script call per instance per half second, whatever the request rate; the
//! member list is small (instances, not origins).

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use arc_swap::ArcSwap;

use crate::config::NewDataSet;
use crate::fleet::backend::{lock, ms, Beat, Fleet, HEALTH_EVERY};
use crate::fleet::channel::PeerTls;
use crate::fleet::down::Down;
use crate::fleet::redis_clock::{Reading, RedisClock};
use crate::fleet::scripts::script;
use crate::fleet::standing::{Ms, Standing};
use crate::telemetry::metrics::DownCause;

/// The members' records.
pub(crate) const MEMBERS: &str = "{robotsgate}:members";
/// The epoch counter.
const EPOCH: &str = "{robotsgate}:epoch";
/// The data set's generation.
pub(crate) const GENERATION: &str = "{robotsgate}:generation";
/// The server (its run id) the generation was made on.
pub(crate) const SERVER: &str = "{robotsgate}:server";
/// Until when (Redis ms) nothing decided before the generation is trusted.
pub(crate) const FENCE: &str = "{robotsgate}:fence";
/// The keys of a renewal (`member_renew.lua`'s KEYS), in order.
pub(crate) const RENEWAL_KEYS: [&str; 5] = [MEMBERS, EPOCH, GENERATION, SERVER, FENCE];

/// One member as the renewal returned it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// Its id (unique per process start).
    pub id: String,
    /// Its registration's number: a new one each time it registers.
    pub epoch: u64,
    /// When its lease ends, in Redis time (ms).
    pub expires_ms: i64,
    /// Up, leaving, or left.
    pub state: MemberState,
    /// Where its peer channel listens (`host:port`).
    pub peer: String,
}

/// Where a member is in its life, as its record says (`prelude.lua`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemberState {
    /// A member taking new origins.
    Up,
    /// Handing its origins over and leaving.
    Leaving,
    /// Left: a member no more, its record kept until its lease ends only so that a
    /// claim it could not release waits for that lease (`member_leave.lua`).
    Left,
}

impl MemberState {
    /// The record's word for it.
    pub fn label(self) -> &'static str {
        match self {
            MemberState::Up => "up",
            MemberState::Leaving => "leaving",
            MemberState::Left => "left",
        }
    }
}

impl Member {
    /// Is it a member at `now` (Redis time, ms): its lease not over, and not left (as
    /// `live` in `prelude.lua`)?
    pub fn live_at(&self, now: i64) -> bool {
        self.expires_ms > now && self.state != MemberState::Left
    }

    /// Reads a member record: `epoch|expires_ms|state|peer|lease_ms|after_ms`.
    fn parse(id: &str, value: &str) -> Option<Member> {
        let mut fields = value.split('|');
        let (epoch, expires_ms, state) = (fields.next()?, fields.next()?, fields.next()?);
        let member = Member {
            id: id.to_string(),
            epoch: epoch.parse().ok()?,
            expires_ms: expires_ms.parse().ok()?,
            state: match state {
                "up" => MemberState::Up,
                "leaving" => MemberState::Leaving,
                "left" => MemberState::Left,
                _ => return None,
            },
            peer: fields.next()?.to_string(),
        };
        let (lease, after) = (fields.next()?, fields.next()?);
        let numbers = lease.parse::<u64>().is_ok() && after.parse::<u64>().is_ok();
        (numbers && fields.next().is_none()).then_some(member)
    }
}

/// What this instance knows of the fleet: its own standing, and every member seen at the
/// last renewal.
pub struct Membership {
    /// The backend.
    fleet: Arc<Fleet>,
    /// `fleet.lease_seconds`.
    lease: Duration,
    /// How long past its lease this instance's exchanges may run (its outage grace plus
    /// the longest an exchange holds a turn), written in its record.
    after: Duration,
    /// How long past its lease an owner acts for what it owns while Redis cannot renew
    /// it (`fleet.outage_grace_seconds` with `keep_owned`, none with `refuse`).
    grace: Duration,
    /// Where this instance's peer channel listens, as others reach it.
    peer: String,
    /// The peer channel's TLS: how this member checks, before it joins, that its own
    /// peer channel answers at `peer`.
    tls: Arc<PeerTls>,
    /// Its registration, lease, and the keys it holds.
    standing: Mutex<Standing>,
    /// Wakes what waits for the leave to begin ([`Membership::leaves`]).
    leave_begins: tokio::sync::Notify,
    /// Every member at the last renewal, by id, with Redis' time then.
    members: ArcSwap<(i64, HashMap<String, Member>)>,
    /// Counts the renewals that brought a new epoch or generation (the claims are to be
    /// written again).
    changes: tokio::sync::watch::Sender<u64>,
    /// Whether this instance left the membership for good: no renewal is sent after
    /// that. Held while a renewal or the leave runs, so no renewal lands after the leave
    /// (which would register the instance anew).
    left: tokio::sync::Mutex<bool>,
    /// Redis' clock as the renewals saw it, watched for forward steps.
    redis_clock: Mutex<RedisClock>,
    /// A forward step of Redis' clock seen and not yet written into its fence (ms; 0:
    /// none).
    step_ms: AtomicI64,
}

impl Membership {
    /// The membership of this instance (its peer channel reached at `peer` through
    /// `tls`), leases of `lease` (acted on `grace` past their end without Redis; its
    /// exchanges may run `hold` after that), renewed by `fleet`'s health task.
    pub fn new(
        fleet: Arc<Fleet>,
        tls: Arc<PeerTls>,
        (lease, grace, hold): (Duration, Duration, Duration),
        peer: String,
    ) -> Arc<Membership> {
        let membership = Arc::new(Membership {
            fleet: fleet.clone(),
            lease,
            after: grace + hold,
            grace,
            peer,
            tls,
            standing: Mutex::new(Standing::new(lease, grace)),
            leave_begins: tokio::sync::Notify::new(),
            members: ArcSwap::from_pointee((0, HashMap::new())),
            changes: tokio::sync::watch::Sender::new(0),
            left: tokio::sync::Mutex::new(false),
            redis_clock: Mutex::default(),
            step_ms: AtomicI64::new(0),
        });
        fleet.set_beat(membership.clone());
        membership
    }

    /// This instance's member id.
    pub fn me(&self) -> &str {
        self.fleet.instance()
    }

    /// Where this instance's peer channel is reached (`fleet.peer_address`).
    pub fn peer(&self) -> &str {
        &self.peer
    }

    /// Before this instance joins: does its own peer channel answer at its
    /// `fleet.peer_address`? Not when the address is not `ip:port`, when nothing or
    /// something else answers there (an origin, a proxy port, Redis), or when another
    /// member does (two members announcing one address).
    async fn check_peer_address(&self) -> Result<(), Down> {
        let refused = |why: String| {
            Down::new(
                DownCause::PeerAddress,
                format!("fleet.peer_address {}: {why}; not joining", self.peer),
            )
        };
        let addr = self
            .peer
            .parse::<std::net::SocketAddr>()
            .map_err(|_| refused("not an ip:port".into()))?;
        let within = self.fleet.config().command_timeout_seconds.duration() * 4;
        let answering = self
            .tls
            .answering_member(addr, within)
            .await
            .map_err(|e| refused(e.to_string()))?;
        if answering != self.tls.member() {
            return Err(refused(format!("member {answering} answers there")));
        }
        Ok(())
    }

    /// This instance's standing, locked.
    pub(crate) fn standing(&self) -> MutexGuard<'_, Standing> {
        lock(&self.standing)
    }

    /// This process's clock, as its standing counts time.
    pub(crate) fn now(&self) -> Ms {
        self.fleet.local_ms()
    }

    /// This instance's epoch (0 before it registered).
    pub fn epoch(&self) -> u64 {
        self.standing().epoch()
    }

    /// May this instance act as an owner now: registered, its lease valid by its own
    /// clock, and not leaving?
    pub fn may_own(&self) -> bool {
        let now = self.now();
        self.standing().may_own(now)
    }

    /// Is this instance's lease valid by its own clock (its grace, with
    /// `on_unavailable: keep_owned`, included)?
    pub fn lease_valid(&self) -> bool {
        let now = self.now();
        self.standing().lease_valid(now)
    }

    /// Starts leaving: no new ownership; the next renewals say so to the others.
    pub fn leave(&self) {
        self.standing().leave();
        self.leave_begins.notify_waiters();
    }

    /// Resolves once this instance begins leaving (at once if it has).
    pub async fn leaves(&self) {
        loop {
            // Registered before the flag is read, so a `leave` in between still wakes.
            let woken = self.leave_begins.notified();
            if self.leaving() {
                return;
            }
            woken.await;
        }
    }

    /// Is this instance leaving?
    pub fn leaving(&self) -> bool {
        self.standing().leaving()
    }

    /// Every member at the last renewal, and Redis' time then (ms).
    pub fn members(&self) -> Arc<(i64, HashMap<String, Member>)> {
        self.members.load_full()
    }

    /// Redis' time now (ms) as this member ages its view by its own clock: the last
    /// renewal's reading moved on by the time passed here since (converted late: a
    /// lease is never seen longer than it is), never before the view's own time. A
    /// member whose lease ran out is not live, whether Redis answers now or not.
    pub fn aged(&self, seen: i64) -> i64 {
        let now = self.fleet.redis_time_of(tokio::time::Instant::now());
        now.map_or(seen, |now| now.max(seen))
    }

    /// Redis' time (ms) a member of the view seen at `seen` must be live at to be one
    /// this instance hands requests to and takes them from: the view aged here
    /// ([`Membership::aged`]) less the outage grace. An owner cut from Redis acts for
    /// what it owns that long past its lease by its own clock (`keep_owned`; every
    /// member of a fleet keeps one grace, `refuse` none), so its lease lapsing in the view
    /// revokes none of that: a stall shorter than the grace loses no request handed
    /// over, either way. A member that vanished is asked as long: one that does not
    /// answer is forgotten as the owner at once (`HandOver::route_again`), and its key
    /// opens nothing once the grace has passed too.
    pub fn acting_since(&self, seen: i64) -> i64 {
        self.aged(seen) - ms(self.grace)
    }

    /// Is `id` a member that may still act ([`Membership::acting_since`])? Per request
    /// on the peer channel: a lookup, nothing copied.
    pub fn is_live(&self, id: &str) -> bool {
        let members = self.members.load();
        let (seen, all) = &**members;
        all.get(id)
            .is_some_and(|m| m.live_at(self.acting_since(*seen)))
    }

    /// `id` as a member that may still act ([`Membership::acting_since`]), if it is one.
    pub fn live(&self, id: &str) -> Option<Member> {
        let members = self.members.load();
        let (seen, all) = &**members;
        all.get(id)
            .filter(|m| m.live_at(self.acting_since(*seen)))
            .cloned()
    }

    /// The member that stays (live, not leaving, not this one) that rendezvous hashing
    /// picks for `key`: where a leaving instance sends a key nobody owns yet.
    pub fn successor(&self, key: &str) -> Option<crate::fleet::Owner> {
        use std::hash::{Hash, Hasher};
        let members = self.members.load();
        let (seen, all) = &**members;
        let now = self.aged(*seen);
        all.values()
            .filter(|m| m.live_at(now) && m.state == MemberState::Up && m.id != self.me())
            .max_by_key(|m| {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                (key, &m.id).hash(&mut h);
                h.finish()
            })
            .map(|m| crate::fleet::Owner {
                key: key.to_string(),
                member: m.id.clone(),
                epoch: m.epoch,
                peer: m.peer.clone(),
            })
    }

    /// This instance's lease (`fleet.lease_seconds`).
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// How long past its lease this instance's exchanges may run.
    pub fn after(&self) -> Duration {
        self.after
    }

    /// The longest a renewal's news takes to reach every member connected to Redis:
    /// the settle window of a new data set.
    pub fn news_within(&self) -> Duration {
        HEALTH_EVERY * 2 + self.fleet.config().command_timeout_seconds.duration()
    }

    /// Moves on each time this instance's claims are to be written again.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Leaves the membership for good (after every origin was handed over): its record
    /// marked left, and no renewal sent any more (one would register it anew). Only an
    /// instance that is leaving: `false` when it is not (a fast stop).
    pub async fn deregister(&self) -> bool {
        let mut left = self.left.lock().await;
        if !self.leaving() {
            return false;
        }
        *left = true;
        let key = [MEMBERS];
        let mut call = script("member_leave").prepare_invoke();
        call.key(&key).arg(self.me()).arg(self.epoch());
        let _: Result<i64, _> = self.fleet.run("member_leave", &mut call).await;
        true
    }

    /// One renewal: the lease extended (or a new registration), the generation and the
    /// members read. None once this instance left for good.
    async fn renew(&self) -> Result<(), Down> {
        let left = self.left.lock().await;
        if *left {
            return Ok(());
        }
        if self.epoch() == 0 {
            self.check_peer_address().await?;
        }
        let sent = self.now();
        let (epoch, state, seen, running) = {
            let standing = self.standing();
            let state = if standing.leaving() { "leaving" } else { "up" };
            // How long this member's exchanges may still run, by its own clock.
            let running = standing.valid_until().map_or(0, |until| {
                (until + standing.grace() + ms(self.after) - sent).max(0)
            });
            let seen = standing.generation().to_string();
            (standing.epoch(), state, seen, running)
        };
        let mut call = script("member_renew").prepare_invoke();
        call.key(&RENEWAL_KEYS[..])
            .arg(self.me())
            .arg(epoch)
            .arg(ms(self.lease))
            .arg(&self.peer)
            .arg(self.fleet.ticket())
            .arg(state)
            .arg(ms(self.after))
            .arg(seen)
            .arg(running)
            .arg(ms(self.news_within()))
            .arg(match self.fleet.config().new_data_set {
                NewDataSet::Settle => "settle",
                NewDataSet::Fence => "fence",
            })
            .arg(self.step_ms.load(Ordering::Acquire));
        let answer: Vec<redis::Value> = self
            .fleet
            .run("member_renew", &mut call)
            .await
            .map_err(|_| Down::new(DownCause::Unreachable, "membership renewal failed"))?;
        if let Some(other) = peer_taken(&answer) {
            let why = format!(
                "fleet.peer_address {}: announced by live member {other}; not joining",
                self.peer
            );
            return Err(Down::new(DownCause::PeerAddress, why));
        }
        let renewal = parse_renewal(&answer)
            .ok_or_else(|| Down::new(DownCause::Error, "membership renewal: unreadable answer"))?;
        self.fleet.saw_redis_time(renewal.now, sent);
        let received = self.now();
        self.watch_redis_clock(Reading {
            sent,
            received,
            redis: renewal.now,
        });
        let changed = self
            .standing()
            .renewed(sent, received, renewal.epoch, &renewal.generation);
        if changed {
            log::warn!(
                "fleet membership: epoch {epoch} -> {}, generation {}; claims written again",
                renewal.epoch,
                renewal.generation
            );
            self.changes.send_modify(|n| *n += 1);
        }
        let live = renewal
            .members
            .values()
            .filter(|m| m.live_at(renewal.now))
            .count();
        crate::telemetry::metrics::FLEET_MEMBERS.set(live as i64);
        self.members.store(Arc::new((renewal.now, renewal.members)));
        Ok(())
    }

    /// Compares a renewal's readings with the last one's: a forward step of Redis'
    /// clock is logged, counted, and written into Redis' fence by the next renewal
    /// (sent at once); a renewal that carried it clears it.
    fn watch_redis_clock(&self, reading: Reading) {
        self.step_ms.store(0, Ordering::Release);
        if let Some(step) = lock(&self.redis_clock).saw(reading) {
            log::warn!(
                "fleet: Redis' clock stepped forward by about {step} ms; takeovers fenced \
                 until every member's lease and exchanges must be over"
            );
            crate::telemetry::metrics::record_redis_clock_step();
            self.step_ms.store(step.max(1), Ordering::Release);
        }
    }
}

#[async_trait::async_trait]
impl Beat for Membership {
    async fn beat(&self, _fleet: &Arc<Fleet>) -> Result<(), Down> {
        let mut renewed = self.renew().await;
        if renewed.is_ok() && self.step_ms.load(Ordering::Acquire) > 0 {
            // A step just seen: its fence is written now, not a beat later.
            renewed = self.renew().await;
        }
        // The gauge follows the lease every beat, renewed or not (a lapse happens
        // between renewals); requests only read the lease.
        let valid = self.lease_valid();
        crate::telemetry::metrics::FLEET_LEASE_VALID.set(i64::from(valid));
        renewed
    }
}

/// What a renewal answered.
struct Renewal {
    /// Redis' time (ms).
    now: i64,
    /// This instance's epoch.
    epoch: u64,
    /// The data set's generation.
    generation: String,
    /// Every member, by id.
    members: HashMap<String, Member>,
}

/// The live member that announces this one's peer address, when the renewal refused to
/// register it for that (`peer_taken`, then that member's id).
fn peer_taken(answer: &[redis::Value]) -> Option<String> {
    let text = |v: &redis::Value| -> Option<String> { redis::from_redis_value(v.clone()).ok() };
    match answer {
        [first, other] if text(first).as_deref() == Some("peer_taken") => text(other),
        _ => None,
    }
}

/// Reads a renewal's answer: Redis' time, the epoch, the generation, the fence, then id,
/// record pairs.
fn parse_renewal(answer: &[redis::Value]) -> Option<Renewal> {
    let text = |v: &redis::Value| -> Option<String> { redis::from_redis_value(v.clone()).ok() };
    let number = |v: &redis::Value| -> Option<i64> { redis::from_redis_value(v.clone()).ok() };
    let now = number(answer.first()?)?;
    let epoch = u64::try_from(number(answer.get(1)?)?).ok()?;
    let generation = text(answer.get(2)?)?;
    number(answer.get(3)?)?;
    let mut members = HashMap::new();
    for pair in answer.get(4..)?.chunks(2) {
        let (Some(id), Some(value)) = (pair.first().and_then(text), pair.get(1).and_then(text))
        else {
            continue;
        };
        if let Some(member) = Member::parse(&id, &value) {
            members.insert(id, member);
        }
    }
    Some(Renewal {
        now,
        epoch,
        generation,
        members,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_records_read_back() {
        let m = Member::parse("a.1", "7|1000|leaving|10.0.0.1:7443|5000|130000").expect("member");
        assert_eq!(
            (m.epoch, m.expires_ms, m.state),
            (7, 1000, MemberState::Leaving)
        );
        assert!(
            Member::parse("a", "1|2|gone|p|1|1").is_none(),
            "a state unknown"
        );
        assert_eq!(m.peer, "10.0.0.1:7443");
        assert!(Member::parse("a", "x|1|up|p|1|1").is_none());
        assert!(Member::parse("a", "1|2").is_none());
        assert!(Member::parse("a", "1|2|up|p").is_none(), "an older record");
    }

    #[test]
    fn a_renewal_answer_is_read_whole_or_not_at_all() {
        use redis::Value::{BulkString, Int};
        let answer = vec![
            Int(5000),
            Int(3),
            BulkString(b"gen".to_vec()),
            Int(0),
            BulkString(b"a.1".to_vec()),
            BulkString(b"3|9000|up|127.0.0.1:1|5000|1000".to_vec()),
            BulkString(b"b.2".to_vec()),
            BulkString(b"garbage".to_vec()),
        ];
        let renewal = parse_renewal(&answer).expect("read");
        assert_eq!(
            (renewal.now, renewal.epoch, renewal.generation.as_str()),
            (5000, 3, "gen")
        );
        assert_eq!(renewal.members.len(), 1, "an unreadable member is skipped");
        assert!(parse_renewal(&answer[..3]).is_none());
    }
}
