//! The closed label sets of robotsgate's metrics, one type each: call sites name a
//! value, and [`super::init`] registers every value at zero from the type's `ALL`, so
//! the two cannot drift apart.

/// A label type from its values: the enum, `ALL` and `label()`.
macro_rules! labels {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident => $label:literal,)+ }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum $name {
            $($(#[$vdoc])* $variant,)+
        }

        impl $name {
            /// Every value.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// Its label.
            pub fn label(self) -> &'static str {
                match self {
                    $($name::$variant => $label,)+
                }
            }
        }
    };
}

/// How a request reached robotsgate: the `mode` label of the request metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Absolute-form target (`HTTP_PROXY`).
    Explicit,
    /// Plain HTTP the kernel redirected to robotsgate (or an origin-form target with
    /// `Host` on the proxy listener).
    Transparent,
    /// Inside an intercepted CONNECT tunnel (`HTTPS_PROXY`).
    Tunnel,
    /// Inside a redirected TLS connection, intercepted.
    TransparentTls,
}

impl Mode {
    /// Every mode, in the order of the request handles.
    pub const ALL: [Mode; 4] = [
        Mode::Explicit,
        Mode::Transparent,
        Mode::Tunnel,
        Mode::TransparentTls,
    ];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Mode::Explicit => "explicit",
            Mode::Transparent => "transparent",
            Mode::Tunnel => "tunnel",
            Mode::TransparentTls => "transparent_tls",
        }
    }
}

/// The client's HTTP version: the `protocol` label of the request metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Protocol {
    /// HTTP/1.1 (or 1.0).
    #[default]
    Http1,
    /// HTTP/2, inside TLS (ALPN `h2`).
    Http2,
}

impl Protocol {
    /// Every protocol, in the order of the request handles.
    pub const ALL: [Protocol; 2] = [Protocol::Http1, Protocol::Http2];

    /// Its label: the ALPN name.
    pub fn label(self) -> &'static str {
        match self {
            Protocol::Http1 => "http/1.1",
            Protocol::Http2 => "h2",
        }
    }
}

/// How a CONNECT was handled: the `mode` label of the tunnel metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TunnelMode {
    /// TLS terminated with a minted leaf; every request inside is decided.
    Intercepted,
    /// `tls.blind_tunnel`: host-level checks only.
    Blind,
    /// A redirected TLS connection to a `tls.blind_tunnel` origin: relayed as `Blind`.
    TransparentBlind,
}

impl TunnelMode {
    /// Every mode.
    pub const ALL: [TunnelMode; 3] = [
        TunnelMode::Intercepted,
        TunnelMode::Blind,
        TunnelMode::TransparentBlind,
    ];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            TunnelMode::Intercepted => "intercepted",
            TunnelMode::Blind => "blind",
            TunnelMode::TransparentBlind => "transparent_blind",
        }
    }
}

labels!(
    /// Why a request or connection was refused before the robots decision: the `reason`
    /// label of `robotsgate_downstream_refusals_total` (and of the front's
    /// `X-Robots-Decision`).
    RefusalReason {
        ConnectionLimit => "connection_limit",
        ClientConnectionLimit => "client_connection_limit",
        FirstByteTimeout => "first_byte_timeout",
        HeaderTimeout => "header_timeout",
        RequestLineTooLong => "request_line_too_long",
        HeaderTooLarge => "header_too_large",
        TooManyHeaders => "too_many_headers",
        BodyTooLarge => "body_too_large",
        BodyOnGet => "body-on-get",
        Upgrade => "upgrade",
        Malformed => "malformed",
        ClientNetwork => "client_network",
        AuthRequired => "auth_required",
        AuthFailed => "auth_failed",
        /// A redirected connection going to robotsgate itself.
        Loop => "loop",
        /// A connection on the fleet's peer channel without a member's certificate.
        PeerUnauthenticated => "peer_unauthenticated",
        /// A peer-channel connection from an address no live member advertises (and
        /// not in `fleet.peer_allow_clients`).
        PeerAddress => "peer_address",
        /// A fleet certificate naming no live member (it left, lapsed, or never was),
        /// or a request from a member that left or lapsed since it connected.
        PeerNotMember => "peer_not_member",
        /// A handed-over request naming a proxy user or client address its member may
        /// not name (`fleet.peer_scope`).
        PeerScope => "peer_scope",
        /// `fleet.peer_max_connections_per_client` held by this address.
        PeerClientConnectionLimit => "peer_client_connection_limit",
        /// `fleet.peer_max_connections` held.
        PeerConnectionLimit => "peer_connection_limit",
        /// `fleet.peer_max_connections_per_member` held by the member the certificate
        /// names.
        PeerMemberConnectionLimit => "peer_member_connection_limit",
    }
);

labels!(
    /// What a CONNECT came to: the `outcome` label of `robotsgate_connect_tunnels_total`.
    TunnelOutcome {
        Established => "established",
        Refused => "refused",
        HandshakeFailed => "handshake_failed",
    }
);

labels!(
    /// What became of a connection on a transparent listener: the `outcome` label of
    /// `robotsgate_transparent_connections_total`.
    TransparentOutcome {
        /// Plain HTTP, served.
        Accepted => "accepted",
        /// TLS, intercepted.
        Intercepted => "intercepted",
        /// TLS to a `tls.blind_tunnel` origin, relayed.
        Blind => "blind",
        /// Going to robotsgate itself.
        Loop => "loop",
        /// No original destination.
        NoDestination => "no_destination",
        /// No ClientHello on the TLS listener.
        NotTls => "not_tls",
        /// A ClientHello offering no protocol robotsgate speaks.
        AlpnRefused => "alpn_refused",
        /// The TLS handshake failed.
        HandshakeFailed => "handshake_failed",
    }
);

labels!(
    /// Why an origin's delay was raised by its own responses: the `cause` label of
    /// `robotsgate_pacing_slow_downs_total`.
    SlowDown {
        /// 429 or 5xx without Retry-After.
        Error => "error",
        /// Responses slower than the origin's normal.
        Latency => "latency",
    }
);

labels!(
    /// A robots.txt fetch's class (SPEC §2): the `outcome` label of
    /// `robotsgate_robots_fetches_total`.
    RobotsFetch {
        Ok => "2xx",
        RedirectsExhausted => "3xx_exhausted",
        ClientError => "4xx",
        ServerError => "5xx",
        Network => "network",
        TooLarge => "too_large",
    }
);

labels!(
    /// What keeps the fleet backend down: the `cause` label of
    /// `robotsgate_fleet_backend_unavailable` (alert rules match it).
    DownCause {
        /// No connection made yet (at start).
        Connecting => "connecting",
        /// The connection failed or dropped.
        Unreachable => "unreachable",
        /// A command or the connection took longer than `fleet.command_timeout_seconds`.
        Timeout => "timeout",
        /// Redis is at `maxmemory` (its `INFO memory`, or an `OOM` answer).
        OutOfMemory => "out_of_memory",
        /// Redis' `maxmemory-policy` may evict the schedules.
        EvictionPolicy => "eviction_policy",
        /// A Sentinel-managed master accepts writes with no replica connected
        /// (`min-replicas-to-write 0`).
        UnreplicatedWrites => "unreplicated_writes",
        /// Redis answers `READONLY` (a replica, or a failover in progress).
        ReadOnly => "read_only",
        /// Any other error answer.
        Error => "error",
        /// This member cannot join: another live member announces its
        /// `fleet.peer_address`, or no peer channel of its own answers there.
        PeerAddress => "peer_address",
    }
);

labels!(
    /// Why a request was sent to its origin again: the `reason` label of
    /// `robotsgate_upstream_retries_total`.
    Retry {
        /// The origin refused the HTTP/2 stream (`RST_STREAM(REFUSED_STREAM)`, or a
        /// `GOAWAY` whose last stream id is below it): a refusal, which backs off.
        Refused => "refused",
        /// The origin asked for HTTP/1.1 instead of HTTP/2, or spoke invalid HTTP/2.
        Downgrade => "downgrade",
        /// A pooled connection was closed under the request before the origin read it.
        Closed => "closed",
        /// The connection could not be made.
        Connect => "connect",
    }
);

#[cfg(test)]
mod tests {
    /// Every value of every closed label set the code defines appears, in backticks, in
    /// `docs/operations.md`'s row for each metric it labels: the label types' own `ALL`,
    /// read from the library, never a list copied here.
    #[test]
    fn every_label_value_is_in_the_metrics_table() {
        use super::*;
        use crate::policy::answer::Outcome;
        fn labels<T: Copy>(all: &[T], label: fn(T) -> &'static str) -> Vec<&'static str> {
            all.iter().map(|&v| label(v)).collect()
        }
        let sets: Vec<(&str, Vec<&str>)> = vec![
            (
                "robotsgate_requests_total",
                labels(&Outcome::ALL, Outcome::label),
            ),
            ("robotsgate_requests_total", labels(&Mode::ALL, Mode::label)),
            (
                "robotsgate_requests_total",
                labels(&Protocol::ALL, Protocol::label),
            ),
            (
                "robotsgate_downstream_refusals_total",
                labels(RefusalReason::ALL, RefusalReason::label),
            ),
            (
                "robotsgate_connect_tunnels_total",
                labels(&TunnelMode::ALL, TunnelMode::label),
            ),
            (
                "robotsgate_connect_tunnels_total",
                labels(TunnelOutcome::ALL, TunnelOutcome::label),
            ),
            (
                "robotsgate_transparent_connections_total",
                labels(TransparentOutcome::ALL, TransparentOutcome::label),
            ),
            (
                "robotsgate_pacing_slow_downs_total",
                labels(SlowDown::ALL, SlowDown::label),
            ),
            (
                "robotsgate_robots_fetches_total",
                labels(RobotsFetch::ALL, RobotsFetch::label),
            ),
            (
                "robotsgate_fleet_backend_unavailable",
                labels(DownCause::ALL, DownCause::label),
            ),
            (
                "robotsgate_upstream_retries_total",
                labels(Retry::ALL, Retry::label),
            ),
        ];
        let table = include_str!("../../../docs/operations.md");
        let mut missing = Vec::new();
        for (metric, values) in sets {
            let row = table
                .lines()
                .find(|l| l.starts_with(&format!("| `{metric}` |")))
                .unwrap_or_else(|| panic!("no row for {metric}"));
            for value in values {
                if !row.contains(&format!("`{value}`")) {
                    missing.push(format!("{metric}: `{value}`"));
                }
            }
        }
        assert!(
            missing.is_empty(),
            "operations.md lacks:\n{}",
            missing.join("\n")
        );
    }
}
