//! `limits`: what one client can make robotsgate hold (see `downstream::head`,
//! `downstream::front`), within Pingora's own ceilings.

use serde::Deserialize;

use super::{ConfigError, Timeout};

/// Bounds on what one client can make robotsgate hold (see `head.rs`, `front.rs`).
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Open client connections (tunnels included); more are answered 503 and closed.
    pub max_connections: usize,
    /// Open connections from one client address: one client cannot take every slot.
    /// Behind a NAT or an egress gateway all crawlers share one address: raise it there.
    pub max_connections_per_client: usize,
    /// A new connection (or a new CONNECT tunnel) must send its first octet this soon,
    /// or it is closed: silent sockets cannot hold slots for `header_read_timeout`.
    pub first_byte_timeout_seconds: Timeout,
    /// Longest request line (`GET http://… HTTP/1.1`): 414 beyond it.
    pub max_request_line_bytes: usize,
    /// Whole request head, request line and headers: 431 beyond it.
    pub max_header_bytes: usize,
    /// Header fields in one request: 431 beyond it.
    pub max_headers: usize,
    /// Request bodies (crawlers mostly send none): 413 beyond it.
    pub max_body_bytes: u64,
    /// From a request's first octet to its complete head (slowloris): 408 after it.
    pub header_read_timeout_seconds: Timeout,
    /// A kept-alive connection waiting for its next request is closed after this long.
    /// In fleet mode this is also how long a member's peer channel keeps another
    /// member's idle connection; a member keeps its own idle connections to owners for
    /// half of it (at most 64 per owner and listener), so an owner rarely closes one
    /// first.
    pub idle_timeout_seconds: Timeout,
    /// HTTP/2: requests (streams) one client connection may have in progress at once
    /// (`SETTINGS_MAX_CONCURRENT_STREAMS`). Each stream in progress also takes a slot
    /// of `max_connections` and `max_connections_per_client`.
    pub max_streams_per_connection: usize,
    /// An answer its client takes no octet of for this long (a full window, a client
    /// that stopped reading), or that is still coming this long after its client left,
    /// ends the exchange on both legs, as nginx's `send_timeout` does: one client
    /// cannot hold an origin's turns longer than this (and a cut's hold), nor make
    /// robotsgate buffer its answer.
    pub unread_timeout_seconds: Timeout,
    /// A tunnel (a blind one, or one handed to its origin's owner) that carries no octet
    /// either way for this long is closed: one left open and idle would hold its client
    /// slot, and, handed over, one of this member's connections at the owner, for good.
    pub tunnel_idle_seconds: Timeout,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            max_connections: 10_000,
            max_connections_per_client: 1024,
            first_byte_timeout_seconds: Timeout::new(5.0),
            max_request_line_bytes: 16 * 1024,
            max_header_bytes: 64 * 1024,
            max_headers: 100,
            max_body_bytes: 16 * 1024 * 1024,
            header_read_timeout_seconds: Timeout::new(10.0),
            idle_timeout_seconds: Timeout::new(60.0),
            max_streams_per_connection: 100,
            unread_timeout_seconds: Timeout::new(10.0),
            tunnel_idle_seconds: Timeout::new(300.0),
        }
    }
}

/// Pingora's own ceilings on a request head (its HTTP/1 parser refuses more).
pub const PINGORA_MAX_HEADERS: usize = 256;
/// Pingora's own ceiling on a request head's size, in bytes.
pub const PINGORA_MAX_HEADER_BYTES: usize = 1_048_575;

impl LimitsConfig {
    /// Its checks: every size within what robotsgate and Pingora can honour.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let l = self;
        let sizes = [
            ("max_connections", l.max_connections, 1, usize::MAX),
            (
                "max_connections_per_client",
                l.max_connections_per_client,
                1,
                usize::MAX,
            ),
            (
                "max_request_line_bytes",
                l.max_request_line_bytes,
                64,
                PINGORA_MAX_HEADER_BYTES,
            ),
            (
                "max_header_bytes",
                l.max_header_bytes,
                256,
                PINGORA_MAX_HEADER_BYTES,
            ),
            ("max_headers", l.max_headers, 1, PINGORA_MAX_HEADERS),
            (
                "max_streams_per_connection",
                l.max_streams_per_connection,
                1,
                10_000,
            ),
        ];
        for (key, value, low, high) in sizes {
            if !(low..=high).contains(&value) {
                return Err(ConfigError::invalid(format!(
                    "key `robotsgate.limits.{key}`: must be between {low} and {high}, got {value}"
                )));
            }
        }
        Ok(())
    }
}
