//! Why pacing refused a request, and when to come back.

use std::time::Duration;

use tokio::time::Instant;

/// Why a request got no turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TurnRefusal {
    /// `max_queue` requests wait already.
    QueueFull,
    /// The wait would pass `max_wait_seconds`.
    WaitTooLong,
    /// This instance stops before the turn comes (a graceful stop's deadline).
    Stopping,
}

/// A request refused by pacing: why, when to come back, and whether the origin's own
/// 429/503 is what slowed the schedule down.
#[derive(Clone, Debug, PartialEq)]
pub struct Refused {
    /// Why no turn was given.
    pub reason: TurnRefusal,
    /// When to come back (`Retry-After`).
    pub retry_after: Duration,
    /// Remaining pause the origin asked for (or backoff in force), if any.
    pub backed_off_for: Option<Duration>,
}

impl Refused {
    /// A request still waiting when a graceful stop must answer it: come back in a
    /// second (another instance, or this one restarted, will pace it).
    pub fn stopping() -> Refused {
        Refused {
            reason: TurnRefusal::Stopping,
            retry_after: Duration::from_secs(1),
            backed_off_for: None,
        }
    }

    /// A wait that would end at `at`, past the request's deadline (asked at `now`).
    pub(super) fn comes_at(at: Instant, now: Instant, backed_off_for: Option<Duration>) -> Refused {
        Refused {
            reason: TurnRefusal::WaitTooLong,
            retry_after: at
                .saturating_duration_since(now)
                .max(Duration::from_secs(1)),
            backed_off_for,
        }
    }
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.reason {
            TurnRefusal::QueueFull => f.write_str("pacing queue full")?,
            TurnRefusal::Stopping => f.write_str("this instance stops before the turn comes")?,
            TurnRefusal::WaitTooLong => write!(
                f,
                "pacing wait of {:.1} s would exceed the limit",
                self.retry_after.as_secs_f64()
            )?,
        }
        if let Some(backoff) = self.backed_off_for {
            write!(
                f,
                " (origin asked to back off for {:.1} s)",
                backoff.as_secs_f64()
            )?;
        }
        Ok(())
    }
}
