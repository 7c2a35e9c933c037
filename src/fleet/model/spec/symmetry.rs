//! Symmetry reduction: members alike (the same clock) and keys are interchangeable, so
//! a state and the same state with members or keys renamed behave alike. Each state is
//! remembered by the least fingerprint over every renaming ([`canonical`]), as TLC's
//! and stateright's symmetry sets do: with 3 members and 2 keys, up to 12 states
//! become one.
//!
//! Costs: one renamed copy and one hash per renaming (members! × keys!) per state.

use std::hash::{Hash, Hasher};

use super::member::{HeldAs, InFlight, Instance, Sent, SLOTS};
use super::store::{ClaimReply, Mid, Store, KEYS, MEMBERS};
use super::world::System;
use super::Scope;

/// A renaming: new index of each member, and of each key.
#[derive(Clone, Copy, Debug)]
pub struct Renaming {
    /// Member `i` becomes `members[i]`.
    members: [Mid; MEMBERS],
    /// Key `k` becomes `keys[k]`.
    keys: [usize; KEYS],
}

/// Every renaming the bounds allow: members in the world with the same clock rate are
/// permuted among themselves, keys in use among themselves.
pub fn renamings(b: &Scope, world: &System) -> Vec<Renaming> {
    let n = b.members + b.joiners;
    let mut member_perms = vec![];
    permute(&mut (0..n as Mid).collect::<Vec<_>>(), 0, &mut member_perms);
    member_perms.retain(|p: &Vec<Mid>| {
        p.iter()
            .enumerate()
            .all(|(i, &j)| world.members[i].rate == world.members[usize::from(j)].rate)
    });
    let mut key_perms = vec![];
    permute(&mut (0..b.keys).collect::<Vec<_>>(), 0, &mut key_perms);
    let mut out = vec![];
    for mp in &member_perms {
        for kp in &key_perms {
            let mut r = Renaming {
                members: std::array::from_fn(|i| i as Mid),
                keys: std::array::from_fn(|k| k),
            };
            r.members[..n].copy_from_slice(mp);
            r.keys[..b.keys].copy_from_slice(kp);
            out.push(r);
        }
    }
    out
}

/// Every permutation of `items[at..]` (with `items[..at]` fixed), into `out`.
fn permute<T: Copy>(items: &mut Vec<T>, at: usize, out: &mut Vec<Vec<T>>) {
    if at == items.len() {
        return out.push(items.clone());
    }
    for i in at..items.len() {
        items.swap(at, i);
        permute(items, at + 1, out);
        items.swap(at, i);
    }
}

/// The least fingerprint of `world` over `renamings`.
pub fn canonical(world: &System, renamings: &[Renaming]) -> u64 {
    renamings
        .iter()
        .map(|r| fingerprint(&r.world(world)))
        .min()
        .unwrap_or_else(|| fingerprint(world))
}

/// A 64-bit hash of `world` (FNV-1a over its derived `Hash`).
fn fingerprint(world: &System) -> u64 {
    let mut h = Fnv(0xcbf2_9ce4_8422_2325);
    world.hash(&mut h);
    h.0
}

/// FNV-1a.
struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

impl Renaming {
    /// Member `i`'s new index.
    fn m(&self, i: Mid) -> Mid {
        self.members[usize::from(i)]
    }

    /// `world` renamed.
    fn world(&self, w: &System) -> System {
        let mut out = *w;
        out.store = self.store(&w.store);
        out.replica = self.store(&w.replica);
        for (i, m) in w.members.iter().enumerate() {
            out.members[usize::from(self.members[i])] = self.member(m);
        }
        for (k, last) in w.last.iter().enumerate() {
            out.last[self.keys[k]] = last.map(|(t, j)| (t, self.m(j)));
        }
        out.orphan = w.orphan.map(|(i, c)| (self.m(i), self.call(&c)));
        out
    }

    /// A store renamed.
    fn store(&self, s: &Store) -> Store {
        let mut out = *s;
        for (i, r) in s.members.iter().enumerate() {
            out.members[usize::from(self.members[i])] = *r;
        }
        for (k, c) in s.claims.iter().enumerate() {
            out.claims[self.keys[k]] = c.map(|mut c| {
                c.holder = c.holder.map(|(m, e)| (self.m(m), e));
                c
            });
        }
        out
    }

    /// A member renamed (the keys it holds, its calls, its heirs).
    fn member(&self, m: &Instance) -> Instance {
        let mut out = *m;
        for k in 0..KEYS {
            let to = self.keys[k];
            out.holds[to] = m.holds[k].map(|mut h| {
                h.held = match h.held {
                    HeldAs::In => HeldAs::In,
                    HeldAs::Moving(j) => HeldAs::Moving(self.m(j)),
                    HeldAs::Releasing(j) => HeldAs::Releasing(j.map(|j| self.m(j))),
                };
                h
            });
            out.pace[to] = m.pace[k];
            out.exchange[to] = m.exchange[k];
        }
        out.slots[0] = m.slots[0].map(|msg| self.message(&msg));
        for s in 1..SLOTS {
            let (k, release) = ((s - 1) / 2, (s - 1) % 2);
            let to = 1 + 2 * self.keys[k] + release;
            out.slots[to] = m.slots[s].map(|msg| self.message(&msg));
        }
        out.turn = m.turn.map(|k| self.keys[usize::from(k)] as u8);
        out
    }

    /// A message renamed.
    fn message(&self, msg: &InFlight) -> InFlight {
        let mut out = *msg;
        out.call = self.call(&msg.call);
        if let Some(super::member::Answered::Claimed(ClaimReply::Held(j, e, s))) = msg.answer {
            out.answer = Some(super::member::Answered::Claimed(ClaimReply::Held(
                self.m(j),
                e,
                s,
            )));
        }
        out
    }

    /// A call renamed.
    fn call(&self, c: &Sent) -> Sent {
        match *c {
            Sent::Renew(mut r, sent) => {
                r.member = self.m(r.member);
                Sent::Renew(r, sent)
            }
            Sent::Claim(mut c) => {
                c.member = self.m(c.member);
                c.key = self.keys[c.key];
                Sent::Claim(c)
            }
            Sent::Release(mut r) => {
                r.member = self.m(r.member);
                r.key = self.keys[r.key];
                r.heir = r.heir.map(|(j, e)| (self.m(j), e));
                Sent::Release(r)
            }
            Sent::Leave(i, e) => Sent::Leave(self.m(i), e),
        }
    }
}
