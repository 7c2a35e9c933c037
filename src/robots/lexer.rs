//! Splitting robots.txt bytes into `(line number, field, value)` records (SPEC §3).
//!
//! Follows Google's reference parser, whose observable behaviour SPEC ranks right after
//! RFC 9309: lines end at CR, LF or CRLF; a UTF-8 byte-order mark (or a prefix of one) at
//! the start is skipped; `#` starts a comment; the field and value are trimmed; a line
//! with no `:` is still accepted when it is exactly two words (`Disallow /x`); lines
//! longer than [`MAX_LINE_BYTES`] are cut there. Field names are recognised by prefix,
//! case-insensitively, including the typos the reference parser accepts (`dissallow`,
//! `useragent`, `site-map`, …). Anything else yields no record: invalid input is skipped,
//! never an error.

/// Longest line content kept (the reference parser's 2083 × 8 − 1 octets).
pub const MAX_LINE_BYTES: usize = 2083 * 8 - 1;

/// The field a robots.txt line names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Field {
    /// `User-agent`.
    UserAgent,
    /// `Allow`.
    Allow,
    /// `Disallow` (and its common misspellings).
    Disallow,
    /// `Sitemap`.
    Sitemap,
    /// `Crawl-delay`.
    CrawlDelay,
    /// `Host` (Yandex).
    Host,
    /// `Clean-param` (Yandex).
    CleanParam,
    /// `Content-Usage` (IETF aipref).
    ContentUsage,
    /// `Content-Signal` (Cloudflare).
    ContentSignal,
    /// Anything else: ignored.
    Unknown,
}

/// One `field: value` line.
#[derive(Debug)]
pub(crate) struct Record<'a> {
    /// Its 1-based line number.
    pub(crate) line: u32,
    /// The field.
    pub(crate) field: Field,
    /// The value, trimmed, comment removed.
    pub(crate) value: &'a [u8],
}

/// Whether `s` starts with `prefix`, ASCII case ignored.
fn starts_with_ignore_case(s: &[u8], prefix: &str) -> bool {
    s.len() >= prefix.len() && s[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
}

/// The field a key names.
fn classify(key: &[u8]) -> Field {
    let any = |names: &[&str]| names.iter().any(|n| starts_with_ignore_case(key, n));
    if any(&["user-agent", "useragent", "user agent"]) {
        Field::UserAgent
    } else if any(&["allow"]) {
        Field::Allow
    } else if any(&[
        "disallow",
        "dissallow",
        "dissalow",
        "disalow",
        "diasllow",
        "disallaw",
    ]) {
        Field::Disallow
    } else if any(&["sitemap", "site-map"]) {
        Field::Sitemap
    } else if any(&["crawl-delay", "crawldelay", "crawl delay"]) {
        Field::CrawlDelay
    } else if key.eq_ignore_ascii_case(b"host") {
        Field::Host
    } else if key.eq_ignore_ascii_case(b"clean-param") {
        Field::CleanParam
    } else if key.eq_ignore_ascii_case(b"content-usage") {
        Field::ContentUsage
    } else if key.eq_ignore_ascii_case(b"content-signal") {
        Field::ContentSignal
    } else {
        Field::Unknown
    }
}

/// The reference parser's notion of white space (C `isspace`).
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r')
}

/// `s` without leading and trailing whitespace.
pub(crate) fn trim(mut s: &[u8]) -> &[u8] {
    while let [first, rest @ ..] = s {
        if !is_space(*first) {
            break;
        }
        s = rest;
    }
    while let [rest @ .., last] = s {
        if !is_space(*last) {
            break;
        }
        s = rest;
    }
    s
}

/// Splits one line (without its line end) into field and value.
fn key_value(line: &[u8]) -> Option<(&[u8], &[u8])> {
    let line = match memchr::memchr(b'#', line) {
        Some(i) => &line[..i],
        None => line,
    };
    let line = trim(line);
    let (key, value) = match memchr::memchr(b':', line) {
        Some(sep) => (&line[..sep], &line[sep + 1..]),
        None => {
            // A forgotten colon: accepted only for exactly two words.
            let sep = line.iter().position(|&b| b == b' ' || b == b'\t')?;
            let value = trim(&line[sep..]);
            if value.iter().any(|&b| b == b' ' || b == b'\t') {
                return None;
            }
            (&line[..sep], value)
        }
    };
    let key = trim(key);
    (!key.is_empty()).then(|| (key, trim(value)))
}

/// One line of the input (without its line end), with its 1-based number.
struct Line<'a> {
    /// Its 1-based number.
    number: u32,
    /// Its octets.
    text: &'a [u8],
}

/// The lines of `body` (a byte order mark skipped; CR, LF and CRLF end a line).
fn lines(body: &[u8]) -> impl Iterator<Item = Line<'_>> {
    const BOM: &[u8] = b"\xEF\xBB\xBF";
    let bom = body.iter().zip(BOM).take_while(|(a, b)| a == b).count();
    let mut rest = &body[bom..];
    let mut number = 0u32;
    let mut done = false;
    std::iter::from_fn(move || {
        if done {
            return None;
        }
        number = number.saturating_add(1);
        let text = match memchr::memchr2(b'\n', b'\r', rest) {
            Some(end) => {
                let text = &rest[..end];
                let skip = if rest[end] == b'\r' && rest.get(end + 1) == Some(&b'\n') {
                    2
                } else {
                    1
                };
                rest = &rest[end + skip..];
                text
            }
            None => {
                done = true;
                rest
            }
        };
        Some(Line {
            number,
            text: &text[..text.len().min(MAX_LINE_BYTES)],
        })
    })
}

/// How many lines `body` has, counted as [`records`] numbers them.
pub(crate) fn line_count(body: &[u8]) -> u32 {
    lines(body).last().map_or(0, |l| l.number)
}

/// The records of `body`, in order.
pub(crate) fn records(body: &[u8]) -> impl Iterator<Item = Record<'_>> {
    lines(body).filter_map(|line| {
        let (key, value) = key_value(line.text)?;
        Some(Record {
            line: line.number,
            field: classify(key),
            value,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recs(body: &str) -> Vec<(u32, Field, String)> {
        records(body.as_bytes())
            .map(|r| {
                (
                    r.line,
                    r.field,
                    String::from_utf8_lossy(r.value).into_owned(),
                )
            })
            .collect()
    }

    #[test]
    fn line_ends_and_numbers() {
        let r = recs("user-agent: a\r\ndisallow: /x\rallow: /y\n\nsitemap: s");
        assert_eq!(
            r,
            vec![
                (1, Field::UserAgent, "a".into()),
                (2, Field::Disallow, "/x".into()),
                (3, Field::Allow, "/y".into()),
                (5, Field::Sitemap, "s".into()),
            ]
        );
    }

    #[test]
    fn bom_comments_whitespace_and_case() {
        let r = recs("\u{feff}USER-AGENT :  * # all\n\t Disallow:/p#c \n# only a comment\n");
        assert_eq!(
            r,
            vec![
                (1, Field::UserAgent, "*".into()),
                (2, Field::Disallow, "/p".into()),
            ]
        );
        // A partial BOM is skipped too.
        assert_eq!(recs("\u{feff}")[..], []);
        let partial = records(b"\xEF\xBBallow: /a").next().map(|r| r.field);
        assert_eq!(partial, Some(Field::Allow));
    }

    #[test]
    fn typos_and_missing_colon() {
        let r = recs(
            "useragent x\ndissallow /a\ndisalow: /b\nuser agent: y\nsite-map: m\nfoo bar baz\n",
        );
        let fields: Vec<_> = r.iter().map(|r| r.1).collect();
        assert_eq!(
            fields,
            vec![
                Field::UserAgent,
                Field::Disallow,
                Field::Disallow,
                Field::UserAgent,
                Field::Sitemap
            ]
        );
    }

    #[test]
    fn garbage_lines_are_skipped() {
        assert!(recs("<html><body>\n:\n   \n\u{0}\u{1}").is_empty());
        assert_eq!(recs("<a href=x>: y")[0].1, Field::Unknown);
    }

    #[test]
    fn long_lines_are_cut() {
        let long = format!("disallow: /{}", "a".repeat(MAX_LINE_BYTES * 2));
        let r = recs(&long);
        assert_eq!(r[0].2.len(), MAX_LINE_BYTES - "disallow: ".len());
    }
}
