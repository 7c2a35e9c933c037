//! robotsgate's own proxy: the Pingora `ProxyHttp` ([`http`], wiring only) and the
//! server that puts the front door, the proxy and the admin listener together
//! ([`server`]). Uses every layer below it.

pub mod http;
pub mod server;
