//! Enforcement as a library: the calls a Pingora `ProxyHttp` makes per request.
//!
//! [`Enforcer::decide`] takes where a request goes ([`Target`]) and who sends it, and
//! answers with a [`Decision`]: forward to this address, or answer the client with
//! this: the egress checks, the robots.txt lookup (fetching it if needed) and the
//! verdict, in that order. [`Enforcer::judge_request`] and [`Enforcer::decide_tunnel`]
//! route first in fleet mode: a request whose origin another member owns is handed to
//! that owner ([`Decision::HandOver`]), unjudged, and only the others are decided.
//! [`Enforcer::pace`] then waits for the request's turn and returns the [`Turn`] to hold
//! until the origin's exchange has ended. None knows Pingora's session types, so any
//! proxy — robotsgate's own (`crate::proxy`) or someone else's (`examples/embedded.rs`)
//! — can call them from its `request_filter` and write the [`Answer`] however it writes
//! responses.
//!
//! **Its other files:** `decide.rs` (a decision made from what is known), `decision.rs`
//! (a decision as data), `judge.rs` (a target judged against a held robots.txt, pure),
//! `owned.rs` (which fleet member decides a request), `record.rs` (what a decision
//! leaves in the evidence), `refusal.rs` (what robotsgate
//! answers instead of the origin, rendered once), `stop.rs` (a graceful stop's deadline
//! for waiting requests), `tdm.rs` (TDMRep's file, judged before a request is sent), `turn.rs` (a request's turn as the proxy holds it),
//! `views.rs` (what the admin API, status page and server read of an `Enforcer`).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use crate::config::{Config, ExchangeBounds};
use crate::fleet::{Fleet, FleetTally, Owners, PeerTls};
use crate::identity::payment::Budget;
use crate::identity::{Identities, Signer};
pub use crate::origin::dns::ResolveError;
use crate::origin::dns::Resolver;
use crate::origin::fetch::Fetcher;
use crate::origin::store::OriginStore;
pub use crate::origin::store::{Policy, Snapshot};
use crate::origin::trust::UpstreamTrust;
pub use crate::pacing::DelayRule;
use crate::pacing::{Pacer, Refused, TurnRefusal};
use crate::policy::agent::{AgentResolver, ModeChoice, Requester, Tokens};
pub use crate::policy::answer::{bad_request, egress_denied, Answer, Outcome};
use crate::policy::egress::{EgressPolicy, Forbidden};
use crate::policy::overrides::Overrides;
use crate::policy::target::{Origin, Target};
use crate::policy::usage::UsageCheck;

mod decide;
use decide::{Facts, Operator};
mod decision;
mod judge;
mod owned;
mod record;
mod refusal;
mod stop;
mod tdm;
mod turn;
mod views;
pub use decision::{Allowed, Decision, Pace};
pub use judge::{judge, judge_usage, Judgement, UsageJudgement};
pub use record::Said;
pub use refusal::{Refusal, Reported};
pub use turn::{Cut, ExchangeEnd, Turn, Unpaced};
pub use views::{FleetView, OriginView};

/// Everything the proxy needs to act on one request ([`Enforcer::judge_request`]).
pub struct Judged {
    /// What to do with it.
    pub decision: Decision,
    /// What a forwarded request is signed as, and whose budget pays (`None` for a
    /// request answered by robotsgate).
    pub signer: Option<Signer>,
    /// Where its robots.txt tokens came from (`credential`, `rule`, …), for the log.
    pub tokens_from: &'static str,
    /// Which setting chose enforce or report mode, for the log.
    pub mode_from: &'static str,
    /// The robots.txt copy it was decided on (none: decided before one was looked at,
    /// or handed over), for its evidence record.
    pub snapshot: Option<Arc<Snapshot>>,
    /// Report mode: what it would be refused for is forwarded instead.
    pub report: bool,
}

/// Enforcement for one proxy: the origin store, pacing, name resolution, egress and
/// agent rules, built from the configuration. Shared by every request (`Arc`).
pub struct Enforcer {
    /// Every origin's robots.txt copy and pacing schedules.
    store: Arc<OriginStore>,
    /// The pacing settings and queue count.
    pacer: Arc<Pacer>,
    /// The fleet backend, in fleet mode.
    fleet: Option<Arc<Fleet>>,
    /// Who owns which origin, in fleet mode.
    owners: Option<Arc<Owners>>,
    /// Fleet mode: an owned key nobody asked for this long is released (zero: never).
    idle_release: std::time::Duration,
    /// `fleet.follow_traffic_seconds`: how often owned keys follow their traffic (zero:
    /// never).
    follow_traffic: std::time::Duration,
    /// Name resolution, cached by TTL.
    resolver: Arc<Resolver>,
    /// The evidence of every decision, when `evidence.dir` is set.
    evidence: Option<Arc<crate::evidence::Evidence>>,
    /// Where traffic may go.
    egress: Arc<EgressPolicy>,
    /// Which crawler a request is, its mode, purposes and identity.
    agents: AgentResolver,
    /// Operator rules per host (pacing overrides, blocks).
    overrides: Overrides,
    /// How long an exchange may hold its turns.
    bounds: ExchangeBounds,
    /// The identities forwarded requests are signed as.
    identities: Arc<Identities>,
    /// A graceful stop's deadline, once one began.
    stop: stop::Stop,
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

    /// Starts what runs beside requests (in fleet mode, the backend's connection, its
    /// listener and the membership). [`Enforcer::from_config`] does it; a daemon does it
    /// after its fork.
    pub fn run_in_background(&self) -> std::io::Result<()> {
        self.store.run_in_background()?;
        if let Some(evidence) = &self.evidence {
            evidence.run_in_background();
        }
        if let Some(owners) = &self.owners {
            owners.run_in_background();
        }
        Ok(())
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
        let tls = match config.fleet.enabled() {
            true => Some(peer_tls(config)?),
            false => None,
        };
        let fleet = tls.as_ref().map(|t| Fleet::new(&config.fleet, t.member()));
        let pacer = Arc::new(Pacer::new(config.pacing.clone()));
        let owners = match (&fleet, tls) {
            (Some(fleet), Some(tls)) => Some(fleet_owners(config, fleet, tls, &identities)),
            _ => None,
        };
        let store = OriginStore::new(fetcher, pacer.clone(), config.robots.clone(), fleet.clone());
        let (instance, member) = match &fleet {
            Some(fleet) => {
                let instance = fleet.instance().to_string();
                let member = crate::fleet::channel::member_of(&instance).to_string();
                (instance, member)
            }
            None => crate::evidence::lone_instance(),
        };
        let evidence = crate::evidence::Evidence::open(&config.evidence, &instance, &member)
            .map_err(|e| anyhow::anyhow!("key `robotsgate.evidence.dir`: {e}"))?;
        if let Some(evidence) = &evidence {
            store.record_into(evidence.clone());
        }
        if let Some(owners) = owners.clone() {
            // A robots.txt fetch goes to the origin only from the member acting for the
            // key: its claim confirmed, past any fence and not-before, its lease valid
            // (waited for while the key stays held here, as long as a request waits for
            // its turn).
            let within = config.pacing.max_wait_seconds.duration();
            store.act_only_when(Box::new(move |entry| {
                let (owners, key) = (owners.clone(), entry.pacing_key().to_string());
                Box::pin(async move { owners.acts_for_when_due(&key, within).await })
            }));
        }
        Ok(Enforcer {
            store,
            pacer,
            fleet,
            owners,
            idle_release: config.fleet.release_idle_seconds.duration(),
            follow_traffic: config.fleet.follow_traffic_seconds.duration(),
            resolver,
            evidence,
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
            stop: stop::Stop::new(),
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

    /// A blind tunnel's decision (its origin's `/`): in fleet mode routed first (a tunnel
    /// to an origin another member owns is handed over; one `handed` over is never
    /// handed on), then as [`Enforcer::decide_to`]; with the robots.txt copy it was
    /// decided on, for its evidence record.
    pub async fn decide_tunnel(
        &self,
        target: &Target,
        who: &Requester<'_>,
        destination: Option<SocketAddr>,
        handed: Option<&str>,
    ) -> (Decision, Option<Arc<Snapshot>>) {
        if let Some(decision) = self.routed(target, destination, handed).await {
            return (decision, None);
        }
        let tokens = self.tokens(who);
        let usage = self.agents.usage_for(who);
        let report = self.reports(who).report;
        self.decide_explained(target, &tokens, report, usage, destination)
            .await
    }

    /// Judges one request from `who` (on a redirected connection, on its way to
    /// `destination`): everything the proxy needs to act on it, from one call — the
    /// decision, how a forwarded request is signed, and the log's labels. Counts the
    /// usage verdict (requests are counted; `/check` is not). In fleet mode a request
    /// whose origin another member owns is handed over instead, unjudged (its owner
    /// judges it); one `handed` over by another member is never handed on.
    pub async fn judge_request(
        &self,
        target: &Target,
        who: &Requester<'_>,
        destination: Option<SocketAddr>,
        handed: Option<&str>,
    ) -> Judged {
        let tokens = self.tokens(who);
        let mode = self.reports(who);
        let (decision, snapshot) = match self.routed(target, destination, handed).await {
            Some(decision) => (decision, None),
            None => {
                let usage = self.usage_check(who);
                self.decide_explained(target, &tokens, mode.report, usage, destination)
                    .await
            }
        };
        let verdict = match &decision {
            Decision::Forward { usage, .. } => usage.as_ref(),
            Decision::Refuse(Refusal::UsageRefused { verdict, .. }) => Some(verdict),
            Decision::Refuse(_) | Decision::HandOver(_) => None,
        };
        if let Some(verdict) = verdict {
            crate::telemetry::usage::record_verdict(verdict);
        }
        let signer = match &decision {
            Decision::Forward { .. } => self.signer(who),
            Decision::Refuse(_) | Decision::HandOver(_) => None,
        };
        Judged {
            decision,
            signer,
            tokens_from: tokens.source(),
            mode_from: mode.from.label(),
            snapshot,
            report: mode.report,
        }
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
    /// [`Refusal::HostMismatch`].
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
            Err(refusal) => return (Decision::Refuse(Refusal::EgressDenied(refusal)), None),
        };
        let resolved = match (destination, resolved) {
            (Some(d), Ok(addrs)) => {
                if d.port() != origin.port || !addrs.contains(&d.ip()) {
                    let reply = Refusal::HostMismatch {
                        origin: origin.to_string(),
                        destination: d,
                    };
                    return (Decision::Refuse(reply), None);
                }
                Ok(vec![d.ip()])
            }
            (_, resolved) => resolved,
        };
        let applied = self.overrides.find(origin);
        if let Some(blocked) = applied.filter(|a| a.entry.block) {
            let reply = Refusal::Blocked {
                pattern: blocked.entry.host.clone(),
                reason: blocked.entry.reason.clone(),
            };
            return (Decision::Refuse(reply), None);
        }
        let (entry, snapshot) = self.store.get(origin).await;
        let facts = Facts {
            target,
            resolved: &resolved,
            entry: &entry,
            snapshot: &snapshot,
            operator: Operator {
                applied,
                report,
                usage,
            },
        };
        let decision = self.decide_on(&facts, tokens);
        let decision = self.tdm_checked(decision, target, &usage).await;
        (decision, Some(snapshot))
    }
}

/// The peer channel's credentials (`fleet.peer_ca`, `fleet.peer_cert`,
/// `fleet.peer_key`): they name this member.
fn peer_tls(config: &Config) -> anyhow::Result<PeerTls> {
    let f = &config.fleet;
    let file = |path: &Option<std::path::PathBuf>| path.clone().unwrap_or_default();
    PeerTls::load(&file(&f.peer_ca), &file(&f.peer_cert), &file(&f.peer_key))
        .map_err(|e| anyhow::anyhow!("key `robotsgate.fleet.peer_*`: {e}"))
}

/// The fleet's door for `fleet`: the peer channel's credentials, the membership and
/// ownership settings; budgets counted fleet-wide.
fn fleet_owners(
    config: &Config,
    fleet: &Arc<Fleet>,
    tls: PeerTls,
    identities: &Identities,
) -> Arc<Owners> {
    let f = &config.fleet;
    let hold = config.exchange_bounds().longest_hold();
    // Budgets are the fleet's: counted in its backend by every instance.
    let tally = Arc::new(FleetTally::new(fleet.clone(), hold));
    for budget in identities.budgets() {
        budget.share(tally.clone());
    }
    let grace = match f.on_unavailable {
        crate::config::OnUnavailable::KeepOwned => f.outage_grace_seconds.duration(),
        _ => std::time::Duration::ZERO,
    };
    Owners::new(
        fleet.clone(),
        tls,
        f.peer_address(),
        f.lease_seconds.duration(),
        hold,
        grace,
    )
}

/// Every address robotsgate listens on, as the egress check refuses them.
fn own_listeners(config: &Config) -> crate::policy::egress::OwnListeners {
    crate::policy::egress::OwnListeners::new(
        config.own_listeners(),
        crate::origin::loops::local_addresses(),
    )
}

impl Enforcer {
    /// The egress checks alone: the destination port, then every resolved address. `Err`
    /// says why the destination is refused (a 403). A failed lookup passes (`Ok(Err(_))`): robots.txt is then
    /// unreachable too, and that decides (SPEC §2).
    pub(crate) fn check_egress<'a>(
        &'a self,
        origin: &'a Origin,
    ) -> impl std::future::Future<Output = Result<Result<Vec<IpAddr>, ResolveError>, Forbidden>> + 'a
    {
        // The lookup's own future, not one wrapping it: this runs on every request.
        crate::origin::dns::allowed_destination(&self.resolver, &self.egress, origin)
    }

    /// Fleet mode: the decision when it is not this instance's to make (handed over,
    /// or refused: no member may pace the origin now, or the egress check refused it);
    /// `None` to decide here. The egress check runs once: before the route when the
    /// destination's address is the key (`pacing.key: address`), before a hand-over
    /// otherwise (a request this instance decides is checked as it is decided).
    async fn routed(
        &self,
        target: &Target,
        destination: Option<SocketAddr>,
        handed: Option<&str>,
    ) -> Option<Decision> {
        let owners = self.owners.as_ref()?;
        // A host new to this owner, handed over: counted against its member's bound
        // before anything is spent on it (a look-up, a claim, a robots.txt fetch).
        let new_host = || self.store.peek(&target.origin).is_none();
        if handed.is_some_and(|member| new_host() && !owners.new_origin(member)) {
            return Some(Decision::Refuse(Refusal::FleetUnavailable {
                why: "the member that handed it over is past fleet.peer_max_new_origins_per_second",
            }));
        }
        let by_address = self.pacer.config().key == crate::config::PacingKey::Address;
        let mut checked = false;
        let addrs = match destination {
            // Where a redirected connection was going (a peer's word, when handed
            // over): checked before its address can be claimed as a key.
            Some(d) => {
                let allowed = self.egress.check_port(d.port());
                if let Err(refusal) =
                    allowed.and_then(|()| self.egress.check_destination(d.ip(), d.port()))
                {
                    return Some(Decision::Refuse(Refusal::EgressDenied(refusal)));
                }
                vec![d.ip()]
            }
            None if by_address => {
                checked = true;
                match self.check_egress(&target.origin).await {
                    Err(refusal) => return Some(Decision::Refuse(Refusal::EgressDenied(refusal))),
                    Ok(Ok(addrs)) => addrs,
                    Ok(Err(_)) => Vec::new(),
                }
            }
            None => Vec::new(),
        };
        let decision = match self.route(&target.origin, &addrs, handed).await {
            owned::Routed::Here => return None,
            owned::Routed::Decided(decision) => decision,
        };
        if matches!(decision, Decision::HandOver(_)) && !checked {
            // Never carried to another member: a destination this one refuses (its own
            // listeners among them).
            if let Err(refusal) = self.check_egress(&target.origin).await {
                return Some(Decision::Refuse(Refusal::EgressDenied(refusal)));
            }
        }
        Some(decision)
    }

    /// Waits for the request's turn. The returned [`Turn`] must be held until the
    /// origin's exchange has ended, then told how ([`Turn::end`]); report the origin's
    /// status to it. An `Err` says why there is none, with the 503 to send instead.
    pub async fn pace(&self, pace: &Pace) -> Result<Turn, Unpaced> {
        let request = pace.request();
        // Fleet mode: the schedules' key, checked as acted for and recorded by the turn.
        let keyed = pace.address.as_ref().unwrap_or(&pace.entry);
        let fleet = self.owners.clone().map(|o| (o, keyed.pacing_key().clone()));
        let turn = |turns, fleet| {
            Turn::new(
                turns,
                pace.entry.clone(),
                pace.address.clone(),
                &self.bounds,
            )
            .recorded_by(fleet)
        };
        if pace.report {
            let (turns, would_wait) = self.pacer.report(request);
            crate::telemetry::metrics::record_would_wait(would_wait.as_secs_f64());
            return Ok(turn(turns, fleet));
        }
        let gave_up = || {
            Unpaced::GaveUp(
                Refusal::FleetUnavailable {
                    why: "this instance no longer owns the origin",
                }
                .answer(),
            )
        };
        // Leaving the fleet: a request still queued here goes to the next owner at once,
        // which paces it from the facts handed over, rather than waiting for a turn here
        // only to be refused it (and holding the hand-over back meanwhile).
        let leaves = async {
            match &self.owners {
                Some(owners) => owners.leaves().await,
                None => std::future::pending().await,
            }
        };
        // In this order: a request queued at a leaving owner goes on; one whose turn is
        // there when a stop's bound has passed takes it (a stop refuses waits, not turns).
        let paced = tokio::select! {
            biased;
            () = leaves => return Err(gave_up()),
            paced = self.pacer.pace(request) => paced,
            () = self.stop.due() => Err(Refused::stopping()),
        };
        // Its turn came, but this instance may no longer act for the origin (its lease
        // lapsed by its own clock meanwhile, or it let the origin go); a provisional
        // claim whose wait is over is confirmed first.
        let acting = match (&paced, &fleet) {
            (Ok(_), Some((owners, key))) => owners.acts_for_confirmed(key).await,
            _ => true,
        };
        match paced {
            Ok(turns) if !acting => {
                turns.forgo();
                Err(gave_up())
            }
            Ok(turns) => {
                crate::telemetry::metrics::record_pacing_wait(turns.waited.as_secs_f64());
                Ok(turn(turns, fleet))
            }
            Err(refused) => {
                let retry = refused.retry_after.as_secs_f64().ceil().max(1.0) as u64;
                let reason = match refused.reason {
                    TurnRefusal::QueueFull => "queue-full",
                    TurnRefusal::WaitTooLong => "wait-too-long",
                    TurnRefusal::Stopping => "stopping",
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
                Err(Unpaced::Refused(answer))
            }
        }
    }
}
