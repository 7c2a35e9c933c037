//! Who may use the peer channel: a live member, from where members are.
//!
//! The fleet CA proves only that a certificate was issued for the fleet. A connection
//! is a member's when three things hold, each checked against this instance's view of
//! the membership (the member records its last renewal read, at most half a second
//! old):
//! * its address is one a live member advertises (the host of its `peer_address`), or
//!   one of `fleet.peer_allow_clients` — checked before the handshake, so a stranger
//!   costs no TLS work;
//! * its certificate names a member (`robotsgate fleet-cert --member NAME` writes the
//!   name in the subject's organization) that has a live instance at that address;
//! * and, for each request, that instance is still live: a member that left, or whose
//!   lease lapsed and the outage grace past it too (a member cut from Redis acts that
//!   long), hands nothing over, on a connection it opened before either. Removing a
//!   member (stopping it, or letting its lease lapse) is its revocation.
//!
//! A connection whose certificate names this very member, with no live instance of it,
//! is its own check, before it joins, that its peer channel answers at its
//! `fleet.peer_address`: closed after the handshake, never served, not counted.
//!
//! A member that joined since the last renewal is not in the view yet: a miss is asked
//! again until a renewal's news must have arrived ([`Membership::news_within`]) before
//! the connection is refused.
//!
//! Cost per request handed over: one lookup in the view (a map of the members).

use std::net::IpAddr;
use std::time::Duration;

use tokio::time::Instant;

use super::channel::member_of;
use super::membership::{Member, Membership};
use crate::config::FleetConfig;

/// How often a miss looks at the view again.
const LOOK_AGAIN: Duration = Duration::from_millis(50);

/// The host of a member's advertised peer address, when it is an IP address.
fn host_of(member: &Member) -> Option<IpAddr> {
    member
        .peer
        .parse::<std::net::SocketAddr>()
        .ok()
        .map(|a| a.ip().to_canonical())
}

/// May a connection from `from` reach the handshake: an address some live member
/// advertises, this instance's own (it checks its peer channel answers before it joins),
/// or one `fleet.peer_allow_clients` lists?
fn address_allowed(members: &Membership, config: &FleetConfig, from: IpAddr) -> bool {
    let from = from.to_canonical();
    if config
        .peer_allow_clients
        .iter()
        .any(|n| n.0.contains(&from))
    {
        return true;
    }
    let own = members.peer().parse::<std::net::SocketAddr>().ok();
    own.is_some_and(|a| a.ip().to_canonical() == from)
        || live_members(members).any(|m| host_of(&m) == Some(from))
}

/// The live instance of member `name` that a connection from `from` comes from: the
/// latest registered, when the member runs twice (a graceful upgrade).
fn instance_of(
    members: &Membership,
    config: &FleetConfig,
    name: &str,
    from: IpAddr,
) -> Option<String> {
    let from = from.to_canonical();
    let anywhere = config
        .peer_allow_clients
        .iter()
        .any(|n| n.0.contains(&from));
    live_members(members)
        .filter(|m| member_of(&m.id) == name)
        .filter(|m| anywhere || host_of(m) == Some(from))
        .max_by_key(|m| m.epoch)
        .map(|m| m.id)
}

/// Every member that may still act now, by the view aged here (its lease, and the
/// outage grace past it: `Membership::acting_since`).
fn live_members(members: &Membership) -> impl Iterator<Item = Member> {
    let view = members.members();
    let now = members.acting_since(view.0);
    let live: Vec<Member> = view
        .1
        .values()
        .filter(|m| m.live_at(now))
        .cloned()
        .collect();
    live.into_iter()
}

/// `look` until it finds something or a renewal's news must have arrived.
async fn until_news<T>(members: &Membership, mut look: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + members.news_within();
    loop {
        if let Some(found) = look() {
            return Some(found);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(LOOK_AGAIN).await;
    }
}

/// May a connection from `from` reach the handshake (see the module docs)?
pub(crate) async fn admitted(members: &Membership, config: &FleetConfig, from: IpAddr) -> bool {
    until_news(members, || {
        address_allowed(members, config, from).then_some(())
    })
    .await
    .is_some()
}

/// The member instance a connection from `from` whose certificate names `name` is,
/// `None` when no such member is live.
pub(crate) async fn identified(
    members: &Membership,
    config: &FleetConfig,
    name: &str,
    from: IpAddr,
) -> Option<String> {
    until_news(members, || instance_of(members, config, name, from)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_advertised_address_is_compared_as_an_ip() {
        let member = Member {
            id: "a/1.2".into(),
            epoch: 1,
            expires_ms: 10,
            state: crate::fleet::MemberState::Up,
            peer: "[::ffff:127.0.0.1]:7443".into(),
        };
        assert_eq!(host_of(&member), Some("127.0.0.1".parse().unwrap()));
        let named = Member {
            peer: "member-a.internal:7443".into(),
            ..member
        };
        assert_eq!(host_of(&named), None);
        assert_eq!(member_of("a/1.2"), "a");
        assert_eq!(member_of("b.c-d/ff.9"), "b.c-d");
    }
}
