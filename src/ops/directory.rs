//! The key directory listener (`signing.directory_listen`): serves each identity's JWKS
//! at `/.well-known/http-message-signatures-directory`, for the operator to put behind
//! the HTTPS site its `signature_agent` names. The identity is the one whose
//! `signature_agent` host the request's `Host` names (with or without a port); any other
//! `Host`, or none, is a 404: a signature over `@authority` proves something only for
//! the hosts the identities name. A request head over [`MAX_HEAD_BYTES`] is a 431. The
//! response is
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

/// The most octets of request line and headers the listener answers (a directory fetch
/// needs a few hundred).
pub const MAX_HEAD_BYTES: usize = 8 * 1024;

/// The octets of a request's line and headers, as sent.
fn head_bytes(req: &pingora::http::RequestHeader) -> usize {
    let line = req.method.as_str().len() + req.raw_path().len() + 12;
    req.headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum::<usize>()
        + line
}

/// The host part of a `Host` value, when it is a plain authority (a name or address,
/// and an optional port); `None` for anything else.
fn host_of(value: &str) -> Option<&str> {
    let (host, port) = match value.rsplit_once(':') {
        Some((host, port)) if !host.ends_with(']') || host.starts_with('[') => (host, Some(port)),
        _ => (value, None),
    };
    let port_ok =
        port.is_none_or(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()));
    let host_ok = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'[' | b']' | b':'));
    (port_ok && host_ok).then_some(host)
}

/// The directory listener's application.
pub struct DirectoryApp {
    /// The identities whose directories it serves.
    pub identities: Arc<Identities>,
}

impl DirectoryApp {
    /// The identity whose `signature_agent` host a request's `Host` names, if any.
    fn identity(&self, host: &str) -> Option<&Arc<Identity>> {
        let host = host_of(host)?;
        self.identities.iter().find(|i| i.serves(host))
    }
}

/// A plain-text response.
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
        if head_bytes(req) > MAX_HEAD_BYTES {
            return plain(431, "request head too large\n");
        }
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
            .trim()
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

#[cfg(test)]
mod tests {
    use super::host_of;

    #[test]
    fn only_plain_authorities_name_a_host() {
        assert_eq!(host_of("signer.example"), Some("signer.example"));
        assert_eq!(host_of("signer.example:443"), Some("signer.example"));
        assert_eq!(host_of("[::1]:8443"), Some("[::1]"));
        for bad in ["", "x y \"z\"", "evil.example:", "a:123456", "a/b", "a@b"] {
            assert_eq!(host_of(bad), None, "{bad}");
        }
    }
}
