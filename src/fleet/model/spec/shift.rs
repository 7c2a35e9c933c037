//! Time shifted out: a state and the same state a few ticks later (every time moved
//! alike) behave alike, but for the horizon. [`relative`] writes every time as an
//! offset from now in its own clock's terms (true time, each member's clock, Redis'),
//! so that both get one fingerprint; the search keeps, per fingerprint, the most time
//! left it was seen with and explores a state again only with more
//! (`mod.rs`'s `explore`). A fault at tick 2 and the same fault at tick 3 are then one
//! search where their states meet.
//!
//! **Why it holds.** Every rule compares two times of one clock, or adds a duration to
//! one (member clocks are linear: `clock(t + d) = clock(t) + clock(d)` for whole
//! ticks); only the horizon reads true time itself. The values that mean "none" (0 for
//! a claim's `nb`, a release's or a claim's last end, a renewal's fence, a pacer's
//! next start or a hold's not-before) and `forget.rs`' [`PAST`] are kept apart from
//! every offset.
//!
//! Costs: one copy of the state per fingerprint. Limits: a value written as "none" must
//! be listed here. The test below walks every state of small searches (two members,
//! one key, each fault class, and drifting clocks) and checks each state met again at
//! another time against the first: the same steps, to states alike again.

use crate::fleet::redis_clock::{Reading, RedisClock};

use super::member::{Answered, Instance, Sent};
use super::store::{ClaimReply, Ms, Store};
use super::world::{System, PAST};

/// What "none" (0) becomes: no offset is ever this, nor [`PAST`].
const NONE: Ms = Ms::MIN / 2;

/// A time of a clock that reads `base` now, as an offset from now (`PAST` stays).
fn at(t: Ms, base: Ms) -> Ms {
    if t <= PAST / 2 {
        PAST
    } else {
        t - base
    }
}

/// The same, where 0 means none.
fn at_or_none(t: Ms, base: Ms) -> Ms {
    if t == 0 {
        NONE
    } else {
        at(t, base)
    }
}

/// `world` with every time an offset from now (true time 0 after it).
pub fn relative(world: &System) -> System {
    let mut w = *world;
    let (now, redis) = (world.now, world.now + world.redis_ahead);
    w.now = 0;
    store(&mut w.store, redis);
    store(&mut w.replica, redis);
    for last in w.last.iter_mut().flatten() {
        last.0 = at(last.0, now);
    }
    for m in w.members.iter_mut() {
        member(m, now, redis);
    }
    if let Some((i, call)) = w.orphan.as_mut() {
        let own = world.members[usize::from(*i)].clock(now);
        sent(call, own, redis);
    }
    w
}

/// A store's times, Redis' clock reading `redis`.
fn store(s: &mut Store, redis: Ms) {
    for r in s.members.iter_mut().flatten() {
        r.expires = at(r.expires, redis);
    }
    s.fence = s.fence.map(|f| at(f, redis));
    for c in s.claims.iter_mut().flatten() {
        c.nb = at_or_none(c.nb, redis);
        c.released = c.released.map(|t| at(t, redis));
        c.last_end = c.last_end.map(|t| at_or_none(t, redis));
    }
}

/// A member's times: its clock reads `clock(now)`, Redis' `redis`.
fn member(m: &mut Instance, now: Ms, redis: Ms) {
    let own = m.clock(now);
    m.valid_until = m.valid_until.map(|t| at(t, own));
    for p in m.pace.iter_mut() {
        *p = at_or_none(*p, own);
    }
    for h in m.holds.iter_mut().flatten() {
        h.not_before = at_or_none(h.not_before, own);
    }
    for e in m.exchange.iter_mut().flatten() {
        *e = at(*e, now);
    }
    m.renewed_at = m.renewed_at.map(|t| at(t, now));
    m.redis_clock = RedisClock::with_last(m.redis_clock.last().map(|r| Reading {
        sent: at(r.sent, own),
        received: at(r.received, own),
        redis: at(r.redis, redis),
    }));
    for msg in m.slots.iter_mut().flatten() {
        sent(&mut msg.call, own, redis);
        match msg.answer.as_mut() {
            Some(Answered::Renewed(a)) => {
                a.now = at(a.now, redis);
                a.fence = at_or_none(a.fence, redis);
            }
            Some(Answered::Claimed(ClaimReply::Taken(_, _, _, _, end))) => {
                *end = end.map(|t| at_or_none(t, redis));
            }
            _ => {}
        }
    }
}

/// A call's times: its member's clock reads `own`, Redis' `redis`.
fn sent(call: &mut Sent, own: Ms, redis: Ms) {
    match call {
        Sent::Renew(_, at_own) => *at_own = at(*at_own, own),
        Sent::Release(r) => r.last_end = at_or_none(r.last_end, redis),
        Sent::Claim(_) | Sent::Leave(..) => {}
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::super::world::TICK;
    use super::super::{base, each_state, faults, Fault, Scope, EVERY_FAULT};
    use super::*;

    /// Two states alike but for when: the same steps enabled (the horizon aside), each
    /// leading to states alike but for when, or breaking the invariant alike.
    fn alike(x: &System, y: &System, b: &Scope) {
        let endless = Scope {
            horizon: Ms::MAX / TICK / 2,
            ..*b
        };
        let steps = x.actions(&endless);
        assert_eq!(steps, y.actions(&endless), "at {} and {}", x.now, y.now);
        for step in steps {
            let (mut nx, mut ny) = (*x, *y);
            let (rx, ry) = (nx.apply(&endless, &step), ny.apply(&endless, &step));
            assert_eq!(
                rx.is_ok(),
                ry.is_ok(),
                "{step:?} at {} and {}",
                x.now,
                y.now
            );
            assert_eq!(
                relative(&nx),
                relative(&ny),
                "{step:?} from {}\nand from {}",
                x.describe(b),
                y.describe(b)
            );
        }
    }

    /// Every state reachable within `b` against the first one with the same relative
    /// form at another time: how many compared.
    fn compare_all(b: &Scope) -> usize {
        let mut first: HashMap<System, System> = HashMap::new();
        let mut compared = 0;
        each_state(
            b,
            |w| match first.get(&relative(w)) {
                Some(x) if x.now != w.now => {
                    alike(x, w, b);
                    compared += 1;
                }
                Some(_) => {}
                None => {
                    first.insert(relative(w), *w);
                }
            },
            |_| {},
        );
        compared
    }

    #[test]
    fn states_alike_but_for_when_behave_alike_under_every_fault() {
        for (f, drift) in EVERY_FAULT
            .iter()
            .map(|&f| (f, false))
            .chain([(Fault::Crash, true)])
        {
            let b = Scope {
                horizon: 6,
                drift,
                faults: faults(&[f]),
                ..base()
            };
            let compared = compare_all(&b);
            eprintln!("{f:?} (drift {drift}): {compared} states compared with one at another time");
            assert!(
                compared > 0,
                "{f:?}: no state met one alike at another time"
            );
        }
    }
}
