//! A request's turn as the proxy holds it: the pacing turns it was granted, and how the
//! origin's exchange ended, which decides when they end (see docs/enforcement.md, "A turn: what
//! the origin sees").

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::ExchangeBounds;
use crate::fleet::Owners;
use crate::origin::store::OriginEntry;
use crate::pacing::Turns;

/// Added to the hold after a cut of an answer under way: the way back of the origin's
/// write after the close, and its scheduling (see [`Turn::hold_after_cut`]).
pub const CUT_SETTLE: Duration = Duration::from_secs(1);

/// Why a request got no turn from [`Enforcer::pace`](super::Enforcer::pace), with the
/// answer to send instead.
pub enum Unpaced {
    /// This instance gave the request's key up while it queued (the key followed its
    /// traffic or went idle, this instance's lease lapsed, or it is leaving): a request
    /// of its own clients is routed once more; one handed over gets the answer (`503`,
    /// `fleet-unavailable`), and its member routes it again.
    GaveUp(crate::policy::answer::Answer),
    /// Pacing refused it (its queue is full, or the wait would be too long): the `503`.
    Refused(crate::policy::answer::Answer),
}

impl Unpaced {
    /// The answer to send.
    pub fn answer(self) -> crate::policy::answer::Answer {
        match self {
            Unpaced::GaveUp(answer) | Unpaced::Refused(answer) => answer,
        }
    }
}

/// A request's turn, from [`Enforcer::pace`](super::Enforcer::pace): its place on its
/// origin's pacing schedules, held for as long as the origin's exchange lasts. Tell it
/// how the origin answered ([`Turn::origin_answered`]) and how the exchange ended
/// ([`Turn::end`]); the turn ends then, and the next delay counts from there.
///
/// A turn dropped without [`Turn::end`] — a request future dropped mid-exchange, an
/// error path that never said — counts as [`ExchangeEnd::Cut`]: robotsgate closed the
/// connection while the origin may still be working on the request, so its turns are
/// held on ([`Turn::hold_after_cut`]). Ending turns also forgets the schedules left
/// with nothing in force, so an idle origin holds no pacing state.
pub struct Turn {
    /// What the schedules granted (taken when the turn ends).
    turns: Option<Turns>,
    /// The origin's entry, whose idle schedules are forgotten when the turn ends.
    entry: Arc<OriginEntry>,
    /// With `pacing.key: address`, the address's entry too.
    address: Option<Arc<OriginEntry>>,
    /// When the exchange must have ended (past it, it is cut).
    deadline: Instant,
    /// How long turns are held after a cut of an exchange the origin had answered.
    linger: Duration,
    /// The origin's answer (its final response head) arrived.
    answered: bool,
    /// When the origin's last octets arrived (its head, then each part of its body).
    last_octets: Option<Instant>,
    /// The longest the origin was silent between two writes of its answer: its pace.
    longest_gap: Duration,
    /// Fleet mode: the fleet's door and the pacing key: where a pause or backoff the
    /// origin asks for is recorded (a next owner starts from it), and who is asked
    /// whether this instance still acts for the key ([`Turn::still_acting`]).
    recorder: Option<(Arc<Owners>, Arc<str>)>,
}

/// How an upstream exchange ended, as the origin saw it: what decides when its turns end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExchangeEnd {
    /// The response was read to its end.
    Complete,
    /// The origin closed, reset or refused the connection, or never answered the
    /// connect: it is not working on the request.
    OriginFailed,
    /// robotsgate closed the connection before the response's end: the origin may still
    /// be working on the request, so the turns are held on ([`Turn::hold_after_cut`]).
    Cut(Cut),
}

/// Why robotsgate cut an exchange.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cut {
    /// The origin was silent past its timeout.
    Timeout,
    /// The client took no octet of its answer for `limits.unread_timeout_seconds`.
    Client,
    /// Longer than `pacing.max_exchange_seconds`.
    MaxExchange,
    /// Anything else (an error on either side, a request dropped mid-exchange).
    Other,
}

impl ExchangeEnd {
    /// Its index among `robotsgate_upstream_exchange_ends_total`'s `end` labels
    /// (`complete`, `origin_failed`, `cut_timeout`, `cut_max_exchange`, `cut_other`,
    /// `cut_client`).
    fn index(self) -> usize {
        match self {
            ExchangeEnd::Complete => 0,
            ExchangeEnd::OriginFailed => 1,
            ExchangeEnd::Cut(Cut::Timeout) => 2,
            ExchangeEnd::Cut(Cut::MaxExchange) => 3,
            ExchangeEnd::Cut(Cut::Other) => 4,
            ExchangeEnd::Cut(Cut::Client) => 5,
        }
    }
}

impl Turn {
    /// A turn of `turns` on `entry` (and `address`), its exchange bounded by `bounds`.
    pub(super) fn new(
        turns: Turns,
        entry: Arc<OriginEntry>,
        address: Option<Arc<OriginEntry>>,
        bounds: &ExchangeBounds,
    ) -> Turn {
        Turn {
            turns: Some(turns),
            entry,
            address,
            deadline: Instant::now() + bounds.max_exchange,
            linger: bounds.linger,
            answered: false,
            last_octets: None,
            longest_gap: Duration::ZERO,
            recorder: None,
        }
    }

    /// Records the pauses and backoffs the origin asks for with `recorder` (fleet mode).
    pub(super) fn recorded_by(mut self, recorder: Option<(Arc<Owners>, Arc<str>)>) -> Turn {
        self.recorder = recorder;
        self
    }

    /// Fleet mode: does this instance still act for the turn's key? Asked again right
    /// before the request head is written: a process stopped between its turn and its
    /// request (a SIGSTOP, a paused VM, a slow connect) must not send it once its lease
    /// lapsed by its own clock, or the key moved. Alone: always.
    pub fn still_acting(&self) -> bool {
        self.recorder
            .as_ref()
            .is_none_or(|(owners, key)| owners.acts_for(key))
    }

    /// Gives the turn back unused: nothing was sent with it, so the schedules' last end
    /// stays the last exchange's and nothing is held on.
    pub fn forgo(mut self) {
        if let Some(turns) = self.turns.take() {
            turns.forgo();
            forget_idle(&self.entry, self.address.as_ref());
        }
    }

    /// When the exchange must have ended: a response still running then is cut.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// How long the request waited for its turn.
    pub fn waited(&self) -> Duration {
        self.turns.as_ref().map_or(Duration::ZERO, |t| t.waited)
    }

    /// Tells the schedules how the origin answered (see
    /// [`Turns::origin_answered_read_late`]): `unread` is asked only of a response slow
    /// enough to count as strain.
    pub fn origin_answered(
        &mut self,
        status: u16,
        retry_after: Option<Duration>,
        unread: impl FnOnce() -> Duration,
    ) {
        self.answered = true;
        self.last_octets = Some(Instant::now());
        if let Some(turns) = &self.turns {
            turns.origin_answered_read_late(status, retry_after, unread);
            self.record(turns, status);
        }
    }

    /// More of the origin's answer arrived at `now`: the exchange's pace, which bounds
    /// how long the origin may go on after a cut ([`Turn::hold_after_cut`]).
    pub fn origin_wrote(&mut self, now: Instant) {
        if let Some(last) = self.last_octets {
            self.longest_gap = self.longest_gap.max(now.saturating_duration_since(last));
        }
        self.last_octets = Some(now);
    }

    /// Fleet mode: a 429 or a 5xx starts (or lengthens) a pause or backoff: written now,
    /// so that a next owner starts from it.
    fn record(&self, turns: &Turns, status: u16) {
        if let Some((owners, key)) = &self.recorder {
            if status == 429 || status >= 500 {
                owners.record(key, turns.facts());
            }
        }
    }

    /// The origin refused the request without working on it: it is backed off.
    pub fn origin_refused(&self) {
        if let Some(turns) = &self.turns {
            turns.origin_refused();
            self.record(turns, 503);
        }
    }

    /// How long the turns are still held after robotsgate cut the exchange now: the
    /// origin may still be working on the request.
    ///
    /// Once it answered, it is writing, and learns of the close from its writes: the
    /// first after the close draws a reset, the second fails. Its writes come as far
    /// apart as the exchange showed (the longest silence between its octets, or since
    /// the last ones if longer), so it has stopped two of those after the close; held
    /// that long plus [`CUT_SETTLE`], and never longer than a read timeout
    /// ([`ExchangeBounds::linger`]), as long as robotsgate would have waited for its
    /// next octets. Before it answered, nothing tells when it stops: until the exchange
    /// could no longer be running there, `pacing.max_exchange_seconds` from the turn
    /// (at least the linger).
    pub fn hold_after_cut(&self) -> Duration {
        let now = Instant::now();
        if self.answered {
            let silent = self
                .last_octets
                .map_or(Duration::ZERO, |last| now.saturating_duration_since(last));
            let pace = self.longest_gap.max(silent);
            return self.linger.min(pace.saturating_mul(2) + CUT_SETTLE);
        }
        self.linger
            .max(self.deadline.saturating_duration_since(now))
    }

    /// The exchange ended so: the turns end now, or after [`Turn::hold_after_cut`]
    /// when cut.
    pub fn end(mut self, end: ExchangeEnd) {
        crate::telemetry::metrics::record_exchange_end(end.index());
        if !matches!(end, ExchangeEnd::Cut(_)) {
            self.release();
        }
        // A cut: `Drop` holds the turns on.
    }

    /// Ends the turns now.
    fn release(&mut self) {
        if let Some(turns) = self.turns.take() {
            end_turns(turns, &self.entry, self.address.as_ref());
        }
    }
}

/// Ends a request's turns on its schedules (the next delay counts from now) and forgets
/// the schedules left with nothing in force.
fn end_turns(turns: Turns, entry: &OriginEntry, address: Option<&Arc<OriginEntry>>) {
    drop(turns);
    forget_idle(entry, address);
}

/// Forgets the schedules of `entry` (and `address`) left with nothing in force.
fn forget_idle(entry: &OriginEntry, address: Option<&Arc<OriginEntry>>) {
    entry.schedules().forget_idle();
    if let Some(address) = address {
        address.schedules().forget_idle();
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let Some(turns) = self.turns.take() else {
            return;
        };
        // Cut (or never told): held on, on the runtime it was dropped on.
        let hold = self.hold_after_cut();
        let (entry, address) = (self.entry.clone(), self.address.take());
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) if !hold.is_zero() => {
                runtime.spawn(async move {
                    tokio::time::sleep(hold).await;
                    end_turns(turns, &entry, address.as_ref());
                });
            }
            _ => end_turns(turns, &entry, address.as_ref()),
        }
    }
}
