//! robotsgate: an egress proxy that makes a crawler fleet obey robots.txt.
//!
//! Modules depend inward: [`robots`] is the pure engine (no I/O); everything else builds
//! on it.

pub mod cli;
pub mod conformance;
pub mod robots;
