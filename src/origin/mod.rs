//! Per-origin state and its I/O: the robots.txt [`store`] of [`snapshot`]s (fetched by
//! [`fetch`], parsed files shared by identical origins in [`files`], what happened lately
//! in [`recent`]; in a fleet, the copy kept in Redis: `crate::fleet::robots`), the state
//! kept across restarts ([`state`]), name resolution ([`dns`]) and the roots origin
//! certificates are verified against ([`trust`]), and what keeps robotsgate's own upstream
//! traffic from looping back to it ([`loops`]), and a tunnel's octets both ways, ended once
//! it carries nothing ([`splice`]). Uses [`crate::policy`], [`crate::robots`],
//! [`crate::fleet`], [`crate::pacing`], [`crate::identity`], [`crate::telemetry`],
//! [`crate::config`] and [`crate::error`].

pub mod dns;
pub mod fetch;
pub mod files;
pub mod loops;
pub mod recent;
pub mod snapshot;
pub mod splice;
pub mod state;
pub mod store;
pub mod trust;
