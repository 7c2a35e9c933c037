//! Pure request policy: where a request goes ([`target`]), who sends it ([`agent`]),
//! where traffic may go ([`egress`]), the operator's per-host overrides ([`overrides`]),
//! what robotsgate answers instead of the origin ([`answer`]), and the usage verdict for
//! a crawler's declared purposes ([`usage`]). No I/O; uses only [`crate::robots`] and
//! [`crate::config`].

pub mod agent;
pub mod answer;
pub mod egress;
pub mod overrides;
pub mod target;
pub mod usage;
