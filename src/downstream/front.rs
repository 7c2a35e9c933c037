//! The proxy listener's front door: every client connection starts here.
//!
//! [`ProxyFront`] is the Pingora `ServerApp` on the proxy listener. Per connection it
//! 1. admits the client's network (`access.allow_clients`, 403) and takes a slot
//!    ([`Slots`]), its client's (`limits.max_connections_per_client`) and the listeners'
//!    (`limits.max_connections`); 503 when none is free. A new connection must send its
//!    first octet within `limits.first_byte_timeout_seconds` or is closed;
//! 2. reads each request head itself, within `limits` ([`read_head`]: 408/413/414/431/400);
//! 3. when a credentials file is set, checks `Proxy-Authorization` (407) — once per plain
//!    request, once per CONNECT for everything inside the tunnel;
//! 4. hands a CONNECT to [`Tunnels`], and serves an intercepted tunnel's decrypted stream
//!    with this same loop, or, when the client picked `h2`, as an HTTP/2 connection
//!    (`http2.rs`) whose every stream is a request;
//! 5. in a fleet, relays a plain request for an origin another member owns to that
//!    owner itself (`front/relayed.rs`, [`crate::handover`]);
//! 6. hands every other request to the HTTP application (robotsgate's Pingora proxy) with the bytes
//!    already read as a prefix, run within a [`ClientContext`] saying which tunnel and
//!    user it belongs to.
//!
//! The transparent listeners ([`Door::Transparent`]) use the same front: a redirected
//! connection gets the same admission, then its original destination
//! (`transparent.rs`; a loop is refused), then, on the TLS listener, the ClientHello and
//! interception ([`Tunnels::open_redirected`]); its requests are served by this same loop,
//! every one bound to the original destination. They carry no proxy credentials (the
//! client does not know it is proxied): `access.allow_clients` and the firewall rule that
//! sent them are their admission.
//!
//! Refusals are written here as complete responses, counted in
//! `robotsgate_downstream_refusals_total{reason}` and logged, and the connection closes.
//!
//! **Its other files:** `relayed.rs` (the front's side of a plain request relayed to its
//! owner).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::BytesMut;
use pingora::apps::{HttpServerApp, ServerApp};
use pingora::protocols::http::ServerSession;
use pingora::protocols::l4::stream::Stream as L4Stream;
use pingora::protocols::Stream;
use pingora::server::ShutdownWatch;

use crate::downstream::access::AccessPolicy;
use crate::downstream::client_stream::ClientStream;
use crate::downstream::connect::Tunnels;
use crate::downstream::context::{ClientContext, Handed};
use crate::downstream::drain::{draining, Serving};
use crate::downstream::head::{read_head, read_head_after, Body, Head, HeadError, HeadLimits};
use crate::downstream::http2::{self, Http2Limits, Multiplexer};
use crate::downstream::peer_door::{PeerDoor, Unheard};
use crate::downstream::refuse::{refuse, FrontRefusal};
use crate::downstream::shutting_down;
use crate::downstream::slots::{SlotKind, Slots};
use crate::downstream::transparent::{NoDestination, Redirection};
use crate::handover::HandOver;
use crate::telemetry::metrics;

mod relayed;

/// Which listener a connection arrived on.
#[derive(Clone)]
pub enum Door {
    /// The proxy listener: absolute-form requests, CONNECT, origin-form with `Host`.
    Proxy,
    /// A transparent listener: connections the kernel redirected (`tls`: the TLS one).
    Transparent {
        /// Finds each connection's original destination.
        redirection: Arc<Redirection>,
        /// The TLS listener (ClientHello, then interception) rather than plain HTTP.
        tls: bool,
    },
    /// The peer channel (fleet mode): requests other members hand over, over mutual TLS
    /// from the fleet CA, each with its context in `robotsgate-peer` (`crate::fleet::channel`).
    Peer(Arc<PeerDoor>),
}

/// The Pingora `ServerApp` on robotsgate's client listeners: the front door of every
/// client connection.
pub struct ProxyFront<A> {
    /// The HTTP application every request is handed to (robotsgate's Pingora proxy).
    http: Arc<A>,
    /// CONNECT and redirected TLS.
    tunnels: Arc<Tunnels>,
    /// Plain requests relayed to their fleet owner without a proxy pass.
    handover: Arc<HandOver>,
    /// Which clients may use the proxy, and their users.
    access: Arc<AccessPolicy>,
    /// Bounds on a request head.
    limits: HeadLimits,
    /// Shared by every listener: the limits count them all.
    slots: Arc<Slots>,
    /// HTTP/2 connections' settings.
    http2: Http2Limits,
    /// Which listener these connections arrive on.
    door: Door,
}

impl<A> ProxyFront<A> {
    /// The front door for `http`, with its tunnels, access policy and limits.
    pub fn new(
        http: A,
        tunnels: Tunnels,
        handover: Arc<HandOver>,
        access: Arc<AccessPolicy>,
        limits: HeadLimits,
        slots: Arc<Slots>,
        http2: Http2Limits,
    ) -> ProxyFront<A> {
        ProxyFront {
            http: Arc::new(http),
            tunnels: Arc::new(tunnels),
            handover,
            access,
            limits,
            slots,
            http2,
            door: Door::Proxy,
        }
    }

    /// The same front (limits, connection counts) at another door, with its own
    /// application `http` and hand-over: connections to origins and owners each pooled
    /// per door, on the runtime of the door's service.
    pub fn at(&self, door: Door, http: A) -> ProxyFront<A> {
        ProxyFront {
            http: Arc::new(http),
            tunnels: self.tunnels.clone(),
            handover: Arc::new(self.handover.another()),
            access: self.access.clone(),
            limits: self.limits.clone(),
            slots: self.slots.clone(),
            http2: self.http2,
            door,
        }
    }
}

#[async_trait]
impl<A: HttpServerApp + Send + Sync + 'static> ServerApp for ProxyFront<A> {
    async fn process_new(
        self: &Arc<Self>,
        mut stream: Stream,
        shutdown: &ShutdownWatch,
    ) -> Option<Stream> {
        let client = stream
            .get_socket_digest()
            .and_then(|d| d.peer_addr().and_then(|a| a.as_inet()).map(|a| a.ip()));
        if let Door::Peer(door) = &self.door {
            // Members are admitted by their certificates; their clients took their
            // slots where they connected.
            // Boxed: its handshake's state would otherwise widen every connection's.
            Box::pin(self.serve_peer(stream, client, door, shutdown)).await;
            return None;
        }
        if !self.access.client_allowed(client) {
            let why = "this client's address is not in access.allow_clients";
            let refusal = FrontRefusal::new(403, metrics::RefusalReason::ClientNetwork, why);
            self.turn_away(&mut stream, client, refusal).await;
            return None;
        }
        let _open = match self.slots.take(client, SlotKind::Connection) {
            Ok(slot) => slot,
            Err(full) => {
                let refusal = FrontRefusal::new(503, full.reason(), full.why()).retry_after(1);
                self.turn_away(&mut stream, client, refusal).await;
                return None;
            }
        };
        match &self.door {
            Door::Proxy => {
                self.serve(stream, client, ClientContext::default(), shutdown)
                    .await
            }
            Door::Transparent { redirection, tls } => {
                self.serve_redirected(stream, client, redirection, *tls, shutdown)
                    .await
            }
            Door::Peer(_) => {}
        }
        None
    }

    async fn cleanup(&self) {
        self.http.http_cleanup().await;
    }
}

impl<A: HttpServerApp + Send + Sync + 'static> ProxyFront<A> {
    /// What an HTTP/2 connection is served with.
    fn multiplexer(&self) -> Multiplexer<'_, A> {
        Multiplexer {
            http: &self.http,
            limits: &self.limits,
            slots: &self.slots,
            settings: self.http2,
        }
    }

    /// Refuses a connection before serving it. Its request is read first (briefly), so
    /// the client sees the answer rather than a reset; one that sends nothing is closed
    /// unanswered, as everywhere in the front.
    async fn turn_away(
        &self,
        stream: &mut Stream,
        client: Option<IpAddr>,
        refusal: FrontRefusal<'_>,
    ) {
        let wait = self.limits.first_byte_timeout.min(Duration::from_secs(1));
        let head = read_head(stream, &self.limits, wait).await;
        if !matches!(head, Err(HeadError::Gone | HeadError::FirstByteTimeout)) {
            refuse(stream, client, refusal).await;
        }
    }

    /// A connection on the peer channel: admitted as a live member's
    /// ([`PeerDoor::admit`]), then the request loop, each request with the context its
    /// head carries and the member the connection is.
    async fn serve_peer(
        &self,
        stream: Stream,
        peer: Option<IpAddr>,
        door: &PeerDoor,
        shutdown: &ShutdownWatch,
    ) {
        let Some(admitted) = door.admit(stream, peer).await else {
            return;
        };
        let context = ClientContext {
            handed: Some(Handed {
                member: admitted.member.into(),
                client: None,
                read_from: None,
            }),
            ..ClientContext::default()
        };
        self.serve(admitted.stream, peer, context, shutdown).await;
        drop((admitted.slot, admitted.member_slot));
    }

    /// A connection on a transparent listener: its original destination (a loop is
    /// refused: `508` on the HTTP listener, closed on the TLS one), then the request loop,
    /// after the ClientHello and interception on the TLS listener.
    async fn serve_redirected(
        &self,
        stream: Stream,
        client: Option<IpAddr>,
        redirection: &Redirection,
        tls: bool,
        shutdown: &ShutdownWatch,
    ) {
        let Some(l4) = stream.into_any().downcast::<L4Stream>().ok() else {
            log::error!("a transparent listener that is not plain TCP");
            return;
        };
        let destination = match redirection.destination(&l4) {
            Ok(destination) => destination,
            Err(NoDestination::Loop(to)) => {
                metrics::record_transparent(tls, metrics::TransparentOutcome::Loop);
                log::warn!("transparent: a connection from {client:?} was going to {to}, robotsgate's own listener: refused (the redirection rule must exclude robotsgate's own connections, and clients must not dial the transparent ports)");
                let mut stream: Stream = l4;
                if tls {
                    metrics::record_refusal(metrics::RefusalReason::Loop);
                } else {
                    let why = "this connection was going to robotsgate itself (a redirection loop)";
                    let refusal = FrontRefusal::new(508, metrics::RefusalReason::Loop, why);
                    self.turn_away(&mut stream, client, refusal).await;
                }
                return;
            }
            Err(NoDestination::Unknown(why)) => {
                metrics::record_transparent(tls, metrics::TransparentOutcome::NoDestination);
                log::warn!(
                    "transparent: no original destination for a connection from {client:?}: {why}"
                );
                return;
            }
        };
        let (stream, tunnel) = if tls {
            let opened = Box::pin(self.tunnels.open_redirected(*l4, destination, client)).await;
            let Some((stream, origin)) = opened else {
                return;
            };
            (stream, Some(Arc::new(origin)))
        } else {
            metrics::record_transparent(false, metrics::TransparentOutcome::Accepted);
            (l4 as Stream, None)
        };
        let context = ClientContext {
            tunnel,
            destination: Some(destination),
            ..ClientContext::default()
        };
        if http2::negotiated(&stream) {
            return self
                .multiplexer()
                .serve(stream, client, context, shutdown)
                .await;
        }
        self.serve(stream, client, context, shutdown).await;
    }

    /// The HTTP/1.1 request loop of one client connection (and of the tunnels opened on
    /// it; an HTTP/2 tunnel goes to [`Multiplexer`]), starting with what is
    /// known of it (`context`): a head within the limits, the client admitted, then a
    /// tunnel opened or the request served.
    async fn serve(
        &self,
        stream: Stream,
        client: Option<IpAddr>,
        mut context: ClientContext,
        shutdown: &ShutdownWatch,
    ) {
        let mut conn = Connection::new(stream, self.limits.first_byte_timeout, &self.limits);
        // One watch for the connection's life (a new one per request would register and
        // unregister a waiter, under the watch's lock, every time).
        let peer_channel = matches!(self.door, Door::Peer { .. });
        let shutdown_begins = shutting_down(shutdown.clone(), !peer_channel);
        tokio::pin!(shutdown_begins);
        loop {
            let already = std::mem::take(&mut conn.pipelined);
            let head = tokio::select! {
                biased;
                head = read_head_after(&mut *conn.stream, already, &self.limits, conn.wait) => head,
                // Shutting down: idle connections close (as Pingora's own loop does).
                () = &mut shutdown_begins => return,
            };
            let Some(head) = self.usable(head, &mut conn, client).await else {
                return;
            };
            if !self.admit(&head, &mut conn, client, &mut context).await {
                return;
            }
            if head.is_connect {
                let Some(tls) = self.tunnel(head, conn, client, &mut context).await else {
                    return;
                };
                if http2::negotiated(&tls) {
                    return Box::pin(self.multiplexer().serve(tls, client, context, shutdown))
                        .await;
                }
                conn = Connection::new(tls, self.limits.first_byte_timeout, &self.limits);
                continue;
            }
            let next = match self.candidate(&head, &context) {
                // Boxed, like the proxy's future: an idle connection's task holds only
                // the loop's small state.
                Some(plain) => {
                    Box::pin(self.hand_over(head, conn, plain, &mut context, client, shutdown))
                        .await
                }
                None => self.exchange(head, conn, &context, shutdown).await,
            };
            let Some(next) = next else {
                return;
            };
            conn = next;
        }
    }

    /// The head read, or `None` when the connection ends here (gone, silent, or refused
    /// for a head beyond the limits, answered).
    async fn usable(
        &self,
        head: Result<Head, HeadError>,
        conn: &mut Connection,
        client: Option<IpAddr>,
    ) -> Option<Head> {
        match head {
            Ok(head) => Some(head),
            Err(HeadError::Gone) => None,
            // A socket opened and left silent: closed, and counted (an idle kept-alive
            // connection closing is ordinary).
            Err(HeadError::FirstByteTimeout) => {
                if conn.fresh {
                    metrics::record_refusal(metrics::RefusalReason::FirstByteTimeout);
                }
                None
            }
            Err(e) => {
                let why = e.to_string();
                let refusal = FrontRefusal::new(e.status().unwrap_or(400), e.reason(), &why);
                refuse(&mut *conn.stream, client, refusal).await;
                None
            }
        }
    }

    /// Admits the request's client: inside a tunnel the CONNECT's credentials stand for
    /// every request, and a redirected connection has none to give; elsewhere its
    /// credentials are checked (the user is kept in `context`). `false`: refused and
    /// answered.
    async fn admit(
        &self,
        head: &Head,
        conn: &mut Connection,
        client: Option<IpAddr>,
        context: &mut ClientContext,
    ) -> bool {
        if context.handed.is_some() {
            return self.admit_handed(head, conn, client, context).await;
        }
        if context.tunnel.is_some() || context.destination.is_some() {
            return true;
        }
        match self
            .access
            .authenticate(head.proxy_authorization.as_deref())
            .await
        {
            Ok(user) => {
                context.user = user;
                true
            }
            Err(denied) => {
                let why = "proxy credentials required (Proxy-Authorization: Basic)";
                let challenge = format!("Basic realm=\"{}\"", self.access.realm);
                let refusal =
                    FrontRefusal::new(denied.status(), denied.reason(), why).challenge(challenge);
                refuse(&mut *conn.stream, client, refusal).await;
                false
            }
        }
    }

    /// A request on the peer channel: its context is what its `robotsgate-peer` header
    /// says (another member authenticated its client); without a readable one, or with
    /// a user this instance does not know, it is refused. `false`: refused and
    /// answered.
    async fn admit_handed(
        &self,
        head: &Head,
        conn: &mut Connection,
        peer: Option<IpAddr>,
        context: &mut ClientContext,
    ) -> bool {
        let (Door::Peer(door), Some(handed)) = (&self.door, context.handed.as_ref()) else {
            return false; // no member's word off the peer channel
        };
        if !door.still_member(&handed.member) {
            let why = "the member this connection is left the fleet or lapsed";
            let refusal = FrontRefusal::new(403, metrics::RefusalReason::PeerNotMember, why);
            refuse(&mut *conn.stream, peer, refusal).await;
            return false;
        }
        let value = head.peer.as_deref();
        if value.is_some() && value == handed.read_from.as_deref() {
            // As the connection's last request: the same context (the access policy
            // and the scope that read it do not change while it runs).
            return true;
        }
        let member = handed.member.clone();
        let heard = match value {
            Some(value) => door.handed_context(&self.access, value, member.clone()),
            None => Err(Unheard::Unreadable),
        };
        let refusal = match heard {
            Ok(handed) => {
                *context = handed;
                return true;
            }
            Err(Unheard::Unreadable) => {
                let why = "a request on the peer channel needs a readable robotsgate-peer header and a user this member knows";
                FrontRefusal::new(400, metrics::RefusalReason::Malformed, why)
            }
            Err(Unheard::OutOfScope(what)) => {
                log::warn!("peer channel: {member} named {what}, beyond its member's fleet.peer_scope: refused");
                let why = "the member that handed this request over may not name what its context names (fleet.peer_scope)";
                FrontRefusal::new(403, metrics::RefusalReason::PeerScope, why)
            }
        };
        refuse(&mut *conn.stream, peer, refusal).await;
        false
    }

    /// Opens the tunnel a CONNECT asks for: its TLS stream (the origin kept in
    /// `context`), or `None` when refused (answered) or failed.
    async fn tunnel(
        &self,
        head: Head,
        mut conn: Connection,
        client: Option<IpAddr>,
        context: &mut ClientContext,
    ) -> Option<Stream> {
        // On the peer channel (its context already read from the head): a blind tunnel
        // another member hands over, relayed here to its end.
        if context.handed.is_some() && head.len == head.bytes.len() {
            let inner = conn.stream.into_inner().await.ok()?;
            let opened = self
                .tunnels
                .open_handed(inner, &head.bytes[..head.len], context);
            Box::pin(opened).await;
            return None;
        }
        if context.tunnel.is_some() || context.destination.is_some() || context.handed.is_some() {
            let why = "CONNECT inside a tunnel or a redirected connection";
            let refusal = FrontRefusal::new(400, metrics::RefusalReason::Malformed, why);
            refuse(&mut *conn.stream, client, refusal).await;
            return None;
        }
        let inner = conn.stream.into_inner().await.ok()?;
        let Some(mut l4) = inner.into_any().downcast::<L4Stream>().ok() else {
            log::error!("CONNECT on a listener that is not plain TCP");
            return None;
        };
        l4.rewind(&head.bytes[head.len..]);
        // Boxed, like the proxy's future: an idle connection's task then holds only the
        // loop's small state, not room for the largest future it might await (Pingora's
        // is tens of KiB).
        let (tls, origin) =
            Box::pin(
                self.tunnels
                    .open(*l4, &head.bytes[..head.len], client, context),
            )
            .await?;
        context.tunnel = Some(Arc::new(origin));
        Some(tls)
    }

    /// Serves one request through the proxy: the connection back, with the octets of
    /// the next request read meanwhile, or `None` when it ends.
    async fn exchange(
        &self,
        head: Head,
        conn: Connection,
        context: &ClientContext,
        shutdown: &ShutdownWatch,
    ) -> Option<Connection> {
        let (session, pipelined) = self.prepare(head, conn, context, shutdown);
        self.proxy(session, pipelined, context, shutdown).await
    }

    /// Pingora's proxy pass over `session` (its request not read yet): the connection
    /// back, its next request's octets `pipelined` and those read meanwhile.
    async fn proxy(
        &self,
        session: ServerSession,
        pipelined: BytesMut,
        context: &ClientContext,
        shutdown: &ShutdownWatch,
    ) -> Option<Connection> {
        let _serving = Serving::start();
        let request = context
            .clone()
            .scope(self.http.process_new_http(session, shutdown));
        let reused = Box::pin(request).await?;
        self.resume(reused.consume().0, pipelined).await
    }

    /// Pingora's session for the request whose head the front read (with what of its
    /// body was read along), and the octets past it: the next, pipelined request's,
    /// answered after this one, in order, with every check of the front.
    fn prepare(
        &self,
        head: Head,
        mut conn: Connection,
        context: &ClientContext,
        shutdown: &ShutdownWatch,
    ) -> (ServerSession, BytesMut) {
        let mut bytes = head.bytes;
        let end = match head.body {
            Body::None => head.len,
            Body::Length(n) => {
                usize::try_from(n).map_or(usize::MAX, |n| head.len.saturating_add(n))
            }
            Body::Chunked => bytes.len(),
        };
        if end < bytes.len() {
            conn.pipelined = bytes.split_off(end);
        }
        // What of the request is still in the socket: Pingora reads that much and no
        // further, so a next request sent early waits for this exchange's end.
        conn.stream.expect_request(match head.body {
            Body::None => Some(0),
            Body::Length(n) => Some(n.saturating_sub((bytes.len() - head.len) as u64)),
            Body::Chunked => None,
        });
        let session = self.session(conn.stream, bytes, context, shutdown);
        (session, conn.pipelined)
    }

    /// The connection again after an exchange on `stream` (the client's, given back by
    /// Pingora), its next request's octets those read along (`pipelined`) and those that
    /// arrived during the exchange.
    async fn resume(&self, stream: Stream, mut pipelined: BytesMut) -> Option<Connection> {
        let Ok(mut stream) = stream.into_any().downcast::<ClientStream>() else {
            log::error!("Pingora gave back another stream than the client's");
            return None;
        };
        let early = stream.end_exchange().await.ok()?;
        pipelined.unsplit(early);
        Some(Connection {
            stream,
            wait: self.limits.idle_timeout,
            fresh: false,
            pipelined,
        })
    }

    /// Pingora's session for one request whose head is `bytes` (parsed from them without
    /// reading again).
    fn session(
        &self,
        stream: Box<ClientStream>,
        bytes: BytesMut,
        context: &ClientContext,
        shutdown: &ShutdownWatch,
    ) -> ServerSession {
        let mut session = ServerSession::new_http1(stream);
        if let ServerSession::H1(h1) = &mut session {
            h1.set_pipelined_prefix(bytes);
        }
        // Inside a tunnel a client may close its sending side (TLS close_notify, FIN)
        // once its request is out: the response is still delivered. Plain connections
        // keep Pingora's default (a FIN aborts, as in Squid and nginx) while queued for
        // pacing, so a client that hangs up gives up its place; once its turn is granted
        // the proxy tolerates it (the exchange runs to its end).
        if context.tunnel.is_some() {
            session.set_abort_on_close(false);
        }
        // Informational answers are not relayed, but for the `100 Continue` an HTTP/1.1
        // client asked for (RFC 9110 §10.1.1): crawlers have no use for `103 Early
        // Hints` or `102 Processing`, and common clients (Python's http.client, so
        // python-requests) take them for the final answer.
        session.set_ignore_info_resp(true);
        let idle = self.limits.idle_timeout.as_secs().max(1);
        let stopping = *shutdown.borrow() || draining();
        session.set_keepalive(if stopping { None } else { Some(idle) });
        session
    }
}

/// One client connection (or tunnel) between requests: the client's stream, how long
/// the next head may take to start, and the next request's octets read already.
struct Connection {
    /// The client's stream, wrapped once for every exchange on it.
    stream: Box<ClientStream>,
    /// How long the next request may take to start: promptly on a new connection or
    /// tunnel, an idle timeout on a kept-alive one.
    wait: Duration,
    /// No request served on it yet (a silent one is counted).
    fresh: bool,
    /// Octets of the next request read along with the previous one (pipelining).
    pipelined: BytesMut,
}

impl Connection {
    /// A new connection (or tunnel) over `stream`, whose first request must start
    /// within `first_byte`.
    fn new(stream: Stream, first_byte: Duration, limits: &HeadLimits) -> Connection {
        Connection {
            stream: Box::new(ClientStream::new(stream, limits.unread_timeout)),
            wait: first_byte,
            fresh: true,
            pipelined: BytesMut::new(),
        }
    }
}
