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
pub(super) const OWN_RESPONSE_HEADERS: HeaderNames =
    HeaderNames::new(&["x-robots-decision", "x-robots-usage"]);

/// Removes [`OWN_RESPONSE_HEADERS`] from an origin's response, logging the forgery.
pub(super) fn strip_own_headers(response: &mut ResponseHeader, target: Option<&Target>) {
    if !OWN_RESPONSE_HEADERS.any_in(&response.headers) {
        return;
    }
    for name in OWN_RESPONSE_HEADERS.names {
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
pub(super) const NEVER_FORWARDED: HeaderNames = HeaderNames::new(&[
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
]);

/// A fixed set of lower-case header names, asked about for every message: a name is
/// compared with the set's only when its length is one of theirs (a bit of `lengths`),
/// so many of a request's names (`host`, `user-agent`, `referer`, ...) cost one test each.
pub(super) struct HeaderNames {
    /// The names, lower-case.
    names: &'static [&'static str],
    /// Bit `n` set: some name is `n` octets long (63: 63 or more).
    lengths: u64,
}

impl HeaderNames {
    /// The set of `names` (lower-case).
    pub(super) const fn new(names: &'static [&'static str]) -> HeaderNames {
        let mut lengths = 0;
        let mut i = 0;
        while i < names.len() {
            lengths |= 1 << min_63(names[i].len());
            i += 1;
        }
        HeaderNames { names, lengths }
    }

    /// Is `name` (lower-case, as `http` keeps names) one of the set?
    fn contains(&self, name: &http::HeaderName) -> bool {
        let name = name.as_str();
        self.lengths & (1 << min_63(name.len())) != 0 && self.names.contains(&name)
    }

    /// Does `headers` carry any of the set? One pass over the names it carries (a few),
    /// instead of a hashed lookup per name of the set.
    pub(super) fn any_in(&self, headers: &http::HeaderMap) -> bool {
        headers.keys().any(|name| self.contains(name))
    }

    /// Removes every header of `request` named in the set: one pass over the names it
    /// carries, and again per header removed; a hashed removal only for a name found.
    /// (A removal per listed name cost a handed-over request, which always carries one
    /// of them, a microsecond at its owner.)
    pub(super) fn remove_from(&self, request: &mut RequestHeader) {
        while let Some(name) = request.headers.keys().find(|n| self.contains(n)).cloned() {
            request.remove_header(&name);
        }
    }
}

/// `len`, or 63 when longer (a bit index of [`HeaderNames::lengths`]).
const fn min_63(len: usize) -> usize {
    if len < 63 {
        len
    } else {
        63
    }
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
    // Read as octets, without a copy: this runs on every answer.
    if let Some(last) = headers
        .get_all(http::header::TRANSFER_ENCODING)
        .iter()
        .next_back()
    {
        let coding = last.as_bytes().rsplit(|b| *b == b',').next();
        return !coding.is_some_and(|c| c.trim_ascii().eq_ignore_ascii_case(b"chunked"));
    }
    let mut length = None;
    for value in headers.get_all(http::header::CONTENT_LENGTH) {
        for part in value.as_bytes().split(|b| *b == b',') {
            let Some(n) = decimal(part.trim_ascii()) else {
                return true;
            };
            if length.is_some_and(|l| l != n) {
                return true;
            }
            length = Some(n);
        }
    }
    length.is_none()
}

/// `1*DIGIT` (RFC 9110 §8.6) as a number; `None` for anything else, or beyond `u64`.
fn decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |n, d| {
        let digit = d.is_ascii_digit().then(|| u64::from(d - b'0'))?;
        n.checked_mul(10)?.checked_add(digit)
    })
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
        assert!(ends_by_close(&answer(&[("Content-Length", "+2")]), &get));
        assert!(ends_by_close(&answer(&[("Content-Length", "2,")]), &get));
        assert!(ends_by_close(
            &answer(&[("Content-Length", "18446744073709551616")]),
            &get
        ));
        assert!(!ends_by_close(
            &answer(&[("Content-Length", "2"), ("Content-Length", " 2 ")]),
            &get
        ));
        assert!(!ends_by_close(
            &answer(&[
                ("Transfer-Encoding", "gzip"),
                ("Transfer-Encoding", " Chunked ")
            ]),
            &get
        ));
        assert!(ends_by_close(&answer(&[]), &get));
        assert!(!ends_by_close(&answer(&[]), &http::Method::HEAD));
        // The last coding of the last field decides, whatever lies between.
        let fields = [
            ("Transfer-Encoding", "chunked"),
            ("X-A", "1"),
            ("Transfer-Encoding", "gzip"),
        ];
        assert!(ends_by_close(&answer(&fields), &get));
        let fields = [("Content-Length", "x"), ("Transfer-Encoding", "chunked")];
        assert!(!ends_by_close(&answer(&fields), &get));
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
        NEVER_FORWARDED.remove_from(&mut request);
        let left: Vec<_> = request.headers.keys().map(|k| k.as_str()).collect();
        assert_eq!(left, ["user-agent"]);
        let mut wire = Vec::new();
        request.header_to_h1_wire(&mut wire);
        assert_eq!(wire, b"User-Agent: Bot/1\r\n");
    }

    #[test]
    fn a_set_holds_its_names_and_no_other_whatever_their_length() {
        for name in NEVER_FORWARDED.names {
            assert!(
                NEVER_FORWARDED.contains(&http::HeaderName::from_static(name)),
                "{name}"
            );
        }
        // Past 63 octets every length shares one bit.
        const LONG: &str =
            "x-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
        let names = HeaderNames::new(&[LONG]);
        assert!(names.contains(&http::HeaderName::from_static(LONG)));
        let longer = http::HeaderName::from_bytes(format!("{LONG}b").as_bytes()).expect("name");
        assert!(!names.contains(&longer));
        // Same lengths as listed names, not listed.
        for other in [
            "x-forwarded-for",
            "accept-encoding",
            "forwarde",
            "signatures",
        ] {
            let other = http::HeaderName::from_bytes(other.as_bytes()).expect("name");
            assert!(!NEVER_FORWARDED.contains(&other), "{other}");
        }
    }
}
