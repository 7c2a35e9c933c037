//! The ownership protocol as a specification in pure Rust, searched exhaustively where
//! the Lua-backed model (`model/mod.rs`) cannot reach: three members, two keys, every
//! fault class combined with a takeover acted on, clocks that drift and a Redis clock
//! that steps, and the Crawl-delay kept between successive owners.
//!
//! **The invariant, at the origin.** No exchange of a key starts before the key's last
//! exchange ended (an exchange lasts the longest hold), nor, when another member made
//! it, before its Crawl-delay has passed since (`world.rs`'s `start`).
//!
//! **What runs.** Redis' side is `store.rs`: the membership and ownership scripts' rules
//! over a small typed store, checked against the very Lua scripts on random stores
//! and calls (`agree.rs`; `model/fidelity.rs` checks those against a real
//! `redis-server`). The members' side is `member.rs`: `Standing`'s rules (checked against
//! `standing.rs` itself on random lives, `agree_standing.rs`, with claims' answers as
//! `ownership::answer`'s `ClaimAnswer::apply` acts on them), the pacer's next start,
//! the takeover's inherited gap, Redis' clock watched for steps (`redis_clock.rs`'s own
//! check and offsets). `world.rs` puts them together with true time, faults
//! and messages; `forget.rs` drops what no rule reads any more, `symmetry.rs` makes
//! states alike up to renaming members and keys one, `shift.rs` states alike but for
//! when they happen.
//!
//! **How.** A depth-first search over every state up to a horizon, each remembered by
//! the least 64-bit fingerprint over the renamings that order its members and keys by
//! what they are apart from names (`symmetry.rs`), every time written as an offset from
//! now (`shift.rs`), with the most time left it was seen with (a state seen again with
//! no more time left is not explored again); the invariant checked at every start; a
//! violation fails with its trace. Members renew once per tick (the health
//! loop's cadence: true time moves on only when every running member renewed this
//! tick); every other step may happen at any moment, in any order.
//!
//! **Faults** ([`Fault`]): crash, pause (with or without a turn taken and its head not
//! sent), lost and late answers (a call given up on, run later or never), a graceful
//! leave, a release or a hand-over (`Moving` too), Redis restarting empty, failing
//! over to a lagging replica, and its clock stepping forward by a lease and `after`.
//!
//! **Rules removed** ([`Safeguards`]): each test that turns one off expects a violation.
//!
//! **Every exchange.** A new owner's first exchange of a key may be its robots.txt
//! fetch (the copy it adopts gone stale): the fetch is an exchange at the origin like a
//! page, and keeps the inherited gap by its own rule (`member.rs`'s
//! `InheritedEnd::first_start`, [`Safeguards::fetch_gap`]); its end starts the delay of
//! the exchange after it, as any exchange's does.
//!
//! **Limits.** Whole ticks for every step but a clock's drift; one hold length and one
//! Crawl-delay; a member's own exchanges are spaced by its own clock (not checked at the
//! origin: its drift is its pacer's); facts of one robots.txt group; `own_record`
//! and routing (`own_look`) are not modelled. A fingerprint collision could hide a
//! state (odds of the order of states² / 2⁶⁴).

mod agree;
mod agree_standing;
mod forget;
mod member;
mod shift;
mod store;
mod symmetry;
mod world;

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use store::Ms;
use world::{Event, System};

/// The fault classes, as indexes of a world's budgets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// A member crashes.
    Crash,
    /// A member is paused (or armed to pause between its turn and its head).
    Pause,
    /// A call given up on (answer lost or late; a send held up on its way).
    GiveUp,
    /// A release, a hand-over or a graceful leave.
    LetGo,
    /// Redis restarts empty.
    Restart,
    /// Redis fails over to its replica.
    Failover,
    /// Redis' clock steps forward.
    ClockStep,
}

/// How many fault classes.
pub const FAULTS: usize = 7;

/// Every fault class, in the order of a world's budgets.
pub const EVERY_FAULT: [Fault; FAULTS] = [
    Fault::Crash,
    Fault::Pause,
    Fault::GiveUp,
    Fault::LetGo,
    Fault::Restart,
    Fault::Failover,
    Fault::ClockStep,
];

/// Rules a test may turn off, to show the search needs them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Safeguards {
    /// A new owner keeps the Crawl-delay from the last owner's end (a bound in the
    /// past, or the facts handed over).
    pub inherit_gap: bool,
    /// Its robots.txt fetch keeps it too, after a takeover from a vanished owner: the
    /// bound plus the delay (`Pacer::fetch_not_before`), not the bound alone.
    pub fetch_gap: bool,
    /// A renewal that saw Redis' clock step forward has Redis fence takeovers.
    pub step_fence: bool,
    /// A turn's head is sent only while its member still acts for the key.
    pub recheck_head: bool,
    /// A takeover its member never confirmed (its answer lost), claimed again by it,
    /// is provisional again and waits its window again (`own_claim.lua`).
    pub retake_window: bool,
}

/// Every rule in force.
pub const ALL_RULES: Safeguards = Safeguards {
    inherit_gap: true,
    fetch_gap: true,
    step_fence: true,
    recheck_head: true,
    retake_window: true,
};

/// What a search explores. Times in ticks.
#[derive(Clone, Copy, Debug)]
pub struct Scope {
    /// Members up at the start.
    pub members: usize,
    /// Members that join later.
    pub joiners: usize,
    /// Keys.
    pub keys: usize,
    /// The last tick.
    pub horizon: i64,
    /// `fleet.lease_seconds`.
    pub lease: i64,
    /// The outage grace.
    pub grace: i64,
    /// The longest exchange.
    pub hold: i64,
    /// The Crawl-delay.
    pub delay: i64,
    /// The takeover's confirmation window.
    pub window: i64,
    /// Clocks drift: member a's runs 5 % slow, b's 5 % fast.
    pub drift: bool,
    /// `fleet.new_data_set: fence`.
    pub new_data_set_fence: bool,
    /// The replica has caught up at each tick's start (it lags less than a tick);
    /// otherwise it may lag any number of writes.
    pub lag_under_a_tick: bool,
    /// Budgets, by [`Fault`].
    pub faults: [u8; FAULTS],
    /// The rules in force.
    pub rules: Safeguards,
    /// `forget.rs` forgets what no rule reads any more (off only in the test that
    /// compares searches with and without it).
    pub forgetting: bool,
}

impl Scope {
    /// The budget for `f`.
    pub fn budget(&self, f: Fault) -> u8 {
        self.faults[f as usize]
    }
}

/// The most states one search may visit (a bound on its memory).
const STATES_AT_MOST: usize = 20_000_000;

/// What a search found.
#[derive(Debug, Default)]
pub struct Searched {
    /// Distinct states (up to renaming).
    pub states: usize,
    /// Steps taken.
    pub steps: usize,
    /// The longest trace, in steps.
    pub depth: usize,
    /// Steps after a fault at which another member than the last one started an
    /// exchange of a key (a takeover or hand-over acted on).
    pub takeovers: usize,
}

/// The set of states seen hashes a fingerprint as itself: it is a hash already.
#[derive(Default)]
struct Fingerprint(u64);

impl Hasher for Fingerprint {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = x;
    }
}

/// One frame of the search: a world, the actions left to try, the action that led here.
type Branch = (System, Vec<Event>, Option<Event>);

/// The states seen: each fingerprint (up to renaming and to when, `shift.rs`) with the
/// most time left (ms) it was seen with.
type Seen = HashMap<u64, Ms, BuildHasherDefault<Fingerprint>>;

/// Is `world` new, or seen only with less time left? Then it is remembered so.
fn unseen(seen: &mut Seen, b: &Scope, world: &System, renamings: &[symmetry::Renaming]) -> bool {
    let left = b.horizon * world::TICK - world.now;
    let print = symmetry::canonical(&shift::relative(world), renamings);
    match seen.get_mut(&print) {
        Some(had) if *had >= left => false,
        Some(had) => {
            *had = left;
            true
        }
        None => {
            seen.insert(print, left);
            true
        }
    }
}

/// Explores every state reachable within `b`: `Err` with the trace to a violation.
pub fn explore(b: &Scope) -> Result<Searched, String> {
    explore_within(b, STATES_AT_MOST)
}

/// [`explore`], failing past `most` states.
fn explore_within(b: &Scope, most: usize) -> Result<Searched, String> {
    let start = System::new(b);
    let renamings = symmetry::renamings(b, &start);
    let mut seen = Seen::default();
    unseen(&mut seen, b, &start, &renamings);
    let mut stack: Vec<Branch> = vec![(start, start.actions(b), None)];
    let mut found = Searched::default();
    while let Some((world, actions, _)) = stack.last_mut() {
        let Some(action) = actions.pop() else {
            stack.pop();
            continue;
        };
        let mut next = *world;
        found.steps += 1;
        if let Err(why) = next.apply(b, &action) {
            return Err(trace(&stack, &action, &why) + &next.describe(b));
        }
        if taken_over(world, &next) {
            found.takeovers += 1;
        }
        if unseen(&mut seen, b, &next, &renamings) {
            if seen.len() > most {
                return Err(format!("more than {most} states: bound the search"));
            }
            stack.push((next, next.actions(b), Some(action)));
            found.depth = found.depth.max(stack.len() - 1);
        }
    }
    found.states = seen.len();
    Ok(found)
}

/// Every state reachable within `b`, each visited once (told apart by a 64-bit hash of
/// the whole state, not up to renaming or time: for small searches); a step that breaks
/// the invariant goes to `broke`. What `forget.rs`' and `shift.rs`' tests walk.
#[cfg(test)]
fn each_state(b: &Scope, mut visit: impl FnMut(&System), mut broke: impl FnMut(String)) {
    use std::hash::{DefaultHasher, Hash};
    let mut seen = std::collections::HashSet::new();
    let mut stack = vec![System::new(b)];
    while let Some(w) = stack.pop() {
        let mut h = DefaultHasher::new();
        w.hash(&mut h);
        if !seen.insert(h.finish()) {
            continue;
        }
        visit(&w);
        for step in w.actions(b) {
            let mut next = w;
            match next.apply(b, &step) {
                Ok(()) => stack.push(next),
                Err(why) => broke(why),
            }
        }
    }
}

/// Did some key's exchange pass to another member in this step, after a fault?
fn taken_over(before: &System, after: &System) -> bool {
    after.faults_spent()
        && before
            .last
            .iter()
            .zip(&after.last)
            .any(|(was, is)| matches!((was, is), (Some((_, a)), Some((_, b))) if a != b))
}

/// The steps from the start to `last`, and what broke.
fn trace(stack: &[Branch], last: &Event, why: &str) -> String {
    let mut out = String::from("the invariant broke:\n");
    for (world, _, action) in stack.iter().skip(1) {
        out.push_str(&format!("  t={:>5}  {action:?}\n", world.now));
    }
    out.push_str(&format!("  then     {last:?}\n=> {why}\n"));
    out
}

/// Budgets with one of each of `list`.
fn faults(list: &[Fault]) -> [u8; FAULTS] {
    let mut out = [0; FAULTS];
    for &f in list {
        out[f as usize] = 1;
    }
    out
}

/// The bounds every search starts from: two members, one key, eight ticks; a lease of
/// two ticks (members renew every tick), a hold of one, a Crawl-delay of two, a
/// confirmation window of two (two renewals), no grace; no fault.
fn base() -> Scope {
    Scope {
        members: 2,
        joiners: 0,
        keys: 1,
        horizon: 8,
        lease: 2,
        grace: 0,
        hold: 1,
        delay: 2,
        window: 2,
        drift: false,
        new_data_set_fence: false,
        lag_under_a_tick: false,
        faults: [0; FAULTS],
        rules: ALL_RULES,
        forgetting: true,
    }
}

/// The bounds of search `name`.
fn search(name: &str) -> Scope {
    let wide = Scope {
        members: 3,
        keys: 2,
        ..base()
    };
    let f = faults;
    match name {
        "crash" => Scope {
            faults: f(&[Fault::Crash]),
            ..wide
        },
        "joining" => Scope {
            joiners: 1,
            keys: 2,
            faults: f(&[Fault::Crash]),
            ..base()
        },
        "letting go" => Scope {
            faults: f(&[Fault::LetGo]),
            ..wide
        },
        "lost and late answers" => Scope {
            faults: f(&[Fault::GiveUp]),
            ..wide
        },
        "pause" => Scope {
            faults: f(&[Fault::Pause]),
            ..wide
        },
        "restart" => Scope {
            faults: f(&[Fault::Restart]),
            ..wide
        },
        "failover" => Scope {
            members: 3,
            faults: f(&[Fault::Failover]),
            ..base()
        },
        "failover, replica less than a tick behind" => Scope {
            lag_under_a_tick: true,
            faults: f(&[Fault::Failover]),
            ..wide
        },
        "failover, two keys" => Scope {
            keys: 2,
            faults: f(&[Fault::Failover]),
            ..base()
        },
        "clock step" => Scope {
            lease: 3,
            delay: 1,
            faults: f(&[Fault::ClockStep]),
            ..wide
        },
        "clock step and pause" => Scope {
            members: 3,
            lease: 3,
            delay: 1,
            faults: f(&[Fault::ClockStep, Fault::Pause]),
            ..base()
        },
        "clock step, pause, lost answer" => Scope {
            horizon: 6,
            delay: 1,
            faults: f(&[Fault::ClockStep, Fault::Pause, Fault::GiveUp]),
            ..base()
        },
        "drift" => Scope {
            drift: true,
            faults: f(&[Fault::Crash]),
            ..wide
        },
        other => panic!("no search called {other}"),
    }
}

/// One row of `docs/fleet-proof.md`'s table for the specification: bounds and findings.
fn row(name: &str, b: &Scope, found: &Searched) -> String {
    let names = [
        "crash",
        "pause",
        "lost or late answer",
        "letting go",
        "restart",
        "failover",
        "clock step",
    ];
    let mut faults: Vec<String> = b
        .faults
        .iter()
        .zip(names)
        .filter(|(n, _)| **n > 0)
        .map(|(n, what)| format!("{what} {n}"))
        .collect();
    if b.drift {
        faults.push("clocks drifting 5 %".into());
    }
    if b.lag_under_a_tick {
        faults.push("replica less than a tick behind".into());
    }
    let members = match b.joiners {
        0 => b.members.to_string(),
        n => format!("{} + {n} joining", b.members),
    };
    format!(
        "| {name} | {members} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
        b.keys,
        b.horizon,
        b.lease,
        b.hold,
        b.delay,
        b.window,
        faults.join(", "),
        super::thousands(found.states),
        found.depth,
        super::thousands(found.takeovers),
    )
}

/// Runs search `name`, printing its row and time: it must keep the invariant and act
/// on a takeover after its fault. Its row.
fn check(name: &str) -> String {
    let b = search(name);
    let started = std::time::Instant::now();
    let found = explore(&b).unwrap_or_else(|t| panic!("specification, {name}: {t}"));
    let row = row(name, &b, &found);
    eprintln!("spec {row} in {:.1?}", started.elapsed());
    assert!(
        found.takeovers > 0,
        "{name}: no takeover after the fault: {found:?}"
    );
    row
}

/// Fails unless `docs/fleet-proof.md` gives each of `rows` as it is.
fn documented(rows: &[String]) {
    let doc = super::proof_doc();
    let missing: Vec<&String> = rows
        .iter()
        .filter(|r| !doc.lines().any(|l| l == *r))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/fleet-proof.md's figures for the specification differ from what it found: {missing:#?}"
    );
}

/// Runs the searches `names`, each as [`check`] does, and their rows against the page.
fn check_all(names: &[&str]) {
    documented(&names.iter().map(|n| check(n)).collect::<Vec<_>>());
}

// The searches the suite runs: each fault class with a takeover acted on, with three
// members and two keys (a failover's replica less than a tick behind there; any lag with
// fewer members or keys). Five tests of under a minute to about two each on this host,
// so that two run at once.

#[test]
fn a_crash_a_member_joining_and_clocks_drifting() {
    check_all(&[
        "crash",
        "joining",
        "drift",
        "clock step, pause, lost answer",
    ]);
}

#[test]
fn lost_and_late_answers_a_pause_and_a_letting_go() {
    check_all(&["lost and late answers", "pause", "letting go"]);
}

#[test]
fn redis_restarting_empty() {
    check_all(&["restart"]);
}

#[test]
fn a_failover_with_three_members_and_two_keys() {
    check_all(&["failover, replica less than a tick behind"]);
}

#[test]
fn a_failover_and_redis_clock_stepping() {
    check_all(&[
        "failover",
        "failover, two keys",
        "clock step",
        "clock step and pause",
    ]);
}

/// Search `b`, a rule off, must break the invariant: the protocol needs `rule`.
fn needs(rule: &str, b: Scope) {
    let started = std::time::Instant::now();
    let trace = explore(&b).expect_err(&format!("the search passed without {rule}"));
    eprintln!("spec without {rule}: broken in {:.1?}", started.elapsed());
    assert!(trace.contains("starts an exchange"), "{trace}");
}

#[test]
fn without_the_inherited_gap_a_takeover_shortens_the_crawl_delay() {
    let b = Scope {
        horizon: 7,
        delay: 4,
        faults: faults(&[Fault::Crash]),
        rules: Safeguards {
            inherit_gap: false,
            ..ALL_RULES
        },
        ..base()
    };
    needs("the inherited gap", b);
}

#[test]
fn without_the_fetchs_own_gap_a_takeovers_robots_txt_fetch_shortens_the_crawl_delay() {
    let b = Scope {
        horizon: 7,
        delay: 4,
        faults: faults(&[Fault::Crash]),
        rules: Safeguards {
            fetch_gap: false,
            ..ALL_RULES
        },
        ..base()
    };
    needs("the fetch's own gap", b);
}

#[test]
fn without_the_clock_step_fence_a_step_of_redis_clock_makes_two_owners() {
    let b = search("clock step and pause");
    let rules = Safeguards {
        step_fence: false,
        ..ALL_RULES
    };
    needs("the clock-step fence", Scope { rules, ..b });
}

#[test]
fn without_the_check_before_the_head_a_resumed_member_sends_for_a_key_it_lost() {
    let b = Scope {
        faults: faults(&[Fault::Pause]),
        rules: Safeguards {
            recheck_head: false,
            ..ALL_RULES
        },
        ..base()
    };
    needs("the check before the head", b);
}

#[test]
fn without_the_retake_window_a_lost_takeover_answer_skips_its_confirmation() {
    let rules = Safeguards {
        retake_window: false,
        ..ALL_RULES
    };
    let b = search("clock step, pause, lost answer");
    needs("the retake window", Scope { rules, ..b });
}

/// Deeper searches by hand, bounds from the environment (a benchmark, not a test):
/// `M=3 K=2 H=9 CRASH=1 cargo test --release --lib fleet::model::spec::deeper --
/// --ignored --nocapture`. M members and J joining (3 at most in all), K keys, H
/// horizon, L lease, O hold, G grace, D Crawl-delay, W window (ticks), DRIFT=1, FENCE=1
/// (`new_data_set: fence`), LAG1=1 (a replica less than a tick behind);
/// budgets CRASH, PAUSE, GIVEUP, LETGO, RESTART, FAILOVER, STEP; a rule off with
/// R_GAP=0, R_FETCH=0, R_STEP=0, R_HEAD=0 or R_RETAKE=0; CAP the most states (20 million
/// unless set).
#[test]
#[ignore]
fn deeper() {
    let env = |k: &str, d: i64| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let mut b = base();
    b.members = env("M", 2) as usize;
    b.joiners = env("J", 0) as usize;
    b.keys = env("K", 1) as usize;
    b.horizon = env("H", b.horizon);
    b.lease = env("L", b.lease);
    b.hold = env("O", b.hold);
    b.grace = env("G", b.grace);
    b.delay = env("D", b.delay);
    b.window = env("W", b.window);
    b.drift = env("DRIFT", 0) == 1;
    b.new_data_set_fence = env("FENCE", 0) == 1;
    b.lag_under_a_tick = env("LAG1", 0) == 1;
    let budgets = [
        "CRASH", "PAUSE", "GIVEUP", "LETGO", "RESTART", "FAILOVER", "STEP",
    ];
    for (i, k) in budgets.iter().enumerate() {
        b.faults[i] = env(k, 0) as u8;
    }
    b.rules = Safeguards {
        inherit_gap: env("R_GAP", 1) == 1,
        fetch_gap: env("R_FETCH", 1) == 1,
        step_fence: env("R_STEP", 1) == 1,
        recheck_head: env("R_HEAD", 1) == 1,
        retake_window: env("R_RETAKE", 1) == 1,
    };
    let started = std::time::Instant::now();
    let most = env("CAP", STATES_AT_MOST as i64) as usize;
    match explore_within(&b, most) {
        Ok(found) => eprintln!(
            "spec {} in {:.1?}",
            row("deeper", &b, &found),
            started.elapsed()
        ),
        Err(trace) => panic!("{trace}"),
    }
}
