//! Redis' clock, watched for steps: every lease and takeover is decided by the `TIME` of
//! the Redis host (its wall clock), which an NTP step or a VM resumed with its clock set
//! can move forward at once. A forward step makes every member look lapsed to Redis
//! while each still acts on its lease by its own clock, so another member could take
//! an origin its owner still serves.
//!
//! **Algorithm.** Each renewal is a [`Reading`]: this member's clock when the call left and
//! when its answer came back ([`Ms`], which counts a suspend), and Redis' `TIME` in
//! between. From one renewal to the next Redis' clock may advance no more than this
//! member's did between the first call's departure and the second answer's arrival,
//! plus [`DRIFT_PERCENT`] of it and [`SLACK_MS`]. More than that is a step
//! ([`RedisClock::saw`] returns its size): the membership then extends Redis' fence by
//! every member's lease and `after` (`member_renew.lua`), as a lost data set does, and
//! a takeover, always provisional for two renewals and a command timeout at least
//! (`Membership::news_within`), is confirmed only
//! after that fence (`own_claim.lua`). A step backward only makes leases and bounds
//! last longer: it is not acted on.
//!
//! Costs: two subtractions per renewal; memory: one reading.

use crate::fleet::standing::Ms;

/// How much faster than this member's clock Redis' may run before it counts as a step
/// (the clocks' stated bound: `docs/fleet.md`).
pub const DRIFT_PERCENT: i64 = 5;

/// Added to the allowance: Redis' clock and this member's have millisecond steps.
pub const SLACK_MS: i64 = 100;

/// One renewal's readings: this member's clock when the call left and when its answer
/// arrived, and Redis' `TIME` in the answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Reading {
    /// This member's clock when the call left.
    pub sent: Ms,
    /// This member's clock when the answer arrived.
    pub received: Ms,
    /// Redis' clock in the answer (ms).
    pub redis: i64,
}

impl Reading {
    /// What an own time plus this is Redis' time, never earlier than it was: as if
    /// Redis read its clock when the call left (`Fleet::redis_time_of`; a last end or a
    /// pause handed to another member is never shortened).
    pub fn offset_at_sending(self) -> i64 {
        self.redis - self.sent
    }

    /// What Redis' time minus this is an own time, never earlier than it is: as if
    /// Redis read its clock when the answer arrived (`Fleet::instant_of`; a bound handed
    /// over is never shortened).
    pub fn offset_at_receipt(self) -> i64 {
        self.redis - self.received
    }
}

/// The last renewal's readings, to compare the next one's with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RedisClock {
    /// The previous renewal's.
    last: Option<Reading>,
}

impl RedisClock {
    /// Takes a renewal's readings: `Some(ms)` when Redis' clock stepped forward by
    /// more than this member's clock allows since the last one (by about that much).
    pub fn saw(&mut self, reading: Reading) -> Option<i64> {
        let step = self.last.and_then(|last| {
            let most = reading.received - last.sent;
            let allowed = most + most.max(0) * DRIFT_PERCENT / 100 + SLACK_MS;
            let advanced = reading.redis - last.redis;
            (advanced > allowed).then_some(advanced - most)
        });
        self.last = Some(reading);
        step
    }

    /// The last renewal's readings, if any (the model converts times by them).
    #[cfg(test)]
    pub fn last(&self) -> Option<Reading> {
        self.last
    }

    /// A clock whose last renewal's readings were `last` (the model moves readings in
    /// time).
    #[cfg(test)]
    pub fn with_last(last: Option<Reading>) -> RedisClock {
        RedisClock { last }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(sent: Ms, received: Ms, redis: i64) -> Reading {
        Reading {
            sent,
            received,
            redis,
        }
    }

    #[test]
    fn a_forward_step_is_seen_and_steady_clocks_are_not() {
        let mut clock = RedisClock::default();
        assert_eq!(clock.saw(at(0, 10, 1_000_000)), None, "the first reading");
        // Half a second, Redis' clock a little fast (within the drift).
        assert_eq!(clock.saw(at(500, 505, 1_000_520)), None);
        // A renewal delayed by a stall here: both clocks advanced alike.
        assert_eq!(clock.saw(at(9_000, 9_004, 1_009_000)), None);
        // Redis' clock stepped 60 s forward.
        let step = clock.saw(at(9_500, 9_505, 1_069_500)).expect("a step");
        assert!((59_000..=60_500).contains(&step), "{step}");
        // Steady again from there.
        assert_eq!(clock.saw(at(10_000, 10_003, 1_070_000)), None);
        // A step backward is not one to act on.
        assert_eq!(clock.saw(at(10_500, 10_502, 1_010_000)), None);
    }

    #[test]
    fn the_allowance_is_the_drift_and_the_slack() {
        let mut clock = RedisClock::default();
        clock.saw(at(0, 0, 0));
        // 10 s here: up to 10.5 s + 100 ms there.
        assert_eq!(clock.saw(at(10_000, 10_000, 10_600)), None);
        let mut clock = RedisClock::default();
        clock.saw(at(0, 0, 0));
        assert!(clock.saw(at(10_000, 10_000, 10_601)).is_some());
    }
}
