//! The model's world: Redis (a data set, a lagging replica, a server that can restart
//! empty or fail over), the members (each a [`Standing`] with one renewal and one
//! ownership call in flight at most), the messages between them, and a clock. Every
//! step is one [`Action`]; [`World::actions`] lists those enabled, [`World::apply`]
//! takes one and checks the invariant.
//!
//! **What is abstracted.** One pacing key. Time in whole ticks of [`TICK`] ms, every
//! clock the same (no drift, no skew): a member's pause is a stretch in which it takes
//! no step. A member that may act for the key does, at every moment it may (the worst
//! case for the invariant): each such moment starts an exchange lasting the longest it
//! can, `hold`. A release first stops acting for the key, then is sent once the
//! member's own exchanges are over, as the code's leave and idle release do. A renewal's
//! generation offer is unique per server incarnation. Replication is asynchronous: the
//! replica takes the master's data set whenever it catches up, and a failover promotes
//! it as it is. Faults are budgets, zero unless a search gives some.
//!
//! **Its other files:** `calls.rs` (the calls members send, built as the code builds
//! them).

use std::rc::Rc;
use std::time::Duration;

mod calls;

use super::redis::{Data, Scripts};
// The membership's keys, as `membership` names them (a renewal's, in its order).
use crate::fleet::membership::RENEWAL_KEYS as MEMBERSHIP;
use crate::fleet::ownership::ClaimAnswer;
use crate::fleet::standing::{Held, Ms, Reassert, Standing, Taking};

/// One tick of the model's clock, in ms.
pub const TICK: Ms = 1000;

/// The one pacing key.
pub const KEY: &str = "k";

/// The claim's key in Redis, as `ownership` names it.
const CLAIM: &str = "{robotsgate}:own:k";

/// What a search explores: sizes in members and ticks, and a budget per fault.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    /// Members up at the start.
    pub members: usize,
    /// Members that may join later.
    pub joiners: usize,
    /// Ticks the clock may reach (0: no end; states alike are explored once).
    pub horizon: Ms,
    /// `fleet.lease_seconds`, in ticks.
    pub lease: Ms,
    /// The outage grace, in ticks.
    pub grace: Ms,
    /// The longest hold of a turn, in ticks.
    pub hold: Ms,
    /// Restarts that lose the data set.
    pub restarts: u8,
    /// Failovers to the replica.
    pub failovers: u8,
    /// Members that may crash.
    pub crashes: u8,
    /// Calls a member may give up on (a lost message, a timeout).
    pub give_ups: u8,
    /// Releases (idle, to an heir) and graceful leaves, in all.
    pub lettings_go: u8,
    /// `fleet.new_data_set`: `settle` or `fence`.
    pub new_data_set: &'static str,
}

/// Where a member is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Life {
    /// Not started yet (joins later).
    Waiting,
    /// Running.
    Up,
    /// Stopped without a word.
    Crashed,
    /// Left gracefully (deregistered).
    Left,
}

/// What a call was for, to act on its answer.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Awaits {
    /// A renewal sent at this time.
    Renew(Ms),
    /// A claim (or, with a mode, a reassert) sent in this epoch and generation.
    Claim(u64, String, Option<Reassert>),
    /// A release.
    Release,
    /// The deregistration.
    Leave,
}

/// A script call on its way.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Message {
    /// The script.
    pub script: &'static str,
    /// Its keys.
    pub keys: Vec<String>,
    /// Its arguments.
    pub args: Vec<String>,
    /// What it was for.
    pub purpose: Awaits,
    /// Its answer, once Redis ran it (a renewal's: its epoch and generation only).
    pub answer: Option<Vec<String>>,
}

/// One member.
#[derive(Clone, Debug)]
pub struct ModelMember {
    /// Its id.
    pub id: String,
    /// Where it is in its life.
    pub life: Life,
    /// Its standing: the code's own type.
    pub standing: Standing,
    /// Its renewal in flight.
    pub renewal: Option<Message>,
    /// Its ownership call in flight.
    pub call: Option<Message>,
    /// When its last exchange started.
    pub granted: Option<Ms>,
    /// The heir of the release it prepares (`Some("")`: none), once it stopped acting
    /// for the key to release it.
    pub releasing_to: Option<String>,
}

/// The world. A member's request reaches Redis and runs at once (a request held up on
/// its way is one the member sent later, or an orphan); its answer comes whenever the
/// member takes it, or never.
#[derive(Clone, Debug)]
pub struct World {
    /// Its bounds.
    pub bounds: Bounds,
    /// Now, in ms.
    pub now: Ms,
    /// The master's data set (shared between worlds until one writes it).
    pub data: Rc<Data>,
    /// The replica's, as of its last catch-up.
    pub replica: Rc<Data>,
    /// The server's incarnation (a restart or a failover makes a new one).
    pub server: u32,
    /// Faults so far: restarts, failovers, crashes, give-ups, lettings go.
    pub spent: [u8; 5],
    /// The members.
    pub nodes: Vec<ModelMember>,
    /// A call a member gave up on that Redis may still run (its answer goes nowhere).
    pub orphan: Option<Message>,
}

/// One step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// The clock moves one tick.
    Tick,
    /// Member `i` starts.
    Join(usize),
    /// Member `i` sends its renewal.
    Renew(usize),
    /// Member `i` claims the key.
    Claim(usize),
    /// Member `i` writes its claim again.
    Reassert(usize),
    /// Member `i` stops acting for the key to release it (to heir `Some(j)`).
    LetGo(usize, Option<usize>),
    /// Member `i` sends the release it prepared.
    Release(usize),
    /// Member `i` begins to leave.
    BeginLeave(usize),
    /// Member `i` deregisters.
    Deregister(usize),
    /// Member `i` crashes.
    Crash(usize),
    /// Redis runs the orphan.
    RunOrphan,
    /// Member `i` receives its renewal's (`true`) or call's answer.
    Deliver(usize, bool),
    /// Member `i`'s renewal's (`true`) or call's answer is lost: it gives up on it.
    GiveUp(usize, bool),
    /// Member `i`'s next send (the step) is held up on its way: the member gives up on
    /// it, and Redis may run it later (an orphan).
    Strand(usize, Box<Action>),
    /// The replica catches up.
    Sync,
    /// Redis restarts with an empty data set.
    Restart,
    /// The replica is promoted.
    Failover,
}

impl Action {
    /// Does this step send a request to Redis?
    fn sends(&self) -> bool {
        matches!(
            self,
            Action::Renew(_)
                | Action::Claim(_)
                | Action::Reassert(_)
                | Action::Release(_)
                | Action::Deregister(_)
        )
    }
}

/// Indexes of [`World::spent`].
const RESTARTS: usize = 0;
/// See [`RESTARTS`].
const FAILOVERS: usize = 1;
/// See [`RESTARTS`].
const CRASHES: usize = 2;
/// See [`RESTARTS`].
const GIVE_UPS: usize = 3;
/// See [`RESTARTS`].
const LETTINGS_GO: usize = 4;

impl World {
    /// The start: `bounds.members` members up (not yet registered), the rest waiting.
    pub fn new(bounds: Bounds) -> World {
        let tick = |t: Ms| Duration::from_millis(u64::try_from(t * TICK).unwrap_or(0));
        let nodes = (0..bounds.members + bounds.joiners)
            .map(|i| ModelMember {
                id: char::from(b'a' + i as u8).to_string(),
                life: if i < bounds.members {
                    Life::Up
                } else {
                    Life::Waiting
                },
                standing: Standing::new(tick(bounds.lease), tick(bounds.grace)),
                renewal: None,
                call: None,
                granted: None,
                releasing_to: None,
            })
            .collect();
        World {
            bounds,
            now: 0,
            data: Rc::default(),
            replica: Rc::default(),
            server: 0,
            spent: [0; 5],
            nodes,
            orphan: None,
        }
    }

    /// A fingerprint of the state: two worlds alike (`alike.rs`) have the same.
    pub fn fingerprint(&self) -> u64 {
        super::alike::fingerprint(self)
    }

    /// The state, briefly: Redis' data set and each member's standing.
    pub fn describe(&self) -> String {
        let mut out = format!("at {} (server {}):\n", self.now, self.server);
        for (key, value) in self.data.iter() {
            out.push_str(&format!("  {key} = {value:?}\n"));
        }
        for node in &self.nodes {
            let s = &node.standing;
            out.push_str(&format!(
                "  {} {:?}: epoch {} {} valid until {:?}, holds {:?}, granted {:?}\n",
                node.id,
                node.life,
                s.epoch(),
                s.generation(),
                s.valid_until(),
                s.holding(KEY),
                node.granted
            ));
        }
        out
    }

    /// The member whose exchange started last, if any.
    pub fn last_actor(&self) -> Option<usize> {
        (0..self.nodes.len())
            .filter(|&i| self.nodes[i].granted.is_some())
            .max_by_key(|&i| self.nodes[i].granted)
    }

    /// Has any fault been spent?
    pub fn faults_spent(&self) -> bool {
        self.spent.iter().any(|&n| n > 0)
    }

    /// How far back any rule looks, in ms: a lease, its grace and a hold.
    pub fn reach(&self) -> Ms {
        let b = self.bounds;
        (b.lease + b.grace + b.hold) * TICK
    }

    /// Is there budget left for fault `which`?
    fn may(&self, which: usize) -> bool {
        let b = self.bounds;
        let budget = [
            b.restarts,
            b.failovers,
            b.crashes,
            b.give_ups,
            b.lettings_go,
        ];
        self.spent[which] < budget[which]
    }

    /// Every step enabled now.
    pub fn actions(&self) -> Vec<Action> {
        let mut out = Vec::new();
        if self.bounds.horizon == 0 || self.now < self.bounds.horizon * TICK {
            out.push(Action::Tick);
        }
        for i in 0..self.nodes.len() {
            self.member_actions(i, &mut out);
            self.message_actions(i, &mut out);
        }
        if self.orphan.is_some() {
            out.push(Action::RunOrphan);
        }
        // Rc's equality of an `Eq` value is a pointer check first: a replica just synced
        // costs nothing to compare.
        if self.may(FAILOVERS) && self.replica != self.data {
            out.push(Action::Sync);
            out.push(Action::Failover);
        }
        if self.may(RESTARTS) {
            out.push(Action::Restart);
        }
        out
    }

    /// What member `i` may do with its answers.
    fn message_actions(&self, i: usize, out: &mut Vec<Action>) {
        let node = &self.nodes[i];
        for (renewal, message) in [(true, &node.renewal), (false, &node.call)] {
            if message.is_none() || node.life != Life::Up {
                continue;
            }
            out.push(Action::Deliver(i, renewal));
            if self.may(GIVE_UPS) {
                out.push(Action::GiveUp(i, renewal));
            }
        }
    }

    /// The steps member `i` may take, each send also held up on its way while the
    /// budget allows.
    fn member_actions(&self, i: usize, out: &mut Vec<Action>) {
        let start = out.len();
        self.own_actions(i, out);
        if self.may(GIVE_UPS) && self.orphan.is_none() {
            let sends: Vec<Action> = out[start..].iter().filter(|a| a.sends()).cloned().collect();
            out.extend(sends.into_iter().map(|a| Action::Strand(i, Box::new(a))));
        }
    }

    /// The steps member `i` may take of its own.
    fn own_actions(&self, i: usize, out: &mut Vec<Action>) {
        let node = &self.nodes[i];
        match node.life {
            Life::Waiting => return out.push(Action::Join(i)),
            Life::Up => {}
            Life::Crashed | Life::Left => return,
        }
        let (s, now) = (&node.standing, self.now);
        if node.renewal.is_none() {
            out.push(Action::Renew(i));
        }
        if self.may(CRASHES) {
            out.push(Action::Crash(i));
        }
        if !s.leaving() && self.may(LETTINGS_GO) {
            out.push(Action::BeginLeave(i));
        }
        if node.call.is_some() {
            return;
        }
        let holding = s.holding(KEY);
        let confirmed = holding
            .is_some_and(|h| (h.epoch, h.generation.as_str()) == (s.epoch(), s.generation()));
        match holding {
            None if s.leaving() => out.push(Action::Deregister(i)),
            None if s.may_own(now) => out.push(Action::Claim(i)),
            None => {}
            Some(h) if h.held == Held::Releasing && node.releasing_to.is_some() => {
                let hold = self.bounds.hold * TICK;
                if node.granted.is_none_or(|g| g + hold <= now) {
                    out.push(Action::Release(i));
                }
            }
            Some(_) if !s.unconfirmed(now).is_empty() && s.may_own(now) => {
                out.push(Action::Reassert(i));
            }
            Some(h) if h.held == Held::In && confirmed && !h.provisional => {
                if s.leaving() || self.may(LETTINGS_GO) {
                    out.push(Action::LetGo(i, None));
                }
                if !s.leaving() && self.may(LETTINGS_GO) {
                    let heirs = (0..self.nodes.len()).filter(|&j| j != i);
                    out.extend(heirs.map(|j| Action::LetGo(i, Some(j))));
                }
            }
            Some(_) => {}
        }
    }

    /// Takes `action`, then lets every member that may act for the key act: `Err` with
    /// what broke when the invariant does.
    pub fn apply(&mut self, action: &Action, scripts: &Scripts) -> Result<(), String> {
        if action.sends() {
            self.send(action, scripts, true);
            return self.act();
        }
        match *action {
            Action::Tick => self.now += TICK,
            Action::Join(i) => self.nodes[i].life = Life::Up,
            Action::LetGo(i, heir) => self.let_go(i, heir),
            Action::BeginLeave(i) => {
                self.spent[LETTINGS_GO] += 1;
                self.nodes[i].standing.leave();
            }
            Action::Crash(i) => {
                self.nodes[i].life = Life::Crashed;
                self.spent[CRASHES] += 1;
            }
            Action::Strand(i, ref send) => {
                self.spent[GIVE_UPS] += 1;
                self.send(send, scripts, false);
                let renewal = matches!(**send, Action::Renew(_));
                self.give_up(i, renewal);
            }
            Action::RunOrphan => {
                if let Some(mut message) = self.orphan.take() {
                    self.execute(&mut message, scripts);
                }
            }
            Action::Deliver(i, renewal) => self.deliver(i, renewal),
            Action::GiveUp(i, renewal) => {
                self.spent[GIVE_UPS] += 1;
                self.give_up(i, renewal);
            }
            Action::Sync => self.replica = self.data.clone(),
            Action::Restart => {
                self.data = Rc::default();
                self.replica = Rc::default();
                self.server += 1;
                self.spent[RESTARTS] += 1;
            }
            Action::Failover => {
                self.data = self.replica.clone();
                self.server += 1;
                self.spent[FAILOVERS] += 1;
            }
            // The sends, taken above.
            Action::Renew(_)
            | Action::Claim(_)
            | Action::Reassert(_)
            | Action::Release(_)
            | Action::Deregister(_) => {}
        }
        self.act()
    }

    /// Every member that may act for the key now does, starting an exchange: no other
    /// member's exchange may still be running then.
    fn act(&mut self) -> Result<(), String> {
        let (now, hold) = (self.now, self.bounds.hold * TICK);
        let acting: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| {
                let node = &self.nodes[i];
                node.life == Life::Up && node.standing.acts_for(KEY, now)
            })
            .collect();
        for &i in &acting {
            for (j, other) in self.nodes.iter().enumerate() {
                if j != i && other.granted.is_some_and(|g| g + hold > now) {
                    return Err(format!(
                        "{} acts for the key at {now} while {}'s exchange, started at {:?}, \
                         may still run",
                        self.nodes[i].id,
                        other.id,
                        other.granted.unwrap_or_default()
                    ));
                }
            }
        }
        for i in acting {
            self.nodes[i].granted = Some(now);
        }
        Ok(())
    }

    /// Member `i`'s renewal or call slot.
    fn slot(&mut self, i: usize, renewal: bool) -> &mut Option<Message> {
        let node = &mut self.nodes[i];
        if renewal {
            &mut node.renewal
        } else {
            &mut node.call
        }
    }

    /// Redis runs member `i`'s renewal or call.
    fn run(&mut self, i: usize, renewal: bool, scripts: &Scripts) {
        if let Some(mut message) = self.slot(i, renewal).take() {
            self.execute(&mut message, scripts);
            *self.slot(i, renewal) = Some(message);
        }
    }

    /// Runs `message`'s script now, keeping its answer in it (a renewal's: its epoch and
    /// generation, all a member reads of it here).
    fn execute(&mut self, message: &mut Message, scripts: &Scripts) {
        let mut args = message.args.clone();
        if message.script == "member_renew" {
            args[4] = format!("g{}", self.server);
        }
        let run_id = format!("server{}", self.server);
        let keys = &message.keys;
        let mut answer = scripts.run(
            message.script,
            Rc::make_mut(&mut self.data),
            self.now,
            &run_id,
            keys,
            &args,
        );
        if message.script == "member_renew" {
            answer = answer.get(1..3).unwrap_or_default().to_vec();
        }
        message.answer = Some(answer);
    }

    /// Member `i` gives up on its renewal or call: Redis may still run it.
    fn give_up(&mut self, i: usize, renewal: bool) {
        let Some(message) = self.slot(i, renewal).take() else {
            return;
        };
        if message.purpose == Awaits::Release {
            let node = &mut self.nodes[i];
            let heir = message.args.get(4).cloned().unwrap_or_default();
            if node.standing.leaving() && heir.is_empty() {
                // A leave's release is sent again, the key still held as releasing,
                // while Redis may still run the one given up on (`letting_go.rs`).
                node.releasing_to = Some(heir);
            } else {
                // Any other release lets the key go whether Redis answered or not.
                node.standing.drop_key(KEY);
            }
        }
        if message.answer.is_none() {
            self.orphan = Some(message);
        }
    }

    /// Member `i` receives an answer and acts on it as the code does.
    fn deliver(&mut self, i: usize, renewal: bool) {
        let now = self.now;
        let Some(message) = self.slot(i, renewal).take() else {
            return;
        };
        let answer = message.answer.unwrap_or_default();
        let node = &mut self.nodes[i];
        if node.life != Life::Up {
            return;
        }
        match message.purpose {
            Awaits::Renew(sent) => {
                if let (Some(epoch), Some(generation)) =
                    (answer.first().and_then(|e| e.parse().ok()), answer.get(1))
                {
                    node.standing.renewed(sent, now, epoch, generation);
                }
            }
            Awaits::Claim(epoch, generation, how) => {
                claimed(&mut node.standing, epoch, &generation, how, &answer, now);
            }
            Awaits::Release => node.standing.drop_key(KEY),
            Awaits::Leave => node.life = Life::Left,
        }
    }
}

/// A claim's (or reassert's) answer, acted on as `ownership` does.
fn claimed(
    standing: &mut Standing,
    epoch: u64,
    generation: &str,
    how: Option<Reassert>,
    answer: &[String],
    now: Ms,
) {
    let held_in = standing.holding(KEY).is_some_and(|h| h.held == Held::In);
    if how.is_some() && !held_in {
        return; // released or handed on meanwhile: that decides
    }
    match ClaimAnswer::parse(answer) {
        Some(ClaimAnswer::Taken {
            wait_ms,
            token,
            provisional,
            ..
        }) => {
            let not_before = now + wait_ms;
            let taking = Taking {
                token,
                not_before,
                provisional,
            };
            standing.took(KEY, epoch, generation, taking);
        }
        Some(ClaimAnswer::Lost) => standing.drop_key(KEY),
        _ => {}
    }
}
