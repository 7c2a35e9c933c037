//! robotsgate's own proxy: the Pingora `ProxyHttp` ([`http`], wiring only, and the
//! steps its phases take, `steps`), the upstream
//! side of an exchange ([`exchange`]: the peer, how an exchange ended), the headers
//! changed on the way through (`headers`), a request handed to its owner in a fleet
//! (`handover`), and the server that puts the front door, the
//! proxy and the admin listener together ([`server`]). Uses every layer below it.

mod context;
pub mod exchange;
mod handover;
mod headers;
pub mod http;
mod payment;
mod request;
pub mod server;
mod steps;
