//! Request → origin + canonical path: the first step of the pipeline.
//!
//! A crawler speaks to robotsgate in one of two ways, and both end here as the same
//! [`Target`]:
//! * explicit proxy: an absolute-form target, `GET http://host:port/path HTTP/1.1`;
//! * transparent (or inside a CONNECT tunnel): an origin-form target, `GET /path`, with
//!   the origin in the `Host` header and the scheme known from the listener.
//!
//! The origin is normalised as SPEC §1 says (lower-case host, IDN as punycode, default
//! port filled in) so that one robots.txt serves all spellings of it, and the path is made
//! canonical ([`CanonicalPath`]) once: the decision is made on it and it is what the
//! origin receives. Pure code: no I/O, no proxy types.

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};

use crate::robots::CanonicalPath;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
/// An origin's scheme.
pub enum Scheme {
    /// `http://`
    Http,
    /// `https://`
    Https,
}

impl Scheme {
    /// 80 or 443.
    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }

    /// `http` or `https`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }

    /// `http` or `https`, in any case; the one place a scheme is read.
    pub fn parse(text: &str) -> Option<Scheme> {
        if text.eq_ignore_ascii_case("http") {
            Some(Scheme::Http)
        } else if text.eq_ignore_ascii_case("https") {
            Some(Scheme::Https)
        } else {
            None
        }
    }
}

/// Host part of an origin: a lower-case ASCII name or an IP literal.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Host {
    /// A host name, punycode, lower-case, without a trailing dot (a box, not a
    /// `String`: every held origin has one, and it never grows).
    Name(Box<str>),
    /// An IP literal.
    Ip(IpAddr),
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(name) => f.write_str(name),
            Host::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
            Host::Ip(IpAddr::V4(ip)) => {
                // `Ipv4Addr`'s own `Display` goes through the formatting machinery once
                // per octet; an origin is written on every request (log line, `Host`
                // check), so its octets are written with `itoa`.
                let mut digits = itoa::Buffer::new();
                let [a, b, c, d] = ip.octets();
                f.write_str(digits.format(a))?;
                for octet in [b, c, d] {
                    f.write_str(".")?;
                    f.write_str(digits.format(octet))?;
                }
                Ok(())
            }
        }
    }
}

/// Scheme, host and port (SPEC §1): one robots.txt each.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Origin {
    /// `http` or `https`.
    pub scheme: Scheme,
    /// The host, name or address.
    pub host: Host,
    /// The port, the scheme's default filled in.
    pub port: u16,
}

impl Origin {
    /// `host` or `host:port` as it goes into a `Host` header (default port omitted).
    pub fn authority(&self) -> Authority<'_> {
        Authority(self)
    }

    /// `scheme://authority/robots.txt`.
    pub fn robots_url(&self) -> String {
        format!("{self}/robots.txt")
    }

    /// The host name as written in the origin, when it is a name (not an IP literal).
    pub fn name(&self) -> Option<&str> {
        match &self.host {
            Host::Name(name) => Some(name),
            Host::Ip(_) => None,
        }
    }

    /// The name to resolve and to send as TLS SNI (no brackets around IPv6).
    pub fn host_name(&self) -> String {
        match &self.host {
            Host::Name(name) => name.to_string(),
            // An HTTPS request's peer is named on every request: `Host`'s own digits
            // (with `itoa`), not `Ipv4Addr`'s formatting machinery.
            Host::Ip(IpAddr::V4(_)) => self.host.to_string(),
            Host::Ip(ip) => ip.to_string(),
        }
    }
}

impl Origin {
    /// Reads `scheme://host[:port]` (as `Display` writes it, a trailing `/` allowed)
    /// back into an origin.
    pub fn parse(text: &str) -> Result<Origin, TargetError> {
        let text = text.trim_end_matches('/');
        let (scheme, authority) = text.split_once("://").ok_or(TargetError::Unusable(
            "not an origin like https://example.com",
        ))?;
        let scheme = Scheme::parse(scheme).ok_or_else(|| TargetError::Scheme(scheme.into()))?;
        parse_authority(authority, scheme)
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.scheme.as_str())?;
        f.write_str("://")?;
        fmt::Display::fmt(&self.authority(), f)
    }
}

/// An origin's `host` or `host:port` (default port omitted), as written in `Host`.
#[derive(Clone, Copy, Debug)]
pub struct Authority<'a>(&'a Origin);

impl Authority<'_> {
    /// Whether `bytes` are exactly this authority (compared as it is written, without
    /// building a string: this runs on every forwarded request).
    pub fn is(&self, bytes: &[u8]) -> bool {
        struct Rest<'b>(&'b [u8]);
        impl fmt::Write for Rest<'_> {
            fn write_str(&mut self, s: &str) -> fmt::Result {
                self.0 = self.0.strip_prefix(s.as_bytes()).ok_or(fmt::Error)?;
                Ok(())
            }
        }
        let mut rest = Rest(bytes);
        fmt::write(&mut rest, format_args!("{self}")).is_ok() && rest.0.is_empty()
    }
}

impl fmt::Display for Authority<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Origin { scheme, host, port } = self.0;
        fmt::Display::fmt(host, f)?;
        if *port != scheme.default_port() {
            f.write_str(":")?;
            f.write_str(itoa::Buffer::new().format(*port))?;
        }
        Ok(())
    }
}

/// Where a request goes and what path it asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// Which origin.
    pub origin: Origin,
    /// The canonical path (and query): what is judged and what is forwarded.
    pub path: CanonicalPath<'static>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
/// Why a request's target cannot be used (answered 400, or 421).
pub enum TargetError {
    /// Neither an absolute URL nor an origin-form path with a `Host` header.
    Unusable(&'static str),
    /// Only `http` and `https` are proxied.
    Scheme(String),
    /// The authority is not `host[:port]`.
    BadAuthority(String),
    /// `user:pass@` in the URL: refused, credentials do not travel through the proxy.
    UserInfo,
    /// Inside a CONNECT tunnel, a request for another origin than the tunnel's (421).
    Misdirected {
        /// The tunnel's origin.
        tunnel: String,
        /// The origin the request names.
        asked: String,
    },
}

impl fmt::Display for TargetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TargetError::Unusable(why) => write!(f, "unusable request target: {why}"),
            TargetError::Scheme(s) => write!(f, "unsupported scheme `{s}` (http and https only)"),
            TargetError::BadAuthority(a) => write!(f, "invalid host or port `{a}`"),
            TargetError::UserInfo => f.write_str("credentials in the URL are refused"),
            TargetError::Misdirected { tunnel, asked } => {
                write!(f, "request for {asked} on a connection to {tunnel}")
            }
        }
    }
}

impl std::error::Error for TargetError {}

impl Target {
    /// Reads a request target. `raw` is the request line's target as sent; `host_header`
    /// is the `Host` header; `scheme` is what an origin-form target means on this
    /// listener (`http` for plain connections, `https` inside an intercepted tunnel).
    pub fn from_request(
        raw: &[u8],
        host_header: Option<&[u8]>,
        scheme: Scheme,
    ) -> Result<Target, TargetError> {
        let raw = std::str::from_utf8(raw).map_err(|_| TargetError::Unusable("not UTF-8"))?;
        if raw.starts_with('/') {
            let host = host_header.ok_or(TargetError::Unusable(
                "origin-form target without a Host header",
            ))?;
            let host = std::str::from_utf8(host)
                .map_err(|_| TargetError::Unusable("Host header is not UTF-8"))?;
            let origin = parse_authority(host.trim(), scheme)?;
            return Ok(Target {
                origin,
                path: CanonicalPath::new(raw).into_owned(),
            });
        }
        let (scheme_text, rest) = split_scheme(raw)
            .ok_or(TargetError::Unusable("neither an absolute URL nor a /path"))?;
        let scheme = Scheme::parse(scheme_text)
            .ok_or_else(|| TargetError::Scheme(scheme_text.to_string()))?;
        let (authority, path) = rest.split_at(authority_len(rest));
        let origin = parse_authority(authority, scheme)?;
        Ok(Target {
            origin,
            path: CanonicalPath::new(path).into_owned(),
        })
    }
}

impl Target {
    /// Reads a request inside an intercepted CONNECT tunnel to `tunnel`. The tunnel
    /// decides the origin (it is where the bytes go); a `Host` header or absolute-form
    /// target naming another origin is refused rather than judged against the wrong
    /// robots.txt. A missing `Host` means the tunnel's.
    pub fn in_tunnel(
        tunnel: &Origin,
        raw: &[u8],
        host_header: Option<&[u8]>,
    ) -> Result<Target, TargetError> {
        let authority = tunnel.authority().to_string();
        let host = host_header.unwrap_or(authority.as_bytes());
        let target = Target::from_request(raw, Some(host), Scheme::Https)?;
        if target.origin != *tunnel {
            return Err(TargetError::Misdirected {
                tunnel: tunnel.to_string(),
                asked: target.origin.to_string(),
            });
        }
        Ok(target)
    }
}

impl Target {
    /// Reads a request on a connection the kernel redirected to robotsgate, on its way to
    /// `destination`. The origin is the one the request names (`Host`, or an
    /// absolute-form target), at the destination's port: `Host: site` on a connection to
    /// port 8080 means `site:8080`. With no name, the destination's address is the host.
    /// Inside intercepted TLS, `tls` is the origin the handshake named (SNI, or the
    /// address), and a request naming another is misdirected (421), as in a tunnel; so is
    /// one naming another scheme or another port than the connection's.
    pub fn redirected(
        raw: &[u8],
        host_header: Option<&[u8]>,
        destination: std::net::SocketAddr,
        tls: Option<&Origin>,
    ) -> Result<Target, TargetError> {
        let scheme = if tls.is_some() {
            Scheme::Https
        } else {
            Scheme::Http
        };
        let fallback = match (host_header, tls) {
            (Some(_), _) => String::new(),
            (None, Some(origin)) => origin.authority().to_string(),
            (None, None) => destination.to_string(),
        };
        let host = host_header.unwrap_or(fallback.as_bytes());
        let mut target = Target::from_request(raw, Some(host), scheme)?;
        let stated = target.origin.port;
        let misdirected = |target: &Target| TargetError::Misdirected {
            tunnel: tls.map_or_else(|| destination.to_string(), ToString::to_string),
            asked: target.origin.to_string(),
        };
        if target.origin.scheme != scheme
            || (stated != destination.port() && stated != scheme.default_port())
        {
            return Err(misdirected(&target));
        }
        target.origin.port = destination.port();
        if tls.is_some_and(|origin| *origin != target.origin) {
            return Err(misdirected(&target));
        }
        Ok(target)
    }

    /// The path as a lenient origin server may read it, when that differs from
    /// [`Target::path`]: `%2F` and `%5C` as `/`, `;params` dropped from every segment
    /// (servlet containers do), empty segments collapsed, then dot segments resolved — so
    /// `/a%2F..%2Fprivate`, `//private`, `/a/..;/private` all read as `/private`.
    ///
    /// The decision stays on the exact path forwarded (SPEC §5); the proxy checks this
    /// spelling *as well* and forwards only when both are allowed (fail closed). Cost: a
    /// scan for `%2F`, `%5C`, `//`, `;`; most paths have none and get `None` at once.
    pub fn lenient_path(&self) -> Option<CanonicalPath<'static>> {
        let full = self.path.as_str();
        let (path, query) = full.split_at(full.find('?').unwrap_or(full.len()));
        // One pass over the bytes: four substring searches cost more to set up than a
        // short path takes to read.
        let suspicious = |p: &[u8]| {
            p.iter().enumerate().any(|(i, b)| match b {
                b';' => true,
                b'/' => p.get(i + 1) == Some(&b'/'),
                b'%' => matches!(p.get(i + 1..i + 3), Some(b"2F" | b"5C")),
                _ => false,
            })
        };
        if !suspicious(path.as_bytes()) {
            return None;
        }
        let path = path.replace("%2F", "/").replace("%5C", "/");
        let mut segments: Vec<&str> = Vec::new();
        let mut last = "";
        for segment in path.split('/') {
            last = segment.split(';').next().unwrap_or_default();
            match last {
                "" | "." => {}
                ".." => {
                    segments.pop();
                }
                s => segments.push(s),
            }
        }
        let trailing_slash = matches!(last, "" | "." | "..");
        let mut lenient = String::with_capacity(full.len());
        for s in &segments {
            lenient.push('/');
            lenient.push_str(s);
        }
        if trailing_slash || segments.is_empty() {
            lenient.push('/');
        }
        lenient.push_str(query);
        (lenient != full).then(|| CanonicalPath::new(&lenient).into_owned())
    }
}

/// An absolute URL split at its first `://`: the scheme, and the authority with what
/// follows. (Octets compared in place: `str::split_once("://")` builds a substring
/// searcher, a few hundred instructions, for every request.)
pub fn split_scheme(url: &str) -> Option<(&str, &str)> {
    let at = url.as_bytes().windows(3).position(|w| w == b"://")?;
    Some((&url[..at], &url[at + 3..]))
}

/// The length of the authority that `rest` (an absolute URL past its `://`) starts
/// with: up to its first `/`, `?` or `#`.
pub fn authority_len(rest: &str) -> usize {
    rest.bytes()
        .position(|b| matches!(b, b'/' | b'?' | b'#'))
        .unwrap_or(rest.len())
}

/// `host`, `host:port`, `[v6]`, `[v6]:port` → origin. Names are lower-cased and IDNs
/// converted to punycode (SPEC §1).
pub fn parse_authority(authority: &str, scheme: Scheme) -> Result<Origin, TargetError> {
    let bad = || TargetError::BadAuthority(authority.chars().take(256).collect());
    if authority.contains('@') {
        return Err(TargetError::UserInfo);
    }
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (ip, after) = rest.split_once(']').ok_or_else(bad)?;
        let ip: Ipv6Addr = ip.parse().map_err(|_| bad())?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or_else(bad)?),
        };
        (Host::Ip(IpAddr::V6(ip)), port)
    } else {
        let (name, port) = match authority.rsplit_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (authority, None),
        };
        let host = if let Ok(ip) = name.parse::<std::net::Ipv4Addr>() {
            Host::Ip(IpAddr::V4(ip))
        } else {
            if name.is_empty() || name.len() > 253 || name.contains(['/', '\\', ' ', '%', '[', ']'])
            {
                return Err(bad());
            }
            let ascii = idna::domain_to_ascii(name).map_err(|_| bad())?;
            if ascii.is_empty() {
                return Err(bad());
            }
            Host::Name(ascii.trim_end_matches('.').into())
        };
        (host, port)
    };
    let port = match port {
        None => scheme.default_port(),
        Some("") => scheme.default_port(),
        Some(p) => match p.parse::<u16>() {
            Ok(port) if port > 0 && p.bytes().all(|b| b.is_ascii_digit()) => port,
            _ => return Err(bad()),
        },
    };
    Ok(Origin { scheme, host, port })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(raw: &str, host: Option<&str>) -> Result<Target, TargetError> {
        Target::from_request(raw.as_bytes(), host.map(str::as_bytes), Scheme::Http)
    }

    #[test]
    fn scheme_and_authority_split_as_the_str_methods_they_replace() {
        for url in [
            "http://a.example/x",
            "h://x://y",
            "://",
            "/index.html",
            "http:/a",
            "http:",
            "",
            "a:b//",
            "http://bücher.example?q",
            "https://[::1]:8#f",
            "x:///",
            "a.example",
        ] {
            assert_eq!(split_scheme(url), url.split_once("://"), "{url}");
            let find = url.find(['/', '?', '#']).unwrap_or(url.len());
            assert_eq!(authority_len(url), find, "{url}");
        }
    }

    /// IPv4 origins and ports read as the standard library writes them.
    #[test]
    fn ipv4_origins_are_written_as_std_writes_them() {
        let octets = [0u8, 1, 9, 10, 99, 100, 127, 199, 200, 255];
        let ports = [
            1u16, 9, 10, 80, 99, 100, 443, 999, 1000, 8080, 9999, 10000, 65535,
        ];
        for (i, &a) in octets.iter().enumerate() {
            let ip =
                std::net::Ipv4Addr::new(a, octets[(i + 3) % 10], octets[(i + 7) % 10], 255 - a);
            for &port in &ports {
                let origin = Origin {
                    scheme: Scheme::Http,
                    host: Host::Ip(IpAddr::V4(ip)),
                    port,
                };
                let expected = if port == 80 {
                    format!("http://{ip}")
                } else {
                    format!("http://{ip}:{port}")
                };
                assert_eq!(origin.to_string(), expected);
                assert!(origin
                    .authority()
                    .is(&expected.as_bytes()["http://".len()..]));
            }
        }
    }

    #[test]
    fn lenient_paths_undo_the_usual_smuggling_spellings() {
        let lenient = |raw: &str| {
            target(raw, Some("a"))
                .expect(raw)
                .lenient_path()
                .map(|p| p.as_str().to_string())
        };
        for raw in [
            "//private/x",
            "/private%2Fx",
            "/public%2F..%2Fprivate/x",
            "/public/..;/private/x",
            "/private;jsessionid=1/x",
            "/public%5C..%5Cprivate/x",
        ] {
            let got = lenient(raw).unwrap_or_default();
            assert!(got.starts_with("/private/x"), "{raw} -> {got}");
        }
        assert_eq!(lenient("/private/x?a=b;c//d"), None);
        // Dot segments are resolved before forwarding: the origin gets `/public/private/x`.
        assert_eq!(lenient("/public//../private/x"), None);
        assert_eq!(lenient("/a//b/?q=1").as_deref(), Some("/a/b/?q=1"));
        assert_eq!(lenient("/a/b;v=1").as_deref(), Some("/a/b"));
        assert_eq!(lenient("/a/..;").as_deref(), Some("/"));
    }

    #[test]
    fn absolute_and_origin_form_give_one_origin() {
        let a = target("http://Example.COM:80/a/../b?q=1", None).expect("absolute");
        let b = target("/b?q=1", Some("example.com")).expect("origin-form");
        assert_eq!(a, b);
        assert_eq!(a.origin.to_string(), "http://example.com");
        assert_eq!(a.path.as_str(), "/b?q=1");
        assert_eq!(a.origin.robots_url(), "http://example.com/robots.txt");
    }

    #[test]
    fn origins_differ_by_scheme_host_and_port() {
        let o = |raw| target(raw, None).expect("valid").origin;
        assert_ne!(o("http://a.com/"), o("https://a.com/"));
        assert_ne!(o("http://a.com/"), o("http://www.a.com/"));
        assert_ne!(o("http://a.com/"), o("http://a.com:8181/"));
        assert_eq!(o("https://a.com:443/").to_string(), "https://a.com");
        assert_eq!(
            o("http://a.com:8181/").authority().to_string(),
            "a.com:8181"
        );
        assert!(o("http://a.com:8181/").authority().is(b"a.com:8181"));
        assert!(!o("http://a.com:8181/").authority().is(b"a.com:818"));
        assert!(!o("http://a.com:8181/").authority().is(b"a.com:81811"));
        assert!(o("http://[::1]/").authority().is(b"[::1]"));
    }

    #[test]
    fn idn_hosts_are_punycode() {
        let t = target("http://m\u{fc}ller.eu/", None).expect("idn");
        assert_eq!(t.origin.host, Host::Name("xn--mller-kva.eu".into()));
        assert_eq!(
            t.origin,
            target("http://xn--mller-kva.eu/", None)
                .expect("puny")
                .origin
        );
    }

    #[test]
    fn ip_literals() {
        let t = target("http://[::1]:8080/x", None).expect("v6");
        assert_eq!(t.origin.host, Host::Ip("::1".parse().expect("ip")));
        assert_eq!(t.origin.to_string(), "http://[::1]:8080");
        assert_eq!(t.origin.host_name(), "::1");
        let t = target("http://127.0.0.1:9/", None).expect("v4");
        assert_eq!(t.origin.host_name(), "127.0.0.1");
    }

    #[test]
    fn empty_path_is_root() {
        assert_eq!(
            target("http://a.com", None).expect("valid").path.as_str(),
            "/"
        );
        assert_eq!(
            target("http://a.com?x", None).expect("valid").path.as_str(),
            "/?x"
        );
    }

    #[test]
    fn tunnel_requests_belong_to_the_tunnel() {
        let tunnel = parse_authority("Example.com:443", Scheme::Https).expect("origin");
        let t = Target::in_tunnel(&tunnel, b"/a/../b", Some(b"example.com")).expect("same");
        assert_eq!(t.origin.to_string(), "https://example.com");
        assert_eq!(t.path.as_str(), "/b");
        assert!(Target::in_tunnel(&tunnel, b"/x", None).is_ok());
        assert!(Target::in_tunnel(&tunnel, b"https://example.com/x", None).is_ok());
        for (raw, host) in [
            (&b"/x"[..], Some(&b"other.example"[..])),
            (b"/x", Some(b"example.com:8443")),
            (b"http://example.com/x", None),
        ] {
            assert!(
                matches!(
                    Target::in_tunnel(&tunnel, raw, host),
                    Err(TargetError::Misdirected { .. })
                ),
                "{raw:?} {host:?}"
            );
        }
    }

    #[test]
    fn redirected_requests_take_the_destination_port() {
        let to = |s: &str| s.parse::<std::net::SocketAddr>().expect("address");
        let http = |raw: &str, host: Option<&str>, d: &str| {
            Target::redirected(raw.as_bytes(), host.map(str::as_bytes), to(d), None)
                .map(|t| t.origin.to_string() + t.path.as_str())
        };
        assert_eq!(
            http("/p", Some("Site.Test"), "127.0.0.2:80").as_deref(),
            Ok("http://site.test/p")
        );
        assert_eq!(
            http("/p", Some("site.test"), "127.0.0.2:8080").as_deref(),
            Ok("http://site.test:8080/p")
        );
        assert_eq!(
            http("/p", None, "127.0.0.2:80").as_deref(),
            Ok("http://127.0.0.2/p")
        );
        assert_eq!(
            http("/p", None, "[::1]:8080").as_deref(),
            Ok("http://[::1]:8080/p")
        );
        assert_eq!(
            http("http://site.test/p", None, "127.0.0.2:80").as_deref(),
            Ok("http://site.test/p")
        );
        for (raw, host) in [("/p", Some("site.test:81")), ("https://site.test/p", None)] {
            assert!(
                matches!(
                    http(raw, host, "127.0.0.2:80"),
                    Err(TargetError::Misdirected { .. })
                ),
                "{raw} {host:?}"
            );
        }
        let sni = parse_authority("site.test:443", Scheme::Https).expect("origin");
        let tls = |host: Option<&str>| {
            Target::redirected(
                b"/p",
                host.map(str::as_bytes),
                to("127.0.0.2:443"),
                Some(&sni),
            )
        };
        assert_eq!(
            tls(None).map(|t| t.origin.to_string()).as_deref(),
            Ok("https://site.test")
        );
        assert!(tls(Some("site.test")).is_ok());
        assert!(matches!(
            tls(Some("other.test")),
            Err(TargetError::Misdirected { .. })
        ));
    }

    #[test]
    fn refusals() {
        assert_eq!(
            target("ftp://a.com/", None),
            Err(TargetError::Scheme("ftp".into()))
        );
        assert_eq!(
            target("http://u:p@a.com/", None),
            Err(TargetError::UserInfo)
        );
        assert!(matches!(target("/x", None), Err(TargetError::Unusable(_))));
        assert!(matches!(
            target("*", Some("a")),
            Err(TargetError::Unusable(_))
        ));
        for bad in [
            "http://a.com:0/",
            "http://a.com:99999/",
            "http://a.com:+80/",
            "http://[::1/",
            "http://:80/",
            "http://a b/",
        ] {
            assert!(
                matches!(target(bad, None), Err(TargetError::BadAuthority(_))),
                "{bad}"
            );
        }
    }
}
