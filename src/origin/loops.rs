//! Keeping robotsgate's own upstream traffic from coming back to it.
//!
//! When a firewall redirects crawler traffic to robotsgate, robotsgate's own connections
//! to origins must not be redirected back to it. Matching robotsgate's user or cgroup
//! does that on a crawler host; where that is not possible (a gateway, a shared uid):
//! * **a firewall mark** (`transparent.upstream_mark`): `SO_MARK` on every socket
//!   robotsgate opens towards an origin, so a `meta mark` / `-m mark` rule can exempt
//!   them. Setting a mark needs `CAP_NET_ADMIN`; a socket that cannot be marked is not
//!   connected (an unmarked one could loop);
//! * **a `Via` entry** ([`VIA`]) on every request robotsgate sends (pages and robots.txt
//!   fetches alike, as RFC 9110 §7.6.3 asks of proxies) while a transparent listener is
//!   configured: should a rule still send one back, it arrives carrying this process's
//!   pseudonym and is refused (508) instead of going around again ([`came_through`]).
//!   Without transparent listeners no request can loop back, and none carries it: some
//!   origins treat `Via` as a sign of a proxy (nginx's default `gzip_proxied off` stops
//!   compressing), which would cost an explicit-proxy fleet bandwidth for nothing.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::{TcpSocket, TcpStream};

/// This process's `Via` entry: `1.1 robotsgate-` and 8 random hex digits.
pub static VIA: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    let mut bytes = [0u8; 4];
    let _ = rustls::crypto::ring::default_provider()
        .secure_random
        .fill(&mut bytes);
    format!("1.1 robotsgate-{:08x}", u32::from_be_bytes(bytes))
});

/// Does any of these `Via` header values name this process (a request that already
/// went through it)?
pub fn came_through<'a>(via_values: impl IntoIterator<Item = &'a [u8]>) -> bool {
    let pseudonym = VIA.trim_start_matches("1.1 ").as_bytes();
    via_values
        .into_iter()
        .any(|v| memchr::memmem::find(v, pseudonym).is_some())
}

/// How robotsgate marks its own upstream traffic, from `transparent`.
#[derive(Clone, Copy, Debug, Default)]
pub struct OwnTraffic {
    /// `transparent.upstream_mark`.
    pub mark: Option<u32>,
    /// Requests carry [`VIA`] (a transparent listener is configured).
    pub via: bool,
}

impl OwnTraffic {
    /// From the `transparent` settings.
    pub fn new(config: &crate::config::TransparentConfig) -> OwnTraffic {
        OwnTraffic {
            mark: config.upstream_mark,
            via: config.http_listen.is_some() || config.tls_listen.is_some(),
        }
    }

    /// The `Via` entry requests carry, if any.
    pub fn via(self) -> Option<&'static str> {
        self.via.then(|| VIA.as_str())
    }
}

/// Pingora's per-socket hook (`PeerOptions::upstream_tcp_sock_tweak_hook`).
pub type SocketHook = Arc<dyn Fn(&TcpSocket) -> pingora::Result<()> + Send + Sync>;

/// The hook marking a Pingora upstream socket with `mark`, when one is configured.
pub fn hook(mark: Option<u32>) -> Option<SocketHook> {
    let mark = mark?;
    Some(Arc::new(move |socket: &TcpSocket| {
        socket2::SockRef::from(socket).set_mark(mark).map_err(|e| {
            pingora::Error::because(
                pingora::ErrorType::SocketError,
                "cannot set SO_MARK (transparent.upstream_mark needs CAP_NET_ADMIN)",
                e,
            )
        })
    }))
}

/// A TCP connection to `addr` opened with `mark` (for relays outside Pingora's
/// connectors: blind tunnels).
pub async fn connect(addr: SocketAddr, mark: Option<u32>) -> std::io::Result<TcpStream> {
    let socket = match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    if let Some(mark) = mark {
        socket2::SockRef::from(&socket).set_mark(mark)?;
    }
    socket.connect(addr).await
}

/// This host's interface addresses (`getifaddrs`), with which a listener on an
/// unspecified address is reached as well as through loopback. Empty when the kernel
/// does not say (then loopback alone counts).
pub fn local_addresses() -> Vec<std::net::IpAddr> {
    let mut found = Vec::new();
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list` with a linked list that freeifaddrs releases; the
    // entries are only read in between, each address by its own family's layout.
    unsafe {
        if libc::getifaddrs(&mut list) != 0 {
            return found;
        }
        let mut at = list;
        while !at.is_null() {
            let addr = (*at).ifa_addr;
            if !addr.is_null() {
                match i32::from((*addr).sa_family) {
                    libc::AF_INET => {
                        let v4 = &*(addr as *const libc::sockaddr_in);
                        let octets = v4.sin_addr.s_addr.to_ne_bytes();
                        found.push(std::net::IpAddr::from(octets));
                    }
                    libc::AF_INET6 => {
                        let v6 = &*(addr as *const libc::sockaddr_in6);
                        found.push(std::net::IpAddr::from(v6.sin6_addr.s6_addr));
                    }
                    _ => {}
                }
            }
            at = (*at).ifa_next;
        }
        libc::freeifaddrs(list);
    }
    found
}

#[cfg(test)]
mod tests {
    #[test]
    fn loopback_is_a_local_address() {
        let local = super::local_addresses();
        assert!(local.iter().any(|ip| ip.is_loopback()), "{local:?}");
    }
}
