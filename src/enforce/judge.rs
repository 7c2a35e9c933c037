//! The pure part of a decision: a target judged against a held robots.txt, for the
//! crawler's tokens (the verdict) and its declared purposes (the usage verdict). Shared
//! by the proxy and `/check`, so both explain exactly what was decided.

use crate::policy::agent::Tokens;
use crate::policy::target::Target;
use crate::policy::usage::{UsageCheck, UsageVerdict};
use crate::robots::{CanonicalPath, GroupId, RobotsTxt, Usage, UsageGroupId, Verdict};

/// A path judged against a held robots.txt (pure): the verdict, the group it came from,
/// and the lenient reading that decided, when one did.
pub struct Judgement<'r> {
    /// The verdict and the rule behind it.
    pub verdict: Verdict<'r>,
    /// The group the crawler's tokens chose, if any.
    pub group: Option<GroupId>,
    /// The usage group they chose (usage rules are grouped as the attach draft groups
    /// them, apart from Allow/Disallow: `robots::usage_groups`).
    pub usage_group: Option<UsageGroupId>,
    /// The lenient origin's reading, when that one decided.
    pub read_as: Option<CanonicalPath<'static>>,
    /// The lenient reading of an allowed path, when it has one (judged allowed too):
    /// made once, for [`judge_usage`] to judge as well.
    pub lenient: Option<CanonicalPath<'static>>,
}

/// Judges `target` against `robots` for a crawler with `tokens`: the one computation the
/// proxy and `/check` share.
pub fn judge<'r>(robots: &'r RobotsTxt, target: &Target, tokens: &Tokens<'_>) -> Judgement<'r> {
    let (group, usage_group) = groups_for(robots, tokens);
    let (verdict, read_as, lenient) = verdict_for(robots, group, target);
    Judgement {
        verdict,
        group,
        usage_group,
        read_as,
        lenient,
    }
}

/// The group and the usage group a crawler's tokens select in one robots.txt.
fn groups_for(robots: &RobotsTxt, tokens: &Tokens<'_>) -> (Option<GroupId>, Option<UsageGroupId>) {
    fn both<S: AsRef<str>>(
        robots: &RobotsTxt,
        list: &[S],
    ) -> (Option<GroupId>, Option<UsageGroupId>) {
        (robots.group_for(list), robots.usage_group_for(list))
    }
    match tokens {
        Tokens::Credential(list) | Tokens::Rule(list) | Tokens::Default(list) => both(robots, list),
        Tokens::FromHeader(one) => both(robots, one),
        Tokens::None => both::<&str>(robots, &[]),
    }
}

/// The verdict on a request's path, failing closed: when a lenient origin may read the
/// path differently ([`Target::lenient_path`]), that spelling must be allowed too. Then
/// the spelling that disallowed, when it was that one, and the lenient spelling of an
/// allowed path.
fn verdict_for<'r>(
    robots: &'r RobotsTxt,
    group: Option<GroupId>,
    target: &Target,
) -> (
    Verdict<'r>,
    Option<CanonicalPath<'static>>,
    Option<CanonicalPath<'static>>,
) {
    let verdict = robots.decide(group, &target.path);
    if !verdict.allowed {
        return (verdict, None, None);
    }
    match target.lenient_path() {
        Some(lenient) => {
            let strict = robots.decide(group, &lenient);
            if strict.allowed {
                (verdict, None, Some(lenient))
            } else {
                (strict, Some(lenient), None)
            }
        }
        None => (verdict, None, None),
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

/// Judges the usage preferences of `target`'s path, which `judged` allowed, for
/// `check`'s purposes, failing closed: when a lenient origin may read the path
/// differently, that spelling's verdict decides if it refuses and the path's own does
/// not.
pub fn judge_usage<'r>(
    robots: &'r RobotsTxt,
    judged: &Judgement<'_>,
    target: &Target,
    check: &UsageCheck,
) -> UsageJudgement<'r> {
    let usage = robots.usage(judged.usage_group, &target.path);
    let verdict = check.judge(&usage);
    if let Some(lenient) = &judged.lenient {
        let other = robots.usage(judged.usage_group, lenient);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Purpose, UsageConfig, UsageMode};
    use crate::policy::agent::Tokens;
    use crate::policy::target::Scheme;

    fn target(url: &str) -> Target {
        Target::from_request(url.as_bytes(), None, Scheme::Http).expect("target")
    }

    /// The lenient spelling is made once and judged by both verdicts: a path whose
    /// lenient reading refuses a purpose is refused, one whose own reading does is too.
    #[test]
    fn the_lenient_spelling_is_judged_for_usage_too() {
        let robots = RobotsTxt::parse(
            b"User-agent: *\nDisallow: /secret\nContent-Usage: /private train-ai=n\n",
        );
        let check = UsageCheck::new(
            [Purpose::TrainAi].into_iter().collect(),
            UsageMode::Enforce,
            &UsageConfig::default(),
        );
        let names = ["bot".to_string()];
        let tokens = Tokens::Default(&names);
        let refused = |url: &str| {
            let t = target(url);
            let judged = judge(&robots, &t, &tokens);
            assert!(judged.verdict.allowed, "{url} is allowed by robots.txt");
            judge_usage(&robots, &judged, &t, &check).verdict.refused
        };
        assert!(refused("http://a.test/private/x"));
        assert!(refused("http://a.test/pub%2F..%2Fprivate/x"));
        assert!(refused("http://a.test/pub/..;/private/x"));
        assert!(!refused("http://a.test/pub/x"));
        // A lenient reading that robots.txt disallows decides the verdict, and is not
        // kept for usage.
        let t = target("http://a.test/pub%2F..%2Fsecret");
        let judged = judge(&robots, &t, &tokens);
        assert!(!judged.verdict.allowed);
        assert!(judged.read_as.is_some() && judged.lenient.is_none());
    }
}
