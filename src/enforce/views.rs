//! What the admin API, the status page and the server read of an [`Enforcer`], and what
//! they may ask of it: read-only views and a few commands (refresh, purge, the state
//! file), never its parts. Everything here costs an admin page's price (a scan of the
//! store at most), never a request's.

use std::sync::Arc;

use crate::config::OnUnavailable;
use crate::origin::recent::{ChangeRecord, FetchRecord};
use crate::origin::state::{Limits, StateFile};
use crate::origin::store::{OriginEntry, Snapshot};
use crate::pacing::ScheduleState;
use crate::policy::target::Origin;

use super::Enforcer;

/// One origin as an operator sees it: its robots.txt copy, its pacing schedules, its
/// recent fetches and rule changes.
pub struct OriginView {
    /// The origin.
    origin: Origin,
    /// Its entry in the store.
    entry: Arc<OriginEntry>,
    /// Its robots.txt copy, if one is held.
    snapshot: Option<Arc<Snapshot>>,
    /// Its last fetches, oldest first.
    history: Vec<FetchRecord>,
    /// Its last rule changes, oldest first.
    changes: Vec<ChangeRecord>,
}

impl OriginView {
    /// Which origin.
    pub fn origin(&self) -> &Origin {
        &self.origin
    }

    /// Decisions asked for it since it entered the store.
    pub fn requests(&self) -> u64 {
        self.entry.requests()
    }

    /// Its robots.txt copy, if one is held.
    pub fn snapshot(&self) -> Option<&Arc<Snapshot>> {
        self.snapshot.as_ref()
    }

    /// Its pacing schedules, as they stand.
    pub fn schedules(&self) -> Vec<ScheduleState> {
        self.entry.schedules().states()
    }

    /// Its last robots.txt fetches, oldest first.
    pub fn history(&self) -> &[FetchRecord] {
        &self.history
    }

    /// Its last rule changes, oldest first.
    pub fn changes(&self) -> &[ChangeRecord] {
        &self.changes
    }
}

/// The fleet as readiness and the status page see it.
#[derive(Clone, Debug)]
pub struct FleetView {
    /// Redis answers.
    pub up: bool,
    /// Why not, when it does not.
    pub down_reason: String,
    /// What an owner does meanwhile.
    pub on_unavailable: OnUnavailable,
    /// This instance's lease is valid by its own clock (with `keep_owned`, its grace
    /// included): it may pace what it owns.
    pub lease_valid: bool,
}

impl Enforcer {
    /// `enforce`, `report`, or `mixed` (some clients, users or agent rules report).
    pub fn mode_label(&self) -> &'static str {
        self.agents.mode_label()
    }

    /// Origins held in the store.
    pub fn origins_held(&self) -> usize {
        self.store.len()
    }

    /// Requests waiting for or holding a pacing turn, over every schedule.
    pub fn queued(&self) -> usize {
        self.pacer.queued()
    }

    /// The `n` origins with the most decisions, busiest first.
    pub fn busiest(&self, n: usize) -> Vec<OriginView> {
        self.store
            .busiest(n)
            .into_iter()
            .map(|(origin, entry)| self.view(origin, entry))
            .collect()
    }

    /// The `n` origins with the longest pacing queues (the status page's chart).
    pub fn longest_queues(&self, n: usize) -> Vec<(Origin, usize)> {
        self.store.longest_queues(n)
    }

    /// `origin` as held, if it is (never fetches, never makes it recently used).
    pub fn origin_view(&self, origin: &Origin) -> Option<OriginView> {
        let entry = self.store.peek(origin)?;
        Some(self.view(origin.clone(), entry))
    }

    /// Fetches `origin`'s robots.txt now (after any fetch in progress), in its turn.
    pub async fn refresh(&self, origin: &Origin) {
        self.store.refresh(origin).await;
    }

    /// Forgets `origin`'s robots.txt copy (fleet-wide in fleet mode), never its
    /// pacing. True if a copy was held here.
    pub fn purge(&self, origin: &Origin) -> bool {
        self.store.purge(origin)
    }

    /// The fleet's state, in fleet mode.
    pub fn fleet_view(&self) -> Option<FleetView> {
        let (fleet, owners) = (self.fleet.as_ref()?, self.owners.as_ref()?);
        Some(FleetView {
            up: fleet.up(),
            down_reason: fleet.down_reason(),
            on_unavailable: fleet.config().on_unavailable,
            lease_valid: owners.lease_valid(),
        })
    }

    /// The members, their epochs and how many origins each owns (as this instance
    /// knows, without asking Redis), in fleet mode: the admin API's `/fleet`.
    pub fn fleet_members(&self) -> Option<serde_json::Value> {
        self.owners.as_ref().map(|owners| owners.view())
    }

    /// Who owns `origin`'s pacing, as this instance knows (`here`, another member's
    /// id, or `None`: not known here), in fleet mode.
    pub fn owner_of(&self, origin: &Origin) -> Option<Option<String>> {
        let owners = self.owners.as_ref()?;
        Some(owners.known_owner(&origin.to_string()))
    }

    /// Loads `state` into the store at start (before the listeners accept).
    pub fn load_state(&self, state: &StateFile, limits: Limits, upgrade: bool) {
        state.load_at_start(&self.store, limits, upgrade);
    }

    /// Writes `state` now (`why`: periodic, upgrade, stop).
    pub fn save_state(&self, state: &StateFile, why: &str) {
        state.write(&self.store, why);
    }

    /// Keeps `state` written every `every`, on a thread of its own.
    pub fn keep_state_written(
        &self,
        state: Arc<StateFile>,
        every: std::time::Duration,
    ) -> std::io::Result<()> {
        state.keep_writing(self.store.clone(), every)
    }

    /// The view of `origin`'s entry.
    fn view(&self, origin: Origin, entry: Arc<OriginEntry>) -> OriginView {
        OriginView {
            snapshot: entry.snapshot(),
            history: self.store.history(&origin),
            changes: self.store.changes(&origin),
            origin,
            entry,
        }
    }
}
