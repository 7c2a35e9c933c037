//! The non-standard fields robotsgate reads (SPEC §6): Crawl-delay, Host, Clean-param.
//!
//! RFC 9309 defines none of them and Google ignores them; the rules here follow Yandex's
//! documentation, read strictly: a value that is not exactly of the documented form is
//! ignored, never guessed at.

use serde::Serialize;

/// `Crawl-delay: N` in seconds: digits with an optional fraction (`2`, `0.5`, `.5`, `4.`).
/// Signs, exponents, `inf`/`nan`, units and anything else make the line invalid.
pub(crate) fn parse_crawl_delay(value: &[u8]) -> Option<f64> {
    let digits = |s: &[u8]| s.iter().all(u8::is_ascii_digit);
    let (int, frac) = match memchr::memchr(b'.', value) {
        Some(dot) => (&value[..dot], &value[dot + 1..]),
        None => (value, &b""[..]),
    };
    if int.is_empty() && frac.is_empty() || !digits(int) || !digits(frac) {
        return None;
    }
    let seconds: f64 = std::str::from_utf8(value).ok()?.parse().ok()?;
    seconds.is_finite().then_some(seconds)
}

/// `Host: name[:port]`, optionally with an `https://` prefix. The name must be an RFC 952
/// host name (letters, digits, inner hyphens; not an IP address), the port 1–65535.
pub(crate) fn parse_host(value: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(value).ok()?;
    let authority = text.strip_prefix("https://").unwrap_or(text);
    let (name, port) = match authority.rsplit_once(':') {
        Some((name, port)) => (name, Some(port)),
        None => (authority, None),
    };
    if let Some(port) = port {
        let valid = !port.is_empty()
            && port.bytes().all(|b| b.is_ascii_digit())
            && port.parse::<u16>().is_ok_and(|p| p > 0);
        if !valid {
            return None;
        }
    }
    let labels_ok = name.split('.').all(|label| {
        !label.is_empty()
            && label.len() <= 63
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
    });
    let is_ip = name.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    (labels_ok && !is_ip && name.len() <= 253).then(|| text.to_string())
}

/// A Yandex `Clean-param: p1&p2 [path-prefix]` line: query parameters that do not change
/// the page under the prefix.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CleanParam {
    /// The parameter names.
    pub params: Vec<String>,
    /// Path prefix (robots.txt pattern syntax); `None` means the whole site.
    pub path: Option<String>,
    /// Its line in robots.txt.
    pub line: u32,
}

/// Yandex limits a Clean-param rule to 500 characters.
const MAX_CLEAN_PARAM_LEN: usize = 500;

/// A `Clean-param` value (`p1&p2 [path]`), or `None` when it is too long, not UTF-8 or names no
/// parameter.
pub(crate) fn parse_clean_param(value: &[u8], line: u32) -> Option<CleanParam> {
    if value.len() > MAX_CLEAN_PARAM_LEN {
        return None;
    }
    let text = std::str::from_utf8(value).ok()?;
    let mut words = text.split_ascii_whitespace();
    let params: Vec<String> = words
        .next()?
        .split('&')
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect();
    let path = words.next().map(str::to_string);
    if params.is_empty() || words.next().is_some() {
        return None;
    }
    Some(CleanParam { params, path, line })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crawl_delay_values() {
        assert_eq!(parse_crawl_delay(b"2"), Some(2.0));
        assert_eq!(parse_crawl_delay(b"4.5"), Some(4.5));
        assert_eq!(parse_crawl_delay(b"0.5"), Some(0.5));
        assert_eq!(parse_crawl_delay(b".5"), Some(0.5));
        assert_eq!(parse_crawl_delay(b"0"), Some(0.0));
        for bad in [
            &b"-1"[..],
            b"+1",
            b"1e3",
            b"inf",
            b"NaN",
            b"",
            b".",
            b"1.2.3",
            b"5s",
            b"1,5",
            b"ten",
        ] {
            assert_eq!(
                parse_crawl_delay(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn host_values_from_the_yandex_page() {
        assert_eq!(parse_host(b"myhost.ru").as_deref(), Some("myhost.ru"));
        assert!(parse_host(b"www.myhost.ru:8080").is_some());
        assert!(parse_host(b"https://www.myhost.ru").is_some());
        for bad in [
            "www.myhost-.ru",
            "www.-myhost.ru",
            "www.myhost.ru:100000",
            "www.my_host.ru",
            ".my-host.ru:8000",
            "my-host.ru.",
            "my..host.ru",
            "www.myhost.ru/",
            "www.myhost.ru:8080/",
            "http://www.myhost.ru",
            "213.180.194.129",
            "www.firsthost.ru,www.secondhost.ru",
            "www.firsthost.ru www.secondhost.ru",
        ] {
            assert_eq!(parse_host(bad.as_bytes()), None, "{bad}");
        }
    }

    #[test]
    fn clean_param_forms() {
        let c = parse_clean_param(b"s&ref /forum*/showthread.php", 3);
        assert_eq!(
            c,
            Some(CleanParam {
                params: vec!["s".into(), "ref".into()],
                path: Some("/forum*/showthread.php".into()),
                line: 3
            })
        );
        assert_eq!(
            parse_clean_param(b"someTrash&otherTrash", 1).map(|c| c.path),
            Some(None)
        );
        assert_eq!(parse_clean_param(b"", 1), None);
        assert_eq!(parse_clean_param(b"a /p extra", 1), None);
    }
}
