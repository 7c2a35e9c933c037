//! Fetching one robots.txt (SPEC §2) with Pingora's own HTTP connector.
//!
//! A plain, non-conditional `GET /robots.txt` with the crawler's User-Agent; redirects
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
use pingora::upstreams::peer::HttpPeer;

use crate::dns::Resolver;
use crate::egress::EgressPolicy;
use crate::robots::MAX_ROBOTS_BYTES;
use crate::target::{parse_authority, Origin, Scheme};

/// What one fetch came to.
#[derive(Clone, Debug)]
pub enum FetchOutcome {
    /// 2xx: the body (at most `MAX_ROBOTS_BYTES + 1` octets; more means truncated).
    Body {
        status: u16,
        body: Bytes,
        max_age: Option<Duration>,
        hops: u32,
    },
    /// 4xx other than 429, or redirects exhausted/looping: there is no robots.txt.
    NoRobots { status: Option<u16>, why: String },
    /// 429, 5xx or a network failure: the robots.txt could not be read.
    Unreachable {
        status: Option<u16>,
        why: String,
        retry_after: Option<Duration>,
    },
}

impl FetchOutcome {
    /// Metric label for the outcome (base classes of SPEC §2).
    pub fn class(&self) -> &'static str {
        match self {
            FetchOutcome::Body { body, .. } if body.len() > MAX_ROBOTS_BYTES => "too_large",
            FetchOutcome::Body { .. } => "2xx",
            FetchOutcome::NoRobots {
                status: Some(_), ..
            } => "4xx",
            FetchOutcome::NoRobots { status: None, .. } => "3xx_exhausted",
            FetchOutcome::Unreachable {
                status: Some(_), ..
            } => "5xx",
            FetchOutcome::Unreachable { status: None, .. } => "network",
        }
    }
}

pub struct Fetcher {
    connector: Connector,
    resolver: Arc<Resolver>,
    egress: Arc<EgressPolicy>,
    timeout: Duration,
    max_redirects: u32,
}

fn unreachable(why: impl Into<String>) -> FetchOutcome {
    FetchOutcome::Unreachable {
        status: None,
        why: why.into(),
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
            .map(Duration::from_secs)
    })
}

/// `Retry-After` in delta-seconds or as an HTTP date.
pub fn retry_after(value: &str) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let when = httpdate::parse_http_date(value).ok()?;
    Some(
        when.duration_since(std::time::SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

impl Fetcher {
    pub fn new(
        resolver: Arc<Resolver>,
        egress: Arc<EgressPolicy>,
        timeout: Duration,
        max_redirects: u32,
        ca_file: Option<String>,
    ) -> Fetcher {
        let mut options = pingora::connectors::ConnectorOptions::new(128);
        options.ca_file = ca_file;
        Fetcher {
            connector: Connector::new(Some(options)),
            resolver,
            egress,
            timeout,
            max_redirects,
        }
    }

    /// Fetches `origin`'s robots.txt as `user_agent`.
    pub async fn fetch(&self, origin: &Origin, user_agent: &str) -> FetchOutcome {
        match tokio::time::timeout(self.timeout, self.follow(origin, user_agent)).await {
            Ok(outcome) => outcome,
            Err(_) => unreachable(format!("timed out after {:?}", self.timeout)),
        }
    }

    async fn follow(&self, origin: &Origin, user_agent: &str) -> FetchOutcome {
        let mut current = origin.clone();
        let mut path = "/robots.txt".to_string();
        let mut seen = vec![(current.clone(), path.clone())];
        let mut hops = 0u32;
        loop {
            let response = match self.get(&current, &path, user_agent).await {
                Ok(response) => response,
                Err(why) => return unreachable(why),
            };
            let Response {
                status,
                location,
                body,
                max_age,
                retry_after,
            } = response;
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
                    current = next;
                    path = next_path;
                    hops += 1;
                }
                429 | 500..=599 => {
                    return FetchOutcome::Unreachable {
                        status: Some(status),
                        why: format!("HTTP {status}"),
                        retry_after,
                    };
                }
                400..=499 => {
                    return FetchOutcome::NoRobots {
                        status: Some(status),
                        why: format!("HTTP {status}"),
                    };
                }
                _ => return unreachable(format!("unexpected status {status}")),
            }
        }
    }

    async fn get(&self, origin: &Origin, path: &str, user_agent: &str) -> Result<Response, String> {
        self.egress
            .check_port(origin.port)
            .map_err(|r| r.to_string())?;
        let addrs = self
            .resolver
            .resolve(&origin.host)
            .await
            .map_err(|e| e.to_string())?;
        for ip in &addrs {
            self.egress.check_address(*ip).map_err(|r| r.to_string())?;
        }
        let addr = SocketAddr::new(addrs[0], origin.port);
        let mut peer = HttpPeer::new(addr, origin.scheme == Scheme::Https, origin.host_name());
        peer.options.connection_timeout = Some(self.timeout);
        peer.options.read_timeout = Some(self.timeout);
        peer.options.write_timeout = Some(self.timeout);

        let (mut session, _reused) = self
            .connector
            .get_http_session(&peer)
            .await
            .map_err(|e| format!("connect {addr}: {e}"))?;
        let mut request =
            RequestHeader::build("GET", path.as_bytes(), None).map_err(|e| e.to_string())?;
        let header = |e: Box<pingora::Error>| e.to_string();
        request
            .insert_header("Host", origin.authority())
            .map_err(header)?;
        request
            .insert_header("User-Agent", user_agent)
            .map_err(header)?;
        request
            .insert_header("Accept", "text/plain, */*;q=0.5")
            .map_err(header)?;
        session
            .write_request_header(Box::new(request))
            .await
            .map_err(|e| e.to_string())?;
        session
            .finish_request_body()
            .await
            .map_err(|e| e.to_string())?;
        session
            .read_response_header()
            .await
            .map_err(|e| format!("reading response: {e}"))?;
        let head = session.response_header().ok_or("no response header")?;
        let status = head.status.as_u16();
        let text = |name: &str| {
            head.headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let location = text("location");
        let max_age = text("cache-control").as_deref().and_then(max_age);
        let retry = text("retry-after").as_deref().and_then(retry_after);

        let mut body = BytesMut::new();
        let mut complete = false;
        if (200..300).contains(&status) {
            while body.len() <= MAX_ROBOTS_BYTES {
                match session.read_response_body().await {
                    Ok(Some(chunk)) => body.extend_from_slice(&chunk),
                    Ok(None) => {
                        complete = true;
                        break;
                    }
                    Err(e) => return Err(format!("reading body: {e}")),
                }
            }
        }
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
        })
    }
}

struct Response {
    status: u16,
    location: Option<String>,
    body: Bytes,
    max_age: Option<Duration>,
    retry_after: Option<Duration>,
}

/// The origin and path a `Location` header points to, relative to `base`.
fn resolve_location(base: &Origin, location: &str) -> Option<(Origin, String)> {
    let location = location.trim();
    if let Some((scheme, rest)) = location.split_once("://") {
        let scheme = match scheme.to_ascii_lowercase().as_str() {
            "http" => Scheme::Http,
            "https" => Scheme::Https,
            _ => return None,
        };
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
