//! The integration tests, one binary (linked once): real robotsgate processes, origins
//! and clients over real sockets on loopback. One module per area; [`common`] holds the
//! fixtures (test origins, a robotsgate process, DNS servers, CAs).

mod access;
mod admin;
mod check_cli;
mod common;
mod conformance;
mod cuts;
mod docs;
mod embedded_example;
mod faults;
mod fetch_status;
mod fleet;
mod fleet_campaign;

mod fleet_faults;
mod fleet_fixture;
mod fleet_follow;
mod fleet_handover;
mod fleet_peers;
mod fleet_relay;
mod fleet_routing;
mod h2_attacks;
mod h2_clients;
mod h2_origins;
mod holes;
mod hostile;
mod https;
mod https_blind;
mod layers;
mod limits;
mod pacing;
mod package;
mod payment;
mod politeness;
mod prometheus;
mod proxy;
mod redis_servers;
mod reload;
mod report;
mod robots_props;
mod signing;
mod state;
mod status_page;
mod systemd;
mod transparent;
mod turns;
mod usage;
