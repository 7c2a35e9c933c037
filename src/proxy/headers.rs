//! Headers robotsgate changes on the way through: what a client's request never takes
//! to the origin, what only robotsgate may set on a response (an origin's own copies are
//! removed), and the `X-Robots-Usage` mark of a forwarded response.

use pingora::http::{RequestHeader, ResponseHeader};

use crate::policy::target::Target;
use crate::policy::usage::{header_statements, origin_header_member, UsageVerdict};
use crate::robots::UsageSource;

/// The `X-Robots-Usage` of a forwarded response: the usage verdict for the crawler's
/// purposes, then the origin's own `Content-Usage`/`Content-Signal` headers (relayed
/// unchanged, counted, and named here: they govern the use of what was received, so
/// they never turn the response into an error). `None` when there is nothing to say.
pub(super) fn usage_mark(
    verdict: Option<&UsageVerdict>,
    response: &ResponseHeader,
) -> Option<String> {
    // Names made once: every forwarded response is looked up for both.
    static ORIGIN_USAGE: [(http::HeaderName, UsageSource); 2] = [
        (
            http::HeaderName::from_static("content-usage"),
            UsageSource::ContentUsage,
        ),
        (
            http::HeaderName::from_static("content-signal"),
            UsageSource::ContentSignal,
        ),
    ];
    let mut mark = verdict.map(UsageVerdict::header).unwrap_or_default();
    for (name, source) in &ORIGIN_USAGE {
        for value in response.headers.get_all(name) {
            let value = value.as_bytes();
            for (purpose, preference) in header_statements(*source, value) {
                crate::telemetry::usage::record_header(purpose, preference);
            }
            if !mark.is_empty() {
                mark.push_str(", ");
            }
            mark.push_str(&origin_header_member(*source, value));
        }
    }
    (!mark.is_empty()).then_some(mark)
}

/// Response headers only robotsgate sets: an origin's own are removed before
/// robotsgate adds its, so a crawler can trust that these came from robotsgate.
pub(super) const OWN_RESPONSE_HEADERS: &[&str] = &["x-robots-decision", "x-robots-usage"];

/// Removes [`OWN_RESPONSE_HEADERS`] from an origin's response, logging the forgery.
pub(super) fn strip_own_headers(response: &mut ResponseHeader, target: Option<&Target>) {
    if !has_any(&response.headers, OWN_RESPONSE_HEADERS) {
        return;
    }
    for name in OWN_RESPONSE_HEADERS {
        if response.remove_header(*name).is_some() {
            let origin: &dyn std::fmt::Display = match target {
                Some(t) => &t.origin,
                None => &"",
            };
            crate::telemetry::metrics::record_forged_header();
            log::warn!("origin {origin} sent robotsgate's own response header {name}: removed");
        }
    }
}

/// Request headers that never go upstream: the proxy's own credentials, and headers
/// that some servers and frameworks (IIS URL Rewrite, Symfony, Laravel, Zend, nginx
/// setups, Envoy) read as the path or the site to serve, which would let a client fetch
/// a path the robots decision never saw. Method overrides go too: a crawler's GET stays
/// a GET. Removed before robotsgate signs, so only its own signature headers go.
pub(super) const NEVER_FORWARDED: &[&str] = &[
    "proxy-authorization",
    "proxy-connection",
    "x-original-url",
    "x-rewrite-url",
    "x-override-url",
    "x-original-uri",
    "x-forwarded-uri",
    "x-forwarded-url",
    "x-forwarded-path",
    "x-forwarded-prefix",
    "x-envoy-original-path",
    // Virtual-host overrides: a server picking another site by them would serve a path
    // judged against this origin's robots.txt.
    "x-forwarded-host",
    "x-forwarded-server",
    "x-host",
    "forwarded",
    "x-proxy-url",
    "x-http-destinationurl",
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
    // A request's signature and its offer to pay are the fleet's to make (an identity's
    // signature, a budget's offer), never a client's: a client's own would sign or pay
    // in the fleet's name, signed or not.
    "signature",
    "signature-input",
    "signature-agent",
    "crawler-max-price",
    "crawler-exact-price",
    // The fleet's peer channel context: a member's own only, never a client's.
    "robotsgate-peer",
];

/// Removes every header of `request` named in `names` (lower-case): one pass over the
/// names it carries (a few) per header removed, a hashed removal only for a name found.
/// (A removal per listed name cost a handed-over request, which always carries one of
/// them, a microsecond at its owner.)
pub(super) fn remove_listed(request: &mut RequestHeader, names: &[&str]) {
    let listed = |name: &&http::HeaderName| names.contains(&name.as_str());
    while let Some(name) = request.headers.keys().find(listed).cloned() {
        request.remove_header(&name);
    }
}

/// Does `headers` carry any of `names` (lower-case)? One pass over the names the peer
/// sent (a few), instead of a hashed removal per listed name on every message: the
/// removals run only when this says so.
pub(super) fn has_any(headers: &http::HeaderMap, names: &[&str]) -> bool {
    headers.keys().any(|name| names.contains(&name.as_str()))
}

/// A request whose end is its header: no `Content-Length` (or 0), no `Transfer-Encoding`.
pub(super) fn request_has_no_body(req: &RequestHeader) -> bool {
    let length = req
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok());
    !req.headers.contains_key(http::header::TRANSFER_ENCODING)
        && length.is_none_or(|l| l.trim() == "0")
}

/// Does `response` (to a request of `method`) end only when its connection closes: a
/// body neither `Content-Length` (one length, however often repeated) nor a transfer
/// coding ending in exactly `chunked` frames (RFC 9112 §6.3)? Such an answer is never
/// sent with `Connection: keep-alive`: the next reader could not tell where it ended.
pub(super) fn ends_by_close(response: &ResponseHeader, method: &http::Method) -> bool {
    let status = response.status.as_u16();
    if method == http::Method::HEAD || matches!(status, 100..=199 | 204 | 304) {
        return false;
    }
    let headers = &response.headers;
    if let Some(last) = headers
        .get_all(http::header::TRANSFER_ENCODING)
        .iter()
        .next_back()
    {
        let codings = String::from_utf8_lossy(last.as_bytes()).to_ascii_lowercase();
        return codings.rsplit(',').next().map(str::trim) != Some("chunked");
    }
    let mut lengths = headers
        .get_all(http::header::CONTENT_LENGTH)
        .iter()
        .flat_map(|v| {
            String::from_utf8_lossy(v.as_bytes())
                .split(',')
                .map(|n| n.trim().parse::<u64>().ok())
                .collect::<Vec<_>>()
        });
    match lengths.next() {
        Some(Some(first)) => !lengths.all(|n| n == Some(first)),
        _ => true,
    }
}

#[cfg(test)]
mod framing_tests {
    use super::*;

    fn answer(fields: &[(&str, &str)]) -> ResponseHeader {
        let mut r = ResponseHeader::build(200, None).expect("head");
        for (k, v) in fields {
            r.append_header(k.to_string(), *v).expect("field");
        }
        r
    }

    #[test]
    fn answers_without_a_framing_end_by_close() {
        let get = http::Method::GET;
        assert!(!ends_by_close(&answer(&[("Content-Length", "2")]), &get));
        assert!(!ends_by_close(&answer(&[("Content-Length", "2, 2")]), &get));
        assert!(!ends_by_close(
            &answer(&[("Transfer-Encoding", "gzip, chunked")]),
            &get
        ));
        assert!(ends_by_close(
            &answer(&[("Transfer-Encoding", "xchunked")]),
            &get
        ));
        assert!(ends_by_close(
            &answer(&[("Transfer-Encoding", "chunked, gzip")]),
            &get
        ));
        assert!(ends_by_close(&answer(&[("Content-Length", "2, 3")]), &get));
        assert!(ends_by_close(&answer(&[]), &get));
        assert!(!ends_by_close(&answer(&[]), &http::Method::HEAD));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_header_goes_whatever_its_case_and_count() {
        let mut request = RequestHeader::build("GET", b"/", None).expect("request");
        for (name, value) in [
            ("Proxy-Authorization", "Basic eDp5"),
            ("proxy-authorization", "Basic eTp6"),
            ("robotsgate-peer", "e30"),
            ("X-Forwarded-Host", "elsewhere.example"),
            ("User-Agent", "Bot/1"),
            ("Signature", "sig1=:AA==:"),
        ] {
            request.append_header(name, value).expect("header");
        }
        remove_listed(&mut request, NEVER_FORWARDED);
        let left: Vec<_> = request.headers.keys().map(|k| k.as_str()).collect();
        assert_eq!(left, ["user-agent"]);
        let mut wire = Vec::new();
        request.header_to_h1_wire(&mut wire);
        assert_eq!(wire, b"User-Agent: Bot/1\r\n");
    }
}
