//! What `own_claim.lua` and `own_look.lua` answer, read once into a type: the one
//! reading of those answers, for the fleet and for the model (`fleet::model`).

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
