//! A blind tunnel handed to its origin's owner (fleet mode).
//!
//! A blind tunnel's only paced event is its connection start, and only the origin's
//! owner may pace it. A member that does not own the origin opens the peer channel to
//! the owner (mutual TLS, `fleet::channel`) and sends `CONNECT host:port` with what
//! chose the tunnel's robots.txt group, as every path hands a request over: its
//! [`PeerContext`] (the client's address, the proxy user, a redirected connection's
//! destination) and the client's own `User-Agent`. The owner judges and paces it like its own blind tunnel and answers
//! `200` once it has connected to the origin, or its refusal; this member then relays
//! the client's bytes to the owner and back (writing its own `200` first when the
//! client sent a CONNECT), or passes the refusal on (a redirected client, which sent no
//! CONNECT, is closed).
//!
//! The `CONNECT` is written by Pingora's HTTP/1 request writer, as the relay's requests
//! are; the owner's answer head is read an octet at a time (nothing of the tunnel may be
//! read past it, which Pingora's client session would) and parsed by httparse, the
//! parser Pingora reads heads with. A refusal is passed on whole, its body read to the
//! owner's close.
//!
//! Costs: one TLS connection to the owner per tunnel (a tunnel is long-lived and owns
//! its connection: no pooling), one round trip before the client's `200`.

use std::time::Duration;

use pingora::http::RequestHeader;
use pingora::protocols::http::v1::client::http_req_header_to_wire;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::owner::{mark_for_owner, peer_header, unavailable, Unreached};
use super::HandOver;
use crate::enforce::Answer;
use crate::fleet::{Owner, PeerContext};
use crate::origin::splice::TunnelEnd;
use crate::policy::target::Origin;

/// How a tunnel's hand-over to the owner ended, when the owner could be asked.
pub enum Tunnelled {
    /// The owner answered: its refusal passed on, or the tunnel relayed to its end.
    Done,
    /// The owner no longer serves the key (it released it, handed it to another member,
    /// or is leaving) and opened nothing: nothing was written to the client (the tunnel
    /// may be routed once more).
    GaveUp,
    /// The owner never received the tunnel (no connection to its peer channel, another
    /// key answering there, its CONNECT not written, or the connection closed before a
    /// single octet of answer), as `owner.rs`'s `never_received` says of a
    /// request: it is forgotten as the key's owner, nothing was written to the client,
    /// and the tunnel may be routed once more.
    NotReceived,
}

/// The owner's answer head can be no longer than this.
const MAX_ANSWER_HEAD: usize = 16 * 1024;

/// What follows the head of an owner's refusal (its body, then the owner closes) is
/// passed on up to this many octets: a refusal's body is a line of text.
const MAX_REFUSAL_BODY: u64 = 64 * 1024;

impl HandOver {
    /// Hands the tunnel to `origin` from `client` to `owner`, then relays it, with its
    /// `context` and the client's `User-Agent` (what chose its robots.txt group). `connect`:
    /// the client sent a CONNECT (it is answered `200` or the owner's refusal). `Err`:
    /// what to answer the client when the owner may have received it but did not answer
    /// in time or readably; `GaveUp` and `NotReceived`: the owner refused as it no longer
    /// serves the key, or never received the tunnel, and nothing was written to the
    /// client: the caller routes it again ([`HandOver::route_again`], which forgets the
    /// owner). `answering` (the drain's count of a request in progress) is let go once
    /// the client has the owner's `200`, before the tunnel's bytes flow.
    pub async fn tunnel<S: AsyncRead + AsyncWrite + Unpin + Send, A: Send>(
        &self,
        client: &mut S,
        owner: &Owner,
        origin: &Origin,
        (context, user_agent): (PeerContext, Option<&str>),
        connect: bool,
        answering: &mut Option<A>,
    ) -> Result<Tunnelled, Answer> {
        let unreachable = || unavailable(Unreached::Unreachable);
        // Held for the tunnel's life: one of this member's connections at the owner.
        let Some(_share) = self.share(owner, context.user.as_deref(), context.client) else {
            return Err(unavailable(Unreached::OverShare));
        };
        let enforcer = &self.enforcer;
        let head = connect_head(origin, &context, user_agent).ok_or_else(unreachable)?;
        let Some(peer) = enforcer.owners().and_then(|owners| owners.peer(owner)) else {
            return Ok(Tunnelled::NotReceived);
        };
        let connected =
            tokio::time::timeout(self.connect_timeout, self.connector.new_stream(&peer)).await;
        let Ok(Ok(mut upstream)) = connected else {
            return Ok(Tunnelled::NotReceived);
        };
        if !crate::fleet::answered_by(&owner.member, upstream.get_ssl_digest().as_deref()) {
            return Ok(Tunnelled::NotReceived);
        }
        if upstream.write_all(&head).await.is_err() || upstream.flush().await.is_err() {
            return Ok(Tunnelled::NotReceived);
        }
        let within = enforcer.owner_answers_within();
        // A stop's bound ends the wait as its own bound does, whenever it was asked.
        let answered = tokio::select! {
            read = tokio::time::timeout(within, read_head(&mut upstream)) => read.ok(),
            () = enforcer.stop_due() => None,
        };
        let OwnerHead {
            status,
            gave_up,
            bytes: head,
        } = match answered {
            Some(Ok(head)) => head,
            Some(Err(Unanswered::Closed)) => return Ok(Tunnelled::NotReceived),
            Some(Err(Unanswered::Unreadable)) | None => return Err(unreachable()),
        };
        if gave_up {
            // It no longer serves the key: routed again (`HandOver::route_again`).
            return Ok(Tunnelled::GaveUp);
        }
        if status != 200 {
            if connect {
                let within = enforcer.owner_answers_within();
                pass_refusal(&mut upstream, client, &head, within).await;
            }
            return Ok(Tunnelled::Done);
        }
        if connect {
            let sent = client
                .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                .await;
            if sent.is_err() || client.flush().await.is_err() {
                return Ok(Tunnelled::Done);
            }
        }
        drop(answering.take());
        let idle = self.tunnel_idle;
        if crate::origin::splice::both_ways(client, &mut upstream, idle).await == TunnelEnd::Idle {
            log::info!("tunnel to {origin} handed to {} closed: it carried nothing for {idle:?} (limits.tunnel_idle_seconds)", owner.member);
        }
        Ok(Tunnelled::Done)
    }
}

/// The `CONNECT` sent to the owner for `origin`: authority-form, its `Host`, the
/// client's `User-Agent` when it sent one (agent rules may match it), marked for the
/// owner with `context` as every request handed over is ([`mark_for_owner`]), written by
/// Pingora's HTTP/1 request writer (the relay's). `None`: not writable.
fn connect_head(
    origin: &Origin,
    context: &PeerContext,
    user_agent: Option<&str>,
) -> Option<bytes::BytesMut> {
    // `Host`'s own form: an IPv6 address in brackets, as authority-form needs it.
    let authority = format!("{}:{}", origin.host, origin.port);
    let mut head = RequestHeader::build("CONNECT", authority.as_bytes(), None).ok()?;
    head.insert_header(http::header::HOST, &authority).ok()?;
    if let Some(user_agent) = user_agent {
        head.insert_header(http::header::USER_AGENT, user_agent)
            .ok()?;
    }
    mark_for_owner(&mut head, peer_header(context).ok()?).ok()?;
    http_req_header_to_wire(&head)
}

/// Passes the owner's refusal on whole: its `head`, then what follows it until the
/// owner closes (it answers a refusal with `Connection: close`), at most
/// [`MAX_REFUSAL_BODY`] octets and for at most `within`.
async fn pass_refusal<O, C>(owner: &mut O, client: &mut C, head: &[u8], within: Duration)
where
    O: AsyncRead + Unpin,
    C: AsyncWrite + Unpin,
{
    if client.write_all(head).await.is_err() {
        return;
    }
    let mut body = owner.take(MAX_REFUSAL_BODY);
    let _ = tokio::time::timeout(within, tokio::io::copy(&mut body, client)).await;
    let _ = client.flush().await;
}

/// The owner's answer to a tunnel handed over, as read.
struct OwnerHead {
    /// Its status.
    status: u16,
    /// It no longer serves the key ([`crate::fleet::owner_gave_up`]).
    gave_up: bool,
    /// The head's octets, through its blank line.
    bytes: Vec<u8>,
}

/// Reads a response head (through its blank line, nothing after it: the owner sends
/// nothing more before the tunnel's bytes); `None` when it is unreadable or too long.
async fn read_head<S: AsyncRead + Unpin>(stream: &mut S) -> Result<OwnerHead, Unanswered> {
    let mut head = Vec::with_capacity(256);
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() >= MAX_ANSWER_HEAD {
            return Err(Unanswered::Unreadable);
        }
        match stream.read(&mut byte).await {
            Ok(1..) => head.push(byte[0]),
            // Closed (or reset) before a single octet: the owner never took it.
            Ok(0) | Err(_) if head.is_empty() => return Err(Unanswered::Closed),
            Ok(0) | Err(_) => return Err(Unanswered::Unreadable),
        }
    }
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut response = httparse::Response::new(&mut headers);
    let Ok(httparse::Status::Complete(_)) = response.parse(&head) else {
        return Err(Unanswered::Unreadable);
    };
    let status = response.code.ok_or(Unanswered::Unreadable)?;
    let decision = response
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("x-robots-decision"))
        .map(|h| h.value);
    let gave_up = crate::fleet::owner_gave_up(status, decision);
    Ok(OwnerHead {
        status,
        gave_up,
        bytes: head,
    })
}

/// Why no answer head came from the owner.
#[derive(Debug, PartialEq, Eq)]
enum Unanswered {
    /// The connection closed (or was reset) before a single octet.
    Closed,
    /// Something came that is not a readable head, or it broke off midway.
    Unreadable,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connect_is_authority_form_with_its_host_and_context() {
        let origin =
            crate::policy::target::Origin::parse("https://a.example:8443").expect("origin");
        let context = PeerContext::default();
        let head = connect_head(&origin, &context, Some("StrictBot/1.0")).expect("head");
        let expected = format!(
            "CONNECT a.example:8443 HTTP/1.1\r\nHost: a.example:8443\r\nuser-agent: StrictBot/1.0\r\n{}: {}\r\n\r\n",
            crate::fleet::PEER_HEADER,
            context.encode()
        );
        assert_eq!(String::from_utf8_lossy(&head), expected);
        let v6 = crate::policy::target::Origin::parse("https://[2001:db8::1]").expect("origin");
        let head = connect_head(&v6, &context, None).expect("head");
        assert!(
            head.starts_with(b"CONNECT [2001:db8::1]:443 HTTP/1.1\r\nHost: [2001:db8::1]:443\r\n"),
            "{}",
            String::from_utf8_lossy(&head)
        );
    }

    #[tokio::test]
    async fn a_fleet_refusal_is_told_from_other_answers() {
        let fleet = &b"HTTP/1.1 503 Service Unavailable\r\nx-robots-decision: fleet-unavailable; reason=x\r\n\r\n"[..];
        let paced = &b"HTTP/1.1 503 Service Unavailable\r\nX-Robots-Decision: paced; reason=wait-too-long\r\n\r\n"[..];
        for (head, gave_up) in [(fleet, true), (paced, false)] {
            let (mut a, mut b) = tokio::io::duplex(1024);
            b.write_all(head).await.expect("write");
            let read = read_head(&mut a).await.expect("head");
            assert_eq!((read.status, read.gave_up), (503, gave_up));
        }
    }

    #[tokio::test]
    async fn an_answer_head_is_read_to_its_blank_line_only() {
        let (mut a, mut b) = tokio::io::duplex(1024);
        b.write_all(b"HTTP/1.1 200 Connection Established\r\n\r\ntunnel bytes")
            .await
            .expect("write");
        let read = read_head(&mut a).await.expect("head");
        assert_eq!(read.status, 200);
        assert!(read.bytes.ends_with(b"\r\n\r\n"));
        let mut rest = [0u8; 6];
        a.read_exact(&mut rest).await.expect("rest");
        assert_eq!(&rest, b"tunnel");
    }

    #[tokio::test]
    async fn an_unreadable_or_endless_head_is_refused() {
        let (mut a, mut b) = tokio::io::duplex(64 * 1024);
        b.write_all(b"garbage\r\n\r\n").await.expect("write");
        assert_eq!(read_head(&mut a).await.err(), Some(Unanswered::Unreadable));
        let (mut a, mut b) = tokio::io::duplex(64 * 1024);
        b.write_all(&vec![b'x'; MAX_ANSWER_HEAD + 10])
            .await
            .expect("write");
        assert_eq!(read_head(&mut a).await.err(), Some(Unanswered::Unreadable));
    }

    #[tokio::test]
    async fn a_close_before_any_octet_is_told_from_one_midway() {
        let (mut a, b) = tokio::io::duplex(1024);
        drop(b);
        assert_eq!(read_head(&mut a).await.err(), Some(Unanswered::Closed));
        let (mut a, mut b) = tokio::io::duplex(1024);
        b.write_all(b"HTTP/1.1 200").await.expect("write");
        drop(b);
        assert_eq!(read_head(&mut a).await.err(), Some(Unanswered::Unreadable));
    }
}
