//! The pacing turns of a robots.txt fetch: a request to its origin like any other,
//! which takes a turn on every schedule of the origin (in the requests' order: group
//! turns first, then the in-flight one) and whose end starts each one's next delay.
//! Alone, from the local schedules; in fleet mode, from the shared ones; through an
//! outage with `on_unavailable: local`, by the origin's owner only ([`super::outage`]).

use std::sync::Arc;

use tokio::time::Instant;

use crate::config::OnUnavailable;
use crate::pacing::backend::{self, Fleet};
use crate::pacing::local::{Schedule, IN_FLIGHT};
use crate::pacing::{record_owned, HeldTurn, Pacer, Place, TurnKind};
use crate::telemetry::metrics;

/// The turns a robots.txt fetch holds: one on every schedule of its origin, taken in
/// arrival order like a page's and released when the fetch ends (which starts each
/// schedule's next delay).
pub struct FetchTurns {
    _held: Vec<HeldTurn>,
}

impl Pacer {
    /// [`Pacer::turns_for_fetch`] at a server address (`pacing.key: address`): its
    /// in-flight schedule is made if it has none yet, so fetches of many names on one
    /// server are limited there from the first, like its pages.
    pub async fn turns_for_fetch_at(&self, place: Place<'_>) -> Option<FetchTurns> {
        if self.config.max_in_flight > 0 {
            self.schedule(place, IN_FLIGHT, self.config.max_in_flight);
        }
        self.turns_for_fetch(place).await
    }

    /// Waits for the turn of every one of `place`'s schedules, for a robots.txt fetch.
    /// `None` when they are not all free within `max_wait_seconds` (a long pause, a long
    /// queue), or during an outage on an origin this instance does not own (the store
    /// asks [`Pacer::may_fetch_alone`] first). The store fetches without turns then.
    pub async fn turns_for_fetch(&self, place: Place<'_>) -> Option<FetchTurns> {
        if let Some(fleet) = &self.fleet {
            match self.shared_turns_for_fetch(fleet, place).await {
                Ok(turns) => return turns,
                Err(_) if fleet.config().on_unavailable == OnUnavailable::Local => {
                    metrics::record_fleet_fallback("local");
                    return self.owned_turns_for_fetch(fleet, place).await;
                }
                // `refuse`: the fetch was granted its lock while Redis answered and lost
                // it since; this instance's own schedules at least keep its own pace.
                Err(_) => metrics::record_fleet_fallback("local"),
            }
        }
        self.local_turns_for_fetch(place).await
    }

    /// [`Pacer::turns_for_fetch`] from the local schedules.
    async fn local_turns_for_fetch(&self, place: Place<'_>) -> Option<FetchTurns> {
        let mut list: Vec<Arc<Schedule>> = place.schedules.list();
        // One order for every fetch of the origin (only one runs at a time anyway), and
        // the requests' order: group turns before the in-flight one, so the fetch never
        // holds an in-flight turn while queued for a group turn.
        list.sort_by(|a, b| {
            (a.group == IN_FLIGHT, &a.group).cmp(&(b.group == IN_FLIGHT, &b.group))
        });
        let deadline = Instant::now() + self.config.max_wait_seconds.duration();
        let mut held = Vec::new();
        for schedule in list {
            let turn = self.local_turn(&schedule, 1, deadline).await.ok()?;
            held.push(self.held(schedule, TurnKind::Local(turn)));
        }
        Some(FetchTurns { _held: held })
    }

    /// Fleet mode, the backend down: may this instance fetch `place`'s robots.txt alone
    /// (`on_unavailable: local`, it owns the place, and its turn comes within
    /// `max_wait_seconds`)?
    pub fn may_fetch_alone(&self, place: Place<'_>) -> bool {
        let Some(fleet) = &self.fleet else {
            return true;
        };
        if fleet.config().on_unavailable != OnUnavailable::Local {
            return false;
        }
        self.owned_start(fleet, &self.schedule(place, "", 1))
            .is_ok()
    }

    /// Fleet mode, the backend down, `on_unavailable: local`: a robots.txt fetch's turns
    /// when this instance owns `place` (as [`Pacer::owner_turns`], on every schedule of
    /// the place), `None` when another does or the wait would be too long.
    async fn owned_turns_for_fetch(
        &self,
        fleet: &Arc<Fleet>,
        place: Place<'_>,
    ) -> Option<FetchTurns> {
        let not_before = self.owned_start(fleet, &self.schedule(place, "", 1)).ok()?;
        tokio::time::sleep_until(not_before).await;
        let mut turns = self.local_turns_for_fetch(place).await?;
        record_owned(fleet, &mut turns._held);
        Some(turns)
    }

    /// Fleet mode: a robots.txt fetch takes the turn of each group schedule `place` has
    /// (the schedule's own delay) and one in-flight turn; with no schedule yet, the
    /// default group's, so a first fetch keeps the origin's in-flight limit and any
    /// delay the fleet has in force there.
    async fn shared_turns_for_fetch(
        &self,
        fleet: &Arc<Fleet>,
        place: Place<'_>,
    ) -> Result<Option<FetchTurns>, backend::Unavailable> {
        let mut groups: Vec<Arc<Schedule>> = place
            .schedules
            .list()
            .into_iter()
            .filter(|s| s.group != IN_FLIGHT)
            .collect();
        if groups.is_empty() {
            groups.push(self.schedule(place, "", 1));
        }
        groups.sort_by(|a, b| a.group.cmp(&b.group));
        let mut held = Vec::new();
        for (i, schedule) in groups.into_iter().enumerate() {
            let capacity = if i == 0 { self.config.max_in_flight } else { 0 };
            let Ok(turn) = self.shared_turn(fleet, &schedule, capacity, None).await? else {
                return Ok(None);
            };
            held.push(self.held(schedule, TurnKind::Shared(Box::new(turn))));
        }
        Ok(Some(FetchTurns { _held: held }))
    }
}
