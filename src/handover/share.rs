//! This member's connections at each owner, divided among its clients.
//!
//! **Why.** An owner admits at most `fleet.peer_max_connections_per_member` connections
//! from one member (`downstream/peer_door.rs`), and every hand-over in progress holds one
//! of them: a relayed request or a proxy pass until its answer ends, a tunnel for its
//! whole life. Undivided, one client of this member (512 idle `CONNECT`s, or requests
//! queued for a slow origin) would leave every other client a 503 for every origin that
//! owner holds.
//!
//! **Rule.** A *tenant* is a proxy user, or without one a client address (an IPv6 /64,
//! as `downstream/slots.rs` counts clients). A tenant may take one more of this member's
//! connections to an owner while it holds fewer than half of what the other tenants
//! leave of `fleet.peer_max_connections_per_member`: alone it holds at most half, and a
//! newcomer always finds room while two are free (each next tenant at most half of the
//! rest). A hand-over refused so is answered `503 fleet-unavailable` with `Retry-After`
//! (`owner.rs`), nothing sent to the owner.
//!
//! **Costs and limits.** A lock and two hash look-ups when a hand-over starts and when
//! it ends. The division counts the hand-overs in progress; the relay's idle pooled
//! connections (at most 64 per owner and listener, `pool.rs`) are no tenant's, and the
//! owner counts them too, so a tenant's half is of the whole, not of what is free
//! there. The owner's limit is taken to be this member's own setting (a fleet's
//! members share one configuration).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// Who a share is counted for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Tenant {
    /// An authenticated proxy user.
    User(String),
    /// A client address without a user (an IPv6 /64).
    Address(IpAddr),
    /// Neither (a client with no address): counted together.
    Unknown,
}

impl Tenant {
    /// The tenant of a request from `client`, as `user` if it has one.
    fn of(user: Option<&str>, client: Option<IpAddr>) -> Tenant {
        match (user, client) {
            (Some(user), _) => Tenant::User(user.to_string()),
            (None, Some(ip)) => Tenant::Address(match ip.to_canonical() {
                IpAddr::V6(v6) => IpAddr::V6(std::net::Ipv6Addr::from(
                    u128::from(v6) & !(u64::MAX as u128),
                )),
                v4 => v4,
            }),
            (None, None) => Tenant::Unknown,
        }
    }
}

/// The hand-overs in progress to each owner, per tenant.
#[derive(Debug)]
pub struct Shares {
    /// `fleet.peer_max_connections_per_member`.
    max: usize,
    /// By owner (member id): the total held, and each tenant's count.
    held: Mutex<HashMap<String, AtOwner>>,
}

/// One owner's hand-overs in progress.
#[derive(Debug, Default)]
struct AtOwner {
    /// All tenants together.
    total: usize,
    /// Each tenant's (a tenant leaves with its last).
    by: HashMap<Tenant, usize>,
}

/// One hand-over's place in its tenant's share, given back when dropped.
#[derive(Debug)]
pub struct Share {
    /// Where it is counted.
    shares: Arc<Shares>,
    /// The owner.
    owner: String,
    /// The tenant.
    tenant: Tenant,
}

impl Shares {
    /// Shares of `max` connections per owner.
    pub fn new(max: usize) -> Arc<Shares> {
        Arc::new(Shares {
            max,
            held: Mutex::default(),
        })
    }

    /// A place for one more hand-over to `owner` from `client` as `user`, unless its
    /// tenant holds its share (see the module docs).
    pub fn take(
        self: &Arc<Self>,
        owner: &str,
        user: Option<&str>,
        client: Option<IpAddr>,
    ) -> Option<Share> {
        let tenant = Tenant::of(user, client);
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        // The owner's entry, made only for its first hand-over (no copy of its name
        // on every request).
        if !held.contains_key(owner) {
            held.insert(owner.to_string(), AtOwner::default());
        }
        let at = held.get_mut(owner)?;
        let own = at.by.get(&tenant).copied().unwrap_or(0);
        let left_by_others = self.max.saturating_sub(at.total - own);
        if own >= (left_by_others / 2).max(1) || at.total >= self.max {
            return None;
        }
        at.total += 1;
        *at.by.entry(tenant.clone()).or_insert(0) += 1;
        Some(Share {
            shares: self.clone(),
            owner: owner.to_string(),
            tenant,
        })
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        let mut held = self.shares.held.lock().unwrap_or_else(|e| e.into_inner());
        let Some(at) = held.get_mut(&self.owner) else {
            return;
        };
        at.total = at.total.saturating_sub(1);
        if let Some(count) = at.by.get_mut(&self.tenant) {
            *count -= 1;
            if *count == 0 {
                at.by.remove(&self.tenant);
            }
        }
        if at.total == 0 {
            held.remove(&self.owner);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> Option<IpAddr> {
        Some(IpAddr::from([10, 0, 0, last]))
    }

    #[test]
    fn one_tenant_takes_half_and_each_next_half_of_the_rest() {
        let shares = Shares::new(8);
        let first: Vec<Share> = (0..8)
            .filter_map(|_| shares.take("b", None, ip(1)))
            .collect();
        assert_eq!(first.len(), 4);
        let second: Vec<Share> = (0..8)
            .filter_map(|_| shares.take("b", None, ip(2)))
            .collect();
        assert_eq!(second.len(), 2);
        let user: Vec<Share> = (0..8)
            .filter_map(|_| shares.take("b", Some("u"), ip(1)))
            .collect();
        assert_eq!(user.len(), 1, "a user is a tenant of its own");
        // Another owner's connections are counted apart.
        assert!(shares.take("c", None, ip(1)).is_some());
        drop(first);
        assert!(shares.take("b", None, ip(3)).is_some(), "given back");
    }

    #[test]
    fn the_last_connection_goes_to_a_tenant_holding_none() {
        let shares = Shares::new(2);
        let a = shares.take("b", None, ip(1));
        assert!(a.is_some());
        assert!(shares.take("b", None, ip(1)).is_none());
        let b = shares.take("b", None, ip(2));
        assert!(b.is_some());
        assert!(shares.take("b", None, ip(3)).is_none(), "all held");
    }

    #[test]
    fn an_ipv6_64_is_one_tenant() {
        let shares = Shares::new(4);
        let one = "2001:db8::1".parse().ok();
        let two = "2001:db8::2".parse().ok();
        let held: Vec<Share> = [one, two, one]
            .into_iter()
            .filter_map(|c| shares.take("b", None, c))
            .collect();
        assert_eq!(held.len(), 2);
    }
}
