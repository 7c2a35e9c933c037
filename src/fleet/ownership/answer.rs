//! What `own_claim.lua` and `own_look.lua` answer, read once into a type: the one
//! reading of those answers, for the fleet and for the model (`fleet::model`); and what
//! a claim's answer does to this member's [`Standing`] ([`ClaimAnswer::apply`]), pure,
//! the one place both of `ownership`'s claiming paths (a claim, a claim written again)
//! act on it, which the specification's member is compared with
//! (`model/spec/agree_standing.rs`).

use crate::fleet::standing::{Held, Standing, Taking};

/// The call an answer answers: the key, and the epoch, generation and mode it was made in.
#[derive(Clone, Copy, Debug)]
pub struct ClaimCall<'a> {
    /// The key claimed.
    pub key: &'a str,
    /// This member's epoch when it called.
    pub epoch: u64,
    /// Its generation when it called.
    pub generation: &'a str,
    /// A claim written again (`reassert` or `vouch`), not a first claim.
    pub again: bool,
}

/// What an answer did to the member's standing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClaimEffect {
    /// The key is held here now; `bound`: the not-before the answer set (this member's
    /// ms), when it set one (`wait_ms` not 0): in the past, a vanished owner's last
    /// exchange ended by then, and the Crawl-delay in force counts from it.
    Took {
        /// The not-before, when the answer bounded it.
        bound: Option<i64>,
    },
    /// Another member holds it now, or it was let go: no longer held here.
    Lost,
    /// A claim written again for a key released or handed on meanwhile: that decided,
    /// the answer changes nothing.
    Passed,
    /// An answer that changes nothing held here (held by another, free, stale,
    /// unregistered).
    Unchanged,
}

/// An answer of `own_claim.lua` (or `own_look.lua`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClaimAnswer {
    /// The caller holds the key now: `how` it came to (`claimed`, `handed`,
    /// `reclaimed`, `taken_over`), its not-before from now (ms: positive, it waits that
    /// long; negative, a previous owner's exchanges ended by then, that long ago; 0, no
    /// previous owner bounds it), the taking's
    /// number (what it releases and records by), and the facts the last owner left
    /// (group, `last_end|paused_until|backoff` pairs).
    Taken {
        /// How it came to hold it.
        how: String,
        /// The not-before, in milliseconds from now (see above).
        wait_ms: i64,
        /// The taking's number.
        token: u64,
        /// Taken while a fence holds: confirmed again once the wait is over.
        provisional: bool,
        /// Group, facts pairs.
        facts: Vec<(String, String)>,
    },
    /// Another live member holds it.
    Held {
        /// Its id.
        member: String,
        /// Its epoch.
        epoch: u64,
        /// Its peer channel's address.
        peer: String,
        /// It is leaving.
        leaving: bool,
    },
    /// Nobody live holds it (`own_look.lua`).
    Free,
    /// Written again: another member holds it now, or it was let go.
    Lost,
    /// The caller's generation is not Redis' any more: it renews first.
    Stale,
    /// The caller is not a live member in the epoch it named.
    Unregistered,
}

impl ClaimAnswer {
    /// Reads an answer; `None` when it is not one.
    pub fn parse(answer: &[String]) -> Option<ClaimAnswer> {
        let (first, rest) = answer.split_first()?;
        Some(match first.as_str() {
            "taken" => {
                let (how, wait, token) = (rest.first()?, rest.get(1)?, rest.get(2)?);
                let provisional = rest.get(3)? == "1";
                let facts = rest
                    .get(4..)?
                    .chunks(2)
                    .filter_map(|pair| match pair {
                        [group, value] => Some((group.clone(), value.clone())),
                        _ => None,
                    })
                    .collect();
                ClaimAnswer::Taken {
                    how: how.clone(),
                    wait_ms: wait.parse().ok()?,
                    token: token.parse().ok()?,
                    provisional,
                    facts,
                }
            }
            "held" => ClaimAnswer::Held {
                member: rest.first()?.clone(),
                epoch: rest.get(1)?.parse().ok()?,
                peer: rest.get(2)?.clone(),
                leaving: rest.get(3)? == "leaving",
            },
            "free" => ClaimAnswer::Free,
            "lost" => ClaimAnswer::Lost,
            "stale" => ClaimAnswer::Stale,
            "unregistered" => ClaimAnswer::Unregistered,
            _ => return None,
        })
    }
}

impl ClaimAnswer {
    /// Acts on this answer to `asked`, received at `received` (this member's ms), in
    /// `standing`: a key taken is held from `received` plus the answer's wait, a key lost
    /// is dropped; a claim written again whose key is no longer held in here is left as
    /// it is.
    pub fn apply(&self, standing: &mut Standing, asked: ClaimCall, received: i64) -> ClaimEffect {
        let held_in = standing
            .holding(asked.key)
            .is_some_and(|h| h.held == Held::In);
        if asked.again && !held_in {
            return ClaimEffect::Passed;
        }
        match *self {
            ClaimAnswer::Taken {
                wait_ms,
                token,
                provisional,
                ..
            } => {
                let not_before = received + wait_ms;
                let taking = Taking {
                    token,
                    not_before,
                    provisional,
                };
                standing.took(asked.key, asked.epoch, asked.generation, taking);
                ClaimEffect::Took {
                    bound: (wait_ms != 0).then_some(not_before),
                }
            }
            ClaimAnswer::Lost => {
                standing.drop_key(asked.key);
                ClaimEffect::Lost
            }
            _ => ClaimEffect::Unchanged,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn answers_read_back_and_anything_else_is_none() {
        assert_eq!(
            ClaimAnswer::parse(&words(&[
                "taken",
                "taken_over",
                "1500",
                "7",
                "1",
                "*",
                "1|0|0"
            ])),
            Some(ClaimAnswer::Taken {
                how: "taken_over".into(),
                wait_ms: 1500,
                token: 7,
                provisional: true,
                facts: vec![("*".into(), "1|0|0".into())],
            })
        );
        assert_eq!(
            ClaimAnswer::parse(&words(&["held", "b.2", "4", "10.0.0.2:7443", "up"])),
            Some(ClaimAnswer::Held {
                member: "b.2".into(),
                epoch: 4,
                peer: "10.0.0.2:7443".into(),
                leaving: false,
            })
        );
        assert_eq!(
            ClaimAnswer::parse(&words(&["lost"])),
            Some(ClaimAnswer::Lost)
        );
        for bad in [
            &["taken", "claimed"][..],
            &["held", "b", "x", "p", "up"],
            &["what"],
            &[],
        ] {
            assert_eq!(ClaimAnswer::parse(&words(bad)), None, "{bad:?}");
        }
    }
}
