//! A tunnel's octets both ways, ended once it carries nothing.
//!
//! **Why.** A tunnel (a blind one, or one handed to its origin's owner) holds a client
//! slot here, and, handed over, one of this member's connections at the owner, for as
//! long as it is open: one that carries nothing would hold them for good.
//!
//! **How.** [`both_ways`] runs tokio's `copy_bidirectional` over the two streams, each
//! wrapped so that a read of at least one octet, either way, notes when it came; a
//! timer beside it ends the tunnel (both streams dropped, so closed) once nothing came
//! either way for `idle` (`limits.tunnel_idle_seconds`). A tunnel whose octets flow
//! lasts as long as its ends keep it open.
//!
//! **Costs and limits.** One clock read per read that returned octets, and one timer
//! per tunnel woken at most every `idle`; nothing per octet. An idle end is found within
//! `idle` and at most twice it.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// How the tunnel ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TunnelEnd {
    /// One end closed (or failed).
    Closed,
    /// Nothing came either way for the idle bound.
    Idle,
}

/// Copies `a`'s octets to `b` and `b`'s to `a` until either end closes or fails, or
/// nothing comes either way for `idle`.
pub async fn both_ways<A, B>(a: &mut A, b: &mut B, idle: Duration) -> TunnelEnd
where
    A: AsyncRead + AsyncWrite + Unpin + ?Sized,
    B: AsyncRead + AsyncWrite + Unpin + ?Sized,
{
    let start = Instant::now();
    let last = Arc::new(AtomicU64::new(0));
    let mut a = Watched {
        inner: a,
        start,
        last: last.clone(),
    };
    let mut b = Watched {
        inner: b,
        start,
        last: last.clone(),
    };
    let copying = tokio::io::copy_bidirectional(&mut a, &mut b);
    tokio::pin!(copying);
    let mut until = start + idle;
    loop {
        tokio::select! {
            _ = &mut copying => return TunnelEnd::Closed,
            () = tokio::time::sleep_until(until) => {
                let came = start + Duration::from_millis(last.load(Ordering::Relaxed));
                if came + idle <= Instant::now() {
                    return TunnelEnd::Idle;
                }
                until = came + idle;
            }
        }
    }
}

/// A stream whose reads note when octets came.
struct Watched<'a, S: ?Sized> {
    /// The stream.
    inner: &'a mut S,
    /// The tunnel's start: `last` counts from it.
    start: Instant,
    /// Milliseconds from `start` to the last read that returned octets, either way.
    last: Arc<AtomicU64>,
}

impl<S: AsyncRead + Unpin + ?Sized> AsyncRead for Watched<'_, S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let read = Pin::new(&mut *self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            let since = self.start.elapsed().as_millis();
            self.last
                .store(u64::try_from(since).unwrap_or(u64::MAX), Ordering::Relaxed);
        }
        read
    }
}

impl<S: AsyncWrite + Unpin + ?Sized> AsyncWrite for Watched<'_, S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut *self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut *self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut *self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test(start_paused = true)]
    async fn a_tunnel_ends_once_idle_and_not_while_octets_flow() {
        let (mut client, mut near) = tokio::io::duplex(64);
        let (mut far, mut origin) = tokio::io::duplex(64);
        let idle = Duration::from_secs(10);
        let tunnel = tokio::spawn(async move { both_ways(&mut near, &mut far, idle).await });
        // Octets every 6 s for 30 s: each keeps it open.
        for _ in 0..5 {
            tokio::time::sleep(Duration::from_secs(6)).await;
            client.write_all(b"x").await.expect("write");
            let mut got = [0u8; 1];
            origin.read_exact(&mut got).await.expect("relayed");
        }
        assert!(!tunnel.is_finished());
        tokio::time::sleep(Duration::from_secs(21)).await;
        assert_eq!(tunnel.await.expect("task"), TunnelEnd::Idle);
    }

    #[tokio::test(start_paused = true)]
    async fn a_tunnel_closed_by_an_end_is_closed() {
        let (client, mut near) = tokio::io::duplex(64);
        let (mut far, origin) = tokio::io::duplex(64);
        drop((client, origin));
        let ended = both_ways(&mut near, &mut far, Duration::from_secs(10)).await;
        assert_eq!(ended, TunnelEnd::Closed);
    }
}
