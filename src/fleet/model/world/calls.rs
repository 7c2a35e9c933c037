//! The calls members send, built as the code builds them: each script's keys and
//! arguments (a renewal, a claim or re-assertion, a release or hand-over, a leave), and
//! how a call is put in flight.

use super::*;

impl World {
    /// A message for `script` with `keys` and `args`, for `purpose`.
    pub(super) fn message(
        script: &'static str,
        keys: &[&str],
        args: Vec<String>,
        purpose: Awaits,
    ) -> Message {
        Message {
            script,
            keys: keys.iter().map(|k| k.to_string()).collect(),
            args,
            purpose,
            answer: None,
        }
    }

    /// A send step: the member's message built and (`arrives`) run in Redis at once.
    pub(super) fn send(&mut self, action: &Action, scripts: &Scripts, arrives: bool) {
        let i = match *action {
            Action::Renew(i) => {
                self.renew(i);
                i
            }
            Action::Claim(i) => {
                self.claim(i, None);
                i
            }
            Action::Reassert(i) => {
                let now = self.now;
                let how = self.nodes[i]
                    .standing
                    .unconfirmed(now)
                    .first()
                    .map(|(_, h)| *h);
                self.claim(i, how);
                i
            }
            Action::Release(i) => {
                self.release(i);
                i
            }
            Action::Deregister(i) => {
                self.deregister(i);
                i
            }
            _ => return,
        };
        if arrives {
            let renewal = matches!(action, Action::Renew(_));
            self.run(i, renewal, scripts);
        }
    }

    /// Member `i` sends its renewal.
    pub(super) fn renew(&mut self, i: usize) {
        let b = self.bounds;
        let node = &mut self.nodes[i];
        let state = if node.standing.leaving() {
            "leaving"
        } else {
            "up"
        };
        let args = vec![
            node.id.clone(),
            node.standing.epoch().to_string(),
            (b.lease * TICK).to_string(),
            format!("peer-{}", node.id),
            String::new(), // the generation offer: filled in when Redis runs it
            state.into(),
            ((b.grace + b.hold) * TICK).to_string(),
            node.standing.generation().to_string(),
            node.standing
                .valid_until()
                .map_or(0, |v| (v + (b.grace + b.hold) * TICK - self.now).max(0))
                .to_string(),
            TICK.to_string(), // the settle window: one tick
            b.new_data_set.into(),
        ];
        let purpose = Awaits::Renew(self.now);
        node.renewal = Some(World::message("member_renew", &MEMBERSHIP, args, purpose));
    }

    /// Member `i` claims the key, or (`how`) writes its claim again.
    pub(super) fn claim(&mut self, i: usize, how: Option<Reassert>) {
        let node = &mut self.nodes[i];
        let (epoch, generation) = (
            node.standing.epoch(),
            node.standing.generation().to_string(),
        );
        let mode = how.map_or("claim", Reassert::mode);
        let args = vec![
            node.id.clone(),
            epoch.to_string(),
            generation.clone(),
            "604800000".into(),
            mode.into(),
        ];
        let keys = [
            CLAIM,
            MEMBERSHIP[0],
            MEMBERSHIP[2],
            MEMBERSHIP[4],
            MEMBERSHIP[3],
        ];
        let purpose = Awaits::Claim(epoch, generation, how);
        node.call = Some(World::message("own_claim", &keys, args, purpose));
    }

    /// Member `i` stops acting for the key, to release it to `heir` once its exchanges
    /// are over.
    pub(super) fn let_go(&mut self, i: usize, heir: Option<usize>) {
        let heir = heir.map_or(String::new(), |j| self.nodes[j].id.clone());
        let node = &mut self.nodes[i];
        if !node.standing.leaving() {
            self.spent[LETTINGS_GO] += 1;
        }
        if node.standing.mark(KEY, Held::In, Held::Releasing).is_some() {
            node.releasing_to = Some(heir);
        }
    }

    /// Member `i` sends the release it prepared.
    pub(super) fn release(&mut self, i: usize) {
        let now = self.now;
        let node = &mut self.nodes[i];
        let (Some(heir), Some(holding)) = (node.releasing_to.take(), node.standing.holding(KEY))
        else {
            return;
        };
        let args = vec![
            node.id.clone(),
            holding.epoch.to_string(),
            node.standing.generation().to_string(),
            "604800000".into(),
            heir,
            "0".into(),
            holding.token.to_string(),
            "*".into(),
            format!("{now}|0|0"),
        ];
        let keys = [CLAIM, MEMBERSHIP[2], MEMBERSHIP[3]];
        node.call = Some(World::message("own_release", &keys, args, Awaits::Release));
    }

    /// Member `i`, leaving and holding nothing, deregisters.
    pub(super) fn deregister(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        let args = vec![node.id.clone(), node.standing.epoch().to_string()];
        node.call = Some(World::message(
            "member_leave",
            &MEMBERSHIP[..1],
            args,
            Awaits::Leave,
        ));
    }
}
