//! Whether a Sentinel-managed master can keep the fleet's writes on both sides of a
//! partition, from its `INFO replication`.
//!
//! A master that accepts writes with no replica connected (`min-replicas-to-write 0`,
//! Redis' default) goes on taking claims when it is cut from its replicas, while the
//! sentinels on the other side promote one of them: two masters, and the members on each
//! side take the other side's origins once their leases and `after` have passed. With
//! `min-replicas-to-write` (and `min-replicas-max-lag`) set, the cut master refuses
//! writes (`NOREPLICAS`) once its replicas fall silent, and its members stop acting as
//! for any outage. Redis prints `min_slaves_good_slaves` in `INFO replication` only
//! when both are set; without it the backend is held down, unless
//! `fleet.redis_sentinel.allow_unreplicated_writes`.
//!
//! Checked at every health check (`backend.rs`), for Sentinel only: one Redis has no
//! second master to split into, and a Cluster's masters are not checked here.

use super::down::Down;
use super::memory::info_field;
use crate::telemetry::metrics::DownCause;

/// May the master whose `INFO replication` is `info` take the fleet's writes? `Err`
/// when it accepts writes with no replica and that is not `allowed`.
pub(super) fn replicated_writes(info: &str, allowed: bool) -> Result<(), Down> {
    if allowed || info_field(info, "min_slaves_good_slaves").is_some() {
        return Ok(());
    }
    Err(Down::new(
        DownCause::UnreplicatedWrites,
        "the Sentinel-managed master accepts writes with no replica connected \
         (min-replicas-to-write 0): cut from its replicas it keeps taking claims while the \
         sentinels promote another; set min-replicas-to-write 1 and min-replicas-max-lag \
         on every Redis the sentinels manage, or fleet.redis_sentinel.allow_unreplicated_writes",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An `INFO replication` answer, with `min_slaves_good_slaves` when `guarded`.
    fn info(guarded: bool) -> String {
        let guard = if guarded {
            "min_slaves_good_slaves:1\r\n"
        } else {
            ""
        };
        format!(
            "# Replication\r\nrole:master\r\nconnected_slaves:1\r\n{guard}master_repl_offset:0\r\n"
        )
    }

    #[test]
    fn a_master_that_writes_with_no_replica_is_refused_unless_allowed() {
        let refused = replicated_writes(&info(false), false).unwrap_err();
        assert_eq!(refused.cause, DownCause::UnreplicatedWrites);
        assert!(replicated_writes(&info(false), true).is_ok());
        assert!(replicated_writes(&info(true), false).is_ok());
    }
}
