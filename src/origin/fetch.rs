//! Fetching one robots.txt (SPEC §2) with Pingora's own HTTP connector.
//!
//! A plain, non-conditional `GET /robots.txt` with one configured User-Agent
//! (`robots.user_agent`: the copy is shared by every crawler); redirects
//! followed (across origins too) up to the configured hop count, with loop detection;
//! the body read only up to [`MAX_ROBOTS_BYTES`] + 1 octets; every hop's destination
//! passes the same egress checks as crawl traffic; the whole exchange is bounded by one
//! timeout. The result is classified, not interpreted: the store decides what an outcome
//! means for the origin's policy.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use pingora::connectors::http::Connector;
use pingora::http::RequestHeader;
use pingora::protocols::http::client::HttpSession;
use pingora::upstreams::peer::HttpPeer;

use crate::origin::dns::Resolver;
use crate::policy::egress::EgressPolicy;
use crate::policy::target::{parse_authority, Origin, Scheme};
use crate::robots::tdmrep::MAX_TDMREP_BYTES;
use crate::robots::MAX_ROBOTS_BYTES;
use crate::telemetry::metrics::RobotsFetch;

/// A file robotsgate fetches from an origin for itself: its robots.txt, or TDMRep's
/// `/.well-known/tdmrep.json`. Both are fetched the same way; each has its size bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OwnFile {
    /// `/robots.txt`, read up to [`MAX_ROBOTS_BYTES`].
    RobotsTxt,
    /// `/.well-known/tdmrep.json`, read up to [`MAX_TDMREP_BYTES`].
    TdmRep,
}

impl OwnFile {
    /// Its path on every origin.
    pub fn path(self) -> &'static str {
        match self {
            OwnFile::RobotsTxt => "/robots.txt",
            OwnFile::TdmRep => "/.well-known/tdmrep.json",
        }
    }

    /// Octets read at most (one more means the file is larger).
    pub fn max_bytes(self) -> usize {
        match self {
            OwnFile::RobotsTxt => MAX_ROBOTS_BYTES,
            OwnFile::TdmRep => MAX_TDMREP_BYTES,
        }
    }

    /// Its URL on `origin`.
    pub fn url(self, origin: &Origin) -> String {
        format!("{origin}{}", self.path())
    }

    /// The `Accept` its request sends.
    fn accept(self) -> &'static str {
        match self {
            OwnFile::RobotsTxt => "text/plain, */*;q=0.5",
            OwnFile::TdmRep => "application/json, */*;q=0.5",
        }
    }
}

/// What one fetch came to.
#[derive(Clone, Debug)]
pub enum FetchOutcome {
    /// 2xx: the body (at most the file's bound + 1 octets; more means truncated).
    Body {
        /// The status.
        status: u16,
        /// The body.
        body: Bytes,
        /// How long the origin says the file may be kept (`Cache-Control: max-age`).
        max_age: Option<Duration>,
        /// Redirects followed to reach it.
        hops: u32,
    },
    /// 4xx other than 429, or redirects exhausted/looping: there is no robots.txt.
    NoRobots {
        /// The status, when the origin answered.
        status: Option<u16>,
        /// What happened, for people.
        why: String,
    },
    /// 429, 5xx or a network failure: the robots.txt could not be read.
    Unreachable {
        /// The status, when the origin answered.
        status: Option<u16>,
        /// What happened, for people.
        why: String,
        /// Short and header-safe: `http-503`, `timeout`, `connect-refused`,
        /// `dns-nxdomain`, `tls-handshake-failed: …` (see [`is_certificate_failure`]).
        cause: String,
        /// How long the origin asked to be left alone (`Retry-After`).
        retry_after: Option<Duration>,
    },
}

/// What a fetch's answers said beyond its outcome, for the evidence: the URLs it was
/// redirected through, and the last answer's caching headers.
#[derive(Clone, Debug, Default)]
pub struct FetchFacts {
    /// Each URL a redirect led to, in order.
    pub redirects: Vec<String>,
    /// The last answer's `Cache-Control`.
    pub cache_control: Option<String>,
    /// Its `ETag`.
    pub etag: Option<String>,
    /// Its `Last-Modified`.
    pub last_modified: Option<String>,
}

/// Is this cause a failed verification of the origin's certificate? Not transient (no
/// retry will fix it soon), so clients are told 502, like a page whose origin fails it.
pub fn is_certificate_failure(cause: &str) -> bool {
    cause.starts_with("tls-")
}

/// A failure's detail made safe inside a quoted header value: printable ASCII without
/// `"` and `\`, at most 160 characters.
pub fn header_safe(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            ' '..='~' if c != '"' && c != '\\' => c,
            _ => ' ',
        })
        .take(160)
        .collect()
}

/// The short cause of a failed exchange with an origin.
fn network_cause(e: &pingora::Error) -> String {
    use pingora::ErrorType;
    match e.etype() {
        ErrorType::TLSHandshakeFailure | ErrorType::InvalidCert => {
            let detail = e
                .cause
                .as_ref()
                .map(|c| c.to_string())
                .or_else(|| e.context.as_ref().map(|c| c.as_str().to_string()))
                .unwrap_or_else(|| "certificate not trusted or invalid".into());
            format!("tls-handshake-failed: {}", header_safe(&detail))
        }
        ErrorType::ConnectRefused => "connect-refused".into(),
        ErrorType::ConnectTimedout => "connect-timeout".into(),
        ErrorType::ReadTimedout | ErrorType::WriteTimedout => "timeout".into(),
        ErrorType::ConnectionClosed => "connection-closed".into(),
        ErrorType::ReadError | ErrorType::WriteError => "connection-reset".into(),
        ErrorType::ConnectNoRoute => "no-route".into(),
        _ => "network-error".into(),
    }
}

/// Why one exchange failed: its short cause and the whole story.
struct FetchFailure {
    /// Short and header-safe (`timeout`, `connect-refused`, …).
    cause: String,
    /// What happened, for people.
    why: String,
}

impl FetchFailure {
    /// A failure with its short cause and its story.
    fn new(cause: impl Into<String>, why: impl Into<String>) -> FetchFailure {
        FetchFailure {
            cause: cause.into(),
            why: why.into(),
        }
    }

    /// A network failure while `context`, from Pingora's error.
    fn network(context: &str, e: &pingora::Error) -> FetchFailure {
        FetchFailure::new(network_cause(e), format!("{context}: {e}"))
    }
}

impl FetchOutcome {
    /// The outcome's class (base classes of SPEC §2), as the metrics count it.
    pub fn class(&self) -> RobotsFetch {
        match self {
            FetchOutcome::Body { body, .. } if body.len() > MAX_ROBOTS_BYTES => {
                RobotsFetch::TooLarge
            }
            FetchOutcome::Body { .. } => RobotsFetch::Ok,
            FetchOutcome::NoRobots {
                status: Some(_), ..
            } => RobotsFetch::ClientError,
            FetchOutcome::NoRobots { status: None, .. } => RobotsFetch::RedirectsExhausted,
            FetchOutcome::Unreachable {
                status: Some(_), ..
            } => RobotsFetch::ServerError,
            FetchOutcome::Unreachable { status: None, .. } => RobotsFetch::Network,
        }
    }
}

/// Fetches robots.txt files: resolves, checks egress, connects (TLS for HTTPS), follows redirects
/// within limits.
pub struct Fetcher {
    /// Pingora's connector, with the upstream trust roots.
    connector: Connector,
    /// Resolves origin names.
    resolver: Arc<Resolver>,
    /// Where fetches may go.
    egress: Arc<EgressPolicy>,
    /// The whole fetch's deadline (`robots.fetch_timeout_seconds`).
    timeout: Duration,
    /// Redirects followed at most.
    max_redirects: u32,
    /// `robots.user_agent`.
    user_agent: String,
    /// Marks each socket (`transparent.upstream_mark`).
    socket_hook: Option<crate::origin::loops::SocketHook>,
    /// The `Via` entry fetches carry (transparent listeners configured).
    via: Option<&'static str>,
    /// The identity fetches are signed as (`agent.default_identity`), if any.
    identity: Option<Arc<crate::identity::Identity>>,
    /// Offer h2 to HTTPS origins (`upstream.http2: auto`), as page requests do: an
    /// origin that speaks only HTTP/2 has a readable robots.txt too.
    http2: bool,
}

/// The outcome of a fetch that could not read robots.txt.
fn unreachable(failure: FetchFailure) -> FetchOutcome {
    FetchOutcome::Unreachable {
        status: None,
        why: failure.why,
        cause: failure.cause,
        retry_after: None,
    }
}

/// `Cache-Control: max-age=N` (ignoring `no-cache`-style directives: SPEC §2 caches
/// robots.txt regardless; only the lifetime is taken from the origin).
fn max_age(value: &str) -> Option<Duration> {
    value.split(',').find_map(|d| {
        let (k, v) = d.trim().split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case("max-age")
            .then(|| v.trim().trim_matches('"').parse::<u64>().ok())
            .flatten()
            .map(|s| crate::config::seconds(s as f64))
    })
}

/// `Retry-After` in delta-seconds or as an HTTP date.
pub fn retry_after(value: &str) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // Twenty digits are still a (very long) pause, not a parse failure.
        return value.parse::<f64>().ok().map(crate::config::seconds);
    }
    let when = httpdate::parse_http_date(value).ok()?;
    Some(
        when.duration_since(std::time::SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

impl Fetcher {
    /// A fetcher with its connector, resolver, egress policy and settings.
    pub fn new(
        resolver: Arc<Resolver>,
        egress: Arc<EgressPolicy>,
        timeout: Duration,
        max_redirects: u32,
        ca_file: Option<String>,
        user_agent: String,
        own: crate::origin::loops::OwnTraffic,
    ) -> Fetcher {
        let mut options = pingora::connectors::ConnectorOptions::new(128);
        options.ca_file = ca_file;
        Fetcher {
            connector: Connector::new(Some(options)),
            resolver,
            egress,
            timeout,
            max_redirects,
            user_agent,
            socket_hook: crate::origin::loops::hook(own.mark),
            via: own.via(),
            identity: None,
            http2: false,
        }
    }

    /// Signs every fetch as `identity` (robots.txt fetches are requests of the fleet's
    /// like any other: an origin that asks crawlers to sign asks it of these too).
    pub fn signed_as(mut self, identity: Option<Arc<crate::identity::Identity>>) -> Fetcher {
        self.identity = identity;
        self
    }

    /// Offers h2 (then HTTP/1.1) to HTTPS origins when `http2`.
    pub fn http2(mut self, http2: bool) -> Fetcher {
        self.http2 = http2;
        self
    }

    /// Fetches `origin`'s robots.txt (as the configured `robots.user_agent`, never a
    /// client's: the copy serves every crawler, so no crawler's identity may shape it).
    pub async fn fetch(&self, origin: &Origin) -> FetchOutcome {
        self.fetch_file(origin, OwnFile::RobotsTxt).await.0
    }

    /// Fetches `file` from `origin`, with what its answers said besides (none after a
    /// timeout).
    pub async fn fetch_file(&self, origin: &Origin, file: OwnFile) -> (FetchOutcome, FetchFacts) {
        let mut facts = FetchFacts::default();
        match tokio::time::timeout(self.timeout, self.follow(origin, file, &mut facts)).await {
            Ok(outcome) => (outcome, facts),
            Err(_) => (
                unreachable(FetchFailure::new(
                    "timeout",
                    format!("timed out after {:?}", self.timeout),
                )),
                facts,
            ),
        }
    }

    /// Fetches `origin`'s `file`, following redirects within the limits; what the
    /// answers said goes into `facts`.
    async fn follow(&self, origin: &Origin, file: OwnFile, facts: &mut FetchFacts) -> FetchOutcome {
        let mut current = origin.clone();
        let mut path = file.path().to_string();
        let mut seen = vec![(current.clone(), path.clone())];
        let mut hops = 0u32;
        loop {
            let response = match self.get(&current, &path, file).await {
                Ok(response) => response,
                Err(failure) => return unreachable(failure),
            };
            let Response {
                status,
                location,
                body,
                max_age,
                retry_after,
                cache_control,
                etag,
                last_modified,
            } = response;
            (facts.cache_control, facts.etag, facts.last_modified) =
                (cache_control, etag, last_modified);
            match status {
                200..=299 => {
                    return FetchOutcome::Body {
                        status,
                        body,
                        max_age,
                        hops,
                    };
                }
                300..=399 => {
                    let Some(location) = location else {
                        return FetchOutcome::NoRobots {
                            status: Some(status),
                            why: format!("{status} without Location"),
                        };
                    };
                    if hops >= self.max_redirects {
                        return FetchOutcome::NoRobots {
                            status: None,
                            why: format!("more than {} redirects", self.max_redirects),
                        };
                    }
                    let Some((next, next_path)) = resolve_location(&current, &location) else {
                        return FetchOutcome::NoRobots {
                            status: None,
                            why: format!("unusable redirect to {location}"),
                        };
                    };
                    if seen.contains(&(next.clone(), next_path.clone())) {
                        return FetchOutcome::NoRobots {
                            status: None,
                            why: "redirect loop".into(),
                        };
                    }
                    seen.push((next.clone(), next_path.clone()));
                    facts.redirects.push(format!("{next}{next_path}"));
                    current = next;
                    path = next_path;
                    hops += 1;
                }
                429 | 500..=599 => {
                    return FetchOutcome::Unreachable {
                        status: Some(status),
                        why: format!("HTTP {status}"),
                        cause: format!("http-{status}"),
                        retry_after,
                    };
                }
                400..=499 => {
                    return FetchOutcome::NoRobots {
                        status: Some(status),
                        why: format!("HTTP {status}"),
                    };
                }
                _ => {
                    return unreachable(FetchFailure::new(
                        format!("http-{status}"),
                        format!("unexpected status {status}"),
                    ))
                }
            }
        }
    }

    /// The address a fetch from `origin` connects to (the first allowed one), if its
    /// name resolves: what `pacing.key: address` paces the fetch by.
    pub async fn address(&self, origin: &Origin) -> Option<std::net::IpAddr> {
        self.destination(origin).await.ok()
    }

    /// The first address of `origin` that egress allows, or why there is none.
    async fn destination(&self, origin: &Origin) -> Result<std::net::IpAddr, FetchFailure> {
        let addrs = crate::origin::dns::allowed_destination(&self.resolver, &self.egress, origin)
            .await
            .map_err(|r| FetchFailure::new("egress-denied", r.to_string()))?
            .map_err(|e| FetchFailure::new(e.cause, e.message))?;
        addrs
            .first()
            .copied()
            .ok_or_else(|| FetchFailure::new("dns-no-address", "the name has no address"))
    }

    /// One GET of `path` at `origin`: resolved, checked, paced by its caller, read within limits.
    async fn get(
        &self,
        origin: &Origin,
        path: &str,
        file: OwnFile,
    ) -> Result<Response, FetchFailure> {
        let addr = SocketAddr::new(self.destination(origin).await?, origin.port);
        let mut peer = HttpPeer::new(addr, origin.scheme == Scheme::Https, origin.host_name());
        peer.options.connection_timeout = Some(self.timeout);
        peer.options.read_timeout = Some(self.timeout);
        peer.options.write_timeout = Some(self.timeout);
        peer.options.upstream_tcp_sock_tweak_hook = self.socket_hook.clone();
        if self.http2 && origin.scheme == Scheme::Https {
            peer.options.alpn = pingora::protocols::ALPN::H2H1;
        }

        let (mut session, _reused) = self
            .connector
            .get_http_session(&peer)
            .await
            .map_err(|e| FetchFailure::network(&format!("connect {addr}"), &e))?;
        let request = self.request(&session, origin, path, file)?;
        session
            .write_request_header(Box::new(request))
            .await
            .map_err(|e| FetchFailure::network("sending request", &e))?;
        session
            .finish_request_body()
            .await
            .map_err(|e| FetchFailure::network("sending request", &e))?;
        session
            .read_response_header()
            .await
            .map_err(|e| FetchFailure::network("reading response", &e))?;
        let head = session
            .response_header()
            .ok_or_else(|| FetchFailure::new("network-error", "no response header"))?;
        let status = head.status.as_u16();
        let text = |name: &str| {
            head.headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let location = text("location");
        let cache_control = text("cache-control");
        let max_age = cache_control.as_deref().and_then(max_age);
        let (etag, last_modified) = (text("etag"), text("last-modified"));
        let retry = text("retry-after").as_deref().and_then(retry_after);

        let (body, complete) = if (200..300).contains(&status) {
            read_body(&mut session, file.max_bytes()).await?
        } else {
            (BytesMut::new(), false)
        };
        // Only a fully read answer leaves the connection reusable.
        if complete || !(200..300).contains(&status) && session.response_done() {
            self.connector
                .release_http_session(session, &peer, None)
                .await;
        }
        Ok(Response {
            status,
            location,
            body: body.freeze(),
            max_age,
            retry_after: retry,
            cache_control,
            etag,
            last_modified,
        })
    }

    /// The `GET` for `path` on `origin` over `session`: the authority in `:authority`
    /// for HTTP/2 (an h2 server may refuse a `Host` beside it, as nginx does), in `Host`
    /// for HTTP/1.1; robotsgate's User-Agent, its `Via` when it sends one, and the
    /// default identity's signature.
    fn request(
        &self,
        session: &HttpSession,
        origin: &Origin,
        path: &str,
        file: OwnFile,
    ) -> Result<RequestHeader, FetchFailure> {
        let internal = |e: Box<pingora::Error>| FetchFailure::new("internal-error", e.to_string());
        let authority = origin.authority().to_string();
        let mut request = if matches!(session, HttpSession::H2(_)) {
            let mut request =
                RequestHeader::build("GET", path.as_bytes(), None).map_err(internal)?;
            let uri = http::Uri::builder()
                .scheme("https")
                .authority(authority.as_str())
                .path_and_query(path)
                .build()
                .map_err(|e| FetchFailure::new("internal-error", e.to_string()))?;
            request.set_uri(uri);
            request
        } else {
            let mut request =
                RequestHeader::build("GET", path.as_bytes(), None).map_err(internal)?;
            request
                .insert_header("Host", &authority)
                .map_err(internal)?;
            request
        };
        request
            .insert_header("User-Agent", self.user_agent.as_str())
            .map_err(internal)?;
        request
            .insert_header("Accept", file.accept())
            .map_err(internal)?;
        if let Some(via) = self.via {
            request.insert_header("Via", via).map_err(internal)?;
        }
        if let Some(identity) = &self.identity {
            // robots.txt is free to read: fetches never offer to pay.
            let signed = identity.sign(&authority, None);
            signed.set_on(&mut request).map_err(internal)?;
            crate::telemetry::metrics::record_signed(&identity.name);
        }
        Ok(request)
    }
}

/// A 2xx answer's body, read to its end or just past `limit`; whether it was read to
/// its end.
async fn read_body(
    session: &mut HttpSession,
    limit: usize,
) -> Result<(BytesMut, bool), FetchFailure> {
    let mut body = BytesMut::new();
    while body.len() <= limit {
        match session.read_response_body().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            Ok(None) => return Ok((body, true)),
            Err(e) => {
                let cause = match e.etype() {
                    pingora::ErrorType::ReadTimedout => "timeout",
                    _ => "truncated-body",
                };
                return Err(FetchFailure::new(cause, format!("reading body: {e}")));
            }
        }
    }
    Ok((body, false))
}

/// One answer, as much of it as a fetch needs.
struct Response {
    /// The status.
    status: u16,
    /// `Location`, for a redirect.
    location: Option<String>,
    /// The body, read up to the size limit (one octet more means truncated).
    body: Bytes,
    /// `Cache-Control: max-age`.
    max_age: Option<Duration>,
    /// `Retry-After`.
    retry_after: Option<Duration>,
    /// `Cache-Control`, as sent.
    cache_control: Option<String>,
    /// `ETag`.
    etag: Option<String>,
    /// `Last-Modified`.
    last_modified: Option<String>,
}

/// The origin and path a `Location` header points to, relative to `base`.
fn resolve_location(base: &Origin, location: &str) -> Option<(Origin, String)> {
    let location = location.trim();
    if let Some((scheme, rest)) = location.split_once("://") {
        let scheme = Scheme::parse(scheme)?;
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let origin = parse_authority(&rest[..end], scheme).ok()?;
        let path = &rest[end..];
        let path = if path.is_empty() || path.starts_with('#') {
            "/"
        } else {
            path
        };
        return Some((origin, path.split('#').next().unwrap_or("/").to_string()));
    }
    if let Some(rest) = location.strip_prefix("//") {
        return resolve_location(base, &format!("{}://{rest}", base.scheme.as_str()));
    }
    let path = if location.starts_with('/') {
        location.to_string()
    } else {
        format!("/{location}")
    };
    Some((
        base.clone(),
        path.split('#').next().unwrap_or("/").to_string(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_control_max_age() {
        assert_eq!(
            max_age("public, max-age=3600"),
            Some(Duration::from_secs(3600))
        );
        assert_eq!(max_age("no-cache"), None);
        assert_eq!(max_age("max-age=abc"), None);
    }

    #[test]
    fn retry_after_forms() {
        assert_eq!(retry_after("120"), Some(Duration::from_secs(120)));
        assert_eq!(
            retry_after("Wed, 21 Oct 2015 07:28:00 GMT"),
            Some(Duration::ZERO)
        );
        assert_eq!(retry_after("soon"), None);
        assert_eq!(
            retry_after("100000000000000000000000"),
            Some(crate::config::MAX_DURATION)
        );
    }

    #[test]
    fn locations() {
        let base = parse_authority("a.com:8080", Scheme::Http).expect("origin");
        let (o, p) = resolve_location(&base, "/robots2.txt").expect("relative");
        assert_eq!(
            (o.to_string(), p.as_str()),
            ("http://a.com:8080".into(), "/robots2.txt")
        );
        let (o, p) = resolve_location(&base, "https://B.com/r.txt#x").expect("absolute");
        assert_eq!(
            (o.to_string(), p.as_str()),
            ("https://b.com".into(), "/r.txt")
        );
        let (o, _) = resolve_location(&base, "//c.com/r").expect("scheme-relative");
        assert_eq!(o.to_string(), "http://c.com");
        assert!(resolve_location(&base, "ftp://x/").is_none());
    }
}
