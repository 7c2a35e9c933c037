//! The specification's member decides as `standing.rs` does: random lives (renewals
//! in changing epochs and generations, claims taken and lost, keys marked, put back,
//! dropped, a leave), each step applied to `member.rs`'s [`Instance`] and to the code's
//! own `Standing`; after every step, at random moments, what each says of its lease
//! and of every key (acting, to be written again and how, the holding itself) must be
//! the same.
//!
//! What it leaves to the searches: the claim's answer as `ownership` reads it (the
//! inherited gap, a re-assertion's answer to a key let go meanwhile), which is not
//! `Standing`'s.

use std::collections::BTreeMap;
use std::time::Duration;

use super::agree::gen;
use super::member::{HeldAs, Instance, KeyHeld};
use super::store::{ClaimMode, ClaimReply, Claiming, How, Ms, Renewed, KEYS};
use crate::fleet::model::Dice;
use crate::fleet::standing::{Held, Reassert, Standing, Taking};

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

    /// A claim of key `k`, made in this or an earlier epoch and generation, taken.
    fn take(&mut self, d: &mut Dice, k: usize) -> String {
        let epoch = self.spec.epoch.saturating_sub(u8::from(d.below(4) == 0));
        let generation = match d.below(3) {
            0 => None,
            1 => Some(1 + d.below(3) as u8),
            _ => self.spec.generation,
        };
        let (bound, token, provisional) = (500 * d.below(4) as Ms, d.below(5) as u8, d.coin());
        let claim = Claiming {
            member: 0,
            epoch,
            generation,
            key: k,
            mode: ClaimMode::Claim,
            window: 0,
        };
        let reply = ClaimReply::Taken(How::Claimed, bound, token, provisional, None);
        self.spec.claimed(&claim, &reply, self.now);
        let taking = Taking {
            token: u64::from(token),
            not_before: self.now + bound,
            provisional,
        };
        self.code
            .took(&key(k), u64::from(epoch), &gen(generation), taking);
        format!("{} taken in {epoch} {generation:?}: {taking:?}", key(k))
    }

    /// Key `k` lost to another member (the claim's answer).
    fn lose(&mut self, k: usize) -> String {
        let claim = Claiming {
            member: 0,
            epoch: self.spec.epoch,
            generation: self.spec.generation,
            key: k,
            mode: ClaimMode::Claim,
            window: 0,
        };
        self.spec.claimed(&claim, &ClaimReply::Lost, self.now);
        self.code.drop_key(&key(k));
        format!("{} lost", key(k))
    }

    /// One random step: what it was.
    fn step(&mut self, d: &mut Dice) -> String {
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
        match d.below(20) {
            0..=6 => self.renew(d),
            7..=11 => self.take(d, k),
            12 => self.lose(k),
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
        }
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
            steps.push(l.step(&mut d));
            for _ in 0..3 {
                let t = l.now - 1_000 + 250 * d.below(20) as Ms;
                if let Err(what) = l.compare(t, &mut seen) {
                    panic!("seed {seed} life {life}: {what} after {steps:#?}");
                }
            }
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
    ];
    for kind in kinds {
        assert!(seen.contains_key(kind), "seed {seed}: no moment was {kind}");
    }
}
