//! CONNECT: how HTTPS gets the same robots.txt enforcement as HTTP.
//!
//! A crawler with `HTTPS_PROXY` set opens a connection and sends
//! `CONNECT host:443 HTTP/1.1`. Stock Pingora answers 405; a blind tunnel would let every
//! path through unseen. The front (`front.rs`) reads the CONNECT like any request head and
//! hands it to [`Tunnels::open`]: the port is checked against `tls.connect_ports` and the
//! destination against the egress policy, then
//! - **intercepted** (the default): `200 Connection Established`, a TLS handshake with a
//!   leaf minted for the host ([`Interceptor`]), and the decrypted HTTP/1.1 stream goes
//!   back to the front, which feeds it to the *same* proxy pipeline request after request
//!   with the CONNECT target as the origin — so every request inside gets the robots
//!   decision, pacing and egress checks a plain one gets;
//! - **blind** (`tls.blind_tunnel`, for certificate-pinned services): only what can be
//!   judged without paths — egress, robots.txt's verdict on `/`, and the Crawl-delay
//!   applied to connection starts — then bytes are copied both ways.
//!
//! A TLS connection the kernel redirected to robotsgate (transparent mode) is the same
//! tunnel without the CONNECT: [`Tunnels::open_redirected`] reads its ClientHello
//! (`transparent.rs`) and takes the origin from the SNI and the original destination's
//! port, then relays it blind or intercepts it exactly as above; every request inside
//! goes to the original destination.
//!
//! **Its other files:** `blind.rs` (blind tunnels, judged by what a CONNECT or a
//! ClientHello shows).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pingora::protocols::l4::stream::Stream as L4Stream;
use pingora::protocols::Stream;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use crate::policy::agent::Requester;

use crate::config::{BlindTunnelRule, PortRange, TlsConfig};
use crate::downstream::context::ClientContext;
use crate::downstream::intercept::Interceptor;
use crate::downstream::transparent::read_client_hello;
use crate::downstream::tunnel_error::{TunnelError, TunnelErrorKind};
use crate::enforce::{
    bad_request, egress_denied, Answer, Decision, Enforcer, ExchangeEnd, Said, Turn, Unpaced,
};
use crate::fleet::{PeerContext, Reroutes};
use crate::handover::{unavailable, HandOver, Tunnelled, Unreached};
use crate::policy::target::{parse_authority, Host, Origin, Scheme, Target};
use crate::robots::CanonicalPath;
use crate::telemetry::metrics::{self, Outcome, TunnelMode};

mod blind;

/// Blind-tunnel rules applied to a CONNECT's destination.
impl BlindTunnelRule {
    /// Does the rule cover this destination (its name, and every address it resolves to)?
    fn matches(&self, host: &Host, addrs: &[IpAddr]) -> bool {
        match (self, host) {
            (BlindTunnelRule::Host(h), Host::Name(name)) => **h == **name,
            (BlindTunnelRule::Subdomains(d), Host::Name(name)) => name
                .strip_suffix(d.as_str())
                .is_some_and(|rest| rest.ends_with('.')),
            (BlindTunnelRule::Network(net), Host::Ip(ip)) => net.contains(*ip),
            // Every address the name resolves to must be in the network: the tunnel
            // connects to one of them, and an address outside it must be intercepted.
            (BlindTunnelRule::Network(net), Host::Name(_)) => {
                !addrs.is_empty() && addrs.iter().all(|ip| net.contains(*ip))
            }
            _ => false,
        }
    }
}

/// The CONNECT settings, parsed from [`TlsConfig`].
struct ConnectPolicy {
    /// The ports CONNECT may reach.
    ports: Vec<PortRange>,
    /// Hosts whose tunnels are relayed blind (not intercepted).
    blind: Vec<BlindTunnelRule>,
    /// How long a client may take to finish its TLS handshake in an intercepted tunnel.
    handshake_timeout: Duration,
    /// How long a tunnel may wait for the client's first octets.
    first_byte_timeout: Duration,
    /// How long connecting to a blind tunnel's origin may take.
    connect_timeout: Duration,
    /// `transparent.upstream_mark`, for blind relays' upstream sockets.
    mark: Option<u32>,
    /// The ALPN protocols intercepted TLS speaks (`tls.http2`).
    protocols: &'static [&'static [u8]],
}

/// Opens tunnels for CONNECT requests the front (`front.rs`) has read.
pub struct Tunnels {
    /// Judges and paces what the tunnels carry.
    enforcer: Arc<Enforcer>,
    /// Mints leaf certificates for intercepted tunnels (absent: no interception).
    interceptor: Option<Arc<Interceptor>>,
    /// What CONNECT may do.
    policy: ConnectPolicy,
    /// Fleet mode: blind tunnels to origins another member owns.
    handover: Arc<HandOver>,
}

impl Tunnels {
    /// Tunnels judged by `enforcer`, intercepted with `interceptor` when there is one,
    /// blind ones to another member's origins handed over by `handover`.
    pub fn new(
        enforcer: Arc<Enforcer>,
        interceptor: Option<Arc<Interceptor>>,
        handover: Arc<HandOver>,
        tls: &TlsConfig,
        connect_timeout: Duration,
        first_byte_timeout: Duration,
        mark: Option<u32>,
    ) -> Tunnels {
        Tunnels {
            enforcer,
            interceptor,
            handover,
            policy: ConnectPolicy {
                ports: tls.connect_ports.clone(),
                blind: tls.blind_tunnel.clone(),
                handshake_timeout: tls.handshake_timeout_seconds.duration(),
                first_byte_timeout,
                connect_timeout,
                mark,
                protocols: crate::downstream::intercept::protocols(tls.http2),
            },
        }
    }

    /// Handles a CONNECT whose `head` has been read from `l4` (anything the client sent
    /// after it must already be rewound into `l4`), from `client` in `context` (its
    /// proxy user, authenticated by the CONNECT). An intercepted tunnel comes back as
    /// the decrypted stream and its origin, for the front to serve request by request;
    /// everything else (refusals, blind tunnels) is finished here.
    pub async fn open(
        &self,
        mut l4: L4Stream,
        head: &[u8],
        client: Option<IpAddr>,
        context: &ClientContext,
    ) -> Option<(Stream, Origin)> {
        let started = Instant::now();
        let admitted = match self.admit(head).await {
            Ok(admitted) => admitted,
            Err((shown, answer)) => {
                self.refuse(&mut l4, &shown, TunnelMode::Intercepted, &answer, started)
                    .await;
                return None;
            }
        };
        let CheckedConnect {
            origin,
            user_agent,
            addrs,
        } = admitted;
        if self
            .policy
            .blind
            .iter()
            .any(|r| r.matches(&origin.host, &addrs))
        {
            let who = context.requester(client, user_agent.as_deref());
            self.blind(l4, origin, &who, started, None, None).await;
            return None;
        }
        match &self.interceptor {
            Some(interceptor) => {
                if !established(&mut l4).await || !self.first_byte(&mut l4).await {
                    return None;
                }
                match self.handshake(l4, interceptor, &origin).await {
                    Ok(tls) => {
                        metrics::record_tunnel(
                            TunnelMode::Intercepted,
                            metrics::TunnelOutcome::Established,
                        );
                        Some((tls, origin))
                    }
                    Err(why) => {
                        // Usually a crawler host that does not trust the operator CA yet.
                        log::warn!("CONNECT {origin}: TLS handshake with the client failed: {why}");
                        metrics::record_tunnel(
                            TunnelMode::Intercepted,
                            metrics::TunnelOutcome::HandshakeFailed,
                        );
                        None
                    }
                }
            }
            None => {
                let answer = egress_denied(
                    "HTTPS interception is not configured (tls.ca_cert), so robots.txt could not be enforced inside this tunnel".into(),
                );
                let shown = origin.to_string();
                self.refuse(&mut l4, &shown, TunnelMode::Intercepted, &answer, started)
                    .await;
                None
            }
        }
    }
}

/// What a CONNECT request said.
#[derive(Debug)]
pub struct ConnectRequest {
    /// The `host:port` the client asked for.
    pub authority: String,
    /// The CONNECT's `User-Agent`, if sent (blind tunnels judge `/` as it).
    pub user_agent: Option<String>,
}

/// A CONNECT that passed the checks every tunnel gets.
struct CheckedConnect {
    /// The tunnel's origin.
    origin: Origin,
    /// The CONNECT's User-Agent, for judging a blind tunnel.
    user_agent: Option<String>,
    /// The destination's addresses (all passed the egress check).
    addrs: Vec<IpAddr>,
}

impl Tunnels {
    /// Applies the checks every tunnel gets: a valid `host:port`, a port in
    /// `tls.connect_ports`, an allowed destination. `Err` carries the answer and what to
    /// call the target in the log.
    async fn admit(&self, head: &[u8]) -> Result<CheckedConnect, (String, Answer)> {
        let request =
            parse_connect_head(head).map_err(|why| ("-".into(), bad_request(400, why)))?;
        let origin = parse_authority(&request.authority, Scheme::Https).map_err(|e| {
            (
                request.authority.clone(),
                bad_request(400, format!("CONNECT target: {e}")),
            )
        })?;
        if !self.policy.ports.iter().any(|r| r.contains(origin.port)) {
            let answer = egress_denied(format!(
                "CONNECT to port {} is not allowed (tls.connect_ports)",
                origin.port
            ));
            return Err((origin.to_string(), answer));
        }
        let addrs = match self.enforcer.check_egress(&origin).await {
            Ok(Ok(addrs)) => addrs,
            // Nothing could be reached in the tunnel: say so to the CONNECT itself rather
            // than answer 200 and mint a leaf for a name that does not exist.
            Ok(Err(e)) => {
                let answer = Answer::text(
                    502,
                    Outcome::UpstreamError,
                    format!(
                        "upstream-error; reason=\"{}\"; origin=\"{origin}\"",
                        e.cause
                    ),
                    format!("robotsgate: {e}"),
                );
                return Err((origin.to_string(), answer));
            }
            Err(why) => return Err((origin.to_string(), egress_denied(why.to_string()))),
        };
        Ok(CheckedConnect {
            origin,
            user_agent: request.user_agent,
            addrs,
        })
    }

    /// Waits for the client's first octet (its ClientHello): a connection that never
    /// sends one is closed at the first-byte deadline, not held for the handshake timeout.
    async fn first_byte(&self, l4: &mut L4Stream) -> bool {
        let mut first = [0u8; 1];
        let sent = tokio::time::timeout(
            self.policy.first_byte_timeout,
            pingora::protocols::Peek::try_peek(l4, &mut first),
        )
        .await;
        let sent = matches!(sent, Ok(Ok(true)));
        if !sent {
            metrics::record_refusal(metrics::RefusalReason::FirstByteTimeout);
        }
        sent
    }

    /// TLS with the client, with a leaf minted for `origin`'s host: the decrypted stream.
    async fn handshake(
        &self,
        l4: L4Stream,
        interceptor: &Arc<Interceptor>,
        origin: &Origin,
    ) -> Result<Stream, TunnelError> {
        let acceptor = interceptor.acceptor(origin.host_name());
        match tokio::time::timeout(self.policy.handshake_timeout, acceptor.tls_handshake(l4)).await
        {
            Ok(Ok(tls)) => Ok(Box::new(tls)),
            Ok(Err(e)) => Err(TunnelError::new(TunnelErrorKind::Handshake, e.to_string())),
            Err(_) => Err(TunnelError::new(TunnelErrorKind::Timeout, "timed out")),
        }
    }

    /// A TLS connection the kernel redirected to robotsgate, on its way to `destination`.
    /// Its ClientHello names the origin (SNI; without one, the destination's address) at
    /// the destination's port. A `tls.blind_tunnel` origin is relayed after the
    /// host-level checks; any other is intercepted and comes back decrypted with its
    /// origin, for the front to serve request by request. ALPN: `http/1.1` only; a
    /// client offering only others (`h2`) fails the handshake with a
    /// `no_application_protocol` alert.
    pub async fn open_redirected(
        &self,
        mut l4: L4Stream,
        destination: SocketAddr,
        client: Option<IpAddr>,
    ) -> Option<(Stream, Origin)> {
        let started = Instant::now();
        if !self.first_byte(&mut l4).await {
            return None;
        }
        let hello =
            tokio::time::timeout(self.policy.handshake_timeout, read_client_hello(&mut l4)).await;
        let hello = match hello {
            Ok(Ok(hello)) => hello,
            Ok(Err(why)) => {
                log::info!("transparent TLS to {destination}: no usable ClientHello: {why}");
                metrics::record_transparent(true, metrics::TransparentOutcome::NotTls);
                return None;
            }
            Err(_) => {
                log::info!("transparent TLS to {destination}: no ClientHello in time");
                metrics::record_transparent(true, metrics::TransparentOutcome::HandshakeFailed);
                return None;
            }
        };
        let origin = match &hello.sni {
            Some(name) => match parse_authority(name, Scheme::Https) {
                Ok(origin) => Origin {
                    port: destination.port(),
                    ..origin
                },
                Err(e) => {
                    log::info!("transparent TLS to {destination}: unusable SNI: {e}");
                    metrics::record_transparent(true, metrics::TransparentOutcome::NotTls);
                    return None;
                }
            },
            None => Origin {
                scheme: Scheme::Https,
                host: Host::Ip(destination.ip()),
                port: destination.port(),
            },
        };
        if self
            .policy
            .blind
            .iter()
            .any(|r| r.matches(&origin.host, &[destination.ip()]))
        {
            metrics::record_transparent(true, metrics::TransparentOutcome::Blind);
            let who = Requester::new(client, None);
            self.blind(l4, origin, &who, started, Some(destination), None)
                .await;
            return None;
        }
        // Configuration validation requires the CA with a TLS listener.
        let interceptor = self.interceptor.as_ref()?;
        let handshake = self.handshake(l4, interceptor, &origin).await;
        if hello.offers_none_of(self.policy.protocols) {
            log::info!(
                "transparent TLS to {origin}: the client offers ALPN {:?}, none of which robotsgate speaks; refused",
                hello.alpn.iter().flatten().map(|p| String::from_utf8_lossy(p)).collect::<Vec<_>>()
            );
            metrics::record_transparent(true, metrics::TransparentOutcome::AlpnRefused);
            return None;
        }
        match handshake {
            Ok(tls) => {
                metrics::record_transparent(true, metrics::TransparentOutcome::Intercepted);
                Some((tls, origin))
            }
            Err(why) => {
                log::warn!("transparent TLS to {origin}: handshake with the client failed: {why}");
                metrics::record_transparent(true, metrics::TransparentOutcome::HandshakeFailed);
                None
            }
        }
    }

    /// A blind tunnel another member handed over on the peer channel (`stream`, its
    /// CONNECT `head` read), in the `context` its peer context gives (the member, its
    /// client, the proxy user it authenticated, the redirected connection's
    /// destination): admitted and judged as this instance's own, answered over HTTP.
    /// Only blind tunnels are handed over (the other member intercepts the rest itself).
    pub async fn open_handed(&self, mut stream: Stream, head: &[u8], context: &ClientContext) {
        let Some(handed) = &context.handed else {
            return;
        };
        let destination = context.destination;
        let started = Instant::now();
        let admitted = match self.admit(head).await {
            Ok(admitted) => admitted,
            Err((shown, answer)) => {
                return self
                    .refuse(&mut stream, &shown, TunnelMode::Blind, &answer, started)
                    .await
            }
        };
        let addrs: Vec<IpAddr> = match destination {
            Some(d) => vec![d.ip()],
            None => admitted.addrs.clone(),
        };
        if !self
            .policy
            .blind
            .iter()
            .any(|r| r.matches(&admitted.origin.host, &addrs))
        {
            let answer = bad_request(400, "only blind tunnels are handed over");
            let shown = admitted.origin.to_string();
            return self
                .refuse(&mut stream, &shown, TunnelMode::Blind, &answer, started)
                .await;
        }
        let who = context.requester(None, admitted.user_agent.as_deref());
        self.blind(
            stream,
            admitted.origin,
            &who,
            started,
            destination,
            Some(&handed.member),
        )
        .await;
    }

    /// Answers the CONNECT with `answer` and closes (a redirected connection, which sent
    /// no CONNECT, is closed unanswered).
    async fn refuse<S: AsyncWrite + Unpin + Send>(
        &self,
        l4: &mut S,
        shown: &str,
        mode: TunnelMode,
        answer: &Answer,
        started: Instant,
    ) {
        metrics::record_tunnel(mode, metrics::TunnelOutcome::Refused);
        tracing::info!(
            target: "access",
            connect = shown,
            mode = mode.label(),
            decision = answer.decision.label(),
            status = answer.status,
            duration_seconds = started.elapsed().as_secs_f64(),
            why = answer.header.as_str(),
        );
        if mode != TunnelMode::TransparentBlind {
            crate::downstream::refuse::write_answer(l4, answer).await;
        }
    }
}

/// The access log's line for a tunnel relayed (`decision`: tunnelled, handed_over).
fn log_tunnel(shown: &str, mode: TunnelMode, decision: &str, started: Instant) {
    tracing::info!(
        target: "access",
        connect = shown,
        mode = mode.label(),
        decision = decision,
        status = 200u16,
        duration_seconds = started.elapsed().as_secs_f64(),
    );
}

/// Answers `200 Connection Established` (flushed: Pingora's stream buffers writes).
async fn established<S: AsyncWrite + Unpin>(l4: &mut S) -> bool {
    l4.write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        .await
        .is_ok()
        && l4.flush().await.is_ok()
}

/// The answer for a blind tunnel whose origin could not be reached.
fn upstream_unreachable(origin: &str, why: &str) -> Answer {
    Answer::text(
        502,
        Outcome::UpstreamError,
        format!("upstream-error; reason=\"connect: {why}\""),
        format!("robotsgate: cannot connect to {origin}: {why}"),
    )
}

/// Parses a complete CONNECT request head (pure: fuzzed in `fuzz/`).
pub fn parse_connect_head(head: &[u8]) -> Result<ConnectRequest, TunnelError> {
    let malformed = |why: String| TunnelError::new(TunnelErrorKind::Malformed, why);
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut request = httparse::Request::new(&mut headers);
    match request.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => {
            return Err(malformed("incomplete CONNECT request".into()))
        }
        Err(e) => return Err(malformed(format!("malformed CONNECT request: {e}")).because(e)),
    }
    if request.method != Some("CONNECT") {
        return Err(malformed("not a CONNECT request".into()));
    }
    let authority = request
        .path
        .filter(|p| !p.is_empty() && !p.starts_with('/'))
        .ok_or_else(|| malformed("CONNECT needs an authority-form target (host:port)".into()))?
        .to_string();
    let user_agent = request
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("user-agent"))
        .and_then(|h| std::str::from_utf8(h.value).ok())
        .map(str::to_string);
    Ok(ConnectRequest {
        authority,
        user_agent,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_heads() {
        let r = parse_connect_head(
            b"CONNECT Example.com:443 HTTP/1.1\r\nHost: example.com:443\r\nuser-agent: Bot/2\r\n\r\n",
        )
        .expect("valid");
        assert_eq!(r.authority, "Example.com:443");
        assert_eq!(r.user_agent.as_deref(), Some("Bot/2"));
        for bad in [
            &b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"[..],
            b"CONNECT /x HTTP/1.1\r\n\r\n",
            b"CONNECT a.com:443 HTTP/1.1\r\nBad Header\r\n\r\n",
            b"CONNECT a.com:443 HTTP/1.1\r\n",
        ] {
            assert!(parse_connect_head(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn blind_tunnel_rules() {
        let rule = |s: &str| BlindTunnelRule::parse(s).expect(s);
        let name = |s: &str| Host::Name(s.into());
        assert!(rule("Pinned.Example").matches(&name("pinned.example"), &[]));
        assert!(!rule("pinned.example").matches(&name("www.pinned.example"), &[]));
        let sub = rule("*.bank.example");
        assert!(sub.matches(&name("www.bank.example"), &[]));
        assert!(!sub.matches(&name("bank.example"), &[]));
        assert!(!sub.matches(&name("evilbank.example"), &[]));
        let net = rule("192.0.2.0/24");
        assert!(net.matches(&Host::Ip("192.0.2.7".parse().expect("ip")), &[]));
        assert!(net.matches(&name("x.example"), &["192.0.2.9".parse().expect("ip")]));
        let mixed = [
            "192.0.2.9".parse().expect("ip"),
            "198.51.100.1".parse().expect("ip"),
        ];
        assert!(!net.matches(&name("x.example"), &mixed));
        assert!(!net.matches(&name("x.example"), &[]));
        assert!(!net.matches(&name("x.example"), &["198.51.100.1".parse().expect("ip")]));
        assert!(rule("2001:db8::1").matches(&Host::Ip("2001:db8::1".parse().expect("ip")), &[]));
        for bad in ["", "*.", "a b", "10.0.0.0/33", "*.*.x"] {
            assert!(BlindTunnelRule::parse(bad).is_err(), "{bad}");
        }
    }
}
