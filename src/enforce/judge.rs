//! The pure part of a decision: a target judged against a held robots.txt, for the
//! crawler's tokens (the verdict) and its declared purposes (the usage verdict). Shared
//! by the proxy and `/check`, so both explain exactly what was decided.

use crate::policy::agent::Tokens;
use crate::policy::target::Target;
use crate::policy::usage::{UsageCheck, UsageVerdict};
use crate::robots::{CanonicalPath, GroupId, RobotsTxt, Usage, Verdict};

/// A path judged against a held robots.txt (pure): the verdict, the group it came from,
/// and the lenient reading that decided, when one did.
pub struct Judgement<'r> {
    /// The verdict and the rule behind it.
    pub verdict: Verdict<'r>,
    /// The group the crawler's tokens chose, if any.
    pub group: Option<GroupId>,
    /// The lenient origin's reading, when that one decided.
    pub read_as: Option<CanonicalPath<'static>>,
}

/// Judges `target` against `robots` for a crawler with `tokens`: the one computation the
/// proxy and `/check` share.
pub fn judge<'r>(robots: &'r RobotsTxt, target: &Target, tokens: &Tokens<'_>) -> Judgement<'r> {
    let group = group_for(robots, tokens);
    let (verdict, read_as) = verdict_for(robots, group, target);
    Judgement {
        verdict,
        group,
        read_as,
    }
}

/// The group a crawler's tokens select in one robots.txt.
fn group_for(robots: &RobotsTxt, tokens: &Tokens<'_>) -> Option<GroupId> {
    match tokens {
        Tokens::Credential(list) | Tokens::Rule(list) | Tokens::Default(list) => {
            robots.group_for(list)
        }
        Tokens::FromHeader(one) => robots.group_for(one),
        Tokens::None => robots.group_for::<&str>(&[]),
    }
}

/// The verdict on a request's path, failing closed: when a lenient origin may read the
/// path differently ([`Target::lenient_path`]), that spelling must be allowed too. The
/// second value is the spelling that disallowed, when it was that one.
fn verdict_for<'r>(
    robots: &'r RobotsTxt,
    group: Option<GroupId>,
    target: &Target,
) -> (Verdict<'r>, Option<CanonicalPath<'static>>) {
    let verdict = robots.decide(group, &target.path);
    if !verdict.allowed {
        return (verdict, None);
    }
    match target.lenient_path() {
        Some(lenient) => {
            let strict = robots.decide(group, &lenient);
            if strict.allowed {
                (verdict, None)
            } else {
                (strict, Some(lenient))
            }
        }
        None => (verdict, None),
    }
}

/// A path the robots.txt allows, judged for the crawler's declared purposes: the
/// verdict, and the statements it was judged on (to name them).
pub struct UsageJudgement<'r> {
    /// Each declared purpose's verdict (what `X-Robots-Usage` says).
    pub verdict: UsageVerdict,
    /// What applied to the spelling judged.
    pub usage: Usage<'r>,
}

/// Judges the usage preferences of `target`'s path for `check`'s purposes, failing
/// closed: when a lenient origin may read the path differently, that spelling's verdict
/// decides if it refuses and the path's own does not.
pub fn judge_usage<'r>(
    robots: &'r RobotsTxt,
    group: Option<GroupId>,
    target: &Target,
    check: &UsageCheck,
) -> UsageJudgement<'r> {
    let usage = robots.usage(group, &target.path);
    let verdict = check.judge(&usage);
    if let Some(lenient) = target.lenient_path() {
        let other = robots.usage(group, &lenient);
        let judged = check.judge(&other);
        if judged.refused && !verdict.refused {
            return UsageJudgement {
                verdict: judged,
                usage: other,
            };
        }
    }
    UsageJudgement { verdict, usage }
}
