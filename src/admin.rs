//! The admin listener: health and metrics for operators (loopback by default).
//!
//! `GET /healthz` answers `ok` while the process serves; `GET /metrics` is the Prometheus
//! text exposition of the default registry.

use std::sync::Arc;

use async_trait::async_trait;
use http::Response;
use pingora::apps::http_app::ServeHttp;
use pingora::protocols::http::ServerSession;

use crate::enforce::Enforcer;

pub struct AdminApp {
    pub enforcer: Arc<Enforcer>,
}

fn reply(status: u16, content_type: &str, body: Vec<u8>) -> Response<Vec<u8>> {
    Response::builder()
        .status(status)
        .header("Content-Type", content_type)
        .header("Content-Length", body.len())
        .body(body)
        .unwrap_or_default()
}

#[async_trait]
impl ServeHttp for AdminApp {
    async fn response(&self, session: &mut ServerSession) -> Response<Vec<u8>> {
        let path = session.req_header().uri.path().to_string();
        match path.as_str() {
            "/healthz" | "/readyz" => reply(200, "text/plain", b"ok\n".to_vec()),
            "/metrics" => {
                crate::metrics::update_store_gauges(&self.enforcer.store);
                crate::metrics::update_pacing_gauge(self.enforcer.pacer.queued());
                let mut out = Vec::new();
                let encoder = prometheus::TextEncoder::new();
                match prometheus::Encoder::encode(&encoder, &prometheus::gather(), &mut out) {
                    Ok(()) => reply(200, "text/plain; version=0.0.4", out),
                    Err(e) => reply(500, "text/plain", format!("{e}\n").into_bytes()),
                }
            }
            _ => reply(404, "text/plain", b"not found\n".to_vec()),
        }
    }
}
