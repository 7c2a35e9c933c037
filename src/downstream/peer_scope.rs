//! What another member may say of a request it hands over (`fleet.peer_scope`): the
//! proxy users and client addresses its word may name. The member is the peer
//! connection's, from its certificate ([`crate::downstream::peer_door`]); the first
//! entry naming it, or `"*"`, decides; a member no entry names may name neither.
//!
//! A stolen member key chooses only within its member's scope: which of those users'
//! robots.txt tokens, purposes, signing identity and budget apply, and which agent rule
//! matched by address. Report mode, and a usage check laxer than `usage.mode`, are
//! never its choice unless `enforce.report_handed_over` (`policy::agent`); robots.txt,
//! the Crawl-delay and the egress rules hold whatever it names. Where this owner
//! requires proxy credentials, a request naming no user is out of scope unless it came
//! on a redirected connection (`PeerDoor::handed_context`).

use std::net::IpAddr;

use crate::config::PeerScopeEntry;

/// `fleet.peer_scope`, read once.
#[derive(Clone, Debug)]
pub struct PeerScope {
    /// The entries, in order: the first naming a member is its scope.
    entries: Vec<PeerScopeEntry>,
}

/// What a member named beyond its scope.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OutOfScope {
    /// A proxy user.
    User(String),
    /// A client address.
    Client(IpAddr),
    /// No proxy user, where this owner requires one (`access.credentials_file`) and the
    /// request says it came on no redirected connection (the only kind that carries no
    /// credentials).
    NoUser,
}

impl std::fmt::Display for OutOfScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OutOfScope::User(user) => write!(f, "the proxy user {user:?}"),
            OutOfScope::Client(ip) => write!(f, "the client address {ip}"),
            OutOfScope::NoUser => write!(
                f,
                "no proxy user, where this owner requires one (access.credentials_file)"
            ),
        }
    }
}

impl PeerScope {
    /// The scope `fleet.peer_scope` gives.
    pub fn new(entries: &[PeerScopeEntry]) -> PeerScope {
        PeerScope {
            entries: entries.to_vec(),
        }
    }

    /// May `member` name `user` and `client` for a request it hands over?
    pub fn admits(
        &self,
        member: &str,
        user: Option<&str>,
        client: Option<IpAddr>,
    ) -> Result<(), OutOfScope> {
        let entry = self
            .entries
            .iter()
            .find(|e| e.members.iter().any(|m| m == "*" || m == member));
        if let Some(user) = user {
            let named = |e: &PeerScopeEntry| e.users.iter().any(|u| u == "*" || u == user);
            if !entry.is_some_and(named) {
                return Err(OutOfScope::User(user.to_string()));
            }
        }
        if let Some(ip) = client {
            if !entry.is_some_and(|e| e.clients.iter().any(|net| net.contains(ip))) {
                return Err(OutOfScope::Client(ip));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An entry of `fleet.peer_scope`.
    fn entry(members: &[&str], users: &[&str], clients: &[&str]) -> PeerScopeEntry {
        let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        PeerScopeEntry {
            members: strings(members),
            users: strings(users),
            clients: clients
                .iter()
                .map(|c| crate::config::Cidr::try_from(c.to_string()).expect("cidr"))
                .collect(),
        }
    }

    #[test]
    fn the_first_entry_naming_the_member_decides_and_an_unnamed_member_names_nothing() {
        let scope = PeerScope::new(&[
            entry(&["eu-1"], &["alice"], &["10.1.0.0/16"]),
            entry(&["*"], &["*"], &["10.0.0.0/8"]),
        ]);
        let ip = |s: &str| Some(s.parse::<IpAddr>().expect("ip"));
        assert_eq!(scope.admits("eu-1", Some("alice"), ip("10.1.2.3")), Ok(()));
        assert_eq!(
            scope.admits("eu-1", Some("bob"), ip("10.1.2.3")),
            Err(OutOfScope::User("bob".into()))
        );
        assert_eq!(
            scope.admits("eu-1", None, ip("10.2.0.1")),
            Err(OutOfScope::Client("10.2.0.1".parse().expect("ip")))
        );
        assert_eq!(scope.admits("us-1", Some("bob"), ip("10.2.0.1")), Ok(()));
        assert_eq!(scope.admits("us-1", None, None), Ok(()));
        let none = PeerScope::new(&[entry(&["eu-1"], &["*"], &["0.0.0.0/0"])]);
        assert!(none.admits("us-1", Some("alice"), None).is_err());
        assert!(none.admits("us-1", None, ip("10.0.0.1")).is_err());
        assert_eq!(none.admits("us-1", None, None), Ok(()));
    }

    #[test]
    fn the_default_admits_every_member_user_and_address() {
        let scope = PeerScope::new(&crate::config::FleetConfig::default().peer_scope);
        for ip in ["10.9.9.9", "2001:db8::1"] {
            let ip = ip.parse().ok();
            assert_eq!(scope.admits("any", Some("someone"), ip), Ok(()));
        }
    }
}
