//! robotsgate: an egress proxy that makes a crawler fleet obey robots.txt.
//!
//! Data flows one way: request → [`target`] (origin + canonical path) → [`agent`] (which
//! crawler) → [`egress`] + [`dns`] (may we go there) → [`store`] (the origin's robots.txt,
//! fetched by [`fetch`]) → [`robots`] (the verdict) → upstream. [`enforce`] is that
//! pipeline as one call any Pingora proxy can make; [`proxy`] and [`server`] are
//! robotsgate's own proxy built on it. Dependencies point inward: [`robots`] is pure and
//! knows nothing of the rest.

pub mod access;
pub mod admin;
pub mod agent;
pub mod ca;
pub mod cli;
pub mod config;
pub mod conformance;
pub mod connect;
pub mod dns;
pub mod egress;
pub mod enforce;
pub mod fetch;
pub mod front;
pub mod head;
pub mod intercept;
pub mod logging;
pub mod metrics;
pub mod pacing;
pub mod proxy;
pub mod robots;
pub mod server;
pub mod store;
pub mod target;
pub mod trust;
