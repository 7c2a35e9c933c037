//! A rule's path pattern, compiled once at parse time (SPEC §5).
//!
//! A pattern is a run of literal segments separated by `*` (any sequence of octets, also
//! empty), optionally ended by `$` (the URL must end there). Literal octets are brought to
//! the canonical form of [`super::normalize`]; `%2A` and `%24` become literal `*` and `$`
//! octets, which is how a rule matches a URL that really contains them. A `$` anywhere but
//! at the end is an ordinary octet (as in Google's reference parser). Trailing `*`s are
//! dropped: they never change what matches.
//!
//! Matching a pattern with wildcards is greedy, leftmost-first: each middle segment is
//! found at its first occurrence after the previous one, and the last segment of an
//! anchored pattern must end the path. For patterns whose only operator is `*` this is
//! exact and needs no backtracking: `O(path × segment)` at worst, and paths are short.

use super::normalize::{escape_at, is_unreserved, needs_encoding, push_escaped};

/// How long the pattern counts as when rules compete (SPEC §5: longest pattern wins):
/// the octets of its canonical text, each `*` and `$` operator counting as one.
pub(crate) type Priority = u32;

/// A compiled Allow/Disallow value: literal segments between `*`s, maybe `$`-anchored.
#[derive(Clone, Debug)]
pub(crate) struct Pattern {
    /// The literal segments, concatenated. Segment 0 is the prefix before the first `*`.
    bytes: Box<[u8]>,
    /// End offset of each segment in `bytes`; one entry for a pattern without `*`.
    ends: Box<[u32]>,
    /// Ends with `$`: the URL must end where the pattern ends.
    pub(crate) anchored: bool,
    /// How it ranks against other matches (its length).
    pub(crate) priority: Priority,
}

/// The result of compiling a rule value: the matcher and its canonical text.
pub(crate) struct Compiled {
    /// The matcher.
    pub(crate) pattern: Pattern,
    /// The value in canonical form (for reports and diffs).
    pub(crate) text: String,
}

/// Compiles a rule value (already trimmed, non-empty). A value that starts with neither
/// `/` nor `*` gets a `/` in front (SPEC §3).
pub(crate) fn compile(value: &[u8]) -> Compiled {
    let mut text: Vec<u8> = Vec::with_capacity(value.len() + 1);
    let mut bytes: Vec<u8> = Vec::with_capacity(value.len() + 1);
    let mut ends: Vec<u32> = Vec::new();
    let mut anchored = false;
    let mut priority: Priority = 0;

    if !matches!(value.first(), Some(b'/' | b'*')) {
        bytes.push(b'/');
        text.push(b'/');
        priority += 1;
    }
    let mut i = 0;
    while i < value.len() {
        let b = value[i];
        if b == b'*' {
            text.push(b'*');
            priority += 1;
            // Consecutive `*`s make one boundary.
            let segment_start = ends.last().map_or(0, |&e| e as usize);
            if ends.is_empty() || bytes.len() > segment_start {
                ends.push(bytes.len() as u32);
            }
            i += 1;
        } else if b == b'$' && i + 1 == value.len() {
            text.push(b'$');
            priority += 1;
            anchored = true;
            i += 1;
        } else if let Some(decoded) = escape_at(value, i) {
            if is_unreserved(decoded) {
                bytes.push(decoded);
                text.push(decoded);
                priority += 1;
            } else {
                // `%2A` and `%24` are the literal octets; other reserved characters keep
                // their escape, as the URL side does.
                if matches!(decoded, b'*' | b'$') {
                    bytes.push(decoded);
                } else {
                    push_escaped(&mut bytes, decoded);
                }
                push_escaped(&mut text, decoded);
                priority += 3;
            }
            i += 3;
        } else {
            // A `%` that starts no valid escape is encoded, as on the URL side.
            if needs_encoding(b) || b == b'%' {
                push_escaped(&mut bytes, b);
                push_escaped(&mut text, b);
                priority += 3;
            } else {
                bytes.push(b);
                text.push(b);
                priority += 1;
            }
            i += 1;
        }
    }
    let last_start = ends.last().map_or(0, |&e| e as usize);
    let trailing_star = !ends.is_empty() && bytes.len() == last_start;
    // A trailing `*` (not followed by `$`) is redundant: `/fish*` matches as `/fish`.
    if !trailing_star || anchored {
        ends.push(bytes.len() as u32);
    }
    Compiled {
        pattern: Pattern {
            bytes: bytes.into_boxed_slice(),
            ends: ends.into_boxed_slice(),
            anchored,
            priority,
        },
        // Every octet pushed is ASCII: the rest was percent-encoded.
        text: String::from_utf8(text).unwrap_or_default(),
    }
}

/// First occurrence of `needle` in `hay`. Paths and segments are short, so a scan for the
/// first octet and a compare beats setting up a substring searcher per call.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    let Some((&first, rest)) = needle.split_first() else {
        return Some(0);
    };
    let last_start = hay.len().checked_sub(needle.len())?;
    (0..=last_start).find(|&i| hay[i] == first && hay[i + 1..].starts_with(rest))
}

impl Pattern {
    /// Literal segment `n`.
    fn segment(&self, n: usize) -> &[u8] {
        let start = if n == 0 { 0 } else { self.ends[n - 1] as usize };
        &self.bytes[start..self.ends[n] as usize]
    }

    /// Literal octets before the first `*` (all of them for a pattern without `*`).
    pub(crate) fn prefix(&self) -> &[u8] {
        self.segment(0)
    }

    /// True when the pattern has a `*` after its prefix.
    pub(crate) fn has_wildcard(&self) -> bool {
        self.ends.len() > 1
    }

    /// The octets after the prefix, for a quick "can it match at all" filter.
    pub(crate) fn tail_bytes(&self) -> &[u8] {
        &self.bytes[self.ends[0] as usize..]
    }

    /// Does the pattern match `path`, given that `path` starts with `self.prefix()`?
    ///
    /// `path` is canonical (see [`super::CanonicalPath`]).
    pub(crate) fn matches_after_prefix(&self, path: &[u8]) -> bool {
        let mut pos = self.ends[0] as usize;
        let segments = self.ends.len();
        for n in 1..segments {
            let segment = self.segment(n);
            if n + 1 == segments && self.anchored {
                return path.len() >= pos + segment.len() && path.ends_with(segment);
            }
            match find(&path[pos..], segment) {
                Some(at) => pos += at + segment.len(),
                None => return false,
            }
        }
        !self.anchored || pos == path.len()
    }

    /// Does the pattern match `path` (canonical)?
    pub(crate) fn matches(&self, path: &[u8]) -> bool {
        path.starts_with(self.prefix()) && self.matches_after_prefix(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pattern: &str, path: &str) -> bool {
        compile(pattern.as_bytes()).pattern.matches(path.as_bytes())
    }

    #[test]
    fn canonical_text_and_priority() {
        let c = compile(b"/fish*");
        assert_eq!((c.text.as_str(), c.pattern.priority), ("/fish*", 6));
        assert!(!c.pattern.has_wildcard());
        let c = compile(b"fish/");
        assert_eq!((c.text.as_str(), c.pattern.priority), ("/fish/", 6));
        let c = compile("/caf\u{e9}".as_bytes());
        assert_eq!((c.text.as_str(), c.pattern.priority), ("/caf%C3%A9", 10));
        let c = compile(b"/%7e%2f");
        assert_eq!(c.text, "/~%2F");
        let c = compile(b"/*.php$");
        assert_eq!((c.pattern.priority, c.pattern.anchored), (7, true));
        assert_eq!(c.pattern.prefix(), b"/");
        assert_eq!(c.pattern.tail_bytes(), b".php");
    }

    #[test]
    fn wildcards_and_anchors() {
        assert!(m("/", "/anything"));
        assert!(m("/*", "/"));
        assert!(m("/fish*.php", "/fishheads/catfish.php?p"));
        assert!(!m("/fish*.php", "/Fish.PHP"));
        assert!(m("/*.php$", "/a/b.php"));
        assert!(!m("/*.php$", "/a/b.php?x"));
        assert!(m("/*.php$", "/a.php.php"));
        assert!(!m("/*.php$", "/x.php5"));
        assert!(m("/example*$", "/example.html"));
        assert!(m("/a*b*c", "/abbbc"));
        assert!(!m("/a*b*c", "/acb"));
        assert!(m("*/private/", "/docs/private/a"));
        assert!(m("/a**b", "/a-b"));
        assert!(m("**b", "/b"));
        assert!(m("/ab$", "/ab"));
        assert!(!m("/ab$", "/abc"));
        // `$` in the middle is an ordinary octet.
        assert!(m("/a$b", "/a$b"));
        // Anchored suffix may not overlap the part already matched.
        assert!(!m("/ab*ba$", "/aba"));
        assert!(m("/ab*ba$", "/abba"));
    }

    #[test]
    fn bare_percent_is_encoded_like_the_url_side() {
        let c = compile(b"/a%zz");
        assert_eq!((c.text.as_str(), c.pattern.priority), ("/a%25zz", 7));
        assert!(m("/a%zz", "/a%25zz"));
    }

    #[test]
    fn escaped_operators_are_literals() {
        assert!(m("/file-%2A.html", "/file-*.html"));
        assert!(!m("/file-%2A.html", "/file-x.html"));
        assert!(m("/foo-%24", "/foo-$"));
        assert!(!m("/foo-%24", "/foo-"));
    }

    #[test]
    fn find_is_leftmost() {
        assert_eq!(find(b"abcabc", b"bc"), Some(1));
        assert_eq!(find(b"abc", b""), Some(0));
        assert_eq!(find(b"ab", b"abc"), None);
        assert_eq!(find(b"aab", b"ab"), Some(1));
    }
}
