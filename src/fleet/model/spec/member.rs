//! A member as the specification sees it: its standing (`standing.rs`'s rules: epoch,
//! generation, lease by its own clock, the keys it holds and when it may act for them),
//! its pacer's next start per key, its view of Redis' clock (`redis_clock.rs`'s own step
//! check and its two offsets, `Reading::offset_at_sending` and `offset_at_receipt`),
//! its calls in flight, and its clock.
//!
//! **Clocks.** A member's clock is a function of true time: `t + t × rate / 100` (a
//! drift of `rate` percent, within `redis_clock::DRIFT_PERCENT`), `CLOCK_BOOTTIME`'s:
//! it counts while the member is paused.

use crate::fleet::redis_clock::{Reading, RedisClock};

use super::store::{ClaimReply, Claiming, Mid, Ms, Releasing, Renewed, Renewing, KEYS};

/// Where a member is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Not started yet (joins later).
    Waiting,
    /// Running.
    Up,
    /// Stopped (SIGSTOP, a VM paused): takes no step until resumed; its clock runs.
    Paused,
    /// Stopped for good, without a word.
    Crashed,
    /// Left gracefully.
    Left,
}

/// How a member holds a key (`standing::Held`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HeldAs {
    /// It acts for it.
    In,
    /// Being handed to the member its traffic comes from: it still acts for it.
    Moving(Mid),
    /// Let go, to the heir (if any): not acted for; released once its exchange is over.
    Releasing(Option<Mid>),
}

/// One key held (`standing::Holding`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KeyHeld {
    /// The epoch its claim was written in.
    pub epoch: u8,
    /// The generation.
    pub generation: Option<u8>,
    /// The taking's number.
    pub token: u8,
    /// How it is held.
    pub held: HeldAs,
    /// Not acted for before (own clock).
    pub not_before: Ms,
    /// Acted for right up to the last change: written again as a vouch.
    pub vouched: bool,
    /// To be confirmed once `not_before` has passed.
    pub provisional: bool,
}

/// A call a member sent, and its answer once Redis ran it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Sent {
    /// A renewal, sent at this own time.
    Renew(Renewing, Ms),
    /// A claim or a claim written again.
    Claim(Claiming),
    /// A release.
    Release(Releasing),
    /// The deregistration, in this epoch.
    Leave(Mid, u8),
}

/// What Redis answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Answered {
    /// A renewal's.
    Renewed(Renewed),
    /// A claim's.
    Claimed(ClaimReply),
    /// A release's or a leave's (answered; what it says changes nothing here).
    Done,
}

/// A call on its way and its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct InFlight {
    /// The call.
    pub call: Sent,
    /// Its answer, once run.
    pub answer: Option<Answered>,
}

/// Where a member's calls wait: its renewal, and per key a claim (or claim written
/// again) and a release — two calls for one key may be in flight at once.
pub const SLOTS: usize = 1 + 2 * KEYS;

/// One member.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Instance {
    /// Where it is in its life.
    pub life: Phase,
    /// Its clock's drift, in percent.
    pub rate: i8,
    /// Its epoch (0: none).
    pub epoch: u8,
    /// The generation it saw last.
    pub generation: Option<u8>,
    /// Its lease ends then (own clock).
    pub valid_until: Option<Ms>,
    /// Leaving: no new ownership, no turns.
    pub leaving: bool,
    /// The keys it holds.
    pub holds: [Option<KeyHeld>; KEYS],
    /// Per key, its pacer's next start (own clock; 0: any time).
    pub pace: [Ms; KEYS],
    /// Per key, when its last exchange started (true time).
    pub exchange: [Option<Ms>; KEYS],
    /// Calls in flight, by slot (`SLOTS`).
    pub slots: [Option<InFlight>; SLOTS],
    /// Redis' clock as its renewals saw it (the code's own step check).
    pub redis_clock: RedisClock,
    /// A step of Redis' clock seen, for the next renewal to carry (0: none).
    pub step: Ms,
    /// When it last sent a renewal (true time; renewals keep a cadence).
    pub renewed_at: Option<Ms>,
    /// Pauses at its next turn, before the request's head is written.
    pub armed: bool,
    /// The key of the turn it holds while paused, its head not written yet.
    pub turn: Option<u8>,
}

impl Instance {
    /// A member, up (`true`) or waiting to join, its clock drifting by `rate` percent.
    pub fn new(up: bool, rate: i8) -> Instance {
        Instance {
            life: if up { Phase::Up } else { Phase::Waiting },
            rate,
            epoch: 0,
            generation: None,
            valid_until: None,
            leaving: false,
            holds: [None; KEYS],
            pace: [0; KEYS],
            exchange: [None; KEYS],
            slots: [None; SLOTS],
            redis_clock: RedisClock::default(),
            step: 0,
            renewed_at: None,
            armed: false,
            turn: None,
        }
    }

    /// Its clock at true time `t`.
    pub fn clock(&self, t: Ms) -> Ms {
        t + t * Ms::from(self.rate) / 100
    }

    /// Is its lease valid at own time `now`, `grace` included?
    pub fn lease_valid(&self, now: Ms, grace: Ms) -> bool {
        self.valid_until.is_some_and(|v| now < v + grace)
    }

    /// May it own at `now`?
    pub fn may_own(&self, now: Ms, grace: Ms) -> bool {
        !self.leaving && self.lease_valid(now, grace)
    }

    /// Was `h` written in its current epoch and generation?
    fn confirmed(&self, h: &KeyHeld) -> bool {
        h.epoch == self.epoch && h.generation == self.generation
    }

    /// Does it act for `h` at `now`, the not-before aside (`Standing::acting`)?
    fn acting(&self, h: &KeyHeld, now: Ms, grace: Ms) -> bool {
        self.may_own(now, grace)
            && !matches!(h.held, HeldAs::Releasing(_))
            && self.confirmed(h)
            && !h.provisional
    }

    /// May it act for key `k` at own time `now` (`Standing::acts_for`)?
    pub fn acts_for(&self, k: usize, now: Ms, grace: Ms) -> bool {
        self.holds[k].is_some_and(|h| self.acting(&h, now, grace) && now >= h.not_before)
    }

    /// Is key `k` to be written again at `now` (`Standing::unconfirmed`, one key), and
    /// how: `Some(true)` vouched.
    pub fn unconfirmed(&self, k: usize, now: Ms) -> Option<bool> {
        let h = self.holds[k]?;
        let due = h.provisional && now >= h.not_before;
        (h.held == HeldAs::In && (!self.confirmed(&h) || due)).then_some(h.vouched)
    }

    /// A renewal sent at `sent` was answered at `received` (`Standing::renewed`, the
    /// step check and the clock offsets' reading).
    pub fn renewed(&mut self, sent: Ms, received: Ms, r: &Renewed, lease: Ms, grace: Ms) {
        let changed =
            self.epoch != 0 && (r.epoch != self.epoch || Some(r.generation) != self.generation);
        if changed {
            for k in 0..KEYS {
                if let Some(h) = self.holds[k] {
                    let vouch = self.acting(&h, received, grace);
                    if let Some(h) = self.holds[k].as_mut() {
                        h.vouched = vouch;
                    }
                }
            }
        }
        self.epoch = r.epoch;
        self.generation = Some(r.generation);
        self.valid_until = Some(sent + lease);
        let reading = Reading {
            sent,
            received,
            redis: r.now,
        };
        self.step = self.redis_clock.saw(reading).map_or(0, |step| step.max(1));
    }

    /// Redis' time as this member converts an own time to it, never earlier than it
    /// was (`Fleet::redis_time_of`): `None` when it knows no offset.
    pub fn redis_time_of(&self, own: Ms) -> Option<Ms> {
        self.redis_clock.last().map(|r| own + r.offset_at_sending())
    }

    /// An own time from Redis' time, never earlier than it is (`Fleet::instant_of`).
    pub fn own_time_of(&self, redis: Ms) -> Option<Ms> {
        self.redis_clock
            .last()
            .map(|r| redis - r.offset_at_receipt())
    }

    /// A claim's answer, acted on as `ownership` does: what a first claim inherits (own
    /// clock) for the pacer to start from, when it carried anything.
    pub fn claimed(
        &mut self,
        c: &Claiming,
        answer: &ClaimReply,
        received: Ms,
    ) -> Option<InheritedEnd> {
        let reassert = c.mode != super::store::ClaimMode::Claim;
        let held_in = self.holds[c.key].is_some_and(|h| h.held == HeldAs::In);
        if reassert && !held_in {
            return None; // released or handed on meanwhile: that decides
        }
        match *answer {
            ClaimReply::Taken(_, bound, token, provisional, last_end) => {
                let not_before = received + bound;
                let earlier = self.holds[c.key].map_or(not_before, |h| h.not_before);
                self.holds[c.key] = Some(KeyHeld {
                    epoch: c.epoch,
                    generation: c.generation,
                    token,
                    held: HeldAs::In,
                    not_before: not_before.max(earlier),
                    vouched: false,
                    provisional,
                });
                // A claim inherits (`Route::Here`); a claim written again does not,
                // as a background re-assertion (the worse case of the two paths).
                let ended = last_end
                    .filter(|&e| e > 0)
                    .and_then(|e| self.own_time_of(e));
                let bounded = (bound != 0).then_some(not_before);
                let inherited = InheritedEnd { ended, bounded };
                (!reassert && inherited.latest().is_some()).then_some(inherited)
            }
            ClaimReply::Lost => {
                self.holds[c.key] = None;
                None
            }
            _ => None,
        }
    }

    /// Starts leaving: no new ownership, no turns (`Standing::leave`).
    pub fn leave(&mut self) {
        self.leaving = true;
    }

    /// Holds key `k` as `to` when it is held as `from` in its current epoch and
    /// generation: that epoch, when it was (`Standing::mark`).
    pub fn mark(&mut self, k: usize, from: HeldAs, to: HeldAs) -> Option<u8> {
        let (epoch, generation) = (self.epoch, self.generation);
        let h = self.holds[k].as_mut()?;
        let current = h.epoch == epoch && h.generation == generation;
        (current && h.held == from).then(|| {
            h.held = to;
            epoch
        })
    }

    /// Holds key `k` as `to` when it is held as `from`, in whichever epoch and
    /// generation (`Standing::hold_as`).
    pub fn hold_as(&mut self, k: usize, from: HeldAs, to: HeldAs) -> bool {
        match self.holds[k].as_mut() {
            Some(h) if h.held == from => {
                h.held = to;
                true
            }
            _ => false,
        }
    }

    /// A release's facts: `Releasing` for key `k` to `heir`, if it still holds `k`; its
    /// last exchange `ended` then (own clock), if it made one (`Ownership::encode`).
    pub fn releasing(
        &self,
        me: Mid,
        k: usize,
        heir: Option<(Mid, u8)>,
        ended: Option<Ms>,
    ) -> Option<Releasing> {
        let h = self.holds[k]?;
        Some(Releasing {
            member: me,
            epoch: h.epoch,
            generation: self.generation,
            key: k,
            heir,
            n: h.token,
            last_end: ended.and_then(|e| self.redis_time_of(e)).unwrap_or(0),
        })
    }
}

/// What a first claim inherits from the key's last owner (own clock).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InheritedEnd {
    /// Its last exchange ended then, as the facts it left say (a release, a hand-over).
    pub ended: Option<Ms>,
    /// Its last exchange ended by then: the bound of a takeover from an owner that
    /// vanished.
    pub bounded: Option<Ms>,
}

impl InheritedEnd {
    /// The later of the two: when the last owner's last exchange ended at the latest.
    pub fn latest(&self) -> Option<Ms> {
        self.ended.max(self.bounded)
    }

    /// When the new owner's first exchange may start, `delay` the Crawl-delay. That
    /// exchange may be its robots.txt fetch (its copy gone stale), which the code paces
    /// by rules of its own: it takes its turns on the schedules the facts made (their
    /// pause the last end plus the delay), and after a takeover from a vanished owner
    /// it waits the bound plus the delay (`Pacer::fetch_not_before`); without that rule
    /// (`fetch_gap` off) it waited the bound alone.
    pub fn first_start(&self, delay: Ms, fetch_gap: bool) -> Option<Ms> {
        if fetch_gap {
            return self.latest().map(|at| at + delay);
        }
        self.ended.map(|at| at + delay).max(self.bounded)
    }
}

/// Slot of a renewal.
pub const RENEWAL: usize = 0;

/// Slot of key `k`'s claim.
pub fn claim_slot(k: usize) -> usize {
    1 + 2 * k
}

/// Slot of key `k`'s release.
pub fn release_slot(k: usize) -> usize {
    2 + 2 * k
}
