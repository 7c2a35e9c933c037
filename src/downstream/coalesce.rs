//! A response head and the first body octets leave in one write.
//!
//! The client listeners run without Pingora's L4 write buffer: Pingora flushes a response
//! with a `Content-Length` only at its end, so a buffer would hold a partial body while
//! the origin stalls. Unbuffered, though, every response costs two sends — the head, then
//! the body — and on a keep-alive connection each send is a full trip through the TCP
//! stack and a wake-up of the client (measured: about 7 µs of a 38 µs request).
//!
//! [`Coalescer`] holds back exactly one write of each response: the first, which is its
//! head. The next write (the first body octets) goes out together with it in one `writev`
//! (one TLS record set inside a tunnel), and everything after that is written through as
//! it comes. A flush or shutdown sends the head at once, which is how Pingora ends a
//! response with no body, a `1xx`, or one without `Content-Length`. So at most one
//! response head ever waits, and only until its body's first octets arrive; body octets
//! never wait. [`Coalescer::arm`] arms it for the next response. It is the write half of
//! [`crate::downstream::client_stream::ClientStream`].
//!
//! Cost: one copy of each head (a few hundred octets), into a buffer the connection keeps.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::AsyncWrite;

/// A first write larger than this (never a response head in practice) is not held.
const HOLD_AT_MOST: usize = 16 * 1024;

/// The write side of a client stream whose first write of a response waits for the
/// second, so both leave together.
#[derive(Debug)]
pub struct Coalescer {
    /// The first write, until the second (or a flush) sends it.
    held: Vec<u8>,
    /// Whether the next write is the first (and so is held).
    first: bool,
}

impl Coalescer {
    /// A coalescer whose first write will be held.
    pub fn new() -> Coalescer {
        Coalescer {
            held: Vec::new(),
            first: true,
        }
    }

    /// The next write is a response's head again, and is held.
    pub fn arm(&mut self) {
        self.first = true;
    }

    /// What a shutdown must still send, taken (the next write is not held).
    pub fn take_held(&mut self) -> Vec<u8> {
        self.first = false;
        std::mem::take(&mut self.held)
    }

    /// Sends what is held (all of it, or `Pending`).
    pub fn poll_send_held<W: AsyncWrite + Unpin + ?Sized>(
        &mut self,
        inner: &mut W,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        self.first = false;
        while !self.held.is_empty() {
            let n = ready!(Pin::new(&mut *inner).poll_write(cx, &self.held))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.held.drain(..n);
        }
        Poll::Ready(Ok(()))
    }

    /// Writes `buf` through `inner`, holding it when it is a response's first write.
    pub fn poll_write<W: AsyncWrite + Unpin + ?Sized>(
        &mut self,
        inner: &mut W,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if std::mem::take(&mut self.first) && buf.len() <= HOLD_AT_MOST {
            self.held.extend_from_slice(buf);
            return Poll::Ready(Ok(buf.len()));
        }
        while !self.held.is_empty() {
            let parts = [IoSlice::new(&self.held), IoSlice::new(buf)];
            let n = ready!(Pin::new(&mut *inner).poll_write_vectored(cx, &parts))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            if n >= self.held.len() {
                let of_buf = n - self.held.len();
                self.held.clear();
                if of_buf > 0 {
                    return Poll::Ready(Ok(of_buf));
                }
            } else {
                self.held.drain(..n);
            }
        }
        Pin::new(&mut *inner).poll_write(cx, buf)
    }
}

impl Default for Coalescer {
    fn default() -> Self {
        Coalescer::new()
    }
}
