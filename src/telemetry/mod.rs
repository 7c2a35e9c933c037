//! What robotsgate reports: Prometheus [`metrics`] and [`logging`] (text or JSON lines,
//! the access log), written to stderr through the [`sink`]. Leaves: they take plain values and enums, never the state they
//! describe.
//!
//! **Its other files:** `overcharges.rs` (origins that charged beyond the offer),
//! `usage.rs` (the usage metric).

pub mod logging;
pub mod metrics;
pub mod overcharges;
pub mod sink;
pub mod usage;
