//! The records a chain holds (schema version [`SCHEMA`]), as written: one JSON object a
//! line, `{"seq":N,"prev":"<hex>","t":"<time>","type":…,…}`. `seq` counts the chain's
//! records from 0, `prev` is the SHA-256 of the previous record's line (64 zeros for the
//! first), `t` the wall-clock time it was written (UTC, microseconds). Every record of a
//! type has the fields its struct here names; a field with no value is left out.
//! `docs/evidence.md` is the schema's reference, every field with its meaning.
//!
//! The types, in the order a request meets them: [`Start`] (a chain's first record:
//! who writes it, with which build, matcher and key), [`Fetch`] (a robots.txt request
//! about to leave), [`Fetched`] (what it brought: the policy by hash, or the absence
//! of one, with the RFC 9309 case), [`Adopted`] (a fleet member took another member's
//! copy), [`Decided`] (a request's decision, written before it is sent), [`Concluded`]
//! (how its exchange ended), [`Gap`] (records lost to a write that failed, whose
//! requests were refused or, with `on_failure: continue`, sent unrecorded).

use serde::Serialize;

/// The schema's version, in every chain's [`Start`] record.
pub const SCHEMA: u32 = 1;

/// One record's own fields (the chain adds `seq`, `prev` and `t`).
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Entry<'a> {
    /// A chain's first record.
    Start(Start<'a>),
    /// A fetch of robots.txt (or of TDMRep's file) about to leave.
    Fetch(Fetch<'a>),
    /// What it brought.
    Fetched(Fetched<'a>),
    /// Another member's copy taken.
    Adopted(Adopted<'a>),
    /// A request's decision.
    Decision(Box<Decided<'a>>),
    /// How a forwarded request's exchange ended.
    Outcome(Concluded<'a>),
    /// Records that were never written.
    Gap(Gap),
}

/// Who writes a chain, and with what.
#[derive(Serialize)]
pub struct Start<'a> {
    /// [`SCHEMA`].
    pub schema: u32,
    /// The process: `member/start.pid`, unique per start.
    pub instance: &'a str,
    /// The member it is (the host name alone, or the fleet member).
    pub member: &'a str,
    /// robotsgate's version.
    pub build: &'a str,
    /// The robots.txt matcher's version (`robots::MATCHER`): what decided every verdict
    /// of the chain.
    pub matcher: &'a str,
    /// The public key (JWK) the chain's heads are signed with.
    pub key: serde_json::Value,
    /// Its RFC 7638 thumbprint.
    pub key_id: &'a str,
}

/// A robots.txt request about to leave (its record is written first).
#[derive(Serialize)]
pub struct Fetch<'a> {
    /// The origin.
    pub origin: &'a str,
    /// The URL asked for.
    pub url: &'a str,
}

/// What a robots.txt request brought.
#[derive(Serialize)]
pub struct Fetched<'a> {
    /// The [`Fetch`] record's `seq`.
    pub fetch: u64,
    /// The origin.
    pub origin: &'a str,
    /// The URL asked for.
    pub url: &'a str,
    /// The URLs redirected through, in order.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub redirects: &'a [String],
    /// The final status, when an answer came.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Its `Cache-Control`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_control: Option<&'a str>,
    /// Its `ETag`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub etag: Option<&'a str>,
    /// Its `Last-Modified`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_modified: Option<&'a str>,
    /// The SHA-256 of the file's octets (kept under `policies/`), when one came.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// How many octets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<usize>,
    /// The RFC 9309 case the answer fell in, and so what it means now (see
    /// `docs/evidence.md`: `rules`, `unavailable`, `unreachable`, `stale-if-error`,
    /// `unreachable-long`).
    pub case: &'a str,
    /// What happened, in words (`HTTP 200`, `timeout`, `dns failure`, `too large`).
    pub outcome: &'a str,
}

/// A fleet member took the fleet's copy another member fetched.
#[derive(Serialize)]
pub struct Adopted<'a> {
    /// The origin.
    pub origin: &'a str,
    /// The copy's SHA-256 (none for an allow-all or disallow-all state).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// The copy's version in the fleet.
    pub version: u64,
    /// Its RFC 9309 case.
    pub case: &'a str,
}

/// A request's decision, written before the request is sent (a refusal's, before it is
/// answered).
#[derive(Default, Serialize)]
pub struct Decided<'a> {
    /// How it arrived: `explicit`, `transparent`, `tunnel` (inside an intercepted
    /// CONNECT), `blind`, `transparent_blind`.
    pub arrived: &'a str,
    /// The client's protocol: `http/1.1` or `h2`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol: Option<&'a str>,
    /// Its method (none for a blind tunnel).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method: Option<&'a str>,
    /// Its origin (`scheme://host[:port]`, the default port left out).
    pub origin: &'a str,
    /// Its URL (a blind tunnel: its origin and `/`).
    pub url: &'a str,
    /// Its client (as `evidence.client_addresses` says).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// Its proxy user.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<&'a str>,
    /// The member that handed it over, when one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<&'a str>,
    /// The robots.txt tokens it was judged as.
    pub tokens: Vec<&'a str>,
    /// Where they came from: `credential`, `rule`, `default`, `header`, `none`.
    pub tokens_from: &'a str,
    /// The purposes it declared.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub purposes: Vec<&'a str>,
    /// `enforce`, or `report` (forwarded whatever the verdict).
    pub mode: &'a str,
    /// The decision label, as `robotsgate_requests_total{decision}` names it.
    pub verdict: &'a str,
    /// Why: the `X-Robots-Decision` robotsgate answered with, or why it was allowed.
    pub why: &'a str,
    /// Report mode: what enforcing would have answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub would: Option<&'a str>,
    /// The robots.txt it was decided on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<PolicyRef<'a>>,
    /// The group the tokens chose (its first name), when one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<&'a str>,
    /// The rule that decided, when one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<RuleRef<'a>>,
    /// The TDMRep rule that refused it (or in report mode would have), in the file
    /// kept by its SHA-256.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tdmrep: Option<TdmRuleRef<'a>>,
    /// The usage verdict (`X-Robots-Usage`), and which source it came from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<&'a str>,
    /// How long it waited for its pacing turn, in seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait_s: Option<f64>,
    /// The Web Bot Auth key it is signed with (its thumbprint).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_id: Option<&'a str>,
}

/// The robots.txt a decision was made on.
#[derive(Serialize)]
pub struct PolicyRef<'a> {
    /// The SHA-256 of its octets (none: no file, see `case`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<&'a str>,
    /// The RFC 9309 case it is in now (`fresh`, `stale-if-error`, `unavailable`,
    /// `unreachable`, `unreachable-long`).
    pub case: &'static str,
    /// How old the copy is, in seconds since it was fetched.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub age_s: Option<f64>,
}

/// The rule that decided, as `/check` and `X-Robots-Decision` name it.
#[derive(Serialize)]
pub struct RuleRef<'a> {
    /// `allow` or `disallow`.
    pub kind: &'a str,
    /// Its pattern, as written in the file.
    pub pattern: &'a str,
    /// Its line in the file.
    pub line: u32,
}

/// A rule of an origin's `/.well-known/tdmrep.json`.
#[derive(Serialize)]
pub struct TdmRuleRef<'a> {
    /// The SHA-256 of the file's octets (kept under `policies/`).
    pub sha256: &'a str,
    /// The rule's index in the file, from 0.
    pub rule: usize,
}

/// How a forwarded request's exchange ended (written after it, not waited for).
#[derive(Serialize)]
pub struct Concluded<'a> {
    /// The [`Decided`] record's `seq`.
    pub decision: u64,
    /// The origin's status, when it answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// How the exchange ended (`complete`, or what failed).
    pub ended: &'a str,
    /// The pay-per-crawl receipt, when it was charged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payment: Option<&'a str>,
    /// What robotsgate made of the origin's answer, when not the answer itself: the
    /// `X-Robots-Decision` of a TDMRep reservation (`tdm-reserved; …`: withheld, 451;
    /// `would-tdm-withhold; …`: given, marked).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answered: Option<&'a str>,
    /// The SHA-256 of the body the crawler received (`evidence.body_digest`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body_sha256: Option<String>,
    /// Its length in octets, when digested.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body_bytes: Option<u64>,
}

/// Records numbered `from` to `to` (inclusive) were never written: a write failed, and
/// their requests were refused (`on_failure: refuse`) or sent unrecorded (`continue`).
#[derive(Serialize)]
pub struct Gap {
    /// The first lost `seq`.
    pub from: u64,
    /// The last.
    pub to: u64,
    /// What failed.
    pub error: String,
    /// What the requests got: `refused` or `sent`.
    pub requests: &'static str,
}

/// Lower-case hexadecimal of `octets`.
pub fn hex(octets: &[u8]) -> String {
    let mut out = Vec::with_capacity(octets.len() * 2);
    hex_into(octets, &mut out);
    String::from_utf8(out).unwrap_or_default()
}

/// [`hex`], appended to `out`.
pub fn hex_into(octets: &[u8], out: &mut Vec<u8>) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    out.extend(
        octets
            .iter()
            .flat_map(|b| [DIGITS[usize::from(b >> 4)], DIGITS[usize::from(b & 15)]]),
    );
}

/// `at` as the records write times: RFC 3339, UTC, microseconds
/// (`2026-12-07T15:00:00.123456Z`); such strings sort as the times do. The date and time
/// of day are formatted once per second per thread.
pub fn stamp(at: std::time::SystemTime) -> String {
    thread_local!(static SECOND: std::cell::RefCell<(u64, String)> = const {
        std::cell::RefCell::new((u64::MAX, String::new()))
    });
    let since = at.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let mut out = SECOND.with_borrow_mut(|(second, prefix)| {
        if *second != since.as_secs() {
            *second = since.as_secs();
            let day = i64::try_from(since.as_secs())
                .ok()
                .and_then(|s| time::OffsetDateTime::from_unix_timestamp(s).ok())
                .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
            *prefix = format!(
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.",
                day.year(),
                u8::from(day.month()),
                day.day(),
                day.hour(),
                day.minute(),
                day.second(),
            );
        }
        let mut out = String::with_capacity(27);
        out.push_str(prefix);
        out
    });
    let mut micros = itoa::Buffer::new();
    let micros = micros.format(since.subsec_micros());
    out.extend(std::iter::repeat_n('0', 6 - micros.len()));
    out.push_str(micros);
    out.push('Z');
    out
}

/// A time given on the command line (`2026-12-07`, `2026-12-07T15:00:00Z`, with or
/// without fractions) in the records' own form, to compare with theirs; `None` when
/// it is not one.
pub fn parse_stamp(text: &str) -> Option<String> {
    let text = text.trim();
    let (date, clock) = match text.split_once('T') {
        Some((date, clock)) => (date, clock.trim_end_matches('Z')),
        None => (text, "00:00:00"),
    };
    let mut d = date.split('-').map(str::parse::<u32>);
    let (y, m, day) = (d.next()?.ok()?, d.next()?.ok()?, d.next()?.ok()?);
    let (hms, fraction) = clock.split_once('.').unwrap_or((clock, ""));
    let mut c = hms.split(':').map(str::parse::<u32>);
    let (h, mi, s) = (c.next()?.ok()?, c.next()?.ok()?, c.next()?.ok()?);
    let valid = d.next().is_none()
        && c.next().is_none()
        && (1..=12).contains(&m)
        && (1..=31).contains(&day)
        && h < 24
        && mi < 60
        && s < 61
        && fraction.len() <= 6
        && fraction.bytes().all(|b| b.is_ascii_digit());
    valid.then(|| format!("{y:04}-{m:02}-{day:02}T{h:02}:{mi:02}:{s:02}.{fraction:0<6}Z"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_written_and_read_in_one_sortable_form() {
        let at = std::time::UNIX_EPOCH + std::time::Duration::from_micros(1_765_119_600_123_456);
        assert_eq!(stamp(at), "2025-12-07T15:00:00.123456Z");
        assert_eq!(
            parse_stamp("2025-12-07T15:00:00.1234Z").as_deref(),
            Some("2025-12-07T15:00:00.123400Z")
        );
        assert_eq!(
            parse_stamp("2025-12-07").as_deref(),
            Some("2025-12-07T00:00:00.000000Z")
        );
        for bad in [
            "",
            "2025-13-01",
            "2025-12-07T25:00:00Z",
            "yesterday",
            "2025-12-07T1:2",
        ] {
            assert_eq!(parse_stamp(bad), None, "{bad}");
        }
        assert!(stamp(at) > parse_stamp("2025-12-07T14:59:59Z").expect("time"));
    }

    #[test]
    fn a_decision_leaves_out_what_it_does_not_have() {
        let decided = Decided {
            arrived: "explicit",
            origin: "http://a.example",
            url: "http://a.example/x",
            tokens: vec!["ExampleBot"],
            tokens_from: "default",
            mode: "enforce",
            verdict: "allowed",
            why: "no matching rule",
            ..Decided::default()
        };
        let json = serde_json::to_string(&Entry::Decision(Box::new(decided))).expect("json");
        assert_eq!(
            json,
            r#"{"type":"decision","arrived":"explicit","origin":"http://a.example","url":"http://a.example/x","tokens":["ExampleBot"],"tokens_from":"default","mode":"enforce","verdict":"allowed","why":"no matching rule"}"#
        );
        assert_eq!(hex(&[0, 15, 255]), "000fff");
    }
}
