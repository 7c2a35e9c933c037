//! The specification's world: Redis (a store, a lagging replica, a server that can
//! restart empty or fail over, a clock that can step forward), the members, the calls
//! between them, true time, and each key's last exchange as the origin saw it. Every
//! step is one [`Event`]; [`System::actions`] lists those enabled, [`System::apply`] takes
//! one, then every member that may start an exchange does (the worst case), checking
//! the invariant at the origin: no exchange of a key starts before the last one ended,
//! nor, by another member, before its Crawl-delay has passed since.

use super::member::{claim_slot, release_slot, Answered, HeldAs, InFlight, Instance, Phase, Sent};
use super::member::{RENEWAL, SLOTS};
use super::store::{ClaimMode, Claiming, Mid, Ms, Renewing, Store, KEYS, MEMBERS};
use super::{Fault, Scope, FAULTS};

/// One tick of true time, in ms.
pub const TICK: Ms = 1000;

/// A time long past, as `forget.rs` writes one that no rule can still be moved by.
pub const PAST: Ms = Ms::MIN / 4;

/// The world (its bounds are kept apart: [`Scope`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct System {
    /// True time.
    pub now: Ms,
    /// How far Redis' clock is ahead of true time (its steps).
    pub redis_ahead: Ms,
    /// The master's store.
    pub store: Store,
    /// The replica's, as of its last catch-up.
    pub replica: Store,
    /// The server's incarnation.
    pub server: u8,
    /// Faults spent, by [`Fault`].
    pub spent: [u8; FAULTS],
    /// The members.
    pub members: [Instance; MEMBERS],
    /// Per key, its last exchange at the origin: when it started (true time), by whom.
    pub last: [Option<(Ms, Mid)>; KEYS],
    /// A call given up on that Redis may still run, and whose it was.
    pub orphan: Option<(Mid, Sent)>,
}

/// One step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// True time moves one tick.
    Tick,
    /// Member `i` starts.
    Join(Mid),
    /// Member `i` renews.
    Renew(Mid),
    /// Member `i` claims key `k` (a request for it came).
    Claim(Mid, usize),
    /// Member `i` writes its claim of `k` again.
    Reassert(Mid, usize),
    /// Member `i` lets `k` go (to heir `j`): it stops acting for it.
    LetGo(Mid, usize, Option<Mid>),
    /// Member `i` starts handing `k` to `j`, its traffic's member (`HeldAs::Moving`).
    Move(Mid, usize, Mid),
    /// Member `i`'s hand-over of `k` goes ahead: released to the heir.
    Moved(Mid, usize),
    /// Member `i`'s hand-over of `k` did not happen: held in again.
    Stay(Mid, usize),
    /// Member `i` sends `k`'s release.
    Release(Mid, usize),
    /// Member `i` begins to leave.
    BeginLeave(Mid),
    /// Member `i` deregisters.
    Deregister(Mid),
    /// Member `i` crashes.
    Crash(Mid),
    /// Member `i` is stopped (a pause) until resumed.
    Pause(Mid),
    /// Member `i` will be stopped right after its next turn, before its head is sent.
    Arm(Mid),
    /// Member `i` resumes (and sends the head of the turn it held, if still its own).
    Resume(Mid),
    /// Member `i` receives the late answer in slot `s`.
    Deliver(Mid, usize),
    /// Member `i` gives up on the late call in slot `s` (its answer never comes).
    GiveUp(Mid, usize),
    /// A send whose answer comes late: Redis runs it now, the member receives the
    /// answer at any later step (`Deliver`), or never (`GiveUp`).
    Late(Mid, Box<Event>),
    /// A send whose answer is lost: Redis runs it now, the member gives up on it.
    Lose(Mid, Box<Event>),
    /// A send held up on its way: the member gives up, Redis may run it later.
    Strand(Mid, Box<Event>),
    /// Redis runs the orphan.
    RunOrphan,
    /// The replica catches up.
    Sync,
    /// Redis restarts empty.
    Restart,
    /// The replica is promoted.
    Failover,
    /// Redis' clock steps forward by the longest lease and `after`.
    StepRedisClock,
}

impl Event {
    /// The member whose call this step sends, if it sends one.
    fn sender(&self) -> Option<Mid> {
        match *self {
            Event::Renew(i)
            | Event::Claim(i, _)
            | Event::Reassert(i, _)
            | Event::Release(i, _)
            | Event::Deregister(i) => Some(i),
            _ => None,
        }
    }
}

impl System {
    /// The start: `b.members` up (not registered yet), `b.joiners` waiting.
    pub fn new(b: &Scope) -> System {
        let mut members = [Instance::new(false, 0); MEMBERS];
        for (i, m) in members.iter_mut().enumerate().take(b.members + b.joiners) {
            let rate = if b.drift { [-5, 5, 0][i] } else { 0 };
            *m = Instance::new(i < b.members, rate);
        }
        for m in members.iter_mut().skip(b.members + b.joiners) {
            m.life = Phase::Crashed; // not in this world
        }
        System {
            now: 0,
            redis_ahead: 0,
            store: Store::default(),
            replica: Store::default(),
            server: 0,
            spent: [0; FAULTS],
            members,
            last: [None; KEYS],
            orphan: None,
        }
    }

    /// Redis' clock.
    fn redis_now(&self) -> Ms {
        self.now + self.redis_ahead
    }

    /// Member `i`'s clock.
    fn own_now(&self, i: usize) -> Ms {
        self.members[i].clock(self.now)
    }

    /// Is there budget left for `f`?
    fn may(&self, b: &Scope, f: Fault) -> bool {
        self.spent[f as usize] < b.budget(f)
    }

    /// Has any fault been spent?
    pub fn faults_spent(&self) -> bool {
        self.spent.iter().any(|&n| n > 0)
    }

    /// The member in the world: `0..n`.
    fn ids(b: &Scope) -> impl Iterator<Item = usize> {
        0..b.members + b.joiners
    }

    /// Every step enabled now.
    pub fn actions(&self, b: &Scope) -> Vec<Event> {
        let mut out = Vec::new();
        let renewed = Self::ids(b).all(|i| {
            let m = &self.members[i];
            let answered = m.slots.iter().all(Option::is_none);
            m.life != Phase::Up || (m.renewed_at == Some(self.now) && answered && m.step == 0)
        });
        if renewed && self.now < b.horizon * TICK {
            out.push(Event::Tick);
        }
        for i in Self::ids(b) {
            let start = out.len();
            self.own_actions(b, i, &mut out);
            if self.may(b, Fault::GiveUp) && self.orphan.is_none() {
                let sends: Vec<Event> = out[start..]
                    .iter()
                    .filter(|a| a.sender().is_some())
                    .cloned()
                    .collect();
                for a in sends {
                    out.push(Event::Late(i as Mid, Box::new(a.clone())));
                    out.push(Event::Lose(i as Mid, Box::new(a.clone())));
                    out.push(Event::Strand(i as Mid, Box::new(a)));
                }
            }
            self.message_actions(b, i, &mut out);
        }
        if self.orphan.is_some() {
            out.push(Event::RunOrphan);
        }
        if self.may(b, Fault::Failover) && self.replica != self.store {
            out.push(Event::Sync);
            out.push(Event::Failover);
        }
        if self.may(b, Fault::Restart) {
            out.push(Event::Restart);
        }
        if self.may(b, Fault::ClockStep) {
            out.push(Event::StepRedisClock);
        }
        out
    }

    /// What member `i` may do with its answers.
    fn message_actions(&self, b: &Scope, i: usize, out: &mut Vec<Event>) {
        let m = &self.members[i];
        if m.life != Phase::Up {
            return;
        }
        for s in 0..SLOTS {
            if m.slots[s].is_some() {
                out.push(Event::Deliver(i as Mid, s));
                if self.may(b, Fault::GiveUp) {
                    out.push(Event::GiveUp(i as Mid, s));
                }
            }
        }
    }

    /// The steps member `i` may take of its own.
    fn own_actions(&self, b: &Scope, i: usize, out: &mut Vec<Event>) {
        let (m, id) = (&self.members[i], i as Mid);
        match m.life {
            Phase::Waiting => return out.push(Event::Join(id)),
            Phase::Paused => return out.push(Event::Resume(id)),
            Phase::Up => {}
            Phase::Crashed | Phase::Left => return,
        }
        let now = self.own_now(i);
        // Renewals keep a cadence; a step of Redis' clock just seen is written into
        // the fence by a renewal sent at once (`Membership::beat`).
        if m.slots[RENEWAL].is_none() && (m.renewed_at != Some(self.now) || m.step > 0) {
            out.push(Event::Renew(id));
        }
        if self.may(b, Fault::Crash) {
            out.push(Event::Crash(id));
        }
        if self.may(b, Fault::Pause) {
            out.push(Event::Pause(id));
            if !m.armed {
                out.push(Event::Arm(id));
            }
        }
        if !m.leaving && self.may(b, Fault::LetGo) {
            out.push(Event::BeginLeave(id));
        }
        for k in 0..b.keys {
            self.key_actions(b, i, k, now, out);
        }
        let idle = m.holds.iter().all(Option::is_none) && m.slots[1..].iter().all(Option::is_none);
        if m.leaving && idle {
            out.push(Event::Deregister(id));
        }
    }

    /// The steps member `i` may take for key `k` at own time `now`.
    fn key_actions(&self, b: &Scope, i: usize, k: usize, now: Ms, out: &mut Vec<Event>) {
        let (m, id) = (&self.members[i], i as Mid);
        let claim_free = m.slots[claim_slot(k)].is_none();
        let Some(h) = m.holds[k] else {
            if !m.leaving && m.may_own(now, b.grace * TICK) && claim_free {
                out.push(Event::Claim(id, k));
            }
            return;
        };
        let confirmed = h.epoch == m.epoch && h.generation == m.generation;
        match h.held {
            HeldAs::Releasing(_) => {
                let over = m.exchange[k].is_none_or(|s| s + b.hold * TICK <= self.now);
                if over && m.slots[release_slot(k)].is_none() {
                    out.push(Event::Release(id, k));
                }
            }
            HeldAs::Moving(_) => {
                out.push(Event::Moved(id, k));
                out.push(Event::Stay(id, k));
            }
            HeldAs::In => {
                if m.unconfirmed(k, now).is_some() && m.may_own(now, b.grace * TICK) && claim_free {
                    out.push(Event::Reassert(id, k));
                }
                if !confirmed || h.provisional {
                    return;
                }
                if m.leaving {
                    return out.push(Event::LetGo(id, k, None));
                }
                if self.may(b, Fault::LetGo) {
                    out.push(Event::LetGo(id, k, None));
                    for j in Self::ids(b).filter(|&j| j != i) {
                        out.push(Event::LetGo(id, k, Some(j as Mid)));
                        out.push(Event::Move(id, k, j as Mid));
                    }
                }
            }
        }
    }

    /// Takes `action`, then every member that may start an exchange does: `Err` with
    /// what broke when the invariant does.
    pub fn apply(&mut self, b: &Scope, action: &Event) -> Result<(), String> {
        match *action {
            Event::Tick => {
                self.now += TICK;
                if b.lag_under_a_tick && self.may(b, Fault::Failover) {
                    self.replica = self.store;
                }
            }
            Event::Join(i) => self.members[usize::from(i)].life = Phase::Up,
            Event::Crash(i) => self.fault(Fault::Crash, i, Phase::Crashed),
            Event::Pause(i) => self.fault(Fault::Pause, i, Phase::Paused),
            Event::Arm(i) => {
                self.spent[Fault::Pause as usize] += 1;
                self.members[usize::from(i)].armed = true;
            }
            Event::Resume(i) => self.resume(b, usize::from(i))?,
            Event::BeginLeave(i) => {
                self.spent[Fault::LetGo as usize] += 1;
                self.members[usize::from(i)].leave();
            }
            Event::LetGo(i, k, heir) => self.let_go(i, k, heir),
            Event::Move(i, k, j) => {
                self.spent[Fault::LetGo as usize] += 1;
                self.members[usize::from(i)].hold_as(k, HeldAs::In, HeldAs::Moving(j));
            }
            Event::Moved(i, k) => {
                let m = &mut self.members[usize::from(i)];
                if let Some(HeldAs::Moving(j)) = m.holds[k].map(|h| h.held) {
                    m.hold_as(k, HeldAs::Moving(j), HeldAs::Releasing(Some(j)));
                }
            }
            Event::Stay(i, k) => {
                let m = &mut self.members[usize::from(i)];
                if let Some(h) = m.holds[k] {
                    m.hold_as(k, h.held, HeldAs::In);
                }
            }
            Event::Deliver(i, s) => self.deliver(b, usize::from(i), s),
            Event::GiveUp(i, s) => {
                self.spent[Fault::GiveUp as usize] += 1;
                self.give_up(usize::from(i), s);
            }
            Event::Late(_, ref send) => {
                self.spent[Fault::GiveUp as usize] += 1;
                self.send(b, send, true);
            }
            Event::Lose(i, ref send) | Event::Strand(i, ref send) => {
                self.spent[Fault::GiveUp as usize] += 1;
                let s = self.send(b, send, matches!(action, Event::Lose(..)));
                self.give_up(usize::from(i), s);
            }
            Event::RunOrphan => {
                if let Some((_, call)) = self.orphan.take() {
                    self.run(b, &call);
                }
            }
            Event::Sync => self.replica = self.store,
            Event::Restart => {
                self.store = Store::default();
                self.replica = Store::default();
                self.server += 1;
                self.spent[Fault::Restart as usize] += 1;
            }
            Event::Failover => {
                // The replica is promoted; the new replica has synced nothing yet (with
                // one failover in the budget it is never read again, so states that
                // differed only in it become one).
                self.store = std::mem::take(&mut self.replica);
                self.server += 1;
                self.spent[Fault::Failover as usize] += 1;
            }
            Event::StepRedisClock => {
                self.spent[Fault::ClockStep as usize] += 1;
                self.redis_ahead += (b.lease + b.grace + b.hold) * TICK;
            }
            _ => {
                // Sent, run and answered in one step: no other member's step between
                // them changes what this member knows (it learns only from its
                // answers, within the tick); a late answer is a fault (`Late`).
                if let Some(i) = action.sender() {
                    let s = self.send(b, action, true);
                    self.deliver(b, usize::from(i), s);
                }
            }
        }
        self.act(b)?;
        super::forget::forget(self, b);
        Ok(())
    }

    /// Member `i` is stopped (a crash, a pause): `f` spent.
    fn fault(&mut self, f: Fault, i: Mid, life: Phase) {
        self.spent[f as usize] += 1;
        self.members[usize::from(i)].life = life;
    }

    /// Member `i` stops acting for `k`, to release it to `heir` once its exchange is
    /// over (`Standing::mark`: only a key held in, in its current epoch and generation).
    fn let_go(&mut self, i: Mid, k: usize, heir: Option<Mid>) {
        let m = &mut self.members[usize::from(i)];
        if !m.leaving {
            self.spent[Fault::LetGo as usize] += 1;
        }
        m.mark(k, HeldAs::In, HeldAs::Releasing(heir));
    }

    /// Member `i` resumes; the head of the turn it held is sent if it still acts for
    /// the key (the re-check before the head is written), else the turn is given back.
    fn resume(&mut self, b: &Scope, i: usize) -> Result<(), String> {
        self.members[i].life = Phase::Up;
        let Some(k) = self.members[i].turn.take() else {
            return Ok(());
        };
        let k = usize::from(k);
        if !b.rules.recheck_head || self.members[i].acts_for(k, self.own_now(i), b.grace * TICK) {
            return self.start(b, i, k);
        }
        Ok(())
    }

    /// Builds the call `action` sends; runs it at once when it `arrives`. Its slot.
    fn send(&mut self, b: &Scope, action: &Event, arrives: bool) -> usize {
        let (i, slot, call) = match *action {
            Event::Renew(i) => (i, RENEWAL, self.renewal(b, usize::from(i))),
            Event::Claim(i, k) => (i, claim_slot(k), self.claiming(b, i, k, ClaimMode::Claim)),
            Event::Reassert(i, k) => {
                let m = &self.members[usize::from(i)];
                let vouch = m.unconfirmed(k, self.own_now(usize::from(i))) == Some(true);
                let mode = if vouch {
                    ClaimMode::Vouch
                } else {
                    ClaimMode::Reassert
                };
                (i, claim_slot(k), self.claiming(b, i, k, mode))
            }
            Event::Release(i, k) => {
                let m = &self.members[usize::from(i)];
                let Some(HeldAs::Releasing(heir)) = m.holds[k].map(|h| h.held) else {
                    return release_slot(k);
                };
                let ended = m.exchange[k].map(|s| m.clock(s + b.hold * TICK));
                let heir = heir.map(|j| (j, 0));
                match m.releasing(i, k, heir, ended) {
                    Some(r) => (i, release_slot(k), Sent::Release(r)),
                    None => return release_slot(k),
                }
            }
            Event::Deregister(i) => {
                let epoch = self.members[usize::from(i)].epoch;
                (i, release_slot(0), Sent::Leave(i, epoch))
            }
            _ => return RENEWAL,
        };
        let answer = arrives.then(|| self.run(b, &call));
        if let Event::Renew(_) = action {
            self.members[usize::from(i)].renewed_at = Some(self.now);
        }
        self.members[usize::from(i)].slots[slot] = Some(InFlight { call, answer });
        slot
    }

    /// Member `i`'s renewal, as `membership` builds it.
    fn renewal(&self, b: &Scope, i: usize) -> Sent {
        let (m, now) = (&self.members[i], self.own_now(i));
        let after = (b.grace + b.hold) * TICK;
        let r = Renewing {
            member: i as Mid,
            epoch: m.epoch,
            lease: b.lease * TICK,
            after,
            leaving: m.leaving,
            offer: 0, // filled in when Redis runs it
            saw: m.generation,
            runs_for: m.valid_until.map_or(0, |v| (v + after - now).max(0)),
            settle: TICK,
            fence_new: b.new_data_set_fence,
            step: if b.rules.step_fence { m.step } else { 0 },
        };
        Sent::Renew(r, now)
    }

    /// Member `i`'s claim of `k`, in `mode`.
    fn claiming(&self, b: &Scope, i: Mid, k: usize, mode: ClaimMode) -> Sent {
        let m = &self.members[usize::from(i)];
        Sent::Claim(Claiming {
            member: i,
            epoch: m.epoch,
            generation: m.generation,
            key: k,
            mode,
            window: b.window * TICK,
        })
    }

    /// Redis runs `call` now: its answer.
    fn run(&mut self, b: &Scope, call: &Sent) -> Answered {
        let (now, server) = (self.redis_now(), self.server);
        match *call {
            Sent::Renew(mut r, _) => {
                r.offer = server;
                Answered::Renewed(self.store.renew(&r, now, server))
            }
            Sent::Claim(c) => {
                Answered::Claimed(self.store.claim(&c, now, server, b.rules.retake_window))
            }
            Sent::Release(r) => {
                self.store.release(&r, now, server);
                Answered::Done
            }
            Sent::Leave(i, epoch) => {
                self.store.leave(i, epoch);
                Answered::Done
            }
        }
    }

    /// Member `i` gives up on slot `s`: Redis may still run its call.
    fn give_up(&mut self, i: usize, s: usize) {
        let Some(message) = self.members[i].slots[s].take() else {
            return;
        };
        if let Sent::Release(r) = message.call {
            let m = &mut self.members[i];
            // A leave's release is sent again, the key still releasing (`letting_go.rs`);
            // any other lets go, answered or not.
            if !(m.leaving && r.heir.is_none()) {
                m.holds[r.key] = None;
            }
        }
        if message.answer.is_none() {
            self.orphan = Some((i as Mid, message.call));
        }
    }

    /// Member `i` receives slot `s`'s answer and acts on it as the code does.
    fn deliver(&mut self, b: &Scope, i: usize, s: usize) {
        let now = self.own_now(i);
        let Some(InFlight { call, answer }) = self.members[i].slots[s].take() else {
            return;
        };
        let m = &mut self.members[i];
        match (call, answer) {
            (Sent::Renew(_, sent), Some(Answered::Renewed(r))) => {
                m.renewed(sent, now, &r, b.lease * TICK, b.grace * TICK);
            }
            (Sent::Claim(c), Some(Answered::Claimed(a))) => {
                if let Some(inherited) = m.claimed(&c, &a, now) {
                    let first = inherited.first_start(b.delay * TICK, b.rules.fetch_gap);
                    if let (true, Some(first)) = (b.rules.inherit_gap, first) {
                        m.pace[c.key] = m.pace[c.key].max(first);
                    }
                }
            }
            (Sent::Release(r), _) => m.holds[r.key] = None,
            (Sent::Leave(..), _) => m.life = Phase::Left,
            _ => {}
        }
    }

    /// Every member that may start an exchange now does (or, armed, takes its turn and
    /// stops before sending it).
    fn act(&mut self, b: &Scope) -> Result<(), String> {
        for i in Self::ids(b) {
            for k in 0..b.keys {
                let (m, now) = (&self.members[i], self.own_now(i));
                let running = m.exchange[k].is_some_and(|s| s + b.hold * TICK > self.now);
                let may = m.life == Phase::Up
                    && m.acts_for(k, now, b.grace * TICK)
                    && now >= m.pace[k]
                    && !running;
                if !may {
                    continue;
                }
                if m.armed {
                    let m = &mut self.members[i];
                    (m.armed, m.turn, m.life) = (false, Some(k as u8), Phase::Paused);
                    break;
                }
                self.start(b, i, k)?;
            }
        }
        Ok(())
    }

    /// Member `i` starts an exchange of key `k` at the origin now: the invariant.
    fn start(&mut self, b: &Scope, i: usize, k: usize) -> Result<(), String> {
        let (hold, delay) = (b.hold * TICK, b.delay * TICK);
        if let Some((s, j)) = self.last[k] {
            let gap = if usize::from(j) == i { 0 } else { delay };
            if self.now < s + hold + gap {
                return Err(format!(
                    "{} starts an exchange of key {k} at {} while {}'s, started at {s}, \
                     may run until {} (its Crawl-delay then {gap} ms)",
                    name(i),
                    self.now,
                    name(usize::from(j)),
                    s + hold
                ));
            }
        }
        self.last[k] = Some((self.now, i as Mid));
        let m = &mut self.members[i];
        m.exchange[k] = Some(self.now);
        m.pace[k] = m.clock(self.now + hold) + delay;
        Ok(())
    }

    /// The state, briefly.
    pub fn describe(&self, b: &Scope) -> String {
        let mut out = format!(
            "at {} (Redis {} ahead, server {}): {:?}\n",
            self.now, self.redis_ahead, self.server, self.store
        );
        for i in Self::ids(b) {
            out.push_str(&format!("  {}: {:?}\n", name(i), self.members[i]));
        }
        out.push_str(&format!("  last exchanges: {:?}\n", self.last));
        out
    }
}

/// Member `i`'s id.
pub fn name(i: usize) -> char {
    char::from(b'a' + i as u8)
}
