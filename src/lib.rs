//! robotsgate: an egress proxy that makes a crawler fleet obey robots.txt.
//!
//! **Vocabulary.** One word per concept, used everywhere (code, logs, metrics, README):
//!
//! | word | what it is | type |
//! |---|---|---|
//! | origin | scheme, host and port: what one robots.txt covers (SPEC §1) | [`policy::target::Origin`] |
//! | target | a request's origin and canonical path, the path the decision is made on and the origin receives | [`policy::target::Target`] |
//! | tokens | the robots.txt product tokens a request is judged as | [`policy::agent::Tokens`] |
//! | user | an authenticated proxy user (a line of `access.credentials_file`) | [`downstream::access::User`] |
//! | identity | a Web Bot Auth signing identity (`signing.identities`) | [`identity::Identity`] |
//! | decision | what to do with a request, as data: forward it, or refuse it | [`enforce::Decision`] |
//! | refusal | why robotsgate answers a request itself instead of forwarding it, as data | [`enforce::Refusal`] |
//! | answer | a response robotsgate writes itself, rendered once from a refusal | [`policy::answer::Answer`] |
//! | turn | a request's place on its origin's pacing schedules (the in-flight limit, the delay), held for as long as the origin's exchange lasts | [`enforce::Turn`] |
//! | schedule | an origin's pacing state for one robots.txt group (or its in-flight limit) | `pacing::Schedules` |
//! | owner | the one fleet member that paces an origin (or address) at a time; the others hand its requests over | `fleet::Owners` |
//! | member | one running instance of a fleet, with a lease and an epoch | `fleet::Member` |
//! | slot | a client's place among the connections and streams it may hold open | [`downstream::slots::Slot`] |
//! | exchange | one request and its response between robotsgate and an origin | [`enforce::ExchangeEnd`] |
//!
//! `SPEC §N` in the code refers to `docs/SPEC.md`, the robots.txt rules robotsgate
//! enforces (kept in the repository as the reference it is).
//!
//! Data flows one way: request → [`policy::target`] (origin + canonical path) →
//! [`policy::agent`] (which crawler) → in a fleet, [`fleet`] (who owns the origin: here,
//! or another member, to which [`handover`] carries the request on the peer channel,
//! unjudged; the owner takes it from the top, and a request its owner never worked on
//! is routed again) → [`policy::egress`] + [`origin::dns`] (may we go there) →
//! [`origin::store`] (the origin's robots.txt, fetched by [`origin::fetch`]) →
//! [`robots`] (the verdict) → [`pacing`] (the request's turn) → upstream.
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
//! | [`handover`] | the hand-over in one room: a request, a tunnel or a proxy pass carried to its origin's owner, and routed again when the owner never received it |
//! | [`enforce`] | the plugin API: enforcement as calls any Pingora proxy can make |
//! | [`origin`] | per-origin state and its I/O: robots store, fetch, DNS, the state file, origin trust |
//! | [`fleet`] | several instances as one: membership, ownership of each origin, the channel between instances, durable records in Redis, the Lua scripts |
//! | [`pacing`] | Crawl-delay and in-flight schedules, in memory: one pacer for an instance and for a fleet |
//! | [`evidence`] | the tamper-evident record of every decision: chains of records, signed heads, the robots.txt files acted on; export and verification |
//! | [`telemetry`] | metrics and logs |
//! | [`policy`] | pure request policy: target, agent, egress rules, the decision as data |
//! | [`identity`] | who requests say they are: Web Bot Auth signing keys and signatures |
//! | [`config`] | the configuration file, its types and validation (in the engine's own vocabulary: purposes) |
//! | [`robots`] | the pure robots.txt engine (no I/O; uses nothing else of the crate) |
//! | [`error`] | the shape typed errors share: a kind, words, the error behind it |

#![warn(missing_docs)]
// The documentation is for contributors, built with `--document-private-items`
// (scripts/test.sh denies its warnings): links to private items resolve there.
#![allow(rustdoc::private_intra_doc_links)]
// Crate-private items too: a newcomer reads every layer, not only its public face.
#![warn(clippy::missing_docs_in_private_items)]

pub mod cli;
pub mod config;
pub mod conformance;
pub mod downstream;
pub mod enforce;
pub mod error;
pub mod evidence;
pub mod fleet;
pub mod handover;
pub mod identity;
pub(crate) mod ops;
pub(crate) mod origin;
pub(crate) mod pacing;
pub mod policy;
pub mod proxy;
pub mod robots;
pub(crate) mod telemetry;
