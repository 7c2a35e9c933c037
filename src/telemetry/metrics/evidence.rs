//! What the evidence chain did: records written, and records that could not be.

use std::sync::LazyLock;

use prometheus::IntCounter;

/// `robotsgate_evidence_records_total`.
static EVIDENCE_RECORDS: LazyLock<IntCounter> = LazyLock::new(|| {
    prometheus::register_int_counter!(
        "robotsgate_evidence_records_total",
        "Evidence records written to this process's chain (decisions, their outcomes, robots.txt fetches), with evidence.dir set."
    )
    .expect("metric registers once")
});

/// `robotsgate_evidence_failures_total`.
static EVIDENCE_FAILURES: LazyLock<IntCounter> = LazyLock::new(|| {
    prometheus::register_int_counter!(
        "robotsgate_evidence_failures_total",
        "Evidence records that could not be written (a full or unwritable disk, or evidence.max_pending_bytes waiting): their requests were refused (evidence.on_failure: refuse) or sent unrecorded (continue)."
    )
    .expect("metric registers once")
});

/// Counts `n` records written.
pub fn record_evidence_written(n: u64) {
    EVIDENCE_RECORDS.inc_by(n);
}

/// Counts `n` records that could not be written.
pub fn record_evidence_failure(n: u64) {
    EVIDENCE_FAILURES.inc_by(n);
}

/// Registers both at zero (evidence on).
pub fn init_evidence() {
    LazyLock::force(&EVIDENCE_RECORDS);
    LazyLock::force(&EVIDENCE_FAILURES);
}
