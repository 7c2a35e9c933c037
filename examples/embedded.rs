//! robotsgate as a plugin: a plain Pingora *reverse* proxy in front of one origin that
//! calls robotsgate's [`Enforcer`] from its own `request_filter`.
//!
//! ```text
//! cargo run --release --example embedded -- --listen 127.0.0.1:6188 --origin 127.0.0.1:8000
//! curl -A ExampleBot/1.0 http://127.0.0.1:6188/some/path
//! ```
//! Every request is judged against the origin's robots.txt for the User-Agent's product
//! token; disallowed paths get robotsgate's 403 and never reach the origin.

use std::sync::Arc;

use async_trait::async_trait;
use pingora::prelude::*;
use pingora::proxy::{ProxyHttp, Session};
use pingora::server::Server;
use robotsgate::config::Config;
use robotsgate::enforce::Turn;
use robotsgate::enforce::{Decision, Enforcer};
use robotsgate::policy::agent::Requester;
use robotsgate::policy::target::{parse_authority, Origin, Scheme, Target};
use robotsgate::robots::CanonicalPath;

/// Per request: the approved address and the pacing turn, held until the exchange
/// with the origin has ended (`logging` tells it how).
#[derive(Default)]
struct Ctx {
    addr: Option<std::net::SocketAddr>,
    turn: Option<Turn>,
}

struct Guarded {
    origin: Origin,
    enforcer: Arc<Enforcer>,
}

#[async_trait]
impl ProxyHttp for Guarded {
    type CTX = Ctx;

    fn new_ctx(&self) -> Self::CTX {
        Ctx::default()
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Self::CTX) -> Result<bool> {
        let path = session
            .req_header()
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string();
        let target = Target {
            origin: self.origin.clone(),
            path: CanonicalPath::new(&path).into_owned(),
        };
        let user_agent = session
            .req_header()
            .headers
            .get("user-agent")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let client = session
            .client_addr()
            .and_then(|a| a.as_inet())
            .map(|a| a.ip());
        // docs/architecture.md shows from here (a test keeps the two the same)
        match self
            .enforcer
            .decide(&target, &Requester::new(client, user_agent.as_deref()))
            .await
        {
            Decision::Forward { addr, pace, .. } => {
                match self.enforcer.pace(&pace).await {
                    Ok(turn) => ctx.turn = Some(turn),
                    Err(unpaced) => {
                        robotsgate::proxy::http::respond(session, &unpaced.answer()).await?;
                        return Ok(true);
                    }
                }
                ctx.addr = Some(addr);
                session.req_header_mut().set_uri(
                    http::Uri::try_from(target.path.as_str()).map_err(|e| {
                        Error::because(ErrorType::InternalError, "canonical path", e)
                    })?,
                );
                Ok(false)
            }
            Decision::Refuse(reply) => {
                robotsgate::proxy::http::respond(session, &reply.answer()).await?;
                Ok(true)
            }
            // Only a fleet member hands requests over; this enforcer is alone.
            Decision::HandOver(_) => Err(Error::explain(
                ErrorType::InternalError,
                "a hand-over without a fleet",
            )),
        }
        // to here
    }

    async fn upstream_peer(
        &self,
        _session: &mut Session,
        ctx: &mut Self::CTX,
    ) -> Result<Box<HttpPeer>> {
        let addr = ctx
            .addr
            .ok_or_else(|| Error::explain(ErrorType::InternalError, "no decision"))?;
        Ok(Box::new(HttpPeer::new(
            addr,
            false,
            self.origin.host_name(),
        )))
    }

    /// The exchange is over: its turns end as it did (a cut one is held a while more).
    async fn logging(&self, _session: &mut Session, e: Option<&Error>, ctx: &mut Self::CTX) {
        if let Some(turn) = ctx.turn.take() {
            turn.end(robotsgate::proxy::exchange::exchange_end(e));
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let listen = flag("--listen").unwrap_or_else(|| "127.0.0.1:6188".into());
    let origin = parse_authority(
        &flag("--origin").ok_or("--origin HOST:PORT is required")?,
        Scheme::Http,
    )?;

    // The origin is the operator's own: open its address for the egress check.
    let mut config = Config::default();
    config
        .egress
        .allow_destinations
        .push("127.0.0.0/8".parse()?);
    let enforcer = Arc::new(Enforcer::from_config(&config)?);

    let mut server = Server::new(None)?;
    server.bootstrap();
    let mut service =
        pingora::proxy::http_proxy_service(&server.configuration, Guarded { origin, enforcer });
    service.add_tcp(&listen);
    server.add_service(service);
    server.run_forever()
}
