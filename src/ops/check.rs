//! `/check?url=…`: "why was this URL blocked?" — the decision a request would get,
//! made by the same judgement the proxy makes (the store consulted, robots.txt fetched
//! if not held; the URL itself never requested), with the rule, its line and group, the
//! usage statements and the robots.txt fetch state.

use std::net::IpAddr;

use http::Response;
use serde_json::{json, Value};

use crate::config::{Purpose, UsageMode};
use crate::enforce::{judge, judge_usage, Decision, Judgement, UsageJudgement};
use crate::origin::store::Policy;
use crate::policy::agent::{Requester, Tokens};
use crate::policy::target::{Scheme, Target};
use crate::policy::usage::UsageCheck;
use crate::robots::{Purposes, Reason, RobotsTxt};

use super::admin::{error, json_reply, robots_state, AdminApp};

impl AdminApp {
    /// `/check`: the decision a request would get, from the same judgement the proxy
    /// makes, explained (rule, line, groups, usage statements, robots.txt state).
    pub(super) async fn check(&self, query: &str) -> Response<Vec<u8>> {
        let q = match CheckQuery::parse(query) {
            Ok(q) => q,
            Err(answer) => return *answer,
        };
        let who = Requester::new(q.client, q.agent.as_deref());
        let tokens = self.enforcer.tokens(&who);
        let mode = self.enforcer.reports(&who);
        // `purpose=` judges for those purposes, in the client's usage mode (enforce when
        // that is off, so the check says what enforcing would do).
        let mut usage = self.enforcer.usage_check(&who);
        if let Some(purposes) = q.purposes {
            usage.purposes = purposes;
            if usage.mode == UsageMode::Off {
                usage.mode = UsageMode::Enforce;
            }
        }
        let (decision, snapshot) = self
            .enforcer
            .decide_explained(&q.target, &tokens, mode.report, usage, None)
            .await;
        let mut out = json!({
            "url": q.url,
            "origin": q.target.origin.to_string(),
            "path": q.target.path.as_str(),
            "agent": q.agent,
        });
        describe_decision(&mut out, &decision, mode.report);
        out["tokens"] = json!(tokens.list());
        out["tokens_from"] = json!(tokens.source());
        out["mode_from"] = json!(mode.from.label());
        // The Web Bot Auth identity a forwarded request would be signed as.
        let signer = self.enforcer.signer(&who);
        out["identity"] = json!(signer.as_ref().map(|s| s.identity.name.clone()));
        out["budget"] = json!(signer.and_then(|s| s.budget).map(|b| b.name.clone()));
        // The verdict's details: the same judgement, of the very snapshot decided on.
        if let Some(snapshot) = snapshot {
            if let Policy::Rules(file) = &snapshot.policy {
                explain_rules(&mut out, &file.robots, &q.target, &tokens, &usage);
            }
            if let Some(view) = self.enforcer.origin_view(&q.target.origin) {
                out["robots"] = robots_state(&view, &snapshot);
            }
        }
        json_reply(200, &out)
    }
}

/// What `/check` was asked: the URL (and its target), the User-Agent, the client
/// address and the purposes to judge for.
struct CheckQuery {
    /// The URL as given.
    url: String,
    /// Its target.
    target: Target,
    /// `agent=`: the User-Agent the request would carry.
    agent: Option<String>,
    /// `client=`: the address it would come from.
    client: Option<IpAddr>,
    /// `purpose=`: the purposes to judge for.
    purposes: Option<Purposes>,
}

impl CheckQuery {
    /// Reads `/check`'s query; `Err` is the 400 to answer.
    fn parse(query: &str) -> Result<CheckQuery, Box<Response<Vec<u8>>>> {
        let (mut url, mut agent, mut client) = (None, None, None);
        let mut purposes: Option<Purposes> = None;
        for (key, value) in form_urlencoded::parse(query.as_bytes()) {
            match key.as_ref() {
                "url" => url = Some(value.into_owned()),
                "agent" => agent = Some(value.into_owned()),
                "client" => client = Some(value.into_owned()),
                "purpose" => {
                    for label in value.split(',').filter(|l| !l.is_empty()) {
                        let Some(purpose) = Purpose::from_label(label) else {
                            return Err(Box::new(error(
                                400,
                                format!("purpose: `{label}` is not search, train-ai or ai-input"),
                            )));
                        };
                        purposes = Some(purposes.unwrap_or_default().with(purpose));
                    }
                }
                _ => {}
            }
        }
        let url = url.ok_or_else(|| Box::new(error(400, "missing ?url=")))?;
        let target = Target::from_request(url.as_bytes(), None, Scheme::Http)
            .map_err(|e| Box::new(error(400, format!("url: {e}"))))?;
        let client = match client.map(|c| c.parse::<IpAddr>()) {
            Some(Ok(ip)) => Some(ip),
            Some(Err(_)) => return Err(Box::new(error(400, "client: not an IP address"))),
            None => None,
        };
        Ok(CheckQuery {
            url,
            target,
            agent,
            client,
            purposes,
        })
    }
}

/// `/check`'s decision, status and why (and, forwarded, where and how it is paced).
fn describe_decision(out: &mut Value, decision: &Decision, report: bool) {
    match decision {
        // `/check` decides here, without routing.
        Decision::HandOver(owner) => {
            out["decision"] = json!("handed_over");
            out["owner"] = json!(owner.member);
        }
        Decision::Forward {
            addr,
            why,
            pace,
            reported,
            usage: verdict,
        } => {
            if let Some(verdict) = verdict {
                out["usage_header"] = json!(verdict.header());
            }
            match reported {
                Some(reply) => {
                    let reported = reply.reported();
                    out["decision"] = json!(reported.outcome.label());
                    out["why"] = json!(reported.header);
                }
                None => {
                    out["decision"] = json!("allowed");
                    out["why"] = json!(why.to_string());
                }
            }
            out["mode"] = json!(if report { "report" } else { "enforce" });
            out["status"] = json!(200);
            out["address"] = json!(addr.to_string());
            out["crawl_delay_seconds"] = json!(pace.delay.as_secs_f64());
            out["delay_rule"] = json!(pace.rule.label());
            out["max_in_flight"] = json!(pace.max_in_flight);
        }
        Decision::Refuse(reply) => {
            let answer = reply.answer();
            out["decision"] = json!(answer.decision.label());
            out["status"] = json!(answer.status);
            out["why"] = json!(answer.header);
        }
    }
}

/// `/check`'s explanation of a verdict from a held robots.txt: the group, the rule and
/// its line, the lenient reading, and the usage statements.
fn explain_rules(
    out: &mut Value,
    robots: &RobotsTxt,
    target: &Target,
    tokens: &Tokens<'_>,
    usage: &UsageCheck,
) {
    let judged = judge(robots, target, tokens);
    let (verdict, group) = (&judged.verdict, judged.group);
    out["read_as"] = json!(judged.read_as.as_ref().map(ToString::to_string));
    out["group_line"] = json!(group
        .and_then(|g| robots.group(g))
        .and_then(|g| g.lines.first()));
    out["group_agents"] = json!(group.and_then(|g| robots.group(g)).map(|g| &g.agents));
    if let Reason::Rule(rule) = verdict.reason {
        out["rule"] = json!(format!("{rule}"));
        out["pattern"] = json!(rule.pattern);
        out["line"] = json!(rule.line);
    }
    if usage.active() && verdict.allowed {
        out["usage"] = usage_explained(robots, &judged, target, usage);
    }
}

/// `/check`'s usage details, judged as the proxy judges them ([`judge_usage`]): per
/// declared purpose, the statement that applied (its line, text and rule), what it says
/// and the result, and whether the request is refused.
fn usage_explained(
    robots: &RobotsTxt,
    judged: &Judgement<'_>,
    target: &Target,
    check: &UsageCheck,
) -> Value {
    let UsageJudgement { verdict, usage } = judge_usage(robots, judged, target, check);
    let purposes: Vec<_> = verdict
        .purposes()
        .map(|v| {
            let rule = usage.preference(v.purpose).1;
            json!({
                "purpose": v.purpose.label(),
                "preference": v.preference.token(),
                "result": if v.refused { "refused" } else { "allowed" },
                "line": v.line,
                "source": v.source.map(|s| s.label()),
                "rule": rule.map(ToString::to_string),
                "group_line": rule.map(|r| r.group_line),
            })
        })
        .collect();
    json!({
        // Usage rules are grouped as the attach draft groups them: the crawler's usage
        // group may start on another line than its Allow/Disallow group.
        "group_line": judged.usage_group.and_then(|g| robots.usage_group_line(g)),
        "too_many_rules": usage.overflowed(),
        "mode": match check.mode {
            UsageMode::Enforce => "enforce",
            UsageMode::Report => "report",
            UsageMode::Off => "off",
        },
        "refused": verdict.refused,
        "purposes": purposes,
    })
}
