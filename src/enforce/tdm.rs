//! TDMRep's file before a request is sent: a request allowed by robots.txt whose
//! declared purposes a reservation binds (`usage.tdm_purposes`, `usage.mode` not `off`)
//! is judged against the origin's `/.well-known/tdmrep.json` (fetched, once per origin
//! while fresh, in its turns: `origin::store`'s `tdm.rs`). The first rule whose
//! `location` matches the path decides (failing closed: a lenient origin's spelling of
//! the path is judged too, and decides when it reserves and the path's own does not);
//! a reservation (`tdm-reservation` 1) refuses it with 403, or in report mode marks it.
//! No file, no matching rule, or a rule that is a protocol error: the request goes on,
//! judged again on its answer's `tdm-reservation` header (`proxy::tdm`).
//!
//! Costs: one atomic load and one pattern walk over the file's rules (at most
//! [`crate::robots::tdmrep::MAX_TDMREP_RULES`]) per bound request; a fetch per origin
//! and freshness period.

use crate::config::UsageMode;
use crate::origin::fetch::OwnFile;
use crate::origin::store::{TdmCopy, TdmUnknown};
use crate::policy::answer::FileRule;
use crate::policy::target::Target;
use crate::policy::usage::UsageCheck;
use crate::robots::CanonicalPath;

use super::{Decision, Enforcer, Refusal};

impl Enforcer {
    /// `decision` once the origin's TDMRep file has been judged for `target`, when it
    /// is a forward that a reservation binds (`check`) and nothing else was reported.
    pub(super) async fn tdm_checked(
        &self,
        decision: Decision,
        target: &Target,
        check: &UsageCheck,
    ) -> Decision {
        let Some(mode) = check.tdm() else {
            return decision;
        };
        let Decision::Forward {
            addr,
            why,
            pace,
            reported: None,
            usage,
        } = decision
        else {
            return decision;
        };
        // The fetch waits for the turns this request's group would, with its delay.
        self.pacer.prime(&pace.request());
        let copy = match self.store.tdm_file(&pace.entry).await {
            Ok(copy) => copy,
            Err(TdmUnknown::NotActing) => {
                return Decision::Refuse(Refusal::FleetUnavailable {
                    why: "this member does not pace the origin now (its ownership is moving)",
                })
            }
            Err(TdmUnknown::Unrecorded) => return Decision::Refuse(Refusal::EvidenceUnwritable),
        };
        let reserved = reservation(&copy, target);
        match (reserved, mode) {
            (Some(refusal), UsageMode::Enforce) => Decision::Refuse(refusal),
            (reported, _) => Decision::Forward {
                addr,
                why,
                pace,
                reported: reported.map(Box::new),
                usage,
            },
        }
    }
}

/// The refusal `copy`'s reservation of `target` comes to, if it reserves it.
fn reservation(copy: &TdmCopy, target: &Target) -> Option<Refusal> {
    let (file, sha256) = copy.file()?;
    let reserves = |path: &CanonicalPath<'_>| match file.lookup(path) {
        Some((index, Some(statement))) if statement.reserved => {
            Some((index, statement.policy.clone()))
        }
        _ => None,
    };
    let lenient = target.lenient_path();
    let (path, (index, policy)) = match reserves(&target.path) {
        Some(found) => (target.path.to_string(), found),
        None => {
            let lenient = lenient?;
            let found = reserves(&lenient)?;
            (lenient.to_string(), found)
        }
    };
    Some(Refusal::TdmReserved {
        tdmrep_url: OwnFile::TdmRep.url(&target.origin),
        path,
        rule: FileRule {
            sha256: sha256.clone(),
            rule: index,
        },
        location: file.location(index).unwrap_or_default().to_string(),
        policy,
    })
}
