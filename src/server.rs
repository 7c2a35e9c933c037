//! `robotsgate run`: builds the Pingora server from the configuration and runs it.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use pingora::server::configuration::Opt;
use pingora::server::Server;
use pingora::services::listening::Service;

use crate::admin::AdminApp;
use crate::config::{Cidr, Config};
use crate::enforce::Enforcer;
use crate::proxy::RobotsGateProxy;

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Configuration file (Pingora's keys and a `robotsgate:` section).
    #[arg(long, short = 'c', default_value = "conf/robotsgate.yaml")]
    pub config: PathBuf,
    /// Proxy listener, overriding `robotsgate.listen`.
    #[arg(long)]
    pub listen: Option<std::net::SocketAddr>,
    /// Admin/metrics listener, overriding `robotsgate.admin_listen`.
    #[arg(long)]
    pub admin_listen: Option<std::net::SocketAddr>,
    /// Default crawler token; repeat for an ordered list (overrides `agent.default_tokens`).
    #[arg(long = "agent")]
    pub agents: Vec<String>,
    /// Open a destination network despite the private-range block; repeatable.
    #[arg(long = "allow-destination", value_name = "CIDR")]
    pub allow_destinations: Vec<Cidr>,
    /// Run in the background (Pingora daemon mode).
    #[arg(long, short = 'd')]
    pub daemon: bool,
    /// Take over the listeners of a running instance (graceful upgrade).
    #[arg(long, short = 'u')]
    pub upgrade: bool,
}

pub fn run(args: RunArgs) -> anyhow::Result<()> {
    let mut config = Config::load(&args.config)?;
    if let Some(listen) = args.listen {
        config.listen = listen;
    }
    if let Some(admin) = args.admin_listen {
        config.admin_listen = Some(admin);
    }
    if !args.agents.is_empty() {
        config.agent.default_tokens = args.agents.clone();
    }
    config
        .egress
        .allow_destinations
        .extend(args.allow_destinations.iter().copied());

    let opt = Opt {
        conf: Some(args.config.to_string_lossy().into_owned()),
        daemon: args.daemon,
        upgrade: args.upgrade,
        ..Opt::default()
    };
    let mut server = Server::new(Some(opt)).context("Pingora server configuration")?;
    let bootstrap = server.bootstrap_as_a_service();

    let enforcer = Arc::new(Enforcer::from_config(&config));
    let mut proxy = pingora::proxy::http_proxy_service_with_name(
        &server.configuration,
        RobotsGateProxy {
            enforcer: enforcer.clone(),
            upstream: config.upstream.clone(),
        },
        "robotsgate proxy",
    );
    proxy.add_tcp(&config.listen.to_string());
    server.add_service(proxy).add_dependency(&bootstrap);

    if let Some(admin) = config.admin_listen {
        let mut service = Service::new(
            "robotsgate admin".to_string(),
            AdminApp {
                enforcer: enforcer.clone(),
            },
        );
        service.add_tcp(&admin.to_string());
        server.add_service(service).add_dependency(&bootstrap);
    }
    log::info!(
        "robotsgate listening on {} (admin {:?})",
        config.listen,
        config.admin_listen
    );
    server.run_forever()
}
