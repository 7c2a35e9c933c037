//! `fleet`: the shared backend of a fleet of instances (one Redis, a Cluster or a
//! Sentinel-managed Redis) and what an instance does while it is unreachable.

use serde::Deserialize;

use std::net::SocketAddr;
use std::path::PathBuf;

use super::{Cidr, ConfigError, Seconds, Timeout};

/// Fleet mode (see `fleet`): with `redis`, `redis_cluster` or `redis_sentinel` set,
/// every instance pointed at the same Redis is a member of one fleet, each origin paced
/// in memory by one member, its owner, to which the others hand its requests over the
/// peer channel. Unset: the instance is alone.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FleetConfig {
    /// One Redis: `redis://[user:password@]host:port/db`, or `rediss://` for TLS.
    pub redis: Option<String>,
    /// The seed nodes of a Redis Cluster, instead of `redis`.
    pub redis_cluster: Vec<String>,
    /// A Sentinel-managed Redis, instead of `redis`: the master's name and the
    /// sentinels' addresses. A failover is followed without a restart.
    pub redis_sentinel: Option<SentinelConfig>,
    /// Accept a Redis whose `maxmemory-policy` can evict robotsgate's keys (`allkeys-*`,
    /// `volatile-*`). Off: such a Redis counts as unavailable, named in `/readyz`, since
    /// an evicted claim or membership record loses who owns an origin.
    pub allow_eviction: bool,
    /// What an owner does while Redis cannot renew its lease (see [`OnUnavailable`]).
    pub on_unavailable: OnUnavailable,
    /// With `on_unavailable: keep_owned`: how long past its lease an owner keeps pacing
    /// what it owns without Redis; every member waits that much longer before taking
    /// over a vanished owner's origins.
    pub outage_grace_seconds: Timeout,
    /// An owned origin nobody has asked for this long, with no pacing in force, is
    /// released (its claim goes, and Redis' record of it expires): the first member to
    /// meet it again owns it. Bounds what an owner and Redis hold to the origins being
    /// crawled. 0: kept for the whole membership.
    pub release_idle_seconds: Seconds,
    /// Ownership follows traffic: this often, an owner looks for the origins whose last
    /// 16 requests or more came in a row handed over by one other member, and hands
    /// each to that member with its facts, as in a graceful leave. With a front routing
    /// by host, a host the front moved (a member joined, left or came back) is then
    /// served where it arrives. 0: ownership moves only when its owner leaves, vanishes
    /// or lets it idle.
    pub follow_traffic_seconds: Seconds,
    /// What a data set Redis holds no generation for (a new Redis, or one restarted
    /// empty) is trusted with, when the member that finds it never saw another (see
    /// [`NewDataSet`]).
    pub new_data_set: NewDataSet,
    /// Longest wait for one Redis command; slower counts as unavailable.
    pub command_timeout_seconds: Timeout,
    /// A member's lease: renewed every half second; a member that has not renewed for
    /// this long is gone (its origins are taken over once its exchanges must be over).
    pub lease_seconds: Timeout,
    /// Where the peer channel listens (mutual TLS from the fleet CA): other members
    /// hand requests for the origins this instance owns to it here.
    pub peer_listen: Option<SocketAddr>,
    /// How the other members reach the peer channel (`ip:port`); default
    /// `peer_listen` (which must then not be a wildcard address). Checked before the
    /// member joins: its own peer channel must answer there.
    pub peer_address: Option<String>,
    /// The fleet CA (PEM), the only root a member's certificate is checked against.
    /// Never the interception CA (`tls.ca_cert`, the same file or the same contents),
    /// whose key every member holds: the configuration is refused.
    pub peer_ca: Option<PathBuf>,
    /// This member's certificate (PEM, for the name `robotsgate-fleet`, signed by the
    /// fleet CA, naming the member: `robotsgate fleet-cert --member NAME` makes one).
    pub peer_cert: Option<PathBuf>,
    /// Its private key (PEM).
    pub peer_key: Option<PathBuf>,
    /// Which addresses may connect to the peer channel. Empty (the default): only the
    /// addresses the live members advertise (the host of each one's `peer_address`); set
    /// it when members connect from other addresses than they are reached at (NAT).
    pub peer_allow_clients: Vec<Cidr>,
    /// Open peer-channel connections, from every member together; more are closed
    /// before their handshake.
    pub peer_max_connections: usize,
    /// Open peer-channel connections from one address (one member's: those its requests
    /// are in, and up to 64 idle per listener it relays from).
    pub peer_max_connections_per_client: usize,
    /// Open peer-channel connections one member holds, from however many addresses
    /// (each carries one request at a time): what a member's key can hold in flight
    /// here. More are closed after the handshake.
    pub peer_max_connections_per_member: usize,
    /// What another member may say of a request it hands over: the first entry naming
    /// that member (by its certificate's name, or `"*"`) says which proxy users and
    /// client addresses its word may name; a request naming another is refused (`403`,
    /// `peer_scope`), and a member no entry names may name neither. Whatever it names,
    /// this owner judges, paces and signs the request (report mode is chosen by a
    /// member's word only with `enforce.report_handed_over`).
    pub peer_scope: Vec<PeerScopeEntry>,
    /// Hosts new to this owner (it holds nothing of them) that one member's
    /// handed-over requests may make it take on, per second, each costing a DNS
    /// look-up, a robots.txt fetch and, for a new pacing key, a claim in Redis; counted
    /// by host before the look-up, not by key. Past it, such a request is answered
    /// `503` and counted. 0: no bound.
    pub peer_max_new_origins_per_second: u32,
}

/// One entry of `fleet.peer_scope`.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PeerScopeEntry {
    /// The members it is for, by the name their certificate gives; `"*"`: every one.
    pub members: Vec<String>,
    /// The proxy users they may name (whose robots.txt tokens, purposes, signing
    /// identity and pay-per-crawl budget then apply); `"*"`: any this owner knows.
    pub users: Vec<String>,
    /// The client addresses they may name (which `agent.rules` matched by address, and
    /// the address in the access log).
    pub clients: Vec<Cidr>,
}

impl Default for PeerScopeEntry {
    fn default() -> Self {
        PeerScopeEntry {
            members: vec!["*".to_string()],
            users: vec!["*".to_string()],
            clients: ["0.0.0.0/0", "::/0"]
                .iter()
                .filter_map(|net| Cidr::try_from(net.to_string()).ok())
                .collect(),
        }
    }
}

impl Default for FleetConfig {
    fn default() -> Self {
        FleetConfig {
            redis: None,
            redis_cluster: Vec::new(),
            redis_sentinel: None,
            allow_eviction: false,
            on_unavailable: OnUnavailable::Refuse,
            outage_grace_seconds: Timeout::new(30.0),
            release_idle_seconds: Seconds::new(900.0),
            follow_traffic_seconds: Seconds::new(10.0),
            new_data_set: NewDataSet::Settle,
            command_timeout_seconds: Timeout::new(0.5),
            lease_seconds: Timeout::new(5.0),
            peer_listen: None,
            peer_address: None,
            peer_ca: None,
            peer_cert: None,
            peer_key: None,
            peer_allow_clients: Vec::new(),
            peer_max_connections: 2048,
            peer_max_connections_per_client: 512,
            peer_max_connections_per_member: 512,
            peer_scope: vec![PeerScopeEntry::default()],
            peer_max_new_origins_per_second: 50,
        }
    }
}

impl FleetConfig {
    /// Is fleet mode on?
    pub fn enabled(&self) -> bool {
        self.redis.is_some() || !self.redis_cluster.is_empty() || self.redis_sentinel.is_some()
    }
}

/// `fleet.new_data_set`: how far a member that never saw Redis' data set before trusts
/// one that holds no generation (a new Redis, or one restarted empty: Redis cannot tell
/// them apart). A member that did see the old one always fences the new one: no origin
/// nobody holds is acted on until every exchange of the old data set's owners must be
/// over (the lease, the outage grace and the longest hold).
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum NewDataSet {
    /// Trusted after a settle window (two renewals and a command timeout), long enough
    /// for every member connected to Redis to say whether it saw the old data set (then
    /// the fence holds). A new fleet starts at once. Not covered: a member cut from
    /// Redis across its data set's loss while a member that never saw it starts and
    /// takes its origins; use `fence` where Redis can lose its data set.
    #[default]
    Settle,
    /// Never trusted before the full fence: a new fleet, too, waits the lease, the grace
    /// and the longest hold before acting for any origin.
    Fence,
}

/// `fleet.redis_sentinel`: where Redis Sentinel says the master is.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SentinelConfig {
    /// The master's name in the sentinels' configuration (`sentinel monitor <name> …`).
    pub master: String,
    /// The sentinels: `redis://host:port` each.
    pub sentinels: Vec<String>,
    /// Accept a master that takes writes with no replica connected (Redis'
    /// `min-replicas-to-write 0`, its default). By default such a master is refused as a
    /// backend (`/readyz` names it): cut from its replicas by a partition, it goes on
    /// taking claims while the sentinels promote another master, and members on each side
    /// take the other side's origins.
    #[serde(default)]
    pub allow_unreplicated_writes: bool,
}

/// `fleet.on_unavailable`: what an owner does while Redis cannot renew its lease (a
/// Redis outage, or this instance cut from it: it cannot tell them apart). Either way
/// an owner never acts on a lapsed lease, no member takes over an origin before its
/// owner's exchanges must be over, and an origin nobody owns yet (or whose owner left
/// during the outage) is answered 503 until Redis is back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnUnavailable {
    /// Owners stop once their lease lapses (`lease_seconds` after the last renewal):
    /// 503 + `Retry-After` (`reason="fleet-backend-unavailable"`) for their origins
    /// until Redis is back. A vanished owner's origins wait the least.
    #[default]
    Refuse,
    /// Owners keep pacing what they own for `outage_grace_seconds` past their lease;
    /// every member then waits that much longer to take over a vanished owner's
    /// origins. Outages shorter than the grace lose nothing.
    KeepOwned,
    /// The former mode (each origin paced by a hashed owner during an outage only):
    /// ownership is now the normal mode; a configuration error names `keep_owned`.
    Local,
}

impl FleetConfig {
    /// `fleet`: one backend, given as redis:// or rediss:// URLs.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let f = self;
        let backends = usize::from(f.redis.is_some())
            + usize::from(!f.redis_cluster.is_empty())
            + usize::from(f.redis_sentinel.is_some());
        if backends > 1 {
            return Err(ConfigError::invalid(
                "key `robotsgate.fleet.redis`/`redis_cluster`/`redis_sentinel`: set only one",
            ));
        }
        let sentinels = f.redis_sentinel.iter().flat_map(|s| {
            s.sentinels
                .iter()
                .enumerate()
                .map(|(i, u)| (format!("redis_sentinel.sentinels[{i}]"), u))
        });
        if let Some(s) = &f.redis_sentinel {
            if s.master.is_empty() || s.sentinels.is_empty() {
                return Err(ConfigError::invalid(
                    "key `robotsgate.fleet.redis_sentinel`: needs `master` and at least one of `sentinels`",
                ));
            }
        }
        for (key, url) in f
            .redis
            .iter()
            .map(|u| ("redis".to_string(), u))
            .chain(
                f.redis_cluster
                    .iter()
                    .enumerate()
                    .map(|(i, u)| (format!("redis_cluster[{i}]"), u)),
            )
            .chain(sentinels)
        {
            if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
                return Err(ConfigError::invalid(format!(
                    "key `robotsgate.fleet.{key}`: `{url}` is not a redis:// or rediss:// URL"
                )));
            }
        }
        self.validate_ownership()
    }
}

impl FleetConfig {
    /// The ownership settings: the mode, the lease, and the peer channel, complete.
    fn validate_ownership(&self) -> Result<(), ConfigError> {
        if self.on_unavailable == OnUnavailable::Local {
            return Err(ConfigError::invalid(
                "key `robotsgate.fleet.on_unavailable`: `local` is gone: each origin now has one owner at all times; use `keep_owned` (owners keep pacing through an outage, for outage_grace_seconds) or `refuse`",
            ));
        }
        let renewal = 2.0 * 0.5 + self.command_timeout_seconds.get();
        if self.lease_seconds.get() < renewal {
            return Err(ConfigError::invalid(format!(
                "key `robotsgate.fleet.lease_seconds`: {} s is shorter than two renewals and a command timeout ({renewal:.1} s): members would lapse while alive",
                self.lease_seconds.get()
            )));
        }
        Ok(())
    }

    /// The peer channel, complete in fleet mode (checked once the command line had its
    /// say: `--peer-listen` sets it per host).
    pub fn check_peer_channel(&self) -> Result<(), ConfigError> {
        if !self.enabled() {
            return Ok(());
        }
        let Some(listen) = self.peer_listen else {
            return Err(ConfigError::invalid(
                "key `robotsgate.fleet.peer_listen`: fleet mode needs the peer channel (where the other members hand requests over)",
            ));
        };
        for (key, set) in [
            ("peer_ca", self.peer_ca.is_some()),
            ("peer_cert", self.peer_cert.is_some()),
            ("peer_key", self.peer_key.is_some()),
        ] {
            if !set {
                return Err(ConfigError::invalid(format!(
                    "key `robotsgate.fleet.{key}`: fleet mode needs the peer channel's credentials (`robotsgate fleet-cert` makes them)"
                )));
            }
        }
        for (key, value) in [
            ("peer_max_connections", self.peer_max_connections),
            (
                "peer_max_connections_per_client",
                self.peer_max_connections_per_client,
            ),
            (
                "peer_max_connections_per_member",
                self.peer_max_connections_per_member,
            ),
        ] {
            if value == 0 {
                return Err(ConfigError::invalid(format!(
                    "key `robotsgate.fleet.{key}`: at least 1 (no member could hand anything over)"
                )));
            }
        }
        if let Some(address) = &self.peer_address {
            if address.parse::<SocketAddr>().is_err() {
                return Err(ConfigError::invalid(format!(
                    "key `robotsgate.fleet.peer_address`: `{address}` is not ip:port (the members hand requests over to that address)"
                )));
            }
        }
        if self.peer_address.is_none() && listen.ip().is_unspecified() {
            return Err(ConfigError::invalid(
                "key `robotsgate.fleet.peer_address`: peer_listen is a wildcard address; say how the other members reach this one",
            ));
        }
        Ok(())
    }

    /// How the other members reach this one's peer channel.
    pub fn peer_address(&self) -> String {
        self.peer_address
            .clone()
            .or_else(|| self.peer_listen.map(|a| a.to_string()))
            .unwrap_or_default()
    }
}
