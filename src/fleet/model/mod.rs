//! The ownership protocol, checked over every interleaving the model can reach.
//!
//! **The invariant.** At no moment may two members act for one pacing key, and no
//! member may start an exchange while another member's may still be running (an
//! exchange lasts at most the longest hold). It is what the origin sees: one owner's
//! pacing at a time.
//!
//! **What runs.** The very Lua scripts Redis runs (`scripts/*.lua`, with their prelude)
//! in Lua 5.1 against the model's Redis (`redis.rs`), and the very [`Standing`] every
//! member decides with; the world around them (`world.rs`) is the model's: members that
//! renew, claim, write their claims again, grant turns, release, hand over, leave,
//! crash and join; messages that Redis runs late, whose answers are lost or come late
//! (a pause, a partition); Redis restarting empty and failing over to a replica that
//! lags.
//!
//! **How.** An exhaustive depth-first search over the world's states up to a horizon,
//! each state remembered by a 64-bit fingerprint (as TLC and stateright do), checking
//! the invariant in every state and at every grant. A violation fails with the trace
//! that led to it, step by step.
//!
//! **Limits** (what the searches below set, and what the model leaves out).
//! - The exhaustive searches the suite runs ([`search`]) have two members and one key,
//!   horizons of 3 to 5 ticks. In the crash and letting-go searches the lease and the
//!   hold are one tick, so that a takeover after a crash, and a hand-over, are acted on
//!   within the horizon (each test fails when its search reached none). The give-ups,
//!   restart and failover searches (horizon 2) act on no takeover: they run by hand
//!   (`deep`). Three members, two keys and each fault class with a takeover acted on
//!   are searched by the specification (`spec/`: the same rules in pure Rust, its
//!   store checked against these scripts);
//!   every fault at once over 40 ticks is reached only by random walks here, from a new
//!   seed each run (printed; `WALK_SEED` replays one), which fail when they acted on no
//!   takeover after a fault.
//! - One rule is removed by a test to show the model needs it: the takeover's wait for
//!   the last owner's `after` (`own_claim.lua`), with [`Scripts::mutated`].
//! - Not modelled here (the specification models the first four): ownership
//!   following traffic (`Held::Moving`), two calls for one key in flight at once, the
//!   facts handed over (hashed to a constant: no Crawl-delay is checked between two
//!   owners), per-member clocks (integer ticks, one clock, no drift or step); nor, in
//!   either, the robots.txt fetch gate.
//! - A member's check and its grant are one step; faults are bounded. A fingerprint
//!   collision could hide a state (odds of the order of states² / 2⁶⁴). Every figure
//!   `docs/fleet-proof.md` gives for a search is compared with what it found.
//!
//! [`Standing`]: crate::fleet::standing::Standing
//!
//! **Its other files:** `alike.rs` (when two states are alike: the fingerprint
//! remembered), `fidelity.rs` (the model's Redis against a real `redis-server`).

mod alike;
mod fidelity;
mod redis;
mod spec;
mod world;

use std::collections::HashSet;

use redis::{Mutation, Scripts};
use world::{Action, Bounds, World};

/// A small deterministic random source (xorshift): the walks', `fidelity.rs`' and the
/// specification's random cases.
struct Dice(u64);

impl Dice {
    /// A number below `n`.
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }

    /// One of `items`.
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }

    /// A coin.
    fn coin(&mut self) -> bool {
        self.below(2) == 0
    }

    /// `Some` of `f`'s value, or not.
    fn maybe<T>(&mut self, f: impl FnOnce(&mut Dice) -> T) -> Option<T> {
        self.coin().then(|| f(self))
    }
}

/// `docs/fleet-proof.md`, whose figures the tests compare with what they found.
fn proof_doc() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/fleet-proof.md"))
        .expect("docs/fleet-proof.md")
}

/// Fails unless `docs/fleet-proof.md` says `phrase` (line breaks and indentation as
/// spaces).
fn assert_proof_says(phrase: &str) {
    let squash = |t: &str| t.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        squash(&proof_doc()).contains(&squash(phrase)),
        "docs/fleet-proof.md does not say: {phrase}"
    );
}

/// The most states one search may visit (a bound on its memory).
const STATES_AT_MOST: usize = 4_000_000;

/// What an exhaustive search found.
#[derive(Debug, PartialEq, Eq)]
struct Explored {
    /// Distinct states reached.
    states: usize,
    /// Steps taken (transitions).
    steps: usize,
    /// The longest trace from the start, in steps.
    depth: usize,
    /// Steps after which another member than the last one acted for the key (a takeover
    /// or a hand-over acted on), taken after a fault was spent.
    takeovers: usize,
}

/// One frame of the depth-first search: a world, the actions still to try from it, and
/// the action that led to it (for the trace).
type Frame = (World, Vec<Action>, Option<Action>);

/// Explores every state reachable within `bounds`, running `scripts`: `Err` with the
/// trace to the first violation.
fn explore(bounds: Bounds, scripts: &Scripts) -> Result<Explored, String> {
    let start = World::new(bounds);
    let mut seen = HashSet::new();
    seen.insert(start.fingerprint());
    let mut stack: Vec<Frame> = vec![(start.clone(), start.actions(), None)];
    let mut found = Explored {
        states: 1,
        steps: 0,
        depth: 0,
        takeovers: 0,
    };
    while let Some((world, actions, _)) = stack.last_mut() {
        let Some(action) = actions.pop() else {
            stack.pop();
            continue;
        };
        let mut next = world.clone();
        found.steps += 1;
        if let Err(why) = next.apply(&action, scripts) {
            return Err(trace(&stack, &action, &why) + &next.describe());
        }
        if taken_over(world, &next) {
            found.takeovers += 1;
        }
        if seen.insert(next.fingerprint()) {
            if seen.len() > STATES_AT_MOST {
                return Err(format!(
                    "more than {STATES_AT_MOST} states: bound the search"
                ));
            }
            let actions = next.actions();
            stack.push((next, actions, Some(action)));
            found.depth = found.depth.max(stack.len() - 1);
        }
    }
    found.states = seen.len();
    Ok(found)
}

/// Did the step from `before` to `after` have another member than the last one act for
/// the key, after a fault was spent?
fn taken_over(before: &World, after: &World) -> bool {
    let (was, is) = (before.last_actor(), after.last_actor());
    was.is_some() && is != was && after.faults_spent()
}

/// Random walks through the world within `bounds` (`walks` of `steps` each, from
/// `seed`): each step one of the enabled actions, picked at random, the invariant checked
/// after every one. The steps taken and the takeovers after a fault; `Err` with the walk
/// that broke the invariant. Where a search cannot reach (more members, every fault at
/// once, longer times), walks go, as FoundationDB's simulation does: no proof, many
/// schedules.
fn simulate(
    bounds: Bounds,
    seed: u64,
    walks: usize,
    steps: usize,
) -> Result<(usize, usize), String> {
    let scripts = Scripts::new();
    let mut dice = Dice(seed | 1);
    let (mut taken, mut takeovers) = (0, 0);
    for walk in 0..walks {
        let mut world = World::new(bounds);
        let mut path = Vec::new();
        for _ in 0..steps {
            let actions = world.actions();
            if actions.is_empty() {
                break;
            }
            let action = actions[dice.below(actions.len())].clone();
            taken += 1;
            path.push((world.now, action.clone()));
            let before = world.clone();
            if let Err(why) = world.apply(&action, &scripts) {
                let mut out = format!("walk {walk} of seed {seed} broke the invariant:\n");
                for (now, action) in &path {
                    out.push_str(&format!("  t={now:>6}  {action:?}\n"));
                }
                return Err(format!("{out}=> {why}\n{}", world.describe()));
            }
            takeovers += usize::from(taken_over(&before, &world));
        }
    }
    Ok((taken, takeovers))
}

/// The steps from the start to `last`, and what broke.
fn trace(stack: &[Frame], last: &Action, why: &str) -> String {
    let mut out = String::from("the ownership invariant broke:\n");
    for (world, _, action) in stack.iter().skip(1) {
        out.push_str(&format!("  t={:>5}  {action:?}\n", world.now));
    }
    out.push_str(&format!("  then     {last:?}\n=> {why}\n"));
    out
}

/// The bounds every search below starts from: two members (one key), a lease of two
/// ticks, a hold of two, no grace, no fault; each search sets its horizon.
fn bounds() -> Bounds {
    Bounds {
        members: 2,
        joiners: 0,
        horizon: 0,
        lease: 2,
        grace: 0,
        hold: 2,
        restarts: 0,
        failovers: 0,
        crashes: 0,
        give_ups: 0,
        lettings_go: 0,
        new_data_set: "settle",
    }
}

/// The exhaustive searches the suite runs, by name (each test below runs one; the
/// figures `docs/fleet-proof.md` gives are what they print, and each test compares them).
fn search(name: &str) -> Bounds {
    match name {
        "base" => Bounds {
            horizon: 4,
            ..bounds()
        },
        "crash" => Bounds {
            horizon: 5,
            lease: 1,
            hold: 1,
            crashes: 1,
            ..bounds()
        },
        "letting go" => Bounds {
            horizon: 3,
            lease: 1,
            hold: 1,
            lettings_go: 1,
            ..bounds()
        },
        "give-ups" => Bounds {
            horizon: 2,
            give_ups: 1,
            ..bounds()
        },
        "restart" => Bounds {
            horizon: 2,
            restarts: 1,
            grace: 1,
            new_data_set: "fence",
            ..bounds()
        },
        "failover" => Bounds {
            horizon: 2,
            failovers: 1,
            new_data_set: "fence",
            ..bounds()
        },
        other => panic!("no search called {other}"),
    }
}

/// One row of the figures' table in `docs/fleet-proof.md`: the search's name, its
/// bounds and what it found (every column but the time, which is this host's).
fn row(name: &str, b: &Bounds, found: &Explored) -> String {
    let faults = [
        ("crashes", b.crashes),
        ("give-ups", b.give_ups),
        ("restarts", b.restarts),
        ("failovers", b.failovers),
        ("lettings go", b.lettings_go),
    ]
    .iter()
    .filter(|(_, n)| *n > 0)
    .map(|(what, n)| format!("{what} {n}"))
    .collect::<Vec<_>>()
    .join(", ");
    format!(
        "| {name} | {} | 1 | {} | {} | {} | {} | {} | {} | {} | {} |",
        b.members,
        b.horizon,
        b.lease,
        b.hold,
        b.grace,
        if faults.is_empty() { "none" } else { &faults },
        thousands(found.states),
        found.depth,
        thousands(found.takeovers),
    )
}

/// `n` with commas between thousands.
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Runs the search `name`, printing its bounds and what it found, and fails with the
/// trace on a violation, or when `docs/fleet-proof.md` gives other figures for it.
fn check(name: &str) -> Explored {
    let bounds = search(name);
    let started = std::time::Instant::now();
    let found = explore(bounds, &Scripts::new()).unwrap_or_else(|t| panic!("model {name}: {t}"));
    let row = row(name, &bounds, &found);
    eprintln!("model {row} in {:.0?}", started.elapsed());
    let doc = proof_doc();
    assert!(
        doc.lines().any(|line| line == row),
        "docs/fleet-proof.md's figures for the search {name} are not what it found: {row}"
    );
    found
}

// Every interleaving within each bound.

#[test]
fn every_interleaving_of_two_members_renewing_and_claiming() {
    check("base");
}

#[test]
fn every_interleaving_of_an_owner_crashing_and_its_key_taken_over() {
    let found = check("crash");
    assert!(
        found.takeovers > 0,
        "the search reached no takeover: {found:?}"
    );
}

#[test]
fn every_interleaving_of_releases_hand_overs_and_leaves() {
    let found = check("letting go");
    assert!(
        found.takeovers > 0,
        "the search reached no hand-over: {found:?}"
    );
}

/// Searches of two ticks that act on no takeover, by hand (in `deep`): the
/// specification searches their fault classes with takeovers acted on.
const BY_HAND: [&str; 3] = ["give-ups", "restart", "failover"];

/// Bounds where an owner's last exchange outlasts its lease by more than a tick: a
/// lease of one tick, a grace of one, a hold of two, a crash, four ticks.
fn last_exchange_outlasts_lease() -> Bounds {
    Bounds {
        horizon: 4,
        lease: 1,
        hold: 2,
        grace: 1,
        crashes: 1,
        ..bounds()
    }
}

/// Without the wait for the last owner's exchanges (`after`: its grace and longest
/// hold past its lease), a takeover is acted on while they may still run: the search
/// must find it (the same search with the rule passes: `deep`).
#[test]
fn a_takeover_that_does_not_wait_for_the_last_exchange_breaks_the_model() {
    let rule: Mutation = ("own_claim", "h.expires + h.after", "h.expires");
    let outcome = explore(
        last_exchange_outlasts_lease(),
        &Scripts::mutated(Some(rule)),
    );
    let trace = outcome.expect_err("the search passed without the takeover's wait");
    assert!(trace.contains("may still run"), "{trace}");
}

/// The walks through every fault at once, and through a new fleet settling.
const EVERY_FAULT_WALKS: usize = 4_000;

/// See [`EVERY_FAULT_WALKS`].
const SETTLE_WALKS: usize = 3_000;

/// The most steps of one walk.
const STEPS: usize = 400;

/// Three members and a fourth joining, every fault at once, forty ticks: random walks.
fn every_fault() -> Bounds {
    Bounds {
        members: 3,
        joiners: 1,
        horizon: 40,
        lease: 2,
        grace: 1,
        hold: 1,
        restarts: 1,
        failovers: 1,
        crashes: 1,
        give_ups: 3,
        lettings_go: 2,
        new_data_set: "fence",
    }
}

/// The walks' seed: `WALK_SEED` when set (to replay one), else a new one each run.
fn walk_seed() -> u64 {
    std::env::var("WALK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
            now.map_or(1, |d| d.as_nanos() as u64)
        })
}

/// Runs `walks` random walks of up to 400 steps within `bounds` from a fresh seed,
/// printing it: the walks must keep the invariant and act on a takeover after a fault.
fn walk(name: &str, bounds: Bounds, walks: usize) {
    let seed = walk_seed();
    let started = std::time::Instant::now();
    match simulate(bounds, seed, walks, STEPS) {
        Ok((steps, takeovers)) => {
            eprintln!(
                "model walks ({name}): seed {seed}, {walks} walks, {steps} steps, \
                 {takeovers} takeovers after a fault, in {:.0?}",
                started.elapsed()
            );
            assert!(takeovers > 0, "seed {seed}: the walks acted on no takeover");
        }
        Err(trace) => panic!("{trace}"),
    }
}

#[test]
fn random_walks_through_every_fault_at_once() {
    walk("every fault", every_fault(), EVERY_FAULT_WALKS);
}

/// `docs/fleet-proof.md` gives the walks' bounds as the tests below set them.
#[test]
fn the_walks_bounds_are_the_documented_ones() {
    let b = every_fault();
    let words = ["no", "one", "two", "three", "four"];
    let phrase = format!(
        "{} members, a {} joining and every fault at once over {} ticks ({} walks of up to {STEPS} steps; {} for a new fleet settling)",
        words[b.members],
        ["", "second", "third", "fourth"][b.members + b.joiners - 1],
        b.horizon,
        thousands(EVERY_FAULT_WALKS),
        thousands(SETTLE_WALKS),
    );
    assert_proof_says(&phrase);
}

/// A new fleet (`fleet.new_data_set: settle`): members joining, crashing, leaving,
/// losing answers, with no data set lost: random walks.
#[test]
fn random_walks_through_a_new_fleet_settling() {
    let settle = Bounds {
        restarts: 0,
        failovers: 0,
        new_data_set: "settle",
        ..every_fault()
    };
    walk("settle", settle, SETTLE_WALKS);
}

/// By hand, for a longer look: `cargo test --release --lib fleet::model::deep --
/// --ignored --nocapture` (the searches in `BY_HAND`; the search the rule-removal test
/// breaks, with the rule; then 200,000 walks from `WALK_SEED` or a fresh seed).
#[test]
#[ignore]
fn deep() {
    for name in BY_HAND {
        let started = std::time::Instant::now();
        let b = search(name);
        let found = explore(b, &Scripts::new()).unwrap_or_else(|t| panic!("model {name}: {t}"));
        eprintln!(
            "model {} in {:.0?}",
            row(name, &b, &found),
            started.elapsed()
        );
    }
    let started = std::time::Instant::now();
    match explore(last_exchange_outlasts_lease(), &Scripts::new()) {
        Ok(found) => eprintln!("deep: {found:?} in {:.0?}", started.elapsed()),
        Err(trace) => panic!("{trace}"),
    }
    walk("deep", every_fault(), 200_000);
}
