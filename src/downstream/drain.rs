//! The requests in progress at the front doors, and the drain a graceful stop waits
//! for before Pingora stops.
//!
//! Pingora stops a service by dropping its tasks once `grace_period_seconds` have
//! passed (`graceful_shutdown_timeout_seconds` only bounds blocking work): a request
//! still in progress then is cut, whatever it was doing. So a graceful stop (SIGTERM)
//! first drains ([`drain_until`]): from then on idle connections close, no connection
//! is kept alive past its request, HTTP/2 connections send their GOAWAY, `/readyz`
//! answers 503, and it waits until no request is in progress — at most `graceful_shutdown_timeout_seconds`,
//! by which every request still waiting was answered (`enforce::stop`) — before
//! Pingora stops the listeners. A request counts from
//! its head read to its answer's end ([`Serving`]): HTTP/1.1 (plain, inside a tunnel,
//! on the peer channel) and every HTTP/2 stream; a blind tunnel until its client has
//! its answer (the `200`, or a refusal), not while its bytes flow: that lasts as long
//! as its client keeps it (`connect/blind.rs`, `handover/tunnel.rs`).
//!
//! Costs: two atomic operations per request.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// Requests in progress in this process.
static IN_PROGRESS: AtomicUsize = AtomicUsize::new(0);

/// A graceful stop has begun draining.
static DRAINING: AtomicBool = AtomicBool::new(false);

/// Wakes the connections watching for the drain ([`began`]).
static BEGAN: Notify = Notify::const_new();

/// One request in progress, counted until dropped.
pub struct Serving(());

impl Serving {
    /// Counts one more request in progress.
    pub fn start() -> Serving {
        IN_PROGRESS.fetch_add(1, Ordering::AcqRel);
        Serving(())
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        IN_PROGRESS.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Whether the process is draining: a connection is then closed after its request.
pub fn draining() -> bool {
    DRAINING.load(Ordering::Acquire)
}

/// Begins draining: connections are no longer kept alive, and `/readyz` answers 503 (a
/// front checking it sends this instance nothing new).
pub fn begin() {
    DRAINING.store(true, Ordering::Release);
    BEGAN.notify_waiters();
}

/// Resolves once draining has begun (at once if it has): an idle connection then
/// closes, an HTTP/2 one sends its GOAWAY.
pub async fn began() {
    loop {
        // Registered before the flag is read, so a `begin` in between still wakes.
        let woken = BEGAN.notified();
        if draining() {
            return;
        }
        woken.await;
    }
}

/// Drains ([`begin`]), and resolves once no request is in progress, or at `deadline`.
/// Returns how many were still in progress.
pub async fn drain_until(deadline: Instant) -> usize {
    begin();
    loop {
        let left = IN_PROGRESS.load(Ordering::Acquire);
        if left == 0 || Instant::now() >= deadline {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
