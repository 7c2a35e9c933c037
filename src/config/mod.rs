//! Configuration: one YAML file shared with Pingora.
//!
//! Pingora's own `ServerConf` keys (`threads`, `pid_file`, `upgrade_sock`,
//! `grace_period_seconds`, …) sit at the top level, where Pingora reads them and ignores
//! everything else; robotsgate's settings live under the `robotsgate:` key and are read
//! strictly here: an unknown key or a bad value is an error naming the key path and the
//! file line. Durations are in seconds (`*_seconds`), sizes in bytes (`*_bytes`).
//!
//! The larger sections have a file each (`agent`, `evidence`, `fleet`, `limits`, `pacing`,
//! `robots`, `signing`, `usage`), the typed values keys take another (`values`: CIDR blocks, port
//! ranges, seconds), and why a configuration cannot be used (naming the file, key and
//! line) a third (`error`); this one holds the file's shape, the smaller sections and
//! the checks across sections.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

mod agent;
mod error;
mod evidence;
mod fleet;
mod limits;
mod pacing;
mod robots;
mod signing;
mod usage;
mod values;
pub use agent::{AgentConfig, AgentRule};
pub use error::{ConfigError, ConfigErrorKind};
pub use evidence::{ClientAddresses, EvidenceConfig, EvidenceFailure};
pub use fleet::{FleetConfig, NewDataSet, OnUnavailable, PeerScopeEntry, SentinelConfig};
pub use limits::{LimitsConfig, PINGORA_MAX_HEADERS, PINGORA_MAX_HEADER_BYTES};
pub use pacing::{AdaptiveConfig, ExchangeBounds, PacingConfig, PacingKey, PacingOverride};
pub use robots::{RobotsConfig, DEFAULT_USER_AGENT};
pub use signing::{AgentForm, IdentityConfig, PaymentConfig, Price, SigningConfig};
pub use usage::{Purpose, RefuseWhen, UnknownUsage, UsageConfig, UsageMode};
pub use values::{
    seconds, BlindTunnelRule, Cidr, PortRange, Seconds, Timeout, ValueError, ValueKind,
    MAX_DURATION,
};

/// The whole file, as far as robotsgate is concerned.
#[derive(Debug, Default, Deserialize)]
struct File {
    /// The `robotsgate:` section (absent: every setting at its default).
    #[serde(default)]
    robotsgate: Option<Config>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
/// robotsgate's section of the configuration file (`robotsgate:`), every key with its default.
pub struct Config {
    /// Where crawlers connect (explicit proxy and transparent mode alike).
    pub listen: SocketAddr,
    /// Metrics and admin endpoints; keep it on loopback.
    pub admin_listen: Option<SocketAddr>,
    /// `text` (human-readable) or `json` (one object per line).
    pub log_format: LogFormat,
    /// Which crawler a request is judged as.
    pub agent: AgentConfig,
    /// Name resolution.
    pub dns: DnsConfig,
    /// Where traffic may go.
    pub egress: EgressConfig,
    /// Spacing of requests per origin.
    pub pacing: PacingConfig,
    /// robots.txt fetching and caching.
    pub robots: RobotsConfig,
    /// Timeouts towards origins.
    pub upstream: UpstreamConfig,
    /// HTTPS: CONNECT, interception, origin trust.
    pub tls: TlsConfig,
    /// Who may use the proxy.
    pub access: AccessConfig,
    /// Bounds on what one client can make robotsgate hold.
    pub limits: LimitsConfig,
    /// Who may use the admin listener.
    pub admin: AdminConfig,
    /// Several instances sharing pacing and robots.txt through Redis.
    pub fleet: FleetConfig,
    /// Enforce, or only report what would be refused (for a gradual rollout).
    pub enforce: EnforceConfig,
    /// Listeners for connections the kernel redirects to robotsgate.
    pub transparent: TransparentConfig,
    /// AI-use preferences (Content-Usage, Content-Signal) for the declared purposes.
    pub usage: UsageConfig,
    /// The identities requests are signed as (Web Bot Auth).
    pub signing: SigningConfig,
    /// The tamper-evident record of every decision (off unless `evidence.dir` is set).
    pub evidence: EvidenceConfig,
}

/// `transparent`: listeners for crawler connections the kernel redirects to robotsgate
/// (nftables/iptables `REDIRECT` or `DNAT`, or `TPROXY`), for crawlers with no proxy
/// settings. See `downstream::transparent`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TransparentConfig {
    /// Where redirected port-80 (plain HTTP) connections arrive.
    pub http_listen: Option<SocketAddr>,
    /// Where redirected port-443 (TLS) connections arrive; needs `tls.ca_cert`.
    pub tls_listen: Option<SocketAddr>,
    /// How the original destination is learnt.
    pub mode: TransparentMode,
    /// A firewall mark (`SO_MARK`) set on every connection robotsgate opens to an origin,
    /// so a `meta mark` rule can exempt them from redirection. Needs `CAP_NET_ADMIN`.
    pub upstream_mark: Option<u32>,
}

/// `transparent.mode`: how a redirected connection's original destination is learnt.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TransparentMode {
    /// `REDIRECT`/`DNAT`: from conntrack (`SO_ORIGINAL_DST`, `IP6T_SO_ORIGINAL_DST`).
    #[default]
    Redirect,
    /// `TPROXY`: the connection's own local address; the listeners set `IP_TRANSPARENT`
    /// (needs `CAP_NET_ADMIN`).
    Tproxy,
}

/// `enforce`: whether robots.txt refusals and pacing waits are applied or only reported.
/// Report mode forwards a request robots.txt disallows (or whose robots.txt cannot be
/// read), counting and logging it as `would_disallow`, and records the pacing wait it
/// would have imposed without holding the request. Egress refusals, access control and
/// operator blocks are always enforced.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EnforceConfig {
    /// For every request not matched below.
    pub mode: EnforceMode,
    /// Clients in these networks are in report mode.
    pub report_clients: Vec<Cidr>,
    /// Proxy users (`access.credentials_file`) in report mode.
    pub report_users: Vec<String>,
    /// Fleet mode: let a request handed over by another member be reported, not
    /// enforced, when what that member says of it (its client's address, its proxy
    /// user) or an agent rule matched on its client's address puts it in report mode.
    /// By default such a request is enforced (robots.txt and pacing) whatever its member
    /// says: a member's key, stolen or misused, can switch neither off. `mode: report`
    /// applies to every request either way.
    pub report_handed_over: bool,
}

/// `enforce.mode` (and `agent.rules[].mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EnforceMode {
    /// Refuse what robots.txt disallows; hold requests for their pacing turn.
    #[default]
    Enforce,
    /// Forward anyway, and report what would have been refused or held.
    Report,
}

/// Who may use the admin listener (see `admin.rs`).
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdminConfig {
    /// A file holding a bearer token; when set, `POST` and `DELETE` need
    /// `Authorization: Bearer <token>` (401 otherwise), and so does every request from
    /// beyond loopback but `/healthz` and `/readyz`. Required when `admin_listen` is not
    /// on loopback; on loopback, reads stay open to local clients (Prometheus on the host).
    pub token_file: Option<PathBuf>,
    /// Clients allowed to reach the admin listener at all; others get 403.
    pub allow_clients: Vec<Cidr>,
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            token_file: None,
            allow_clients: ["127.0.0.0/8", "::1/128"]
                .iter()
                .filter_map(|n| n.parse().ok())
                .collect(),
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            admin_listen: Some(SocketAddr::from(([127, 0, 0, 1], 9090))),
            log_format: LogFormat::Text,
            agent: AgentConfig::default(),
            dns: DnsConfig::default(),
            egress: EgressConfig::default(),
            pacing: PacingConfig::default(),
            robots: RobotsConfig::default(),
            upstream: UpstreamConfig::default(),
            tls: TlsConfig::default(),
            access: AccessConfig::default(),
            limits: LimitsConfig::default(),
            admin: AdminConfig::default(),
            fleet: FleetConfig::default(),
            enforce: EnforceConfig::default(),
            transparent: TransparentConfig::default(),
            usage: UsageConfig::default(),
            signing: SigningConfig::default(),
            evidence: EvidenceConfig::default(),
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
/// How names are resolved (see `origin::dns`).
pub struct DnsConfig {
    /// Name servers (`ip:port`); empty = the system's `/etc/resolv.conf`.
    pub nameservers: Vec<SocketAddr>,
    /// Per-query timeout when `nameservers` is set.
    pub timeout_seconds: Seconds,
}

impl Default for DnsConfig {
    fn default() -> Self {
        DnsConfig {
            nameservers: Vec::new(),
            timeout_seconds: Seconds::new(2.0),
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
/// Where robotsgate may send traffic (see `policy::egress`).
pub struct EgressConfig {
    /// Networks opened although they are private, loopback, link-local, … .
    pub allow_destinations: Vec<Cidr>,
    /// Destination ports a request may go to (`"80"`, `"1025-65535"`).
    pub allowed_ports: Vec<PortRange>,
}

impl Default for EgressConfig {
    fn default() -> Self {
        // Squid's Safe_ports, the part of it crawlers use.
        EgressConfig {
            allow_destinations: Vec::new(),
            allowed_ports: vec![
                PortRange(80, 80),
                PortRange(443, 443),
                PortRange(1025, 65535),
            ],
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
/// Timeouts towards origins, for proxied requests.
pub struct UpstreamConfig {
    /// Longest wait for a TCP (and TLS) connection to an origin.
    pub connect_timeout_seconds: Timeout,
    /// Longest wait for the next bytes from an origin.
    pub read_timeout_seconds: Timeout,
    /// Longest wait for an origin to accept the next bytes.
    pub write_timeout_seconds: Timeout,
    /// Idle upstream connections are closed after this long in the pool.
    pub idle_timeout_seconds: Seconds,
    /// HTTP/2 to HTTPS origins: `auto` offers `h2` (then `http/1.1`) in ALPN and
    /// carries concurrent requests to one origin on one connection; `off`: HTTP/1.1.
    pub http2: Http2,
    /// How many times a request the origin never worked on (an HTTP/2 stream refused,
    /// a GOAWAY that did not cover it, a pooled connection closed under it, a failed
    /// connect) is sent again: each attempt takes a turn of its own, after the delay and
    /// the backoff the refusal adds (0: never).
    pub max_retries: u8,
}

/// `upstream.http2` and `tls.http2`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Http2 {
    /// Offer h2, fall back to HTTP/1.1 when the other side does not pick it.
    #[default]
    Auto,
    /// HTTP/1.1 only.
    Off,
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        UpstreamConfig {
            connect_timeout_seconds: Timeout::new(5.0),
            read_timeout_seconds: Timeout::new(60.0),
            write_timeout_seconds: Timeout::new(60.0),
            idle_timeout_seconds: Seconds::new(60.0),
            http2: Http2::Auto,
            max_retries: 1,
        }
    }
}

/// HTTPS: the CONNECT front, TLS interception and trust of origin certificates
/// (see `connect.rs`, `intercept.rs`, `trust.rs`).
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsConfig {
    /// The operator CA (PEM) that signs the per-host leaf certificates; created with
    /// `robotsgate ca init`. Without it, CONNECT is refused except to `blind_tunnel`.
    pub ca_cert: Option<PathBuf>,
    /// The operator CA's private key (PEM).
    pub ca_key: Option<PathBuf>,
    /// PEM files of extra roots trusted for origin certificates, on top of the system's.
    pub upstream_extra_roots: Vec<PathBuf>,
    /// Ports a CONNECT may name (Squid's SSL_ports, widened to unprivileged ports).
    pub connect_ports: Vec<PortRange>,
    /// Destinations tunnelled without interception (certificate-pinned services): host
    /// names (`pinned.example`, `*.example` for subdomains) or networks (`192.0.2.0/24`).
    /// Only host-level checks apply to them: egress, `Disallow: /`, paced connection starts.
    pub blind_tunnel: Vec<BlindTunnelRule>,
    /// Leaf certificates kept, one per host name.
    pub leaf_cache_size: usize,
    /// Validity of a minted leaf; it is re-minted when half of it has passed.
    pub leaf_validity_days: u32,
    /// Longest wait for the client's TLS handshake inside a CONNECT tunnel (the CONNECT
    /// head itself is read within `limits`).
    pub handshake_timeout_seconds: Timeout,
    /// HTTP/2 from crawlers inside intercepted tunnels and on the transparent TLS
    /// listener: `auto` offers `h2` and `http/1.1` in ALPN (the client picks); `off`:
    /// `http/1.1` only. Plain-HTTP `h2c` is always refused.
    pub http2: Http2,
}

impl Default for TlsConfig {
    fn default() -> Self {
        TlsConfig {
            ca_cert: None,
            ca_key: None,
            upstream_extra_roots: Vec::new(),
            connect_ports: vec![PortRange(443, 443), PortRange(1025, 65535)],
            blind_tunnel: Vec::new(),
            leaf_cache_size: 10_000,
            leaf_validity_days: 7,
            handshake_timeout_seconds: Timeout::new(10.0),
            http2: Http2::Auto,
        }
    }
}

/// Who may use the proxy (see `access.rs`).
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AccessConfig {
    /// Client networks allowed to connect; others get 403 and are counted.
    pub allow_clients: Vec<Cidr>,
    /// `user:bcrypt-hash[:Token1,Token2]` lines (`robotsgate passwd` writes them). When
    /// set, every request and CONNECT needs `Proxy-Authorization: Basic` (407 without).
    pub credentials_file: Option<PathBuf>,
    /// The realm named in `Proxy-Authenticate`.
    pub realm: String,
}

impl Default for AccessConfig {
    fn default() -> Self {
        // Loopback and the private ranges: a proxy is never open to the internet by default.
        let nets = [
            "127.0.0.0/8",
            "::1/128",
            "10.0.0.0/8",
            "172.16.0.0/12",
            "192.168.0.0/16",
            "fc00::/7",
        ];
        AccessConfig {
            allow_clients: nets.iter().filter_map(|n| n.parse().ok()).collect(),
            credentials_file: None,
            realm: "robotsgate".into(),
        }
    }
}

/// How logs are written (`robotsgate.log_format`): `text` (key=value) or `json` (one
/// object per line).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    /// `key=value` lines.
    Text,
    /// One JSON object per line.
    Json,
}

impl Config {
    /// Reads `robotsgate:` from a YAML file (a missing section means all defaults).
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text =
            std::fs::read_to_string(path).map_err(|e| ConfigError::read(path.to_path_buf(), e))?;
        Self::from_yaml(&text).map_err(|e| e.in_file(path.to_path_buf()))
    }

    /// Reads `robotsgate:` from YAML text (a missing section means all defaults) and validates it.
    pub fn from_yaml(text: &str) -> Result<Config, ConfigError> {
        let deserializer = serde_yaml::Deserializer::from_str(text);
        let file: File = serde_path_to_error::deserialize(deserializer).map_err(|e| {
            let key = e.path().to_string();
            let inner = e.into_inner();
            let line = inner.location().map(|l| l.line());
            // serde_yaml appends its own " at line L column C"; we say it once, up front.
            let message = inner.to_string();
            let message = message
                .split(" at line ")
                .next()
                .unwrap_or(&message)
                .to_string();
            ConfigError::syntax(key, line, message, inner)
        })?;
        let config = file.robotsgate.unwrap_or_default();
        config.validate().map_err(|e| e.located(text))?;
        Ok(config)
    }

    /// How long one exchange can hold its turns (see [`ExchangeBounds`]).
    pub fn exchange_bounds(&self) -> ExchangeBounds {
        let u = &self.upstream;
        let (connect, read, write) = (
            u.connect_timeout_seconds.duration(),
            u.read_timeout_seconds.duration(),
            u.write_timeout_seconds.duration(),
        );
        ExchangeBounds {
            max_exchange: self
                .pacing
                .max_exchange_seconds
                .map_or(connect + write + read, Timeout::duration),
            cut_within: read.max(write),
            linger: read,
            fetch: self.robots.fetch_timeout_seconds.duration(),
        }
    }

    /// Every address robotsgate listens on (proxy, admin, key directory, transparent):
    /// never a destination, never a redirected connection's.
    pub fn own_listeners(&self) -> Vec<SocketAddr> {
        self.named_listeners()
            .into_iter()
            .map(|(_, at)| at)
            .collect()
    }

    /// Each listener's address with its key.
    fn named_listeners(&self) -> Vec<(&'static str, SocketAddr)> {
        [
            ("robotsgate.listen", Some(self.listen)),
            ("robotsgate.admin_listen", self.admin_listen),
            (
                "robotsgate.signing.directory_listen",
                self.signing.directory_listen,
            ),
            (
                "robotsgate.transparent.http_listen",
                self.transparent.http_listen,
            ),
            (
                "robotsgate.transparent.tls_listen",
                self.transparent.tls_listen,
            ),
            ("robotsgate.fleet.peer_listen", self.fleet.peer_listen),
        ]
        .into_iter()
        .filter_map(|(key, at)| Some((key, at?)))
        .collect()
    }

    /// No two listeners on one address and port: Pingora would give both services the
    /// same socket, and either could accept a connection meant for the other (the admin
    /// API answering a crawler's request, or the proxy an operator's).
    fn validate_distinct_listeners(&self) -> Result<(), ConfigError> {
        let all = self.named_listeners();
        for (i, (key, at)) in all.iter().enumerate() {
            if let Some((other, was)) = all[..i].iter().find(|(_, was)| overlap(*at, *was)) {
                return Err(ConfigError::invalid(format!(
                    "key `{key}`: {at} is also `{other}`'s ({was}); each listener needs an address and port of its own (the same ones would share one socket, and either service could answer the other's connections)"
                )));
            }
        }
        Ok(())
    }

    /// Checks that cannot be expressed as types: each section's own, then those across
    /// sections.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        self.agent.validate()?;
        self.pacing.validate()?;
        self.fleet.validate()?;
        self.signing.validate()?;
        self.robots.validate()?;
        self.limits.validate()?;
        self.evidence.validate()?;
        self.validate_identities()?;
        self.validate_listeners()?;
        self.validate_tls()
    }

    /// Every identity named (the default, a rule's, a user's) exists, and a rule that
    /// pays has one.
    fn validate_identities(&self) -> Result<(), ConfigError> {
        let named = self
            .agent
            .default_identity
            .iter()
            .map(|n| ("agent.default_identity".to_string(), n))
            .chain(self.agent.rules.iter().enumerate().filter_map(|(i, r)| {
                Some((format!("agent.rules[{i}].identity"), r.identity.as_ref()?))
            }))
            .chain(
                self.signing
                    .users
                    .iter()
                    .map(|(user, name)| (format!("signing.users.{user}"), name)),
            );
        for (key, name) in named {
            if !self.signing.has(name) {
                return Err(ConfigError::invalid(format!(
                    "key `robotsgate.{key}`: no identity `{name}` in signing.identities"
                )));
            }
        }
        for (i, rule) in self.agent.rules.iter().enumerate() {
            let Some(payment) = &rule.payment else {
                continue;
            };
            let key = format!("robotsgate.agent.rules[{i}].payment");
            payment.validate(&key)?;
            if rule.identity.is_none() && self.agent.default_identity.is_none() {
                return Err(ConfigError::invalid(format!(
                    "key `{key}`: only signed requests can pay; set this rule's identity or agent.default_identity"
                )));
            }
        }
        Ok(())
    }

    /// The admin listener is never reachable unauthenticated beyond loopback, and the
    /// admin and proxy listeners admit someone.
    fn validate_listeners(&self) -> Result<(), ConfigError> {
        self.validate_distinct_listeners()?;
        if let Some(admin) = self.admin_listen {
            if !admin.ip().is_loopback() && self.admin.token_file.is_none() {
                return Err(ConfigError::invalid(format!(
                    "key `robotsgate.admin.token_file`: the admin listener {admin} is reachable from beyond loopback, and the admin API (refresh, purge, /check, /metrics) must never be used there unauthenticated; set a token file (clients beyond loopback then send `Authorization: Bearer <token>` for everything but /healthz and /readyz) or listen on loopback"
                )));
            }
        }
        if self.admin.allow_clients.is_empty() {
            return Err(ConfigError::invalid(
                "key `robotsgate.admin.allow_clients`: empty, so nobody could reach the admin listener",
            ));
        }
        if self.access.allow_clients.is_empty() {
            return Err(ConfigError::invalid(
                "key `robotsgate.access.allow_clients`: empty, so no client could use the proxy",
            ));
        }
        Ok(())
    }

    /// The interception CA comes whole, and redirected TLS has one.
    fn validate_tls(&self) -> Result<(), ConfigError> {
        let t = &self.tls;
        if t.ca_cert.is_some() != t.ca_key.is_some() {
            return Err(ConfigError::invalid(
                "key `robotsgate.tls.ca_cert`/`ca_key`: set both or neither",
            ));
        }
        if t.leaf_cache_size == 0 || t.leaf_validity_days == 0 {
            return Err(ConfigError::invalid(
                "key `robotsgate.tls.leaf_cache_size`/`leaf_validity_days`: must be at least 1",
            ));
        }
        if self.transparent.tls_listen.is_some() && t.ca_cert.is_none() {
            return Err(ConfigError::invalid(
                "key `robotsgate.transparent.tls_listen`: needs tls.ca_cert and tls.ca_key (redirected TLS is intercepted with the operator CA)",
            ));
        }
        if let (Some(ca), Some(peer)) = (&t.ca_cert, &self.fleet.peer_ca) {
            let (interception, fleet) = (certificates(ca), certificates(peer));
            if ca == peer || interception.iter().any(|c| fleet.contains(c)) {
                return Err(ConfigError::invalid(
                    "key `robotsgate.fleet.peer_ca`: the interception CA (tls.ca_cert), whose key every member holds to make certificates: anyone with one member's files could pass for any member; give the fleet a CA of its own (robotsgate fleet-cert)",
                ));
            }
        }
        Ok(())
    }
}

/// The certificates of a PEM file, each as its DER octets (a bundle's every one), or
/// the file's octets whole when it holds no PEM certificate; none when it cannot be
/// read (the file's own reader says why, later).
fn certificates(path: &std::path::Path) -> Vec<Vec<u8>> {
    let Ok(text) = std::fs::read(path) else {
        return Vec::new();
    };
    let ders: Vec<Vec<u8>> = pem::parse_many(&text)
        .unwrap_or_default()
        .into_iter()
        .filter(|block| block.tag() == "CERTIFICATE")
        .map(pem::Pem::into_contents)
        .collect();
    if ders.is_empty() {
        vec![text]
    } else {
        ders
    }
}

/// Do listeners on `a` and `b` take the same connections: the same port, and the same
/// address, or an unspecified one covering the other's (IPv4's its family, IPv6's
/// every address, as a dual-stack socket does)?
fn overlap(a: SocketAddr, b: SocketAddr) -> bool {
    let covers = |wide: SocketAddr, other: SocketAddr| match wide.ip() {
        std::net::IpAddr::V4(v4) => v4.is_unspecified() && other.is_ipv4(),
        std::net::IpAddr::V6(v6) => v6.is_unspecified(),
    };
    a.port() == b.port() && (a.ip() == b.ip() || covers(a, b) || covers(b, a))
}

#[cfg(test)]
mod tests;
