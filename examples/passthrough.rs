//! The benchmark baseline: a forward proxy on the same Pingora setup as robotsgate
//! (same target parsing, same peer options) that does no robots, egress or DNS work —
//! it forwards absolute-form requests to the IP literal they name.
//!
//! With `--tls`, a second listener terminates TLS (Pingora's own listener, the same rustls
//! stack robotsgate's interception uses) and forwards its origin-form requests over TLS to
//! the IP literal their `Host` names: the floor of what HTTPS costs a Pingora proxy, for
//! `bench/https_bench.py`. Origins are verified against the config's `ca_file`.
//!
//! `cargo run --release --example passthrough -- CONFIG.yaml LISTEN_ADDR
//!  [--tls TLS_LISTEN_ADDR CERT.pem KEY.pem]`

use async_trait::async_trait;
use pingora::prelude::*;
use pingora::proxy::{ProxyHttp, Session};
use pingora::server::configuration::Opt;
use pingora::server::Server;
use robotsgate::config::UpstreamConfig;
use robotsgate::policy::target::{Host, Scheme, Target};
use robotsgate::proxy::exchange::{upstream_peer, UpstreamOptions};

/// Forwards each request to the origin its target names.
struct Passthrough {
    /// robotsgate's default upstream timeouts.
    timeouts: UpstreamOptions,
    /// The scheme of origin-form requests: HTTPS on the TLS listener.
    scheme: Scheme,
}

#[async_trait]
impl ProxyHttp for Passthrough {
    type CTX = Option<Target>;

    fn new_ctx(&self) -> Self::CTX {
        None
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Self::CTX) -> Result<bool> {
        let req = session.req_header();
        let host = req.headers.get("host").map(|h| h.as_bytes());
        *ctx = Target::from_request(req.raw_path(), host, self.scheme).ok();
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
        // robotsgate's own peer: one pool per origin and the same timeouts (a read or
        // write timeout is a timer per upstream read and write; no deployed proxy
        // goes without them). The pool key hashed per request, as before robotsgate
        // kept it in its origin store: this baseline stays what it was.
        let addr = std::net::SocketAddr::new(ip, target.origin.port);
        let pool_key = {
            use std::hash::{Hash, Hasher};
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            target.origin.hash(&mut hasher);
            hasher.finish()
        };
        Ok(Box::new(upstream_peer(
            target,
            addr,
            pool_key,
            &self.timeouts,
        )))
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
    let usage = "usage: passthrough CONFIG.yaml LISTEN_ADDR [--tls LISTEN_ADDR CERT KEY]";
    let (Some(conf), Some(listen)) = (args.get(1), args.get(2)) else {
        return Err(usage.into());
    };
    let tls = match args.get(3).map(String::as_str) {
        None => None,
        Some("--tls") => match (args.get(4), args.get(5), args.get(6)) {
            (Some(listen), Some(cert), Some(key)) => Some((listen, cert, key)),
            _ => return Err(usage.into()),
        },
        Some(_) => return Err(usage.into()),
    };
    let opt = Opt {
        conf: Some(conf.clone()),
        ..Opt::default()
    };
    let mut server = Server::new(Some(opt))?;
    server.bootstrap();
    let timeouts = (&UpstreamConfig::default()).into();
    let conf = server.configuration.clone();
    let service =
        |scheme| pingora::proxy::http_proxy_service(&conf, Passthrough { timeouts, scheme });
    let mut plain = service(Scheme::Http);
    plain.add_tcp(listen);
    server.add_service(plain);
    if let Some((listen, cert, key)) = tls {
        let mut tls = service(Scheme::Https);
        tls.add_tls(listen, cert, key)?;
        server.add_service(tls);
    }
    server.run_forever()
}
