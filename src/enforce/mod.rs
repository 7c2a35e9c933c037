//! Enforcement as a library: the two calls a Pingora `ProxyHttp` makes per request.
//!
//! [`Enforcer::decide`] takes where a request goes ([`Target`]) and who sends it, and
//! answers either "forward to this address" or "answer the client with this": the
//! egress checks, the robots.txt lookup (fetching it if needed) and the verdict, in that
//! order. [`Enforcer::pace`] then waits for the request's Crawl-delay slot and returns
//! the [`Permit`] to hold until the origin's exchange has ended. Neither knows Pingora's
//! session types, so any proxy — robotsgate's own (`proxy.rs`) or someone else's
//! (`examples/embedded.rs`) — can call them from its `request_filter` and write the
//! [`Answer`] however it writes responses.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::PacingKey;
use crate::config::UsageMode;
use crate::config::{Config, ExchangeBounds};
use crate::identity::payment::Budget;
use crate::identity::{Identities, Signer};
pub use crate::origin::dns::ResolveError;
use crate::origin::dns::Resolver;
use crate::origin::fetch::Fetcher;
use crate::origin::store::{OriginEntry, OriginStore};
pub use crate::origin::store::{Policy, Snapshot};
use crate::origin::trust::UpstreamTrust;
use crate::pacing::backend::Fleet;
pub use crate::pacing::DelayRule;
use crate::pacing::{PaceRequest, Pacer, RefusalReason};
use crate::policy::agent::{AgentResolver, ModeChoice, Requester, Tokens};
pub use crate::policy::answer::{bad_request, egress_denied, Answer, Outcome};
use crate::policy::egress::EgressPolicy;
use crate::policy::overrides::Overrides;
use crate::policy::target::{Origin, Target};
use crate::policy::usage::{UsageCheck, UsageVerdict};
use crate::robots::{Reason, Usage};

pub mod budgets;
mod judge;
mod reply;
pub use judge::{judge, judge_usage, Judgement, UsageJudgement};
pub use reply::{Reply, Reported};

/// Why a request may go through; small and `Copy`, formatted only when logged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Allowed {
    /// An `Allow` rule on this line was the longest match.
    Rule {
        /// The rule's line in robots.txt.
        line: u32,
    },
    /// No rule matched the path.
    NoMatchingRule,
    /// No group for the crawler and no `*` group.
    NoGroup,
    /// The origin has no robots.txt (4xx, redirects exhausted, or unreachable for long).
    NoRobotsTxt,
    /// The path is `/robots.txt` itself.
    RobotsTxtItself,
}

impl std::fmt::Display for Allowed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Allowed::Rule { line } => write!(f, "allow rule at line {line}"),
            Allowed::NoMatchingRule => f.write_str("no matching rule"),
            Allowed::NoGroup => f.write_str("no group for this agent"),
            Allowed::NoRobotsTxt => f.write_str("no robots.txt"),
            Allowed::RobotsTxtItself => f.write_str("/robots.txt is always allowed"),
        }
    }
}

/// Where an allowed request queues: its origin's entry, its robots.txt group's schedule
/// there, and the delay in force.
#[derive(Clone)]
pub struct Pace {
    entry: Arc<OriginEntry>,
    /// With `pacing.key: address`, the entry of the address the request goes to.
    address: Option<Arc<OriginEntry>>,
    /// The robots.txt group (its first agent name, lower-cased; empty: none or `*`).
    pub group: String,
    /// The delay between one request's end and the next one's start.
    pub delay: Duration,
    /// Which rule set the delay (`crawl-delay`, `floor`, `override`, `none`).
    pub rule: DelayRule,
    /// Requests in flight to the origin at once (0: no limit).
    pub max_in_flight: usize,
    /// Report mode: record the wait instead of waiting.
    pub report: bool,
    robots_fetched_at: Option<Instant>,
}

impl std::fmt::Debug for Pace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pace")
            .field("origin", self.entry.origin())
            .field("group", &self.group)
            .field("delay", &self.delay)
            .finish_non_exhaustive()
    }
}

/// A request's leave to go upstream, from [`Enforcer::pace`]: its turns on its origin's
/// pacing schedules, held for as long as the origin's exchange lasts. Tell it how the
/// origin answered ([`Permit::origin_answered_read_late`]) and how the exchange ended
/// ([`Permit::end`]); the turns end then, and the next delay counts from there.
///
/// A permit dropped without [`Permit::end`] — a request future dropped mid-exchange, an
/// error path that never said — counts as [`ExchangeEnd::Cut`]: robotsgate closed the
/// connection while the origin may still be answering, so its turns are held
/// [`ExchangeBounds::linger`] more. Ending turns also forgets the schedules left with
/// nothing in force, so an idle origin holds no pacing state.
pub struct Permit {
    turns: Option<crate::pacing::Permit>,
    entry: Arc<OriginEntry>,
    address: Option<Arc<OriginEntry>>,
    /// When the exchange must have ended (past it, it is cut).
    deadline: Instant,
    /// How long turns are held after a cut.
    linger: Duration,
}

/// How an upstream exchange ended, as the origin saw it: what decides when its turns end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExchangeEnd {
    /// The response was read to its end.
    Complete,
    /// The origin closed, reset or refused the connection, or never answered the
    /// connect: it is not working on the request.
    OriginFailed,
    /// robotsgate closed the connection before the response's end: the origin may still
    /// be working on the request, so the turns are held [`ExchangeBounds::linger`] more.
    Cut(Cut),
}

/// Why robotsgate cut an exchange.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cut {
    /// The origin or the client was silent past its timeout.
    Timeout,
    /// Longer than `pacing.max_exchange_seconds`.
    MaxExchange,
    /// Anything else (an error on either side, a request dropped mid-exchange).
    Other,
}

impl ExchangeEnd {
    /// Its index among `robotsgate_upstream_exchange_ends_total`'s `end` labels
    /// (`complete`, `origin_failed`, `cut_timeout`, `cut_max_exchange`, `cut_other`).
    fn index(self) -> usize {
        match self {
            ExchangeEnd::Complete => 0,
            ExchangeEnd::OriginFailed => 1,
            ExchangeEnd::Cut(Cut::Timeout) => 2,
            ExchangeEnd::Cut(Cut::MaxExchange) => 3,
            ExchangeEnd::Cut(Cut::Other) => 4,
        }
    }
}

impl std::ops::Deref for Permit {
    type Target = crate::pacing::Permit;

    fn deref(&self) -> &Self::Target {
        self.turns
            .as_ref()
            .expect("a permit's turns are taken only when it ends")
    }
}

impl Permit {
    /// When the exchange must have ended: a response still running then is cut.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// The exchange ended so: the turns end now, or after the linger when cut.
    pub fn end(mut self, end: ExchangeEnd) {
        crate::telemetry::metrics::record_exchange_end(end.index());
        if !matches!(end, ExchangeEnd::Cut(_)) {
            self.release();
        }
        // A cut: `Drop` holds the turns for the linger.
    }

    /// Ends the turns now.
    fn release(&mut self) {
        if let Some(turns) = self.turns.take() {
            end_turns(turns, &self.entry, self.address.as_ref());
        }
    }
}

/// Ends a request's turns on its schedules (the next delay counts from now) and forgets
/// the schedules left with nothing in force.
fn end_turns(
    turns: crate::pacing::Permit,
    entry: &OriginEntry,
    address: Option<&Arc<OriginEntry>>,
) {
    drop(turns);
    entry.schedules().forget_idle();
    if let Some(address) = address {
        address.schedules().forget_idle();
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let Some(turns) = self.turns.take() else {
            return;
        };
        // Cut (or never told): held for the linger, on the runtime it was dropped on.
        let (linger, entry, address) = (self.linger, self.entry.clone(), self.address.take());
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) if !linger.is_zero() => {
                runtime.spawn(async move {
                    tokio::time::sleep(linger).await;
                    end_turns(turns, &entry, address.as_ref());
                });
            }
            _ => end_turns(turns, &entry, address.as_ref()),
        }
    }
}

/// What to do with a request: data. Everything but [`Decision::Forward`] is answered by
/// robotsgate itself, rendered into the client's answer in one place ([`Reply::answer`]).
#[derive(Debug)]
pub enum Decision {
    /// Allowed: wait for `pace` (see [`Enforcer::pace`]), then connect to `addr` and send
    /// the target's canonical path.
    Forward {
        /// The approved address to connect to.
        addr: SocketAddr,
        /// Why it may go.
        why: Allowed,
        /// Its pacing schedule and delay.
        pace: Pace,
        /// Report mode: what enforcing would have answered instead (a robots.txt or a
        /// usage refusal).
        reported: Option<Box<Reply>>,
        /// The usage verdict for the crawler's declared purposes (none declared, or
        /// `usage.mode: off`: `None`), to mark the response with (`X-Robots-Usage`).
        usage: Option<UsageVerdict>,
    },
    /// Answer the client with this; the origin is not contacted.
    Respond(Reply),
}

/// Enforcement for one proxy: the origin store, pacing, name resolution, egress and
/// agent rules, built from the configuration. Shared by every request (`Arc`).
pub struct Enforcer {
    pub(crate) store: Arc<OriginStore>,
    pub(crate) pacer: Arc<Pacer>,
    /// The shared backend, in fleet mode.
    pub(crate) fleet: Option<Arc<Fleet>>,
    resolver: Arc<Resolver>,
    egress: Arc<EgressPolicy>,
    pub(crate) agents: AgentResolver,
    overrides: Overrides,
    /// How long an exchange may hold its turns.
    bounds: ExchangeBounds,
    /// The identities forwarded requests are signed as.
    identities: Arc<Identities>,
}

impl Enforcer {
    /// Everything from the configuration; fails only when `tls.upstream_extra_roots`
    /// or a signing key cannot be read.
    pub fn from_config(config: &Config) -> anyhow::Result<Enforcer> {
        let trust = UpstreamTrust::load(&config.tls.upstream_extra_roots)?;
        let identities = Arc::new(Identities::load(&config.signing, &config.agent)?);
        let enforcer = Self::with_trust(config, &trust, identities)?;
        enforcer.run_in_background()?;
        Ok(enforcer)
    }

    /// Starts what runs beside requests (in fleet mode, the backend's connection and
    /// listener). [`Enforcer::from_config`] does it; a daemon does it after its fork.
    pub fn run_in_background(&self) -> std::io::Result<()> {
        self.store.run_in_background()
    }

    /// As [`Enforcer::from_config`], with the origin roots and the signing identities
    /// already loaded (a server shares them with its proxy connector and its directory
    /// listener). Nothing runs in the background until
    /// [`Enforcer::run_in_background`].
    pub(crate) fn with_trust(
        config: &Config,
        trust: &UpstreamTrust,
        identities: Arc<Identities>,
    ) -> anyhow::Result<Enforcer> {
        let resolver = Arc::new(Resolver::new(&config.dns));
        let egress =
            Arc::new(EgressPolicy::new(&config.egress).refusing_own(own_listeners(config)));
        let fetches_signed_as = config
            .agent
            .default_identity
            .as_deref()
            .and_then(|name| identities.get(name).cloned());
        let fetcher = Arc::new(
            Fetcher::new(
                resolver.clone(),
                egress.clone(),
                config.robots.fetch_timeout_seconds.duration(),
                config.robots.max_redirects,
                trust.ca_file(),
                config.robots.user_agent.clone(),
                crate::origin::loops::OwnTraffic::new(&config.transparent),
            )
            .signed_as(fetches_signed_as)
            .http2(config.upstream.http2 == crate::config::Http2::Auto),
        );
        let fleet = config
            .fleet
            .enabled()
            .then(|| Fleet::new(&config.fleet, config.fleet_lease()));
        let pacer = Arc::new(Pacer::with_fleet(config.pacing.clone(), fleet.clone()));
        if let Some(fleet) = &fleet {
            // Budgets are the fleet's: counted in its backend by every instance.
            let hold = config.exchange_bounds().longest_hold();
            let tally = Arc::new(budgets::FleetTally::new(fleet.clone(), hold));
            for budget in identities.budgets() {
                budget.share(tally.clone());
            }
        }
        let store = OriginStore::new(fetcher, pacer.clone(), config.robots.clone(), fleet.clone());
        Ok(Enforcer {
            store,
            pacer,
            fleet,
            resolver,
            egress,
            agents: AgentResolver::new(
                &config.agent,
                &config.enforce,
                &config.usage,
                &config.signing.users,
            ),
            overrides: Overrides::new(&config.pacing.overrides),
            bounds: config.exchange_bounds(),
            identities,
        })
    }

    /// Decides one request from `who`.
    pub async fn decide(&self, target: &Target, who: &Requester<'_>) -> Decision {
        self.decide_to(target, who, None).await
    }

    /// As [`Enforcer::decide`], for a redirected connection on its way to `destination`
    /// (see [`Enforcer::decide_explained`]).
    pub async fn decide_to(
        &self,
        target: &Target,
        who: &Requester<'_>,
        destination: Option<SocketAddr>,
    ) -> Decision {
        let tokens = self.tokens(who);
        let usage = self.agents.usage_for(who);
        self.decide_explained(
            target,
            &tokens,
            self.reports(who).report,
            usage,
            destination,
        )
        .await
        .0
    }

    /// What `who`'s forwarded requests are signed as, and the budget that pays for
    /// them, if any.
    pub fn signer(&self, who: &Requester<'_>) -> Option<Signer> {
        let sign_as = self.agents.signing_for(who)?;
        self.identities.signer(sign_as.identity, sign_as.rule)
    }

    /// Every pay-per-crawl budget, for the status page.
    pub fn budgets(&self) -> Vec<&Arc<Budget>> {
        self.identities.budgets()
    }

    /// The usage check for `who`: its declared purposes and usage mode.
    pub fn usage_check(&self, who: &Requester<'_>) -> UsageCheck {
        self.agents.usage_for(who)
    }

    /// Is `who` in report mode (`enforce.mode`, `report_clients`, `report_users`, or
    /// its agent rule's `mode`), and which of these chose?
    pub fn reports(&self, who: &Requester<'_>) -> ModeChoice {
        self.agents.reports(who)
    }

    /// The robots.txt tokens `who` is judged as (resolve them once per request and hand
    /// them to [`Enforcer::decide_explained`] when they are needed elsewhere too).
    pub fn tokens<'a>(&'a self, who: &Requester<'a>) -> Tokens<'a> {
        self.agents.tokens_for(who)
    }

    /// As [`Enforcer::decide`], for a crawler already resolved to `tokens`, with the
    /// robots.txt snapshot the decision was made from (none when the egress check
    /// answered first), so `/check` can explain exactly it. A `destination` (a
    /// redirected connection's original destination) is where an allowed request goes,
    /// when it is one of the origin's addresses; otherwise the answer is a
    /// [`Reply::HostMismatch`].
    pub async fn decide_explained(
        &self,
        target: &Target,
        tokens: &Tokens<'_>,
        report: bool,
        usage: UsageCheck,
        destination: Option<SocketAddr>,
    ) -> (Decision, Option<Arc<Snapshot>>) {
        let origin = &target.origin;
        let resolved = match self.check_egress(origin).await {
            Ok(resolved) => resolved,
            Err(refusal) => return (Decision::Respond(Reply::EgressDenied(refusal)), None),
        };
        let resolved = match (destination, resolved) {
            (Some(d), Ok(addrs)) => {
                if d.port() != origin.port || !addrs.contains(&d.ip()) {
                    let reply = Reply::HostMismatch {
                        origin: origin.to_string(),
                        destination: d,
                    };
                    return (Decision::Respond(reply), None);
                }
                Ok(vec![d.ip()])
            }
            (_, resolved) => resolved,
        };
        let applied = self.overrides.find(origin);
        if let Some(blocked) = applied.filter(|a| a.entry.block) {
            let reply = Reply::Blocked {
                pattern: blocked.entry.host.clone(),
                reason: blocked.entry.reason.clone(),
            };
            return (Decision::Respond(reply), None);
        }
        let (entry, snapshot) = self.store.get(origin).await;
        let operator = Operator {
            applied,
            report,
            usage,
        };
        let decision = self.decide_on(target, tokens, &resolved, (&entry, &snapshot), operator);
        (decision, Some(snapshot))
    }

    /// The decision from what is known: where the name resolved, the origin's entry and
    /// its robots.txt snapshot, and what the operator set for the request.
    fn decide_on(
        &self,
        target: &Target,
        tokens: &Tokens<'_>,
        resolved: &Result<Vec<IpAddr>, ResolveError>,
        (entry, snapshot): (&Arc<OriginEntry>, &Arc<Snapshot>),
        Operator {
            applied,
            report,
            usage: check,
        }: Operator<'_>,
    ) -> Decision {
        let origin = &target.origin;
        let config = self.pacer.config();
        // An allowed request (or, in report mode, one carrying the refusal it replaces):
        // where it connects and which pacing schedule it joins.
        let forward = |why: Allowed,
                       group: String,
                       crawl_delay: Option<f64>,
                       reported: Option<Reply>,
                       usage: Option<UsageVerdict>| match &resolved {
            Ok(addrs) => {
                let override_delay = applied.and_then(|a| a.entry.delay_seconds).map(|s| s.get());
                let (delay, rule) = self.pacer.delay_for(
                    entry.schedules(),
                    origin,
                    &group,
                    crawl_delay,
                    override_delay,
                );
                let address =
                    (config.key == PacingKey::Address).then(|| self.store.address(addrs[0]));
                Decision::Forward {
                    addr: SocketAddr::new(addrs[0], origin.port),
                    why,
                    pace: Pace {
                        entry: entry.clone(),
                        address,
                        group,
                        delay,
                        rule,
                        max_in_flight: applied
                            .and_then(|a| a.entry.max_in_flight)
                            .unwrap_or(config.max_in_flight),
                        report,
                        robots_fetched_at: snapshot.fetched_at,
                    },
                    reported: reported.map(Box::new),
                    usage,
                }
            }
            Err(e) => Decision::Respond(Reply::DnsFailure {
                origin: origin.to_string(),
                error: e.clone(),
            }),
        };
        // Only answers name the robots.txt URL: format it only for them.
        let robots_url = || origin.robots_url();
        // A client's `/robots.txt` is answered from the store, never fetched again on its
        // own: it would reach the origin unpaced (and, when unreadable, over and over).
        if target.path.is_robots_txt() {
            return Decision::Respond(Reply::RobotsTxt {
                robots_url: robots_url(),
                snapshot: snapshot.clone(),
            });
        }
        match &snapshot.policy {
            Policy::Rules(file) => {
                let robots = &file.robots;
                let judged = judge(robots, target, tokens);
                let (verdict, group) = (&judged.verdict, judged.group);
                // Crawlers in one group share a schedule; the group's first name is its
                // stable identity across refreshes of the file.
                let group_name = || {
                    group
                        .and_then(|g| robots.group(g))
                        .and_then(|g| g.agents.first())
                        .map_or(String::new(), |name| name.to_ascii_lowercase())
                };
                let why = match verdict.reason {
                    Reason::Rule(rule) => Allowed::Rule { line: rule.line },
                    Reason::NoGroup => Allowed::NoGroup,
                    Reason::RobotsTxtItself => Allowed::RobotsTxtItself,
                    Reason::NoMatchingRule => Allowed::NoMatchingRule,
                };
                if verdict.allowed {
                    let delay = robots.crawl_delay(group);
                    if !check.active() {
                        return forward(why, group_name(), delay, None, None);
                    }
                    let UsageJudgement {
                        verdict: judged,
                        usage,
                    } = judge_usage(robots, &judged, target, &check);
                    let Some(refused) = judged.refusal() else {
                        return forward(why, group_name(), delay, None, Some(judged));
                    };
                    let refusal = Reply::UsageRefused {
                        robots_url: robots_url(),
                        path: target.path.to_string(),
                        purpose: refused.purpose,
                        rule: usage.preference(refused.purpose).1.map(ToString::to_string),
                        line: refused.line,
                        verdict: judged,
                    };
                    if check.mode == UsageMode::Report {
                        return forward(why, group_name(), delay, Some(refusal), Some(judged));
                    }
                    return Decision::Respond(refusal);
                }
                let refusal = Reply::Disallowed {
                    robots_url: robots_url(),
                    path: target.path.to_string(),
                    rule: verdict.rule().map(ToString::to_string).unwrap_or_default(),
                    pattern: verdict
                        .rule()
                        .map(|r| r.pattern.to_string())
                        .unwrap_or_default(),
                    line: verdict.rule().map_or(0, |r| r.line),
                    read_as: judged.read_as.as_ref().map(ToString::to_string),
                };
                if report {
                    let delay = robots.crawl_delay(group);
                    return forward(why, group_name(), delay, Some(refusal), None);
                }
                Decision::Respond(refusal)
            }
            Policy::AllowAll { .. } => {
                // No robots.txt: no usage preferences either, every purpose unknown.
                let judged = check.active().then(|| check.judge(&Usage::NONE));
                let refusal =
                    judged
                        .and_then(|j| j.refusal().copied())
                        .map(|first| Reply::UsageRefused {
                            robots_url: robots_url(),
                            path: target.path.to_string(),
                            purpose: first.purpose,
                            rule: None,
                            line: None,
                            verdict: judged.unwrap_or_default(),
                        });
                match refusal {
                    Some(refusal) if check.mode == UsageMode::Enforce => Decision::Respond(refusal),
                    refusal => forward(Allowed::NoRobotsTxt, String::new(), None, refusal, judged),
                }
            }
            Policy::DisallowAll { .. } => {
                let refusal = Reply::RobotsUnreachable {
                    robots_url: robots_url(),
                    snapshot: snapshot.clone(),
                };
                if report {
                    return forward(
                        Allowed::NoRobotsTxt,
                        String::new(),
                        None,
                        Some(refusal),
                        None,
                    );
                }
                Decision::Respond(refusal)
            }
        }
    }
}

/// Every address robotsgate listens on (proxy, admin, key directory, transparent), as
/// the egress check refuses them.
fn own_listeners(config: &Config) -> crate::policy::egress::OwnListeners {
    let listeners = [config.listen]
        .into_iter()
        .chain(config.admin_listen)
        .chain(config.signing.directory_listen)
        .chain(config.transparent.http_listen)
        .chain(config.transparent.tls_listen)
        .collect();
    crate::policy::egress::OwnListeners::new(listeners, crate::origin::loops::local_addresses())
}

/// What the operator set for one request: the host's override, report mode, and the
/// usage check.
#[derive(Clone, Copy)]
struct Operator<'a> {
    applied: Option<crate::policy::overrides::Applied<'a>>,
    report: bool,
    /// The usage check for the crawler's declared purposes.
    usage: UsageCheck,
}

impl Enforcer {
    /// The egress checks alone: the destination port, then every resolved address. `Err`
    /// says why the destination is refused (a 403). A failed lookup passes (`Ok(Err(_))`): robots.txt is then
    /// unreachable too, and that decides (SPEC §2).
    pub(crate) async fn check_egress(
        &self,
        origin: &Origin,
    ) -> Result<Result<Vec<IpAddr>, ResolveError>, String> {
        crate::origin::dns::allowed_destination(&self.resolver, &self.egress, origin)
            .await
            .map_err(|refusal| refusal.to_string())
    }

    /// Waits for the request's pacing slot. The returned [`Permit`] must be held until
    /// the origin's exchange has ended, then told how ([`Permit::end`]); report the
    /// origin's status to it. An `Err` is the 503 to send instead.
    pub async fn pace(&self, pace: &Pace) -> Result<Permit, Answer> {
        let request = PaceRequest {
            place: pace.entry.place(),
            address: pace.address.as_deref().map(OriginEntry::place),
            group: &pace.group,
            delay: pace.delay,
            rule: pace.rule,
            max_in_flight: pace.max_in_flight,
            robots_fetched_at: pace.robots_fetched_at,
        };
        let permit = |turns| Permit {
            turns: Some(turns),
            entry: pace.entry.clone(),
            address: pace.address.clone(),
            deadline: Instant::now() + self.bounds.max_exchange,
            linger: self.bounds.linger,
        };
        if pace.report {
            let (turns, would_wait) = self.pacer.report(request);
            crate::telemetry::metrics::record_would_wait(would_wait.as_secs_f64());
            return Ok(permit(turns));
        }
        match self.pacer.pace(request).await {
            Ok(turns) => {
                crate::telemetry::metrics::record_pacing_wait(turns.waited.as_secs_f64());
                Ok(permit(turns))
            }
            Err(refused) => {
                let retry = refused.retry_after.as_secs_f64().ceil().max(1.0) as u64;
                let reason = match refused.reason {
                    RefusalReason::QueueFull => "queue-full",
                    RefusalReason::WaitTooLong => "wait-too-long",
                    RefusalReason::FleetUnavailable => "fleet-backend-unavailable",
                };
                let backoff = refused
                    .backed_off_for
                    .map(|b| format!("; backed-off-for={:.1}", b.as_secs_f64()))
                    .unwrap_or_default();
                let mut answer = Answer::text(
                    503,
                    Outcome::PacedRejected,
                    format!(
                        "paced; reason={reason}; delay={:.3}; retry-after={retry}{backoff}",
                        pace.delay.as_secs_f64()
                    ),
                    format!(
                        "robotsgate: {refused} for {} (one request every {:.3} s). Retry in {retry} s.",
                        pace.entry.origin(),
                        pace.delay.as_secs_f64()
                    ),
                );
                answer.retry_after = Some(retry);
                Err(answer)
            }
        }
    }
}
