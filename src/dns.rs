//! Asynchronous name resolution with a TTL-respecting cache.
//!
//! Pingora's `HttpPeer::new` resolves with the blocking system resolver (and panics when
//! it fails), which would stall a worker thread per lookup. robotsgate resolves with
//! hickory's resolver instead: asynchronous, configured from `/etc/resolv.conf` and
//! `/etc/hosts`, and caching each answer for its DNS TTL. IP literals never reach it.

use std::net::IpAddr;

use hickory_resolver::TokioResolver;

use crate::target::Host;

pub struct Resolver {
    inner: Option<TokioResolver>,
}

#[derive(Debug)]
pub struct ResolveError(pub String);

impl std::fmt::Display for ResolveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Resolver {
    /// The system's resolver configuration. If it cannot be read, names do not resolve
    /// (every lookup fails clearly) rather than falling back to some public server.
    pub fn from_system() -> Resolver {
        let inner = match TokioResolver::builder_tokio().and_then(|b| b.build()) {
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
        let resolver = self
            .inner
            .as_ref()
            .ok_or_else(|| ResolveError(format!("cannot resolve {name}: no resolver configured")))?;
        let answer = resolver
            .lookup_ip(name.as_str())
            .await
            .map_err(|e| ResolveError(format!("cannot resolve {name}: {e}")))?;
        let addrs: Vec<IpAddr> = answer.iter().collect();
        if addrs.is_empty() {
            return Err(ResolveError(format!("cannot resolve {name}: no addresses")));
        }
        Ok(addrs)
    }
}
