//! The conformance runner (SPEC §7): verdict and crawl-delay cases, one JSON object a line.
//!
//! A line `{"id","robots","agent","url","allowed"}` checks a verdict; `"agent_tokens"`
//! (an ordered token list) replaces `"agent"`. A line with `"crawl_delay_seconds"` (a
//! number or `null`) checks the delay the crawler's group sets; a line may check both.
//! A line with `"purpose"` (`search`, `train-ai`, `ai-input`) is judged for that purpose
//! alone: its `"allowed"` is the final verdict, robots.txt rules and usage preferences
//! together (`usage` settings at their defaults: unknown allows). A line with
//! `"tdmrep"` (the text of `/.well-known/tdmrep.json`, or `null` when the origin serves
//! none) is a TDMRep case: with `"url"`, the page's response `"headers"` (optional; a
//! name's value a string or a list of them) and its `"html"` (optional, read only when
//! the headers' `Content-Type` names HTML), it checks `"reservation"` (`1`, `0` or
//! `null`: what the three sources resolve to) and `"policy"` (a URL or `null`, when
//! given). Other fields are ignored. A line that cannot be read counts as a failure, it
//! never stops the run.

use std::io::{BufRead, Write};

use serde::Deserialize;

use crate::config::{Purpose, UsageConfig, UsageMode};
use crate::policy::usage::UsageCheck;
use crate::robots::{CanonicalPath, Purposes, RobotsTxt};

/// One conformance case, as a JSON line gives it.
#[derive(Deserialize)]
struct Case {
    /// The case's name, printed with its result.
    #[serde(default)]
    id: String,
    /// The robots.txt text the case parses.
    robots: String,
    /// The crawler's User-Agent (its product token is matched).
    #[serde(default)]
    agent: Option<String>,
    /// The crawler's tokens, given directly instead of a User-Agent.
    #[serde(default)]
    agent_tokens: Option<Vec<String>>,
    /// The URL whose path is decided.
    #[serde(default)]
    url: Option<String>,
    /// The expected verdict.
    #[serde(default)]
    allowed: Option<bool>,
    /// The declared purpose, for a usage case.
    #[serde(default)]
    purpose: Option<String>,
    /// Present (possibly `null`) only on crawl-delay cases.
    #[serde(default, deserialize_with = "present")]
    crawl_delay_seconds: Option<Option<f64>>,
}

/// Distinguishes a missing field (`None`) from an explicit `null` (`Some(None)`).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<f64>>, D::Error> {
    Option::<f64>::deserialize(d).map(Some)
}

#[derive(Debug, Default, PartialEq, Eq)]
/// How many conformance cases passed and failed.
pub struct Tally {
    /// Cases whose verdict matched.
    pub passed: usize,
    /// Cases whose verdict did not.
    pub failed: usize,
}

/// Runs every case of `input`, writing one line per failure to `out`, then the summary
/// line `N passed, M failed`.
pub fn run(input: impl BufRead, mut out: impl Write) -> std::io::Result<Tally> {
    let mut tally = Tally::default();
    for (n, line) in input.lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        match check_line(&line) {
            Ok(()) => tally.passed += 1,
            Err(why) => {
                tally.failed += 1;
                writeln!(out, "FAIL line {}: {why}", n + 1)?;
            }
        }
    }
    writeln!(out, "{} passed, {} failed", tally.passed, tally.failed)?;
    Ok(tally)
}

/// Checks one input line: a JSON case, or why it is not one.
fn check_line(line: &str) -> Result<(), Failed> {
    let unreadable =
        |e: serde_json::Error| Failed::new(FailedKind::Unreadable, format!("unreadable case: {e}"));
    let value: serde_json::Value = serde_json::from_str(line).map_err(unreadable)?;
    if value.get("tdmrep").is_some() {
        return check_tdmrep(&value);
    }
    let case: Case = serde_json::from_value(value).map_err(unreadable)?;
    let incomplete = |what: String| Failed::new(FailedKind::Incomplete, what);
    let disagrees = |what: String| Failed::new(FailedKind::Disagrees, what);
    let tokens: Vec<String> = match (case.agent_tokens, case.agent) {
        (Some(tokens), _) if !tokens.is_empty() => tokens,
        (_, Some(agent)) => vec![agent],
        _ => return Err(incomplete(format!("{}: no agent or agent_tokens", case.id))),
    };
    let robots = RobotsTxt::parse(case.robots.as_bytes());
    let mut checked = false;
    if let Some(expected) = case.allowed {
        let url = case
            .url
            .as_deref()
            .ok_or_else(|| incomplete(format!("{}: no url", case.id)))?;
        let verdict = robots.check(&tokens, url);
        let mut allowed = verdict.allowed;
        let mut why = verdict.to_string();
        if let Some(label) = &case.purpose {
            let purpose = Purpose::from_label(label)
                .ok_or_else(|| incomplete(format!("{}: `{label}` is not a purpose", case.id)))?;
            let group = robots.usage_group_for(&tokens);
            let usage = robots.usage(group, &CanonicalPath::from_url(url));
            let check = UsageCheck::new(
                Purposes::NONE.with(purpose),
                UsageMode::Enforce,
                &UsageConfig::default(),
            );
            let judged = check.judge(&usage);
            if allowed && judged.refused {
                allowed = false;
                why = format!("usage: {}", judged.header());
            }
        }
        if allowed != expected {
            return Err(disagrees(format!(
                "{}: {url} for {tokens:?}: expected {}, got {} ({why})",
                case.id,
                word(expected),
                word(allowed),
            )));
        }
        checked = true;
    }
    if let Some(expected) = case.crawl_delay_seconds {
        let got = robots.crawl_delay(robots.group_for(&tokens));
        let same = match (expected, got) {
            (Some(e), Some(g)) => (e - g).abs() < 1e-9,
            (None, None) => true,
            _ => false,
        };
        if !same {
            return Err(disagrees(format!(
                "{}: crawl-delay for {tokens:?}: expected {expected:?}, got {got:?}",
                case.id
            )));
        }
        checked = true;
    }
    if checked {
        Ok(())
    } else {
        Err(incomplete(format!(
            "{}: neither \"allowed\" nor \"crawl_delay_seconds\"",
            case.id
        )))
    }
}

/// Checks a TDMRep case: what the file, the headers and the HTML resolve to.
fn check_tdmrep(case: &serde_json::Value) -> Result<(), Failed> {
    use crate::robots::tdmrep::{is_html, statement_of_headers, statement_of_html, Tdm, TdmFile};
    let id = case["id"].as_str().unwrap_or("");
    let incomplete = |what: &str| Failed::new(FailedKind::Incomplete, format!("{id}: {what}"));
    let url = case["url"].as_str().ok_or_else(|| incomplete("no url"))?;
    let file = match &case["tdmrep"] {
        serde_json::Value::String(text) => Some(TdmFile::parse(text.as_bytes())),
        serde_json::Value::Null => None,
        _ => return Err(incomplete("\"tdmrep\" is neither text nor null")),
    };
    let mut headers = http::HeaderMap::new();
    if let Some(given) = case.get("headers").filter(|h| !h.is_null()) {
        let given = given
            .as_object()
            .ok_or_else(|| incomplete("\"headers\" is not an object"))?;
        for (name, values) in given {
            let name = http::HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| incomplete(&format!("`{name}` is not a header name")))?;
            let values = match values {
                serde_json::Value::Array(list) => list.iter().collect(),
                one => vec![one],
            };
            for value in values {
                let value = value
                    .as_str()
                    .and_then(|v| http::HeaderValue::from_str(v).ok())
                    .ok_or_else(|| incomplete(&format!("{name}: not a header value")))?;
                headers.append(name.clone(), value);
            }
        }
    }
    let html = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|t| t.to_str().ok())
        .filter(|t| is_html(t))
        .and(case["html"].as_str());
    let path = CanonicalPath::from_url(url);
    let header = statement_of_headers(&headers);
    let meta = html.and_then(|h| statement_of_html(h.as_bytes()));
    let got = Tdm::resolve(
        file.as_ref().and_then(|f| f.lookup(&path)),
        header.as_ref(),
        meta.as_ref(),
    );
    let expected = match &case["reservation"] {
        serde_json::Value::Null => None,
        v => match v.as_u64() {
            Some(1) => Some(true),
            Some(0) => Some(false),
            _ => return Err(incomplete("\"reservation\" is not 1, 0 or null")),
        },
    };
    let source = got.source.map_or("none", |s| s.label());
    let number = |r: Option<bool>| r.map_or("null".to_string(), |r| u8::from(r).to_string());
    if got.reserved != expected {
        return Err(Failed::new(
            FailedKind::Disagrees,
            format!(
                "{id}: {url}: expected tdm-reservation {}, got {} (from {source})",
                number(expected),
                number(got.reserved)
            ),
        ));
    }
    if let Some(policy) = case.get("policy") {
        if policy.as_str() != got.policy.as_deref() {
            return Err(Failed::new(
                FailedKind::Disagrees,
                format!(
                    "{id}: {url}: expected tdm-policy {policy}, got {:?} (from {source})",
                    got.policy
                ),
            ));
        }
    }
    Ok(())
}

/// Why a case did not pass: its kind, and what to say.
#[derive(Debug)]
pub struct Failed {
    /// What went wrong.
    kind: FailedKind,
    /// The report's line.
    why: String,
}

/// What kind of failure a case's is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailedKind {
    /// The line is not a JSON case.
    Unreadable,
    /// The case lacks what it needs (an agent, a URL, an expectation) or names an
    /// unknown purpose.
    Incomplete,
    /// robotsgate's verdict or Crawl-delay differs from the expected one.
    Disagrees,
}

impl Failed {
    /// A failure of `kind`, saying `why`.
    fn new(kind: FailedKind, why: String) -> Failed {
        Failed { kind, why }
    }

    /// What kind of failure it is.
    pub fn kind(&self) -> FailedKind {
        self.kind
    }
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.why)
    }
}

impl std::error::Error for Failed {}

/// `allowed` or `disallowed`, for the report.
fn word(allowed: bool) -> &'static str {
    if allowed {
        "allowed"
    } else {
        "disallowed"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_failure_says_its_kind() {
        let kind = |line: &str| check_line(line).err().map(|f| f.kind());
        assert_eq!(kind("{not json"), Some(FailedKind::Unreadable));
        let no_agent = r#"{"id":"a","robots":"","url":"https://e.com/","allowed":true}"#;
        assert_eq!(kind(no_agent), Some(FailedKind::Incomplete));
        let wrong = r#"{"id":"b","robots":"User-agent: *\nDisallow: /","agent":"x","url":"https://e.com/p","allowed":true}"#;
        assert_eq!(kind(wrong), Some(FailedKind::Disagrees));
        let right = r#"{"id":"c","robots":"User-agent: *\nDisallow: /","agent":"x","url":"https://e.com/p","allowed":false}"#;
        assert_eq!(kind(right), None);
    }
}
