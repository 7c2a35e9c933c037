//! `pacing`: how requests to one origin are spaced (floor, ceiling, in-flight limit,
//! adaptive slow-down, per-origin overrides) and how long one exchange may hold its
//! turns ([`ExchangeBounds`]).

use std::time::Duration;

use serde::Deserialize;

use super::{ConfigError, Seconds, Timeout};

/// Spacing of requests per origin and robots.txt group (see `pacing.rs`).
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PacingConfig {
    /// Minimum delay for every origin, Crawl-delay or not (0 = off).
    pub floor_seconds: Seconds,
    /// Largest delay applied; a larger Crawl-delay is clamped (and logged).
    pub ceiling_seconds: Seconds,
    /// Added to every non-zero delay: absorbs timer and scheduling jitter on both sides,
    /// so an origin timing its own requests never sees a gap below its Crawl-delay.
    pub margin_seconds: Seconds,
    /// A request whose expected wait is longer is answered 503 at once.
    pub max_wait_seconds: Seconds,
    /// Most requests waiting on one schedule; more are answered 503 at once.
    pub max_queue: usize,
    /// Most requests in flight to one origin at once (fleet-wide in fleet mode), with or
    /// without a Crawl-delay; 0 = no limit. Further requests queue (FIFO, the same
    /// `max_queue` and `max_wait_seconds` bounds).
    pub max_in_flight: usize,
    /// What a schedule is kept for: `origin` (RFC 9309's unit) or `address` (also per
    /// resolved IP address, the stricter of the two applying: many names on one server
    /// share its pace).
    pub key: PacingKey,
    /// An origin's delay following its own responses.
    pub adaptive: AdaptiveConfig,
    /// Operator rules per host: a longer delay, another in-flight limit, or a block.
    pub overrides: Vec<PacingOverride>,
    /// The longest an exchange with an origin may hold its turns, from the turn to the
    /// response's end: a longer response is cut (at its next octets, or when origin or
    /// client have been silent for their timeout) and counted. Unset: connect + write +
    /// read timeouts of `upstream` (see [`ExchangeBounds`]).
    pub max_exchange_seconds: Option<Timeout>,
}

/// `pacing.key`: the unit a schedule and an in-flight limit are kept for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PacingKey {
    /// Per origin (scheme, host, port) and robots.txt group.
    #[default]
    Origin,
    /// Per origin, and also per resolved IP address.
    Address,
}

/// `pacing.adaptive`: an origin's delay also follows its responses (see `pacing`).
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdaptiveConfig {
    /// Slow down on an origin's errors (429/5xx) and rising latency; off: only
    /// Crawl-delay, the floor, overrides and the 429/503 backoff apply.
    pub enabled: bool,
    /// The delay is at least this × the last response time (Heritrix's rule); 0 = off.
    pub response_time_factor: f64,
    /// A response this many times slower than the origin's recent baseline is a sign of
    /// strain: the delay rises (doubling, at least that response time) until responses
    /// are back near the baseline, then relaxes by half per response.
    pub latency_factor: f64,
}

impl Default for AdaptiveConfig {
    fn default() -> Self {
        AdaptiveConfig {
            enabled: true,
            response_time_factor: 0.0,
            latency_factor: 4.0,
        }
    }
}

/// A `pacing.overrides` entry: `host` is a name (`example.com`) or a pattern
/// (`*.example.com`: the domain and every name under it).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PacingOverride {
    /// The host or `*.domain` pattern.
    pub host: String,
    /// A delay for the host, used when longer than its Crawl-delay (never shorter).
    pub delay_seconds: Option<Seconds>,
    /// Its in-flight limit instead of `pacing.max_in_flight` (0 = none).
    pub max_in_flight: Option<usize>,
    /// Refuse every request to the host (403).
    #[serde(default)]
    pub block: bool,
    /// Why, shown to clients and in logs.
    #[serde(default)]
    pub reason: Option<String>,
}

impl Default for PacingConfig {
    fn default() -> Self {
        PacingConfig {
            floor_seconds: Seconds::new(0.0),
            ceiling_seconds: Seconds::new(120.0),
            margin_seconds: Seconds::new(0.005),
            max_wait_seconds: Seconds::new(60.0),
            max_queue: 256,
            max_in_flight: 2,
            key: PacingKey::Origin,
            adaptive: AdaptiveConfig::default(),
            overrides: Vec::new(),
            max_exchange_seconds: None,
        }
    }
}

/// How long one exchange with an origin can hold its pacing turns: what bounds a turn
/// that never ends on its own (a never-ending response, a silent origin, a client that
/// reads nothing) and the fleet lease of a holder that died.
///
/// A turn starts when it is granted and ends with the origin's exchange: the response
/// read to its end, or the origin closing. robotsgate cuts an exchange that runs past
/// `max_exchange` at its next response octets, when the origin has been silent for
/// `cut_within` (its read timeout), or when the client took no octet of its answer for
/// `limits.unread_timeout_seconds`; after a cut the origin may still be working on the
/// request, so the turn is held on: `linger` more (the read timeout: as long as
/// robotsgate would have waited for its next octets) once the origin answered, and
/// until `max_exchange` from the turn (at least `linger`) before it did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExchangeBounds {
    /// `pacing.max_exchange_seconds`: from the turn to the cut.
    pub max_exchange: Duration,
    /// The longest a cut can come after `max_exchange`: the larger of the upstream read
    /// and write timeouts.
    pub cut_within: Duration,
    /// How long a cut exchange's turn is held after robotsgate closed the connection,
    /// once the origin had answered (before, until `max_exchange` from the turn).
    pub linger: Duration,
    /// The whole robots.txt fetch (`robots.fetch_timeout_seconds`), which also holds turns.
    pub fetch: Duration,
}

impl ExchangeBounds {
    /// The longest any turn is held: an exchange cut as late as it can be, plus its
    /// linger (or a robots.txt fetch, if that is longer).
    pub fn longest_hold(&self) -> Duration {
        (self.max_exchange + self.cut_within).max(self.fetch) + self.linger
    }
}

impl PacingConfig {
    /// The relations between `pacing` keys that types cannot express.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let p = self;
        if p.floor_seconds > p.ceiling_seconds {
            return Err(ConfigError::invalid(
                "key `robotsgate.pacing.floor_seconds`: must be between 0 and pacing.ceiling_seconds",
            ));
        }
        if p.margin_seconds.get() >= 1.0 {
            return Err(ConfigError::invalid(
                "key `robotsgate.pacing.margin_seconds`: must be between 0 and 1",
            ));
        }
        if p.max_queue == 0 {
            return Err(ConfigError::invalid(
                "key `robotsgate.pacing.max_queue`: must be at least 1",
            ));
        }
        let a = &p.adaptive;
        if !(0.0..=100.0).contains(&a.response_time_factor) {
            return Err(ConfigError::invalid(
                "key `robotsgate.pacing.adaptive.response_time_factor`: must be between 0 and 100",
            ));
        }
        if !(a.latency_factor >= 1.5 && a.latency_factor <= 1000.0) {
            return Err(ConfigError::invalid(
                "key `robotsgate.pacing.adaptive.latency_factor`: must be between 1.5 and 1000",
            ));
        }
        for (i, o) in p.overrides.iter().enumerate() {
            let name = o.host.strip_prefix("*.").unwrap_or(&o.host);
            if name.is_empty() || name.contains(['*', '/', ':', ' ']) {
                return Err(ConfigError::invalid(format!(
                    "key `robotsgate.pacing.overrides[{i}].host`: `{}` is not a host name or `*.domain` pattern",
                    o.host
                )));
            }
            if !o.block && o.delay_seconds.is_none() && o.max_in_flight.is_none() {
                return Err(ConfigError::invalid(format!(
                    "key `robotsgate.pacing.overrides[{i}]`: set delay_seconds, max_in_flight or block"
                )));
            }
        }
        Ok(())
    }
}
