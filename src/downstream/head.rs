//! Reading a client's request head within limits: the first thing done with every request.
//!
//! Pingora's HTTP/1 parser has fixed ceilings (1 MiB of head, 256 fields), a per-read
//! timeout rather than a deadline, and answers every violation with a bare 400 that no
//! hook sees. An egress proxy open to a whole fleet needs tighter, configurable bounds
//! with the statuses clients understand, and a count of each. So the front (`front.rs`)
//! reads each head itself with [`read_head`] and hands the bytes to Pingora as an
//! already-received prefix, which Pingora parses without reading again:
//!
//! * request line longer than `max_request_line_bytes` → **414**;
//! * head longer than `max_header_bytes`, or more than `max_headers` fields → **431**;
//! * head not complete `header_read_timeout_seconds` after its first octet (slowloris) →
//!   **408**;
//! * not HTTP/1.x → **400**;
//! * `Content-Length` over `max_body_bytes` → **413** (chunked bodies are counted as they
//!   stream, in `proxy/http.rs`).
//!
//! Cost: each read's new octets are scanned once for the blank line that ends the head;
//! `httparse` runs once on the complete head (≈ 1 µs for a crawler's request). Memory per
//! connection is bounded by `max_header_bytes` plus one read. The waits are Pingora's
//! timers (10 ms ticks on a thread of their own), as Pingora's own reads use: a Tokio
//! timer armed while no other is pending wakes the runtime's driver, one `write(2)` to
//! its eventfd on every request that waits for its next head.

use std::time::{Duration, Instant};

use bytes::BytesMut;
use tokio::io::AsyncRead;

use crate::config::LimitsConfig;
use crate::policy::target::{authority_len, split_scheme};
use crate::telemetry::metrics::RefusalReason;

/// The limits [`read_head`] applies (from `robotsgate.limits`).
#[derive(Clone, Debug)]
pub struct HeadLimits {
    /// `limits.max_request_line_bytes`.
    pub max_request_line: usize,
    /// `limits.max_header_bytes`.
    pub max_head: usize,
    /// `limits.max_headers`.
    pub max_headers: usize,
    /// `limits.max_body_bytes`.
    pub max_body: u64,
    /// `limits.header_read_timeout_seconds`: from a head's first octet to its end.
    pub header_timeout: Duration,
    /// `limits.idle_timeout_seconds`: a kept-alive connection's wait for its next request.
    pub idle_timeout: Duration,
    /// A new connection's (or tunnel's) wait for its first octet.
    pub first_byte_timeout: Duration,
    /// `limits.unread_timeout_seconds`: a client taking no response octets this long is
    /// treated as gone.
    pub unread_timeout: Duration,
}

impl HeadLimits {
    /// The limits of `robotsgate.limits`.
    pub fn new(config: &LimitsConfig) -> HeadLimits {
        HeadLimits {
            max_request_line: config.max_request_line_bytes,
            max_head: config.max_header_bytes,
            max_headers: config.max_headers,
            max_body: config.max_body_bytes,
            header_timeout: config.header_read_timeout_seconds.duration(),
            idle_timeout: config.idle_timeout_seconds.duration(),
            first_byte_timeout: config.first_byte_timeout_seconds.duration(),
            unread_timeout: config.unread_timeout_seconds.duration(),
        }
    }
}

/// A complete request head, and what the front needs from it before Pingora sees it.
#[derive(Debug)]
pub struct Head {
    /// The head and any octets read after it (body, or a pipelined request).
    pub bytes: BytesMut,
    /// Where the head ends in `bytes`.
    pub len: usize,
    /// Is this a CONNECT?
    pub is_connect: bool,
    /// The `Proxy-Authorization` value, if sent.
    pub proxy_authorization: Option<Vec<u8>>,
    /// The `robotsgate-peer` value, if sent (read on the peer channel only; a client's
    /// own is never forwarded).
    pub peer: Option<Vec<u8>>,
    /// What follows the head before the next request can begin.
    pub body: Body,
    /// Where its request target lies in `bytes`.
    pub target: std::ops::Range<usize>,
    /// Where its `Host` value lies in `bytes`, if it sent one.
    pub host: Option<std::ops::Range<usize>>,
    /// An HTTP/1.1 `GET` or `HEAD` without a body: a request the fleet's relay may
    /// carry (`relay.rs` checks the rest on Pingora's parse).
    pub plain: bool,
}

impl Head {
    /// Its request target's octets.
    pub fn target(&self) -> &[u8] {
        &self.bytes[self.target.clone()]
    }

    /// Its `Host` value's octets, if it sent one.
    pub fn host(&self) -> Option<&[u8]> {
        self.host.clone().map(|h| &self.bytes[h])
    }
}

/// A request's body, as its head announces it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Body {
    /// No body: the next request may follow the head at once.
    None,
    /// `Content-Length` octets.
    Length(u64),
    /// Chunked: its end is known only by reading it (Pingora does).
    Chunked,
}

/// Why no head was read. [`HeadError::status`] is what the client is told, if anything.
#[derive(Debug, PartialEq, Eq)]
pub enum HeadError {
    /// Closed, reset or idle before a request began: nothing to answer.
    Gone,
    /// A new connection sent nothing within its first-byte deadline: closed unanswered.
    FirstByteTimeout,
    /// The head was not complete within `header_timeout` (slowloris).
    Timeout,
    /// The request line is longer than allowed.
    RequestLineTooLong,
    /// The head is larger than allowed.
    HeadTooLarge,
    /// The head has more fields than allowed.
    TooManyHeaders,
    /// `Content-Length` is over `max_body_bytes`.
    BodyTooLarge,
    /// A body on GET or HEAD: a server that ignores it would read it as a second,
    /// unchecked request (smuggling).
    BodyOnGet,
    /// `Upgrade` (WebSocket, h2c, …): after a `101` the connection would be an unchecked
    /// tunnel.
    Upgrade,
    /// Not a request robotsgate can read, and why.
    Malformed(String),
}

impl HeadError {
    /// The status to answer with; `None` when the client is not there to hear it.
    pub fn status(&self) -> Option<u16> {
        match self {
            HeadError::Gone | HeadError::FirstByteTimeout => None,
            HeadError::Timeout => Some(408),
            HeadError::RequestLineTooLong => Some(414),
            HeadError::HeadTooLarge | HeadError::TooManyHeaders => Some(431),
            HeadError::BodyTooLarge => Some(413),
            HeadError::BodyOnGet | HeadError::Upgrade | HeadError::Malformed(_) => Some(400),
        }
    }

    /// The `reason` label of `robotsgate_downstream_refusals_total`.
    pub fn reason(&self) -> RefusalReason {
        match self {
            HeadError::Gone | HeadError::Malformed(_) => RefusalReason::Malformed,
            HeadError::FirstByteTimeout => RefusalReason::FirstByteTimeout,
            HeadError::Timeout => RefusalReason::HeaderTimeout,
            HeadError::RequestLineTooLong => RefusalReason::RequestLineTooLong,
            HeadError::HeadTooLarge => RefusalReason::HeaderTooLarge,
            HeadError::TooManyHeaders => RefusalReason::TooManyHeaders,
            HeadError::BodyTooLarge => RefusalReason::BodyTooLarge,
            HeadError::BodyOnGet => RefusalReason::BodyOnGet,
            HeadError::Upgrade => RefusalReason::Upgrade,
        }
    }
}

impl std::fmt::Display for HeadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeadError::Gone => f.write_str("connection closed"),
            HeadError::FirstByteTimeout => f.write_str("nothing received in time"),
            HeadError::Timeout => f.write_str("request head not received in time"),
            HeadError::RequestLineTooLong => {
                f.write_str("request line longer than limits.max_request_line_bytes")
            }
            HeadError::HeadTooLarge => {
                f.write_str("request head larger than limits.max_header_bytes")
            }
            HeadError::TooManyHeaders => f.write_str("more header fields than limits.max_headers"),
            HeadError::BodyTooLarge => {
                f.write_str("request body larger than limits.max_body_bytes")
            }
            HeadError::BodyOnGet => {
                f.write_str("a GET or HEAD request may not carry a body (Content-Length or Transfer-Encoding)")
            }
            HeadError::Upgrade => f.write_str(
                "protocol upgrades (Upgrade: websocket, h2c, …) are not proxied: robots.txt could not be enforced after one",
            ),
            HeadError::Malformed(why) => write!(f, "malformed request: {why}"),
        }
    }
}

/// Reads one request head from `stream`: waits at most `first_wait` for its first octet
/// (nothing is answered if none comes: [`HeadError::FirstByteTimeout`]), then
/// `limits.header_timeout` for the rest.
pub async fn read_head<S: AsyncRead + Unpin>(
    stream: &mut S,
    limits: &HeadLimits,
    first_wait: Duration,
) -> Result<Head, HeadError> {
    read_head_after(stream, BytesMut::new(), limits, first_wait).await
}

/// As [`read_head`], for a head that may have begun in `already` (octets of a pipelined
/// request read with the one before it).
pub async fn read_head_after<S: AsyncRead + Unpin>(
    stream: &mut S,
    already: BytesMut,
    limits: &HeadLimits,
    first_wait: Duration,
) -> Result<Head, HeadError> {
    let mut deadline = (!already.is_empty()).then(|| Instant::now() + limits.header_timeout);
    let mut buf = already;
    let mut scanned = 0;
    loop {
        if let Some(len) = complete(&buf, &mut scanned, limits)? {
            return parse(buf, len, limits);
        }
        let read = match deadline {
            Some(deadline) => {
                let left = deadline.saturating_duration_since(Instant::now());
                pingora::time::timeout(left, read_arrived(stream, &mut buf))
                    .await
                    .map_err(|_| HeadError::Timeout)?
            }
            None => {
                match pingora::time::timeout(first_wait, read_arrived(stream, &mut buf)).await {
                    Ok(read) => read,
                    Err(_) => return Err(HeadError::FirstByteTimeout),
                }
            }
        };
        match read {
            Ok(0) | Err(_) => return Err(HeadError::Gone),
            Ok(_) => {}
        }
        deadline.get_or_insert_with(|| Instant::now() + limits.header_timeout);
    }
}

/// Reads what has arrived into `buf`, growing it by just that much: a connection that
/// waits holds no buffer (10,000 silent sockets cost no read buffers), and the octets
/// are first read into a stack array that exists only while a read is ready.
async fn read_arrived<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut BytesMut,
) -> std::io::Result<usize> {
    std::future::poll_fn(|cx| {
        let mut chunk = [std::mem::MaybeUninit::<u8>::uninit(); 4096];
        let mut read = tokio::io::ReadBuf::uninit(&mut chunk);
        match std::pin::Pin::new(&mut *stream).poll_read(cx, &mut read) {
            std::task::Poll::Ready(Ok(())) => {
                buf.extend_from_slice(read.filled());
                std::task::Poll::Ready(Ok(read.filled().len()))
            }
            std::task::Poll::Ready(Err(e)) => std::task::Poll::Ready(Err(e)),
            std::task::Poll::Pending => std::task::Poll::Pending,
        }
    })
    .await
}

/// Parses a head from octets already at hand; `Ok(None)` means more are needed (pure:
/// fuzzed in `fuzz/`, where it stands for [`read_head`]).
pub fn parse_head(bytes: BytesMut, limits: &HeadLimits) -> Result<Option<Head>, HeadError> {
    match complete(&bytes, &mut 0, limits)? {
        Some(len) => parse(bytes, len, limits).map(Some),
        None => Ok(None),
    }
}

/// The head's length if `buf` holds all of it, or the limit an incomplete head already
/// broke.
fn complete(
    buf: &[u8],
    scanned: &mut usize,
    limits: &HeadLimits,
) -> Result<Option<usize>, HeadError> {
    match head_end(buf, scanned) {
        Some(len) => Ok(Some(len)),
        None => check_sizes(buf, limits).map(|()| None),
    }
}

/// The end of the head (after its blank line) if `buf` holds it; `scanned` remembers how
/// far earlier calls looked, so a trickled head is scanned once, not once per read.
fn head_end(buf: &[u8], scanned: &mut usize) -> Option<usize> {
    let from = scanned.saturating_sub(3);
    *scanned = buf.len();
    // httparse accepts bare LF line ends too: the head ends at "\n\n" or "\n\r\n".
    memchr::memchr_iter(b'\n', &buf[from..])
        .map(|i| from + i)
        .find_map(|nl| match &buf[nl + 1..] {
            [b'\n', ..] => Some(nl + 2),
            [b'\r', b'\n', ..] => Some(nl + 3),
            _ => None,
        })
}

/// Limits that can be judged on an incomplete head.
fn check_sizes(buf: &[u8], limits: &HeadLimits) -> Result<(), HeadError> {
    let line = memchr::memchr(b'\n', buf).unwrap_or(buf.len());
    if line > limits.max_request_line {
        return Err(HeadError::RequestLineTooLong);
    }
    if buf.len() > limits.max_head {
        return Err(HeadError::HeadTooLarge);
    }
    Ok(())
}

/// The header fields the front reads itself, as one pass over a head's fields found them.
#[derive(Default)]
struct HeadFields<'h> {
    /// The `Proxy-Authorization` value.
    proxy_authorization: Option<Vec<u8>>,
    /// The `robotsgate-peer` value.
    peer: Option<Vec<u8>>,
    /// The `Content-Length` (one length, however often repeated).
    content_length: Option<u64>,
    /// A `Transfer-Encoding` was sent.
    chunked: bool,
    /// The `Host` value.
    host: Option<&'h [u8]>,
}

impl<'h> HeadFields<'h> {
    /// Reads `headers`: an upgrade, a second `Host` or `robotsgate-peer`, an unreadable,
    /// conflicting or too large `Content-Length` are refused.
    fn read(headers: &[httparse::Header<'h>], limits: &HeadLimits) -> Result<Self, HeadError> {
        let mut read = HeadFields::default();
        for field in headers {
            if field.name.eq_ignore_ascii_case("upgrade") {
                return Err(HeadError::Upgrade);
            } else if field.name.eq_ignore_ascii_case("transfer-encoding") {
                read.chunked = true;
            } else if field.name.eq_ignore_ascii_case("host") {
                if read.host.replace(field.value).is_some() {
                    return Err(HeadError::Malformed("more than one Host header".into()));
                }
            } else if field.name.eq_ignore_ascii_case("proxy-authorization") {
                read.proxy_authorization = Some(field.value.to_vec());
            } else if field.name.eq_ignore_ascii_case(crate::fleet::PEER_HEADER) {
                if read.peer.replace(field.value.to_vec()).is_some() {
                    return Err(HeadError::Malformed(
                        "more than one robotsgate-peer header".into(),
                    ));
                }
            } else if field.name.eq_ignore_ascii_case("content-length") {
                let length = std::str::from_utf8(field.value)
                    .ok()
                    .and_then(|v| v.trim().parse::<u64>().ok());
                match length {
                    None => return Err(HeadError::Malformed("invalid Content-Length".into())),
                    // Two different lengths are a request-smuggling attempt (RFC 9112 §6.3).
                    Some(n) if read.content_length.is_some_and(|m| m != n) => {
                        return Err(HeadError::Malformed("conflicting Content-Length".into()))
                    }
                    Some(n) if n > limits.max_body => return Err(HeadError::BodyTooLarge),
                    Some(n) => read.content_length = Some(n),
                }
            }
        }
        Ok(read)
    }
}

/// Parses the head in `bytes[..len]` within `limits`.
fn parse(bytes: BytesMut, len: usize, limits: &HeadLimits) -> Result<Head, HeadError> {
    check_sizes(&bytes[..len], limits)?;
    // Left uninitialised for httparse to fill: 256 empty fields written first would be
    // 8 KiB of stores on every request.
    let mut fields = [const { std::mem::MaybeUninit::<httparse::Header>::uninit() };
        crate::config::PINGORA_MAX_HEADERS];
    let fields = &mut fields[..limits.max_headers.min(crate::config::PINGORA_MAX_HEADERS)];
    let mut request = httparse::Request::new(&mut []);
    match request.parse_with_uninit_headers(&bytes[..len], fields) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => {
            return Err(HeadError::Malformed("incomplete request head".into()))
        }
        Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooManyHeaders),
        Err(e) => return Err(HeadError::Malformed(e.to_string())),
    }
    let HeadFields {
        proxy_authorization,
        peer,
        content_length,
        chunked,
        host,
    } = HeadFields::read(request.headers, limits)?;
    // Both framings at once: which one a server reads is the smuggling (RFC 9112 §6.3).
    if chunked && content_length.is_some() {
        return Err(HeadError::Malformed(
            "both Transfer-Encoding and Content-Length".into(),
        ));
    }
    let is_connect = request.method == Some("CONNECT");
    let bodyless = matches!(request.method, Some("GET" | "HEAD"));
    if bodyless && (chunked || content_length.is_some_and(|n| n > 0)) {
        return Err(HeadError::BodyOnGet);
    }
    // Absolute-form: the Host header must say the same (Pingora refuses a mismatch too,
    // with a bare 400; this answer names the problem and is counted).
    let target = request.path.unwrap_or("");
    if let (false, Some((_, rest)), Some(host)) = (is_connect, split_scheme(target), host) {
        let authority = &rest[..authority_len(rest)];
        if authority.as_bytes() != host {
            return Err(HeadError::Malformed(
                "Host header differs from the request target's authority".into(),
            ));
        }
    }
    let body = match (chunked, content_length) {
        (true, _) => Body::Chunked,
        (false, Some(n)) if n > 0 => Body::Length(n),
        _ => Body::None,
    };
    // Where a slice httparse gave lies in the head (it gives slices of it; anything
    // else, as the empty target of a head without one, is an empty range).
    let start = bytes.as_ptr() as usize;
    let range = |part: &[u8]| {
        let from = (part.as_ptr() as usize).wrapping_sub(start);
        if from <= len && part.len() <= len - from {
            from..from + part.len()
        } else {
            0..0
        }
    };
    let plain = bodyless && request.version == Some(1) && body == Body::None;
    Ok(Head {
        target: range(target.as_bytes()),
        host: host.map(range),
        plain,
        bytes,
        len,
        is_connect,
        proxy_authorization,
        peer,
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> HeadLimits {
        HeadLimits {
            max_request_line: 64,
            max_head: 256,
            max_headers: 4,
            max_body: 100,
            header_timeout: Duration::from_millis(200),
            idle_timeout: Duration::from_millis(200),
            first_byte_timeout: Duration::from_millis(200),
            unread_timeout: Duration::from_millis(200),
        }
    }

    async fn read(input: &[u8]) -> Result<Head, HeadError> {
        let mut stream = input;
        read_head(&mut stream, &limits(), Duration::from_secs(1)).await
    }

    #[tokio::test]
    async fn complete_heads_keep_what_follows() {
        let head = read(
            b"GET http://a/ HTTP/1.1\r\nHost: a\r\nProxy-Authorization: Basic eA==\r\n\r\nNEXT",
        )
        .await
        .expect("valid");
        assert_eq!(&head.bytes[head.len..], b"NEXT");
        assert_eq!(
            head.proxy_authorization.as_deref(),
            Some(&b"Basic eA=="[..])
        );
        assert!(!head.is_connect);
        let head = read(b"CONNECT a:443 HTTP/1.1\n\n").await.expect("bare LF");
        assert!(head.is_connect);
        assert_eq!(head.len, head.bytes.len());
    }

    #[tokio::test]
    async fn the_target_and_host_are_where_the_head_has_them() {
        let head = read(b"GET http://a.example/x?y HTTP/1.1\r\nHost: a.example\r\n\r\n")
            .await
            .expect("valid");
        assert_eq!(head.target(), b"http://a.example/x?y");
        assert_eq!(head.host(), Some(&b"a.example"[..]));
        assert!(head.plain);
        let head = read(b"HEAD /x HTTP/1.1\n\n").await.expect("bare LF");
        assert_eq!((head.target(), head.host()), (&b"/x"[..], None));
        assert!(head.plain);
        // What the relay leaves to the proxy: another method, a body, HTTP/1.0.
        for other in [
            &b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\nx"[..],
            b"GET /x HTTP/1.0\r\nHost: a\r\n\r\n",
            b"DELETE /x HTTP/1.1\r\nHost: a\r\n\r\n",
        ] {
            assert!(!read(other).await.expect("valid").plain, "{other:?}");
        }
    }

    #[tokio::test]
    async fn each_limit_has_its_status() {
        let long_line = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(80));
        let big_head = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(300));
        let cases: [(&[u8], Option<u16>); 16] = [
            (b"GET / HTTP/1.1\r\nContent-Length: 5\r\n\r\n", Some(400)),
            (
                b"HEAD / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
                Some(400),
            ),
            (
                b"GET / HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
                Some(400),
            ),
            (b"OPTIONS / HTTP/1.1\r\nupgrade: h2c\r\n\r\n", Some(400)),
            (b"GET / HTTP/1.1\r\nContent-Length: 0\r\n\r\n", None),
            (
                b"POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
                Some(400),
            ),
            (long_line.as_bytes(), Some(414)),
            (big_head.as_bytes(), Some(431)),
            (
                b"GET / HTTP/1.1\r\nA: 1\r\nB: 1\r\nC: 1\r\nD: 1\r\nE: 1\r\n\r\n",
                Some(431),
            ),
            (b"POST / HTTP/1.1\r\nContent-Length: 101\r\n\r\n", Some(413)),
            (b"POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n", Some(400)),
            (
                b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                Some(400),
            ),
            (b"\x00\x01\x02 garbage\r\n\r\n", Some(400)),
            (b"GET http://a/ HTTP/1.1\r\nHost: b\r\n\r\n", Some(400)),
            (b"GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n", Some(400)),
            (b"GET / HTTP/1.1\r\nHost: a\r\n", None),
        ];
        for (input, status) in cases {
            let got = read(input).await.err().and_then(|e| e.status());
            assert_eq!(got, status, "{:?}", String::from_utf8_lossy(input));
        }
    }

    #[tokio::test]
    async fn a_trickled_head_times_out_as_a_whole() {
        let (mut client, mut server) = tokio::io::duplex(64);
        let writer = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            for b in b"GET / HTTP/1.1\r\nHost: a\r\nX: slow" {
                if client.write_all(&[*b]).await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            client
        });
        let got = read_head(&mut server, &limits(), Duration::from_secs(1)).await;
        // Each octet arrives well within 200 ms of the last; only the deadline stops it.
        assert_eq!(got.err(), Some(HeadError::Timeout));
        drop(writer);
    }

    #[test]
    fn the_head_end_is_found_across_reads() {
        let mut scanned = 0;
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n", &mut scanned), None);
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r", &mut scanned), None);
        assert_eq!(
            head_end(b"GET / HTTP/1.1\r\n\r\nbody", &mut scanned),
            Some(18)
        );
    }
}
