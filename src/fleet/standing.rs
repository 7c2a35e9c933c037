//! A member's standing: what one instance knows of its own right to act, and every
//! decision it takes about acting, from its own knowledge only.
//!
//! **What it holds.** Its registration (the epoch Redis gave it), the data set's
//! generation it last saw, its lease by its own clock (from when it *sent* the renewal
//! Redis answered, so it ends no later than Redis' record of it), whether it is
//! leaving, and each pacing key it holds ([`Holding`]): the epoch and generation the
//! claim was written in, how it holds it, and when it may start acting for it.
//!
//! **The rule.** A member acts for a key ([`Standing::acts_for`]) only while all of
//! these hold: its lease is valid by its own clock (with `fleet.outage_grace_seconds`
//! in `keep_owned` mode), it is not leaving, the key's claim was written in its current
//! epoch *and* generation (confirmed by Redis), and the key's not-before has passed. Who
//! may hold a claim is decided in Redis (`scripts/own_claim.lua`) from the members'
//! records and Redis' clock; this type never decides that another member is gone.
//!
//! **Changes.** When a renewal brings a new epoch (this member's record lapsed) or a new
//! generation (Redis lost its data set, or another server serves it), every key becomes
//! unconfirmed and is written again ([`Standing::unconfirmed`]): a key it was acting
//! for right up to the change is *vouched* (it alone can have been acting for it, so
//! Redis' fence does not apply); any other waits for the fence.
//!
//! Pure and synchronous: times are this process's milliseconds ([`Ms`]); the fleet's
//! I/O (`membership.rs`, `ownership/`) wraps it, and the model (`model/`) drives this
//! very type through every interleaving it explores.
//!
//! Costs: a hash-map lookup per question; memory: one entry per key held.

use std::collections::HashMap;
use std::time::Duration;

/// A time in this process's clock, in milliseconds.
pub type Ms = i64;

/// How a member holds a key it owns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Held {
    /// It acts for the key (once confirmed and past its not-before).
    In,
    /// Being handed to the member its traffic comes from: turns already waited for are
    /// still taken, new requests wait.
    Moving,
    /// Its release runs: no request is routed here for it, no turn acts for it.
    Releasing,
}

/// One key a member holds.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Holding {
    /// The epoch its claim was written in.
    pub epoch: u64,
    /// The generation its claim was written in.
    pub generation: String,
    /// The taking's number Redis gave (what it releases and records by).
    pub token: u64,
    /// How it is held.
    pub held: Held,
    /// Nothing may act for it before this: a previous owner's exchanges may run until
    /// then.
    pub not_before: Ms,
    /// It was acted for right up to the last change of epoch or generation: written
    /// again, it is vouched for.
    pub vouched: bool,
    /// Taken while Redis' fence held: confirmed again once `not_before` has passed
    /// (the fence may have been extended meanwhile), and not acted for before.
    pub provisional: bool,
}

/// What Redis said of a claim taken: the taking's number, when the holder may act
/// (this process's clock), whether it is provisional.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Taking {
    /// The taking's number.
    pub token: u64,
    /// Not acted for before.
    pub not_before: Ms,
    /// Confirmed again once `not_before` has passed.
    pub provisional: bool,
}

/// How a key stands here, for the admin API.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Here {
    /// This member acts for it now.
    Acting,
    /// Owned here, acting from this time on (a previous owner's exchanges may run).
    From(Ms),
    /// Held here, but not acted for: its claim is being written again, its release
    /// runs, or this member's lease is not valid.
    Stopped,
}

/// How a claim is to be written again: `own_claim.lua`'s modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reassert {
    /// Acted for without a break up to the change: the fence does not apply.
    Vouch,
    /// Anything else: not acted for before the fence.
    Plain,
}

impl Reassert {
    /// `own_claim.lua`'s mode.
    pub fn mode(self) -> &'static str {
        match self {
            Reassert::Vouch => "vouch",
            Reassert::Plain => "reassert",
        }
    }
}

/// What one instance knows of its own right to act (see the module).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Standing {
    /// `fleet.lease_seconds`.
    lease: Ms,
    /// How long past its lease it acts without Redis (`keep_owned`'s grace, else 0).
    grace: Ms,
    /// Its epoch (0: not registered yet).
    epoch: u64,
    /// The data set's generation at its last renewal.
    generation: String,
    /// Its lease ends then, by its own clock.
    valid_until: Option<Ms>,
    /// It is leaving: no new ownership, no turns.
    leaving: bool,
    /// The keys it holds.
    keys: HashMap<String, Holding>,
}

impl Standing {
    /// Not registered yet, leases of `lease`, acted on `grace` past their end.
    pub fn new(lease: Duration, grace: Duration) -> Standing {
        Standing {
            lease: ms(lease),
            grace: ms(grace),
            epoch: 0,
            generation: String::new(),
            valid_until: None,
            leaving: false,
            keys: HashMap::new(),
        }
    }

    /// Its epoch (0 before it registered).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The generation it last saw.
    pub fn generation(&self) -> &str {
        &self.generation
    }

    /// How long past its lease it acts without Redis.
    pub fn grace(&self) -> Ms {
        self.grace
    }

    /// Until when its lease is valid by its own clock (its grace aside).
    pub fn valid_until(&self) -> Option<Ms> {
        self.valid_until
    }

    /// Is its lease valid at `now`, its grace included?
    pub fn lease_valid(&self, now: Ms) -> bool {
        self.valid_until
            .is_some_and(|until| now < until + self.grace)
    }

    /// May it take or keep ownership at `now`: registered, its lease valid, not leaving?
    pub fn may_own(&self, now: Ms) -> bool {
        !self.leaving && self.lease_valid(now)
    }

    /// Starts leaving: no new ownership, no turns.
    pub fn leave(&mut self) {
        self.leaving = true;
    }

    /// Is it leaving?
    pub fn leaving(&self) -> bool {
        self.leaving
    }

    /// Was `holding` written in the current epoch and generation?
    fn confirmed(&self, holding: &Holding) -> bool {
        holding.epoch == self.epoch && holding.generation == self.generation
    }

    /// Does it act for `holding` at `now`, its not-before aside?
    fn acting(&self, holding: &Holding, now: Ms) -> bool {
        self.may_own(now)
            && holding.held != Held::Releasing
            && self.confirmed(holding)
            && !holding.provisional
    }

    /// May it act for `key` at `now` (start an exchange, grant a turn)?
    pub fn acts_for(&self, key: &str, now: Ms) -> bool {
        self.keys
            .get(key)
            .is_some_and(|h| self.acting(h, now) && now >= h.not_before)
    }

    /// How `key` stands here at `now`, when held.
    pub fn here(&self, key: &str, now: Ms) -> Option<Here> {
        let holding = self.keys.get(key)?;
        let waiting = self.may_own(now) && self.confirmed(holding) && now < holding.not_before;
        Some(match self.acting(holding, now) {
            true if now >= holding.not_before => Here::Acting,
            _ if waiting && holding.held != Held::Releasing => Here::From(holding.not_before),
            _ => Here::Stopped,
        })
    }

    /// How it holds `key`, if it does.
    pub fn holding(&self, key: &str) -> Option<&Holding> {
        self.keys.get(key)
    }

    /// The keys it holds.
    pub fn keys(&self) -> Vec<String> {
        self.keys.keys().cloned().collect()
    }

    /// How many keys it holds.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Does it hold no key?
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// A renewal sent at `sent` was answered at `now` with `epoch` and `generation`:
    /// the lease runs from `sent`. On a change of either, the keys it was acting for
    /// are vouched and every key is unconfirmed. `true` on such a change.
    pub fn renewed(&mut self, sent: Ms, now: Ms, epoch: u64, generation: &str) -> bool {
        let changed = self.epoch != 0 && (epoch != self.epoch || generation != self.generation);
        if changed {
            let vouched: Vec<(String, bool)> = self
                .keys
                .iter()
                .map(|(key, h)| (key.clone(), self.acting(h, now)))
                .collect();
            for (key, vouch) in vouched {
                if let Some(h) = self.keys.get_mut(&key) {
                    h.vouched = vouch;
                }
            }
        }
        self.epoch = epoch;
        self.generation = generation.to_string();
        self.valid_until = Some(sent + self.lease);
        changed
    }

    /// The keys held but not confirmed in the current epoch and generation, or
    /// provisional past their wait (a `Held::In` one only: a key moving or releasing is
    /// decided by that), each with how it is to be written again.
    pub fn unconfirmed(&self, now: Ms) -> Vec<(String, Reassert)> {
        self.keys
            .iter()
            .filter(|(_, h)| h.held == Held::In && (!self.confirmed(h) || Self::due(h, now)))
            .map(|(key, h)| {
                let how = if h.vouched {
                    Reassert::Vouch
                } else {
                    Reassert::Plain
                };
                (key.clone(), how)
            })
            .collect()
    }

    /// Is `holding` provisional with its wait over at `now` (to be confirmed again)?
    fn due(holding: &Holding, now: Ms) -> bool {
        holding.provisional && now >= holding.not_before
    }

    /// Is `key` held in, provisional, its wait over at `now`, with this member free to
    /// own: to be confirmed again before it is acted for?
    pub fn confirmation_due(&self, key: &str, now: Ms) -> bool {
        self.may_own(now)
            && self
                .keys
                .get(key)
                .is_some_and(|h| h.held == Held::In && Self::due(h, now))
    }

    /// A claim of `key` made in `epoch` and `generation` was taken (or written again),
    /// as Redis said: held, acting from its not-before (and never before one it had
    /// already).
    pub fn took(&mut self, key: &str, epoch: u64, generation: &str, taken: Taking) {
        let Taking {
            token,
            not_before,
            provisional,
        } = taken;
        let earlier = self.keys.get(key).map_or(not_before, |h| h.not_before);
        self.keys.insert(
            key.to_string(),
            Holding {
                epoch,
                generation: generation.to_string(),
                token,
                held: Held::In,
                not_before: not_before.max(earlier),
                vouched: false,
                provisional,
            },
        );
    }

    /// `key` is no longer held here (lost to another member, released, handed on).
    pub fn drop_key(&mut self, key: &str) {
        self.keys.remove(key);
    }

    /// Holds `key` as `to` when it is held as `from` in the current epoch and
    /// generation: that epoch, when it was.
    pub fn mark(&mut self, key: &str, from: Held, to: Held) -> Option<u64> {
        let (epoch, generation) = (self.epoch, self.generation.clone());
        let holding = self.keys.get_mut(key)?;
        let current = holding.epoch == epoch && holding.generation == generation;
        (current && holding.held == from).then(|| {
            holding.held = to;
            epoch
        })
    }
}

impl Standing {
    /// Holds `key` as `to` when it is held as `from`, in whichever epoch and generation
    /// (putting a key back after a hand-over or release that did not happen).
    pub fn hold_as(&mut self, key: &str, from: Held, to: Held) -> bool {
        match self.keys.get_mut(key) {
            Some(holding) if holding.held == from => {
                holding.held = to;
                true
            }
            _ => false,
        }
    }
}

/// `d` in whole milliseconds.
fn ms(d: Duration) -> Ms {
    Ms::try_from(d.as_millis()).unwrap_or(Ms::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taking(not_before: Ms) -> Taking {
        Taking {
            token: 1,
            not_before,
            provisional: false,
        }
    }

    fn standing() -> Standing {
        let mut s = Standing::new(Duration::from_secs(5), Duration::ZERO);
        s.renewed(0, 10, 1, "g1");
        s
    }

    #[test]
    fn a_key_is_acted_for_once_confirmed_and_past_its_not_before_while_the_lease_holds() {
        let mut s = standing();
        s.took("k", 1, "g1", taking(2_000));
        assert!(!s.acts_for("k", 1_000), "before its not-before");
        assert_eq!(s.here("k", 1_000), Some(Here::From(2_000)));
        assert!(s.acts_for("k", 2_000));
        assert!(!s.acts_for("k", 5_000), "the lease sent at 0 ends at 5 s");
        assert_eq!(s.here("k", 5_000), Some(Here::Stopped));
        s.took("old", 1, "g0", taking(0));
        assert!(!s.acts_for("old", 100), "written in another generation");
    }

    #[test]
    fn a_change_vouches_for_the_keys_acted_for_and_unconfirms_every_key() {
        let mut s = standing();
        s.took("acting", 1, "g1", taking(0));
        s.took("waiting", 1, "g1", taking(9_000));
        s.took("stale", 1, "g0", taking(0));
        assert!(s.renewed(1_000, 1_010, 1, "g2"));
        let mut again = s.unconfirmed(0);
        again.sort();
        assert_eq!(
            again,
            vec![
                ("acting".into(), Reassert::Vouch),
                ("stale".into(), Reassert::Plain),
                ("waiting".into(), Reassert::Vouch),
            ]
        );
        assert!(
            !s.acts_for("acting", 1_020),
            "not before it is written again"
        );
        s.took("acting", 1, "g2", taking(0));
        assert!(s.acts_for("acting", 1_020));
        // Waiting out a previous owner's exchanges: never earlier for being written again.
        s.took("waiting", 1, "g2", taking(0));
        assert!(!s.acts_for("waiting", 5_000));
        // A second change before the key was written again: no longer vouched.
        assert!(s.renewed(2_000, 2_010, 2, "g2"));
        assert!(s
            .unconfirmed(0)
            .contains(&("stale".into(), Reassert::Plain)));
    }

    #[test]
    fn a_provisional_key_is_confirmed_again_before_it_is_acted_for() {
        let mut s = standing();
        let provisional = Taking {
            token: 1,
            not_before: 1_000,
            provisional: true,
        };
        s.took("k", 1, "g1", provisional);
        assert_eq!(s.here("k", 500), Some(Here::From(1_000)));
        assert!(s.unconfirmed(500).is_empty(), "not before its wait is over");
        assert!(!s.acts_for("k", 1_500), "provisional");
        assert_eq!(s.unconfirmed(1_500), vec![("k".into(), Reassert::Plain)]);
        s.took("k", 1, "g1", taking(1_000));
        assert!(s.acts_for("k", 1_500));
    }

    #[test]
    fn leaving_and_releasing_stop_acting() {
        let mut s = standing();
        s.took("k", 1, "g1", taking(0));
        assert_eq!(s.mark("k", Held::In, Held::Releasing), Some(1));
        assert!(!s.acts_for("k", 100));
        assert_eq!(s.mark("k", Held::In, Held::Moving), None);
        s.took("j", 1, "g1", taking(0));
        s.leave();
        assert!(!s.acts_for("j", 100));
    }
}
