//! Prometheus metrics, all prefixed `robotsgate_`, in base units (seconds, bytes).
//!
//! Registered once in the default registry; the admin listener serves them.
//!
//! **Its other files:** `evidence.rs` (the evidence chain's records and failures),
//! `fetches.rs` (robotsgate's own fetches of robots.txt and TDMRep's file),
//! `fleet.rs` (the fleet backend's metrics), `identity.rs` (signing and pay per crawl),
//! `labels.rs` (the closed label sets, one type each).

mod evidence;
mod fetches;
mod fleet;
mod identity;
mod labels;

use std::sync::LazyLock;

pub use crate::policy::answer::Outcome;
pub use evidence::*;
pub use fetches::*;
pub use fleet::*;
pub use identity::*;
pub use labels::*;
use prometheus::{
    register_histogram_vec, register_int_counter_vec, register_int_gauge, HistogramVec,
    IntCounterVec, IntGauge,
};

/// Every scheme a request label can name.
const SCHEMES: [&str; 2] = ["http", "https"];

/// Counter and histogram handles for every (decision, mode, protocol, scheme), resolved
/// once: no label hashing per request.
type Handles = Vec<(prometheus::IntCounter, prometheus::Histogram)>;

/// The request counter and duration histogram for every label combination, resolved once.
static REQUEST_HANDLES: LazyLock<Handles> = LazyLock::new(|| {
    let mut handles = Vec::new();
    for outcome in Outcome::ALL {
        for mode in Mode::ALL {
            for protocol in Protocol::ALL {
                for scheme in SCHEMES {
                    let labels = [outcome.label(), mode.label(), protocol.label(), scheme];
                    handles.push((
                        REQUESTS.with_label_values(&labels),
                        REQUEST_DURATION.with_label_values(&labels),
                    ));
                }
            }
        }
    }
    handles
});

/// Counts one request and its duration.
pub fn record_request(outcome: Outcome, mode: Mode, protocol: Protocol, https: bool, seconds: f64) {
    let index = ((outcome as usize * Mode::ALL.len() + mode as usize) * Protocol::ALL.len()
        + protocol as usize)
        * SCHEMES.len()
        + usize::from(https);
    if let Some((count, duration)) = REQUEST_HANDLES.get(index) {
        count.inc();
        duration.observe(seconds);
    }
}

/// Requests so far per decision label, summed over modes and schemes (the status page).
pub fn requests_by_decision() -> Vec<(&'static str, u64)> {
    let per_outcome = Mode::ALL.len() * Protocol::ALL.len() * SCHEMES.len();
    Outcome::ALL
        .iter()
        .enumerate()
        .map(|(i, outcome)| {
            let total = REQUEST_HANDLES[i * per_outcome..(i + 1) * per_outcome]
                .iter()
                .map(|(count, _)| count.get())
                .sum();
            (outcome.label(), total)
        })
        .collect()
}

/// Requests by decision (see [`Outcome`]), mode, protocol and scheme.
static REQUESTS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "robotsgate_requests_total",
        "Requests by robotsgate's decision, how they arrived (explicit, transparent, tunnel), the client's protocol (http/1.1, h2) and scheme.",
        &["decision", "mode", "protocol", "scheme"]
    )
    .expect("metric registers once")
});

/// `robotsgate_request_duration_seconds`: from request to last response octet.
static REQUEST_DURATION: LazyLock<HistogramVec> = LazyLock::new(|| {
    register_histogram_vec!(
        "robotsgate_request_duration_seconds",
        "Time from request to last response byte, by decision, mode, protocol and scheme.",
        &["decision", "mode", "protocol", "scheme"],
        vec![
            0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            30.0
        ]
    )
    .expect("metric registers once")
});

/// `robotsgate_upstream_responses_total`: origin responses by status class.
static UPSTREAM_RESPONSES: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "robotsgate_upstream_responses_total",
        "Origin responses to forwarded requests by status class (1xx..5xx).",
        &["class"]
    )
    .expect("metric registers once")
});

/// The upstream response counters for 1xx to 5xx, resolved once.
static UPSTREAM_CLASS_HANDLES: LazyLock<Vec<prometheus::IntCounter>> = LazyLock::new(|| {
    ["1xx", "2xx", "3xx", "4xx", "5xx"]
        .iter()
        .map(|c| UPSTREAM_RESPONSES.with_label_values(&[c]))
        .collect()
});

/// Counts an origin response by status class.
pub fn record_upstream_status(status: u16) {
    if let Some(counter) = UPSTREAM_CLASS_HANDLES.get(usize::from(status / 100).wrapping_sub(1)) {
        counter.inc();
    }
}

/// `robotsgate_build_info`: always 1; the labels say which build runs.
static BUILD_INFO: LazyLock<prometheus::IntGaugeVec> = LazyLock::new(|| {
    prometheus::register_int_gauge_vec!(
        "robotsgate_build_info",
        "Always 1; the labels say which build runs.",
        &["version"]
    )
    .expect("metric registers once")
});

/// `robotsgate_start_time_seconds`: when this process started (Unix time).
static START_TIME: LazyLock<prometheus::Gauge> = LazyLock::new(|| {
    prometheus::register_gauge!(
        "robotsgate_start_time_seconds",
        "When this process started, in seconds since the Unix epoch (a reload starts a new process)."
    )
    .expect("metric registers once")
});

/// Registers every metric whose labels are known in advance, at zero, and sets the
/// build info and start time (call once at start). A counter that first appeared with
/// its first increment would be missed by `rate()` and `increase()` (Prometheus sees no
/// zero before it), so dashboards and alerts would not see the first events. The CA
/// expiry gauge and the fleet metrics are not among them: they appear when there is a
/// CA or a fleet backend (a zero there would read as expired, or down).
pub fn init() {
    LazyLock::force(&REQUEST_HANDLES);
    LazyLock::force(&UPSTREAM_CLASS_HANDLES);
    LazyLock::force(&EXCHANGE_END_HANDLES);
    fetches::init();
    for cause in SlowDown::ALL {
        SLOW_DOWNS.with_label_values(&[cause.label()]);
    }
    for mode in TunnelMode::ALL {
        for outcome in TunnelOutcome::ALL {
            TUNNELS.with_label_values(&[mode.label(), outcome.label()]);
        }
    }
    for tls in [false, true] {
        for outcome in TransparentOutcome::ALL {
            TRANSPARENT_CONNECTIONS
                .with_label_values(&[transparent_listener(tls), outcome.label()]);
        }
    }
    for reason in RefusalReason::ALL {
        REFUSALS.with_label_values(&[reason.label()]);
    }
    for reason in Retry::ALL {
        RETRIES.with_label_values(&[reason.label()]);
    }
    for counter in [
        &ROBOTS_CHANGES,
        &STORE_EVICTIONS,
        &SINGLE_FLIGHT_JOINS,
        &IN_FLIGHT_WAITS,
        &CRAWL_DELAYS_CLAMPED,
        &TLS_LEAF_MINTS,
        &TLS_LEAF_CACHE_HITS,
        &TLS_SNI_MISMATCHES,
        &FORGED_HEADERS,
        &CLIENTS_LEFT,
    ] {
        LazyLock::force(counter);
    }
    for histogram in [&PACING_WAIT, &PACING_LEFT_WAIT] {
        LazyLock::force(histogram);
    }
    for gauge in [
        &STORE_ORIGINS,
        &PACING_QUEUED,
        &DOWNSTREAM_CONNECTIONS,
        &DOWNSTREAM_STREAMS,
        &PEER_CONNECTIONS,
    ] {
        LazyLock::force(gauge);
    }
    record_build_info();
}

/// Sets the build-info gauge and the start time.
fn record_build_info() {
    BUILD_INFO
        .with_label_values(&[env!("CARGO_PKG_VERSION")])
        .set(1);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    START_TIME.set(now.as_secs_f64());
}

/// `robotsgate_robots_store_origins`: origins whose robots.txt is held.
static STORE_ORIGINS: LazyLock<IntGauge> = LazyLock::new(|| {
    register_int_gauge!(
        "robotsgate_robots_store_origins",
        "Origins whose robots.txt is held."
    )
    .expect("metric registers once")
});

/// Refetches that changed an origin's effective rules.
pub static ROBOTS_CHANGES: LazyLock<prometheus::IntCounter> = LazyLock::new(|| {
    prometheus::register_int_counter!(
        "robotsgate_robots_changes_total",
        "robots.txt refetches that changed an origin's rules (groups, Allow/Disallow, Crawl-delay)."
    )
    .expect("metric registers once")
});

/// `robotsgate_robots_store_evictions_total`: origins evicted to stay within `robots.max_origins`.
pub static STORE_EVICTIONS: LazyLock<prometheus::IntCounter> = LazyLock::new(|| {
    prometheus::register_int_counter!(
        "robotsgate_robots_store_evictions_total",
        "Origins evicted from the robots store (least recently used) to stay within robots.max_origins."
    )
    .expect("metric registers once")
});

/// `robotsgate_robots_single_flight_joins_total`: requests that waited for another's fetch.
pub static SINGLE_FLIGHT_JOINS: LazyLock<prometheus::IntCounter> = LazyLock::new(|| {
    prometheus::register_int_counter!(
        "robotsgate_robots_single_flight_joins_total",
        "Requests that waited for another request's robots.txt fetch instead of fetching."
    )
    .expect("metric registers once")
});

/// Sets the number of origins held, just before a scrape.
pub fn update_store_gauges(origins_held: usize) {
    STORE_ORIGINS.set(origins_held as i64);
}

/// `robotsgate_pacing_wait_seconds`: time allowed requests waited for their turn.
static PACING_WAIT: LazyLock<prometheus::Histogram> = LazyLock::new(|| {
    prometheus::register_histogram!(
        "robotsgate_pacing_wait_seconds",
        "Time allowed requests waited for their pacing turn.",
        vec![0.0, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0]
    )
    .expect("metric registers once")
});

/// `robotsgate_pacing_queued_requests`: requests waiting for or holding a turn.
static PACING_QUEUED: LazyLock<IntGauge> = LazyLock::new(|| {
    register_int_gauge!(
        "robotsgate_pacing_queued_requests",
        "Requests waiting for or holding a pacing turn."
    )
    .expect("metric registers once")
});

/// Requests that waited for a free in-flight turn (`pacing.max_in_flight`).
pub static IN_FLIGHT_WAITS: LazyLock<prometheus::IntCounter> = LazyLock::new(|| {
    prometheus::register_int_counter!(
        "robotsgate_pacing_in_flight_waits_total",
        "Requests that waited because their origin had pacing.max_in_flight requests in flight."
    )
    .expect("metric registers once")
});

/// Crawl-delays above `pacing.ceiling_seconds`, clamped (counted once per schedule).
pub static CRAWL_DELAYS_CLAMPED: LazyLock<prometheus::IntCounter> = LazyLock::new(|| {
    prometheus::register_int_counter!(
        "robotsgate_pacing_crawl_delays_clamped_total",
        "Crawl-delays above pacing.ceiling_seconds, clamped to it (once per schedule)."
    )
    .expect("metric registers once")
});

/// `robotsgate_pacing_slow_downs_total`: delays raised by an origin's own responses, by cause.
static SLOW_DOWNS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "robotsgate_pacing_slow_downs_total",
        "Times an origin's delay was raised by its own responses, by cause: error (429/5xx \
         without Retry-After) or latency (a response far slower than its baseline).",
        &["cause"]
    )
    .expect("metric registers once")
});

/// Counts one adaptive slow-down (`error` or `latency`).
pub fn record_slow_down(cause: SlowDown) {
    SLOW_DOWNS.with_label_values(&[cause.label()]).inc();
}

/// `robotsgate_pacing_would_wait_seconds`: report mode's waits, not imposed.
static WOULD_WAIT: LazyLock<prometheus::Histogram> = LazyLock::new(|| {
    prometheus::register_histogram!(
        "robotsgate_pacing_would_wait_seconds",
        "Report mode: the pacing wait a forwarded request would have had (it was not held).",
        vec![0.0, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0]
    )
    .expect("metric registers once")
});

/// Report mode: records the wait a request would have had.
pub fn record_would_wait(seconds: f64) {
    WOULD_WAIT.observe(seconds);
}

/// Records how long a request waited for its pacing turn.
pub fn record_pacing_wait(seconds: f64) {
    PACING_WAIT.observe(seconds);
}

/// `robotsgate_pacing_left_wait_seconds`: how long requests whose client left while they
/// were queued had waited for their turn.
static PACING_LEFT_WAIT: LazyLock<prometheus::Histogram> = LazyLock::new(|| {
    prometheus::register_histogram!(
        "robotsgate_pacing_left_wait_seconds",
        "Time requests waited for their pacing turn before their client left (the request \
         was never sent; counted as decision=\"left_while_queued\").",
        vec![0.0, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0]
    )
    .expect("metric registers once")
});

/// Records how long a request waited for its pacing turn before its client left.
pub fn record_left_while_queued(seconds: f64) {
    PACING_LEFT_WAIT.observe(seconds);
}

/// Sets the gauge of requests waiting for a pacing turn.
pub fn update_pacing_gauge(queued: usize) {
    PACING_QUEUED.set(queued as i64);
}

/// `robotsgate_connect_tunnels_total`: CONNECT tunnels by mode and outcome.
static TUNNELS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "robotsgate_connect_tunnels_total",
        "CONNECT requests (and redirected TLS relayed blind) by mode (intercepted, blind, transparent_blind) and outcome (established, refused, handshake_failed).",
        &["mode", "outcome"]
    )
    .expect("metric registers once")
});

/// Counts a CONNECT tunnel by mode and outcome.
pub fn record_tunnel(mode: TunnelMode, outcome: TunnelOutcome) {
    TUNNELS
        .with_label_values(&[mode.label(), outcome.label()])
        .inc();
}

/// `robotsgate_transparent_connections_total`: redirected connections by listener and outcome.
static TRANSPARENT_CONNECTIONS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "robotsgate_transparent_connections_total",
        "Connections on the transparent listeners by listener (http, tls) and outcome \
         (accepted, intercepted, blind, loop, no_destination, not_tls, alpn_refused, \
         handshake_failed).",
        &["listener", "outcome"]
    )
    .expect("metric registers once")
});

/// Counts one connection on a transparent listener (`tls`: the TLS one).
pub fn record_transparent(tls: bool, outcome: TransparentOutcome) {
    TRANSPARENT_CONNECTIONS
        .with_label_values(&[transparent_listener(tls), outcome.label()])
        .inc();
}

/// The `listener` label: the TLS listener or the plain HTTP one.
fn transparent_listener(tls: bool) -> &'static str {
    if tls {
        "tls"
    } else {
        "http"
    }
}

/// `robotsgate_tls_leaf_mints_total`: leaf certificates minted.
pub static TLS_LEAF_MINTS: LazyLock<prometheus::IntCounter> = LazyLock::new(|| {
    prometheus::register_int_counter!(
        "robotsgate_tls_leaf_mints_total",
        "Leaf certificates minted for intercepted hosts."
    )
    .expect("metric registers once")
});

/// `robotsgate_tls_leaf_cache_hits_total`: handshakes served a cached leaf.
pub static TLS_LEAF_CACHE_HITS: LazyLock<prometheus::IntCounter> = LazyLock::new(|| {
    prometheus::register_int_counter!(
        "robotsgate_tls_leaf_cache_hits_total",
        "TLS handshakes served a cached leaf certificate."
    )
    .expect("metric registers once")
});

/// `robotsgate_fleet_peer_cert_expiry_timestamp_seconds`: when this member's
/// certificate (`fleet.peer_cert`) expires.
pub static FLEET_PEER_CERT_EXPIRY: LazyLock<IntGauge> = LazyLock::new(|| {
    register_int_gauge!(
        "robotsgate_fleet_peer_cert_expiry_timestamp_seconds",
        "When this member's certificate (fleet.peer_cert) expires (Unix time); past it, \
         no request is handed to or from it."
    )
    .expect("metric registers once")
});

/// `robotsgate_fleet_peer_ca_expiry_timestamp_seconds`: when the fleet CA expires.
pub static FLEET_PEER_CA_EXPIRY: LazyLock<IntGauge> = LazyLock::new(|| {
    register_int_gauge!(
        "robotsgate_fleet_peer_ca_expiry_timestamp_seconds",
        "When the fleet CA (fleet.peer_ca; the first to expire of several) expires (Unix \
         time); past it, no member's certificate is accepted."
    )
    .expect("metric registers once")
});

/// `robotsgate_tls_ca_expiry_timestamp_seconds`: when the operator CA expires.
pub static TLS_CA_EXPIRY: LazyLock<IntGauge> = LazyLock::new(|| {
    register_int_gauge!(
        "robotsgate_tls_ca_expiry_timestamp_seconds",
        "When the operator CA expires (Unix time); no leaf is minted past it."
    )
    .expect("metric registers once")
});

/// `robotsgate_tls_sni_mismatches_total`: handshakes whose SNI named another host.
pub static TLS_SNI_MISMATCHES: LazyLock<prometheus::IntCounter> = LazyLock::new(|| {
    prometheus::register_int_counter!(
        "robotsgate_tls_sni_mismatches_total",
        "Intercepted handshakes refused because the SNI named another host than the CONNECT."
    )
    .expect("metric registers once")
});

/// `robotsgate_downstream_refusals_total`: what the client side refused, by reason.
static REFUSALS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "robotsgate_downstream_refusals_total",
        "Requests and connections refused before the robots decision, by reason: a limit \
         (connection_limit, header_timeout, request_line_too_long, header_too_large, \
         too_many_headers, body_too_large, body-on-get, upgrade, malformed, \
         client_connection_limit, first_byte_timeout, loop) or access (client_network, \
         auth_required, auth_failed).",
        &["reason"]
    )
    .expect("metric registers once")
});

/// Counts one refusal.
pub fn record_refusal(reason: RefusalReason) {
    REFUSALS.with_label_values(&[reason.label()]).inc();
}

/// `robotsgate_upstream_exchange_ends_total`: how origin exchanges ended.
static EXCHANGE_ENDS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "robotsgate_upstream_exchange_ends_total",
        "How forwarded requests' exchanges with their origins ended, which is when their \
         pacing turns ended: complete (the response read to its end), origin_failed (the \
         origin closed, reset or refused), or cut by robotsgate (cut_timeout: the origin \
         was silent past the timeouts; cut_client: the client took no octet of its answer \
         for limits.unread_timeout_seconds; cut_max_exchange: longer than \
         pacing.max_exchange_seconds; cut_other) — a cut turn is held a read timeout more \
         once the origin answered, until pacing.max_exchange_seconds from its start before.",
        &["end"]
    )
    .expect("metric registers once")
});

/// How an upstream exchange ended: the `end` label of
/// `robotsgate_upstream_exchange_ends_total`, in the order of its handles.
const EXCHANGE_END_LABELS: [&str; 6] = [
    "complete",
    "origin_failed",
    "cut_timeout",
    "cut_max_exchange",
    "cut_other",
    "cut_client",
];

/// One counter per [`EXCHANGE_END_LABELS`], resolved once: no label hashing per request.
static EXCHANGE_END_HANDLES: LazyLock<Vec<prometheus::IntCounter>> = LazyLock::new(|| {
    EXCHANGE_END_LABELS
        .iter()
        .map(|label| EXCHANGE_ENDS.with_label_values(&[label]))
        .collect()
});

/// `robotsgate_upstream_retries_total`: attempts sent to an origin again, by cause.
static RETRIES: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "robotsgate_upstream_retries_total",
        "Requests sent to their origin again (upstream.max_retries), each attempt in a turn \
         of its own: refused (an HTTP/2 stream refused or not covered by a GOAWAY; it backs \
         the origin off), downgrade (the origin asked for HTTP/1.1), closed (a pooled \
         connection closed before the origin read the request), connect (no connection).",
        &["reason"]
    )
    .expect("metric registers once")
});

/// Counts one retry.
pub fn record_retry(reason: Retry) {
    RETRIES.with_label_values(&[reason.label()]).inc();
}

/// Counts how one upstream exchange ended (an index into [`EXCHANGE_END_LABELS`]).
pub fn record_exchange_end(end: usize) {
    if let Some(counter) = EXCHANGE_END_HANDLES.get(end) {
        counter.inc();
    }
}

/// `robotsgate_upstream_forged_headers_total`: robotsgate's own headers found in an origin's
/// response and removed.
static FORGED_HEADERS: LazyLock<prometheus::IntCounter> = LazyLock::new(|| {
    prometheus::register_int_counter!(
        "robotsgate_upstream_forged_headers_total",
        "robotsgate's own response headers (X-Robots-Decision, X-Robots-Usage) found in an \
         origin's response and removed."
    )
    .expect("metric registers once")
});

/// Counts one of robotsgate's own headers removed from an origin's response.
pub fn record_forged_header() {
    FORGED_HEADERS.inc();
}

/// `robotsgate_downstream_clients_left_total`: client connections that failed while read or
/// written.
static CLIENTS_LEFT: LazyLock<prometheus::IntCounter> = LazyLock::new(|| {
    prometheus::register_int_counter!(
        "robotsgate_downstream_clients_left_total",
        "Client connections that failed (reset, broken pipe) while robotsgate was reading \
         or writing them; an exchange they left runs on to the origin's end, unread."
    )
    .expect("metric registers once")
});

/// Counts one client connection that failed under robotsgate.
pub fn record_client_left() {
    CLIENTS_LEFT.inc();
}

/// `robotsgate_peer_connections`: peer-channel connections open now.
pub static PEER_CONNECTIONS: LazyLock<IntGauge> = LazyLock::new(|| {
    register_int_gauge!(
        "robotsgate_peer_connections",
        "Peer-channel connections open now (fleet mode), against fleet.peer_max_connections."
    )
    .expect("metric registers once")
});

/// `robotsgate_downstream_connections`: client connections open now.
pub static DOWNSTREAM_CONNECTIONS: LazyLock<IntGauge> = LazyLock::new(|| {
    register_int_gauge!(
        "robotsgate_downstream_connections",
        "Client connections open now (tunnels included), against limits.max_connections."
    )
    .expect("metric registers once")
});

/// HTTP/2 streams whose requests are in progress now; each also holds a slot of
/// `limits.max_connections`.
pub static DOWNSTREAM_STREAMS: LazyLock<IntGauge> = LazyLock::new(|| {
    register_int_gauge!(
        "robotsgate_downstream_h2_streams",
        "HTTP/2 requests (streams) from clients in progress now; each also holds a slot of limits.max_connections."
    )
    .expect("metric registers once")
});

#[cfg(test)]
mod tests {
    /// Every metric robotsgate registers (each `"robotsgate_…"` name in `src/`) has its
    /// row in `docs/operations.md`'s table.
    #[test]
    fn every_registered_metric_is_in_the_metrics_table() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let table = include_str!("../../../docs/operations.md");
        let mut missing = std::collections::BTreeSet::new();
        let mut dirs = vec![src];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).expect("read src").flatten() {
                let path = entry.path();
                if path.is_dir() {
                    dirs.push(path);
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                for piece in text.split("\"robotsgate_").skip(1) {
                    let name: String = piece
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    if !name.is_empty()
                        && piece[name.len()..].starts_with('"')
                        && !table.contains(&format!("| `robotsgate_{name}` |"))
                    {
                        missing.insert(format!("robotsgate_{name}"));
                    }
                }
            }
        }
        assert!(missing.is_empty(), "not in docs/operations.md: {missing:?}");
    }

    /// The Grafana dashboard in `conf/` only charts metrics this module registers and the
    /// manual documents (`docs/operations.md`).
    #[test]
    fn dashboard_uses_registered_documented_metrics() {
        let dashboard: serde_json::Value =
            serde_json::from_str(include_str!("../../../conf/grafana-dashboard.json"))
                .expect("dashboard is JSON");
        assert!(dashboard["panels"]
            .as_array()
            .is_some_and(|p| p.len() >= 10));
        let source = [
            include_str!("mod.rs"),
            include_str!("evidence.rs"),
            include_str!("fetches.rs"),
            include_str!("fleet.rs"),
            include_str!("identity.rs"),
        ]
        .concat();
        let readme = include_str!("../../../docs/operations.md");
        let text = dashboard.to_string();
        let mut names: Vec<&str> = text
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| w.starts_with("robotsgate_"))
            .collect();
        names.sort_unstable();
        names.dedup();
        assert!(names.len() >= 10, "{names:?}");
        for name in names {
            let base = ["_bucket", "_count", "_sum"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .unwrap_or(name);
            assert!(
                source.contains(&format!("\"{base}\"")),
                "{base} is not registered"
            );
            assert!(
                readme.contains(&format!("`{base}`")),
                "{base} is not in docs/operations.md"
            );
        }
    }
}
