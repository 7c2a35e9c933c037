//! A client that takes none of its answer ends the exchange on both legs.
//!
//! robotsgate keeps an origin's exchange running when its client goes away (see
//! `client_stream.rs` and `h2_stream.rs`): the answer is read and dropped, so the
//! turn ends with the origin's own end rather than early. Unbounded, that lets a client
//! hold an origin's turns for as long as `pacing.max_exchange_seconds`: two requests
//! for a never-ending page, never read, would lock every other crawler out of the
//! origin. So a client that has taken no octet of its answer for
//! `limits.unread_timeout_seconds` ends the exchange, as nginx's `send_timeout` does:
//!
//! * **Connected, not reading.** A write that took nothing for that long fails with
//!   [`ClientStalled`].
//! * **Gone** (reset, closed, the stream cancelled). Its answer is dropped for at most
//!   that long from the first octet dropped ([`Dropping`]): an answer that ends within
//!   it ends the turn at the origin's own end. A write after that fails with
//!   [`ClientStalled`].
//!
//! The failed write ends the exchange on both legs: Pingora closes the upstream
//! connection (or resets the HTTP/2 stream). The proxy counts it as cut by the client
//! (`cut_client`), and its turn is held as any cut exchange's is (see `enforce::turn`).
//!
//! Cost: a clock read per write dropped for a client that left; nothing otherwise.

use std::fmt;
use std::io;
use std::time::Duration;

use tokio::time::Instant;

/// Why a write to a client failed: it took no octet of its answer for
/// `limits.unread_timeout_seconds`. Carried inside the write's error, so that the proxy
/// can tell this cut from any other ([`is_stalled`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientStalled;

impl fmt::Display for ClientStalled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the client took no octet of its answer for limits.unread_timeout_seconds")
    }
}

impl std::error::Error for ClientStalled {}

/// The I/O error a write to a stalled client fails with.
pub fn stalled() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, ClientStalled)
}

/// Did `e` end an exchange because its client stalled (whether Pingora wrapped the I/O
/// error or a stream's own error)?
pub fn is_stalled(e: &pingora::Error) -> bool {
    let root = e.root_cause();
    root.downcast_ref::<ClientStalled>().is_some()
        || root
            .downcast_ref::<io::Error>()
            .and_then(|io| io.get_ref())
            .is_some_and(|inner| inner.downcast_ref::<ClientStalled>().is_some())
}

/// The answer of a client that has gone, dropped for at most `unread` from the first
/// octet dropped.
#[derive(Debug)]
pub struct Dropping {
    /// `limits.unread_timeout_seconds`.
    unread: Duration,
    /// When the first octet was dropped.
    since: Option<Instant>,
}

impl Dropping {
    /// Drops for at most `unread`.
    pub fn new(unread: Duration) -> Dropping {
        Dropping {
            unread,
            since: None,
        }
    }

    /// One more write to drop: `Ok` while within `unread` of the first, else the error
    /// that ends the exchange.
    pub fn drop_one(&mut self) -> io::Result<()> {
        let since = *self.since.get_or_insert_with(Instant::now);
        if since.elapsed() < self.unread {
            Ok(())
        } else {
            Err(stalled())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stall_is_told_through_pingoras_wrapping() {
        let wrapped = pingora::Error::because(pingora::ErrorType::WriteError, "writing", stalled());
        assert!(is_stalled(&wrapped));
        let direct =
            pingora::Error::because(pingora::ErrorType::WriteTimedout, "writing", ClientStalled);
        assert!(is_stalled(&direct));
        let other = pingora::Error::because(
            pingora::ErrorType::WriteError,
            "writing",
            io::Error::from(io::ErrorKind::BrokenPipe),
        );
        assert!(!is_stalled(&other));
    }

    #[tokio::test(start_paused = true)]
    async fn a_gone_clients_answer_is_dropped_for_the_unread_time_from_the_first_drop() {
        let mut dropping = Dropping::new(Duration::from_secs(10));
        tokio::time::advance(Duration::from_secs(30)).await;
        assert!(dropping.drop_one().is_ok(), "counted from the first drop");
        tokio::time::advance(Duration::from_secs(9)).await;
        assert!(dropping.drop_one().is_ok());
        tokio::time::advance(Duration::from_secs(1)).await;
        let e = dropping.drop_one().expect_err("past the unread time");
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
    }
}
