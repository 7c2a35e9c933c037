//! The specification's member decides as `standing.rs` does: random lives (renewals
//! in changing epochs and generations, claims answered, keys marked, put back,
//! dropped, a leave), each step applied to `member.rs`'s [`Instance`] and to the code's
//! own `Standing`; after every step, at random moments, what each says of its lease
//! and of every key (acting, to be written again and how, the holding itself) must be
//! the same.
//!
//! A claim's answer (a first claim or one written again; taken with a wait ahead,
//! behind or none, lost, held by another, stale, unregistered) goes to the code as the
//! script's words, read by `ClaimAnswer::parse` and acted on by `ClaimAnswer::apply`,
//! the reading both of `ownership`'s claiming paths call: a first claim's inherited
//! bound must be the specification's, and a claim written again for a key let go
//! meanwhile must change nothing on either side.
//!
//! What it leaves to the searches: the facts a claim carries (the answers here carry
//! none); their offsets are `redis_clock.rs`'s, shared by both sides.

use std::collections::BTreeMap;
use std::time::Duration;

use super::agree::{claim_words, gen};
use super::member::{HeldAs, Instance, KeyHeld};
use super::store::{ClaimMode, ClaimReply, Claiming, How, Ms, Renewed, State, KEYS};
use crate::fleet::model::Dice;
use crate::fleet::ownership::answer::{ClaimCall, ClaimEffect};
use crate::fleet::ownership::{ClaimAnswer, Words};
use crate::fleet::standing::{Held, Reassert, Standing};

/// Random lives, each run through both.
const LIVES: usize = 4_000;

/// Steps in one life.
const STEPS: usize = 24;

/// The lease in every life.
const LEASE: Ms = 2_000;

/// Key `k` as `Standing` names it.
fn key(k: usize) -> String {
    format!("k{k}")
}

/// `HeldAs` as `Standing` says it.
fn held(h: HeldAs) -> Held {
    match h {
        HeldAs::In => Held::In,
        HeldAs::Moving(_) => Held::Moving,
        HeldAs::Releasing(_) => Held::Releasing,
    }
}

/// `Held` as the specification says it (the heir aside).
fn held_as(h: Held) -> HeldAs {
    match h {
        Held::In => HeldAs::In,
        Held::Moving => HeldAs::Moving(1),
        Held::Releasing => HeldAs::Releasing(None),
    }
}

/// One life: both sides, its clock, and what it saw.
struct Lived {
    spec: Instance,
    code: Standing,
    grace: Ms,
    now: Ms,
    redis: Ms,
    /// The kinds of answer applied, and how many of each.
    applied: BTreeMap<&'static str, usize>,
}

impl Lived {
    fn new(d: &mut Dice) -> Lived {
        let grace = [0, 1_000][d.below(2)];
        let to = |ms: Ms| Duration::from_millis(ms as u64);
        Lived {
            spec: Instance::new(true, 0),
            code: Standing::new(to(LEASE), to(grace)),
            grace,
            now: 1_000,
            redis: 50_000,
            applied: BTreeMap::new(),
        }
    }

    /// A renewal sent a little earlier, answered now, in an epoch and generation that
    /// may have changed.
    fn renew(&mut self, d: &mut Dice) -> String {
        let sent = self.now - 500 * d.below(3) as Ms;
        let epoch = match (self.spec.epoch, d.below(4)) {
            (0, _) => 1,
            (e, 0) => e + 1,
            (e, _) => e,
        };
        let generation = match (self.spec.generation, d.below(4)) {
            (Some(g), n) if n > 0 => g,
            _ => 1 + d.below(3) as u8,
        };
        let renewed = Renewed {
            now: self.redis,
            epoch,
            generation,
            fence: 0,
        };
        let changed = self
            .code
            .renewed(sent, self.now, u64::from(epoch), &gen(Some(generation)));
        self.spec
            .renewed(sent, self.now, &renewed, LEASE, self.grace);
        format!("renewal sent {sent}: epoch {epoch} g{generation} (changed: {changed})")
    }

    /// An answer to a claim of key `k` (a first one, or written again), made in this or
    /// an earlier epoch and generation: the specification's member acts on it, and the
    /// code's `ClaimAnswer::apply` on the same answer as the script words it; a first
    /// claim's inherited bound must be the same.
    fn answer(&mut self, d: &mut Dice, k: usize) -> Result<String, String> {
        let epoch = self.spec.epoch.saturating_sub(u8::from(d.below(4) == 0));
        let generation = match d.below(3) {
            0 => None,
            1 => Some(1 + d.below(3) as u8),
            _ => self.spec.generation,
        };
        let mode = [ClaimMode::Claim, ClaimMode::Reassert, ClaimMode::Vouch][d.below(3)];
        let claim = Claiming {
            member: 0,
            epoch,
            generation,
            key: k,
            mode,
            window: 0,
        };
        let reply = match d.below(8) {
            0..=4 => {
                let bound = 500 * (d.below(5) as Ms - 2);
                // The last owner's last end, when it left one (Redis ms, maybe ahead).
                let ended = d.maybe(|d| self.redis + 500 * (d.below(7) as Ms - 4));
                ClaimReply::Taken(How::Claimed, bound, d.below(5) as u8, d.coin(), ended)
            }
            5 => ClaimReply::Lost,
            6 => ClaimReply::Held(1, 1, State::Up),
            _ => [ClaimReply::Stale, ClaimReply::Unregistered][d.below(2)],
        };
        let inherited = self
            .spec
            .claimed(&claim, &reply, self.now)
            .and_then(|i| i.latest());
        let answer = ClaimAnswer::parse(&claim_words(&reply))
            .ok_or_else(|| format!("the code cannot read {reply:?}"))?;
        let name = key(k);
        let asked = ClaimCall {
            key: &name,
            epoch: u64::from(epoch),
            generation: &gen(generation),
            again: mode != ClaimMode::Claim,
        };
        let applied = answer.apply(&mut self.code, asked, self.now);
        let kind = match applied {
            ClaimEffect::Took { bound: Some(b) } if b < self.now => "took, bounded in the past",
            ClaimEffect::Took { bound: Some(_) } => "took, bounded",
            ClaimEffect::Took { bound: None } => "took",
            ClaimEffect::Lost => "lost",
            ClaimEffect::Passed => "passed",
            ClaimEffect::Unchanged => "unchanged",
        };
        *self.applied.entry(kind).or_insert(0) += 1;
        // The facts' words as the code reads them (`ownership`'s `group_facts`), in
        // this member's clock as the spec converts them.
        let ended = match &answer {
            ClaimAnswer::Taken { facts, .. } => facts
                .iter()
                .find(|(group, _)| group == "*")
                .map(|(_, value)| Words::parse(value))
                .transpose()
                .map_err(|e| format!("{reply:?}: {e}"))?
                .and_then(|words| words.last_end)
                .and_then(|e| self.spec.own_time_of(e)),
            _ => None,
        };
        let bound = match applied {
            ClaimEffect::Took { bound } if mode == ClaimMode::Claim => bound.max(ended),
            _ => None,
        };
        if inherited != bound {
            return Err(format!(
                "{reply:?} to {claim:?}: the spec inherits {inherited:?}, the code {applied:?}"
            ));
        }
        Ok(format!(
            "{reply:?} to {name} {mode:?} in {epoch} {generation:?}: {applied:?}"
        ))
    }

    /// One random step: what it was.
    fn step(&mut self, d: &mut Dice) -> Result<String, String> {
        self.now += 250 * d.below(5) as Ms;
        self.redis += 250 * d.below(5) as Ms;
        let k = d.below(KEYS);
        let moves = [
            (Held::In, Held::Releasing),
            (Held::In, Held::Moving),
            (Held::Moving, Held::Releasing),
            (Held::Releasing, Held::In),
            (Held::Moving, Held::In),
        ];
        Ok(match d.below(20) {
            0..=6 => self.renew(d),
            7..=12 => return self.answer(d, k),
            13..=15 => {
                let (from, to) = moves[d.below(moves.len())];
                let spec = self.spec.mark(k, held_as(from), held_as(to));
                let code = self.code.mark(&key(k), from, to);
                assert_eq!(
                    spec.map(u64::from),
                    code,
                    "mark {} {from:?} to {to:?}",
                    key(k)
                );
                format!("mark {} {from:?} to {to:?}: {code:?}", key(k))
            }
            16..=17 => {
                let (from, to) = moves[d.below(moves.len())];
                let spec = self.spec.hold_as(k, held_as(from), held_as(to));
                let code = self.code.hold_as(&key(k), from, to);
                assert_eq!(spec, code, "hold {} {from:?} as {to:?}", key(k));
                format!("hold {} {from:?} as {to:?}: {code}", key(k))
            }
            18 => {
                self.spec.leave();
                self.code.leave();
                "leave".to_string()
            }
            _ => {
                self.spec.holds[k] = None;
                self.code.drop_key(&key(k));
                format!("{} released", key(k))
            }
        })
    }

    /// What both say at `t`, side by side, and what kinds of answer it was.
    fn compare(&self, t: Ms, seen: &mut BTreeMap<&'static str, usize>) -> Result<(), String> {
        let (spec, code) = (&self.spec, &self.code);
        let lease = (spec.lease_valid(t, self.grace), spec.may_own(t, self.grace));
        if lease != (code.lease_valid(t), code.may_own(t)) || spec.valid_until != code.valid_until()
        {
            return Err(format!("the lease differs at {t}"));
        }
        let unconfirmed = code.unconfirmed(t);
        for k in 0..KEYS {
            let acts = spec.acts_for(k, t, self.grace);
            if acts != code.acts_for(&key(k), t) {
                return Err(format!("acting for {} differs at {t}", key(k)));
            }
            let again = unconfirmed.iter().find(|(name, _)| *name == key(k));
            let code_again = again.map(|(_, how)| *how == Reassert::Vouch);
            if spec.unconfirmed(k, t) != code_again {
                return Err(format!("writing {} again differs at {t}", key(k)));
            }
            if !same_holding(spec.holds[k], code.holding(&key(k))) {
                return Err(format!("the holding of {} differs", key(k)));
            }
            let kind = match (acts, code_again, code.holding(&key(k))) {
                (true, _, _) => "acting",
                (_, Some(true), _) => "written again, vouched",
                (_, Some(false), _) => "written again",
                (_, _, Some(h)) if h.not_before > t => "waiting",
                (_, _, Some(_)) => "held, not acting",
                _ => "not held",
            };
            *seen.entry(kind).or_insert(0) += 1;
        }
        Ok(())
    }
}

/// Are these the same holding?
fn same_holding(spec: Option<KeyHeld>, code: Option<&crate::fleet::standing::Holding>) -> bool {
    match (spec, code) {
        (None, None) => true,
        (Some(s), Some(c)) => {
            u64::from(s.epoch) == c.epoch
                && gen(s.generation) == c.generation
                && u64::from(s.token) == c.token
                && held(s.held) == c.held
                && s.not_before == c.not_before
                && s.vouched == c.vouched
                && s.provisional == c.provisional
        }
        _ => false,
    }
}

/// `docs/fleet-proof.md` gives the number of lives as the test runs them.
#[test]
fn the_number_of_lives_is_the_documented_one() {
    let phrase = format!(
        "{} random lives of {STEPS} steps",
        crate::fleet::model::thousands(LIVES)
    );
    crate::fleet::model::assert_proof_says(&phrase);
}

/// Random lives: the specification's member and `Standing` say the same at every step.
#[test]
fn the_specifications_member_decides_as_standing_does() {
    let seed = super::super::walk_seed();
    eprintln!("spec's member against standing.rs: seed {seed}");
    let mut d = Dice(seed | 1);
    let mut seen = BTreeMap::new();
    for life in 0..LIVES {
        let mut l = Lived::new(&mut d);
        let mut steps = Vec::new();
        for _ in 0..STEPS {
            match l.step(&mut d) {
                Ok(what) => steps.push(what),
                Err(what) => panic!("seed {seed} life {life}: {what} after {steps:#?}"),
            }
            for _ in 0..3 {
                let t = l.now - 1_000 + 250 * d.below(20) as Ms;
                if let Err(what) = l.compare(t, &mut seen) {
                    panic!("seed {seed} life {life}: {what} after {steps:#?}");
                }
            }
        }
        for (kind, n) in l.applied {
            *seen.entry(kind).or_insert(0) += n;
        }
    }
    eprintln!("spec's member agrees with standing.rs: seed {seed}, answers {seen:?}");
    let kinds = [
        "acting",
        "written again, vouched",
        "written again",
        "waiting",
        "held, not acting",
        "not held",
        "took, bounded in the past",
        "took, bounded",
        "took",
        "lost",
        "passed",
        "unchanged",
    ];
    for kind in kinds {
        assert!(seen.contains_key(kind), "seed {seed}: no moment was {kind}");
    }
}
