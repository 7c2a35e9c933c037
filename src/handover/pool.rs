//! Idle connections to owners' peer channels, kept for the relay's next request.
//!
//! **How.** One stack per owner (its peer address), the most recently used on top:
//! [`Pool::take`] pops the newest connection idle no longer than the pool's `keep`
//! (any older one under it is closed), [`Pool::give`] pushes one back unless that
//! owner already has [`MOST_IDLE`] waiting. The relay gives back only a connection whose
//! last answer ended by its framing (`relay::reusable`), and takes only one still quiet
//! (nothing to read, not closed: unsolicited octets would be the next answer).
//!
//! **Why not Pingora's pool.** Pingora's connection pool hashes the peer (its client
//! certificate's serial formatted as text, each time), checks the socket's peer address
//! with a system call on every take, and spawns a task with a timer to watch each
//! released connection: together a tenth of a relaying member's CPU per request
//! (`bench/fleet_bench.py`). Here nothing watches an idle connection: taking one polls
//! it once ([`quiet`]), so one the runtime saw the owner close or write to is passed
//! over; one closed too recently for that is found when the owner's answer ends before
//! its first octet, and the relay sends the request once more on a new connection (the
//! owner never read it). Connections are kept for less than the owners' idle timeout
//! (half of it), so an owner rarely closes one first.
//!
//! **Costs and limits.** A lock and a hash lookup per take and per give, and a poll per
//! take; no system call unless the connection became readable, no allocation once an
//! owner's stack exists. At most [`MOST_IDLE`] idle connections per
//! owner; an owner whose connections all expired loses its stack at the next give.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pingora::protocols::Stream;
use tokio::io::AsyncRead;

/// The most idle connections kept for one owner: those past it are closed.
pub const MOST_IDLE: usize = 64;

/// Idle mutual-TLS connections to owners, by peer address.
pub struct Pool {
    /// Each owner's idle connections, the newest last.
    idle: Mutex<HashMap<String, Vec<Idle>>>,
    /// How long a connection may stay idle and still be used.
    keep: Duration,
}

/// A connection waiting for the relay's next request to its owner, and since when.
struct Idle {
    /// The connection.
    stream: Stream,
    /// When its last answer ended.
    since: Instant,
}

impl Pool {
    /// An empty pool whose connections are used after at most `keep` idle.
    pub fn new(keep: Duration) -> Pool {
        Pool {
            idle: Mutex::new(HashMap::new()),
            keep,
        }
    }

    /// How long a connection may stay idle and still be used.
    pub fn keep(&self) -> Duration {
        self.keep
    }

    /// The newest idle connection to the owner at `peer` that idled no longer than the
    /// pool keeps them and is still quiet (older ones, and any the owner closed or
    /// wrote to while idle, are closed).
    pub fn take(&self, peer: &str) -> Option<Stream> {
        loop {
            let mut stream = self.take_at(peer, Instant::now())?;
            if quiet(&mut stream) {
                return Some(stream);
            }
            log::debug!(
                "a kept connection to {peer} was closed or written to while idle: not used"
            );
        }
    }

    /// Keeps `stream`, whose last answer just ended, for the owner at `peer`'s next
    /// request (closes it when that owner has [`MOST_IDLE`] waiting already).
    pub fn give(&self, peer: &str, stream: Stream) {
        self.give_at(peer, stream, Instant::now());
    }

    /// [`Pool::take`] at `now`.
    fn take_at(&self, peer: &str, now: Instant) -> Option<Stream> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let stack = idle.get_mut(peer)?;
        let newest = stack.pop()?;
        if now.saturating_duration_since(newest.since) <= self.keep {
            return Some(newest.stream);
        }
        // The newest is too old: all under it are older.
        stack.clear();
        None
    }

    /// [`Pool::give`] at `now`.
    fn give_at(&self, peer: &str, stream: Stream, now: Instant) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let idle_one = Idle { stream, since: now };
        // The usual case, an owner's stack already there: one lookup, nothing allocated.
        if let Some(stack) = idle.get_mut(peer) {
            if stack.len() < MOST_IDLE {
                stack.push(idle_one);
            }
            return;
        }
        // A new owner: forget those whose connections all expired.
        idle.retain(|_, stack| {
            stack
                .last()
                .is_some_and(|i| now.saturating_duration_since(i.since) <= self.keep)
        });
        idle.insert(peer.to_string(), vec![idle_one]);
    }
}

/// Whether an idle connection is as its last answer left it: nothing to read, not
/// closed. Unsolicited octets from the owner would otherwise be read as the next
/// request's answer. One poll with a waker that does nothing: a connection the runtime
/// has not seen become readable answers at once, without a system call.
fn quiet(stream: &mut Stream) -> bool {
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    let mut octet = [0u8; 1];
    let mut buf = tokio::io::ReadBuf::new(&mut octet);
    let polled = std::pin::Pin::new(stream).poll_read(&mut context, &mut buf);
    polled.is_pending()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The other ends of the test's connections, kept open and silent.
    type Ends = Vec<tokio::io::DuplexStream>;

    /// A connection whose other end `ends` keeps open and silent.
    fn stream(ends: &mut Ends) -> Stream {
        let (ours, theirs) = tokio::io::duplex(16);
        ends.push(theirs);
        Box::new(ours)
    }

    #[test]
    fn a_connection_the_owner_closed_or_wrote_to_while_idle_is_not_taken() {
        use tokio::io::AsyncWriteExt;
        let pool = Pool::new(Duration::from_secs(60));
        let mut ends = Ends::new();
        let quiet_one = stream(&mut ends);
        let (closed, theirs) = tokio::io::duplex(16);
        drop(theirs);
        let (written, mut theirs) = tokio::io::duplex(16);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        runtime
            .block_on(theirs.write_all(b"HTTP/1.1 2"))
            .expect("write");
        pool.give("127.0.0.1:1", quiet_one);
        pool.give("127.0.0.1:1", Box::new(closed));
        pool.give("127.0.0.1:1", Box::new(written));
        // The two newest are passed over and closed; the quiet one is taken.
        assert!(pool.take("127.0.0.1:1").is_some());
        assert!(pool.take("127.0.0.1:1").is_none());
    }

    #[test]
    fn the_newest_connection_is_taken_first_and_each_only_once() {
        let mut ends = Ends::new();
        let pool = Pool::new(Duration::from_secs(60));
        assert!(pool.take("127.0.0.1:1").is_none());
        pool.give("127.0.0.1:1", stream(&mut ends));
        pool.give("127.0.0.1:1", stream(&mut ends));
        assert!(pool.take("127.0.0.1:2").is_none(), "another owner's");
        assert!(pool.take("127.0.0.1:1").is_some());
        assert!(pool.take("127.0.0.1:1").is_some());
        assert!(pool.take("127.0.0.1:1").is_none());
    }

    #[test]
    fn a_connection_idle_too_long_is_closed_not_used() {
        let mut ends = Ends::new();
        let keep = Duration::from_secs(30);
        let pool = Pool::new(keep);
        let then = Instant::now();
        pool.give_at("127.0.0.1:1", stream(&mut ends), then);
        pool.give_at("127.0.0.1:1", stream(&mut ends), then);
        assert!(
            pool.take_at("127.0.0.1:1", then + keep).is_some(),
            "just in time"
        );
        let late = then + keep + Duration::from_millis(1);
        assert!(pool.take_at("127.0.0.1:1", late).is_none());
        // Its owner's stack goes when another owner's connection comes.
        pool.give_at("127.0.0.1:1", stream(&mut ends), then);
        pool.give_at("127.0.0.1:2", stream(&mut ends), late);
        let idle = pool.idle.lock().expect("lock");
        assert!(!idle.contains_key("127.0.0.1:1"));
    }

    #[test]
    fn an_owner_keeps_at_most_the_limit() {
        let mut ends = Ends::new();
        let pool = Pool::new(Duration::from_secs(60));
        for _ in 0..MOST_IDLE + 5 {
            pool.give("127.0.0.1:1", stream(&mut ends));
        }
        let taken = std::iter::from_fn(|| pool.take("127.0.0.1:1")).count();
        assert_eq!(taken, MOST_IDLE);
    }
}
