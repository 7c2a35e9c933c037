//! How a decision is made from what is known: where the name resolved, the origin's
//! entry and its robots.txt snapshot, and what the operator set for the request. One
//! function per policy the snapshot holds (rules, allow all, disallow all), and one that
//! makes a forward decision, so each arm reads as the rule it applies (SPEC §2, §5, and
//! the usage rules of docs/SPEC.md §9).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use crate::config::{PacingKey, UsageMode};
use crate::origin::dns::ResolveError;
use crate::origin::store::{OriginEntry, Policy, Snapshot};
use crate::policy::agent::Tokens;
use crate::policy::overrides::Applied;
use crate::policy::target::Target;
use crate::policy::usage::{UsageCheck, UsageVerdict};
use crate::robots::{Reason, RobotsTxt, Usage};

use super::{judge, judge_usage, Allowed, Decision, Enforcer, Pace, Refusal, UsageJudgement};

/// What the operator set for one request: the host's override, report mode, and the
/// usage check.
#[derive(Clone, Copy)]
pub(super) struct Operator<'a> {
    /// The operator's override for the host, if any.
    pub(super) applied: Option<Applied<'a>>,
    /// Report mode: refusals are forwarded, marked.
    pub(super) report: bool,
    /// The usage check for the crawler's declared purposes.
    pub(super) usage: UsageCheck,
}

/// One request being decided: its target, where its name resolved, its origin's entry
/// and robots.txt snapshot, and what the operator set.
pub(super) struct Facts<'a> {
    /// Where it goes.
    pub(super) target: &'a Target,
    /// Its name's addresses, or why it has none.
    pub(super) resolved: &'a Result<Vec<IpAddr>, ResolveError>,
    /// Its origin's entry.
    pub(super) entry: &'a Arc<OriginEntry>,
    /// The robots.txt copy decided on.
    pub(super) snapshot: &'a Arc<Snapshot>,
    /// What the operator set for it.
    pub(super) operator: Operator<'a>,
}

/// What an allowed request (or, in report mode, one carrying the refusal it replaces)
/// is forwarded with.
struct Forward {
    /// Why it may go.
    why: Allowed,
    /// Its robots.txt group's name (the schedule it joins).
    group: String,
    /// The group's Crawl-delay, if any.
    crawl_delay: Option<f64>,
    /// Report mode: the refusal it replaces.
    reported: Option<Refusal>,
    /// The usage verdict to mark the response with.
    usage: Option<UsageVerdict>,
}

impl Enforcer {
    /// The decision for `facts`, the crawler being `tokens`.
    pub(super) fn decide_on(&self, facts: &Facts<'_>, tokens: &Tokens<'_>) -> Decision {
        // A client's `/robots.txt` is answered from the store, never fetched again on its
        // own: it would reach the origin unpaced (and, when unreadable, over and over).
        if facts.target.path.is_robots_txt() {
            return Decision::Refuse(Refusal::RobotsTxt {
                robots_url: facts.target.origin.robots_url(),
                snapshot: facts.snapshot.clone(),
            });
        }
        match &facts.snapshot.policy {
            Policy::Rules(file) => self.on_rules(facts, &file.robots, tokens),
            Policy::AllowAll { .. } => self.on_allow_all(facts),
            Policy::DisallowAll { .. } => self.on_disallow_all(facts),
        }
    }

    /// A robots.txt held: the verdict for the crawler's group, then (allowed) its
    /// usage verdict; report mode forwards what enforcing would refuse, marked.
    fn on_rules(&self, facts: &Facts<'_>, robots: &RobotsTxt, tokens: &Tokens<'_>) -> Decision {
        let (target, check) = (facts.target, &facts.operator.usage);
        let judged = judge(robots, target, tokens);
        let (verdict, group) = (&judged.verdict, judged.group);
        // Crawlers in one group share a schedule; the group's first name is its stable
        // identity across refreshes of the file.
        let group_name = group
            .and_then(|g| robots.group(g))
            .and_then(|g| g.agents.first())
            .map_or(String::new(), |name| name.to_ascii_lowercase());
        let why = match verdict.reason {
            Reason::Rule(rule) => Allowed::Rule { line: rule.line },
            Reason::NoGroup => Allowed::NoGroup,
            Reason::RobotsTxtItself => Allowed::RobotsTxtItself,
            Reason::NoMatchingRule => Allowed::NoMatchingRule,
        };
        let forward = |reported, usage| Forward {
            why,
            group: group_name.clone(),
            crawl_delay: robots.crawl_delay(group),
            reported,
            usage,
        };
        if !verdict.allowed {
            let refusal = Refusal::Disallowed {
                robots_url: target.origin.robots_url(),
                path: target.path.to_string(),
                rule: verdict.rule().map(ToString::to_string).unwrap_or_default(),
                pattern: verdict
                    .rule()
                    .map(|r| r.pattern.to_string())
                    .unwrap_or_default(),
                line: verdict.rule().map_or(0, |r| r.line),
                read_as: judged.read_as.as_ref().map(ToString::to_string),
            };
            if facts.operator.report {
                return self.forward(facts, forward(Some(refusal), None));
            }
            return Decision::Refuse(refusal);
        }
        if !check.active() {
            return self.forward(facts, forward(None, None));
        }
        let UsageJudgement {
            verdict: judged,
            usage,
        } = judge_usage(robots, &judged, target, check);
        match usage_refusal(facts, judged, &usage) {
            Some(refusal) if check.mode == UsageMode::Enforce => Decision::Refuse(refusal),
            refusal => self.forward(facts, forward(refusal, Some(judged))),
        }
    }

    /// No robots.txt (4xx, redirects exhausted, unreachable for long): everything is
    /// allowed, and no usage preference is stated (every purpose unknown).
    fn on_allow_all(&self, facts: &Facts<'_>) -> Decision {
        let check = &facts.operator.usage;
        let judged = check.active().then(|| check.judge(&Usage::NONE));
        let refusal = judged.and_then(|j| usage_refusal(facts, j, &Usage::NONE));
        let forward = |reported| Forward {
            why: Allowed::NoRobotsTxt,
            group: String::new(),
            crawl_delay: None,
            reported,
            usage: judged,
        };
        match refusal {
            Some(refusal) if check.mode == UsageMode::Enforce => Decision::Refuse(refusal),
            refusal => self.forward(facts, forward(refusal)),
        }
    }

    /// robots.txt unreachable and no usable copy: disallow all (report mode forwards,
    /// marked).
    fn on_disallow_all(&self, facts: &Facts<'_>) -> Decision {
        let refusal = Refusal::RobotsUnreachable {
            robots_url: facts.target.origin.robots_url(),
            snapshot: facts.snapshot.clone(),
        };
        if !facts.operator.report {
            return Decision::Refuse(refusal);
        }
        let forward = Forward {
            why: Allowed::NoRobotsTxt,
            group: String::new(),
            crawl_delay: None,
            reported: Some(refusal),
            usage: None,
        };
        self.forward(facts, forward)
    }

    /// A forward decision: where it connects (the first approved address) and which
    /// pacing schedule it joins, with the delay in force.
    fn forward(&self, facts: &Facts<'_>, forward: Forward) -> Decision {
        let origin = &facts.target.origin;
        let addrs = match facts.resolved {
            Ok(addrs) => addrs,
            Err(e) => {
                return Decision::Refuse(Refusal::DnsFailure {
                    origin: origin.to_string(),
                    error: e.clone(),
                })
            }
        };
        let config = self.pacer.config();
        let applied = facts.operator.applied;
        let override_delay = applied.and_then(|a| a.entry.delay_seconds).map(|s| s.get());
        let (delay, rule) = self.pacer.delay_for(
            facts.entry.schedules(),
            origin,
            &forward.group,
            forward.crawl_delay,
            override_delay,
        );
        let address = (config.key == PacingKey::Address).then(|| self.store.address(addrs[0]));
        Decision::Forward {
            addr: SocketAddr::new(addrs[0], origin.port),
            why: forward.why,
            pace: Pace {
                entry: facts.entry.clone(),
                address,
                group: forward.group,
                delay,
                rule,
                max_in_flight: applied
                    .and_then(|a| a.entry.max_in_flight)
                    .unwrap_or(config.max_in_flight),
                report: facts.operator.report,
                robots_fetched_at: facts.snapshot.fetched_at,
            },
            reported: forward.reported.map(Box::new),
            usage: forward.usage,
        }
    }
}

/// The usage refusal `judged` comes to, naming the statement that refused (none when
/// the request is not refused).
fn usage_refusal(facts: &Facts<'_>, judged: UsageVerdict, usage: &Usage<'_>) -> Option<Refusal> {
    let refused = judged.refusal()?;
    Some(Refusal::UsageRefused {
        robots_url: facts.target.origin.robots_url(),
        path: facts.target.path.to_string(),
        purpose: refused.purpose,
        rule: usage.preference(refused.purpose).1.map(ToString::to_string),
        line: refused.line,
        verdict: judged,
    })
}
