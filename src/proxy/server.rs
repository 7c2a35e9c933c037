//! `robotsgate run`: builds the Pingora server from the configuration and runs it.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use pingora::server::configuration::{Opt, ServerConf};
use pingora::server::Server;
use pingora::services::listening::Service;

use crate::config::{Cidr, Config};
use crate::downstream::access::AccessPolicy;
use crate::downstream::ca::OperatorCa;
use crate::downstream::connect::Tunnels;
use crate::downstream::front::{Door, ProxyFront};
use crate::downstream::head::HeadLimits;
use crate::downstream::http2::Http2Limits;
use crate::downstream::intercept::Interceptor;
use crate::downstream::peer_door::PeerDoor;
use crate::downstream::peer_scope::PeerScope;
use crate::downstream::slots::Slots;
use crate::downstream::transparent::Redirection;
use crate::enforce::Enforcer;
use crate::handover::HandOver;
use crate::ops::admin::{AdminApp, AdminGuard};
use crate::origin::trust::UpstreamTrust;
use crate::proxy::http::RobotsGateProxy;
use crate::proxy::signals::{left_after_run, Signals, StopBounds};

#[derive(Args, Debug)]
/// `robotsgate run` (and `check-config`): the configuration file and what overrides it.
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
    /// Operator CA certificate for HTTPS interception, overriding `tls.ca_cert`.
    #[arg(long, value_name = "FILE", requires = "ca_key")]
    pub ca_cert: Option<PathBuf>,
    /// Its private key, overriding `tls.ca_key`.
    #[arg(long, value_name = "FILE", requires = "ca_cert")]
    pub ca_key: Option<PathBuf>,
    /// Extra root certificates (PEM) trusted for origins; repeatable.
    #[arg(long = "upstream-ca", value_name = "FILE")]
    pub upstream_ca: Vec<PathBuf>,
    /// Admin bearer token file, overriding `admin.token_file`.
    #[arg(long = "admin-token", value_name = "FILE")]
    pub admin_token: Option<PathBuf>,
    /// Fleet mode: the shared Redis (`redis://host:port/db`), overriding `fleet.redis`.
    #[arg(long, value_name = "URL")]
    pub redis: Option<String>,
    /// Fleet mode: the peer channel's listener, overriding `fleet.peer_listen` (and
    /// `fleet.peer_address`, unless it is a wildcard address).
    #[arg(long, value_name = "ADDR")]
    pub peer_listen: Option<std::net::SocketAddr>,
    /// Listener for redirected plain-HTTP connections, overriding `transparent.http_listen`.
    #[arg(long, value_name = "ADDR")]
    pub transparent_http: Option<std::net::SocketAddr>,
    /// Listener for redirected TLS connections, overriding `transparent.tls_listen`.
    #[arg(long, value_name = "ADDR")]
    pub transparent_tls: Option<std::net::SocketAddr>,
}

/// Everything `run` loads before it starts serving; `check-config` stops here.
struct Loaded {
    /// The configuration file.
    config: Config,
    /// Who may use the proxy.
    access: AccessPolicy,
    /// Who may use the admin API.
    admin: AdminGuard,
    /// Mints leaves for intercepted tunnels (none: no interception).
    interceptor: Option<Arc<Interceptor>>,
    /// The roots origin certificates are verified against.
    trust: UpstreamTrust,
    /// Pingora's server settings.
    server_conf: ServerConf,
    /// The signing identities, for the directory listener.
    identities: Arc<crate::identity::Identities>,
}

/// Loads everything `run` needs from its arguments, failing on the first bad part.
fn load(args: &RunArgs) -> anyhow::Result<Loaded> {
    let mut config = Config::load(&args.config)?;
    crate::telemetry::logging::init(config.log_format);
    args.apply(&mut config);
    // The command line may have made a valid file invalid (a TLS listener with no CA).
    config.validate()?;
    config.fleet.check_peer_channel()?;

    // Loaded once, at start: a reload (graceful upgrade) starts a new process that loads
    // the same files again.
    let interceptor = match (&config.tls.ca_cert, &config.tls.ca_key) {
        (Some(cert), Some(key)) => {
            let ca = OperatorCa::load(cert, key)?;
            log::info!(
                "HTTPS interception with CA `{}` ({})",
                ca.subject,
                cert.display()
            );
            Some(Arc::new(Interceptor::new(ca, &config.tls)?))
        }
        _ => {
            log::warn!(
                "no tls.ca_cert: CONNECT is refused except to tls.blind_tunnel destinations"
            );
            None
        }
    };
    let trust = UpstreamTrust::load(&config.tls.upstream_extra_roots)?;
    // The signing keys, read once: `check-config` finds a bad one, and `run` hands them
    // to the enforcer (signing) and the directory listener.
    let identities = Arc::new(crate::identity::Identities::load(
        &config.signing,
        &config.agent,
    )?);
    let access = AccessPolicy::new(&config.access)?;
    let admin = AdminGuard::new(&config.admin, &config.robots)?;
    let mut server_conf = ServerConf::load_from_yaml(args.config.to_string_lossy().as_ref())
        .map_err(|e| anyhow::anyhow!("{}: Pingora configuration: {e}", args.config.display()))?;
    if let Some(bundle) = trust.ca_file() {
        server_conf.ca_file = Some(bundle);
    }
    Ok(Loaded {
        config,
        access,
        admin,
        interceptor,
        trust,
        server_conf,
        identities,
    })
}

/// `robotsgate check-config`: loads everything `run` would (robotsgate's section,
/// Pingora's keys, the CA, extra roots) and reports the first problem. systemd runs it
/// before a start or reload, so a bad file never replaces a working process.
pub fn check_config(args: &RunArgs) -> anyhow::Result<()> {
    let loaded = load(args)?;
    let t = &loaded.config.transparent;
    println!(
        "{}: OK (proxy {}, admin {:?}, HTTPS interception {}, transparent http {:?} tls {:?})",
        args.config.display(),
        loaded.config.listen,
        loaded.config.admin_listen,
        if loaded.interceptor.is_some() {
            "on"
        } else {
            "off"
        },
        t.http_listen,
        t.tls_listen,
    );
    Ok(())
}

/// `robotsgate run`: loads everything, then serves until stopped.
pub fn run(args: RunArgs) -> anyhow::Result<()> {
    let Loaded {
        config,
        access,
        admin: guard,
        interceptor,
        trust,
        server_conf,
        identities,
    } = load(&args)?;
    let opt = Opt {
        daemon: args.daemon,
        upgrade: args.upgrade,
        ..Opt::default()
    };
    crate::telemetry::metrics::init();
    let bounds = StopBounds::of(&server_conf);
    let mut server = Server::new_with_opt_and_conf(opt, server_conf);
    let bootstrap = server.bootstrap_as_a_service();

    let enforcer = Arc::new(Enforcer::with_trust(&config, &trust, identities.clone())?);
    if enforcer.evidence().is_some() {
        crate::telemetry::metrics::init_evidence();
    }
    // Before the listeners accept: the held robots.txt copies of the last run.
    let state_file = crate::origin::state::StateFile::of(&config.robots)
        .map_err(|e| anyhow::anyhow!("key `robotsgate.robots.state_key_file`: {e}"))?
        .map(Arc::new);
    if let Some(state) = &state_file {
        let limits = crate::origin::state::Limits::of(&config);
        enforcer.load_state(state, limits, args.upgrade);
    }
    // Threads start in a background service: after a daemon's fork, which they would
    // not survive.
    let history = Arc::new(crate::ops::history::History::default());
    let background = server.add_service(pingora::services::background::background_service(
        "robotsgate background",
        Background {
            enforcer: enforcer.clone(),
            history: history.clone(),
            state: state_file
                .clone()
                .map(|state| (state, config.robots.state_save_seconds.duration())),
            tproxy: match config.transparent.mode {
                crate::config::TransparentMode::Tproxy => config
                    .transparent
                    .http_listen
                    .into_iter()
                    .chain(config.transparent.tls_listen)
                    .collect(),
                crate::config::TransparentMode::Redirect => Vec::new(),
            },
        },
    ));
    let origins = OriginProxies {
        server: server.configuration.clone(),
        config: &config,
        enforcer: &enforcer,
        handover: Arc::new(HandOver::new(enforcer.clone(), &config)),
        _trust: trust,
    };
    let front = proxy_front(&origins, interceptor, access);
    let listening = Listening {
        bootstrap: &bootstrap,
        background: &background,
    };
    add_client_listeners(&mut server, front, &origins, &listening);
    // Every connector has read the root bundle: its temporary file can go.
    drop(origins);
    add_ops_listeners(
        &mut server,
        &config,
        &listening,
        guard,
        history,
        enforcer.clone(),
        identities,
    );
    log::info!(
        "robotsgate listening on {} (admin {:?})",
        config.listen,
        config.admin_listen
    );
    let signals = Signals::new(enforcer.clone(), state_file, bounds);
    server.run(pingora::server::RunArgs {
        shutdown_signal: Box::new(signals),
    });
    left_after_run(&enforcer);
    // Every record written and the chain's last segment closed under a signed head.
    if let Some(evidence) = enforcer.evidence() {
        evidence.close();
    }
    crate::telemetry::sink::flush();
    std::process::exit(0)
}

/// The services every listener waits for: Pingora's bootstrap (the listeners handed
/// over by an upgrade) and robotsgate's background (the state loaded, threads started).
struct Listening<'a> {
    /// Pingora's bootstrap service.
    bootstrap: &'a pingora::services::ServiceHandle,
    /// robotsgate's background service.
    background: &'a pingora::services::ServiceHandle,
}

/// The front door every client listener shares: robotsgate's Pingora proxy, the
/// tunnels, access control and the limits.
fn proxy_front(
    origins: &OriginProxies<'_>,
    interceptor: Option<Arc<Interceptor>>,
    access: AccessPolicy,
) -> ProxyFront<pingora::proxy::HttpProxy<RobotsGateProxy>> {
    let (config, enforcer) = (origins.config, origins.enforcer);
    let handover = origins.handover.clone();
    let tunnels = Tunnels::new(
        enforcer.clone(),
        interceptor,
        handover.clone(),
        &config.tls,
        config.upstream.connect_timeout_seconds.duration(),
        config.limits.first_byte_timeout_seconds.duration(),
        config.transparent.upstream_mark,
    );
    ProxyFront::new(
        origins.make(),
        tunnels,
        handover,
        Arc::new(access),
        HeadLimits::new(&config.limits),
        Slots::new(
            config.limits.max_connections,
            config.limits.max_connections_per_client,
        ),
        Http2Limits::new(&config.limits),
    )
}

/// Makes robotsgate's Pingora proxy towards origins, one per client listener, from the
/// settings and the enforcer every client listener shares.
///
/// Each listener is a Pingora service with a runtime of its own, and each proxy its own
/// pool of connections to origins: a connection opened on one runtime is polled by that
/// runtime's driver, so one reused from another listener's requests would wake that
/// other runtime's thread on every read (measured: a tenth of a fleet member's CPU for
/// the requests handed to it, `bench/fleet_bench.py`).
struct OriginProxies<'a> {
    /// Pingora's settings (the root bundle the connectors read included).
    server: Arc<pingora::server::configuration::ServerConf>,
    /// robotsgate's settings.
    config: &'a Config,
    /// Decides and paces every request.
    enforcer: &'a Arc<Enforcer>,
    /// The hand-over the proxies and the first front share (each further front keeps
    /// idle relay connections of its own, `ProxyFront::at`).
    handover: Arc<HandOver>,
    /// The root bundle's file, kept until every proxy has read it.
    _trust: UpstreamTrust,
}

impl OriginProxies<'_> {
    /// One more proxy towards origins, with a pool of its own.
    fn make(&self) -> pingora::proxy::HttpProxy<RobotsGateProxy> {
        let config = self.config;
        pingora::proxy::http_proxy(
            &self.server,
            RobotsGateProxy {
                enforcer: self.enforcer.clone(),
                handover: self.handover.clone(),
                upstream: (&config.upstream).into(),
                max_body_bytes: config.limits.max_body_bytes,
                socket_hook: crate::origin::loops::hook(config.transparent.upstream_mark),
                via: crate::origin::loops::OwnTraffic::new(&config.transparent).via(),
            },
        )
    }
}

/// The proxy listener, the transparent listeners when configured, and in fleet mode the
/// peer channel's.
fn add_client_listeners(
    server: &mut Server,
    front: ProxyFront<pingora::proxy::HttpProxy<RobotsGateProxy>>,
    origins: &OriginProxies<'_>,
    listening: &Listening<'_>,
) {
    let (config, enforcer) = (origins.config, origins.enforcer);
    let redirection = Arc::new(Redirection::new(
        config.transparent.mode,
        config.own_listeners(),
    ));
    let doors = [
        (
            "robotsgate transparent http",
            config.transparent.http_listen,
            false,
        ),
        (
            "robotsgate transparent tls",
            config.transparent.tls_listen,
            true,
        ),
    ];
    for (name, listen, tls) in doors {
        let Some(listen) = listen else { continue };
        let door = Door::Transparent {
            redirection: redirection.clone(),
            tls,
        };
        let service = server.add_service(client_listener(
            name,
            front.at(door, origins.make()),
            listen,
        ));
        service.add_dependency(listening.bootstrap);
        service.add_dependency(listening.background);
        log::info!(
            "transparent {} listener on {listen} ({:?} mode)",
            if tls { "TLS" } else { "HTTP" },
            config.transparent.mode
        );
    }
    if let (Some(owners), Some(listen)) = (enforcer.owners(), config.fleet.peer_listen) {
        let door = Door::Peer(Arc::new(PeerDoor::new(
            owners.clone(),
            (
                config.fleet.peer_max_connections,
                config.fleet.peer_max_connections_per_client,
                config.fleet.peer_max_connections_per_member,
            ),
            config.limits.first_byte_timeout_seconds.duration(),
            PeerScope::new(&config.fleet.peer_scope),
        )));
        let peer = server.add_service(client_listener(
            "robotsgate fleet peer",
            front.at(door, origins.make()),
            listen,
        ));
        peer.add_dependency(listening.bootstrap);
        peer.add_dependency(listening.background);
        log::info!("fleet peer channel on {listen} (mutual TLS)");
    }
    let proxy = server.add_service(client_listener("robotsgate proxy", front, config.listen));
    proxy.add_dependency(listening.bootstrap);
    proxy.add_dependency(listening.background);
}

/// The admin listener and the key directory listener, when configured.
fn add_ops_listeners(
    server: &mut Server,
    config: &Config,
    listening: &Listening<'_>,
    guard: AdminGuard,
    history: Arc<crate::ops::history::History>,
    enforcer: Arc<Enforcer>,
    identities: Arc<crate::identity::Identities>,
) {
    if let Some(admin) = config.admin_listen {
        let app = AdminApp {
            enforcer,
            guard,
            history,
            statement: crate::ops::statement::Published::of(config),
        };
        let mut service = Service::new("robotsgate admin".to_string(), app);
        service.add_tcp(&admin.to_string());
        server
            .add_service(service)
            .add_dependency(listening.bootstrap);
    }
    if let Some(listen) = config.signing.directory_listen {
        let mut service = Service::new(
            "robotsgate key directory".to_string(),
            crate::ops::directory::DirectoryApp { identities },
        );
        service.add_tcp(&listen.to_string());
        server.add_service(service);
        log::info!("key directory on {listen}");
    }
}

impl RunArgs {
    /// Applies the command line's overrides to `config`.
    fn apply(&self, config: &mut Config) {
        let args = self;
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
        if let (Some(cert), Some(key)) = (&args.ca_cert, &args.ca_key) {
            config.tls.ca_cert = Some(cert.clone());
            config.tls.ca_key = Some(key.clone());
        }
        config
            .tls
            .upstream_extra_roots
            .extend(args.upstream_ca.iter().cloned());
        if let Some(token) = &args.admin_token {
            config.admin.token_file = Some(token.clone());
        }
        if let Some(url) = &args.redis {
            config.fleet.redis = Some(url.clone());
            config.fleet.redis_cluster.clear();
        }
        if let Some(addr) = args.peer_listen {
            // How the others reach it follows, unless the file says (a NAT's address).
            config.fleet.peer_listen = Some(addr);
        }
        if let Some(addr) = args.transparent_http {
            config.transparent.http_listen = Some(addr);
        }
        if let Some(addr) = args.transparent_tls {
            config.transparent.tls_listen = Some(addr);
        }
    }
}

/// A Pingora service for one of robotsgate's client listeners.
fn client_listener(
    name: &str,
    front: ProxyFront<pingora::proxy::HttpProxy<RobotsGateProxy>>,
    listen: std::net::SocketAddr,
) -> Service<ProxyFront<pingora::proxy::HttpProxy<RobotsGateProxy>>> {
    let mut service = Service::new(name.to_string(), front);
    // No L4 buffers. Reads: Pingora's default is 64 KiB per connection, allocated at
    // accept; the front reads each head into a buffer sized to what arrived, so an idle
    // connection holds none. Writes: Pingora flushes a response with a Content-Length
    // only at its end, so a buffered partial body would wait for a stalled origin;
    // unbuffered, every octet goes to the client as it arrives.
    service.add_listener(
        pingora::listeners::ListenerConfig::tcp(listen.to_string())
            .l4_buffer(pingora::protocols::l4::stream::L4BufferSettings::unbuffered()),
    );
    service
}

/// What runs beside requests, started once the process is what it will stay (after a
/// daemon's fork): the fleet backend, the state file's writer, the status page's
/// sampler, the release of idle owned origins (fleet mode), and (TPROXY) the
/// transparent listeners' `IP_TRANSPARENT`.
struct Background {
    /// What the background tasks act through.
    enforcer: Arc<Enforcer>,
    /// The status page's history, sampled every second.
    history: Arc<crate::ops::history::History>,
    /// The state file and how often it is written.
    state: Option<(Arc<crate::origin::state::StateFile>, std::time::Duration)>,
    /// TPROXY listeners, to be made transparent once bound.
    tproxy: Vec<std::net::SocketAddr>,
}

#[async_trait::async_trait]
impl pingora::services::background::BackgroundService for Background {
    /// Ready (and the listeners start) only once everything has started.
    async fn start_with_ready_notifier(
        &self,
        _shutdown: pingora::server::ShutdownWatch,
        ready: pingora::services::ServiceReadyNotifier,
    ) {
        if let Err(e) = crate::telemetry::sink::start_writer() {
            log::error!("log writer thread not started, lines are written as they come: {e}");
        }
        if let Err(e) = self.enforcer.run_in_background() {
            log::error!("fleet backend not started: {e}");
        }
        if let Some((state, every)) = &self.state {
            if let Err(e) = self.enforcer.keep_state_written(state.clone(), *every) {
                log::error!(
                    "state file {} will not be written: {e}",
                    state.path().display()
                );
            }
        }
        self.history.clone().keep_sampling(self.enforcer.clone());
        self.enforcer.clone().keep_releasing_idle();
        self.enforcer.clone().keep_following_traffic();
        for addr in self.tproxy.clone() {
            tokio::spawn(make_transparent_once_bound(addr));
        }
        ready.notify_ready();
    }
}

/// Sets `IP_TRANSPARENT` on the TPROXY listener at `addr` as soon as Pingora has bound
/// it (or found it bound, after an upgrade: the flag travels with the socket).
async fn make_transparent_once_bound(addr: std::net::SocketAddr) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        match crate::downstream::transparent::make_listener_transparent(addr) {
            Ok(true) => {
                log::info!("TPROXY listener {addr}: IP_TRANSPARENT set");
                return;
            }
            Ok(false) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            Ok(false) => {
                log::error!(
                    "TPROXY listener {addr}: never bound; redirected connections will not arrive"
                );
                return;
            }
            Err(e) => {
                log::error!("TPROXY listener {addr}: cannot set IP_TRANSPARENT ({e}); it needs CAP_NET_ADMIN");
                return;
            }
        }
    }
}
