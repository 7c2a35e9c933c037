//! Why the fleet backend is unavailable: a [`Cause`] (the `cause` label of
//! `robotsgate_fleet_backend_unavailable`, which alert rules match) and what Redis or the
//! connection said (for `/readyz` and the log).

use std::fmt;

use crate::telemetry::metrics;

/// What kind of failure took the fleet backend down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// No connection made yet (at start).
    Connecting,
    /// The connection failed or dropped.
    Unreachable,
    /// A command or the connection took longer than `fleet.command_timeout_seconds`.
    Timeout,
    /// Redis is at `maxmemory` (its `INFO memory`, or an `OOM` answer).
    OutOfMemory,
    /// Redis' `maxmemory-policy` may evict the schedules.
    EvictionPolicy,
    /// Redis answers `READONLY` (a replica, or a failover in progress).
    ReadOnly,
    /// Any other error answer.
    Error,
}

impl Cause {
    /// Every cause, in the order of the metric's handles.
    pub const ALL: [Cause; 7] = [
        Cause::Connecting,
        Cause::Unreachable,
        Cause::Timeout,
        Cause::OutOfMemory,
        Cause::EvictionPolicy,
        Cause::ReadOnly,
        Cause::Error,
    ];

    /// Its label.
    pub fn label(self) -> &'static str {
        match self {
            Cause::Connecting => "connecting",
            Cause::Unreachable => "unreachable",
            Cause::Timeout => "timeout",
            Cause::OutOfMemory => "out_of_memory",
            Cause::EvictionPolicy => "eviction_policy",
            Cause::ReadOnly => "read_only",
            Cause::Error => "error",
        }
    }
}

/// Why the fleet backend is down: its cause, and the words for people.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Down {
    pub cause: Cause,
    pub detail: String,
}

impl Down {
    pub fn new(cause: Cause, detail: impl Into<String>) -> Down {
        Down {
            cause,
            detail: detail.into(),
        }
    }

    /// `what` took longer than the command timeout.
    pub fn timed_out(what: &str) -> Down {
        Down::new(Cause::Timeout, format!("{what} timed out"))
    }

    /// What a Redis error says about the backend.
    pub fn of(e: &redis::RedisError) -> Down {
        let cause = match e.code() {
            Some("OOM") => Cause::OutOfMemory,
            Some("READONLY") => Cause::ReadOnly,
            _ if e.is_timeout() => Cause::Timeout,
            _ if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() => {
                Cause::Unreachable
            }
            _ => Cause::Error,
        };
        let detail = match cause {
            Cause::OutOfMemory => format!("Redis out of memory: {e}"),
            _ => e.to_string(),
        };
        Down { cause, detail }
    }

    /// Shows this cause on the metric (one label at 1, the others at 0).
    pub(super) fn publish(&self) {
        metrics::set_fleet_backend_unavailable(
            Some(self.cause.label()),
            Cause::ALL.map(Cause::label),
        );
    }

    /// Clears the metric: the backend is up.
    pub(super) fn publish_up() {
        metrics::set_fleet_backend_unavailable(None, Cause::ALL.map(Cause::label));
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
        assert_eq!(Down::of(&io).cause, Cause::Unreachable);
        assert_eq!(Down::timed_out("TIME").cause, Cause::Timeout);
        assert_eq!(Down::timed_out("TIME").to_string(), "TIME timed out");
    }
}
