//! A plain request handed to its origin's owner by the front itself (fleet mode), without
//! a proxy pass of its own.
//!
//! A member that does not own a request's origin only carries it: the owner judges,
//! paces and signs it, and its answer is the client's. For the common request — HTTP/1.1,
//! `GET` or `HEAD`, no body, to an origin whose owner this member already knows
//! ([`Enforcer::known_owner`]) — the front relays it here: the request head as the
//! client sent it, its proxy credentials, `Connection` and any `robotsgate-peer`
//! removed and this member's [`PeerContext`] added, on a pooled mutual-TLS connection
//! to the owner's peer channel (Pingora's connector, `fleet::channel`); then the owner's
//! answer, its head and body passed on as they come, the body's end found from its
//! framing (`Content-Length`,
//! chunked, or the owner's close). Everything else takes the proxy's path
//! (`proxy::handover`), and so does a request this relay could not deliver before the
//! owner answered a single octet ([`Relayed::NotSent`]: the owner closed the connection,
//! or said it gave the key up), which the proxy routes again.
//!
//! Why: the proxy's path costs the relaying member a whole proxy pass, and a handed-over
//! request 2.5× a local one, both members counted; relayed here, 1.6×, as with HAProxy
//! in the relaying member's place (`bench/fleet_bench.py`). Costs: one parse of the
//! request head and of the answer's, one copy of each body read, a pool lookup.

use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use pingora::connectors::TransportConnector;
use pingora::protocols::Stream;
use pingora::upstreams::peer::Peer;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::downstream::context::ClientContext;
use crate::enforce::Enforcer;
use crate::fleet::{Owner, PeerContext, PEER_HEADER};
use crate::policy::target::{Scheme, Target};
use crate::telemetry::metrics::{self, Outcome};

/// The owner's answer head can be no longer than this.
const MAX_ANSWER_HEAD: usize = 64 * 1024;

/// How a request went to its owner.
pub(super) enum Relayed {
    /// The owner's answer was passed on; `keep_alive`: the client's connection serves its
    /// next request (the owner kept its own open and framed the answer).
    Answered {
        /// The connection goes on.
        keep_alive: bool,
    },
    /// Nothing was written to the client and the owner never worked on the request (it
    /// closed the connection before answering, or gave the key up): the proxy's path
    /// takes it, and routes it again.
    NotSent,
    /// The exchange broke after the client's answer began (or the owner did not answer
    /// in time, which was answered 503): the client's connection closes.
    Broken,
}

/// The front's relay of plain requests to their owners: the connector that pools
/// mutual-TLS connections to owners' peer channels, and its timeouts.
pub struct RequestHandOver {
    /// The fleet's door: owners, their peers, the longest an owner takes to answer.
    enforcer: std::sync::Arc<Enforcer>,
    /// Opens, and pools, connections to owners.
    connector: TransportConnector,
    /// The longest wait to connect to an owner.
    connect_timeout: Duration,
    /// How long a pooled connection to an owner may stay idle.
    idle: Duration,
}

impl RequestHandOver {
    /// The relay of `enforcer`'s fleet, connecting within `connect_timeout`, keeping
    /// connections idle at most `idle`.
    pub fn new(
        enforcer: std::sync::Arc<Enforcer>,
        connect_timeout: Duration,
        idle: Duration,
    ) -> RequestHandOver {
        RequestHandOver {
            enforcer,
            connector: TransportConnector::new(None),
            connect_timeout,
            idle,
        }
    }

    /// The request to relay and its owner, when `head` (its octets through the blank
    /// line) is one this relay takes, in `context`; `None` for the proxy's path.
    pub(super) fn eligible(&self, head: &[u8], context: &ClientContext) -> Option<Relayable> {
        self.enforcer.owners()?;
        if context.handed.is_some() {
            return None;
        }
        let request = Plain::parse(head)?;
        let target = request.target(context)?;
        let owner = self.enforcer.known_owner(&target.origin)?;
        Some(Relayable {
            request,
            owner,
            target,
        })
    }

    /// Relays `request` (its `head`) from `client`, whose context is `context`, to its
    /// owner, and the owner's answer back.
    pub(super) async fn relay<C: AsyncRead + AsyncWrite + Unpin + Send>(
        &self,
        client: &mut C,
        head: &[u8],
        request: &Relayable,
        context: &ClientContext,
        peer_client: Option<std::net::IpAddr>,
    ) -> Relayed {
        let started = Instant::now();
        let owner = &request.owner;
        let Some(peer) = self.enforcer.owners().and_then(|o| o.peer(owner)) else {
            return Relayed::NotSent;
        };
        let me = self.enforcer.owners().map_or("", |o| o.me());
        let sent = to_owner(head, &context.peer_context(me, peer_client));
        let Some((mut upstream, answer)) = self.ask(&peer, &sent).await else {
            return Relayed::NotSent;
        };
        let answer = match answer {
            Asked::Answer(answer) => answer,
            Asked::GaveUp => {
                self.enforcer.forget_owner(owner);
                return Relayed::NotSent;
            }
            Asked::Silent => {
                let refusal = crate::enforce::Refusal::FleetUnavailable {
                    why: "its owner did not answer in time",
                }
                .answer();
                crate::downstream::refuse::write_answer(client, &refusal).await;
                record(request, context, refusal.status, started);
                return Relayed::Broken;
            }
        };
        let head_only = request.request.head_only;
        let relayed = self
            .pass_on(client, &mut upstream, &answer, head_only)
            .await;
        let status = answer.status;
        let keep_alive = relayed.is_ok() && answer.keep_alive && !answer.until_close;
        if keep_alive {
            let key = peer.reuse_hash();
            self.connector
                .release_stream(upstream, key, Some(self.idle));
        }
        record(request, context, status, started);
        match relayed {
            Ok(()) => Relayed::Answered { keep_alive },
            Err(()) => Relayed::Broken,
        }
    }

    /// Sends `sent` to the owner at `peer` and reads its answer head: on a pooled
    /// connection, then once more on a new one when the pooled one turns out closed.
    /// `None`: the owner could not be asked, or closed the connection unanswered.
    async fn ask(
        &self,
        peer: &pingora::upstreams::peer::HttpPeer,
        sent: &[u8],
    ) -> Option<(Stream, Asked)> {
        let connected = tokio::time::timeout(self.connect_timeout, self.connector.get_stream(peer));
        let (mut upstream, reused) = connected.await.ok()?.ok()?;
        if let Some(asked) = self.exchange_head(&mut upstream, sent).await {
            return Some((upstream, asked));
        }
        if !reused {
            return None;
        }
        let fresh = tokio::time::timeout(self.connect_timeout, self.connector.new_stream(peer));
        let mut upstream = fresh.await.ok()?.ok()?;
        let asked = self.exchange_head(&mut upstream, sent).await?;
        Some((upstream, asked))
    }

    /// Writes the request head and reads the answer's head (skipping informational
    /// ones). `None`: the head could not be written, or the connection closed before a
    /// single octet of an answer.
    async fn exchange_head(&self, upstream: &mut Stream, sent: &[u8]) -> Option<Asked> {
        if upstream.write_all(sent).await.is_err() || upstream.flush().await.is_err() {
            return None;
        }
        let within = self.enforcer.owner_answers_within();
        let mut buffer = BytesMut::with_capacity(4096);
        let mut answered = false;
        loop {
            let read = tokio::time::timeout(within, read_answer(upstream, &mut buffer)).await;
            let answer = match read {
                Err(_) => return Some(Asked::Silent),
                Ok(HeadRead::Closed) if buffer.is_empty() && !answered => return None,
                Ok(HeadRead::Closed | HeadRead::Unreadable) => return Some(Asked::Silent),
                Ok(HeadRead::Head(answer)) => answer,
            };
            if (100..200).contains(&answer.status) {
                // What followed it is the next head's start.
                (buffer, answered) = (answer.rest, true);
                continue;
            }
            if answer.gave_up {
                return Some(Asked::GaveUp);
            }
            return Some(Asked::Answer(answer));
        }
    }

    /// Writes the owner's `answer` to the client and relays its body, as its framing
    /// says; `Err` when either side broke off.
    async fn pass_on<C: AsyncWrite + Unpin>(
        &self,
        client: &mut C,
        upstream: &mut Stream,
        answer: &Answer,
        head_only: bool,
    ) -> Result<(), ()> {
        let mut buffer = answer.rest.clone();
        let mut body = if head_only || matches!(answer.status, 204 | 304) {
            Body::Length(0)
        } else {
            answer.body
        };
        let mut out = BytesMut::with_capacity(answer.head.len() + buffer.len());
        out.extend_from_slice(&answer.head);
        let within = self.enforcer.owner_answers_within();
        loop {
            let take = body.take(&buffer);
            out.extend_from_slice(&buffer[..take]);
            buffer.advance(take);
            if !out.is_empty() {
                client.write_all(&out).await.map_err(|_| ())?;
                out.clear();
            }
            if body.done() {
                return client.flush().await.map_err(|_| ());
            }
            if body == Body::Chunked(Chunked::Broken) {
                return Err(());
            }
            buffer.clear();
            buffer.reserve(16 * 1024);
            let read = tokio::time::timeout(within, upstream.read_buf(&mut buffer)).await;
            match read {
                Ok(Ok(0)) if body.until_close() => return client.flush().await.map_err(|_| ()),
                Ok(Ok(n)) if n > 0 => {}
                _ => return Err(()),
            }
        }
    }
}

/// What asking the owner gave.
enum Asked {
    /// Its answer.
    Answer(Answer),
    /// It no longer serves the key ([`crate::fleet::owner_gave_up`]).
    GaveUp,
    /// It did not answer in time, or answered what cannot be read.
    Silent,
}

/// A request the relay takes: what its head says, its target, and its origin's owner.
pub(super) struct Relayable {
    /// What its head says.
    request: Plain,
    /// Its origin's owner.
    owner: Owner,
    /// Its target, read as the proxy reads it.
    target: Target,
}

impl Relayable {
    /// The client closes its connection after this request (`Connection: close`).
    pub(super) fn closes(&self) -> bool {
        self.request.close
    }
}

/// What a request head says that the relay needs.
struct Plain {
    /// The request target as sent.
    raw_target: String,
    /// Its `Host` header.
    host: Option<Vec<u8>>,
    /// A `HEAD` request: its answer has no body.
    head_only: bool,
    /// Its `User-Agent` (for the access log).
    agent: Option<String>,
    /// The client closes its connection after this request (`Connection: close`).
    close: bool,
}

impl Plain {
    /// Reads a request head; `None` unless it is HTTP/1.1, `GET` or `HEAD`, without a
    /// body, an upgrade, an expectation or a `Connection` option but `keep-alive` and
    /// `close`.
    fn parse(head: &[u8]) -> Option<Plain> {
        let mut headers = [httparse::EMPTY_HEADER; 128];
        let mut request = httparse::Request::new(&mut headers);
        let Ok(httparse::Status::Complete(_)) = request.parse(head) else {
            return None;
        };
        let head_only = match request.method? {
            "GET" => false,
            "HEAD" => true,
            _ => return None,
        };
        if request.version? != 1 {
            return None;
        }
        let (mut host, mut agent, mut close) = (None, None, false);
        for header in request.headers.iter() {
            let name = header.name;
            let refused = ["content-length", "transfer-encoding", "upgrade", "expect"];
            if refused.iter().any(|r| name.eq_ignore_ascii_case(r)) {
                return None;
            }
            if name.eq_ignore_ascii_case("connection") {
                for token in String::from_utf8_lossy(header.value).split(',') {
                    match token.trim().to_ascii_lowercase().as_str() {
                        "keep-alive" => {}
                        "close" => close = true,
                        _ => return None,
                    }
                }
            }
            if name.eq_ignore_ascii_case("host") {
                host = Some(header.value.to_vec());
            }
            if name.eq_ignore_ascii_case("user-agent") {
                agent = Some(String::from_utf8_lossy(header.value).into_owned());
            }
        }
        Some(Plain {
            raw_target: request.path?.to_string(),
            host,
            head_only,
            agent,
            close,
        })
    }

    /// Its target, read as the proxy reads it in `context`.
    fn target(&self, context: &ClientContext) -> Option<Target> {
        context
            .target(self.raw_target.as_bytes(), self.host.as_deref())
            .ok()
    }
}

/// The head as it goes to the owner: the client's request line and headers but its
/// proxy credentials, any `robotsgate-peer` and `Connection` (the connection to the
/// owner stays open whatever the client's does), then this member's `context`.
fn to_owner(head: &[u8], context: &PeerContext) -> Vec<u8> {
    let mut sent = Vec::with_capacity(head.len() + 256);
    let body = head.strip_suffix(b"\r\n\r\n").unwrap_or(head);
    for (i, line) in body.split(|&b| b == b'\n').enumerate() {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let name = line.split(|&b| b == b':').next().unwrap_or_default();
        let dropped = [
            &b"proxy-authorization"[..],
            b"connection",
            PEER_HEADER.as_bytes(),
        ];
        if i > 0
            && dropped
                .iter()
                .any(|d| name.trim_ascii().eq_ignore_ascii_case(d))
        {
            continue;
        }
        sent.extend_from_slice(line);
        sent.extend_from_slice(b"\r\n");
    }
    sent.extend_from_slice(PEER_HEADER.as_bytes());
    sent.extend_from_slice(b": ");
    sent.extend_from_slice(context.encode().as_bytes());
    sent.extend_from_slice(b"\r\n\r\n");
    sent
}

/// The owner's answer head, as read.
struct Answer {
    /// Its status.
    status: u16,
    /// The head's octets, through its blank line.
    head: Vec<u8>,
    /// Octets read after the head (the body's start).
    rest: BytesMut,
    /// How its body ends.
    body: Body,
    /// Its body ends when the owner closes the connection.
    until_close: bool,
    /// The owner keeps the connection open after it.
    keep_alive: bool,
    /// It says the owner gave the key up.
    gave_up: bool,
}

/// How much of a body is still to come.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Body {
    /// This many octets.
    Length(u64),
    /// Chunked: where the parse of its framing stands.
    Chunked(Chunked),
    /// Until the owner closes the connection.
    UntilClose,
}

impl Body {
    /// How many of `bytes` belong to the body, and notes them.
    fn take(&mut self, bytes: &[u8]) -> usize {
        match self {
            Body::Length(left) => {
                let n = (*left).min(bytes.len() as u64);
                *left -= n;
                n as usize
            }
            Body::Chunked(state) => state.take(bytes),
            Body::UntilClose => bytes.len(),
        }
    }

    /// Has the body ended?
    fn done(&self) -> bool {
        match self {
            Body::Length(left) => *left == 0,
            Body::Chunked(state) => *state == Chunked::Done,
            Body::UntilClose => false,
        }
    }

    /// Does it end with the connection?
    fn until_close(&self) -> bool {
        *self == Body::UntilClose
    }
}

/// Where the parse of a chunked body's framing stands (RFC 9112 §7.1): only enough to
/// find its end, the octets themselves passed on as they are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Chunked {
    /// In a chunk-size line: the size so far, and whether an extension began.
    Size(u64, bool),
    /// The size line's LF is next.
    SizeLf(u64),
    /// In a chunk's data: octets left.
    Data(u64),
    /// The CR after a chunk's data is next.
    DataCr,
    /// The LF after a chunk's data is next.
    DataLf,
    /// At the start of a trailer line (or the final blank line).
    TrailerStart,
    /// In a trailer line.
    Trailer,
    /// The LF ending the body is next.
    EndLf,
    /// The body ended.
    Done,
    /// The framing is broken: nothing more is taken.
    Broken,
}

impl Chunked {
    /// How many of `bytes` belong to the body, and moves on past them.
    fn take(&mut self, bytes: &[u8]) -> usize {
        let mut i = 0;
        while i < bytes.len() {
            if let Chunked::Data(left) = *self {
                let n = left.min((bytes.len() - i) as u64);
                i += n as usize;
                *self = if left == n {
                    Chunked::DataCr
                } else {
                    Chunked::Data(left - n)
                };
                continue;
            }
            let b = bytes[i];
            *self = match (*self, b) {
                (Chunked::Done | Chunked::Broken, _) => return i,
                (Chunked::Size(n, false), b) if b.is_ascii_hexdigit() => {
                    let digit = u64::from((b as char).to_digit(16).unwrap_or(0));
                    match n.checked_mul(16).and_then(|n| n.checked_add(digit)) {
                        Some(n) => Chunked::Size(n, false),
                        None => Chunked::Broken,
                    }
                }
                (Chunked::Size(n, _), b'\r') => Chunked::SizeLf(n),
                (Chunked::Size(n, _), b'\n') | (Chunked::SizeLf(n), b'\n') => {
                    if n == 0 {
                        Chunked::TrailerStart
                    } else {
                        Chunked::Data(n)
                    }
                }
                (Chunked::Size(n, _), b';' | b' ' | b'\t') => Chunked::Size(n, true),
                (Chunked::Size(n, true), _) => Chunked::Size(n, true),
                (Chunked::DataCr, b'\r') => Chunked::DataLf,
                (Chunked::DataCr | Chunked::DataLf, b'\n') => Chunked::Size(0, false),
                (Chunked::TrailerStart, b'\r') => Chunked::EndLf,
                (Chunked::TrailerStart | Chunked::EndLf, b'\n') => Chunked::Done,
                (Chunked::Trailer, b'\n') => Chunked::TrailerStart,
                (Chunked::TrailerStart | Chunked::Trailer, _) => Chunked::Trailer,
                _ => Chunked::Broken,
            };
            i += 1;
            if *self == Chunked::Done {
                return i;
            }
        }
        i
    }
}

/// What reading an answer head gave.
enum HeadRead {
    /// A complete head.
    Head(Answer),
    /// The connection closed first (after `buffer`'s octets).
    Closed,
    /// It cannot be read as an answer, or is too long.
    Unreadable,
}

/// Reads one answer head into `buffer` (octets past it stay in the answer's `rest`).
async fn read_answer<S: AsyncRead + Unpin>(stream: &mut S, buffer: &mut BytesMut) -> HeadRead {
    loop {
        if !buffer.is_empty() {
            match parse_answer(buffer) {
                Ok(Some(answer)) => return HeadRead::Head(answer),
                Ok(None) if buffer.len() < MAX_ANSWER_HEAD => {}
                _ => return HeadRead::Unreadable,
            }
        }
        buffer.reserve(4096);
        match stream.read_buf(buffer).await {
            Ok(0) | Err(_) => return HeadRead::Closed,
            Ok(_) => {}
        }
    }
}

/// Parses an answer head at the start of `buffer`, taking it (and leaving the rest in
/// the answer); `Ok(None)`: incomplete.
fn parse_answer(buffer: &mut BytesMut) -> Result<Option<Answer>, ()> {
    let mut headers = [httparse::EMPTY_HEADER; 128];
    let mut response = httparse::Response::new(&mut headers);
    let len = match response.parse(buffer) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(_) => return Err(()),
    };
    let status = response.code.ok_or(())?;
    let (mut length, mut chunked, mut close, mut decision) = (None, false, false, None);
    for header in response.headers.iter() {
        let value = String::from_utf8_lossy(header.value);
        match header.name.to_ascii_lowercase().as_str() {
            "content-length" => {
                let n: u64 = value.trim().parse().map_err(|_| ())?;
                if length.is_some_and(|l| l != n) {
                    return Err(());
                }
                length = Some(n);
            }
            "transfer-encoding" => chunked = value.to_ascii_lowercase().trim().ends_with("chunked"),
            "connection" => {
                close |= value
                    .split(',')
                    .any(|t| t.trim().eq_ignore_ascii_case("close"))
            }
            "x-robots-decision" => decision = Some(header.value.to_vec()),
            _ => {}
        }
    }
    let gave_up = crate::fleet::owner_gave_up(status, decision.as_deref());
    let body = match (chunked, length) {
        (true, _) => Body::Chunked(Chunked::Size(0, false)),
        (false, Some(n)) => Body::Length(n),
        (false, None) if (100..200).contains(&status) || matches!(status, 204 | 304) => {
            Body::Length(0)
        }
        (false, None) => Body::UntilClose,
    };
    let head = buffer.split_to(len).to_vec();
    Ok(Some(Answer {
        status,
        head,
        rest: buffer.split(),
        until_close: body == Body::UntilClose,
        body,
        keep_alive: !close,
        gave_up,
    }))
}

/// Where a complete answer to a `GET` (head and body) ends in `bytes`, read as the
/// relay reads it, its body fed in two parts split at `split`; `None` when it is
/// unreadable, incomplete, or ends only with the connection. Whatever the split, the
/// end is the same (what the fuzz target `owner_answer` checks).
pub fn answer_end(bytes: &[u8], split: usize) -> Option<usize> {
    let mut buffer = BytesMut::from(bytes);
    let mut answer = parse_answer(&mut buffer).ok()??;
    let rest = answer.rest.split().freeze();
    let split = split.min(rest.len());
    let first = answer.body.take(&rest[..split]);
    let taken = if first < split {
        first
    } else {
        first + answer.body.take(&rest[split..])
    };
    answer.body.done().then_some(answer.head.len() + taken)
}

/// Counts the request handed over, and logs it.
fn record(relayed: &Relayable, context: &ClientContext, status: u16, started: Instant) {
    let elapsed = started.elapsed().as_secs_f64();
    let (request, target) = (&relayed.request, &relayed.target);
    let mode = context.mode(request.raw_target.as_bytes());
    let protocol = metrics::Protocol::Http1;
    let https = target.origin.scheme == Scheme::Https;
    metrics::record_request(Outcome::HandedOver, mode, protocol, https, elapsed);
    if !crate::telemetry::logging::access_enabled() {
        return;
    }
    let owner = &relayed.owner.member;
    crate::telemetry::logging::AccessRecord {
        origin: &target.origin,
        path: target.path.as_str(),
        agent: request.agent.as_deref(),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The end of a chunked body is found wherever the octets split, and not before.
    #[test]
    fn a_chunked_bodys_end_is_found_across_any_split() {
        let body = b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nTrailer: x\r\n\r\n";
        for split in 0..body.len() {
            let mut state = Chunked::Size(0, false);
            let first = state.take(&body[..split]);
            assert_eq!(first, split, "split at {split}");
            let second = state.take(&[&body[split..], b"NEXT"].concat());
            assert_eq!(first + second, body.len(), "split at {split}");
            assert_eq!(state, Chunked::Done);
        }
        let mut broken = Chunked::Size(0, false);
        broken.take(b"zz\r\n");
        assert_eq!(broken, Chunked::Broken);
        let mut huge = Chunked::Size(0, false);
        huge.take(b"ffffffffffffffffff\r\n");
        assert_eq!(huge, Chunked::Broken);
    }

    #[test]
    fn answer_framing_is_read_from_the_head() {
        let cases: [(&[u8], Body, bool); 5] = [
            (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", Body::Length(5), true),
            (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", Body::Chunked(Chunked::Size(0, false)), true),
            (b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n", Body::UntilClose, false),
            (b"HTTP/1.1 304 Not Modified\r\n\r\n", Body::Length(0), true),
            (b"HTTP/1.1 503 x\r\nX-Robots-Decision: fleet-unavailable; why\r\nContent-Length: 0\r\n\r\n", Body::Length(0), true),
        ];
        for (bytes, body, keep_alive) in cases {
            let mut buffer = BytesMut::from(bytes);
            let answer = parse_answer(&mut buffer)
                .expect("readable")
                .expect("complete");
            assert_eq!(
                (answer.body, answer.keep_alive),
                (body, keep_alive),
                "{bytes:?}"
            );
            assert_eq!(answer.gave_up, answer.status == 503);
        }
        let mut two_lengths = BytesMut::from(
            &b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n"[..],
        );
        assert!(parse_answer(&mut two_lengths).is_err());
    }

    /// An informational head read together with the final one leaves the final one's
    /// octets for the next read.
    #[tokio::test]
    async fn a_final_answer_after_an_informational_one_is_read_whole() {
        let (mut a, mut b) = tokio::io::duplex(1024);
        let bytes = b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
        b.write_all(bytes).await.expect("write");
        drop(b);
        let mut buffer = BytesMut::new();
        let HeadRead::Head(early) = read_answer(&mut a, &mut buffer).await else {
            panic!("no first head");
        };
        assert_eq!(early.status, 103);
        let mut buffer = early.rest;
        let HeadRead::Head(last) = read_answer(&mut a, &mut buffer).await else {
            panic!("no final head");
        };
        assert_eq!((last.status, &last.rest[..]), (200, &b"ok"[..]));
    }

    #[test]
    fn the_head_sent_to_the_owner_drops_credentials_and_forged_context() {
        let head = b"GET http://a.test/x HTTP/1.1\r\nHost: a.test\r\nProxy-Authorization: Basic eA==\r\nrobotsgate-peer: forged\r\nConnection: close\r\nAccept: */*\r\n\r\n";
        let context = PeerContext {
            member: "m1".into(),
            ..PeerContext::default()
        };
        let sent = String::from_utf8(to_owner(head, &context)).expect("utf-8");
        assert!(
            sent.starts_with("GET http://a.test/x HTTP/1.1\r\nHost: a.test\r\nAccept: */*\r\n"),
            "{sent}"
        );
        assert!(
            !sent.contains("Proxy-Authorization")
                && !sent.contains("forged")
                && !sent.contains("Connection"),
            "{sent}"
        );
        assert!(sent.ends_with(&format!("{PEER_HEADER}: {}\r\n\r\n", context.encode())));
    }

    #[test]
    fn only_plain_requests_are_taken() {
        let taken = |head: &[u8]| Plain::parse(head).is_some();
        assert!(taken(
            b"GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n"
        ));
        assert!(taken(
            b"HEAD http://a.test/ HTTP/1.1\r\nConnection: keep-alive\r\n\r\n"
        ));
        assert!(!taken(
            b"POST http://a.test/ HTTP/1.1\r\nContent-Length: 1\r\n\r\n"
        ));
        assert!(!taken(b"GET http://a.test/ HTTP/1.0\r\n\r\n"));
        let close = Plain::parse(b"GET http://a.test/ HTTP/1.1\r\nConnection: close\r\n\r\n");
        assert!(close.is_some_and(|p| p.close));
        assert!(!taken(
            b"GET http://a.test/ HTTP/1.1\r\nConnection: close, x-hop\r\n\r\n"
        ));
        assert!(!taken(
            b"GET http://a.test/ HTTP/1.1\r\nUpgrade: websocket\r\n\r\n"
        ));
        assert!(!taken(
            b"GET http://a.test/ HTTP/1.1\r\nExpect: 100-continue\r\n\r\n"
        ));
    }
}
