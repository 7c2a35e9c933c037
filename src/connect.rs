//! The CONNECT front: how HTTPS gets the same robots.txt enforcement as HTTP.
//!
//! A crawler with `HTTPS_PROXY` set opens a connection and sends
//! `CONNECT host:443 HTTP/1.1`. Stock Pingora answers 405; a blind tunnel would let every
//! path through unseen. [`ConnectFront`] is the `ServerApp` on the proxy listener that
//! tells the two kinds of connection apart by their first eight octets:
//!
//! * anything else is plain HTTP and goes to the ordinary proxy (`HttpProxy::process_new`);
//! * `CONNECT`: the port is checked against `tls.connect_ports` and the destination
//!   against the egress policy, then
//!   - **intercepted** (the default): `200 Connection Established`, a TLS handshake with a
//!     leaf minted for the host ([`Interceptor`]), and the decrypted HTTP/1.1 stream is fed
//!     to the *same* proxy pipeline, request after request (keep-alive), with the CONNECT
//!     target carried as the origin ([`TunnelOrigin`]) — so every request inside gets
//!     the robots decision, pacing and egress checks a plain one gets;
//!   - **blind** (`tls.blind_tunnel`, for certificate-pinned services): only what can be
//!     judged without paths — egress, robots.txt's verdict on `/`, and the Crawl-delay
//!     applied to connection starts — then bytes are copied both ways.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use pingora::apps::{HttpServerApp, ServerApp};
use pingora::protocols::http::ServerSession;
use pingora::protocols::l4::stream::Stream as L4Stream;
use pingora::protocols::Stream;
use pingora::proxy::HttpProxy;
use pingora::server::ShutdownWatch;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::config::{seconds, Cidr, PortRange, TlsConfig};
use crate::enforce::{bad_request, egress_denied, Answer, Decision, Enforcer};
use crate::intercept::Interceptor;
use crate::metrics::{self, Outcome, TunnelMode};
use crate::proxy::RobotsGateProxy;
use crate::robots::CanonicalPath;
use crate::target::{parse_authority, Host, Origin, Scheme, Target};

/// The origin of an intercepted tunnel, handed to the proxy pipeline with each request
/// on the connection (Pingora's per-connection user context).
#[derive(Clone, Debug)]
pub struct TunnelOrigin(pub Origin);

/// A `tls.blind_tunnel` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BlindTunnelRule {
    Host(String),
    /// `*.example.com`: subdomains of `example.com`, not the name itself.
    Subdomains(String),
    Network(Cidr),
}

impl BlindTunnelRule {
    pub fn parse(entry: &str) -> Result<BlindTunnelRule, String> {
        let entry = entry.trim();
        if entry.contains('/') || entry.parse::<IpAddr>().is_ok() {
            return entry.parse().map(BlindTunnelRule::Network);
        }
        let (subdomains, name) = match entry.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, entry),
        };
        let ascii = idna::domain_to_ascii(name)
            .ok()
            .filter(|a| !a.is_empty() && !a.contains(['*', ' ', ':']))
            .ok_or_else(|| format!("`{entry}` is not a host name, `*.domain` or a CIDR network"))?;
        Ok(if subdomains {
            BlindTunnelRule::Subdomains(ascii)
        } else {
            BlindTunnelRule::Host(ascii)
        })
    }

    fn matches(&self, host: &Host, addrs: &[IpAddr]) -> bool {
        match (self, host) {
            (BlindTunnelRule::Host(h), Host::Name(name)) => h == name,
            (BlindTunnelRule::Subdomains(d), Host::Name(name)) => name
                .strip_suffix(d.as_str())
                .is_some_and(|rest| rest.ends_with('.')),
            (BlindTunnelRule::Network(net), Host::Ip(ip)) => net.contains(*ip),
            (BlindTunnelRule::Network(net), Host::Name(_)) => {
                addrs.iter().any(|ip| net.contains(*ip))
            }
            _ => false,
        }
    }
}

/// The CONNECT-front settings, parsed from [`TlsConfig`].
struct ConnectPolicy {
    ports: Vec<PortRange>,
    blind: Vec<BlindTunnelRule>,
    handshake_timeout: Duration,
    connect_timeout: Duration,
}

pub struct ConnectFront {
    http: Arc<HttpProxy<RobotsGateProxy>>,
    enforcer: Arc<Enforcer>,
    interceptor: Option<Arc<Interceptor>>,
    policy: ConnectPolicy,
}

/// The longest CONNECT request head read.
const MAX_HEAD: usize = 8192;

impl ConnectFront {
    pub fn new(
        http: HttpProxy<RobotsGateProxy>,
        enforcer: Arc<Enforcer>,
        interceptor: Option<Arc<Interceptor>>,
        tls: &TlsConfig,
        connect_timeout: Duration,
    ) -> ConnectFront {
        ConnectFront {
            http: Arc::new(http),
            enforcer,
            interceptor,
            policy: ConnectPolicy {
                ports: tls.connect_ports.clone(),
                // Validated with the configuration.
                blind: tls
                    .blind_tunnel
                    .iter()
                    .filter_map(|e| BlindTunnelRule::parse(e).ok())
                    .collect(),
                handshake_timeout: seconds(tls.handshake_timeout_seconds),
                connect_timeout,
            },
        }
    }
}

#[async_trait]
impl ServerApp for ConnectFront {
    async fn process_new(
        self: &Arc<Self>,
        mut stream: Stream,
        shutdown: &ShutdownWatch,
    ) -> Option<Stream> {
        let mut first = [0u8; 8];
        // Peeking reads ahead and puts the octets back: the HTTP parser sees them again.
        let peeked =
            tokio::time::timeout(self.policy.handshake_timeout, stream.try_peek(&mut first)).await;
        match peeked {
            Ok(Ok(true)) if first.eq_ignore_ascii_case(b"CONNECT ") => {}
            Ok(Ok(_)) => return self.http.process_new(stream, shutdown).await,
            // Silent or gone before eight octets: nothing to answer.
            _ => return None,
        }
        let client = stream
            .get_socket_digest()
            .and_then(|d| d.peer_addr().and_then(|a| a.as_inet()).map(|a| a.ip()));
        let Ok(l4) = stream.into_any().downcast::<L4Stream>() else {
            log::error!("CONNECT on a listener that is not plain TCP");
            return None;
        };
        self.tunnel(*l4, client, shutdown).await;
        None
    }

    async fn cleanup(&self) {
        ServerApp::cleanup(self.http.as_ref()).await;
    }
}

/// What a CONNECT request said.
#[derive(Debug)]
pub struct ConnectRequest {
    pub authority: String,
    pub user_agent: Option<String>,
}

/// A CONNECT that passed the checks every tunnel gets.
struct Admitted {
    origin: Origin,
    user_agent: Option<String>,
    /// The destination's addresses (empty if the name does not resolve: then the robots
    /// decision answers, as for plain HTTP).
    addrs: Vec<IpAddr>,
}

impl ConnectFront {
    async fn tunnel(
        self: &Arc<Self>,
        mut l4: L4Stream,
        client: Option<IpAddr>,
        shutdown: &ShutdownWatch,
    ) {
        let started = Instant::now();
        let admitted = match self.admit(&mut l4).await {
            Ok(admitted) => admitted,
            Err(Some((shown, answer))) => {
                return self
                    .refuse(&mut l4, &shown, TunnelMode::Intercepted, &answer, started)
                    .await
            }
            Err(None) => return, // silent client: nothing to answer
        };
        let Admitted {
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
            return self
                .blind(l4, origin, client, user_agent.as_deref(), started)
                .await;
        }
        match &self.interceptor {
            Some(interceptor) => self.intercept(l4, interceptor, origin, shutdown).await,
            None => {
                let answer = egress_denied(
                    "HTTPS interception is not configured (tls.ca_cert), so robots.txt could not be enforced inside this tunnel".into(),
                );
                let shown = origin.to_string();
                self.refuse(&mut l4, &shown, TunnelMode::Intercepted, &answer, started)
                    .await
            }
        }
    }

    /// Reads the CONNECT and applies the checks every tunnel gets: a valid `host:port`,
    /// a port in `tls.connect_ports`, an allowed destination. `Err` carries the answer
    /// (and what to call the target in the log), or nothing when the client never sent
    /// a request head.
    async fn admit(&self, l4: &mut L4Stream) -> Result<Admitted, Option<(String, Answer)>> {
        let request =
            match tokio::time::timeout(self.policy.handshake_timeout, read_connect(l4)).await {
                Ok(Ok(request)) => request,
                Ok(Err(why)) => return Err(Some(("-".into(), bad_request(400, why)))),
                Err(_) => return Err(None),
            };
        let origin = parse_authority(&request.authority, Scheme::Https).map_err(|e| {
            Some((
                request.authority.clone(),
                bad_request(400, format!("CONNECT target: {e}")),
            ))
        })?;
        if !self.policy.ports.iter().any(|r| r.contains(origin.port)) {
            let answer = egress_denied(format!(
                "CONNECT to port {} is not allowed (tls.connect_ports)",
                origin.port
            ));
            return Err(Some((origin.to_string(), answer)));
        }
        let addrs = match self.enforcer.check_egress(&origin).await {
            Ok(resolved) => resolved.unwrap_or_default(),
            Err(answer) => return Err(Some((origin.to_string(), answer))),
        };
        Ok(Admitted {
            origin,
            user_agent: request.user_agent,
            addrs,
        })
    }

    /// An intercepted tunnel: `200`, TLS with a minted leaf, then every request inside
    /// through the proxy pipeline for `origin`.
    async fn intercept(
        self: &Arc<Self>,
        mut l4: L4Stream,
        interceptor: &Arc<Interceptor>,
        origin: Origin,
        shutdown: &ShutdownWatch,
    ) {
        if !established(&mut l4).await {
            return;
        }
        let acceptor = interceptor.acceptor(origin.host_name());
        let handshake =
            tokio::time::timeout(self.policy.handshake_timeout, acceptor.tls_handshake(l4)).await;
        let tls = match handshake {
            Ok(Ok(tls)) => tls,
            failed => {
                // Usually a crawler host that does not trust the operator CA yet.
                let why = match failed {
                    Ok(Err(e)) => e.to_string(),
                    _ => "timed out".into(),
                };
                log::warn!("CONNECT {origin}: TLS handshake with the client failed: {why}");
                metrics::record_tunnel(TunnelMode::Intercepted, "handshake_failed");
                return;
            }
        };
        metrics::record_tunnel(TunnelMode::Intercepted, "established");

        // Pingora's HTTP/1 keep-alive loop, with the tunnel's origin handed to each request.
        let mut session = ServerSession::new_http1(Box::new(tls));
        session.set_keepalive(if *shutdown.borrow() { None } else { Some(60) });
        loop {
            session.set_connection_user_context(Some(Box::new(TunnelOrigin(origin.clone()))));
            let Some(reused) = self.http.process_new_http(session, shutdown).await else {
                break;
            };
            let (stream, settings) = reused.consume();
            session = ServerSession::new_http1(stream);
            if let Some(settings) = settings {
                settings.apply_to_session(&mut session);
            }
        }
    }

    /// A blind tunnel: host-level checks, a paced connection start, then bytes both ways.
    async fn blind(
        &self,
        mut l4: L4Stream,
        origin: Origin,
        client: Option<IpAddr>,
        user_agent: Option<&str>,
        started: Instant,
    ) {
        let shown = origin.to_string();
        let root = Target {
            origin,
            path: CanonicalPath::new("/").into_owned(),
        };
        let (addr, pace) = match self.enforcer.decide(&root, client, user_agent).await {
            Decision::Respond(answer) => {
                return self
                    .refuse(&mut l4, &shown, TunnelMode::Blind, &answer, started)
                    .await
            }
            Decision::Forward { addr, pace, .. } => (addr, pace),
        };
        let permit = match self.enforcer.pace(&pace).await {
            Ok(permit) => permit,
            Err(answer) => {
                return self
                    .refuse(&mut l4, &shown, TunnelMode::Blind, &answer, started)
                    .await
            }
        };
        let upstream = tokio::time::timeout(
            self.policy.connect_timeout,
            tokio::net::TcpStream::connect(addr),
        )
        .await;
        // The schedule counts connection starts: the next may begin a delay after this one.
        drop(permit);
        let mut upstream = match upstream {
            Ok(Ok(upstream)) => upstream,
            Ok(Err(e)) => {
                let answer = upstream_unreachable(&shown, &e.to_string());
                return self
                    .refuse(&mut l4, &shown, TunnelMode::Blind, &answer, started)
                    .await;
            }
            Err(_) => {
                let answer = upstream_unreachable(&shown, "connect timed out");
                return self
                    .refuse(&mut l4, &shown, TunnelMode::Blind, &answer, started)
                    .await;
            }
        };
        if !established(&mut l4).await {
            return;
        }
        metrics::record_tunnel(TunnelMode::Blind, "established");
        tracing::info!(
            target: "access",
            connect = shown.as_str(),
            mode = "blind",
            decision = "tunnelled",
            status = 200u16,
            duration_seconds = started.elapsed().as_secs_f64(),
        );
        let _ = tokio::io::copy_bidirectional(&mut l4, &mut upstream).await;
    }

    /// Answers the CONNECT with `answer` and closes.
    async fn refuse(
        &self,
        l4: &mut L4Stream,
        shown: &str,
        mode: TunnelMode,
        answer: &Answer,
        started: Instant,
    ) {
        metrics::record_tunnel(mode, "refused");
        tracing::info!(
            target: "access",
            connect = shown,
            mode = mode.label(),
            decision = answer.decision.label(),
            status = answer.status,
            duration_seconds = started.elapsed().as_secs_f64(),
            why = answer.header.as_str(),
        );
        let mut head = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nX-Robots-Decision: {}\r\nConnection: close\r\n",
            answer.status,
            http::StatusCode::from_u16(answer.status)
                .ok()
                .and_then(|s| s.canonical_reason())
                .unwrap_or(""),
            answer.content_type,
            answer.body.len(),
            answer.header,
        );
        if let Some(retry) = answer.retry_after {
            head.push_str(&format!("Retry-After: {retry}\r\n"));
        }
        head.push_str("\r\n");
        let _ = l4.write_all(head.as_bytes()).await;
        let _ = l4.write_all(&answer.body).await;
        let _ = l4.flush().await;
        let _ = l4.shutdown().await;
    }
}

/// Answers `200 Connection Established` (flushed: Pingora's stream buffers writes).
async fn established(l4: &mut L4Stream) -> bool {
    l4.write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        .await
        .is_ok()
        && l4.flush().await.is_ok()
}

fn upstream_unreachable(origin: &str, why: &str) -> Answer {
    Answer::text(
        502,
        Outcome::UpstreamError,
        format!("upstream-error; reason=\"connect: {why}\""),
        format!("robotsgate: cannot connect to {origin}: {why}"),
    )
}

/// Reads the CONNECT request head (at most [`MAX_HEAD`] octets); whatever the client sent
/// after it (an eager TLS ClientHello) is put back for the next reader.
async fn read_connect(l4: &mut L4Stream) -> Result<ConnectRequest, String> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    let end = loop {
        let n = l4
            .read(&mut chunk)
            .await
            .map_err(|e| format!("reading CONNECT: {e}"))?;
        if n == 0 {
            return Err("connection closed inside the CONNECT request".into());
        }
        let from = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = memchr::memmem::find(&buf[from..], b"\r\n\r\n") {
            break from + i + 4;
        }
        if buf.len() > MAX_HEAD {
            return Err(format!("CONNECT request head over {MAX_HEAD} octets"));
        }
    };
    l4.rewind(&buf[end..]);
    parse_connect_head(&buf[..end])
}

/// Parses a complete CONNECT request head (pure: fuzzed in `fuzz/`).
pub fn parse_connect_head(head: &[u8]) -> Result<ConnectRequest, String> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut request = httparse::Request::new(&mut headers);
    match request.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err("incomplete CONNECT request".into()),
        Err(e) => return Err(format!("malformed CONNECT request: {e}")),
    }
    if request.method != Some("CONNECT") {
        return Err("not a CONNECT request".into());
    }
    let authority = request
        .path
        .filter(|p| !p.is_empty() && !p.starts_with('/'))
        .ok_or("CONNECT needs an authority-form target (host:port)")?
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
        assert!(!net.matches(&name("x.example"), &["198.51.100.1".parse().expect("ip")]));
        assert!(rule("2001:db8::1").matches(&Host::Ip("2001:db8::1".parse().expect("ip")), &[]));
        for bad in ["", "*.", "a b", "10.0.0.0/33", "*.*.x"] {
            assert!(BlindTunnelRule::parse(bad).is_err(), "{bad}");
        }
    }
}
