//! Symmetry reduction: members alike (the same clock) and keys are interchangeable, so
//! a state and the same state with members or keys renamed behave alike. Each state is
//! remembered by the least fingerprint over every renaming ([`canonical`]), as TLC's
//! and stateright's symmetry sets do: with 3 members and 2 keys, up to 12 states
//! become one.
//!
//! Costs: per state, a signature per member, then one renamed copy and one hash per
//! renaming that orders the members by signature (keys! when no two members are alike,
//! up to members! × keys! when all are).

use std::hash::{Hash, Hasher};

use super::member::{HeldAs, InFlight, Instance, Sent, SLOTS};
use super::store::{Claim, ClaimReply, Mid, Store, KEYS, MEMBERS};
use super::world::System;
use super::Scope;

/// A renaming: new index of each member, and of each key.
#[derive(Clone, Copy, Debug)]
pub struct Renaming {
    /// Member `i` becomes `members[i]`.
    members: [Mid; MEMBERS],
    /// Key `k` becomes `keys[k]`.
    keys: [usize; KEYS],
    /// Members in the world (the rest keep their indexes).
    n: usize,
    /// Keys in use.
    nk: usize,
    /// Renames nothing.
    identity: bool,
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
                n,
                nk: b.keys,
                identity: false,
            };
            r.members[..n].copy_from_slice(mp);
            r.keys[..b.keys].copy_from_slice(kp);
            r.identity = mp.iter().enumerate().all(|(i, &j)| usize::from(j) == i)
                && kp.iter().enumerate().all(|(k, &l)| l == k);
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

/// The least fingerprint of `world` over the renamings that put its members and keys in
/// the order of their signatures ([`signature`], [`key_signature`]): the same for every
/// state alike up to renaming (a renaming moves a signature with its member or key),
/// with one fingerprint for most states instead of one per renaming.
pub fn canonical(world: &System, renamings: &[Renaming]) -> u64 {
    let sig: [u64; MEMBERS] = std::array::from_fn(|i| signature(&world.members[i]));
    let ksig: [u64; KEYS] = std::array::from_fn(|k| key_signature(world, k));
    renamings
        .iter()
        .filter(|r| r.keeps_order(world, &sig) && r.keeps_key_order(&ksig))
        .map(|r| match r.identity {
            true => fingerprint(world),
            false => fingerprint(&r.world(world)),
        })
        .min()
        .unwrap_or_else(|| fingerprint(world))
}

/// What a member is apart from the names it holds (other members', keys'): its life,
/// clocks, lease and how many keys and calls it has. Renaming leaves it unchanged.
fn signature(m: &Instance) -> u64 {
    let mut h = WordHasher(0x1319_8a2e_0370_7344);
    (
        m.life,
        m.rate,
        m.epoch,
        m.generation,
        m.valid_until,
        m.leaving,
    )
        .hash(&mut h);
    (
        m.redis_clock,
        m.step,
        m.renewed_at,
        m.armed,
        m.turn.is_some(),
    )
        .hash(&mut h);
    let held = m.holds.iter().flatten().count();
    let calls = m.slots.iter().flatten().count();
    (held, calls).hash(&mut h);
    h.finish()
}

/// What key `k` is apart from names: its last exchange's start and its claims (master's
/// and replica's) without their holder's index. Renaming leaves it unchanged.
fn key_signature(world: &System, k: usize) -> u64 {
    let mut h = WordHasher(0xa409_3822_299f_31d0);
    world.last[k].map(|(t, _)| t).hash(&mut h);
    for s in [&world.store, &world.replica] {
        s.claims[k]
            .map(|c| Claim {
                holder: c.holder.map(|(_, e)| (0, e)),
                ..c
            })
            .hash(&mut h);
    }
    h.finish()
}

/// A 64-bit hash of `world`: its derived `Hash`, a word at a time.
fn fingerprint(world: &System) -> u64 {
    let mut h = WordHasher(0x243f_6a88_85a3_08d3);
    world.hash(&mut h);
    h.finish()
}

/// A hasher that takes a word per call: each word is mixed in by a multiplication whose
/// 128-bit product is folded back to 64 bits (as foldhash does), and the end passes
/// through MurmurHash3's finalizer. Not for adversarial input, only for fingerprints.
struct WordHasher(u64);

impl WordHasher {
    fn mix(&mut self, word: u64) {
        let p = u128::from(self.0 ^ word) * 0x9e37_79b9_7f4a_7c15;
        self.0 = (p as u64) ^ ((p >> 64) as u64) ^ 0x5851_f42d_4c95_7f2d;
    }
}

impl Hasher for WordHasher {
    fn finish(&self) -> u64 {
        let mut x = self.0;
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        x ^ (x >> 33)
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0; 8];
            w.copy_from_slice(c);
            self.mix(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        let mut w = [0; 8];
        w[..rest.len()].copy_from_slice(rest);
        self.mix(u64::from_le_bytes(w) ^ ((rest.len() as u64) << 56));
    }
    fn write_u8(&mut self, x: u8) {
        self.mix(u64::from(x));
    }
    fn write_u16(&mut self, x: u16) {
        self.mix(u64::from(x));
    }
    fn write_u32(&mut self, x: u32) {
        self.mix(u64::from(x));
    }
    fn write_u64(&mut self, x: u64) {
        self.mix(x);
    }
    fn write_usize(&mut self, x: usize) {
        self.mix(x as u64);
    }
}

impl Renaming {
    /// Does this renaming put members with lesser signatures first, among those it may
    /// swap (the same clock)?
    fn keeps_order(&self, world: &System, sig: &[u64; MEMBERS]) -> bool {
        let alike = |i: usize, j: usize| world.members[i].rate == world.members[j].rate;
        (0..self.n).all(|i| {
            (0..self.n)
                .all(|j| !alike(i, j) || sig[i] >= sig[j] || self.members[i] < self.members[j])
        })
    }

    /// Does this renaming put keys with lesser signatures first?
    fn keeps_key_order(&self, ksig: &[u64; KEYS]) -> bool {
        (0..self.nk)
            .all(|k| (0..self.nk).all(|l| ksig[k] >= ksig[l] || self.keys[k] < self.keys[l]))
    }

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
