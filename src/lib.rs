//! robotsgate: an egress proxy that makes a crawler fleet obey robots.txt.
//!
//! Data flows one way: request → [`policy::target`] (origin + canonical path) →
//! [`policy::agent`] (which crawler) → [`policy::egress`] + [`origin::dns`] (may we go
//! there) → [`origin::store`] (the origin's robots.txt, fetched by [`origin::fetch`]) →
//! [`robots`] (the verdict) → [`pacing`] (the Crawl-delay slot) → upstream.
//!
//! The folders are the layers, and dependencies point one way, down this list (a
//! module uses only modules listed below it; `tests/it/layers.rs` checks this, and that
//! no two modules depend on each other, directly or around a loop):
//!
//! | layer | what it owns |
//! |---|---|
//! | `cli`, [`conformance`] | the command line and the SPEC §7 conformance runner |
//! | [`proxy`] | robotsgate's own Pingora proxy and server: wiring only |
//! | [`ops`] | the admin API and status page |
//! | [`downstream`] | the client side: front door, request heads, access, CONNECT, TLS interception, the operator CA, transparent (kernel-redirected) connections |
//! | [`enforce`] | the plugin API: enforcement as calls any Pingora proxy can make |
//! | [`origin`] | per-origin state and its I/O: robots store, fetch, DNS, the robots.txt a fleet shares, the state file, origin trust |
//! | [`pacing`] | Crawl-delay and in-flight schedules: the rules, the local backend, the shared (Redis) backend and its connection |
//! | [`telemetry`] | metrics and logs |
//! | [`policy`] | pure request policy: target, agent, egress rules, the decision as data |
//! | [`identity`] | who requests say they are: Web Bot Auth signing keys and signatures |
//! | [`config`] | the configuration file, its types and validation (in the engine's own vocabulary: purposes) |
//! | [`robots`] | the pure robots.txt engine (no I/O; uses nothing else of the crate) |

#![warn(missing_docs)]

pub mod cli;
pub mod config;
pub mod conformance;
pub mod downstream;
pub mod enforce;
pub mod identity;
pub(crate) mod ops;
pub(crate) mod origin;
pub(crate) mod pacing;
pub mod policy;
pub mod proxy;
pub mod robots;
pub(crate) mod telemetry;
