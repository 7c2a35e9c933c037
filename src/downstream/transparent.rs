//! Transparent interception: connections the kernel redirected to robotsgate.
//!
//! A crawler with no proxy settings connects to `site.test:80` or `:443`; a firewall
//! rule on its host or on the egress gateway (nftables/iptables `REDIRECT`, `DNAT`, or
//! `TPROXY`) hands the connection to one of robotsgate's transparent listeners instead.
//! The front (`front.rs`) then needs two facts, found here:
//! * the **original destination**: from conntrack (`SO_ORIGINAL_DST`, or
//!   `IP6T_SO_ORIGINAL_DST` for IPv6) after `REDIRECT`/`DNAT`; under `TPROXY`, the
//!   socket's own local address. Every request on the connection is sent there and
//!   nowhere else (after the egress check and the `Host` check of `enforce`);
//! * on the TLS listener, the **ClientHello's SNI and ALPN**, read before anything is
//!   answered, with rustls' sans-I/O `Acceptor` on a copy of the octets, which are then
//!   put back for the real handshake: the leaf is minted for the name the client expects.
//!
//! **Loops.** A connection whose original destination is one of robotsgate's own
//! listeners is refused and counted: robotsgate's upstream connections redirected back
//! to it, or a client dialling a transparent port directly (no conntrack entry, or one
//! naming the listener itself). Serving it would connect robotsgate to itself.
//!
//! **Costs.** One `getsockopt` per connection. On the TLS listener the ClientHello is
//! parsed twice (here, then by the handshake): a few microseconds per connection, none
//! per request. **Limits.** A ClientHello larger than [`MAX_CLIENT_HELLO`] is refused;
//! TPROXY listeners get `IP_TRANSPARENT` once Pingora has bound them
//! ([`make_listener_transparent`]), since Pingora's listener options have no such flag.

use std::net::SocketAddr;
use std::os::fd::BorrowedFd;

use pingora::protocols::l4::stream::Stream as L4Stream;
use socket2::SockRef;
use tokio::io::AsyncReadExt;

use crate::config::TransparentMode;
use crate::downstream::tunnel_error::{TunnelError, TunnelErrorKind};

/// The largest ClientHello read (post-quantum key shares make ordinary ones 1–2 KiB).
pub const MAX_CLIENT_HELLO: usize = 32 * 1024;

/// Learns where a redirected connection was going, and recognises loops.
#[derive(Clone, Debug)]
pub struct Redirection {
    /// How the kernel redirected the connection (REDIRECT or TPROXY).
    mode: TransparentMode,
    /// Every address robotsgate listens on (proxy, admin, transparent).
    own: Vec<SocketAddr>,
}

/// Why a redirected connection has no usable original destination.
#[derive(Debug)]
pub enum NoDestination {
    /// It was going to robotsgate itself.
    Loop(SocketAddr),
    /// The kernel did not say (not a TCP socket, or no address).
    Unknown(String),
}

impl Redirection {
    /// Original destinations learnt by `mode`; `own` lists robotsgate's listeners.
    pub fn new(mode: TransparentMode, own: Vec<SocketAddr>) -> Redirection {
        Redirection { mode, own }
    }

    /// The original destination of the accepted connection `l4`.
    pub fn destination(&self, l4: &L4Stream) -> Result<SocketAddr, NoDestination> {
        use std::os::fd::AsRawFd;
        // SAFETY: `l4` owns this descriptor and outlives the borrow.
        let fd = unsafe { BorrowedFd::borrow_raw(l4.as_raw_fd()) };
        let socket = SockRef::from(&fd);
        let unknown = |e: std::io::Error| NoDestination::Unknown(e.to_string());
        let local = socket
            .local_addr()
            .map_err(unknown)?
            .as_socket()
            .ok_or_else(|| NoDestination::Unknown("not an IP socket".into()))?;
        let destination = match self.mode {
            TransparentMode::Tproxy => local,
            // No conntrack entry (nothing redirected it): the listener itself was dialled.
            // An IPv4 connection on a dual-stack listener has an IPv4 conntrack entry.
            TransparentMode::Redirect => match local.ip().to_canonical() {
                std::net::IpAddr::V4(_) => socket.original_dst_v4(),
                std::net::IpAddr::V6(_) => socket.original_dst_v6(),
            }
            .ok()
            .and_then(|a| a.as_socket())
            .unwrap_or(local),
        };
        let destination = SocketAddr::new(destination.ip().to_canonical(), destination.port());
        if self.is_own(destination, local) {
            return Err(NoDestination::Loop(destination));
        }
        Ok(destination)
    }

    /// Is `destination` one of robotsgate's own listeners (seen from a connection
    /// accepted at `local`)?
    fn is_own(&self, destination: SocketAddr, local: SocketAddr) -> bool {
        let local_ip = local.ip().to_canonical();
        if self.mode == TransparentMode::Redirect
            && destination == SocketAddr::new(local_ip, local.port())
        {
            return true;
        }
        self.own.iter().any(|listener| {
            let ip = listener.ip().to_canonical();
            listener.port() == destination.port()
                && (ip == destination.ip()
                    || (ip.is_unspecified()
                        && (destination.ip().is_loopback() || destination.ip() == local_ip)))
        })
    }
}

/// What a ClientHello asked for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientHello {
    /// The server name (SNI), when sent.
    pub sni: Option<String>,
    /// The ALPN protocols offered, when the extension was sent.
    pub alpn: Option<Vec<Vec<u8>>>,
}

impl ClientHello {
    /// Does the client offer ALPN with none of `ours` (e.g. `h2` alone with
    /// `tls.http2: off`)? Without ALPN it speaks HTTP/1.1.
    pub fn offers_none_of(&self, ours: &[&[u8]]) -> bool {
        self.alpn
            .as_ref()
            .is_some_and(|offered| !offered.iter().any(|p| ours.contains(&p.as_slice())))
    }
}

/// Reads the connection's ClientHello, then puts every octet read back into `l4` for
/// the real handshake (or, for a blind relay, for the origin). `Err` says why the
/// octets are not a usable ClientHello.
pub async fn read_client_hello(l4: &mut L4Stream) -> Result<ClientHello, TunnelError> {
    let mut acceptor = rustls::server::Acceptor::default();
    let mut seen = Vec::with_capacity(2048);
    let mut chunk = vec![0u8; 4096];
    let result = loop {
        let n = match l4.read(&mut chunk).await {
            Ok(0) => {
                break Err(TunnelError::new(
                    TunnelErrorKind::Io,
                    "the client closed before its ClientHello",
                ))
            }
            Ok(n) => n,
            Err(e) => {
                break Err(TunnelError::new(
                    TunnelErrorKind::Io,
                    format!("reading the ClientHello: {e}"),
                )
                .because(e))
            }
        };
        seen.extend_from_slice(&chunk[..n]);
        let mut fed = &chunk[..n];
        while !fed.is_empty() {
            match acceptor.read_tls(&mut fed) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => {
                    l4.rewind(&seen);
                    return Err(TunnelError::new(
                        TunnelErrorKind::NotTls,
                        format!("not a TLS ClientHello: {e}"),
                    )
                    .because(e));
                }
            }
        }
        match acceptor.accept() {
            Ok(None) if seen.len() > MAX_CLIENT_HELLO => {
                break Err(TunnelError::new(
                    TunnelErrorKind::NotTls,
                    format!("ClientHello larger than {MAX_CLIENT_HELLO} bytes"),
                ))
            }
            Ok(None) => continue,
            Ok(Some(accepted)) => {
                let hello = accepted.client_hello();
                break Ok(ClientHello {
                    sni: hello.server_name().map(str::to_string),
                    alpn: hello
                        .alpn()
                        .map(|offered| offered.map(<[u8]>::to_vec).collect()),
                });
            }
            Err((e, _)) => {
                break Err(TunnelError::new(
                    TunnelErrorKind::NotTls,
                    format!("not a TLS ClientHello: {e}"),
                )
                .because(e))
            }
        }
    };
    l4.rewind(&seen);
    result
}

/// Sets `IP_TRANSPARENT` (TPROXY) on this process's listening socket bound to `addr`.
/// Pingora binds its listeners without that option, so the socket is found among this
/// process's descriptors once bound. `Ok(false)`: not bound yet.
pub fn make_listener_transparent(addr: SocketAddr) -> std::io::Result<bool> {
    for entry in std::fs::read_dir("/proc/self/fd")? {
        let Ok(fd) = entry?.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        // SAFETY: the number was just listed as open in this process, and is only
        // borrowed for the calls below. Were it closed and reused meanwhile, it would name
        // another descriptor, which the address and SO_ACCEPTCONN checks reject.
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        let socket = SockRef::from(&fd);
        let bound = socket.local_addr().ok().and_then(|a| a.as_socket());
        if bound != Some(addr) || !socket.is_listener().unwrap_or(false) {
            continue;
        }
        match addr {
            SocketAddr::V4(_) => socket.set_ip_transparent_v4(true)?,
            SocketAddr::V6(_) => socket.set_ip_transparent_v6(true)?,
        }
        return Ok(true);
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().expect("address")
    }

    #[test]
    fn own_listeners_are_loops() {
        let own = vec![addr("127.0.0.1:8080"), addr("0.0.0.0:9090")];
        let r = Redirection::new(TransparentMode::Redirect, own.clone());
        let local = addr("127.0.0.1:18081");
        assert!(r.is_own(local, local));
        assert!(r.is_own(addr("127.0.0.1:8080"), local));
        assert!(r.is_own(addr("127.0.0.5:9090"), local));
        assert!(!r.is_own(addr("192.0.2.1:9090"), local));
        assert!(!r.is_own(addr("127.0.0.2:80"), local));
        // TPROXY: the local address is the destination, not a loop by itself.
        let t = Redirection::new(TransparentMode::Tproxy, own);
        assert!(!t.is_own(addr("192.0.2.1:80"), addr("192.0.2.1:80")));
        assert!(t.is_own(addr("127.0.0.1:8080"), addr("127.0.0.1:8080")));
    }

    #[test]
    fn alpn_without_a_protocol_of_ours_is_refused() {
        let hello = |alpn: Option<&[&[u8]]>| ClientHello {
            sni: None,
            alpn: alpn.map(|a| a.iter().map(|p| p.to_vec()).collect()),
        };
        let both: &[&[u8]] = &[b"h2", b"http/1.1"];
        let http1: &[&[u8]] = &[b"http/1.1"];
        assert!(!hello(None).offers_none_of(http1));
        assert!(!hello(Some(&[b"h2", b"http/1.1"])).offers_none_of(http1));
        assert!(hello(Some(&[b"h2"])).offers_none_of(http1));
        assert!(!hello(Some(&[b"h2"])).offers_none_of(both));
        assert!(hello(Some(&[b"h3", b"spdy/3"])).offers_none_of(both));
    }
}
