//! A plain request handed to its origin's owner by the front itself (fleet mode), without
//! a proxy pass of its own, on one HTTP/1.1 implementation: Pingora's.
//!
//! A member that does not own a request's origin only carries it: the owner judges,
//! paces and signs it, and its answer is the client's. For the common request — HTTP/1.1,
//! `GET` or `HEAD`, no body, to an origin whose owner this member already knows
//! ([`crate::enforce::Enforcer::known_owner`]) — the front relays it here:
//!
//! 1. **The request** is taken on the front's read of its head ([`Candidate`]: an
//!    HTTP/1.1 `GET` or `HEAD` without a body, its owner known), then parsed once by
//!    Pingora's HTTP/1 server session — the session the client is answered with, as on
//!    the proxy's path — and the request sent to the owner is rebuilt from that parse:
//!    its proxy credentials, `Connection` and any `robotsgate-peer` removed, this
//!    member's [`PeerContext`] added, written by Pingora's
//!    client session. A head the proxy's path accepts is relayed as the proxy's path
//!    would have read it.
//! 2. **The owner's answer** is read by Pingora's HTTP/1 client session on a kept
//!    mutual-TLS connection to the owner's peer channel (`pool.rs`) — the library the owner wrote it
//!    with — and written to the client by Pingora's server session over the client's
//!    connection (the same session the proxy's path answers with). Its body's end is
//!    Pingora's to find; a connection whose answer ended any other way than by its
//!    framing (close-delimited, a coding Pingora does not read as chunked, octets past
//!    its end) is closed, never pooled.
//!
//! Everything else takes the proxy's path (`pass.rs`), and so does a request the
//! owner never worked on ([`Asked::NotSent`]: the connection closed before a single
//! octet of an answer, or the owner said it gave the key up), which the proxy routes
//! again.
//!
//! Why: the proxy's path costs the relaying member a whole proxy pass, a handed-over
//! request 2.5× a local one, both members counted (`bench/fleet_bench.py`). Costs: one
//! parse of the request head (the client session's, which the answer is written with),
//! one of the answer's, a copy of each body chunk, a pool lookup (no timer, no system
//! call). A request the relay does not take after Pingora's parse (a rare
//! `Connection` option, an expectation) or that the owner never worked on is parsed
//! once more by the proxy's path.

use std::io::Cursor;
use std::time::{Duration, Instant};

use bytes::Bytes;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::protocols::http::v1::client::HttpSession as OwnerSession;
use pingora::protocols::http::v1::server::HttpSession as HeadParser;
use pingora::protocols::http::ServerSession;

use super::owner::{gave_up, mark_for_owner, peer_header};
use super::{HandOver, Share};
use crate::fleet::{Owner, PeerContext};
use crate::policy::target::{Scheme, Target};
use crate::telemetry::metrics::{self, Mode, Outcome};

/// A request the relay may take, as the front read its head: an HTTP/1.1 `GET` or
/// `HEAD` without a body, for an origin whose owner this member knows.
pub struct Candidate {
    /// Its origin's owner.
    owner: Owner,
    /// Its target, read as the proxy reads it.
    target: Target,
}

/// A request the relay takes, once Pingora parsed it: what the request for the owner
/// (written once, apart: Pingora's client session takes it) is rebuilt from, its
/// `User-Agent` for the access log, how it arrived, its target and its origin's owner.
pub struct Relayable {
    /// This member's context for it, as the header: a request written on a kept
    /// connection that turned out closed is rebuilt with it for a new one.
    context: http::HeaderValue,
    /// The client's `User-Agent`, for the access log.
    agent: Option<http::HeaderValue>,
    /// How it arrived (for the metrics and the access log).
    mode: Mode,
    /// Its origin's owner.
    owner: Owner,
    /// Its target.
    target: Target,
    /// Its place in this member's connections at the owner, held until it ends.
    _share: Share,
}

/// What asking the owner gave.
pub enum Asked {
    /// The owner's final answer head, read: its body is still to come on the session.
    Answer(Box<Upstream>),
    /// The owner never worked on the request (closed unanswered, gave the key up): the
    /// proxy's path takes it, and routes it again.
    NotSent,
    /// The owner did not answer in time, or answered what cannot be read: the 503
    /// answered instead.
    Silent,
}

/// The owner's side of one relayed exchange: Pingora's client session, its answer head
/// read.
pub struct Upstream {
    /// The session.
    session: OwnerSession,
}

impl Candidate {
    /// Its origin's owner.
    pub fn owner(&self) -> &Owner {
        &self.owner
    }
}

impl Relayable {
    /// Its origin's owner.
    pub fn owner(&self) -> &Owner {
        &self.owner
    }
}

impl HandOver {
    /// The request for `target` when its origin's owner is another member this one
    /// knows: what the front relays itself (`None`: the proxy's path).
    pub fn candidate(&self, target: Target) -> Option<Candidate> {
        let owner = self.enforcer.known_owner(&target.origin)?;
        Some(Candidate { owner, target })
    }

    /// Sends `sent` (the request for `request`'s owner) and reads the owner's final answer
    /// head: on an idle connection from the pool, then once more on a new one when the
    /// idle one turns out closed (the owner never read the request), the request rebuilt
    /// from `client`'s (the client's request as Pingora parsed it: one copy on the usual
    /// path). A new connection is opened within the connect timeout.
    pub async fn ask(
        &self,
        sent: Box<RequestHeader>,
        request: &Relayable,
        client: &RequestHeader,
    ) -> Asked {
        let owner = &request.owner;
        let asked = match self.pool.take(&owner.peer) {
            Some(idle) => match self.exchange_head(idle, sent).await {
                Some(asked) => Some(asked),
                None => {
                    log::debug!(
                        "a kept connection to {} was closed: the request goes on a new one",
                        owner.member
                    );
                    match for_owner(client, &request.context) {
                        Some(sent) => Box::pin(self.ask_anew(owner, sent)).await,
                        None => None,
                    }
                }
            },
            // Boxed, as above: a new connection's future (its TLS handshake) is kilobytes
            // that the usual request, on a kept connection, would otherwise carry and
            // copy.
            None => Box::pin(self.ask_anew(owner, sent)).await,
        };
        // `NotSent`: it said it gave the key up, or never answered; the caller routes
        // the request again (`HandOver::route_again`, which forgets the owner).
        asked.unwrap_or(Asked::NotSent)
    }

    /// [`HandOver::exchange_head`] on a new connection to `owner`'s peer channel, when
    /// `owner` answers it ([`crate::fleet::answered_by`]).
    async fn ask_anew(&self, owner: &Owner, sent: Box<RequestHeader>) -> Option<Asked> {
        let peer = self.enforcer.owners()?.peer(owner)?;
        let connect = self.connector.new_stream(&peer);
        let stream = pingora::time::timeout(self.connect_timeout, connect)
            .await
            .ok()?
            .ok()?;
        if !crate::fleet::answered_by(&owner.member, stream.get_ssl_digest().as_deref()) {
            return None;
        }
        self.exchange_head(stream, sent).await
    }

    /// Writes `sent` on `stream` to its owner and reads its answer's final head
    /// (informational ones skipped). `None`: the request could not be written, or the
    /// connection closed before a single octet of an answer.
    async fn exchange_head(
        &self,
        stream: pingora::protocols::Stream,
        sent: Box<RequestHeader>,
    ) -> Option<Asked> {
        let mut session = OwnerSession::new(stream);
        session.read_timeout = Some(self.enforcer.owner_answers_within());
        session.write_request_header(sent).await.ok()?;
        loop {
            // A stop's bound ends the wait as its own bound does, whenever it was asked.
            let read = tokio::select! {
                read = session.read_response() => read,
                () = self.enforcer.stop_due() => return Some(Asked::Silent),
            };
            if let Err(e) = read {
                let unanswered = session.resp_header().is_none()
                    && matches!(
                        e.etype(),
                        pingora::ErrorType::ConnectionClosed | pingora::ErrorType::ReadError
                    );
                return (!unanswered).then_some(Asked::Silent);
            }
            let Some(head) = session.resp_header() else {
                return Some(Asked::Silent);
            };
            if head.status.is_informational() {
                continue;
            }
            if gave_up(head) {
                return Some(Asked::NotSent);
            }
            return Some(Asked::Answer(Box::new(Upstream { session })));
        }
    }

    /// Passes the owner's answer on to the client through `client` (Pingora's session
    /// over the client's connection, its request read), then gives the owner's
    /// connection back to the pool when its framing ended the answer; `Err` when either
    /// side broke off.
    pub async fn pass_on(
        &self,
        client: &mut ServerSession,
        mut upstream: Box<Upstream>,
        request: &Relayable,
    ) -> Result<u16, ()> {
        let Some(head) = upstream.session.resp_header() else {
            return Err(());
        };
        let head: ResponseHeader = head.clone();
        let status = head.status.as_u16();
        client
            .write_response_header(Box::new(head))
            .await
            .map_err(|_| ())?;
        loop {
            match upstream.session.read_body_bytes().await {
                Ok(Some(chunk)) => client
                    .write_response_body(chunk, false)
                    .await
                    .map_err(|_| ())?,
                Ok(None) => break,
                Err(_) => return Err(()),
            }
        }
        client
            .write_response_body(Bytes::new(), true)
            .await
            .map_err(|_| ())?;
        if let Some(stream) = reusable(upstream.session).await {
            self.pool.give(&request.owner.peer, stream);
        }
        Ok(status)
    }
}

/// The owner's connection once its answer was read to the end, when its framing says
/// it may carry another (`None`: close-delimited, an unknown coding, conflicting
/// lengths, `Connection: close`, or octets past the answer's end).
async fn reusable(mut session: OwnerSession) -> Option<pingora::protocols::Stream> {
    session.respect_keepalive();
    session.reuse().await
}

/// The request the relay sends for `candidate`, and what else it keeps of it, from
/// Pingora's parse of the client's request (`request`, which arrived as `mode`), with
/// this member's `context` for it (its [`peer_header`]), when the relay takes it:
/// HTTP/1.1, `GET` or `HEAD`, without a body, an upgrade, an expectation or a
/// `Connection` option but `keep-alive` and `close`.
pub fn relayable(
    (candidate, share): (Candidate, Share),
    request: &RequestHeader,
    context: http::HeaderValue,
    mode: Mode,
) -> Option<(Box<RequestHeader>, Relayable)> {
    if !plain(request) {
        return None;
    }
    let sent = for_owner(request, &context)?;
    let relayable = Relayable {
        context,
        agent: request.headers.get(http::header::USER_AGENT).cloned(),
        mode,
        owner: candidate.owner,
        target: candidate.target,
        _share: share,
    };
    Some((sent, relayable))
}

/// The request for the owner from the client's `request`: its `Connection` (the
/// connection to the owner stays open whatever the client's does) and proxy credentials
/// removed, this member's `context` (encoded) in place of any the client sent.
fn for_owner(request: &RequestHeader, context: &http::HeaderValue) -> Option<Box<RequestHeader>> {
    let mut sent = Box::new(request.clone());
    sent.remove_header(&http::header::CONNECTION);
    mark_for_owner(&mut sent, context.clone()).ok()?;
    Some(sent)
}

/// Whether the relay takes `request` as Pingora parsed it: HTTP/1.1, `GET` or `HEAD`,
/// without a body, an upgrade, an expectation or a `Connection` option but
/// `keep-alive` and `close`.
fn plain(request: &RequestHeader) -> bool {
    if request.version != http::Version::HTTP_11
        || !matches!(request.method, http::Method::GET | http::Method::HEAD)
    {
        return false;
    }
    let refused = ["content-length", "transfer-encoding", "upgrade", "expect"];
    if refused.iter().any(|r| request.headers.contains_key(*r)) {
        return false;
    }
    let allowed = |option: &[u8]| {
        let option = option.trim_ascii();
        option.is_empty()
            || option.eq_ignore_ascii_case(b"keep-alive")
            || option.eq_ignore_ascii_case(b"close")
    };
    request
        .headers
        .get_all(http::header::CONNECTION)
        .iter()
        .all(|value| value.as_bytes().split(|b| *b == b',').all(allowed))
}

/// Counts a request handed over, and logs it (its `status`, 0 when the client got none).
pub fn record(relayed: &Relayable, status: u16, started: Instant) {
    let elapsed = started.elapsed().as_secs_f64();
    let target = &relayed.target;
    let mode = relayed.mode;
    let protocol = metrics::Protocol::Http1;
    let https = target.origin.scheme == Scheme::Https;
    metrics::record_request(Outcome::HandedOver, mode, protocol, https, elapsed);
    if !crate::telemetry::logging::access_enabled() {
        return;
    }
    let owner = &relayed.owner.member;
    let agent = relayed.agent.as_ref();
    let agent = agent.map(|a| String::from_utf8_lossy(a.as_bytes()));
    crate::telemetry::logging::AccessRecord {
        origin: &target.origin,
        path: target.path.as_str(),
        agent: agent.as_deref(),
        tokens_from: "",
        mode_from: "",
        mode: mode.label(),
        protocol: protocol.label(),
        decision: Outcome::HandedOver.label(),
        status,
        upstream_status: Some(status),
        upstream_protocol: Some("http/1.1"),
        line: None,
        why: &format_args!("handed to {owner}"),
        pacing_wait_seconds: 0.0,
        delay_rule: None,
        usage: None,
        identity: None,
        payment: None,
        duration_seconds: elapsed,
        error: None,
    }
    .emit();
}

/// The request the owner reads for a client's request `head`, read as the owner reads
/// it (Pingora's HTTP/1 server session over what this relay writes, with an empty
/// [`PeerContext`]), beside the request the proxy's path reads from `head`: `None` when
/// the relay does not take `head`. What the fuzz target `relayed_request` compares.
pub fn owner_reads(head: &[u8]) -> Option<(RequestHeader, RequestHeader)> {
    on_its_own_runtime(read_by_owner(head))
}

/// [`owner_reads`], on the caller's runtime.
async fn read_by_owner(head: &[u8]) -> Option<(RequestHeader, RequestHeader)> {
    let mut parser = HeadParser::new(Box::new(Cursor::new(head.to_vec())));
    parser.read_request().await.ok()??;
    let parsed = parser.req_header().clone();
    // Whose and where do not change what is written: any owner and target do.
    let candidate = Candidate {
        owner: Owner {
            key: String::new(),
            member: String::new(),
            epoch: 0,
            peer: String::new(),
        },
        target: Target::from_request(b"http://fuzz.example/", None, Scheme::Http).ok()?,
    };
    let context = peer_header(&PeerContext::default()).ok()?;
    let share = super::Shares::new(1).take("", None, None)?;
    let (sent, _) = relayable((candidate, share), &parsed, context, Mode::Explicit)?;
    let wire = pingora::protocols::http::v1::client::http_req_header_to_wire(&sent)?;
    let mut owner = HeadParser::new(Box::new(Cursor::new(wire.to_vec())));
    owner.read_request().await.ok()??;
    Some((parsed, owner.req_header().clone()))
}

/// Reads `octets` as an owner's whole answer to a `GET`, as the relay reads it
/// (Pingora's client session, the octets arriving at once, the connection then still
/// open): `Some(octets.len())` when the relay would give the connection back to the
/// pool — its answer ended by its framing exactly where the octets end — and `None` when
/// it would close it (or nothing could be read). What the fuzz target `owner_answer`
/// checks: one octet more is always one too many.
pub fn answer_end(octets: &[u8]) -> Option<usize> {
    on_its_own_runtime(read_answer(octets))
}

/// [`answer_end`], on the caller's runtime.
async fn read_answer(octets: &[u8]) -> Option<usize> {
    use tokio::io::AsyncWriteExt;
    let (ours, mut theirs) = tokio::io::duplex(octets.len() + 4096);
    theirs.write_all(octets).await.ok()?;
    let request = RequestHeader::build("GET", b"/", None).ok()?;
    let mut session = OwnerSession::new(Box::new(ours));
    session.read_timeout = Some(Duration::from_millis(50));
    session.write_request_header(Box::new(request)).await.ok()?;
    loop {
        session.read_response().await.ok()?;
        if !session.resp_header()?.status.is_informational() {
            break;
        }
    }
    while session.read_body_bytes().await.ok()?.is_some() {}
    reusable(session).await.map(|_| octets.len())
}

/// Runs `future` to its end on a current-thread runtime of its own: the checks above
/// are called from tests and fuzz targets, outside any runtime.
fn on_its_own_runtime<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a current-thread runtime")
        .block_on(future)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_request_is_rebuilt_without_what_is_never_forwarded() {
        let head = b"GET http://a.example/x HTTP/1.1\r\nHost: a.example\r\nProxy-Authorization: Basic eDp5\r\nConnection: keep-alive\r\nrobotsgate-peer: forged\r\nUser-Agent: Bot/1\r\n\r\n";
        let (parsed, owner) = owner_reads(head).expect("relayed");
        assert_eq!(owner.method, parsed.method);
        assert_eq!(owner.raw_path(), b"http://a.example/x");
        for gone in ["proxy-authorization", "connection"] {
            assert!(owner.headers.get(gone).is_none(), "{gone}");
        }
        // The client's own context never reaches the owner: only this member's does.
        let own = PeerContext::default().encode();
        let contexts: Vec<_> = owner
            .headers
            .get_all(crate::fleet::PEER_HEADER)
            .iter()
            .collect();
        assert_eq!(contexts, [own.as_str()]);
        assert_eq!(
            owner.headers.get("user-agent").map(|v| v.as_bytes()),
            Some(&b"Bot/1"[..])
        );
    }

    #[test]
    fn heads_ending_in_a_bare_lf_are_relayed_as_the_proxy_reads_them() {
        for head in [
            &b"GET /x HTTP/1.1\nHost: a.example\n\n"[..],
            b"GET /x HTTP/1.1\r\nHost: a.example\r\n\n",
            b"GET /x HTTP/1.1\r\nHost: a.example\n\r\n",
        ] {
            let (parsed, owner) = owner_reads(head).expect("relayed");
            assert_eq!(owner.raw_path(), parsed.raw_path());
            assert_eq!(owner.headers.get("host"), parsed.headers.get("host"));
        }
    }

    #[test]
    fn what_the_relay_leaves_to_the_proxy() {
        for head in [
            &b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\n"[..],
            b"GET /x HTTP/1.0\r\nHost: a\r\n\r\n",
            b"GET /x HTTP/1.1\r\nHost: a\r\nUpgrade: h2c\r\nConnection: upgrade\r\n\r\n",
            b"GET /x HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, x-other\r\n\r\n",
            b"GET /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n",
        ] {
            assert!(
                owner_reads(head).is_none(),
                "{}",
                String::from_utf8_lossy(head)
            );
        }
    }

    #[test]
    fn an_answer_ends_where_its_framing_says_or_its_connection_closes() {
        let pooled = [
            &b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"[..],
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\n\r\nok",
            b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
        ];
        for answer in pooled {
            assert_eq!(answer_end(answer), Some(answer.len()), "{answer:?}");
            let past = [answer, b"X"].concat();
            assert_eq!(answer_end(&past), None, "octets past its end: {past:?}");
        }
        // A coding Pingora does not read as chunked is close-delimited: never pooled,
        // whatever its `Connection` says (the break of a hand-written relay).
        let smuggled = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: xchunked\r\nConnection: keep-alive\r\n\r\n0\r\n\r\n";
        assert_eq!(answer_end(smuggled), None);
        let conflicting = b"HTTP/1.1 200 OK\r\nContent-Length: 2, 3\r\n\r\nok";
        assert_eq!(answer_end(conflicting), None);
    }
}
