//! HTTP/2 from clients: one intercepted TLS connection (CONNECT tunnel or redirected),
//! many requests, each through the same pipeline as an HTTP/1.1 request.
//!
//! A client that picks `h2` in ALPN (`tls.http2: auto`) gets an HTTP/2 connection
//! (Pingora's, on the `h2` crate). Every stream it opens is a request:
//! 1. checked against `limits` as an HTTP/1.1 head is ([`check`]: 414, 431, 413, and
//!    400 for CONNECT inside the tunnel or a body on GET/HEAD); a header list longer
//!    than `limits.max_header_bytes` is refused by `h2` itself (431);
//! 2. given a slot of `limits.max_connections_per_client` and `limits.max_connections`
//!    ([`Slots`]) for as long as it is in progress, or a 503 with `Retry-After`;
//! 3. served by the proxy on its own task, with the connection's [`ClientContext`]
//!    (tunnel origin, user, destination) and `protocol = h2`.
//!
//! A refusal answers that stream only; the other streams go on.
//!
//! Bounds, and the attacks they answer:
//! * **Concurrency**: `limits.max_streams_per_connection` is the connection's
//!   `SETTINGS_MAX_CONCURRENT_STREAMS`; every stream in progress holds a client slot,
//!   also after the client reset it, so resetting streams (rapid reset) opens no room
//!   beyond the client's share. `h2` ends a connection whose streams are reset before
//!   they are accepted faster than it can count (GOAWAY `ENHANCE_YOUR_CALM`).
//! * **Header blocks**: the decoded list is bounded by `limits.max_header_bytes` (HPACK
//!   bombs); `h2` bounds the CONTINUATION frames of one block and ends the connection
//!   past it.
//! * **Sending**: a response body is sent only as the client's window allows, at most
//!   [`SEND_BUFFER`] queued per stream; a stream whose client takes nothing (a zero
//!   window) for `upstream.write_timeout_seconds` once forwarded, as over HTTP/1.1, or
//!   `limits.idle_timeout_seconds` for robotsgate's own answers, is cut, its pacing turn
//!   held as for any cut exchange.
//! * **Control frames**: a SETTINGS or PING is answered before the next frame is read,
//!   so a flood waits on the client's own reading.
//! * **Idle**: a connection with no stream in progress closes after
//!   `limits.idle_timeout_seconds`; its preface must come within
//!   `limits.first_byte_timeout_seconds`.
//!
//! A client that resets a stream once its request holds its turn does not end the
//! exchange: the stream becomes a sink and the origin's response is read to its end
//! ([`H2Stream`]), as for an HTTP/1.1 client that hangs up; the turn ends with the
//! origin's answer, not a read timeout later.
//!
//! Costs per stream: one task, one [`ClientContext`] clone, a slot; the connection
//! itself is `h2`'s state plus [`SEND_BUFFER`] per stream at most.

use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pingora::apps::HttpServerApp;
use pingora::http::ResponseHeader;
use pingora::protocols::http::v2::server::{self as v2, H2Accept};
use pingora::protocols::http::ServerSession;
use pingora::protocols::{Digest, Stream, ALPN};
use pingora::server::ShutdownWatch;
use tokio::sync::Notify;

use crate::config::LimitsConfig;
use crate::downstream::context::{ClientContext, Protocol};
use crate::downstream::h2_stream::{H2Stream, Started};
use crate::downstream::head::{HeadError, HeadLimits};
use crate::downstream::refuse::FrontRefusal;
use crate::downstream::shutting_down;
use crate::downstream::slots::{SlotKind, Slots};
use crate::policy::answer::Answer;
use crate::telemetry::metrics;

/// Most response octets queued for one stream beyond what the socket has taken.
pub const SEND_BUFFER: usize = 64 * 1024;

/// Streams `h2` or this front refused as malformed before one connection is closed.
const MALFORMED_STREAMS: usize = 32;

/// The HTTP/2 settings of `robotsgate.limits`.
#[derive(Clone, Copy, Debug)]
pub struct Http2Limits {
    /// `limits.max_streams_per_connection`.
    max_streams: u32,
    /// `limits.max_header_bytes`, as the decoded header list's bound.
    max_header_list: u32,
}

impl Http2Limits {
    /// The HTTP/2 limits of `robotsgate.limits`.
    pub fn new(config: &LimitsConfig) -> Http2Limits {
        Http2Limits {
            max_streams: u32::try_from(config.max_streams_per_connection).unwrap_or(u32::MAX),
            max_header_list: u32::try_from(config.max_header_bytes).unwrap_or(u32::MAX),
        }
    }

    /// Pingora's h2 server options for these limits.
    fn options(&self) -> v2::H2Options {
        let mut options = v2::default_h2_options();
        options
            .max_concurrent_streams(self.max_streams)
            .max_header_list_size(self.max_header_list)
            .max_send_buffer_size(SEND_BUFFER);
        options
    }
}

/// Did the client pick HTTP/2 in this TLS connection's ALPN?
pub fn negotiated(stream: &Stream) -> bool {
    matches!(stream.selected_alpn_proto(), Some(ALPN::H2))
}

/// Checks a stream's request against the limits an HTTP/1.1 head is read within.
/// `body_ends`: the request has no body (its headers ended the stream, or
/// `Content-Length: 0`).
pub fn check(
    req: &pingora::http::RequestHeader,
    body_ends: bool,
    limits: &HeadLimits,
) -> Result<(), HeadError> {
    if req.method == http::Method::CONNECT {
        return Err(HeadError::Malformed(
            "CONNECT inside a tunnel or a redirected connection".into(),
        ));
    }
    if req.raw_path().len() > limits.max_request_line {
        return Err(HeadError::RequestLineTooLong);
    }
    if req.headers.len() > limits.max_headers {
        return Err(HeadError::TooManyHeaders);
    }
    // Pingora has refused an unreadable or conflicting `content-length` already.
    let length = req
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| std::str::from_utf8(v.as_bytes()).ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if length.is_some_and(|n| n > limits.max_body) {
        return Err(HeadError::BodyTooLarge);
    }
    // As over HTTP/1.1: a body on GET or HEAD would reach an HTTP/1.1 origin that may
    // read it as a second request.
    if matches!(req.method, http::Method::GET | http::Method::HEAD) && !body_ends {
        return Err(HeadError::BodyOnGet);
    }
    Ok(())
}

/// Streams in progress on one connection, and a wake-up when the last one ends.
#[derive(Default)]
struct InProgress {
    /// Streams being served.
    count: AtomicUsize,
    /// Woken when the last stream ends.
    none: Notify,
}

/// One stream in progress (see [`InProgress`]), counted in the process's too.
struct StreamServing(Arc<InProgress>, crate::downstream::drain::Serving);

impl InProgress {
    /// Counts one more stream served until the returned guard drops.
    fn start(self: &Arc<Self>) -> StreamServing {
        self.count.fetch_add(1, Ordering::AcqRel);
        StreamServing(self.clone(), crate::downstream::drain::Serving::start())
    }

    /// Resolves once no stream has been in progress for `idle`.
    async fn idle_for(&self, idle: Duration) {
        loop {
            // Registered before the count is read, so an end in between still wakes.
            let ended = self.none.notified();
            if self.count.load(Ordering::Acquire) == 0 {
                tokio::select! {
                    () = tokio::time::sleep(idle) => return,
                    () = ended => {}
                }
            } else {
                ended.await;
            }
        }
    }
}

impl Drop for StreamServing {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.none.notify_waiters();
        }
    }
}

/// What serving an HTTP/2 connection takes from the front: the HTTP application each
/// stream goes to, the limits, and the slots every listener shares.
pub struct Multiplexer<'a, A> {
    /// The HTTP application (robotsgate's Pingora proxy).
    pub http: &'a Arc<A>,
    /// The limits a request head is read within.
    pub limits: &'a HeadLimits,
    /// The connection and stream slots.
    pub slots: &'a Arc<Slots>,
    /// The HTTP/2 settings.
    pub settings: Http2Limits,
}

impl<A: HttpServerApp + Send + Sync + 'static> Multiplexer<'_, A> {
    /// Serves an HTTP/2 connection: every stream a request with `context`.
    pub async fn serve(
        &self,
        stream: Stream,
        client: Option<IpAddr>,
        mut context: ClientContext,
        shutdown: &ShutdownWatch,
    ) {
        context.protocol = Protocol::Http2;
        let digest = Arc::new(Digest {
            ssl_digest: stream.get_ssl_digest(),
            timing_digest: stream.get_timing_digest(),
            proxy_digest: stream.get_proxy_digest(),
            socket_digest: stream.get_socket_digest(),
        });
        let handshake = v2::handshake(stream, Some(self.settings.options()));
        let mut connection =
            match tokio::time::timeout(self.limits.first_byte_timeout, handshake).await {
                Ok(Ok(connection)) => connection,
                Ok(Err(e)) => {
                    log::debug!("HTTP/2 from {client:?}: no connection preface: {e}");
                    return;
                }
                Err(_) => {
                    metrics::record_refusal(metrics::RefusalReason::FirstByteTimeout);
                    return;
                }
            };
        let in_progress = Arc::new(InProgress::default());
        let mut malformed = 0;
        let mut draining = false;
        let shutdown_begins = shutting_down(shutdown.clone(), true);
        tokio::pin!(shutdown_begins);
        loop {
            let accepted = tokio::select! {
                biased;
                // Shutting down: GOAWAY, then the streams in progress finish.
                () = &mut shutdown_begins, if !draining => {
                    connection.graceful_shutdown();
                    draining = true;
                    continue;
                }
                // Accepting also drives the whole connection (every stream's frames).
                accepted = v2::HttpSession::from_h2_conn(&mut connection, digest.clone()) => accepted,
                () = in_progress.idle_for(self.limits.idle_timeout) => return,
            };
            let session = match accepted {
                Ok(Some(H2Accept::Session(session))) => session,
                Ok(Some(H2Accept::Rejected)) => {
                    malformed += 1;
                    metrics::record_refusal(metrics::RefusalReason::Malformed);
                    if malformed >= MALFORMED_STREAMS {
                        log::info!("HTTP/2 from {client:?}: {malformed} malformed streams; connection closed");
                        return;
                    }
                    continue;
                }
                // The client closed, or broke the protocol (`h2` has sent its GOAWAY).
                Ok(None) | Err(_) => return,
            };
            self.dispatch(session, client, &context, &in_progress, shutdown);
        }
    }

    /// Checks one stream and starts serving it on its own task.
    fn dispatch(
        &self,
        mut session: v2::HttpSession,
        client: Option<IpAddr>,
        context: &ClientContext,
        in_progress: &Arc<InProgress>,
        shutdown: &ShutdownWatch,
    ) {
        // Nothing written to this stream waits longer for the client's window.
        session.set_write_timeout(Some(self.limits.idle_timeout));
        let serving = in_progress.start();
        let admitted = match check(session.req_header(), session.is_body_empty(), self.limits) {
            Ok(()) => self.slots.take(client, SlotKind::Stream).map_err(|full| {
                FrontRefusal::new(503, full.reason(), full.why())
                    .retry_after(1)
                    .record(client)
            }),
            Err(e) => {
                let why = e.to_string();
                Err(FrontRefusal::new(e.status().unwrap_or(400), e.reason(), &why).record(client))
            }
        };
        let slot = match admitted {
            Ok(slot) => slot,
            Err(answer) => {
                tokio::spawn(async move {
                    answer_stream(&mut session, &answer).await;
                    drop(serving);
                });
                return;
            }
        };
        let (http, mut context, shutdown) = (self.http.clone(), context.clone(), shutdown.clone());
        let started = Arc::new(Started::default());
        let unread = self.limits.unread_timeout;
        context.started = Some(started.clone());
        tokio::spawn(async move {
            let stream = H2Stream::new(session, started, unread);
            let session = ServerSession::new_custom(Box::new(stream));
            context
                .scope(http.process_new_http(session, &shutdown))
                .await;
            drop((slot, serving));
        });
    }
}

/// Writes `answer` as the stream's whole response.
async fn answer_stream(session: &mut v2::HttpSession, answer: &Answer) {
    let Ok(mut header) = ResponseHeader::build(answer.status, Some(8)) else {
        return;
    };
    for (name, value) in answer.fields() {
        if header.insert_header(name, value.as_ref()).is_err() {
            return;
        }
    }
    if session
        .write_response_header(Box::new(header), false)
        .is_ok()
    {
        let _ = session.write_body(answer.body.clone(), true).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pingora::http::RequestHeader;

    fn limits() -> HeadLimits {
        HeadLimits::new(&LimitsConfig {
            max_request_line_bytes: 64,
            max_headers: 3,
            max_body_bytes: 100,
            ..LimitsConfig::default()
        })
    }

    fn request(method: &str, path: &str, headers: &[(&str, &str)]) -> RequestHeader {
        let mut req = RequestHeader::build(method, path.as_bytes(), None).expect("request");
        for (name, value) in headers {
            req.append_header(name.to_string(), *value).expect("header");
        }
        req
    }

    #[test]
    fn streams_get_the_limits_of_a_head() {
        let l = limits();
        assert!(check(&request("GET", "/a", &[]), true, &l).is_ok());
        let long = format!("/{}", "a".repeat(64));
        assert!(matches!(
            check(&request("GET", &long, &[]), true, &l),
            Err(HeadError::RequestLineTooLong)
        ));
        let many = [("a", "1"), ("b", "2"), ("c", "3"), ("d", "4")];
        assert!(matches!(
            check(&request("GET", "/", &many), true, &l),
            Err(HeadError::TooManyHeaders)
        ));
        assert!(matches!(
            check(
                &request("POST", "/", &[("content-length", "101")]),
                false,
                &l
            ),
            Err(HeadError::BodyTooLarge)
        ));
        assert!(check(
            &request("POST", "/", &[("content-length", "100")]),
            false,
            &l
        )
        .is_ok());
        assert!(matches!(
            check(&request("GET", "/", &[]), false, &l),
            Err(HeadError::BodyOnGet)
        ));
        assert!(matches!(
            check(&request("CONNECT", "/", &[]), true, &l),
            Err(HeadError::Malformed(_))
        ));
    }
}
