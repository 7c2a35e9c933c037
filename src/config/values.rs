//! The typed values keys take, each validated where it is read so that a bad one is an
//! error naming its key and line: CIDR blocks, port ranges, blind-tunnel rules, and
//! seconds (a delay, a timeout) with the one conversion to a [`Duration`].

use std::net::IpAddr;
use std::time::Duration;

use ipnet::IpNet;
use serde::Deserialize;

/// A value a key cannot take: which kind of value, and why (serde puts the key and the
/// line in front of it).
pub type ValueError = crate::error::Failure<ValueKind>;

/// The kinds of value a key may take, as a [`ValueError`] names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueKind {
    /// A CIDR network.
    Cidr,
    /// A port or port range.
    PortRange,
    /// A `tls.blind_tunnel` entry.
    BlindTunnel,
    /// A number of seconds.
    Seconds,
    /// A price (`USD 0.01`).
    Price,
}

/// A `tls.blind_tunnel` entry, parsed (and so validated) when the configuration is read.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(try_from = "String")]
pub enum BlindTunnelRule {
    /// Exactly this host name.
    Host(String),
    /// `*.example.com`: subdomains of `example.com`, not the name itself.
    Subdomains(String),
    /// Destinations in this network (every address a name resolves to).
    Network(Cidr),
}

impl TryFrom<String> for BlindTunnelRule {
    type Error = ValueError;
    fn try_from(entry: String) -> Result<Self, ValueError> {
        BlindTunnelRule::parse(&entry)
    }
}

impl BlindTunnelRule {
    /// Parses one entry: a host name, `*.domain` or a CIDR network.
    pub fn parse(entry: &str) -> Result<BlindTunnelRule, ValueError> {
        let entry = entry.trim();
        if entry.contains('/') || entry.parse::<IpAddr>().is_ok() {
            return entry
                .parse()
                .map(BlindTunnelRule::Network)
                .map_err(|e: ValueError| ValueError::new(ValueKind::BlindTunnel, e.to_string()));
        }
        let (subdomains, name) = match entry.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, entry),
        };
        let ascii = idna::domain_to_ascii(name)
            .ok()
            .filter(|a| !a.is_empty() && !a.contains(['*', ' ', ':']))
            .ok_or_else(|| {
                ValueError::new(
                    ValueKind::BlindTunnel,
                    format!("`{entry}` is not a host name, `*.domain` or a CIDR network"),
                )
            })?;
        Ok(if subdomains {
            BlindTunnelRule::Subdomains(ascii)
        } else {
            BlindTunnelRule::Host(ascii)
        })
    }
}

/// A network in CIDR notation (`10.0.0.0/8`, `::1/128`); a bare address is a /32 or /128.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct Cidr(pub IpNet);

impl TryFrom<String> for Cidr {
    type Error = ValueError;
    fn try_from(s: String) -> Result<Self, ValueError> {
        s.parse::<Cidr>()
    }
}

impl std::str::FromStr for Cidr {
    type Err = ValueError;
    fn from_str(s: &str) -> Result<Self, ValueError> {
        if let Ok(net) = s.parse::<IpNet>() {
            return Ok(Cidr(net.trunc()));
        }
        s.parse::<IpAddr>()
            .map(|ip| Cidr(IpNet::from(ip)))
            .map_err(|_| {
                ValueError::new(
                    ValueKind::Cidr,
                    format!("`{s}` is not a CIDR network like 10.0.0.0/8"),
                )
            })
    }
}

impl Cidr {
    /// Is `ip` in the network?
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.0.contains(&ip)
    }
}

/// An inclusive port range; `"443"` is `443-443`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct PortRange(pub u16, pub u16);

impl TryFrom<String> for PortRange {
    type Error = ValueError;
    fn try_from(s: String) -> Result<Self, ValueError> {
        let bad = || {
            ValueError::new(
                ValueKind::PortRange,
                format!("`{s}` is not a port or port range like 1025-65535"),
            )
        };
        let (low, high) = s.split_once('-').unwrap_or((&s, &s));
        let low: u16 = low.trim().parse().map_err(|_| bad())?;
        let high: u16 = high.trim().parse().map_err(|_| bad())?;
        if low == 0 || low > high {
            return Err(bad());
        }
        Ok(PortRange(low, high))
    }
}

impl PortRange {
    /// Is `port` in the range?
    pub fn contains(&self, port: u16) -> bool {
        (self.0..=self.1).contains(&port)
    }
}

/// A number of seconds from the configuration, checked when the file is read: finite, 0
/// or more, at most [`MAX_DURATION`]. A negative, infinite or huge value is an error
/// naming the key and line, never a silent zero. Kept with its [`Duration`], converted
/// once: many are read on every request.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd, Deserialize)]
#[serde(try_from = "f64")]
pub struct Seconds {
    /// The number as configured.
    value: f64,
    /// [`seconds`] of it.
    duration: Duration,
}

impl TryFrom<f64> for Seconds {
    type Error = ValueError;
    fn try_from(value: f64) -> Result<Self, ValueError> {
        if value.is_finite() && (0.0..=MAX_DURATION.as_secs_f64()).contains(&value) {
            Ok(Seconds::new(value))
        } else {
            Err(ValueError::new(
                ValueKind::Seconds,
                format!(
                    "`{value}` is not a number of seconds from 0 to {} (ten years)",
                    MAX_DURATION.as_secs()
                ),
            ))
        }
    }
}

impl Seconds {
    /// `value` seconds, unchecked (defaults and tests; a file's go through `TryFrom`).
    pub(crate) fn new(value: f64) -> Seconds {
        Seconds {
            value,
            duration: seconds(value),
        }
    }

    /// The number.
    pub fn get(self) -> f64 {
        self.value
    }

    /// As a [`Duration`].
    pub fn duration(self) -> Duration {
        self.duration
    }
}

/// A number of seconds that must be more than zero (a timeout, a lifetime): as
/// [`Seconds`], and 0 is an error too.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd, Deserialize)]
#[serde(try_from = "f64")]
pub struct Timeout(Seconds);

impl TryFrom<f64> for Timeout {
    type Error = ValueError;
    fn try_from(value: f64) -> Result<Self, ValueError> {
        match Seconds::try_from(value)? {
            checked if checked.get() > 0.0 => Ok(Timeout(checked)),
            _ => Err(ValueError::new(
                ValueKind::Seconds,
                format!("`{value}` seconds: must be more than 0"),
            )),
        }
    }
}

impl Timeout {
    /// `value` seconds, unchecked (defaults and tests; a file's go through `TryFrom`).
    pub(crate) fn new(value: f64) -> Timeout {
        Timeout(Seconds::new(value))
    }

    /// The number.
    pub fn get(self) -> f64 {
        self.0.get()
    }

    /// As a [`Duration`].
    pub fn duration(self) -> Duration {
        self.0.duration()
    }
}

/// The longest duration robotsgate ever works with: ten years. Anything longer (a
/// `Crawl-delay: 1e308`, a `Retry-After` of twenty digits, a huge config value) saturates
/// here, so it still fits into `Instant` arithmetic and never collapses to zero.
pub const MAX_DURATION: Duration = Duration::from_secs(10 * 365 * 86_400);

/// The one conversion from a number of seconds to a [`Duration`]: NaN and negative
/// values are zero, values past [`MAX_DURATION`] (and infinity) saturate there. Every
/// delay and timeout in robotsgate goes through it.
pub fn seconds(value: f64) -> Duration {
    if value.is_nan() || value <= 0.0 {
        Duration::ZERO
    } else if value >= MAX_DURATION.as_secs_f64() {
        MAX_DURATION
    } else {
        Duration::from_secs_f64(value)
    }
}
