//! One canonical spelling for paths, so rules and URLs compare octet by octet.
//!
//! RFC 9309 §2.2.2 (SPEC §5) says a rule and a URL match when they are equal after
//! percent-encoding is normalised. Both sides go through the same rules here:
//!
//! * octets outside printable ASCII (`>= 0x80`, controls, space, DEL) are
//!   percent-encoded with upper-case hex, so `/café` and `/caf%C3%A9` are one path;
//! * an escape of an *unreserved* character (RFC 3986: `A-Z a-z 0-9 - . _ ~`) is decoded,
//!   so `/%7Euser` is `/~user`;
//! * every other valid escape is kept, hex upper-cased: `%2f` is `%2F` and never `/`;
//! * a `%` that does not start a valid escape is itself encoded (`%25`): left bare, `%%341`
//!   would become `%41` here and `A` at the origin, slipping past a rule for `/A`.
//!
//! Request paths get two more steps, because the proxy must decide on exactly the path it
//! forwards (SPEC §5): dot segments are removed (RFC 3986 §5.2.4, after decoding, so
//! `/%2e%2e/` cannot smuggle a `..` past the matcher) and the `#fragment` is dropped.
//!
//! Cost: one pass over the input. Paths that are already canonical (the common case:
//! no `%`, no `/.`, nothing to encode) are returned borrowed, without allocating.

use std::borrow::Cow;

/// RFC 3986 unreserved characters: their escapes are decoded.
pub(crate) fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// Octets that never appear raw in a canonical path: non-ASCII, controls, space, and the
/// characters RFC 3986 does not allow unencoded in a URI (so the canonical path is always
/// a valid request target to forward).
pub(crate) const fn needs_encoding(b: u8) -> bool {
    b <= b' '
        || b >= 0x7f
        || matches!(
            b,
            b'"' | b'<' | b'>' | b'\\' | b'^' | b'`' | b'{' | b'|' | b'}'
        )
}

/// The value of a hex digit.
pub(crate) fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// The escape at `input[i..]`, if `input[i]` is `%` followed by two hex digits.
pub(crate) fn escape_at(input: &[u8], i: usize) -> Option<u8> {
    if input.get(i) != Some(&b'%') {
        return None;
    }
    let hi = hex_value(*input.get(i + 1)?)?;
    let lo = hex_value(*input.get(i + 2)?)?;
    Some(hi << 4 | lo)
}

/// Appends `b` percent-encoded (upper-case hex).
pub(crate) fn push_escaped(out: &mut Vec<u8>, b: u8) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 0xf)]]);
}

/// The path, `;params` and `?query` of a URL: what robots.txt rules are matched against.
///
/// Accepts an absolute URL (`http://host:port/p?q#f`) or an origin-form target (`/p?q`);
/// anything without a `scheme://` is taken as a path, so `//x` is the path `//x`, not a
/// host. The fragment is dropped. The result is not yet normalised: see
/// [`CanonicalPath`].
pub fn path_of_url(url: &str) -> &str {
    let rest = after_authority(url);
    rest.find('#').map_or(rest, |i| &rest[..i])
}

/// Everything after a URL's authority: path, query and fragment (one pass over the scheme
/// and authority only; the fragment is left for [`normalize_path`] to cut).
fn after_authority(url: &str) -> &str {
    let scheme_len = url
        .bytes()
        .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
        .count();
    if scheme_len == 0 || !url[scheme_len..].starts_with("://") {
        return url;
    }
    let rest = &url[scheme_len + 3..];
    memchr::memchr3(b'/', b'?', b'#', rest.as_bytes()).map_or("", |p| &rest[p..])
}

/// A request path (with optional `?query`) in canonical form: what the engine matches and
/// what the proxy forwards. Only [`CanonicalPath::new`] makes one, so a path cannot reach
/// the matcher un-normalised.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CanonicalPath<'a>(Cow<'a, str>);

impl<'a> CanonicalPath<'a> {
    /// Normalises an origin-form target (`/p?q`); see the module docs.
    pub fn new(path: &'a str) -> Self {
        CanonicalPath(normalize_path(path))
    }

    /// Normalises the path and query of a URL (absolute or origin-form).
    pub fn from_url(url: &'a str) -> Self {
        Self::new(after_authority(url))
    }

    /// The canonical text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Is this `/robots.txt` itself (with or without a query)?
    pub fn is_robots_txt(&self) -> bool {
        self.0
            .strip_prefix("/robots.txt")
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('?'))
    }

    /// The same path, owning its text.
    pub fn into_owned(self) -> CanonicalPath<'static> {
        CanonicalPath(Cow::Owned(self.0.into_owned()))
    }
}

impl std::fmt::Display for CanonicalPath<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Canonical form of a request path (with optional `?query`), as matched and as forwarded.
///
/// Always starts with `/`; see the module docs for what changes.
pub fn normalize_path(path: &str) -> Cow<'_, str> {
    if is_canonical(path.as_bytes()) {
        return Cow::Borrowed(path);
    }
    let input = path.as_bytes();
    let input = match memchr::memchr(b'#', input) {
        Some(i) => &input[..i],
        None => input,
    };
    let query_at = memchr::memchr(b'?', input).unwrap_or(input.len());
    let mut out = Vec::with_capacity(input.len() + 8);
    if input.first() != Some(&b'/') {
        out.push(b'/');
    }
    normalize_octets(&input[..query_at], &mut out);
    let out = remove_dot_segments(&out);
    let mut out = out.into_owned();
    normalize_octets(&input[query_at..], &mut out);
    // Every octet pushed is ASCII: non-ASCII input was percent-encoded.
    Cow::Owned(String::from_utf8(out).unwrap_or_default())
}

/// Octets `is_canonical` must look at: `.` and `?` (maybe), the rest (certainly not canonical).
const SPECIAL: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = needs_encoding(b as u8) || matches!(b as u8, b'%' | b'#' | b'.' | b'?');
        b += 1;
    }
    table
};

/// True when `normalize_path` would return its input unchanged: one pass, no allocation.
fn is_canonical(p: &[u8]) -> bool {
    if p.first() != Some(&b'/') {
        return false;
    }
    let mut in_path = true;
    let mut previous = 0u8;
    for &b in p {
        if SPECIAL[usize::from(b)] {
            match b {
                b'.' if !in_path || previous != b'/' => {}
                b'?' => in_path = false,
                _ => return false,
            }
        }
        previous = b;
    }
    true
}

/// Percent-encoding normalisation of a run of octets (no dot-segment work).
fn normalize_octets(input: &[u8], out: &mut Vec<u8>) {
    let mut i = 0;
    while i < input.len() {
        let b = input[i];
        if let Some(decoded) = escape_at(input, i) {
            if is_unreserved(decoded) {
                out.push(decoded);
            } else {
                push_escaped(out, decoded);
            }
            i += 3;
            continue;
        }
        if needs_encoding(b) || b == b'%' {
            push_escaped(out, b);
        } else {
            out.push(b);
        }
        i += 1;
    }
}

/// The octets a canonical path is matched as: `%2A` and `%24` read as `*` and `$`.
///
/// A rule's `%2A`/`%24` is the literal octet (its raw `*`/`$` are operators), so the URL
/// side must meet it whichever way the URL writes the character: `Disallow: /price%24`
/// blocks `/price$` and `/price%24` alike, and a rule byte-identical to a path always
/// matches it. Only matching sees this form; the path forwarded keeps its escapes. Cost:
/// one scan for `%` (a substring searcher costs more to set up than a path takes to
/// read), and a copy only when a path holds one of the two escapes.
pub(crate) fn match_form(path: &str) -> Cow<'_, [u8]> {
    let bytes = path.as_bytes();
    if !memchr::memchr_iter(b'%', bytes).any(|i| bytes.get(i + 1) == Some(&b'2')) {
        return Cow::Borrowed(bytes);
    }
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match &bytes[i..] {
            [b'%', b'2', b'A', ..] => {
                out.push(b'*');
                i += 3;
            }
            [b'%', b'2', b'4', ..] => {
                out.push(b'$');
                i += 3;
            }
            [b, ..] => {
                out.push(*b);
                i += 1;
            }
            [] => break,
        }
    }
    Cow::Owned(out)
}

/// RFC 3986 §5.2.4 on an absolute path (starts with `/`).
fn remove_dot_segments(path: &[u8]) -> Cow<'_, [u8]> {
    if memchr::memmem::find(path, b"/.").is_none() {
        return Cow::Borrowed(path);
    }
    let mut out: Vec<u8> = Vec::with_capacity(path.len());
    // Split into segments after the leading '/'; each segment is preceded by '/'.
    let segments = path[1..].split(|&b| b == b'/');
    let count = path[1..].split(|&b| b == b'/').count();
    for (n, seg) in segments.enumerate() {
        let last = n + 1 == count;
        match seg {
            b"." => {
                if last {
                    out.push(b'/');
                }
            }
            b".." => {
                let cut = memchr::memrchr(b'/', &out).unwrap_or(0);
                out.truncate(cut);
                if last {
                    out.push(b'/');
                }
            }
            _ => {
                out.push(b'/');
                out.extend_from_slice(seg);
            }
        }
    }
    if out.is_empty() {
        out.push(b'/');
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_of_url_forms() {
        assert_eq!(path_of_url("http://example.com/a/b?x=1#f"), "/a/b?x=1");
        assert_eq!(path_of_url("http://example.com"), "");
        assert_eq!(path_of_url("http://example.com?q"), "?q");
        assert_eq!(path_of_url("https://u:p@example.com:8080/p;a"), "/p;a");
        assert_eq!(path_of_url("//not-a-host/x"), "//not-a-host/x");
        assert_eq!(path_of_url("/just/a/path?q"), "/just/a/path?q");
        assert_eq!(path_of_url("/a?b=http://c/d"), "/a?b=http://c/d");
        assert_eq!(path_of_url("http://h#frag"), "");
        assert_eq!(
            CanonicalPath::from_url("http://h/p?q#frag").as_str(),
            "/p?q"
        );
        assert_eq!(CanonicalPath::from_url("http://h#frag").as_str(), "/");
    }

    #[test]
    fn canonical_paths_are_borrowed() {
        assert!(matches!(normalize_path("/a/b.html?x=1"), Cow::Borrowed(_)));
        assert!(matches!(normalize_path("/a/b%2F"), Cow::Owned(_)));
    }

    #[test]
    fn percent_encoding_rules() {
        assert_eq!(normalize_path("/caf\u{e9}"), "/caf%C3%A9");
        assert_eq!(normalize_path("/caf%c3%a9"), "/caf%C3%A9");
        assert_eq!(normalize_path("/%7Euser/%41"), "/~user/A");
        assert_eq!(normalize_path("/a%2fb"), "/a%2Fb");
        assert_eq!(normalize_path("/a%zz%"), "/a%25zz%25");
        // Re-normalising the result changes nothing (no escape is created by decoding).
        assert_eq!(normalize_path("/%%341"), "/%2541");
        assert_eq!(normalize_path("/%2541"), "/%2541");
        assert_eq!(normalize_path("/a b"), "/a%20b");
        assert_eq!(normalize_path("/a{b}|c\"d\\e"), "/a%7Bb%7D%7Cc%22d%5Ce");
        assert_eq!(normalize_path("/p?q=%7e&r=\u{fc}"), "/p?q=~&r=%C3%BC");
    }

    #[test]
    fn dot_segments_are_resolved_in_the_path_only() {
        assert_eq!(normalize_path("/a/../b"), "/b");
        assert_eq!(normalize_path("/a/./b/."), "/a/b/");
        assert_eq!(normalize_path("/a/b/.."), "/a/");
        assert_eq!(normalize_path("/../../x"), "/x");
        assert_eq!(normalize_path("/%2e%2e/private"), "/private");
        assert_eq!(normalize_path("/a/%2E/b"), "/a/b");
        assert_eq!(normalize_path("/.hidden/..."), "/.hidden/...");
        assert_eq!(normalize_path("/x?a=/../b"), "/x?a=/../b");
        assert_eq!(normalize_path("/a/..%2F"), "/a/..%2F");
        assert_eq!(normalize_path(""), "/");
        assert_eq!(normalize_path("?q"), "/?q");
        assert_eq!(normalize_path("/p#frag"), "/p");
    }
}
