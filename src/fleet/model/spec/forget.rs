//! What no rule reads any more, forgotten after every step so that states alike but
//! for it are one (`world.rs`'s `System::apply` calls [`forget`]). Each entry says why
//! nothing can read it again; `shift.rs` then writes the times left as offsets from
//! now.
//!
//! Costs: one pass over the state per step. A test walks every state of small searches
//! (two members, one key, each fault class) with and without forgetting and requires
//! the same views of the origin (each key's last exchange, by whom), faults and lives.

use super::member::{Answered, Instance, Phase, Sent};
use super::store::{ClaimReply, Ms, Renewing};
use super::world::{System, PAST, TICK};
use super::Scope;

/// Forgets, in `w`: times already past where only "has it passed?" is asked; a key's
/// last exchange once its Crawl-delay is over (who made it is kept); answered calls'
/// arguments and what members do not read of an answer. A time that can no longer move
/// a bound, a pacer or a lease (a fence, a claim's `nb`, a record's lease and `after`,
/// each over by the Crawl-delay at least; a claim answer's bound that far in the past)
/// becomes [`PAST`], and a release's time too (only "was it released?" is read). A
/// member's lease over by its `after` and a renewal not sent this tick are forgotten,
/// and all of a member that crashed or left (it takes no step again).
pub fn forget(w: &mut System, b: &Scope) {
    let delay = b.delay * TICK;
    for last in w.last.iter_mut().flatten() {
        if w.now >= last.0 + b.hold * TICK + delay {
            last.0 = PAST;
        }
    }
    // Without `b.forgetting`, the last exchange's start is forgotten all the same: the
    // test that compares both compares what the origin sees.
    if !b.forgetting {
        return;
    }
    let redis = w.now + w.redis_ahead;
    let gone = |t: Ms| t + delay <= redis;
    for s in [&mut w.store, &mut w.replica] {
        s.fence = s.fence.map(|f| if gone(f) { PAST } else { f });
        for r in s.members.iter_mut().flatten() {
            if gone(r.expires + r.after) {
                r.expires = PAST;
            }
        }
        for c in s.claims.iter_mut().flatten() {
            if c.nb != 0 && gone(c.nb) {
                c.nb = PAST;
            }
            c.released = c.released.map(|_| PAST);
        }
    }
    let after = (b.grace + b.hold) * TICK;
    for m in w.members.iter_mut() {
        if matches!(m.life, Phase::Crashed | Phase::Left) {
            *m = Instance {
                life: m.life,
                ..Instance::new(false, m.rate)
            };
            continue;
        }
        let own = m.clock(w.now);
        if m.valid_until.is_some_and(|v| v + after <= own) {
            m.valid_until = None;
        }
        if m.renewed_at != Some(w.now) {
            m.renewed_at = None;
        }
        for pace in m.pace.iter_mut() {
            if *pace <= own {
                *pace = 0;
            }
        }
        for h in m.holds.iter_mut().flatten() {
            if h.not_before <= own {
                h.not_before = 0;
            }
        }
        for msg in m.slots.iter_mut().flatten() {
            match (&mut msg.call, &mut msg.answer) {
                (Sent::Renew(r, _), Some(Answered::Renewed(a))) => {
                    *r = Renewing {
                        member: r.member,
                        ..Renewing::default()
                    };
                    a.fence = 0;
                }
                (_, Some(Answered::Claimed(ClaimReply::Taken(_, bound, ..))))
                    if *bound != 0 && *bound + delay <= 0 =>
                {
                    *bound = PAST;
                }
                (_, Some(Answered::Claimed(a)))
                    if !matches!(a, ClaimReply::Taken(..) | ClaimReply::Lost) =>
                {
                    msg.answer = Some(Answered::Done);
                }
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::super::member::Phase;
    use super::super::store::{Mid, KEYS, MEMBERS};
    use super::super::{base, each_state, faults, EVERY_FAULT, FAULTS};
    use super::*;

    /// What the origin and the fault budget show of a state.
    type View = (
        Ms,
        [Option<(Ms, Mid)>; KEYS],
        [u8; FAULTS],
        [Phase; MEMBERS],
    );

    /// Every view of a state reachable within `b`, forgetting or not; a broken invariant
    /// is a view too.
    fn views(b: &Scope, forgetting: bool) -> HashSet<Result<View, String>> {
        let b = &Scope { forgetting, ..*b };
        let out = std::cell::RefCell::new(HashSet::new());
        each_state(
            b,
            |w| {
                out.borrow_mut()
                    .insert(Ok((w.now, w.last, w.spent, w.members.map(|m| m.life))));
            },
            |why| {
                out.borrow_mut().insert(Err(why));
            },
        );
        out.into_inner()
    }

    #[test]
    fn forgetting_changes_nothing_the_origin_sees_under_every_fault() {
        for f in EVERY_FAULT {
            let b = Scope {
                horizon: 6,
                faults: faults(&[f]),
                ..base()
            };
            let (with, without) = (views(&b, true), views(&b, false));
            eprintln!("{f:?}: {} views of the origin, alike", with.len());
            assert!(
                with == without,
                "{f:?}: forgetting changed what the origin sees"
            );
        }
    }
}
