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
//! - The exhaustive searches have two members and one key ([`bounds`]), horizons of 2
//!   to 5 ticks. A takeover is acted on no earlier than lease + grace + hold ticks (4
//!   or more), so in the searches with faults (give-ups, restart, failover, letting go:
//!   horizons 2 and 3) no takeover is ever acted on: those faults are combined with
//!   the step the fence guards only in the random walks (three members and a joiner,
//!   40 ticks, 4,000 and 3,000 walks of up to 400 steps from two fixed seeds).
//! - Not modelled: ownership following traffic (`Held::Moving`), two calls for one
//!   key in flight at once, the facts handed over (hashed to a constant: no
//!   Crawl-delay is checked between two owners), the robots.txt fetch gate, exchanges
//!   that outlive a stopped process, per-member clocks (integer ticks, one clock, no
//!   drift or step).
//! - A member's check and its grant are one step; faults are bounded. A fingerprint
//!   collision could hide a state (odds of the order of states² / 2⁶⁴).
//!
//! [`Standing`]: crate::fleet::standing::Standing

mod alike;
mod fidelity;
mod redis;
mod world;

use std::collections::HashSet;

use redis::Scripts;
use world::{Action, Bounds, World};

/// The most states one search may visit (a bound on its memory).
const STATES_AT_MOST: usize = 4_000_000;

/// What an exhaustive search found.
struct Explored {
    /// Distinct states reached.
    states: usize,
    /// Steps taken (transitions).
    steps: usize,
}

/// Explores every state reachable within `bounds`: `Err` with the trace to the first
/// violation.
fn explore(bounds: Bounds) -> Result<Explored, String> {
    let scripts = Scripts::new();
    let start = World::new(bounds);
    let mut seen = HashSet::new();
    seen.insert(start.fingerprint());
    // Depth first: each frame a world, the actions still to try from it, and the action
    // that led to it (for the trace).
    let mut stack: Vec<(World, Vec<Action>, Option<Action>)> =
        vec![(start.clone(), start.actions(), None)];
    let mut steps = 0;
    while let Some((world, actions, _)) = stack.last_mut() {
        let Some(action) = actions.pop() else {
            stack.pop();
            continue;
        };
        let mut next = world.clone();
        steps += 1;
        if let Err(why) = next.apply(&action, &scripts) {
            return Err(trace(&stack, &action, &why) + &next.describe());
        }
        if seen.insert(next.fingerprint()) {
            if seen.len() > STATES_AT_MOST {
                if std::env::var("MODEL_DEBUG").is_ok() {
                    eprintln!("{:#?}", next);
                    eprintln!("depth {}", stack.len());
                }
                return Err(format!(
                    "more than {STATES_AT_MOST} states: bound the search"
                ));
            }
            let actions = next.actions();
            stack.push((next, actions, Some(action)));
        }
    }
    Ok(Explored {
        states: seen.len(),
        steps,
    })
}

/// Random walks through the world within `bounds` (`walks` of `steps` each, from
/// `seed`): each step one of the enabled actions, picked at random, the invariant checked
/// after every one. `Err` with the walk that broke it. Where a search cannot reach (more
/// members, every fault at once, longer times), walks go, as FoundationDB's simulation
/// does: no proof, many schedules.
fn simulate(bounds: Bounds, seed: u64, walks: usize, steps: usize) -> Result<usize, String> {
    let scripts = Scripts::new();
    let mut dice = seed | 1;
    let mut roll = |n: usize| {
        dice ^= dice << 13;
        dice ^= dice >> 7;
        dice ^= dice << 17;
        (dice % n as u64) as usize
    };
    let mut taken = 0;
    for walk in 0..walks {
        let mut world = World::new(bounds);
        let mut path = Vec::new();
        for _ in 0..steps {
            let actions = world.actions();
            if actions.is_empty() {
                break;
            }
            let action = actions[roll(actions.len())].clone();
            taken += 1;
            path.push((world.now, action.clone()));
            if let Err(why) = world.apply(&action, &scripts) {
                let mut out = format!("walk {walk} of seed {seed} broke the invariant:\n");
                for (now, action) in &path {
                    out.push_str(&format!("  t={now:>6}  {action:?}\n"));
                }
                return Err(format!("{out}=> {why}\n{}", world.describe()));
            }
        }
    }
    Ok(taken)
}

/// The steps from the start to `last`, and what broke.
fn trace(stack: &[(World, Vec<Action>, Option<Action>)], last: &Action, why: &str) -> String {
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

/// Runs one search, printing its size, and fails with the trace on a violation.
fn check(name: &str, bounds: Bounds) {
    let started = std::time::Instant::now();
    match explore(bounds) {
        Ok(Explored { states, steps }) => eprintln!(
            "model {name}: {states} states, {steps} steps in {:?}",
            started.elapsed()
        ),
        Err(trace) => panic!("model {name}: {trace}"),
    }
}

// Every interleaving within each bound (the figures `docs/fleet.md` gives are what
// these print with `--nocapture`).

#[test]
fn every_interleaving_of_two_members_renewing_and_claiming() {
    check(
        "base",
        Bounds {
            horizon: 4,
            ..bounds()
        },
    );
}

#[test]
fn every_interleaving_with_a_lease_of_one_tick() {
    check(
        "short lease",
        Bounds {
            horizon: 5,
            lease: 1,
            ..bounds()
        },
    );
}

#[test]
fn every_interleaving_of_releases_hand_overs_and_leaves() {
    check(
        "letting go",
        Bounds {
            horizon: 3,
            lettings_go: 1,
            ..bounds()
        },
    );
}

#[test]
fn every_interleaving_of_lost_and_late_answers() {
    check(
        "give-ups",
        Bounds {
            horizon: 2,
            give_ups: 1,
            ..bounds()
        },
    );
}

#[test]
fn every_interleaving_of_a_redis_restarting_empty_under_a_grace() {
    check(
        "restart",
        Bounds {
            horizon: 2,
            restarts: 1,
            grace: 1,
            new_data_set: "fence",
            ..bounds()
        },
    );
}

#[test]
fn every_interleaving_of_a_failover_to_a_lagging_replica() {
    check(
        "failover",
        Bounds {
            horizon: 2,
            failovers: 1,
            new_data_set: "fence",
            ..bounds()
        },
    );
}

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

#[test]
fn random_walks_through_every_fault_at_once() {
    let started = std::time::Instant::now();
    match simulate(every_fault(), 0x5eed, 4_000, 400) {
        Ok(steps) => eprintln!("model walks: {steps} steps in {:?}", started.elapsed()),
        Err(trace) => panic!("{trace}"),
    }
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
    match simulate(settle, 0xf1ee7, 3_000, 400) {
        Ok(steps) => eprintln!("model walks (settle): {steps} steps"),
        Err(trace) => panic!("{trace}"),
    }
}

/// By hand, for a longer look: `cargo test --release --lib fleet::model::deep --
/// --ignored --nocapture` (searches past the CI's bounds, then walks from seed
/// `WALK_SEED`).
#[test]
#[ignore]
fn deep() {
    check(
        "join and crash",
        Bounds {
            horizon: 2,
            joiners: 1,
            crashes: 1,
            ..bounds()
        },
    );
    check(
        "give-ups",
        Bounds {
            horizon: 3,
            give_ups: 1,
            ..bounds()
        },
    );
    let seed = std::env::var("WALK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    match simulate(every_fault(), seed, 200_000, 600) {
        Ok(steps) => eprintln!("walks: {steps} steps"),
        Err(trace) => panic!("{trace}"),
    }
}
