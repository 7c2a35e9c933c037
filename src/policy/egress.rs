//! Where robotsgate may send traffic: destination ports and resolved addresses.
//!
//! An egress proxy that forwards to whatever a URL names is a server-side request forgery
//! waiting to happen: `http://169.254.169.254/` is a cloud's credential service, and a
//! public name can resolve to `10.0.0.5`. So the check runs on the *resolved* address (the
//! one the connection then uses, so a second lookup cannot swap it), and refuses loopback,
//! private, link-local, CGNAT, multicast, reserved and cloud-metadata ranges unless the
//! operator opens a network with `allow_destinations`. robotsgate's own listeners (proxy,
//! admin, key directory, transparent) are refused whatever it opens: the admin API
//! reached through the proxy would be the admin API for every client.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::config::{Cidr, EgressConfig, PortRange};

#[derive(Clone, Debug)]
/// The egress rules: allowed ports, and networks opened despite their range.
pub struct EgressPolicy {
    /// Extra networks allowed beyond the public Internet (`--allow-destination`).
    allow: Vec<Cidr>,
    /// The ports traffic may go to.
    ports: Vec<PortRange>,
    /// robotsgate's own listeners, never a destination (a loop).
    own: OwnListeners,
}

/// Where robotsgate itself listens, as seen from this host: never a destination.
#[derive(Clone, Debug, Default)]
pub struct OwnListeners {
    /// The listening addresses (an unspecified address listens on every local one).
    listeners: Vec<SocketAddr>,
    /// This host's own addresses, which reach a listener on an unspecified address.
    local: Vec<IpAddr>,
}

impl OwnListeners {
    /// `listeners` on a host whose interfaces have the addresses `local`.
    pub fn new(listeners: Vec<SocketAddr>, local: Vec<IpAddr>) -> OwnListeners {
        OwnListeners { listeners, local }
    }

    /// The listener a connection to `ip`:`port` would reach, if it is one of these.
    pub fn reached_by(&self, ip: IpAddr, port: u16) -> Option<SocketAddr> {
        let ip = match ip.to_canonical() {
            // A connection to the unspecified address reaches this host's loopback.
            IpAddr::V4(v4) if v4.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(v6) if v6.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
            ip => ip,
        };
        self.listeners.iter().copied().find(|listener| {
            let at = listener.ip().to_canonical();
            listener.port() == port
                && (at == ip
                    || (at.is_unspecified() && (ip.is_loopback() || self.local.contains(&ip))))
        })
    }
}

/// Why a destination was refused; shown to the client in the 403.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Forbidden {
    /// The port is not in `egress.allowed_ports`.
    Port(u16),
    /// The address is in a special-purpose range not opened by `allow_destinations`.
    Address {
        /// The resolved address.
        ip: IpAddr,
        /// Which range (`loopback`, `private`, …).
        range: &'static str,
    },
    /// The destination is one of robotsgate's own listeners.
    Own(SocketAddr),
}

impl std::fmt::Display for Forbidden {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Forbidden::Port(port) => {
                write!(f, "destination port {port} is not in the allowed ports")
            }
            Forbidden::Address { ip, range } => {
                write!(
                    f,
                    "destination {ip} is in a {range} range (open it with allow_destinations)"
                )
            }
            Forbidden::Own(listener) => write!(
                f,
                "destination is robotsgate's own listener {listener}, never a destination"
            ),
        }
    }
}

/// The special-purpose IPv4 range `ip` is in, by name (none: public).
fn v4_range(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    Some(match (a, b) {
        (0, _) => "this-network",
        (10, _) => "private",
        (100, 64..=127) => "shared-address (CGNAT)",
        (127, _) => "loopback",
        (169, 254) => "link-local / cloud-metadata",
        (172, 16..=31) => "private",
        (192, 0) if c == 0 || c == 2 => "reserved",
        (192, 88) if c == 99 => "reserved",
        (192, 168) => "private",
        (198, 18..=19) => "benchmarking",
        (198, 51) if c == 100 => "documentation",
        (203, 0) if c == 113 => "documentation",
        (224..=239, _) => "multicast",
        (240..=255, _) => "reserved",
        _ => return None,
    })
}

/// The special-purpose IPv6 range `ip` is in, by name (none: public).
fn v6_range(ip: Ipv6Addr) -> Option<&'static str> {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return v4_range(v4);
    }
    let s = ip.segments();
    let o = ip.octets();
    let embedded = |at: usize| Ipv4Addr::new(o[at], o[at + 1], o[at + 2], o[at + 3]);
    Some(match s[0] {
        _ if ip.is_unspecified() => "unspecified",
        _ if ip.is_loopback() => "loopback",
        // Forms that carry an IPv4 address reach IPv4 space: the embedded address is
        // judged. Well-known NAT64 (64:ff9b::/96) and 6to4 (2002::/16, address in bits
        // 16–47) have a fixed place for it...
        0x64 if s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0] => return v4_range(embedded(12)),
        0x2002 => return v4_range(embedded(2)),
        // ...the rest are refused outright: local-use NAT64 (64:ff9b:1::/48, prefix of
        // any length), other 64:ff9b:: space, Teredo (2001::/32, a relay and an
        // obfuscated client address) and the IETF protocol assignments around it
        // (2001::/23), IPv4-compatible (::/96) and the rest of ::/16, discard-only
        // (100::/64), deprecated site-local (fec0::/10).
        0x64 if s[1] == 0xff9b => "NAT64 (local-use)",
        0x2001 if s[1] < 0x0200 => "IETF protocol assignment (Teredo, ORCHID, …)",
        0x0100 if s[1..4] == [0, 0, 0] => "discard-only",
        0xfc00..=0xfdff => "unique-local (private)",
        0xfe80..=0xfebf => "link-local",
        0xfec0..=0xfeff => "site-local (deprecated)",
        0xff00..=0xffff => "multicast",
        0x2001 if s[1] == 0x0db8 => "documentation",
        0x3fff if s[1] < 0x1000 => "documentation",
        0x0000 => "reserved (IPv4-compatible and other ::/16 forms)",
        _ => return None,
    })
}

/// The special-purpose range `ip` falls in, if any.
pub fn special_range(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => v4_range(v4),
        IpAddr::V6(v6) => v6_range(v6),
    }
}

impl EgressPolicy {
    /// The policy of `robotsgate.egress`.
    pub fn new(config: &EgressConfig) -> EgressPolicy {
        EgressPolicy {
            allow: config.allow_destinations.clone(),
            ports: config.allowed_ports.clone(),
            own: OwnListeners::default(),
        }
    }

    /// The same policy, refusing robotsgate's own listeners `own` too.
    pub fn refusing_own(mut self, own: OwnListeners) -> EgressPolicy {
        self.own = own;
        self
    }

    /// Is the destination port allowed?
    pub fn check_port(&self, port: u16) -> Result<(), Forbidden> {
        if self.ports.iter().any(|r| r.contains(port)) {
            Ok(())
        } else {
            Err(Forbidden::Port(port))
        }
    }

    /// Is the resolved address allowed (not in a special range, or opened)?
    pub fn check_address(&self, ip: IpAddr) -> Result<(), Forbidden> {
        match special_range(ip) {
            Some(range) if !self.allow.iter().any(|net| net.contains(ip)) => {
                Err(Forbidden::Address { ip, range })
            }
            _ => Ok(()),
        }
    }

    /// Is a connection to `ip`:`port` allowed: the address ([`EgressPolicy::check_address`]),
    /// and not one of robotsgate's own listeners whatever `allow_destinations` opens?
    pub fn check_destination(&self, ip: IpAddr, port: u16) -> Result<(), Forbidden> {
        self.check_address(ip)?;
        match self.own.reached_by(ip, port) {
            Some(listener) => Err(Forbidden::Own(listener)),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(allow: &[&str]) -> EgressPolicy {
        EgressPolicy::new(&EgressConfig {
            allow_destinations: allow.iter().map(|s| s.parse().expect("cidr")).collect(),
            ..EgressConfig::default()
        })
    }

    #[test]
    fn special_ranges_are_refused() {
        let p = policy(&[]);
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.100.100.200",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "fd00:ec2::254",
            "::ffff:127.0.0.1",
            "64:ff9b::a00:1",
            "ff02::1",
            // Forms embedding an IPv4 address: judged by it, or refused.
            "2002:7f00:1::1",
            "2002:a9fe:a9fe::1",
            "2002:c0a8:101::",
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
            "2001::1",
            "64:ff9b:1::7f00:1",
            "64:ff9b:1:2::1",
            "::7f00:1",
            "::808:808",
            "::ffff:0:7f00:1",
            "fec0::1",
            "feff::1",
            "100::1",
            "3fff::1",
        ] {
            assert!(p.check_address(ip.parse().expect("ip")).is_err(), "{ip}");
        }
        for ip in [
            "93.184.216.34",
            "8.8.8.8",
            "2606:4700::1111",
            "64:ff9b::808:808",
            "2002:808:808::1",
            "2001:4860:4860::8888",
            "2400:cb00::1",
        ] {
            assert!(p.check_address(ip.parse().expect("ip")).is_ok(), "{ip}");
        }
    }

    #[test]
    fn allow_destinations_opens_a_range() {
        let p = policy(&["127.0.0.0/8"]);
        assert!(p.check_address("127.0.0.1".parse().expect("ip")).is_ok());
        assert!(p.check_address("10.0.0.1".parse().expect("ip")).is_err());
    }

    #[test]
    fn own_listeners_are_never_destinations() {
        let addr = |s: &str| s.parse::<SocketAddr>().expect("addr");
        let own = OwnListeners::new(
            vec![
                addr("127.0.0.1:9090"),
                addr("0.0.0.0:8080"),
                addr("[::]:7070"),
            ],
            vec!["192.0.2.7".parse().expect("ip")],
        );
        let p = policy(&["0.0.0.0/0", "::/0"]).refusing_own(own);
        let refused = |ip: &str, port| p.check_destination(ip.parse().expect("ip"), port).is_err();
        assert!(refused("127.0.0.1", 9090));
        assert!(refused("::ffff:127.0.0.1", 9090));
        assert!(refused("0.0.0.0", 9090), "0.0.0.0 reaches loopback");
        assert!(!refused("127.0.0.2", 9090), "bound to 127.0.0.1 alone");
        assert!(refused("127.0.0.9", 8080) && refused("192.0.2.7", 8080));
        assert!(!refused("192.0.2.8", 8080));
        assert!(refused("::1", 7070) && refused("192.0.2.7", 7070));
        assert!(!refused("127.0.0.1", 9091));
    }

    #[test]
    fn ports_follow_safe_ports() {
        let p = policy(&[]);
        assert!(p.check_port(80).is_ok());
        assert!(p.check_port(443).is_ok());
        assert!(p.check_port(8080).is_ok());
        assert_eq!(p.check_port(25), Err(Forbidden::Port(25)));
        assert_eq!(p.check_port(1024), Err(Forbidden::Port(1024)));
    }
}
