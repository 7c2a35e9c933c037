//! The store: what Redis holds for the fleet (members' records, the generation, its
//! server, the fence, one claim per key), typed and small, and the rules the
//! membership and ownership scripts apply to it (`scripts/member_renew.lua`,
//! `member_leave.lua`, `own_claim.lua`, `own_release.lua`), restated in Rust.
//!
//! `agree.rs` runs the Lua scripts and these rules on the same random stores and calls
//! and compares answers and stores: the two cannot drift apart unseen. What the model
//! does not decide with is left out: peers (every member announces its own), the
//! day-old records' clean-up, `own_look` and `own_record` (routing and pause facts),
//! and facts of more than one robots.txt group (one, `*`, with its last end only).

/// A time in ms (Redis' clock here).
pub use crate::fleet::standing::Ms;

/// A member's index (its id is `a`, `b`, …).
pub type Mid = u8;

/// Keys at most.
pub const KEYS: usize = 2;

/// Members at most.
pub const MEMBERS: usize = 3;

/// A member's state in its record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum State {
    /// Up.
    Up,
    /// Leaving: handing its keys over.
    Leaving,
    /// Left: kept until its lease ends, a member no more.
    Left,
}

/// A member's record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MemberRecord {
    /// Its epoch.
    pub epoch: u8,
    /// Its lease ends then.
    pub expires: Ms,
    /// Its state.
    pub state: State,
    /// Its lease.
    pub lease: Ms,
    /// How long past its lease its exchanges may run.
    pub after: Ms,
}

impl MemberRecord {
    /// Is it a live member at `now` (`prelude.lua`'s `live`)?
    fn live(&self, now: Ms) -> bool {
        self.expires > now && self.state != State::Left
    }
}

/// One key's claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Claim {
    /// Its holder and the epoch it names (`m`, `e`), if any.
    pub holder: Option<(Mid, u8)>,
    /// The generation it was written in.
    pub generation: Option<u8>,
    /// The taking's number.
    pub n: u8,
    /// Nothing may act for the key before.
    pub nb: Ms,
    /// Taken while a fence held: to be confirmed again.
    pub pv: bool,
    /// Its last owner let it go then.
    pub released: Option<Ms>,
    /// The facts handed over: the last exchange's end, when there was one.
    pub last_end: Option<Ms>,
}

/// The store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Store {
    /// Members' records.
    pub members: [Option<MemberRecord>; MEMBERS],
    /// The epoch counter.
    pub epochs: u8,
    /// The data set's generation.
    pub generation: Option<u8>,
    /// The server that made it.
    pub server: Option<u8>,
    /// The fence (absent: 0).
    pub fence: Option<Ms>,
    /// The claims, by key.
    pub claims: [Option<Claim>; KEYS],
}

/// A renewal: `member_renew.lua`'s arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Renewing {
    /// Who renews.
    pub member: Mid,
    /// The epoch it holds (0: none).
    pub epoch: u8,
    /// Its lease.
    pub lease: Ms,
    /// Its `after`.
    pub after: Ms,
    /// Leaving?
    pub leaving: bool,
    /// The generation to set when one is due.
    pub offer: u8,
    /// The generation it saw last.
    pub saw: Option<u8>,
    /// How long its exchanges may still run.
    pub runs_for: Ms,
    /// The settle window.
    pub settle: Ms,
    /// `fleet.new_data_set: fence`?
    pub fence_new: bool,
    /// A forward step of Redis' clock it saw (0: none).
    pub step: Ms,
}

/// A renewal's answer: Redis' time, the member's epoch, the generation, the fence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Renewed {
    /// Redis' time.
    pub now: Ms,
    /// The member's epoch.
    pub epoch: u8,
    /// The generation.
    pub generation: u8,
    /// The fence (0: none).
    pub fence: Ms,
}

/// `own_claim.lua`'s modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ClaimMode {
    /// A claim.
    Claim,
    /// A claim written again.
    Reassert,
    /// Written again by an owner that acted without a break.
    Vouch,
}

/// A claim: `own_claim.lua`'s arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Claiming {
    /// Who claims.
    pub member: Mid,
    /// In its epoch.
    pub epoch: u8,
    /// And generation.
    pub generation: Option<u8>,
    /// The key.
    pub key: usize,
    /// How.
    pub mode: ClaimMode,
    /// The confirmation window.
    pub window: Ms,
}

/// How a claim was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum How {
    /// Nobody held it.
    Claimed,
    /// It was handed (or released) to this member.
    Handed,
    /// Its own again.
    Reclaimed,
    /// Taken from a member no longer live.
    TakenOver,
}

/// A claim's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ClaimReply {
    /// Taken: how, the bound from now (0: none), the taking's number, provisional, the
    /// last end handed over.
    Taken(How, Ms, u8, bool, Option<Ms>),
    /// A live member holds it: that member, its epoch, its state.
    Held(Mid, u8, State),
    /// Lost to another member, or let go.
    Lost,
    /// Another generation or server: renew first.
    Stale,
    /// Not a live member in that epoch.
    Unregistered,
}

/// A release: `own_release.lua`'s arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Releasing {
    /// Who releases.
    pub member: Mid,
    /// The epoch its claim was written in.
    pub epoch: u8,
    /// Its generation.
    pub generation: Option<u8>,
    /// The key.
    pub key: usize,
    /// To whom (and that member's epoch as the releaser knew it).
    pub heir: Option<(Mid, u8)>,
    /// The taking's number.
    pub n: u8,
    /// The facts: the last exchange's end (Redis ms; 0 for none).
    pub last_end: Ms,
}

impl Store {
    /// Is the data set still served by the server that made its generation?
    fn same_server(&self, server: u8) -> bool {
        self.server == Some(server)
    }

    /// The longest any recorded member may still act and have exchanges running, at
    /// least `span`.
    fn every_span(&self, span: Ms) -> Ms {
        self.members
            .iter()
            .flatten()
            .fold(span, |s, r| s.max(r.lease + r.after))
    }

    /// `member_renew.lua` at `now` on `server`.
    pub fn renew(&mut self, r: &Renewing, now: Ms, server: u8) -> Renewed {
        let held = self.members[usize::from(r.member)];
        let joining = r.epoch == 0 || !held.is_some_and(|h| h.live(now) && h.epoch == r.epoch);
        let mut fence = self.fence.unwrap_or(0);
        if r.step > 0 {
            fence = fence.max(now + self.every_span(r.lease + r.after));
        }
        match self.generation {
            Some(g) if self.same_server(server) => {
                if r.saw.is_some_and(|s| s != g) {
                    fence = fence.max(now + r.runs_for);
                }
            }
            known => {
                let span = match known {
                    Some(_) => self.every_span(r.lease + r.after),
                    None if r.saw.is_none() && !r.fence_new => r.settle,
                    None => r.lease + r.after,
                };
                self.generation = Some(r.offer);
                self.server = Some(server);
                fence = fence.max(now + span);
            }
        }
        self.fence = Some(fence);
        let mut epoch = r.epoch;
        if joining {
            self.epochs += 1;
            epoch = self.epochs;
        }
        self.members[usize::from(r.member)] = Some(MemberRecord {
            epoch,
            expires: now + r.lease,
            state: if r.leaving { State::Leaving } else { State::Up },
            lease: r.lease,
            after: r.after,
        });
        Renewed {
            now,
            epoch,
            generation: self.generation.unwrap_or(r.offer),
            fence,
        }
    }

    /// `member_leave.lua`: `true` when the record was marked left.
    pub fn leave(&mut self, member: Mid, epoch: u8) -> bool {
        match &mut self.members[usize::from(member)] {
            Some(m) if m.epoch == epoch => {
                m.state = State::Left;
                true
            }
            _ => false,
        }
    }

    /// `own_claim.lua` at `now` on `server` (`retake`: with its rule that a takeover
    /// never confirmed, claimed again, waits its window again).
    pub fn claim(&mut self, c: &Claiming, now: Ms, server: u8, retake: bool) -> ClaimReply {
        if c.generation.is_none() || self.generation != c.generation || !self.same_server(server) {
            return ClaimReply::Stale;
        }
        let me = self.members[usize::from(c.member)];
        if !me.is_some_and(|m| m.live(now) && m.epoch == c.epoch && m.state == State::Up) {
            return ClaimReply::Unregistered;
        }
        let mut claim = self.claims[c.key].unwrap_or_default();
        let holder = claim.holder.map(|(m, _)| m);
        let (mut nb, mut retaken) = (claim.nb, false);
        let how;
        if c.mode != ClaimMode::Claim && (holder != Some(c.member) || claim.released.is_some()) {
            if holder.is_some() || claim.released.is_some() {
                return ClaimReply::Lost;
            }
            how = How::Reclaimed;
        } else if holder == Some(c.member) {
            how = match claim.released {
                Some(_) => How::Handed,
                None => How::Reclaimed,
            };
            if retake && how == How::Reclaimed && claim.pv && c.mode == ClaimMode::Claim {
                nb = nb.max(now + c.window);
                retaken = true;
            }
        } else if let Some(h) = holder {
            let record = self.members[usize::from(h)];
            if let Some(r) = record.filter(|r| r.live(now)) {
                return ClaimReply::Held(h, r.epoch, r.state);
            }
            let ends = record.map_or(now, |r| r.expires + r.after);
            nb = nb.max(ends).max(now + c.window);
            how = How::TakenOver;
            claim.pv = true;
        } else if claim.released.is_some() {
            how = How::Handed;
        } else {
            how = How::Claimed;
        }
        let fence = self.fence.unwrap_or(0);
        if (claim.generation != c.generation || claim.pv) && c.mode != ClaimMode::Vouch {
            nb = nb.max(fence);
        }
        let provisional = (fence > now && nb > now) || how == How::TakenOver || retaken;
        claim.holder = Some((c.member, c.epoch));
        claim.generation = c.generation;
        claim.nb = nb;
        claim.pv = provisional;
        claim.n += 1;
        claim.released = None;
        self.claims[c.key] = Some(claim);
        let bound = match nb {
            0 => 0,
            nb if nb == now => 1,
            nb => nb - now,
        };
        ClaimReply::Taken(how, bound, claim.n, provisional, claim.last_end)
    }

    /// `own_release.lua` at `now` on `server`: `true` when released.
    pub fn release(&mut self, r: &Releasing, now: Ms, server: u8) -> bool {
        let current =
            r.generation.is_some() && self.generation == r.generation && self.same_server(server);
        let Some(claim) = self.claims[r.key].as_mut() else {
            return false;
        };
        let holds = claim.holder == Some((r.member, r.epoch));
        if !current || !holds {
            return false;
        }
        if claim.generation != r.generation || claim.n != r.n {
            return false;
        }
        claim.holder = r.heir;
        claim.released = Some(now);
        claim.last_end = Some(r.last_end);
        true
    }
}
