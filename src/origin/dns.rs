//! Asynchronous name resolution with a TTL-respecting cache.
//!
//! Pingora's `HttpPeer::new` resolves with the blocking system resolver (and panics when
//! it fails), which would stall a worker thread per lookup. robotsgate resolves with
//! hickory's resolver instead: asynchronous, configured from `/etc/resolv.conf` and
//! `/etc/hosts`, and caching each answer for its DNS TTL. IP literals never reach it.

use std::net::IpAddr;

use hickory_resolver::config::{LookupIpStrategy, NameServerConfig, ResolverConfig};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::TokioResolver;

use crate::config::DnsConfig;

use crate::policy::target::Host;

/// A and AAAA both (the egress check judges every address), IPv4 first: the connection
/// goes to the first address, and many crawler hosts have no IPv6 route (hickory's
/// default puts AAAA first).
const IP_STRATEGY: LookupIpStrategy = LookupIpStrategy::Ipv4AndIpv6;

/// Resolves origin names through the configured (or system) name servers.
pub struct Resolver {
    /// The resolver (absent: it could not be built; only IP literals resolve).
    inner: Option<TokioResolver>,
}

/// A failed lookup: what happened, for people, and its short cause (`dns-nxdomain`,
/// `dns-no-address`, `dns-timeout`, `dns-failure`), for `X-Robots-Decision`.
#[derive(Clone, Debug)]
pub struct ResolveError {
    /// What happened, for people.
    pub message: String,
    /// The short cause, for `X-Robots-Decision`.
    pub cause: &'static str,
}

impl ResolveError {
    /// An error of kind `cause`.
    fn new(cause: &'static str, message: String) -> ResolveError {
        ResolveError { message, cause }
    }
}

impl std::fmt::Display for ResolveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl Resolver {
    /// The configured name servers, or the system's configuration when none are set.
    pub fn new(config: &DnsConfig) -> Resolver {
        if config.nameservers.is_empty() {
            return Self::from_system();
        }
        let servers = config
            .nameservers
            .iter()
            .map(|addr| {
                let mut server = NameServerConfig::udp_and_tcp(addr.ip());
                for connection in &mut server.connections {
                    connection.port = addr.port();
                }
                server
            })
            .collect();
        let mut builder = TokioResolver::builder_with_config(
            ResolverConfig::from_name_servers(servers),
            TokioRuntimeProvider::default(),
        );
        builder.options_mut().timeout = config.timeout_seconds.duration();
        builder.options_mut().attempts = 2;
        builder.options_mut().ip_strategy = IP_STRATEGY;
        match builder.build() {
            Ok(resolver) => Resolver {
                inner: Some(resolver),
            },
            Err(e) => {
                log::warn!(
                    "DNS: cannot build a resolver for {:?} ({e}); only IP literals will work",
                    config.nameservers
                );
                Resolver { inner: None }
            }
        }
    }

    /// The system's resolver configuration. If it cannot be read, names do not resolve
    /// (every lookup fails clearly) rather than falling back to some public server.
    pub fn from_system() -> Resolver {
        let built = TokioResolver::builder_tokio().and_then(|mut b| {
            b.options_mut().ip_strategy = IP_STRATEGY;
            b.build()
        });
        let inner = match built {
            Ok(resolver) => Some(resolver),
            Err(e) => {
                log::warn!("DNS: cannot read the system resolver configuration ({e}); only IP literals will work");
                None
            }
        };
        Resolver { inner }
    }

    /// The addresses of `host`, in the resolver's order.
    pub async fn resolve(&self, host: &Host) -> Result<Vec<IpAddr>, ResolveError> {
        let name = match host {
            Host::Ip(ip) => return Ok(vec![*ip]),
            Host::Name(name) => name,
        };
        let resolver = self.inner.as_ref().ok_or_else(|| {
            ResolveError::new(
                "dns-failure",
                format!("cannot resolve {name}: no resolver configured"),
            )
        })?;
        let answer = resolver.lookup_ip(&**name).await.map_err(|e| {
            let cause = if e.is_nx_domain() {
                "dns-nxdomain"
            } else if e.is_no_records_found() {
                "dns-no-address"
            } else if matches!(e, hickory_resolver::net::NetError::Timeout) {
                "dns-timeout"
            } else {
                "dns-failure"
            };
            ResolveError::new(cause, format!("cannot resolve {name}: {e}"))
        })?;
        let addrs: Vec<IpAddr> = answer.iter().collect();
        if addrs.is_empty() {
            return Err(ResolveError::new(
                "dns-no-address",
                format!("cannot resolve {name}: no addresses"),
            ));
        }
        Ok(addrs)
    }
}

/// Where a request for `origin` may go: its port and every address its host resolves to
/// pass `egress` (a name that also resolves into a private range is refused outright
/// rather than gambled on). `Err` is the refusal; `Ok(Err(_))` a failed lookup, which the
/// caller judges (robots.txt is then unreachable too). Crawl traffic and robots.txt
/// fetches both go through here.
pub async fn allowed_destination(
    resolver: &Resolver,
    egress: &crate::policy::egress::EgressPolicy,
    origin: &crate::policy::target::Origin,
) -> Result<Result<Vec<IpAddr>, ResolveError>, crate::policy::egress::Forbidden> {
    egress.check_port(origin.port)?;
    let resolved = resolver.resolve(&origin.host).await;
    if let Ok(addrs) = &resolved {
        for ip in addrs {
            egress.check_destination(*ip, origin.port)?;
        }
    }
    Ok(resolved)
}
