//! The specification's store decides as the Lua scripts do: random stores and calls,
//! each run by `store.rs`'s rules and by the scripts themselves (the model's Redis,
//! `model/redis.rs`, which `model/fidelity.rs` holds to a real `redis-server`); their
//! answers, word for word, and the data sets they leave must be the same.

use std::collections::BTreeMap;

use super::store::{
    ClaimMode, ClaimReply, Claiming, How, MemberRecord, Mid, Ms, Releasing, Renewing, State, Store,
    KEYS,
};
use crate::fleet::membership::RENEWAL_KEYS as MEMBERSHIP;
use crate::fleet::model::redis::{Data, Scripts, Val};
use crate::fleet::model::Dice;

/// Member `i`'s id.
fn id(i: Mid) -> String {
    char::from(b'a' + i).to_string()
}

/// Key `k`'s claim key, as `ownership` names it.
fn claim_key(k: usize) -> String {
    crate::fleet::ownership::claim_key(&format!("k{k}"))
}

/// A generation's name, as the scripts and `Standing` hold it (none: empty).
pub(super) fn gen(g: Option<u8>) -> String {
    g.map_or(String::new(), |g| format!("g{g}"))
}

/// A server's run id.
fn run_id(server: u8) -> String {
    format!("server{server}")
}

/// `store` as Redis holds it.
fn data(store: &Store) -> Data {
    let mut out = Data::new();
    let s = |v: String| Val::Str(v);
    let members: BTreeMap<String, String> = store
        .members
        .iter()
        .enumerate()
        .filter_map(|(i, r)| r.map(|r| (i as Mid, r)))
        .map(|(i, r)| {
            let state = ["up", "leaving", "left"][r.state as usize];
            let v = format!(
                "{}|{}|{state}|peer-{}|{}|{}",
                r.epoch,
                r.expires,
                id(i),
                r.lease,
                r.after
            );
            (id(i), v)
        })
        .collect();
    if !members.is_empty() {
        out.insert(MEMBERSHIP[0].into(), Val::Hash(members));
    }
    if store.epochs > 0 {
        out.insert(MEMBERSHIP[1].into(), s(store.epochs.to_string()));
    }
    if store.generation.is_some() {
        out.insert(MEMBERSHIP[2].into(), s(gen(store.generation)));
    }
    if let Some(server) = store.server {
        out.insert(MEMBERSHIP[3].into(), s(run_id(server)));
    }
    if let Some(fence) = store.fence {
        out.insert(MEMBERSHIP[4].into(), s(fence.to_string()));
    }
    for (k, claim) in store.claims.iter().enumerate() {
        let Some(c) = claim else { continue };
        let mut h = BTreeMap::new();
        if let Some((m, e)) = c.holder {
            h.insert("m".to_string(), id(m));
            h.insert("e".to_string(), e.to_string());
        }
        if c.generation.is_some() {
            h.insert("gen".into(), gen(c.generation));
        }
        h.insert("n".into(), c.n.to_string());
        h.insert("nb".into(), c.nb.to_string());
        if c.pv {
            h.insert("pv".into(), "1".into());
        }
        if let Some(r) = c.released {
            h.insert("released".into(), r.to_string());
        }
        if let Some(e) = c.last_end {
            h.insert("f:*".into(), format!("{e}|0|0"));
        }
        out.insert(claim_key(k), Val::Hash(h));
    }
    out
}

/// A time near `now` (in half-seconds, from 3 s before to 4 s after).
fn time(d: &mut Dice, now: Ms) -> Ms {
    now - 3000 + 500 * d.below(15) as Ms
}

/// A random store at `now`.
fn random_store(d: &mut Dice, now: Ms) -> Store {
    let mut store = Store::default();
    for r in store.members.iter_mut().take(3) {
        *r = d.maybe(|d| MemberRecord {
            epoch: 1 + d.below(4) as u8,
            expires: time(d, now),
            state: [State::Up, State::Up, State::Up, State::Leaving, State::Left][d.below(5)],
            lease: 1000 * (1 + d.below(2) as Ms),
            after: 1000 * d.below(3) as Ms,
        });
    }
    store.epochs = 4 + d.below(2) as u8;
    store.generation = (d.below(4) > 0).then(|| d.below(2) as u8);
    store.server = (d.below(4) > 0).then(|| d.below(2) as u8);
    store.fence = d.maybe(|d| time(d, now));
    for c in store.claims.iter_mut() {
        *c = d.maybe(|d| super::store::Claim {
            holder: d.maybe(|d| (d.below(3) as u8, 1 + d.below(4) as u8)),
            generation: d.maybe(|d| d.below(2) as u8),
            n: 1 + d.below(3) as u8,
            nb: if d.coin() { 0 } else { time(d, now) },
            pv: d.coin(),
            released: d.maybe(|d| time(d, now)),
            last_end: d.maybe(|d| time(d, now)),
        });
    }
    store
}

/// A script call: its name, keys, arguments, and the answer's words the rules gave.
type ScriptCase = (&'static str, Vec<String>, Vec<String>, Vec<String>);

/// Who calls: a member, the epoch and generation it names, a key.
#[derive(Clone, Copy)]
struct Caller {
    /// The member.
    member: Mid,
    /// The epoch it names.
    epoch: u8,
    /// The generation it names.
    generation: Option<u8>,
    /// The key.
    key: usize,
    /// Does the call fit the store (its member's epoch, the generation)?
    fits: bool,
}

/// One random call, run on `store` by the rules.
fn random_call(d: &mut Dice, store: &mut Store, now: Ms, server: u8) -> ScriptCase {
    let member = d.below(3) as Mid;
    // Mostly a call that fits the store, so that every branch of the rules is reached.
    let fits = d.below(4) > 0;
    let epoch = match store.members[usize::from(member)] {
        Some(r) if fits => r.epoch,
        _ => d.below(5) as u8,
    };
    let generation = if fits {
        store.generation
    } else {
        d.maybe(|d| d.below(2) as u8)
    };
    let key = d.below(KEYS);
    let who = Caller {
        member,
        epoch,
        generation,
        key,
        fits,
    };
    match d.below(4) {
        0 => renew_case(d, store, now, server, who),
        1 => claim_case(d, store, now, server, who),
        2 => release_case(d, store, now, server, who),
        _ => {
            let done = store.leave(member, epoch);
            let args = vec![id(member), epoch.to_string()];
            let answer = vec![u8::from(done).to_string()];
            ("member_leave", keys(&MEMBERSHIP[..1]), args, answer)
        }
    }
}

/// A random renewal by `who`.
fn renew_case(d: &mut Dice, store: &mut Store, now: Ms, server: u8, who: Caller) -> ScriptCase {
    let r = Renewing {
        member: who.member,
        epoch: who.epoch,
        lease: 1000 * (1 + d.below(2) as Ms),
        after: 1000 * d.below(3) as Ms,
        leaving: d.below(4) == 0,
        offer: 5 + d.below(2) as u8,
        saw: who.generation,
        runs_for: 500 * d.below(6) as Ms,
        settle: 1000,
        fence_new: d.coin(),
        step: if d.coin() { 0 } else { 3000 },
    };
    let a = store.renew(&r, now, server);
    let args = vec![
        id(r.member),
        r.epoch.to_string(),
        r.lease.to_string(),
        format!("peer-{}", id(r.member)),
        gen(Some(r.offer)),
        if r.leaving { "leaving" } else { "up" }.into(),
        r.after.to_string(),
        gen(r.saw),
        r.runs_for.to_string(),
        r.settle.to_string(),
        if r.fence_new { "fence" } else { "settle" }.into(),
        r.step.to_string(),
    ];
    let answer = vec![
        a.now.to_string(),
        a.epoch.to_string(),
        gen(Some(a.generation)),
        a.fence.to_string(),
    ];
    ("member_renew", keys(&MEMBERSHIP), args, answer)
}

/// A random claim by `who`.
fn claim_case(d: &mut Dice, store: &mut Store, now: Ms, server: u8, who: Caller) -> ScriptCase {
    let mode = [ClaimMode::Claim, ClaimMode::Reassert, ClaimMode::Vouch][d.below(3)];
    let c = Claiming {
        member: who.member,
        epoch: who.epoch,
        generation: who.generation,
        key: who.key,
        mode,
        window: 1000 * d.below(3) as Ms,
    };
    let answer = claim_words(&store.claim(&c, now, server, true));
    let mode = ["claim", "reassert", "vouch"][mode as usize];
    let args = vec![
        id(c.member),
        c.epoch.to_string(),
        gen(c.generation),
        "604800000".into(),
        mode.into(),
        c.window.to_string(),
    ];
    let claim = claim_key(c.key);
    let k5 = [
        &claim,
        MEMBERSHIP[0],
        MEMBERSHIP[2],
        MEMBERSHIP[4],
        MEMBERSHIP[3],
    ];
    ("own_claim", keys(&k5), args, answer)
}

/// A random release by `who` (mostly by the claim's holder, with its number).
fn release_case(d: &mut Dice, store: &mut Store, now: Ms, server: u8, who: Caller) -> ScriptCase {
    let heir = d.maybe(|d| (d.below(3) as u8, d.below(4) as u8));
    let ((member, epoch), n) = match store.claims[who.key].filter(|_| who.fits) {
        Some(c) => (c.holder.unwrap_or((who.member, who.epoch)), c.n),
        None => ((who.member, who.epoch), 1 + d.below(3) as u8),
    };
    let r = Releasing {
        member,
        epoch,
        generation: who.generation,
        key: who.key,
        heir,
        n,
        last_end: time(d, now),
    };
    let done = store.release(&r, now, server);
    let (h, he) = heir.map_or((String::new(), "0".into()), |(j, e)| (id(j), e.to_string()));
    let args = vec![
        id(member),
        epoch.to_string(),
        gen(r.generation),
        "604800000".into(),
        h,
        he,
        n.to_string(),
        "*".into(),
        last_end_words(r.last_end),
    ];
    let claim = claim_key(r.key);
    let k3 = [&claim, MEMBERSHIP[2], MEMBERSHIP[3]];
    (
        "own_release",
        keys(&k3),
        args,
        vec![u8::from(done).to_string()],
    )
}

/// A last end (Redis ms) as the facts' words the code writes (`ownership::Words`).
fn last_end_words(last_end: Ms) -> String {
    crate::fleet::ownership::Words {
        last_end: Some(last_end),
        ..Default::default()
    }
    .write()
}

/// `keys` as owned strings.
fn keys(keys: &[&str]) -> Vec<String> {
    keys.iter().map(|k| k.to_string()).collect()
}

/// A claim's answer as the script's words.
pub(super) fn claim_words(a: &ClaimReply) -> Vec<String> {
    let w = |s: &[&str]| s.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    match *a {
        ClaimReply::Taken(how, bound, n, pv, last_end) => {
            let how = match how {
                How::Claimed => "claimed",
                How::Handed => "handed",
                How::Reclaimed => "reclaimed",
                How::TakenOver => "taken_over",
            };
            let mut out = w(&["taken", how]);
            out.extend([bound.to_string(), n.to_string(), u8::from(pv).to_string()]);
            if let Some(e) = last_end {
                out.extend(["*".to_string(), last_end_words(e)]);
            }
            out
        }
        ClaimReply::Held(m, e, s) => {
            let state = ["up", "leaving", "left"][s as usize];
            vec![
                "held".into(),
                id(m),
                e.to_string(),
                format!("peer-{}", id(m)),
                state.into(),
            ]
        }
        ClaimReply::Lost => w(&["lost"]),
        ClaimReply::Stale => w(&["stale"]),
        ClaimReply::Unregistered => w(&["unregistered"]),
    }
}

/// Random stores and calls each run.
const CASES: usize = 40_000;

/// `docs/fleet-proof.md` gives the number of cases as the test runs them.
#[test]
fn the_number_of_cases_is_the_documented_one() {
    let phrase = format!(
        "runs {} random stores",
        crate::fleet::model::thousands(CASES)
    );
    crate::fleet::model::assert_proof_says(&phrase);
}

/// Random stores and calls: the rules and the scripts answer and store alike.
#[test]
fn the_specifications_store_decides_as_the_scripts_do() {
    let scripts = Scripts::new();
    let seed = super::super::walk_seed();
    let mut d = Dice(seed | 1);
    let mut answers = BTreeMap::new();
    for case in 0..CASES {
        let now = 10_000 + 500 * d.below(20) as Ms;
        let mut store = random_store(&mut d, now);
        let server = match store.server {
            Some(s) if d.below(4) > 0 => s,
            _ => d.below(2) as u8,
        };
        let mut lua = data(&store);
        let before = lua.clone();
        let (script, keys, args, expected) = random_call(&mut d, &mut store, now, server);
        let mut answer = scripts.run(script, &mut lua, now, &run_id(server), &keys, &args);
        if script == "member_renew" {
            answer.truncate(4);
        }
        let context = || format!("seed {seed} case {case}: {script} {args:?} on {before:?}");
        assert_eq!(answer, expected, "answers differ: {}", context());
        assert_eq!(lua, data(&store), "data sets differ: {}", context());
        let kind = match script {
            "own_claim" if expected[0] == "taken" => format!("claim taken {}", expected[1]),
            "own_claim" => format!("claim {}", expected[0]),
            "member_renew" => script.to_string(),
            _ => format!("{script} {}", expected[0]),
        };
        *answers.entry(kind).or_insert(0) += 1;
    }
    eprintln!("spec agrees with the scripts: seed {seed}, answers {answers:?}");
    // Every answer of every script was compared.
    let kinds = [
        "claim held",
        "claim lost",
        "claim stale",
        "claim unregistered",
        "claim taken claimed",
        "claim taken handed",
        "claim taken reclaimed",
        "claim taken taken_over",
        "member_renew",
        "member_leave 0",
        "member_leave 1",
        "own_release 0",
        "own_release 1",
    ];
    for kind in kinds {
        assert!(
            answers.contains_key(kind),
            "seed {seed}: no case answered {kind}"
        );
    }
}
