//! robotsgate's own proxy: the Pingora `ProxyHttp` ([`http`]), one method per phase,
//! each taking one step of `steps` (judge the request, take its turn, sign it, check
//! ownership again before the head is written, settle pay per crawl, route a request
//! handed over again), with what it knows of the request (`context`) and reads off it
//! (`request`); the upstream side of an exchange ([`exchange`]: the peer, how an
//! exchange ended), the headers changed on the way through (`headers`), pay per crawl
//! on the way back (`payment`), TDMRep's reservation of an answer (`tdm`), and the server that puts the front door, the proxy and the admin listener together
//! ([`server`]), with what it does on Pingora's stop and upgrade signals (`signals`). A request handed to its owner in a fleet is carried by the hand-over's
//! room ([`crate::handover`]'s `pass.rs`): each phase calls one of its methods. Uses
//! every layer below it.

mod context;
pub mod exchange;
mod headers;
pub mod http;
mod payment;
mod request;
pub mod server;
mod signals;
mod steps;
mod tdm;
