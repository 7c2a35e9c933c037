//! What robotsgate reports: Prometheus [`metrics`] and [`logging`] (text or JSON lines,
//! the access log). Leaves: they take plain values and enums, never the state they
//! describe.

pub mod logging;
pub mod metrics;
