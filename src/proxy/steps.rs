//! The steps `ProxyHttp`'s phases take (`http.rs` calls them; each phase stays a few
//! lines): a request refused before it is understood, its judgement, acting on it (a
//! hand-over, or a turn waited for and the exchange begun), routing it once more when
//! its owner (another member, or this instance while it queued) gave its key up, and the
//! decisions about an attempt sent again.

use pingora::prelude::*;
use pingora::proxy::Session;

use super::context::{Forwarded, RequestContext, Stage};
use super::exchange::{exchange_end, retry_reason};
use super::headers::request_has_no_body;
use super::http::RobotsGateProxy;
use super::request::requester;
use crate::enforce::{Answer, Decision, Judged, Pace, Said, Turn, Unpaced};
use crate::fleet::Reroutes;
use crate::handover::Passed;
use crate::policy::target::Target;
use crate::telemetry::metrics::{Outcome, Retry};

impl RobotsGateProxy {
    /// robotsgate's answer to a request refused before it is understood: one that came
    /// without the front's context, or one that came back through this process.
    pub(super) fn refused_at_once(
        &self,
        session: &Session,
        ctx: &RequestContext,
    ) -> Option<Answer> {
        if ctx.client_unknown {
            return Some(Answer::text(
                500,
                Outcome::BadRequest,
                "internal-error; reason=\"connection context lost\"".into(),
                "robotsgate: this connection's context was lost; the request is refused".into(),
            ));
        }
        // Only requests robotsgate sends carry its `Via`, and only while it sends one.
        let via = session
            .req_header()
            .headers
            .get_all(http::header::VIA)
            .iter()
            .map(|v| v.as_bytes());
        if self.via.is_some() && crate::origin::loops::came_through(via) {
            crate::telemetry::metrics::record_refusal(
                crate::telemetry::metrics::RefusalReason::Loop,
            );
            return Some(crate::policy::answer::forwarding_loop(
                &crate::origin::loops::VIA,
            ));
        }
        None
    }

    /// Queues for the request's turn; a client that hangs up meanwhile gives up its
    /// place (watching the connection is only safe without a body): the `Err`.
    /// `Ok(Err)`: no turn, why and the 503 to send instead.
    pub(super) async fn wait_for_turn(
        &self,
        session: &mut Session,
        pace: &Pace,
    ) -> Result<std::result::Result<Turn, Unpaced>> {
        if !request_has_no_body(session.req_header()) {
            return Ok(self.enforcer.pace(pace).await);
        }
        tokio::select! {
            // Pace first: an immediate turn (nothing in force) never touches the client
            // socket; only real waits watch it for a hang-up.
            biased;
            paced = self.enforcer.pace(pace) => Ok(paced),
            _ = session.downstream_session.read_body_or_idle(true) => {
                Err(Error::explain(ErrorType::ConnectionClosed, "client left while queued for pacing").into_down())
            }
        }
    }

    /// The enforcer's judgement of the request for `target`.
    pub(super) async fn judge(
        &self,
        session: &Session,
        ctx: &RequestContext,
        target: &Target,
    ) -> Judged {
        let who = requester(session, &ctx.client);
        let handed = ctx.client.handed.as_ref().map(|h| &*h.member);
        self.enforcer
            .judge_request(target, &who, ctx.client.destination, handed)
            .await
    }

    /// Acts on a judgement: a hand-over (the stage names the owner; `reroutes`: how many
    /// times the request was routed again, an owner having given its key up), or the turn
    /// waited for and the exchange begun; `Some`: robotsgate's own answer instead.
    pub(super) async fn act_on(
        &self,
        session: &mut Session,
        ctx: &mut RequestContext,
        judged: Judged,
        reroutes: Reroutes,
    ) -> Result<Option<Answer>> {
        ctx.tokens_from = judged.tokens_from;
        ctx.mode_from = judged.mode_from;
        let (snapshot, report) = (judged.snapshot.clone(), judged.report);
        let forwarded = match judged.decision {
            Decision::Refuse(reply) => {
                let answer = reply.answer();
                self.record_answer(session, ctx, snapshot.as_deref(), &answer, report);
                return Ok(Some(answer));
            }
            Decision::HandOver(owner) => {
                let who = requester(session, &ctx.client);
                let Some(share) = self.handover.share(&owner, who.user, who.client) else {
                    let answer =
                        crate::handover::unavailable(crate::handover::Unreached::OverShare);
                    self.record_answer(session, ctx, snapshot.as_deref(), &answer, report);
                    return Ok(Some(answer));
                };
                ctx.stage = Stage::HandedOver(Box::new(Passed::new(owner, reroutes, share)));
                return Ok(None);
            }
            Decision::Forward {
                addr,
                why,
                pace,
                reported,
                usage,
            } => Forwarded {
                addr,
                allowed: why,
                rule: pace.rule,
                reported: reported.map(|r| r.reported()),
                usage,
                signer: judged.signer,
                payment: None,
                paid: None,
                pace,
                turn: None,
                attempts: 0,
                retried: None,
                upstream_status: None,
                failed: None,
                tdm: None,
                recorded: None,
                digest: None,
            },
        };
        let recorded = (snapshot.as_deref(), report);
        self.in_turn(session, ctx, forwarded, recorded, reroutes)
            .await
    }

    /// A request allowed as `forwarded` says: its turn waited for, its decision recorded
    /// (`recorded`: the robots.txt copy it was decided on, report mode), then its
    /// exchange begun; `Some`: robotsgate's own answer instead (no turn, no record), or
    /// routed once more when this instance gave the key up while it queued.
    async fn in_turn(
        &self,
        session: &mut Session,
        ctx: &mut RequestContext,
        forwarded: Forwarded,
        (snapshot, report): (Option<&crate::enforce::Snapshot>, bool),
        mut reroutes: Reroutes,
    ) -> Result<Option<Answer>> {
        let queued = std::time::Instant::now();
        let paced = match self.wait_for_turn(session, &forwarded.pace).await {
            Ok(paced) => paced,
            Err(left) => {
                let waited = queued.elapsed();
                crate::telemetry::metrics::record_left_while_queued(waited.as_secs_f64());
                ctx.stage = Stage::Left { waited };
                return Err(left);
            }
        };
        let turn = match paced {
            Ok(turn) => turn,
            // This instance gave the key up while the request queued (it followed its
            // traffic, went idle, or this instance is leaving): routed once more, as a
            // member routes again one it handed to an owner that gave it up. One
            // handed over is refused instead, and its member routes it again.
            Err(Unpaced::GaveUp(_))
                if ctx.client.handed.is_none()
                    && self.handover.route_again(None, &mut reroutes) =>
            {
                return self.judge_again(session, ctx, reroutes).await;
            }
            Err(unpaced) => {
                let answer = unpaced.answer();
                self.record_answer(session, ctx, snapshot, &answer, report);
                return Ok(Some(answer));
            }
        };
        let forwarded = Forwarded {
            turn: Some(turn),
            ..forwarded
        };
        let recorded = match self
            .record_forward(session, ctx, snapshot, &forwarded, report)
            .await
        {
            Ok(recorded) => recorded,
            Err(answer) => {
                if let Some(turn) = forwarded.turn {
                    turn.forgo();
                }
                return Ok(Some(answer));
            }
        };
        self.exchange_starts(session, ctx);
        let digest = self
            .enforcer
            .evidence()
            .filter(|e| e.digests_bodies() && recorded.is_some())
            .map(|_| {
                (
                    Box::new(ring::digest::Context::new(&ring::digest::SHA256)),
                    0,
                )
            });
        ctx.stage = Stage::Forwarded(Box::new(Forwarded {
            recorded,
            digest,
            ..forwarded
        }));
        Ok(None)
    }

    /// The evidence of a request robotsgate answers itself with `answer` (queued).
    fn record_answer(
        &self,
        session: &Session,
        ctx: &RequestContext,
        snapshot: Option<&crate::enforce::Snapshot>,
        answer: &Answer,
        report: bool,
    ) {
        let (Some(target), Some(_)) = (&ctx.target, self.enforcer.evidence()) else {
            return;
        };
        let who = requester(session, &ctx.client);
        let said = Said::answered(answer).arriving(arrival(session, ctx));
        let said = Said { report, ..said };
        self.enforcer.record_refusal(target, &who, snapshot, said);
    }

    /// The evidence of a request about to be sent as `forwarded` says, written and
    /// waited for: its place in the chain (`None`: not kept), or the answer when it
    /// cannot be written.
    async fn record_forward(
        &self,
        session: &Session,
        ctx: &RequestContext,
        snapshot: Option<&crate::enforce::Snapshot>,
        forwarded: &Forwarded,
        report: bool,
    ) -> std::result::Result<Option<u64>, Answer> {
        let (Some(target), Some(_)) = (&ctx.target, self.enforcer.evidence()) else {
            return Ok(None);
        };
        let who = requester(session, &ctx.client);
        let allowed = forwarded.allowed.to_string();
        let usage = forwarded.usage.as_ref().map(|u| u.header());
        let said = Said::forwarded(forwarded.allowed, &allowed, forwarded.reported.as_ref());
        let said = Said {
            usage: usage.as_deref(),
            wait: forwarded.turn.as_ref().map(Turn::waited),
            key_id: forwarded.signer.as_ref().map(|s| s.identity.key_id()),
            report,
            ..said.arriving(arrival(session, ctx))
        };
        self.enforcer
            .record_forward(target, &who, snapshot, said)
            .await
    }

    /// The owner a request was handed to never worked on it (it released the key,
    /// handed it to another member, is leaving, or never received it): the request is
    /// routed once more, for the `reroutes`-th time ([`HandOver::route_again`] counted
    /// it), and served here, handed to the new owner, or answered (`Err`, the answer kept
    /// for `fail_to_proxy`).
    ///
    /// [`HandOver::route_again`]: crate::handover::HandOver::route_again
    pub(super) async fn route_again(
        &self,
        session: &mut Session,
        ctx: &mut RequestContext,
        reroutes: Reroutes,
    ) -> Result<()> {
        let Some(answer) = self.judge_again(session, ctx, reroutes).await? else {
            return Ok(());
        };
        ctx.answered(&answer);
        ctx.unsent = Some(Box::new(answer));
        Error::e_explain(
            ErrorType::HTTPStatus(503),
            "routed again after its owner gave it up, and answered here",
        )
    }

    /// The request judged again and acted on, routed for the `reroutes`-th time.
    async fn judge_again(
        &self,
        session: &mut Session,
        ctx: &mut RequestContext,
        reroutes: Reroutes,
    ) -> Result<Option<Answer>> {
        let Some(target) = ctx.target.clone() else {
            return Error::e_explain(ErrorType::InternalError, "routed again without a target");
        };
        let judged = self.judge(session, ctx, &target).await;
        Box::pin(self.act_on(session, ctx, judged, reroutes)).await
    }

    /// From here the turn follows the origin's exchange: a client that half-closes or
    /// leaves no longer aborts it (its end is the origin's, within
    /// `limits.unread_timeout_seconds`), and one that takes no octet of its answer for
    /// that long ends it on both legs (`downstream::unread`).
    pub(super) fn exchange_starts(&self, session: &mut Session, ctx: &RequestContext) {
        let downstream = &mut session.downstream_session;
        downstream.set_abort_on_close(false);
        downstream.set_write_timeout(Some(self.upstream.write));
        ctx.client.exchange_started();
    }

    /// Whether the attempt that failed with `e` is sent again: within
    /// `upstream.max_retries`, only where the origin never worked on it. A refusal
    /// backs the origin off either way.
    pub(super) fn decide_retry(&self, e: &mut Error, ctx: &mut RequestContext) {
        if let Stage::HandedOver(passed) = &mut ctx.stage {
            return self.handover.retry(passed, e);
        }
        let Some(Forwarded {
            turn,
            attempts,
            retried,
            ..
        }) = ctx.stage.forwarded_mut()
        else {
            e.set_retry(false);
            return;
        };
        let reason = retry_reason(e);
        if reason == Some(Retry::Refused) {
            if let Some(turn) = turn {
                turn.origin_refused();
            }
        }
        match reason {
            Some(reason) if *attempts <= self.upstream.max_retries => {
                crate::telemetry::metrics::record_retry(reason);
                *retried = Some(exchange_end(Some(e)));
            }
            _ => e.set_retry(false),
        }
    }

    /// Before an attempt goes upstream: the first holds the turn `request_filter` took;
    /// one sent again ends the last attempt's turn as it ended, then waits for a turn
    /// of its own (`Err`: none within the pacing bounds, answered as such).
    pub(super) async fn next_attempt(&self, ctx: &mut RequestContext) -> Result<()> {
        let Some(Forwarded {
            pace,
            turn,
            attempts,
            retried,
            ..
        }) = ctx.stage.forwarded_mut()
        else {
            return Ok(());
        };
        *attempts += 1;
        let Some(end) = retried.take() else {
            return Ok(());
        };
        if let Some(last) = turn.take() {
            last.end(end);
        }
        match self.enforcer.pace(pace).await {
            Ok(next) => {
                *turn = Some(next);
                Ok(())
            }
            Err(unpaced) => {
                let answer = unpaced.answer();
                ctx.answered(&answer);
                ctx.unsent = Some(Box::new(answer));
                Error::e_explain(
                    ErrorType::HTTPStatus(503),
                    "no pacing turn for the attempt sent again",
                )
            }
        }
    }
}

/// How a request arrived, for its evidence record.
fn arrival<'a>(session: &'a Session, ctx: &'a RequestContext) -> Said<'a> {
    let req = session.req_header();
    Said {
        arrived: ctx.client.mode(req.raw_path()).label(),
        protocol: Some(ctx.client.protocol.label()),
        method: Some(req.method.as_str()),
        from: ctx.client.handed.as_ref().map(|h| &*h.member),
        ..Said::default()
    }
}
