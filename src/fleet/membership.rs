//! Membership: which instances make up the fleet, each with a lease and an epoch.
//!
//! **Algorithm.** Every [`HEALTH_EVERY`] the backend's health task runs this instance's
//! renewal (`scripts/member_renew.lua`): one script call that extends its lease to
//! `fleet.lease_seconds` past Redis' clock, registers it afresh (a new epoch from a
//! counter) when it has no live record — its first start, a lease that lapsed (a stalled
//! process, a partition), a Redis that lost it — and returns every member (id, epoch,
//! lease expiry, state, peer address) and the data set's boot id. So every instance
//! learns of a join, a leave or a lapse within one renewal (half a second) of Redis
//! knowing it, and of a lapse at most `lease_seconds` after the member's last renewal.
//!
//! **Own lease, own clock.** An instance acts as an owner only while its lease is valid
//! by its *own* monotonic clock: it counts from when it sent the renewal that Redis
//! answered (which is before Redis set the expiry), so it stops at the latest when Redis
//! says its lease ends — a process stopped past its lease and resumed does not act on a
//! lease that lapsed, until a renewal registers it again with a new epoch (its claims
//! then name the old one, and only it may take them back, see `ownership`).
//!
//! **Losses.** A changed boot id means Redis lost its data set (restarted empty); the
//! backend's return (down → up) that Redis may have lost acknowledged writes (a
//! replica promoted): both make the owners write their claims again (`ownership`).
//!
//! Costs: one script call per instance per half second, whatever the request rate; the
//! member list is small (instances, not origins).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::time::Instant;

use crate::fleet::backend::{lock, ms, Beat, Fleet, HEALTH_EVERY};
use crate::fleet::down::Down;
use crate::fleet::scripts::script;
use crate::telemetry::metrics::DownCause;

/// The membership keys, in one hash slot.
const MEMBERS: &str = "{robotsgate}:members";
/// The epoch counter.
const EPOCH: &str = "{robotsgate}:epoch";
/// The data set's boot id.
pub const BOOT: &str = "{robotsgate}:boot";

/// One member as the renewal returned it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// Its id (unique per process start).
    pub id: String,
    /// Its registration's number: a new one each time it registers.
    pub epoch: u64,
    /// When its lease ends, in Redis time (ms).
    pub expires_ms: i64,
    /// It is handing its origins over and leaving.
    pub leaving: bool,
    /// Where its peer channel listens (`host:port`).
    pub peer: String,
}

impl Member {
    /// Reads a member record: `epoch|expires_ms|state|peer`.
    fn parse(id: &str, value: &str) -> Option<Member> {
        let mut fields = value.splitn(4, '|');
        Some(Member {
            id: id.to_string(),
            epoch: fields.next()?.parse().ok()?,
            expires_ms: fields.next()?.parse().ok()?,
            leaving: fields.next()? == "leaving",
            peer: fields.next()?.to_string(),
        })
    }
}

/// What this instance knows of the fleet: its own registration and lease, and every
/// member seen at the last renewal.
pub struct Membership {
    /// The backend.
    fleet: Arc<Fleet>,
    /// `fleet.lease_seconds`.
    lease: Duration,
    /// How long past its lease an owner keeps acting without Redis
    /// (`fleet.outage_grace_seconds` with `on_unavailable: keep_owned`, else zero).
    grace: Duration,
    /// Where this instance's peer channel listens, as others reach it.
    peer: String,
    /// This instance's epoch (0: not registered yet).
    epoch: AtomicU64,
    /// Until when this instance may act as an owner, by its own clock.
    valid_until: Mutex<Option<Instant>>,
    /// Leaving: handing over, taking no new ownership.
    leaving: AtomicBool,
    /// Wakes what waits for the leave to begin ([`Membership::leaves`]).
    leave_begins: tokio::sync::Notify,
    /// Every member at the last renewal, by id, with Redis' time then.
    members: ArcSwap<(i64, HashMap<String, Member>)>,
    /// The data set's boot id seen last.
    boot: Mutex<Option<String>>,
    /// Counts the renewals that found Redis lost its data set, or re-registered this
    /// instance (its claims are to be written again).
    losses: tokio::sync::watch::Sender<u64>,
    /// This instance's random boot id, offered when the data set has none.
    offer: String,
    /// After a loss: until when the owners' claims are still being written again (no key
    /// nobody claims is taken meanwhile), and the members known just before it, with
    /// their leases' ends (Redis ms).
    loss: Mutex<Option<(Instant, HashMap<String, i64>)>>,
}

impl Membership {
    /// The membership of this instance (its peer channel reached at `peer`), leases of
    /// `lease` (acted on `grace` past their end without Redis), renewed by `fleet`'s
    /// health task.
    pub fn new(
        fleet: Arc<Fleet>,
        lease: Duration,
        grace: Duration,
        peer: String,
    ) -> Arc<Membership> {
        let membership = Arc::new(Membership {
            offer: fleet.ticket(),
            fleet: fleet.clone(),
            lease,
            grace,
            peer,
            epoch: AtomicU64::new(0),
            valid_until: Mutex::new(None),
            leaving: AtomicBool::new(false),
            leave_begins: tokio::sync::Notify::new(),
            members: ArcSwap::from_pointee((0, HashMap::new())),
            boot: Mutex::new(None),
            losses: tokio::sync::watch::Sender::new(0),
            loss: Mutex::new(None),
        });
        fleet.set_beat(membership.clone());
        membership
    }

    /// This instance's member id.
    pub fn me(&self) -> &str {
        self.fleet.instance()
    }

    /// This instance's epoch (0 before it registered).
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// May this instance act as an owner now: registered, its lease valid by its own
    /// clock, and not leaving?
    pub fn may_own(&self) -> bool {
        !self.leaving.load(Ordering::Acquire) && self.lease_valid()
    }

    /// Is this instance's lease valid by its own clock (its grace, with
    /// `on_unavailable: keep_owned`, included)?
    pub fn lease_valid(&self) -> bool {
        lock(&self.valid_until).is_some_and(|until| Instant::now() < until + self.grace)
    }

    /// Until when this instance's lease is valid by its own clock.
    pub fn valid_until(&self) -> Option<Instant> {
        *lock(&self.valid_until)
    }

    /// Starts leaving: no new ownership; the next renewals say so to the others.
    pub fn leave(&self) {
        self.leaving.store(true, Ordering::Release);
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
        self.leaving.load(Ordering::Acquire)
    }

    /// Every member at the last renewal, and Redis' time then (ms).
    pub fn members(&self) -> Arc<(i64, HashMap<String, Member>)> {
        self.members.load_full()
    }

    /// `id` as a live member (its lease not over at the last renewal), if it is one.
    pub fn live(&self, id: &str) -> Option<Member> {
        let members = self.members.load();
        let (now, all) = &**members;
        all.get(id).filter(|m| m.expires_ms > *now).cloned()
    }

    /// The member that stays (live, not leaving, not this one) that rendezvous hashing
    /// picks for `key`: where a leaving instance sends a key nobody owns yet.
    pub fn successor(&self, key: &str) -> Option<crate::fleet::Owner> {
        use std::hash::{Hash, Hasher};
        let members = self.members.load();
        let (now, all) = &**members;
        all.values()
            .filter(|m| m.expires_ms > *now && !m.leaving && m.id != self.me())
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

    /// The data set's boot id as this instance last saw it.
    pub fn boot(&self) -> Option<String> {
        lock(&self.boot).clone()
    }

    /// This instance's lease (`fleet.lease_seconds`).
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// Just after Redis lost claims, while the owners write theirs again: a key nobody
    /// claims is not taken yet.
    pub fn settling(&self) -> bool {
        lock(&self.loss)
            .as_ref()
            .is_some_and(|(until, _)| Instant::now() < *until)
    }

    /// Redis may have lost claims (restarted empty, or a replica promoted without the
    /// last writes): for a while no key nobody claims is taken, and one taken later
    /// waits for the exchanges of every member known now (see `orphans_until_ms`).
    pub fn note_possible_loss(&self) {
        let before = self.members.load();
        let known: HashMap<String, i64> = before
            .1
            .iter()
            .filter(|(id, _)| id.as_str() != self.me())
            .map(|(id, m)| (id.clone(), m.expires_ms))
            .collect();
        // Alone, no other member's claim can have been lost.
        *lock(&self.loss) =
            (!known.is_empty()).then(|| (Instant::now() + self.news_within() * 2, known));
    }

    /// After Redis may have lost claims: the latest lease end (Redis ms) of the other
    /// members known before — a key nobody claims may have been theirs (its claim lost
    /// and not written again yet), and an exchange of theirs may still run.
    pub fn orphans_until_ms(&self) -> Option<i64> {
        let loss = lock(&self.loss);
        let (_, before) = loss.as_ref()?;
        before
            .iter()
            .filter(|(id, _)| id.as_str() != self.me())
            .map(|(_, expires)| *expires)
            .max()
    }

    /// Moves on each time this instance's claims are to be written again.
    pub fn losses(&self) -> tokio::sync::watch::Receiver<u64> {
        self.losses.subscribe()
    }

    /// The longest a renewal's news takes to reach every instance.
    pub fn news_within(&self) -> Duration {
        HEALTH_EVERY * 2 + self.fleet.config().command_timeout_seconds.duration()
    }

    /// Leaves the membership for good (after every origin was handed over).
    pub async fn deregister(&self) {
        let key = [MEMBERS];
        let mut call = script("member_leave").prepare_invoke();
        call.key(&key).arg(self.me()).arg(self.epoch());
        let _: Result<i64, _> = self.fleet.run("member_leave", &mut call).await;
    }

    /// One renewal: the lease extended (or a new registration), the members read.
    async fn renew(&self) -> Result<(), Down> {
        let sent = Instant::now();
        let state = if self.leaving() { "leaving" } else { "up" };
        let mut call = script("member_renew").prepare_invoke();
        call.key(MEMBERS)
            .key(EPOCH)
            .key(BOOT)
            .arg(self.me())
            .arg(self.epoch())
            .arg(ms(self.lease))
            .arg(&self.peer)
            .arg(&self.offer)
            .arg(state);
        let answer: Vec<redis::Value> = self
            .fleet
            .run("member_renew", &mut call)
            .await
            .map_err(|_| Down::new(DownCause::Unreachable, "membership renewal failed"))?;
        let (now, epoch, boot, members) = parse_renewal(&answer)
            .ok_or_else(|| Down::new(DownCause::Error, "membership renewal: unreadable answer"))?;
        self.fleet.saw_redis_time(now);
        *lock(&self.valid_until) = Some(sent + self.lease);
        let previous = self.epoch.swap(epoch, Ordering::AcqRel);
        let lost_boot = {
            let mut seen = lock(&self.boot);
            let changed = seen.as_deref().is_some_and(|b| b != boot);
            *seen = Some(boot);
            changed
        };
        if lost_boot {
            self.note_possible_loss();
        }
        if (previous != 0 && previous != epoch) || lost_boot {
            log::warn!(
                "fleet membership: {} (epoch {previous} -> {epoch}); claims written again",
                if lost_boot {
                    "Redis lost its data set"
                } else {
                    "registered again after a lapse"
                }
            );
            self.losses.send_modify(|n| *n += 1);
        }
        let live = members.values().filter(|m| m.expires_ms > now).count();
        crate::telemetry::metrics::FLEET_MEMBERS.set(live as i64);
        self.members.store(Arc::new((now, members)));
        Ok(())
    }
}

#[async_trait::async_trait]
impl Beat for Membership {
    async fn beat(&self, _fleet: &Arc<Fleet>) -> Result<(), Down> {
        let renewed = self.renew().await;
        // The gauge follows the lease every beat, renewed or not (a lapse happens
        // between renewals); requests only read the lease.
        let valid = self.lease_valid();
        crate::telemetry::metrics::FLEET_LEASE_VALID.set(i64::from(valid));
        renewed
    }
}

/// Reads a renewal's answer: Redis' time, the epoch, the boot id, then id, value pairs.
fn parse_renewal(answer: &[redis::Value]) -> Option<(i64, u64, String, HashMap<String, Member>)> {
    let text = |v: &redis::Value| -> Option<String> { redis::from_redis_value(v.clone()).ok() };
    let number = |v: &redis::Value| -> Option<i64> { redis::from_redis_value(v.clone()).ok() };
    let now = number(answer.first()?)?;
    let epoch = u64::try_from(number(answer.get(1)?)?).ok()?;
    let boot = text(answer.get(2)?)?;
    let mut members = HashMap::new();
    for pair in answer.get(3..)?.chunks(2) {
        let (Some(id), Some(value)) = (pair.first().and_then(text), pair.get(1).and_then(text))
        else {
            continue;
        };
        if let Some(member) = Member::parse(&id, &value) {
            members.insert(id, member);
        }
    }
    Some((now, epoch, boot, members))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_records_read_back() {
        let m = Member::parse("a.1", "7|1000|leaving|10.0.0.1:7443").expect("member");
        assert_eq!((m.epoch, m.expires_ms, m.leaving), (7, 1000, true));
        assert_eq!(m.peer, "10.0.0.1:7443");
        assert!(Member::parse("a", "x|1|up|p").is_none());
        assert!(Member::parse("a", "1|2").is_none());
    }

    #[test]
    fn a_renewal_answer_is_read_whole_or_not_at_all() {
        use redis::Value::{BulkString, Int};
        let answer = vec![
            Int(5000),
            Int(3),
            BulkString(b"boot".to_vec()),
            BulkString(b"a.1".to_vec()),
            BulkString(b"3|9000|up|127.0.0.1:1".to_vec()),
            BulkString(b"b.2".to_vec()),
            BulkString(b"garbage".to_vec()),
        ];
        let (now, epoch, boot, members) = parse_renewal(&answer).expect("read");
        assert_eq!((now, epoch, boot.as_str()), (5000, 3, "boot"));
        assert_eq!(members.len(), 1, "an unreadable member is skipped");
        assert!(parse_renewal(&answer[..2]).is_none());
    }
}
