//! The benchmark baseline: a forward proxy on the same Pingora setup as robotsgate
//! (same target parsing, same peer options) that does no robots, egress or DNS work —
//! it forwards absolute-form requests to the IP literal they name.
//!
//! `cargo run --release --example passthrough -- CONFIG.yaml LISTEN_ADDR`

use async_trait::async_trait;
use pingora::prelude::*;
use pingora::proxy::{ProxyHttp, Session};
use pingora::server::configuration::Opt;
use pingora::server::Server;
use robotsgate::config::UpstreamConfig;
use robotsgate::policy::target::{Host, Scheme, Target};
use robotsgate::proxy::http::{upstream_peer, UpstreamTimeouts};

/// robotsgate's default upstream timeouts.
struct Passthrough(UpstreamTimeouts);

#[async_trait]
impl ProxyHttp for Passthrough {
    type CTX = Option<Target>;

    fn new_ctx(&self) -> Self::CTX {
        None
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Self::CTX) -> Result<bool> {
        let req = session.req_header();
        let host = req.headers.get("host").map(|h| h.as_bytes());
        *ctx = Target::from_request(req.raw_path(), host, Scheme::Http).ok();
        if ctx.is_none() {
            session.respond_error(400).await?;
            return Ok(true);
        }
        Ok(false)
    }

    async fn upstream_peer(
        &self,
        _session: &mut Session,
        ctx: &mut Self::CTX,
    ) -> Result<Box<HttpPeer>> {
        let target = ctx
            .as_ref()
            .ok_or_else(|| Error::explain(ErrorType::InternalError, "no target"))?;
        let Host::Ip(ip) = target.origin.host else {
            return Err(Error::explain(
                ErrorType::InternalError,
                "passthrough needs IP literals",
            ));
        };
        // robotsgate's own peer: the same pool key and the same timeouts (a read or
        // write timeout is a timer per upstream read and write; no deployed proxy
        // goes without them).
        let addr = std::net::SocketAddr::new(ip, target.origin.port);
        Ok(Box::new(upstream_peer(target, addr, &self.0)))
    }

    async fn upstream_request_filter(
        &self,
        _s: &mut Session,
        req: &mut RequestHeader,
        ctx: &mut Self::CTX,
    ) -> Result<()> {
        if let Some(target) = ctx {
            req.set_uri(
                http::Uri::try_from(target.path.as_str())
                    .map_err(|e| Error::because(ErrorType::InternalError, "uri", e))?,
            );
        }
        Ok(())
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(conf), Some(listen)) = (args.get(1), args.get(2)) else {
        return Err("usage: passthrough CONFIG.yaml LISTEN_ADDR".into());
    };
    let opt = Opt {
        conf: Some(conf.clone()),
        ..Opt::default()
    };
    let mut server = Server::new(Some(opt))?;
    server.bootstrap();
    let mut service = pingora::proxy::http_proxy_service(
        &server.configuration,
        Passthrough((&UpstreamConfig::default()).into()),
    );
    service.add_tcp(listen);
    server.add_service(service);
    server.run_forever()
}
