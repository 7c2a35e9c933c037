//! What the proxy reads off a request before judging it: its target (origin and
//! canonical path) and who sends it.

use std::net::IpAddr;

use pingora::http::RequestHeader;
use pingora::proxy::Session;

use crate::downstream::context::ClientContext;
use crate::enforce::{bad_request, Answer};
use crate::policy::agent::Requester;
use crate::policy::target::{Target, TargetError};

/// The request's target: its origin and canonical path, from the tunnel, the
/// redirected destination or the request line; `Err` is the 400 or 421 to answer.
pub(super) fn target_of(
    req: &RequestHeader,
    client: &ClientContext,
) -> std::result::Result<Target, TargetError> {
    // HTTP/2 names the authority in `:authority`, which replaces `Host` (RFC 9113
    // §8.3.1); Pingora has checked that a `Host` sent beside it agrees.
    let host = req
        .headers
        .get(http::header::HOST)
        .map(|h| h.as_bytes())
        .or_else(|| req.uri.authority().map(|a| a.as_str().as_bytes()));
    client.target(req.raw_path(), host)
}

/// The answer to a request whose target cannot be understood: 421 for another origin
/// than its tunnel's or connection's, 400 otherwise.
pub(super) fn target_refused(e: TargetError) -> Answer {
    let status = match e {
        TargetError::Misdirected { .. } => 421,
        _ => 400,
    };
    bad_request(status, e)
}

/// Who sends the request, as the agent rules see it.
pub(super) fn requester<'a>(session: &'a Session, client: &'a ClientContext) -> Requester<'a> {
    let user_agent = session
        .req_header()
        .headers
        .get(http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok());
    client.requester(client_ip(session), user_agent)
}

/// The address the request's connection came from.
pub(super) fn client_ip(session: &Session) -> Option<IpAddr> {
    session
        .client_addr()
        .and_then(|a| a.as_inet())
        .map(|a| a.ip())
}
