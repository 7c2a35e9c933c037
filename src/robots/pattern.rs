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
//! found at its first occurrence after the previous one (a SIMD substring search), and
//! the last one of an anchored pattern must end the path. For patterns whose only
//! operator is `*` that is exact and linear in the path length — no backtracking.

use memchr::memmem::Finder;

use super::normalize::{escape_at, is_unreserved, needs_encoding, push_escaped};

/// How long the pattern counts as when rules compete (SPEC §5: longest pattern wins):
/// the octets of its canonical text, each `*` and `$` operator counting as one.
pub(crate) type Priority = u32;

#[derive(Debug)]
pub(crate) struct Pattern {
    /// Literal octets before the first `*` (empty when the pattern starts with `*`).
    pub(crate) prefix: Box<[u8]>,
    /// Each literal segment that follows a `*`, in order. Empty for a plain prefix rule.
    pub(crate) rest: Box<[Finder<'static>]>,
    /// Ends with `$`: the URL must end where the pattern ends.
    pub(crate) anchored: bool,
    pub(crate) priority: Priority,
}

/// The result of compiling a rule value: the matcher and its canonical text.
pub(crate) struct Compiled {
    pub(crate) pattern: Pattern,
    pub(crate) text: String,
}

/// Compiles a rule value (already trimmed, non-empty). A value that starts with neither
/// `/` nor `*` gets a `/` in front (SPEC §3).
pub(crate) fn compile(value: &[u8]) -> Compiled {
    let mut text: Vec<u8> = Vec::with_capacity(value.len() + 1);
    let mut segments: Vec<Vec<u8>> = vec![Vec::new()];
    let mut anchored = false;
    let mut priority: Priority = 0;

    if !matches!(value.first(), Some(b'/' | b'*')) {
        segments[0].push(b'/');
        text.push(b'/');
        priority += 1;
    }
    let mut i = 0;
    while i < value.len() {
        let b = value[i];
        let current = segments.last_mut().expect("segments is never empty");
        if b == b'*' {
            text.push(b'*');
            priority += 1;
            if !current.is_empty() || segments.len() == 1 {
                segments.push(Vec::new());
            }
            i += 1;
        } else if b == b'$' && i + 1 == value.len() {
            text.push(b'$');
            priority += 1;
            anchored = true;
            i += 1;
        } else if let Some(decoded) = escape_at(value, i) {
            if is_unreserved(decoded) {
                current.push(decoded);
                text.push(decoded);
                priority += 1;
            } else {
                // `%2A` and `%24` are the literal octets; other reserved characters keep
                // their escape, as the URL side does.
                if matches!(decoded, b'*' | b'$') {
                    current.push(decoded);
                } else {
                    push_escaped(current, decoded);
                }
                push_escaped(&mut text, decoded);
                priority += 3;
            }
            i += 3;
        } else {
            if needs_encoding(b) {
                push_escaped(current, b);
                push_escaped(&mut text, b);
                priority += 3;
            } else {
                current.push(b);
                text.push(b);
                priority += 1;
            }
            i += 1;
        }
    }
    // A trailing `*` (not followed by `$`) is redundant: `/fish*` matches as `/fish`.
    if !anchored && segments.len() > 1 && segments.last().is_some_and(Vec::is_empty) {
        segments.pop();
    }
    let mut segments = segments.into_iter();
    let prefix = segments.next().unwrap_or_default().into_boxed_slice();
    let rest = segments.map(|s| Finder::new(&s).into_owned()).collect();
    Compiled {
        pattern: Pattern {
            prefix,
            rest,
            anchored,
            priority,
        },
        // Every octet pushed is ASCII: the rest was percent-encoded.
        text: String::from_utf8(text).unwrap_or_default(),
    }
}

impl Pattern {
    /// True when the pattern has a `*` between literal segments (or before the first).
    pub(crate) fn has_wildcard(&self) -> bool {
        !self.rest.is_empty()
    }

    /// Does the pattern match `path`, given that `path` starts with `self.prefix`?
    ///
    /// `path` is canonical (see [`super::normalize::normalize_path`]).
    pub(crate) fn matches_after_prefix(&self, path: &[u8]) -> bool {
        let mut pos = self.prefix.len();
        let last = self.rest.len().wrapping_sub(1);
        for (n, segment) in self.rest.iter().enumerate() {
            let needle = segment.needle();
            if n == last && self.anchored {
                return path.len() >= pos + needle.len() && path.ends_with(needle);
            }
            match segment.find(&path[pos..]) {
                Some(at) => pos += at + needle.len(),
                None => return false,
            }
        }
        !self.anchored || pos == path.len()
    }

    /// Does the pattern match `path` (canonical)?
    #[cfg(test)]
    pub(crate) fn matches(&self, path: &[u8]) -> bool {
        path.starts_with(&self.prefix) && self.matches_after_prefix(path)
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
        assert!(m("/ab$", "/ab"));
        assert!(!m("/ab$", "/abc"));
        // `$` in the middle is an ordinary octet.
        assert!(m("/a$b", "/a$b"));
        // Anchored suffix may not overlap the part already matched.
        assert!(!m("/ab*ba$", "/aba"));
    }

    #[test]
    fn escaped_operators_are_literals() {
        assert!(m("/file-%2A.html", "/file-*.html"));
        assert!(!m("/file-%2A.html", "/file-x.html"));
        assert!(m("/foo-%24", "/foo-$"));
        assert!(!m("/foo-%24", "/foo-"));
    }
}
