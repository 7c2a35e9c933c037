//! The client's side of a connection, as every exchange on it sees it.
//!
//! robotsgate's promise is kept at the origin: a pacing turn lasts as long as the
//! origin's exchange, so nothing the client does may end that exchange early. Pingora's
//! HTTP/1 session aborts the whole exchange — upstream connection included — when the
//! client's side fails: a write error after the client hung up, a read error (reset), or
//! octets read while a response is pending (a client that sends its next request early,
//! as python-requests does after taking a `103 Early Hints` for its answer). Each abort
//! would free the turn while the origin is still answering.
//!
//! [`ClientStream`] wraps the client stream for all of a connection's Pingora sessions
//! and keeps the client's moves from reaching the exchange:
//!
//! * **The request is read, then no further.** The front tells it how many octets of the
//!   current request are still to come ([`ClientStream::expect_request`]); once they
//!   are read, a read is Pingora's wait for the client to hang up. Octets that arrive
//!   then are the next request: up to [`HOLD_AT_MOST`] are kept for the front
//!   ([`ClientStream::end_exchange`]) and the read stays pending, so the pending exchange
//!   runs to its end and the next request is answered after it, in order (RFC 9112
//!   §9.3.2). The end of the stream is passed on: while queued for pacing it makes the
//!   request give up its place; once the exchange has started the proxy has told Pingora
//!   to tolerate it (`set_abort_on_close(false)`). A chunked request's length is unknown
//!   here, so its reads pass through.
//! * **A client that left is a sink, for a while.** A read or write error marks the
//!   client gone: reads then end the stream, writes are accepted and dropped, so an
//!   answer that ends soon ends the turn with the origin's own end. Past
//!   `limits.unread_timeout_seconds` from the first octet dropped, a write fails and
//!   the exchange ends on both legs (`unread.rs`).
//! * **A client that stops reading ends the exchange.** A write that takes no octet
//!   for `limits.unread_timeout_seconds` fails the same way: an unread answer holds the
//!   origin's turn no longer than that (and a cut's hold), and no octet is buffered
//!   for it.
//! * **A response head and its first body octets leave together** ([`Coalescer`]).
//!
//! Cost: one branch per read and write; a request's remaining length is a counter.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use bytes::BytesMut;
use pingora::protocols::raw_connect::ProxyDigest;
use pingora::protocols::tls::{SslDigest, TlsRef};
use pingora::protocols::{
    GetProxyDigest, GetSocketDigest, GetTimingDigest, Peek, Shutdown, SocketDigest, Ssl, Stream,
    TimingDigest, UniqueID, UniqueIDType, ALPN,
};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};

use crate::downstream::coalesce::Coalescer;
use crate::downstream::unread::{stalled, Dropping};
use crate::telemetry::metrics;

/// The most octets of a next request read (and kept) while an exchange is pending; the
/// rest waits in the socket.
pub const HOLD_AT_MOST: usize = 4096;

/// A client stream that no client move can use to end a pending exchange early.
#[derive(Debug)]
pub struct ClientStream {
    /// The client's connection.
    inner: Stream,
    /// Holds a response head back until its first body octets, to send both at once.
    coalescer: Coalescer,
    /// Octets of the current request still to be read from the socket (`None`: unknown,
    /// a chunked body, or between requests).
    request_left: Option<u64>,
    /// The next request's first octets, read while the current exchange was pending.
    next_request: BytesMut,
    /// The client's end failed (reset, broken pipe) or stalled: reads end, writes are
    /// dropped for a while ([`Dropping`]) or fail.
    gone: bool,
    /// The client took no octet for `unread`: every write fails, ending the exchange.
    stalled_out: bool,
    /// How long writes to a client that left are still dropped.
    dropping: Dropping,
    /// How long a write may take no octet before the client counts as stalled.
    unread: Duration,
    /// Since when the pending write has taken nothing (armed on its first `Pending`).
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl ClientStream {
    /// Wraps `inner`, between requests; a client taking no octet for `unread` is gone.
    pub fn new(inner: Stream, unread: Duration) -> ClientStream {
        ClientStream {
            inner,
            coalescer: Coalescer::new(),
            request_left: None,
            next_request: BytesMut::new(),
            gone: false,
            stalled_out: false,
            dropping: Dropping::new(unread),
            unread,
            stalled: None,
        }
    }

    /// A write's outcome: progress disarms the stall timer, an error marks the client
    /// gone (a sink, for a while), and a write still pending once the client has taken
    /// nothing for `unread` fails ([`stalled`]). `Pending` only while the client may
    /// still read.
    fn settle_write<T>(
        &mut self,
        cx: &mut Context<'_>,
        written: Poll<io::Result<T>>,
    ) -> Poll<io::Result<()>> {
        match written {
            // Tested first: dropping even an empty timer is a call, on every write.
            Poll::Ready(Ok(_)) if self.stalled.is_some() => self.stalled = None,
            Poll::Ready(Ok(_)) => {}
            Poll::Ready(Err(_)) => self.left(),
            Poll::Pending => {
                let unread = self.unread;
                let timer = self
                    .stalled
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(unread)));
                if timer.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.left();
                self.stalled_out = true;
                return Poll::Ready(Err(stalled()));
            }
        }
        Poll::Ready(Ok(()))
    }

    /// A write to a client that is gone: dropped while [`Dropping`] allows, then (and
    /// for a client that stalled, at once) the error that ends the exchange.
    fn drop_write(&mut self) -> io::Result<()> {
        if self.stalled_out {
            return Err(stalled());
        }
        self.dropping
            .drop_one()
            .inspect_err(|_| self.stalled_out = true)
    }

    /// The client stream again, once whatever is still held has been sent.
    pub async fn into_inner(mut self) -> io::Result<Stream> {
        self.flush().await?;
        Ok(self.inner)
    }

    /// A request is handed to Pingora: `left` octets of it (its body's rest) are still
    /// in the socket, or `None` when that is unknown (chunked).
    pub fn expect_request(&mut self, left: Option<u64>) {
        self.request_left = left;
    }

    /// Ends an exchange: sends whatever is still held, arms the next response's head,
    /// and gives back the next request's octets read meanwhile. An error when the
    /// client is gone.
    pub async fn end_exchange(&mut self) -> io::Result<BytesMut> {
        self.flush().await?;
        if self.gone {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        self.coalescer.arm();
        self.request_left = None;
        Ok(std::mem::take(&mut self.next_request))
    }

    /// A failed client end: counted once, then a sink.
    fn left(&mut self) {
        if !self.gone {
            self.gone = true;
            metrics::record_client_left();
        }
    }

    /// Reads from the client, an error being the end of the stream.
    fn poll_read_inner(&mut self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<()> {
        if ready!(Pin::new(&mut self.inner).poll_read(cx, buf)).is_err() {
            self.left();
        }
        Poll::Ready(())
    }

    /// The request has been read: what arrives is the next request, kept and not
    /// handed over (the read stays pending), or the end of the stream.
    fn poll_hold_next(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if !self.next_request.is_empty() {
            return Poll::Pending;
        }
        // Uninitialised: this runs on every request, and zeroing 4 KiB each time is waste.
        let mut room = [std::mem::MaybeUninit::<u8>::uninit(); HOLD_AT_MOST];
        let mut probe = ReadBuf::uninit(&mut room);
        ready!(self.poll_read_inner(cx, &mut probe));
        if probe.filled().is_empty() {
            return Poll::Ready(());
        }
        self.next_request.extend_from_slice(probe.filled());
        // Not woken again: the exchange ends by its other branches.
        Poll::Pending
    }

    /// Sends what is held, then flushes or (`shutdown`) shuts the client's end down; a
    /// failure makes the stream a sink, a stall an error.
    fn poll_finish(&mut self, cx: &mut Context<'_>, shutdown: bool) -> Poll<io::Result<()>> {
        if !self.gone {
            let sent = self.coalescer.poll_send_held(&mut self.inner, cx);
            ready!(self.settle_write(cx, sent))?;
        }
        if !self.gone {
            let inner = Pin::new(&mut self.inner);
            let done = if shutdown {
                inner.poll_shutdown(cx)
            } else {
                inner.poll_flush(cx)
            };
            ready!(self.settle_write(cx, done))?;
        }
        if self.stalled_out {
            return Poll::Ready(Err(stalled()));
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for ClientStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.gone {
            return Poll::Ready(this.drop_write().map(|()| buf.len()));
        }
        let written = this.coalescer.poll_write(&mut this.inner, cx, buf);
        // What the socket took: a partial write is the caller's to continue.
        let took = match &written {
            Poll::Ready(Ok(n)) => Some(*n),
            _ => None,
        };
        ready!(this.settle_write(cx, written))?;
        match took {
            Some(n) => Poll::Ready(Ok(n)),
            // The write failed: the client left, and this write is the first dropped.
            None => Poll::Ready(this.drop_write().map(|()| buf.len())),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().poll_finish(cx, false)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().poll_finish(cx, true)
    }
}

impl AsyncRead for ClientStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.gone {
            return Poll::Ready(Ok(()));
        }
        match this.request_left {
            None => ready!(this.poll_read_inner(cx, buf)),
            Some(0) => ready!(this.poll_hold_next(cx)),
            Some(left) => {
                let read = match usize::try_from(left) {
                    // The request ends within this read: no further than its end.
                    Ok(room) if room < buf.remaining() => {
                        let mut part = ReadBuf::new(buf.initialize_unfilled_to(room));
                        ready!(this.poll_read_inner(cx, &mut part));
                        let read = part.filled().len();
                        buf.advance(read);
                        read
                    }
                    _ => {
                        let before = buf.filled().len();
                        ready!(this.poll_read_inner(cx, buf));
                        buf.filled().len() - before
                    }
                };
                this.request_left = Some(left - read as u64);
            }
        }
        Poll::Ready(Ok(()))
    }
}

// Everything else is the client stream's own.

#[async_trait]
impl Shutdown for ClientStream {
    async fn shutdown(&mut self) {
        let held = self.coalescer.take_held();
        if !self.gone && self.inner.write_all(&held).await.is_ok() {
            Shutdown::shutdown(&mut *self.inner).await;
        }
    }
}

impl UniqueID for ClientStream {
    fn id(&self) -> UniqueIDType {
        self.inner.id()
    }
}

impl Ssl for ClientStream {
    fn get_ssl(&self) -> Option<&TlsRef> {
        self.inner.get_ssl()
    }

    fn get_ssl_digest(&self) -> Option<Arc<SslDigest>> {
        self.inner.get_ssl_digest()
    }

    fn selected_alpn_proto(&self) -> Option<ALPN> {
        self.inner.selected_alpn_proto()
    }
}

impl GetTimingDigest for ClientStream {
    fn get_timing_digest(&self) -> Vec<Option<TimingDigest>> {
        self.inner.get_timing_digest()
    }

    fn get_read_pending_time(&self) -> Duration {
        self.inner.get_read_pending_time()
    }

    fn get_write_pending_time(&self) -> Duration {
        self.inner.get_write_pending_time()
    }
}

impl GetProxyDigest for ClientStream {
    fn get_proxy_digest(&self) -> Option<Arc<ProxyDigest>> {
        self.inner.get_proxy_digest()
    }
}

impl GetSocketDigest for ClientStream {
    fn get_socket_digest(&self) -> Option<Arc<SocketDigest>> {
        self.inner.get_socket_digest()
    }
}

#[async_trait]
impl Peek for ClientStream {
    async fn try_peek(&mut self, buf: &mut [u8]) -> io::Result<bool> {
        self.inner.try_peek(buf).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    async fn pair() -> (ClientStream, tokio::net::TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let l4: pingora::protocols::l4::stream::Stream = server.into();
        (
            ClientStream::new(Box::new(l4), Duration::from_secs(10)),
            client,
        )
    }

    #[tokio::test]
    async fn a_request_is_read_to_its_end_and_the_next_one_is_held() {
        let (mut stream, mut client) = pair().await;
        stream.expect_request(Some(3));
        client.write_all(b"abcGET /next").await.unwrap();
        let mut buf = [0u8; 16];
        let mut got = Vec::new();
        while got.len() < 3 {
            let n = stream.read(&mut buf).await.unwrap();
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(got, b"abc", "no more than the request");
        let probe = tokio::time::timeout(Duration::from_millis(300), stream.read(&mut buf)).await;
        assert!(probe.is_err(), "the next request stays pending: {probe:?}");
        let next = stream.end_exchange().await.unwrap();
        assert!(
            b"GET /next".starts_with(&next) && !next.is_empty(),
            "{next:?}"
        );
    }

    #[tokio::test]
    async fn a_client_that_stops_reading_fails_the_write_after_the_unread_time() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let l4: pingora::protocols::l4::stream::Stream = server.into();
        let mut stream = ClientStream::new(Box::new(l4), Duration::from_millis(200));
        stream.expect_request(Some(0));
        let block = vec![b'x'; 1 << 20];
        let failed = loop {
            if let Err(e) = stream.write(&block).await {
                break e;
            }
        };
        assert!(
            crate::downstream::unread::is_stalled(&pingora::Error::because(
                pingora::ErrorType::WriteError,
                "write",
                failed
            )),
            "the write fails as a stall"
        );
        assert!(
            stream.write(b"more").await.is_err(),
            "and every write after"
        );
        drop(client);
    }

    #[tokio::test]
    async fn a_client_that_left_is_a_sink() {
        let (mut stream, client) = pair().await;
        #[allow(deprecated)]
        client.set_linger(Some(Duration::ZERO)).unwrap();
        drop(client);
        stream.expect_request(Some(0));
        let mut buf = [0u8; 4];
        let n = stream.read(&mut buf).await.unwrap();
        assert_eq!(n, 0, "a reset reads as the end of the stream");
        for _ in 0..64 {
            let written = stream.write(&[b'x'; 65536]).await.unwrap();
            assert_eq!(written, 65536, "writes are accepted and dropped");
        }
        stream.flush().await.unwrap();
        assert!(stream.end_exchange().await.is_err(), "the front learns it");
    }
}
