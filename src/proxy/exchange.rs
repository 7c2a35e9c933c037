//! The upstream side of an exchange: the peer a decision connects to (the approved
//! address, pooled per origin, with the configured timeouts), and how an exchange ended,
//! read from Pingora's error, which decides how long its pacing turn is still held.

use std::net::SocketAddr;
use std::os::unix::io::RawFd;
use std::time::Duration;

use pingora::prelude::*;
use pingora::protocols::l4::ext::get_tcp_info;
use pingora::upstreams::peer::HttpPeer;
use pingora::ErrorSource;

use crate::config::{Http2, UpstreamConfig};
use crate::enforce::{Cut, ExchangeEnd};
use crate::policy::target::{Scheme, Target};
use crate::telemetry::metrics::Retry;

/// `upstream`'s settings as Pingora's peer options take them, converted once rather
/// than on every request.
#[derive(Clone, Copy, Debug)]
pub struct UpstreamOptions {
    /// Connect timeout.
    connect: Duration,
    /// Read timeout.
    read: Duration,
    /// Also the client side's write timeout once the exchange has started.
    pub(super) write: Duration,
    /// How long a pooled idle connection is kept.
    idle: Duration,
    /// Offer h2 to HTTPS origins.
    http2: bool,
    /// `upstream.max_retries`.
    pub(super) max_retries: u8,
}

impl UpstreamOptions {
    /// A fleet owner's peer channel's timeouts: connect and write as to an origin; a read
    /// timeout of `answers_within` (the owner answers once its turn came and the origin
    /// answered, each bounded); pooled connections idle half as long as the owner keeps
    /// them, so a pooled one is never found closed by the owner's timer.
    pub(super) fn towards_owner(&self, peer: &mut HttpPeer, answers_within: Duration) {
        peer.options.connection_timeout = Some(self.connect);
        peer.options.total_connection_timeout = Some(self.connect * 2);
        // An owner answers within its longest wait for a turn and its exchange's own
        // bounds; one that does not (stopped, cut off) is given up on.
        peer.options.read_timeout = Some(answers_within);
        peer.options.write_timeout = Some(self.write);
        peer.options.idle_timeout = Some(self.idle / 2);
    }
}

/// Streams one HTTP/2 connection to an origin carries at once. The pacing in-flight
/// limit is what bounds an origin's concurrent requests; this only decides when a
/// second connection opens.
const H2_STREAMS_PER_CONNECTION: usize = 100;

impl From<&UpstreamConfig> for UpstreamOptions {
    fn from(upstream: &UpstreamConfig) -> Self {
        UpstreamOptions {
            connect: upstream.connect_timeout_seconds.duration(),
            read: upstream.read_timeout_seconds.duration(),
            write: upstream.write_timeout_seconds.duration(),
            idle: upstream
                .idle_timeout_seconds
                .duration()
                .max(Duration::from_secs(1)),
            http2: upstream.http2 == Http2::Auto,
            max_retries: upstream.max_retries,
        }
    }
}

/// The upstream peer for a forward decision: the approved address, TLS for https, one
/// connection pool per origin (`pool_key`, its entry's), and the configured timeouts
/// (and h2, when on).
pub fn upstream_peer(
    target: &Target,
    addr: SocketAddr,
    pool_key: u64,
    options: &UpstreamOptions,
) -> HttpPeer {
    let tls = target.origin.scheme == Scheme::Https;
    // The SNI (and the name the certificate is verified for): only TLS has one. Plain
    // HTTP connections are pooled by the group key, one pool per origin, without it.
    let sni = if tls {
        target.origin.host_name()
    } else {
        String::new()
    };
    let mut peer = HttpPeer::new(addr, tls, sni);
    peer.group_key = pool_key;
    let o = &mut peer.options;
    o.connection_timeout = Some(options.connect);
    o.total_connection_timeout = Some(options.connect * 2);
    o.read_timeout = Some(options.read);
    o.write_timeout = Some(options.write);
    o.idle_timeout = Some(options.idle);
    if tls && options.http2 {
        // The origin picks: h2 when it offers it, HTTP/1.1 otherwise. Each request is
        // still one turn: the in-flight limit and the gap count streams, not connections.
        o.alpn = pingora::protocols::ALPN::H2H1;
        o.max_h2_streams = H2_STREAMS_PER_CONNECTION;
    }
    peer
}

/// How long ago the socket `fd` last received data (the kernel's `tcpi_last_data_recv`,
/// in milliseconds). Asked when a response head has just been read, it is at most how long
/// the head waited unread: the last data came with the head or after it.
pub(super) fn unread(fd: Option<RawFd>) -> Duration {
    fd.and_then(|fd| get_tcp_info(fd).ok())
        .map_or(Duration::ZERO, |info| {
            Duration::from_millis(info.tcpi_last_data_recv.into())
        })
}

/// The error a response cut at `pacing.max_exchange_seconds` ends with.
pub(super) const MAX_EXCHANGE: &str = "max-exchange";

/// How an exchange ended at the origin, from how Pingora's proxying of it ended: no
/// error is a response read to its end (a client that left meanwhile is a sink, for a
/// while); the origin's own failures end it; anything robotsgate gave up on is a cut,
/// the client's stall among them.
pub fn exchange_end(error: Option<&pingora::Error>) -> ExchangeEnd {
    let Some(e) = error else {
        return ExchangeEnd::Complete;
    };
    if crate::downstream::unread::is_stalled(e) {
        return ExchangeEnd::Cut(Cut::Client);
    }
    match (e.esource(), e.etype()) {
        (_, ErrorType::Custom(MAX_EXCHANGE)) => ExchangeEnd::Cut(Cut::MaxExchange),
        (_, ErrorType::ReadTimedout | ErrorType::WriteTimedout) => ExchangeEnd::Cut(Cut::Timeout),
        (
            ErrorSource::Upstream,
            ErrorType::ConnectTimedout
            | ErrorType::ConnectRefused
            | ErrorType::ConnectNoRoute
            | ErrorType::ConnectError
            | ErrorType::TLSHandshakeFailure
            | ErrorType::TLSHandshakeTimedout
            | ErrorType::InvalidCert
            | ErrorType::ConnectionClosed
            | ErrorType::ReadError
            | ErrorType::WriteError
            // The origin reset or refused the HTTP/2 stream, asked for HTTP/1.1, or did
            // not speak HTTP/2: it is not working on the request.
            | ErrorType::H2Error
            | ErrorType::H2Downgrade
            | ErrorType::InvalidH2,
        ) => ExchangeEnd::OriginFailed,
        _ => ExchangeEnd::Cut(Cut::Other),
    }
}

/// A short name for why an upstream exchange failed.
pub(super) fn upstream_failure(kind: &ErrorType) -> &'static str {
    match kind {
        ErrorType::TLSHandshakeFailure | ErrorType::InvalidCert => {
            "tls-handshake-failed (origin certificate not trusted or invalid)"
        }
        ErrorType::ConnectTimedout => "connect-timeout",
        ErrorType::ConnectRefused => "connect-refused",
        ErrorType::ReadTimedout | ErrorType::WriteTimedout => "timeout",
        _ => "upstream-error",
    }
}

/// Why Pingora would send a request again after `e`, as robotsgate counts it; `None`
/// when it would not (or the origin may still be working on the request: a retry then
/// would be a second request in one turn).
pub(super) fn retry_reason(e: &pingora::Error) -> Option<Retry> {
    if !e.retry() || matches!(exchange_end(Some(e)), ExchangeEnd::Cut(_)) {
        return None;
    }
    Some(match e.etype() {
        ErrorType::H2Error => Retry::Refused,
        ErrorType::H2Downgrade | ErrorType::InvalidH2 => Retry::Downgrade,
        ErrorType::ConnectTimedout
        | ErrorType::ConnectRefused
        | ErrorType::ConnectNoRoute
        | ErrorType::ConnectError
        | ErrorType::TLSHandshakeFailure
        | ErrorType::TLSHandshakeTimedout => Retry::Connect,
        _ => Retry::Closed,
    })
}
