//! robotsgate's Pingora `ProxyHttp`: one method per phase, each a few lines calling
//! one step (`steps.rs`), the hand-over's room for a request handed to its owner
//! ([`crate::handover::Passed`]), or the exchange's bounds (`exchange.rs`).
//!
//! `request_filter` turns the request into a [`Target`](crate::policy::target::Target),
//! has the [`Enforcer`] judge it and acts on the judgement: an [`Answer`] is written to
//! the client and the request ends there; a hand-over or a forward decision and its turn
//! are kept in the context. `upstream_peer` connects to the owner's peer channel, or to
//! the exact address the egress check approved, pooled per origin;
//! `upstream_request_filter` marks a handed-over request for its owner, or checks once
//! more that this instance still acts for the origin, rewrites the request line to the
//! canonical origin-form path the decision was made on and signs it (reserving a
//! pay-per-crawl payment); `upstream_response_filter` and the body filters follow the
//! exchange, settle the payment and end the turn; the failure phases decide what is sent
//! again (an owner that never worked on a request: routed again). `logging` writes the
//! access log line and the request metrics.

use std::os::unix::io::RawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use pingora::http::ResponseHeader;
use pingora::prelude::*;
use pingora::protocols::Digest;
use pingora::proxy::{FailToProxy, ProxyHttp, Session};
use pingora::upstreams::peer::HttpPeer;
use pingora::ErrorSource;

use super::context::{Forwarded, RequestContext, Stage, Why};
use super::exchange::{unread, upstream_failure, upstream_peer, UpstreamOptions, MAX_EXCHANGE};
use super::headers::{ends_by_close, strip_own_headers, usage_mark, NEVER_FORWARDED};
use super::request::{requester, target_of, target_refused};
use crate::downstream::context::ClientContext;
use crate::enforce::{Answer, Enforcer};
use crate::handover::{HandOver, Passed};
use crate::policy::target::Scheme;
use crate::telemetry::logging::AccessRecord;
use crate::telemetry::metrics::Outcome;

/// robotsgate's Pingora `ProxyHttp`: wires each request to the [`Enforcer`].
pub struct RobotsGateProxy {
    /// Decides and paces every request.
    pub(super) enforcer: Arc<Enforcer>,
    /// Carries a request whose origin another member owns to it (fleet mode).
    pub(super) handover: Arc<HandOver>,
    /// Timeouts towards origins.
    pub(super) upstream: UpstreamOptions,
    /// `limits.max_body_bytes`, for bodies without a `Content-Length` (the front checks
    /// those that have one).
    pub(super) max_body_bytes: u64,
    /// Marks upstream sockets (`transparent.upstream_mark`).
    pub(super) socket_hook: Option<crate::origin::loops::SocketHook>,
    /// The `Via` entry requests carry upstream (transparent listeners configured).
    pub(super) via: Option<&'static str>,
}

/// Answers the request with `answer`, robotsgate's own: the request ends there.
async fn answered(
    session: &mut Session,
    ctx: &mut RequestContext,
    answer: &Answer,
) -> Result<bool> {
    ctx.answered(answer);
    respond(session, answer).await?;
    Ok(true)
}

/// Writes an [`Answer`] as the complete response.
pub async fn respond(session: &mut Session, answer: &Answer) -> Result<()> {
    let mut header = ResponseHeader::build(answer.status, Some(5))?;
    for (name, value) in answer.fields() {
        header.insert_header(name, value.as_ref())?;
    }
    session
        .write_response_header(Box::new(header), false)
        .await?;
    session
        .write_response_body(Some(answer.body.clone()), true)
        .await
}

#[async_trait]
impl ProxyHttp for RobotsGateProxy {
    /// Boxed: Pingora keeps the context in the request's future, which it copies into a
    /// box of its own twice per request (about 8 KiB each time); the context there is
    /// nearly a kilobyte, its box 8 octets, for one allocation.
    type CTX = Box<RequestContext>;

    /// The front (`front.rs`) serves every request with its tunnel origin and user.
    fn new_ctx(&self) -> Self::CTX {
        Box::new(match ClientContext::take() {
            Some(client) => RequestContext {
                client,
                ..RequestContext::default()
            },
            None => RequestContext {
                client_unknown: true,
                ..RequestContext::default()
            },
        })
    }

    /// The request's phases: refused before it is understood (a lost context, a loop),
    /// its target, the enforcer's judgement, then its turn — or robotsgate's answer.
    async fn request_filter(&self, session: &mut Session, ctx: &mut Self::CTX) -> Result<bool> {
        ctx.started = Some(Instant::now());
        if let Some(answer) = self.refused_at_once(session, ctx) {
            return answered(session, ctx, &answer).await;
        }
        let target = match target_of(session.req_header(), &ctx.client) {
            Ok(target) => target,
            Err(e) => return answered(session, ctx, &target_refused(e)).await,
        };
        let judged = self.judge(session, ctx, &target).await;
        ctx.target = Some(target);
        // Counted from where it was routed before (a relay that could not deliver it).
        let rerouted = ctx.client.rerouted;
        match self.act_on(session, ctx, judged, rerouted).await? {
            Some(answer) => answered(session, ctx, &answer).await,
            None => Ok(false),
        }
    }

    /// Bodies without a `Content-Length` are counted as they stream: 413 past the limit.
    async fn request_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<bytes::Bytes>,
        _end_of_stream: bool,
        ctx: &mut Self::CTX,
    ) -> Result<()> {
        ctx.body_bytes += body.as_ref().map_or(0, |b| b.len() as u64);
        if ctx.body_bytes > self.max_body_bytes {
            crate::telemetry::metrics::record_refusal(
                crate::telemetry::metrics::RefusalReason::BodyTooLarge,
            );
            return Error::e_explain(
                ErrorType::HTTPStatus(413),
                "request body larger than limits.max_body_bytes",
            );
        }
        Ok(())
    }

    /// The approved address; an attempt sent again (see `error_while_proxy`) first
    /// ends the last attempt's turn, then takes a turn of its own.
    async fn upstream_peer(
        &self,
        session: &mut Session,
        ctx: &mut Self::CTX,
    ) -> Result<Box<HttpPeer>> {
        if let Some(reroutes) = ctx.handed_over().and_then(Passed::routed_again) {
            self.route_again(session, ctx, reroutes).await?;
        }
        if let Some(passed) = ctx.handed_over() {
            let mut peer = self.handover.peer(passed)?;
            let within = self.handover.owner_answers_within();
            self.upstream.towards_owner(&mut peer, within);
            return Ok(Box::new(peer));
        }
        let (Some(target), Stage::Forwarded(f)) = (&ctx.target, &ctx.stage) else {
            return Err(Error::explain(
                ErrorType::InternalError,
                "no forward decision",
            ));
        };
        let mut peer = upstream_peer(target, f.addr, f.pace.pool_key(), &self.upstream);
        peer.options.upstream_tcp_sock_tweak_hook = self.socket_hook.clone();
        self.next_attempt(ctx).await?;
        Ok(Box::new(peer))
    }

    /// Pingora's own policy (idempotent requests with their body still buffered;
    /// errors on reused connections only where it says so), bounded by
    /// `upstream.max_retries`, and never for an attempt the origin may still be working
    /// on. An origin's refusal backs it off, sent again or not.
    fn error_while_proxy(
        &self,
        peer: &HttpPeer,
        session: &mut Session,
        e: Box<Error>,
        ctx: &mut Self::CTX,
        client_reused: bool,
    ) -> Box<Error> {
        // What the error itself says, before the peer is added to it: an owner that gave
        // the key up, or never received the request, never worked on it, whatever its
        // method.
        let unsent = ctx.handed_over().is_some_and(|p| p.never_worked_on(&e));
        let mut e = e.more_context(format!("Peer: {peer}"));
        if session.as_ref().retry_buffer_truncated() {
            e.set_retry(false);
        } else if unsent {
            e.set_retry(true);
        } else if !session.req_header().method.is_idempotent() {
            e.set_retry(false);
        } else {
            e.retry.decide_reuse(client_reused);
        }
        self.decide_retry(&mut e, ctx);
        e
    }

    /// As `error_while_proxy`, for a connection that could not be made.
    fn fail_to_connect(
        &self,
        session: &mut Session,
        _peer: &HttpPeer,
        ctx: &mut Self::CTX,
        mut e: Box<Error>,
    ) -> Box<Error> {
        // A connection to an owner that was never made carried nothing: whatever the
        // method, the request is sent again (routed once more, `HandOver::retry`).
        if ctx.handed_over().is_some() {
            e.set_retry(true);
        } else if !session.req_header().method.is_idempotent() {
            e.set_retry(false);
        }
        self.decide_retry(&mut e, ctx);
        e
    }

    /// A new connection to an owner carries the request only when that owner answered
    /// it (`fleet::answered_by`; a reused one was checked when it was made); otherwise
    /// the owner never received it, and it is routed once more (`HandOver::retry`).
    async fn connected_to_upstream(
        &self,
        _session: &mut Session,
        reused: bool,
        _peer: &HttpPeer,
        fd: RawFd,
        digest: Option<&Digest>,
        ctx: &mut Self::CTX,
    ) -> Result<()> {
        ctx.upstream_fd = Some(fd);
        match ctx.handed_over_mut() {
            Some(passed) => self.handover.connected(passed, reused, digest, fd),
            None => Ok(()),
        }
    }

    async fn upstream_response_filter(
        &self,
        session: &mut Session,
        upstream_response: &mut ResponseHeader,
        ctx: &mut Self::CTX,
    ) -> Result<()> {
        // Upgrades are refused at the front; an origin switching protocols anyway gets
        // nothing relayed (the bytes after a 101 would be an unchecked tunnel).
        ctx.upstream_protocol = Some(match upstream_response.version {
            http::Version::HTTP_2 => "h2",
            _ => "http/1.1",
        });
        if upstream_response.status.as_u16() == 101 {
            return Error::e_explain(
                ErrorType::HTTPStatus(502),
                "origin answered 101 Switching Protocols; upgrades are not proxied",
            );
        }
        if let Stage::HandedOver(passed) = &mut ctx.stage {
            return self.handover.answered(passed, upstream_response);
        }
        strip_own_headers(upstream_response, ctx.target.as_ref());
        // An answer only its connection's close ends is never announced as kept alive.
        if ends_by_close(upstream_response, &session.req_header().method) {
            session.set_keepalive(None);
        }
        // An informational answer is not the origin's answer: the final one follows
        // (and the front relays none but an expected `100 Continue`).
        if upstream_response.status.is_informational() {
            return Ok(());
        }
        let status = upstream_response.status.as_u16();
        crate::telemetry::metrics::record_upstream_status(status);
        if let Some(Forwarded {
            turn,
            upstream_status,
            reported,
            usage,
            signer,
            payment,
            paid,
            tdm,
            ..
        }) = ctx.stage.forwarded_mut()
        {
            *upstream_status = Some(status);
            if let (Some(signer), Some(target)) = (signer, &ctx.target) {
                *paid = super::payment::settle(
                    &target.origin,
                    &signer.identity,
                    payment.take(),
                    status,
                    upstream_response,
                );
            }
            // Report mode: the client sees what enforcing would have said.
            if let Some(reported) = reported {
                upstream_response.insert_header("X-Robots-Decision", reported.header.as_str())?;
            }
            if let Some(mark) = usage_mark(usage.as_ref(), upstream_response) {
                upstream_response.insert_header("X-Robots-Usage", mark)?;
            }
            let reserved = super::tdm::reservation(usage.as_ref(), upstream_response);
            let retry_after = upstream_response
                .headers
                .get(http::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(crate::origin::fetch::retry_after);
            let fd = ctx.upstream_fd;
            if let Some(turn) = turn {
                turn.origin_answered(status, retry_after, || unread(fd));
            }
            if let Some((outcome, decision)) = reserved {
                if outcome == Outcome::TdmWithheld {
                    *upstream_response = super::tdm::withheld(upstream_response, &decision)?;
                } else {
                    upstream_response.insert_header("X-Robots-Decision", decision.as_str())?;
                }
                *tdm = Some((outcome, decision));
            }
        }
        Ok(())
    }

    /// An exchange past its turn's deadline (`pacing.max_exchange_seconds`) is cut at
    /// its next octets; each part of the answer tells the turn the origin's pace.
    fn upstream_response_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<bytes::Bytes>,
        end_of_stream: bool,
        ctx: &mut Self::CTX,
    ) -> Result<Option<Duration>> {
        if let Some(Forwarded {
            turn: Some(turn),
            digest,
            tdm,
            ..
        }) = ctx.stage.forwarded_mut()
        {
            let now = tokio::time::Instant::now();
            if body.as_ref().is_some_and(|b| !b.is_empty()) {
                turn.origin_wrote(now);
            }
            // A withheld answer's body is read from the origin and dropped.
            if tdm
                .as_ref()
                .is_some_and(|(o, _)| *o == Outcome::TdmWithheld)
            {
                *body = None;
            }
            if let Some(chunk) = body.as_ref().filter(|b| !b.is_empty()) {
                // `evidence.body_digest`: the octets the crawler is given.
                if let Some((context, n)) = digest {
                    context.update(chunk);
                    *n += chunk.len() as u64;
                }
            }
            if !end_of_stream && now >= turn.deadline() {
                return Error::e_explain(
                    ErrorType::Custom(MAX_EXCHANGE),
                    "response longer than pacing.max_exchange_seconds: cut",
                );
            }
        }
        Ok(None)
    }

    async fn upstream_request_filter(
        &self,
        session: &mut Session,
        upstream_request: &mut RequestHeader,
        ctx: &mut Self::CTX,
    ) -> Result<()> {
        if ctx.handed_over().is_some() {
            let who = requester(session, &ctx.client).client;
            let context = ctx.client.peer_context(who);
            return self.handover.mark(&context, upstream_request);
        }
        not_acting_any_more(ctx)?;
        NEVER_FORWARDED.remove_from(upstream_request);
        if let Some(target) = &ctx.target {
            // Origin-form, exactly the canonical path the verdict was made on.
            let uri = http::Uri::try_from(target.path.as_str()).map_err(|e| {
                Error::because(ErrorType::InternalError, "canonical path is not a URI", e)
            })?;
            upstream_request.set_uri(uri);
            // The client's own `Host` is usually already the canonical authority; the
            // header is rewritten only when it is not (or is missing).
            let authority = target.origin.authority();
            let host = upstream_request.headers.get(http::header::HOST);
            if !host.is_some_and(|h| authority.is(h.as_bytes())) {
                upstream_request.insert_header(http::header::HOST, authority.to_string())?;
            }
            // Signed as the fleet's identity (a client's own signature headers are
            // gone already, with the other never-forwarded ones).
            if let Some(Forwarded {
                signer: Some(signer),
                payment,
                ..
            }) = ctx.stage.forwarded_mut()
            {
                // Offers to pay while the day's budget covers it (once: a retried
                // connection keeps its reservation).
                if payment.is_none() {
                    *payment = match &signer.budget {
                        Some(budget) => budget.reserve().await,
                        None => None,
                    };
                }
                let identity = &signer.identity;
                let offer = payment.as_ref().map(|r| r.offer());
                // `Host` is now exactly the canonical authority (checked or set above):
                // signed from the header, with no string built per request.
                let signed = match upstream_request
                    .headers
                    .get(http::header::HOST)
                    .and_then(|h| h.to_str().ok())
                {
                    Some(host) => identity.sign(host, offer),
                    None => identity.sign(&authority.to_string(), offer),
                };
                signed.set_on(upstream_request)?;
                crate::telemetry::metrics::record_signed(&identity.name);
            }
        }
        if let Some(via) = self.via {
            upstream_request.append_header("Via", via)?;
        }
        Ok(())
    }

    /// Upstream failures (refused, timed out, TLS verification failed) are answered with
    /// the reason in `X-Robots-Decision`, not Pingora's bare 502.
    async fn fail_to_proxy(
        &self,
        session: &mut Session,
        e: &pingora::Error,
        ctx: &mut Self::CTX,
    ) -> FailToProxy {
        let written = session.response_written().is_some();
        if let Some(answer) = ctx.handed_over_mut().and_then(|p| p.failed(written)) {
            session.set_keepalive(None);
            let _ = respond(session, &answer).await;
            return FailToProxy {
                error_code: answer.status,
                can_reuse_downstream: false,
            };
        }
        if let Some(answer) = ctx.unsent.take() {
            session.set_keepalive(None);
            let _ = respond(session, &answer).await;
            return FailToProxy {
                error_code: answer.status,
                can_reuse_downstream: false,
            };
        }
        let code = match e.etype() {
            ErrorType::HTTPStatus(code) => *code,
            _ => match e.esource() {
                ErrorSource::Upstream => 502,
                ErrorSource::Downstream => match e.etype() {
                    ErrorType::WriteError | ErrorType::ReadError | ErrorType::ConnectionClosed => 0,
                    _ => 400,
                },
                ErrorSource::Internal | ErrorSource::Unset => 500,
            },
        };
        // A timed-out origin is a gateway timeout, not a bad gateway.
        let code = match e.etype() {
            ErrorType::ConnectTimedout | ErrorType::ReadTimedout | ErrorType::WriteTimedout
                if code == 502 =>
            {
                504
            }
            _ => code,
        };
        if matches!(code, 502 | 504) && session.response_written().is_none() {
            let origin = ctx
                .target
                .as_ref()
                .map_or(String::new(), |t| t.origin.to_string());
            let reason = upstream_failure(e.etype());
            let answer = Answer::text(
                code,
                Outcome::UpstreamError,
                format!("upstream-error; reason=\"{reason}\"; origin=\"{origin}\""),
                format!("robotsgate: {reason} for {origin}: {e}"),
            );
            // Pingora closes the client connection after a failed upstream exchange: say
            // so, or a keep-alive client sends its next request into the closing socket.
            session.set_keepalive(None);
            if respond(session, &answer).await.is_ok() {
                match &mut ctx.stage {
                    Stage::Forwarded(f) => f.failed = Some(answer.header),
                    _ => ctx.answered(&answer),
                }
            }
        } else if code > 0 {
            let _ = session.respond_error(code).await;
        }
        FailToProxy {
            error_code: code,
            can_reuse_downstream: false,
        }
    }

    /// A client that left while its request was queued is an ordinary event, counted
    /// and in the access log: not an error.
    fn suppress_error_log(&self, _session: &Session, ctx: &Self::CTX, _e: &Error) -> bool {
        matches!(ctx.stage, Stage::Left { .. })
    }

    /// The request is over: counted, its turn ended as its exchange did (held a while
    /// more when cut), and its access log line written.
    async fn logging(
        &self,
        session: &mut Session,
        error: Option<&pingora::Error>,
        ctx: &mut Self::CTX,
    ) {
        let elapsed = ctx.started.map_or(0.0, |s| s.elapsed().as_secs_f64());
        let outcome = ctx.outcome(error);
        let mode = ctx.client.mode(session.req_header().raw_path());
        let https = ctx
            .target
            .as_ref()
            .is_some_and(|t| t.origin.scheme == Scheme::Https);
        let protocol = ctx.client.protocol;
        crate::telemetry::metrics::record_request(outcome, mode, protocol, https, elapsed);
        let ended = ctx.end(error);
        if let Some((seq, body)) = ended.recorded {
            let how = error.map_or("complete", |e| e.etype().as_str());
            let paid = ended.signed.as_ref().and_then(|(_, paid)| paid.as_deref());
            let said = match (&ended.why, outcome) {
                (Why::Answer(said), Outcome::TdmWithheld | Outcome::WouldTdmWithhold) => {
                    Some(said.as_str())
                }
                _ => None,
            };
            self.enforcer
                .record_outcome(seq, ended.upstream_status, how, (paid, said), body);
        }
        if !crate::telemetry::logging::access_enabled() {
            return;
        }
        let (origin, path): (&dyn std::fmt::Display, &str) = match &ctx.target {
            Some(t) => (&t.origin, t.path.as_str()),
            None => (&"", ""),
        };
        let req = session.req_header();
        AccessRecord {
            origin,
            path,
            agent: req
                .headers
                .get(http::header::USER_AGENT)
                .and_then(|v| v.to_str().ok()),
            tokens_from: ctx.tokens_from,
            mode_from: ctx.mode_from,
            mode: mode.label(),
            protocol: protocol.label(),
            decision: outcome.label(),
            status: session.response_written().map_or(0, |r| r.status.as_u16()),
            upstream_status: ended.upstream_status,
            upstream_protocol: ctx.upstream_protocol,
            line: ended.line,
            why: &ended.why,
            pacing_wait_seconds: ended.pacing_wait,
            delay_rule: ended.delay_rule,
            usage: ended.usage.map(|u| u.header()).as_deref(),
            identity: ended.signed.as_ref().map(|(s, _)| s.name.as_str()),
            payment: ended.signed.as_ref().and_then(|(_, paid)| paid.as_deref()),
            duration_seconds: elapsed,
            error: error.map(|e| e as &dyn std::fmt::Display),
        }
        .emit();
    }
}

/// Fleet mode, right before a forwarded request's head is written: when this instance
/// no longer acts for the origin's key (it was stopped between its turn and now, past
/// its lease by its own clock, or the key moved), its turn is given back unused and the
/// request answered `503 fleet-unavailable`, never sent.
fn not_acting_any_more(ctx: &mut RequestContext) -> Result<()> {
    let Some(Forwarded { turn, .. }) = ctx.stage.forwarded_mut() else {
        return Ok(());
    };
    if turn.as_ref().is_none_or(crate::enforce::Turn::still_acting) {
        return Ok(());
    }
    if let Some(turn) = turn.take() {
        turn.forgo();
    }
    let why = "this instance no longer acts for the origin";
    ctx.unsent = Some(Box::new(
        crate::enforce::Refusal::FleetUnavailable { why }.answer(),
    ));
    Error::e_explain(ErrorType::InternalError, why)
}
