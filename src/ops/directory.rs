//! The key directory listener (`signing.directory_listen`): serves each identity's JWKS
//! at `/.well-known/http-message-signatures-directory`, for the operator to put behind
//! the HTTPS site its `signature_agent` names. The identity is the one whose
//! `signature_agent` host the request's `Host` names (or the only one). The response is
//! `application/http-message-signatures-directory+json`, signed by every key it lists
//! (`tag="http-message-signatures-directory"`, covering `"@authority";req`), as the
//! directory draft asks.

use std::sync::Arc;

use async_trait::async_trait;
use http::Response;
use pingora::apps::http_app::ServeHttp;
use pingora::protocols::http::ServerSession;

use crate::identity::{Identities, Identity};

/// Where the directory is served.
pub const DIRECTORY_PATH: &str = "/.well-known/http-message-signatures-directory";

/// The directory listener's application.
pub struct DirectoryApp {
    /// The identities whose directories it serves.
    pub identities: Arc<Identities>,
}

impl DirectoryApp {
    /// The identity a request's `Host` asks for: the one it names, else the only one.
    fn identity(&self, host: &str) -> Option<&Arc<Identity>> {
        let host = host.trim();
        self.identities
            .iter()
            .find(|i| i.serves(host))
            .or_else(|| self.identities.only())
    }
}

fn plain(status: u16, text: &str) -> Response<Vec<u8>> {
    Response::builder()
        .status(status)
        .header("Content-Type", "text/plain")
        .header("Content-Length", text.len())
        .body(text.as_bytes().to_vec())
        .unwrap_or_default()
}

#[async_trait]
impl ServeHttp for DirectoryApp {
    async fn response(&self, session: &mut ServerSession) -> Response<Vec<u8>> {
        let req = session.req_header();
        if req.method != http::Method::GET || req.uri.path() != DIRECTORY_PATH {
            return plain(
                404,
                "only GET /.well-known/http-message-signatures-directory\n",
            );
        }
        let host = req
            .headers
            .get(http::header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or_default()
            .to_ascii_lowercase();
        let Some(identity) = self.identity(&host) else {
            return plain(404, "no identity's signature_agent names this host\n");
        };
        let body = identity.directory().to_string().into_bytes();
        let (input, signature) = identity.sign_directory(&host);
        Response::builder()
            .status(200)
            .header(
                "Content-Type",
                "application/http-message-signatures-directory+json",
            )
            .header("Content-Length", body.len())
            .header("Cache-Control", "max-age=300")
            .header("Signature-Input", input)
            .header("Signature", signature)
            .body(body)
            .unwrap_or_default()
    }
}
