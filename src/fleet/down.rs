//! Why the fleet backend is unavailable: a [`DownCause`] (the `cause` label of
//! `robotsgate_fleet_backend_unavailable`, which alert rules match) and what Redis or the
//! connection said (for `/readyz` and the log).

use std::fmt;

use crate::telemetry::metrics::DownCause;

/// Why the fleet backend is down: its cause, and the words for people.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Down {
    /// What kind of outage.
    pub cause: DownCause,
    /// What happened, for the log and `/readyz`.
    pub detail: String,
}

impl Down {
    /// An outage of kind `cause`.
    pub fn new(cause: DownCause, detail: impl Into<String>) -> Down {
        Down {
            cause,
            detail: detail.into(),
        }
    }

    /// `what` took longer than the command timeout.
    pub fn timed_out(what: &str) -> Down {
        Down::new(DownCause::Timeout, format!("{what} timed out"))
    }

    /// What a Redis error says about the backend.
    pub fn of(e: &redis::RedisError) -> Down {
        let cause = match e.code() {
            Some("OOM") => DownCause::OutOfMemory,
            Some("READONLY") => DownCause::ReadOnly,
            _ if e.is_timeout() => DownCause::Timeout,
            _ if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() => {
                DownCause::Unreachable
            }
            _ => DownCause::Error,
        };
        let detail = match cause {
            DownCause::OutOfMemory => format!("Redis out of memory: {e}"),
            _ => e.to_string(),
        };
        Down { cause, detail }
    }
}

impl fmt::Display for Down {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.detail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_errors_are_told_apart() {
        let io = redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "refused",
        ));
        assert_eq!(Down::of(&io).cause, DownCause::Unreachable);
        assert_eq!(Down::timed_out("TIME").cause, DownCause::Timeout);
        assert_eq!(Down::timed_out("TIME").to_string(), "TIME timed out");
    }
}
