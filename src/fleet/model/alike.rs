//! When two states of the model are alike: the fingerprint the search remembers.
//!
//! The protocol's decisions depend on times only relative to now, and on epochs and
//! takings' numbers only by equality. So a state is fingerprinted with every time made
//! relative to now and every epoch and taking renamed by rank, and with what can no
//! longer matter forgotten:
//! * a time longer ago than any rule looks back ([`World::reach`]: a lease, its grace
//!   and a hold) reads as "long ago" (a lapsed lease, an exchange over, a fence or
//!   not-before passed: every rule compares such a time with now, or takes the larger of
//!   it and now-or-later);
//! * a release's time and facts (data a next owner starts from, not a decision);
//! * an exchange that is over.
//!
//! Two states alike then have the same futures, shifted in time; the search can leave
//! out the horizon, and still ends: relative times and ranks are few.

use std::collections::BTreeSet;
use std::hash::{Hash, Hasher};

use super::redis::Val;
use super::world::{Awaits, Message, World, KEY, TICK};
use crate::fleet::standing::Ms;

/// The fingerprint of `world` (see the module).
pub fn fingerprint(world: &World) -> u64 {
    let alike = Alike::new(world);
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (world.server, world.spent).hash(&mut h);
    // With a horizon, states at different times have different futures left.
    if world.bounds.horizon > 0 {
        world.now.hash(&mut h);
    }
    alike.data(&world.data, &mut h);
    alike.data(&world.replica, &mut h);
    alike.message(world.orphan.as_ref(), &mut h);
    for node in &world.nodes {
        (node.life, &node.releasing_to).hash(&mut h);
        alike.message(node.renewal.as_ref(), &mut h);
        alike.message(node.call.as_ref(), &mut h);
        let hold = world.bounds.hold * TICK;
        node.granted
            .filter(|g| g + hold > world.now)
            .map(|g| alike.time(g))
            .hash(&mut h);
        let s = &node.standing;
        (alike.epoch(s.epoch()), s.generation(), s.leaving()).hash(&mut h);
        s.valid_until().map(|v| alike.time(v)).hash(&mut h);
        if let Some(holding) = s.holding(KEY) {
            (
                alike.epoch(holding.epoch),
                &holding.generation,
                holding.held,
            )
                .hash(&mut h);
            alike.token_word(&holding.token.to_string()).hash(&mut h);
            let not_before = (holding.not_before - world.now).max(0);
            (not_before, holding.vouched, holding.provisional).hash(&mut h);
        }
    }
    h.finish()
}

/// What makes states alike: now, how far back anything matters, and the epochs' ranks.
struct Alike {
    /// Now, in ms.
    now: Ms,
    /// How far back a time can still matter, in ms.
    reach: Ms,
    /// Every epoch in the state, in order (0 is none and stays 0).
    epochs: Vec<u64>,
    /// Every taking's number in the state, in order.
    tokens: Vec<u64>,
}

impl Alike {
    /// The measure of `world`.
    fn new(world: &World) -> Alike {
        Alike {
            now: world.now,
            reach: world.reach(),
            epochs: epochs(world).into_iter().collect(),
            tokens: tokens(world).into_iter().collect(),
        }
    }

    /// A taking's number written in a word, ranked.
    fn token_word(&self, word: &str) -> String {
        word.parse::<u64>().map_or_else(
            |_| word.to_string(),
            |t| {
                let rank = self.tokens.iter().position(|x| *x == t);
                rank.map_or(0, |p| p + 1).to_string()
            },
        )
    }

    /// `t` relative to now, "long ago" past the reach.
    fn time(&self, t: Ms) -> Ms {
        (t - self.now).max(-self.reach - TICK)
    }

    /// A time written in a word, relative (a word that is no number as it is).
    fn time_word(&self, word: &str) -> String {
        word.parse::<Ms>()
            .map_or_else(|_| word.to_string(), |t| self.time(t).to_string())
    }

    /// A bound written in a word (a fence, a not-before), relative: any time not after
    /// now reads as now (every rule takes the larger of it and now-or-later).
    fn bound_word(&self, word: &str) -> String {
        word.parse::<Ms>()
            .map_or_else(|_| word.to_string(), |t| (t - self.now).max(0).to_string())
    }

    /// `epoch`'s rank.
    fn epoch(&self, epoch: u64) -> u64 {
        if epoch == 0 {
            return 0;
        }
        self.epochs
            .iter()
            .position(|e| *e == epoch)
            .map_or(0, |p| p as u64 + 1)
    }

    /// An epoch written in a word, ranked.
    fn epoch_word(&self, word: &str) -> String {
        word.parse::<u64>()
            .map_or_else(|_| word.to_string(), |e| self.epoch(e).to_string())
    }

    /// A member's record, its epoch ranked and its expiry relative.
    fn record(&self, record: &str) -> String {
        let mut fields: Vec<String> = record.split('|').map(str::to_string).collect();
        if fields.len() == 6 {
            fields[0] = self.epoch_word(&fields[0]);
            fields[1] = self.time_word(&fields[1]);
        }
        fields.join("|")
    }

    /// A data set, alike.
    fn data(&self, data: &super::redis::Data, h: &mut impl Hasher) {
        for (key, value) in data {
            key.hash(h);
            match (key.as_str(), value) {
                ("{robotsgate}:epoch", Val::Str(counter)) => {
                    // Above every epoch in the state: its rank past the last.
                    let counter: u64 = counter.parse().unwrap_or(0);
                    let above = self.epochs.iter().filter(|e| **e <= counter).count();
                    above.hash(h);
                }
                ("{robotsgate}:fence", Val::Str(t)) => self.bound_word(t).hash(h),
                ("{robotsgate}:members", Val::Hash(records)) => {
                    for (id, record) in records {
                        (id, self.record(record)).hash(h);
                    }
                }
                (_, Val::Hash(claim)) if key.contains(":own:") => {
                    for (field, v) in claim {
                        field.hash(h);
                        match field.as_str() {
                            "e" => self.epoch_word(v).hash(h),
                            "n" => self.token_word(v).hash(h),
                            "pv" => "pv".hash(h),
                            "nb" => self.bound_word(v).hash(h),
                            "released" => "released".hash(h),
                            f if f.starts_with("f:") => "facts".hash(h),
                            _ => v.hash(h),
                        }
                    }
                }
                (_, other) => other.hash(h),
            }
        }
    }

    /// A message in flight, alike.
    fn message(&self, message: Option<&Message>, h: &mut impl Hasher) {
        let Some(m) = message else {
            0u8.hash(h);
            return;
        };
        m.script.hash(h);
        for (i, arg) in m.args.iter().enumerate() {
            let epoch_at = matches!(
                (m.script, i),
                (
                    "member_renew" | "own_claim" | "own_release" | "member_leave",
                    1
                )
            );
            match (m.script, i) {
                _ if epoch_at => self.epoch_word(arg).hash(h),
                ("own_release", 6) => self.token_word(arg).hash(h),
                ("own_release", 8) => "facts".hash(h),
                _ => arg.hash(h),
            }
        }
        match &m.purpose {
            Awaits::Renew(sent) => (0u8, self.time(*sent)).hash(h),
            Awaits::Claim(epoch, generation, how) => {
                (1u8, self.epoch(*epoch), generation, how).hash(h);
            }
            other => other.hash(h),
        }
        match (&m.answer, m.script) {
            (None, _) => 0u8.hash(h),
            (Some(a), "member_renew") => {
                a.first().map(|e| self.epoch_word(e)).hash(h);
                a.get(1).hash(h);
            }
            (Some(a), "own_claim") if a.first().map(String::as_str) == Some("held") => {
                (a.get(1), a.get(2).map(|e| self.epoch_word(e))).hash(h);
            }
            (Some(a), "own_claim") if a.first().map(String::as_str) == Some("taken") => {
                // A wait is counted from when the answer arrives: it stays as it is.
                (
                    a.get(1),
                    a.get(2),
                    a.get(3).map(|t| self.token_word(t)),
                    a.get(4),
                )
                    .hash(h);
            }
            (Some(a), _) => a.hash(h),
        }
    }
}

/// Every epoch a state mentions.
fn epochs(world: &World) -> BTreeSet<u64> {
    let mut out = BTreeSet::new();
    let mut add = |word: &str| {
        if let Ok(e) = word.parse::<u64>() {
            if e > 0 {
                out.insert(e);
            }
        }
    };
    for data in [&world.data, &world.replica] {
        if let Some(Val::Hash(records)) = data.get("{robotsgate}:members") {
            for record in records.values() {
                add(record.split('|').next().unwrap_or(""));
            }
        }
        for (key, value) in data.iter() {
            if let (true, Val::Hash(claim)) = (key.contains(":own:"), value) {
                add(claim.get("e").map_or("", String::as_str));
            }
        }
    }
    for m in messages(world) {
        if let Some(arg) = m.args.get(1) {
            add(arg);
        }
        if let Awaits::Claim(epoch, ..) = m.purpose {
            add(&epoch.to_string());
        }
        match (m.script, m.answer.as_deref()) {
            ("member_renew", Some([epoch, ..])) => add(epoch),
            ("own_claim", Some([first, _, epoch, ..])) if first == "held" => add(epoch),
            _ => {}
        }
    }
    for node in &world.nodes {
        add(&node.standing.epoch().to_string());
        if let Some(h) = node.standing.holding(KEY) {
            add(&h.epoch.to_string());
        }
    }
    out
}

/// Every message in flight: each member's renewal and call, and the orphan.
fn messages(world: &World) -> impl Iterator<Item = &Message> {
    world
        .nodes
        .iter()
        .flat_map(|n| [n.renewal.as_ref(), n.call.as_ref()])
        .chain([world.orphan.as_ref()])
        .flatten()
}

/// Every taking's number a state mentions.
fn tokens(world: &World) -> BTreeSet<u64> {
    let mut out = BTreeSet::new();
    let mut add = |word: &str| {
        if let Ok(t) = word.parse::<u64>() {
            out.insert(t);
        }
    };
    for data in [&world.data, &world.replica] {
        for (key, value) in data.iter() {
            if let (true, Val::Hash(claim)) = (key.contains(":own:"), value) {
                add(claim.get("n").map_or("", String::as_str));
            }
        }
    }
    for m in messages(world) {
        match (m.script, m.answer.as_deref()) {
            ("own_release", _) => add(m.args.get(6).map_or("", String::as_str)),
            ("own_claim", Some([first, _, _, token, ..])) if first == "taken" => add(token),
            _ => {}
        }
    }
    for node in &world.nodes {
        if let Some(h) = node.standing.holding(KEY) {
            add(&h.token.to_string());
        }
    }
    out
}
