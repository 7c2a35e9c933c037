//! TDMRep, the W3C TDM Reservation Protocol (Community Group final report, 2024): a
//! site's reservation of text-and-data-mining rights (EU DSM Directive Art. 4(3)) for a
//! URL, from its three sources.
//!
//! **The file**, `/.well-known/tdmrep.json` ([`TdmFile::parse`]): a JSON array of rules
//! `{"location", "tdm-reservation", "tdm-policy"}`. A rule's `location` is a robots.txt
//! path pattern (`*`, a final `$`, unreserved characters' percent-encoding decoded,
//! case-sensitive), compiled by the robots.txt engine's own pattern compiler and matched
//! against the URL's canonical path and query. **The first matching rule in sequence
//! wins**, whatever the rules after it say. Its `tdm-reservation` is `1` or `0`; any
//! other value (a string, `2`, nothing) is a protocol error, read as unset, and the rules
//! after it are not consulted. `tdm-policy` is read only beside `1`. A file that is no
//! JSON array, an element that is no object or has no string `location`, match nothing;
//! a file the origin does not serve, or no rule matching: unset.
//!
//! **The header** (`tdm-reservation`, `tdm-policy` on a response; names
//! case-insensitive, values trimmed) supersedes the file; **HTML meta**
//! (`<meta name="tdm-reservation" content="1">`, `tdm-policy`; names ASCII
//! case-insensitive) in a page served as `text/html` or `application/xhtml+xml`
//! supersedes both ([`Tdm::resolve`]). A source that states no valid reservation (absent,
//! or a protocol error) leaves the one below it in force: absence never resets a value.
//! The source that wins gives its reservation and its policy together; a policy is
//! read only from a source whose reservation is `1`. Several header values, or several
//! meta elements, that disagree are a protocol error of that source (unset). EPUB and
//! PDF metadata are **not read**.
//!
//! Costs and limits: the file is read up to [`MAX_TDMREP_BYTES`] (more: unset, as
//! unreadable) and at most [`MAX_TDMREP_RULES`] rules are kept (the ones after are
//! never reached by a first-match walk that found none before them: the file is then
//! unset past that point); matching walks the rules in order, each as robots.txt's
//! patterns cost. HTML is read up to [`MAX_HTML_BYTES`] (meta elements after that are
//! not seen), by the `tl` HTML parser, not one of our own.

use serde::Serialize;

use super::normalize::match_form;
use super::pattern::{compile, Pattern};
use super::CanonicalPath;

/// Octets of a `tdmrep.json` read; a longer file is unreadable (unset).
pub const MAX_TDMREP_BYTES: usize = 256 * 1024;

/// Rules of a `tdmrep.json` kept; a URL no kept rule matches is unset.
pub const MAX_TDMREP_RULES: usize = 10_000;

/// Octets of an HTML page read for its meta elements.
pub const MAX_HTML_BYTES: usize = 64 * 1024;

/// Where a TDMRep value came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TdmSource {
    /// `/.well-known/tdmrep.json`.
    File,
    /// The response's `tdm-reservation` header.
    Header,
    /// An HTML page's `<meta name="tdm-reservation">`.
    Meta,
}

impl TdmSource {
    /// The name logs, headers and records use: `file`, `header`, `meta`.
    pub fn label(self) -> &'static str {
        match self {
            TdmSource::File => "file",
            TdmSource::Header => "header",
            TdmSource::Meta => "meta",
        }
    }
}

/// What one source states for a URL: a reservation (`true`: rights reserved) and, beside
/// a reservation, the policy's URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TdmStatement {
    /// `tdm-reservation: 1`.
    pub reserved: bool,
    /// `tdm-policy`, read only beside `1`.
    pub policy: Option<String>,
}

/// The resolved TDMRep value for a URL: `None` reservation when unset.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tdm {
    /// `Some(true)` reserved, `Some(false)` not reserved, `None` unset.
    pub reserved: Option<bool>,
    /// The winning source's policy (only when reserved).
    pub policy: Option<String>,
    /// The source that won.
    pub source: Option<TdmSource>,
    /// The file's rule that decided (its index in the array, from 0), when the file won.
    pub rule: Option<usize>,
}

/// One rule of the file.
#[derive(Debug)]
struct TdmRule {
    /// The compiled `location`; `None` for an empty one (matches nothing).
    location: Option<Pattern>,
    /// The `location` as written (trimmed).
    written: Box<str>,
    /// Its statement; `None` a protocol error (unset).
    statement: Option<TdmStatement>,
}

/// A parsed `/.well-known/tdmrep.json`.
#[derive(Debug, Default)]
pub struct TdmFile {
    /// The rules, in sequence.
    rules: Vec<TdmRule>,
}

impl TdmFile {
    /// Parses the file's octets; anything unreadable is a file with no rules.
    pub fn parse(octets: &[u8]) -> TdmFile {
        if octets.len() > MAX_TDMREP_BYTES {
            return TdmFile::default();
        }
        let Ok(serde_json::Value::Array(items)) = serde_json::from_slice(octets) else {
            return TdmFile::default();
        };
        let rules = items
            .iter()
            .take(MAX_TDMREP_RULES)
            .filter_map(|item| {
                let rule = item.as_object()?;
                let location = rule.get("location")?.as_str()?;
                let location = location.trim();
                let location_text = location;
                let location = (!location.is_empty()).then(|| compile(location.as_bytes()).pattern);
                Some(TdmRule {
                    location,
                    written: location_text.into(),
                    statement: statement(
                        rule.get("tdm-reservation").and_then(reservation_of_json),
                        rule.get("tdm-policy").and_then(|p| p.as_str()),
                    ),
                })
            })
            .collect();
        TdmFile { rules }
    }

    /// How many rules were read.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// Whether no rule was read.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The `location` of rule `index`, as written.
    pub fn location(&self, index: usize) -> Option<&str> {
        self.rules.get(index).map(|r| &*r.written)
    }

    /// The first rule matching `path` (canonical, with its query): its index and its
    /// statement (`None`: a protocol error, unset). `None` when no rule matches.
    pub fn lookup(&self, path: &CanonicalPath<'_>) -> Option<(usize, Option<&TdmStatement>)> {
        let form = match_form(path.as_str());
        self.rules.iter().enumerate().find_map(|(i, rule)| {
            let location = rule.location.as_ref()?;
            location
                .matches(&form)
                .then_some((i, rule.statement.as_ref()))
        })
    }
}

/// A statement from a reservation value (`Some(true)` for 1, `Some(false)` for 0, `None`
/// a protocol error) and a policy, read only beside 1.
fn statement(reservation: Option<bool>, policy: Option<&str>) -> Option<TdmStatement> {
    let reserved = reservation?;
    let policy = policy
        .map(str::trim)
        .filter(|p| reserved && !p.is_empty())
        .map(str::to_string);
    Some(TdmStatement { reserved, policy })
}

/// A file's `tdm-reservation`: the JSON numbers 1 and 0 only.
fn reservation_of_json(value: &serde_json::Value) -> Option<bool> {
    match value.as_u64() {
        Some(1) if !value.is_f64() => Some(true),
        Some(0) if !value.is_f64() => Some(false),
        _ => None,
    }
}

/// A header's or meta's `tdm-reservation` text: `1` or `0` (trimmed) only.
fn reservation_of_text(text: &str) -> Option<bool> {
    match text.trim() {
        "1" => Some(true),
        "0" => Some(false),
        _ => None,
    }
}

/// One source's statement from its values of `tdm-reservation` and `tdm-policy`
/// (several values must agree, or the source states nothing).
pub fn statement_of_values<'a>(
    reservations: impl IntoIterator<Item = &'a str>,
    policies: impl IntoIterator<Item = &'a str>,
) -> Option<TdmStatement> {
    let reserved = agreed(reservations.into_iter().map(reservation_of_text))??;
    let policy = agreed(policies.into_iter().map(|p| Some(p.trim())))
        .flatten()
        .filter(|p| !p.is_empty());
    statement(Some(reserved), policy)
}

/// The one value all of `values` hold; `None` when there is none, `Some(None)` when
/// they disagree or one is a protocol error.
fn agreed<T: PartialEq>(values: impl Iterator<Item = Option<T>>) -> Option<Option<T>> {
    let mut found: Option<Option<T>> = None;
    for value in values {
        match &found {
            None => found = Some(value),
            Some(first) if *first == value => {}
            Some(_) => return Some(None),
        }
    }
    found
}

/// The statement of a response's headers (`names` case-insensitive, as HTTP's are). A
/// value that is not UTF-8 is a protocol error of a reservation, and no policy.
pub fn statement_of_headers(headers: &http::HeaderMap) -> Option<TdmStatement> {
    fn text(v: &http::HeaderValue) -> Option<&str> {
        std::str::from_utf8(v.as_bytes()).ok()
    }
    let reservations: Vec<&str> = headers
        .get_all("tdm-reservation")
        .iter()
        .map(|v| text(v).unwrap_or("\u{0}invalid"))
        .collect();
    let policies: Vec<&str> = headers
        .get_all("tdm-policy")
        .iter()
        .filter_map(text)
        .collect();
    statement_of_values(reservations, policies)
}

/// Whether a `Content-Type` names an HTML page (`text/html`, `application/xhtml+xml`).
pub fn is_html(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "text/html" || essence == "application/xhtml+xml"
}

/// The statement of an HTML page's meta elements (its first [`MAX_HTML_BYTES`]).
pub fn statement_of_html(html: &[u8]) -> Option<TdmStatement> {
    let cut = &html[..html.len().min(MAX_HTML_BYTES)];
    let text = String::from_utf8_lossy(cut);
    let dom = tl::parse(&text, tl::ParserOptions::default()).ok()?;
    let mut reservations = Vec::new();
    let mut policies = Vec::new();
    for node in dom.nodes() {
        let Some(tag) = node.as_tag() else {
            continue;
        };
        if !tag.name().as_bytes().eq_ignore_ascii_case(b"meta") {
            continue;
        }
        let attributes = tag.attributes();
        let attribute = |wanted: &str| -> Option<String> {
            attributes
                .iter()
                .find(|(name, _)| name.eq_ignore_ascii_case(wanted))
                .and_then(|(_, value)| value.map(|v| v.into_owned()))
        };
        let Some(name) = attribute("name") else {
            continue;
        };
        let content = attribute("content").unwrap_or_default();
        let content = decode_entities(&content);
        if name.trim().eq_ignore_ascii_case("tdm-reservation") {
            reservations.push(content);
        } else if name.trim().eq_ignore_ascii_case("tdm-policy") {
            policies.push(content);
        }
    }
    statement_of_values(
        reservations.iter().map(String::as_str),
        policies.iter().map(String::as_str),
    )
}

/// The character references a policy URL in an attribute may carry (`&amp;` and the
/// numeric ones; others are left as written).
fn decode_entities(text: &str) -> String {
    if !text.contains('&') {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let end = rest.find(';').filter(|e| *e <= 10);
        let decoded = end.and_then(|end| {
            let name = &rest[1..end];
            let c = match name {
                "amp" => Some('&'),
                "quot" => Some('"'),
                "apos" => Some('\''),
                "lt" => Some('<'),
                "gt" => Some('>'),
                _ => name
                    .strip_prefix("#x")
                    .or_else(|| name.strip_prefix("#X"))
                    .and_then(|h| u32::from_str_radix(h, 16).ok())
                    .or_else(|| name.strip_prefix('#').and_then(|d| d.parse().ok()))
                    .and_then(char::from_u32),
            }?;
            Some((c, end))
        });
        match decoded {
            Some((c, end)) => {
                out.push(c);
                rest = &rest[end + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

impl Tdm {
    /// The value for a URL from its sources, the highest in force winning: meta, then
    /// header, then the file's first matching rule (`file`: its index and statement).
    pub fn resolve(
        file: Option<(usize, Option<&TdmStatement>)>,
        header: Option<&TdmStatement>,
        meta: Option<&TdmStatement>,
    ) -> Tdm {
        let won = |statement: &TdmStatement, source, rule| Tdm {
            reserved: Some(statement.reserved),
            policy: statement.policy.clone(),
            source: Some(source),
            rule,
        };
        if let Some(meta) = meta {
            return won(meta, TdmSource::Meta, None);
        }
        if let Some(header) = header {
            return won(header, TdmSource::Header, None);
        }
        match file {
            Some((index, Some(statement))) => won(statement, TdmSource::File, Some(index)),
            _ => Tdm::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_says(file: &str, path: &str) -> Option<(usize, Option<bool>)> {
        let parsed = TdmFile::parse(file.as_bytes());
        parsed
            .lookup(&CanonicalPath::new(path))
            .map(|(i, s)| (i, s.map(|s| s.reserved)))
    }

    #[test]
    fn the_first_matching_rule_wins_and_a_protocol_error_stops_the_walk() {
        let file = r#"[{"location":"/a/*","tdm-reservation":1},
                       {"location":"/a/b","tdm-reservation":0},
                       {"location":"/x","tdm-reservation":"1"},
                       {"location":"/x","tdm-reservation":1}]"#;
        assert_eq!(file_says(file, "/a/b"), Some((0, Some(true))));
        assert_eq!(file_says(file, "/x"), Some((2, None)));
        assert_eq!(file_says(file, "/y"), None);
        assert_eq!(file_says(r#"{"location":"/"}"#, "/"), None);
        assert_eq!(file_says("not json", "/"), None);
    }

    #[test]
    fn locations_match_as_robots_paths_do_case_sensitively() {
        let file = r#"[{"location":"/Doc/*.pdf$","tdm-reservation":1},
                       {"location":"/%7euser","tdm-reservation":1}]"#;
        assert_eq!(file_says(file, "/Doc/a/b.pdf"), Some((0, Some(true))));
        assert_eq!(file_says(file, "/doc/a/b.pdf"), None);
        assert_eq!(file_says(file, "/Doc/a/b.pdf?x"), None);
        assert_eq!(file_says(file, "/~user/x"), Some((1, Some(true))));
    }

    #[test]
    fn meta_supersedes_the_header_which_supersedes_the_file() {
        let reserved = TdmStatement {
            reserved: true,
            policy: Some("https://p".into()),
        };
        let free = TdmStatement {
            reserved: false,
            policy: None,
        };
        let file = Some((3, Some(&reserved)));
        let t = Tdm::resolve(file, Some(&free), None);
        assert_eq!(
            (t.reserved, t.source),
            (Some(false), Some(TdmSource::Header))
        );
        let t = Tdm::resolve(file, None, None);
        assert_eq!((t.reserved, t.rule), (Some(true), Some(3)));
        let t = Tdm::resolve(Some((0, None)), None, Some(&reserved));
        assert_eq!(t.source, Some(TdmSource::Meta));
        assert_eq!(Tdm::resolve(Some((0, None)), None, None), Tdm::default());
    }

    #[test]
    fn meta_elements_are_read_from_html() {
        let html = br#"<html><head><META Name="TDM-Reservation" content=" 1 ">
            <meta name="tdm-policy" content="https://p.example/?a=1&amp;b=2"></head></html>"#;
        let s = statement_of_html(html).expect("stated");
        assert!(s.reserved);
        assert_eq!(s.policy.as_deref(), Some("https://p.example/?a=1&b=2"));
        let two = br#"<meta name="tdm-reservation" content="1"><meta name="tdm-reservation" content="0">"#;
        assert_eq!(statement_of_html(two), None);
        assert_eq!(statement_of_html(b"<p>no meta</p>"), None);
        assert_eq!(statement_of_html(&[0xff, b'<', 0x00, b'>']), None);
    }

    proptest::proptest! {
        /// Any octets, and any array of rule-shaped objects: nothing panics, a rule found
        /// is one of the file's, a policy comes only with a reservation.
        #[test]
        fn any_file_or_page_reads_without_panicking(
            octets in proptest::collection::vec(proptest::num::u8::ANY, 0..512),
            rules in proptest::collection::vec(
                ("[/*$a-c%7E]{0,6}", proptest::option::of(-1i64..3), proptest::option::of("[a-z:/]{0,8}")),
                0..6,
            ),
            path in "/[a-c/~%7E$]{0,8}",
        ) {
            let rules: Vec<serde_json::Value> = rules
                .into_iter()
                .map(|(location, reservation, policy)| serde_json::json!({
                    "location": location,
                    "tdm-reservation": reservation,
                    "tdm-policy": policy,
                }))
                .collect();
            let text = serde_json::Value::Array(rules).to_string();
            for input in [octets.as_slice(), text.as_bytes()] {
                let file = TdmFile::parse(input);
                if let Some((index, statement)) = file.lookup(&CanonicalPath::new(&path)) {
                    proptest::prop_assert!(index < file.len());
                    if let Some(statement) = statement {
                        proptest::prop_assert!(statement.reserved || statement.policy.is_none());
                    }
                }
                if let Some(statement) = statement_of_html(input) {
                    proptest::prop_assert!(statement.reserved || statement.policy.is_none());
                }
            }
        }
    }
}
