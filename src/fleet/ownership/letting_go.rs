//! Letting an owned key go: a graceful leave ([`Ownership::release`]), an idle key
//! ([`Ownership::release_idle`]), and a key handed to the member its traffic comes from
//! ([`Ownership::hand_to`]). Each releases the claim in Redis with the key's facts (to
//! nobody, or naming an heir) while the key is held so that no turn acts for it.

use std::collections::HashSet;
use std::time::Duration;

use tokio::time::Instant;

use super::{claim_key, Owner, Ownership, KEEP};
use crate::fleet::backend::{lock, ms, Unavailable};
use crate::fleet::membership::{Member, MemberState, GENERATION, SERVER};
use crate::fleet::scripts::script;
use crate::fleet::standing::Held;
use crate::pacing::ScheduleFacts;
use crate::telemetry::metrics;

/// How often a leaving member sends again a release Redis did not answer.
pub const RESEND_EVERY: Duration = Duration::from_millis(200);

impl Ownership {
    /// Hands `key` over: its claim released with each group's facts. The key stays
    /// held, as releasing, until Redis has answered: a request meanwhile waits, then
    /// finds the claim gone (never this instance's still standing). A release Redis did
    /// not answer (a timeout, a lost connection) is sent again every [`RESEND_EVERY`]
    /// until `until`: a release Redis ran already answers `0` the second time, changing
    /// nothing, so a leaving member's keys pass on once Redis answers again, rather than
    /// stay claimed by a member that serves them no more while it drains. `false` when
    /// it was not this instance's, or Redis could not be told by `until` (it is then
    /// taken over as a vanished owner's, after the longest hold).
    pub async fn release(&self, key: &str, groups: &[ScheduleFacts], until: Instant) -> bool {
        let epoch = {
            let mut standing = self.members.standing();
            match standing.mark(key, Held::In, Held::Releasing) {
                Some(epoch) => Some(epoch),
                None => standing.mark(key, Held::Moving, Held::Releasing),
            }
        };
        let Some(epoch) = epoch else {
            return false;
        };
        let mut sent = 0u32;
        let released = loop {
            sent += 1;
            match self.release_claim(key, epoch, groups, None).await {
                Ok(released) => break released,
                Err(Unavailable) if Instant::now() + RESEND_EVERY < until => {
                    if sent == 1 {
                        log::warn!("fleet: leaving; Redis did not answer the release of {key}: sending it again until it does");
                    }
                    tokio::time::sleep(RESEND_EVERY).await;
                }
                Err(Unavailable) => {
                    log::warn!("fleet: leaving; Redis answered none of {sent} releases of {key} by the stop's deadline: left to lapse");
                    break false;
                }
            }
        };
        if sent > 1 {
            log::info!("fleet: leaving; the release of {key} was answered after {sent} sendings");
        }
        self.let_go(key, "released");
        released
    }

    /// Releases `key`, owned and idle: marked releasing first (no request is routed
    /// here for it meanwhile), then `idle` says whether it still is (nothing uses its
    /// entry, nothing in force) and gives its groups' facts; the claim goes, and the key
    /// is this instance's no more. `false`: not owned in this epoch, or not idle.
    pub async fn release_idle(
        &self,
        key: &str,
        idle: impl FnOnce() -> Option<Vec<ScheduleFacts>>,
    ) -> bool {
        let Some(epoch) = self.members.standing().mark(key, Held::In, Held::Releasing) else {
            return false;
        };
        let Some(groups) = idle() else {
            self.members
                .standing()
                .hold_as(key, Held::Releasing, Held::In);
            return false;
        };
        // The claim goes before the key leaves the standing: a request meanwhile waits,
        // then finds it free (or another's), never this instance's claim still standing.
        let released = self.release_claim(key, epoch, &groups, None).await == Ok(true);
        self.let_go(key, "idle");
        released
    }

    /// `key` is this instance's no more (`how`: counted so).
    fn let_go(&self, key: &str, how: &'static str) {
        let mut standing = self.members.standing();
        standing.drop_key(key);
        metrics::FLEET_OWNED.set(standing.len() as i64);
        metrics::record_ownership(how);
    }

    /// The owned keys whose last requests all came handed over from one other member
    /// (see `fleet::traffic`) that is live and not leaving, each with that member, its
    /// heir; none while this instance leaves.
    pub fn followers(&self) -> Vec<(String, Member)> {
        let followers = self.traffic.followers(&self.owned_set());
        if self.members.leaving() {
            return Vec::new();
        }
        let me = self.members.me();
        followers
            .into_iter()
            .filter_map(|(key, via)| {
                let heir = self.members.live(&via)?;
                let fit = heir.state == MemberState::Up && heir.id != me && self.acts_for(&key);
                fit.then_some((key, heir))
            })
            .collect()
    }

    /// The owned keys nobody asked for for `after` (see `fleet::traffic`): each is
    /// released if it is idle still ([`Ownership::release_idle`]).
    pub fn idle(&self, after: Duration) -> Vec<String> {
        self.traffic.idle(&self.owned_set(), after)
    }

    /// The keys this instance owns, as a set.
    fn owned_set(&self) -> HashSet<String> {
        self.owned().into_iter().collect()
    }

    /// Hands owned `key` to `heir`, where its requests come from. The key is held as
    /// moving (new requests for it wait; turns already waited for are taken); once
    /// `quiet` says no turn of it is waited for or held (within `within`) it is marked
    /// releasing (no turn acts for it) and `quiet` gives its groups' facts; its claim
    /// becomes the heir's with those facts, as in a graceful leave. The heir takes it
    /// with the next request it routes for it (it finds its own name on the claim,
    /// marked released) and starts from the facts at once. A request the heir handed here
    /// meanwhile is refused, its owner having changed, and the heir routes it again.
    /// `false`: not owned in this epoch, or not quiet within `within` (kept); or Redis
    /// was not told (the key is not acted on here any more either way: its next request
    /// here claims it again, or finds its owner).
    pub async fn hand_to(
        &self,
        key: &str,
        heir: &Member,
        quiet: impl Fn() -> Option<Vec<ScheduleFacts>>,
        within: Duration,
    ) -> bool {
        if self
            .members
            .standing()
            .mark(key, Held::In, Held::Moving)
            .is_none()
        {
            return false;
        }
        let deadline = Instant::now() + within;
        while quiet().is_none() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // From here no turn acts for it, so its facts are final.
        let marked = self
            .members
            .standing()
            .mark(key, Held::Moving, Held::Releasing);
        let Some(epoch) = marked else {
            // The graceful leave took it meanwhile, or a change of epoch or generation
            // came: held in again, and written again as any other key.
            self.members.standing().hold_as(key, Held::Moving, Held::In);
            return false;
        };
        let Some(groups) = quiet() else {
            self.members
                .standing()
                .hold_as(key, Held::Releasing, Held::In);
            return false;
        };
        let handed = self.release_claim(key, epoch, &groups, Some(heir)).await == Ok(true);
        if handed {
            let owner = Owner {
                key: key.to_string(),
                member: heir.id.clone(),
                epoch: heir.epoch,
                peer: heir.peer.clone(),
            };
            lock(&self.owners).put(key.to_string(), owner);
        }
        self.let_go(key, "followed");
        handed
    }

    /// Waits while `key`'s release or hand-over runs (one Redis command, or the wait for
    /// a quiet key; at most a lease).
    pub(super) async fn wait_released(&self, key: &str) {
        let deadline = Instant::now() + self.members.lease();
        while self
            .members
            .standing()
            .holding(key)
            .is_some_and(|h| h.held != Held::In)
            && Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Releases `key`'s claim of `epoch` in Redis with each group's facts (kept for the
    /// next owner, the record expiring after [`KEEP`]), to nobody or to `heir`: `true`
    /// when Redis did, `false` when it answered that the claim was not this one's (gone,
    /// another's, or released already), [`Unavailable`] when it did not answer (it may
    /// still run it: sending it again is safe).
    async fn release_claim(
        &self,
        key: &str,
        epoch: u64,
        groups: &[ScheduleFacts],
        heir: Option<&Member>,
    ) -> Result<bool, Unavailable> {
        let (generation, token) = {
            let standing = self.members.standing();
            let token = standing.holding(key).map_or(0, |h| h.token);
            (standing.generation().to_string(), token)
        };
        let mut call = script("own_release").prepare_invoke();
        call.key(claim_key(key))
            .key(GENERATION)
            .key(SERVER)
            .arg(self.members.me())
            .arg(epoch)
            .arg(&generation)
            .arg(ms(KEEP))
            .arg(heir.map_or("", |h| h.id.as_str()))
            .arg(heir.map_or(0, |h| h.epoch))
            .arg(token);
        for facts in groups {
            call.arg(&facts.group).arg(self.encode(facts));
        }
        let released: i64 = self.fleet.run("own_release", &mut call).await?;
        Ok(released == 1)
    }
}
