//! A graceful stop's deadline for the requests still waiting ([`Stop`]).
//!
//! A stop (SIGTERM) drains for at most `graceful_shutdown_timeout_seconds`, after which
//! Pingora drops what is still in progress: a client's connection then closes with no
//! answer. An upgrade's old process (SIGQUIT) is dropped the same way, Pingora's 5 s and
//! `grace_period_seconds` after it hands its listeners over, which is after the signal.
//! So every request accepted before is answered within that bound of the signal: one
//! waiting for its turn here is refused (503, `reason=stopping`, `Retry-After: 1`)
//! [`ANSWER_MARGIN`] before it (a turn that is there when the bound has passed is
//! taken), and one handed to an owner (the front's relay, the proxy's hand-over, a
//! tunnel) waits for the owner's answer no longer than that: one handed over after the
//! stop began by its bound ([`Stop::bound`], through `Enforcer::owner_answers_within`),
//! one handed over before by [`Stop::due`] (`Enforcer::stop_due`: the relay's and the
//! tunnel's waits end with it, the proxy pass's connection is shut down, `handover/`),
//! then it is answered 503 as an owner silent past its bound is, never sent again. A
//! request already at its origin ends by its own timeouts, which the drain bounds as
//! before. The drain begins once the leave ended, so no sooner than this deadline.
//!
//! Costs: one `watch` read per bound asked; one more branch in each turn's wait.

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

/// How long before the stop's deadline a waiting request is answered: time to write
/// its answer before Pingora drops the connection.
pub const ANSWER_MARGIN: Duration = Duration::from_millis(500);

/// Whether, and by when, this process stops.
pub(crate) struct Stop {
    /// The deadline once a stop began.
    by: watch::Sender<Option<Instant>>,
}

impl Stop {
    /// No stop yet.
    pub(crate) fn new() -> Stop {
        Stop {
            by: watch::Sender::new(None),
        }
    }

    /// The stop began: every request still waiting is answered before `by`.
    pub(crate) fn until(&self, by: Instant) {
        self.by.send_replace(Some(by));
    }

    /// `within`, or what is left before waiting requests must be answered, when less.
    pub(crate) fn bound(&self, within: Duration) -> Duration {
        match *self.by.borrow() {
            Some(by) => within.min(answer_at(by).saturating_duration_since(Instant::now())),
            None => within,
        }
    }

    /// Must requests still waiting be answered now?
    pub(crate) fn is_due(&self) -> bool {
        self.by
            .borrow()
            .is_some_and(|by| Instant::now() >= answer_at(by))
    }

    /// Resolves when requests still waiting must be answered (never, without a stop).
    pub(crate) async fn due(&self) {
        let mut by = self.by.subscribe();
        // Copied out: the watch is not borrowed across the sleep.
        let at = match by.wait_for(Option::is_some).await {
            Ok(set) => *set,
            Err(_) => None,
        };
        match at {
            Some(at) => tokio::time::sleep_until(answer_at(at)).await,
            None => std::future::pending().await,
        }
    }
}

/// When a stop due at `by` answers what is still waiting.
fn answer_at(by: Instant) -> Instant {
    by.checked_sub(ANSWER_MARGIN).unwrap_or(by)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn bounds_shrink_and_waits_end_only_once_a_stop_began() {
        let stop = Stop::new();
        let hour = Duration::from_secs(3600);
        assert_eq!(stop.bound(hour), hour);
        assert!(!stop.is_due());
        let waiting = tokio::time::timeout(hour, stop.due()).await;
        assert!(waiting.is_err(), "no stop, no end");
        let began = Instant::now();
        stop.until(began + Duration::from_secs(10));
        assert_eq!(stop.bound(hour), Duration::from_millis(9500));
        assert_eq!(stop.bound(Duration::from_secs(2)), Duration::from_secs(2));
        assert!(!stop.is_due());
        stop.due().await;
        assert_eq!(began.elapsed(), Duration::from_millis(9500));
        assert_eq!(stop.bound(hour), Duration::ZERO);
        assert!(stop.is_due());
    }
}
