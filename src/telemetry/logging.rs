//! Logs: human-readable text, or one JSON object per line for log pipelines
//! (`robotsgate.log_format: json`).
//!
//! robotsgate logs with `tracing`; Pingora and other dependencies log through the `log`
//! facade, which is bridged into the same subscriber, so one format covers every line.
//! Everything goes to stderr (the journal under systemd) through the [`sink`], filtered
//! by `RUST_LOG` (`info` by default). The access log is target `access`: one line per
//! request whose fields ([`AccessRecord`]) are the record — in JSON they are top-level
//! keys. Warnings that concern an origin (robots.txt fetch failures, clamped
//! Crawl-delays) name it; configuration errors name the key.
//!
//! The access log is on every request, so its lines are not built by `tracing`'s
//! formatter (field visitors, a `Debug` call per value: about 3% of a proxied request's
//! CPU) but written straight into a reused per-thread buffer, in exactly the layout the
//! formatter gives every other line: `tracing`'s timestamp, level and target, string
//! values quoted and escaped as `Debug` (text) or JSON strings, absent values left out.
//!
//! [`sink`]: super::sink

use std::cell::RefCell;
use std::fmt::{Display, Write as _};
use std::sync::OnceLock;

use tracing_subscriber::EnvFilter;

use super::sink;
use crate::config::LogFormat;

/// The installed format; unset while robotsgate's logger is not installed (the library
/// embedded in another program, whose own subscriber then gets the access log).
static FORMAT: OnceLock<LogFormat> = OnceLock::new();

/// Whether the access log is on, read once robotsgate's logger is installed: its filter
/// is fixed from then on, so asking the subscriber on every request (a dispatcher lookup
/// and a pass over the filter's directives: about 250 instructions) learns nothing new.
static ACCESS_ENABLED: OnceLock<bool> = OnceLock::new();

/// Is the access log (target `access`, `INFO`) on? Callers check before building an
/// [`AccessRecord`].
pub fn access_enabled() -> bool {
    match ACCESS_ENABLED.get() {
        Some(&enabled) => enabled,
        None => tracing::enabled!(target: "access", tracing::Level::INFO),
    }
}

/// Installs the process's logger in `format`; later calls do nothing. Commands call it
/// once they know the format (`run` after reading its configuration).
pub fn init(format: LogFormat) {
    FORMAT.get_or_init(|| {
        let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
        let builder = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(sink::SinkWriter);
        // `try_init` also routes `log` records (Pingora's) here.
        let installed = match format {
            LogFormat::Text => builder.with_ansi(false).try_init(),
            LogFormat::Json => builder
                .json()
                .flatten_event(true)
                .with_current_span(false)
                .try_init(),
        };
        match installed {
            Ok(()) => {
                let _ =
                    ACCESS_ENABLED.set(tracing::enabled!(target: "access", tracing::Level::INFO));
            }
            Err(e) => eprintln!("robotsgate: logging not installed: {e}"),
        }
        format
    });
}

/// One request, as the access log records it.
pub struct AccessRecord<'a> {
    /// The origin.
    pub origin: &'a dyn Display,
    /// The request's path and query.
    pub path: &'a str,
    /// The User-Agent.
    pub agent: Option<&'a str>,
    /// Where the robots.txt tokens came from: credential, rule, default, header, none.
    pub tokens_from: &'a str,
    /// Which setting chose enforce or report mode: config, user, client, rule (empty:
    /// not reached).
    pub mode_from: &'a str,
    /// How it arrived: explicit, transparent, tunnel.
    pub mode: &'a str,
    /// The client's protocol: `http/1.1` or `h2`.
    pub protocol: &'a str,
    /// The decision label (as in `robotsgate_requests_total`).
    pub decision: &'a str,
    /// The status sent to the client (0: none, the client left).
    pub status: u16,
    /// The origin's status, when the request was forwarded.
    pub upstream_status: Option<u16>,
    /// The protocol spoken upstream (`http/1.1` or `h2`), when an answer came from there:
    /// the origin's, or for a request handed over, the fleet owner's peer channel.
    pub upstream_protocol: Option<&'a str>,
    /// The deciding rule's line in robots.txt, when a rule decided.
    pub line: Option<u32>,
    /// Why: the allow reason or the `X-Robots-Decision` of robotsgate's own answer.
    pub why: &'a dyn Display,
    /// How long the request waited for its pacing turn.
    pub pacing_wait_seconds: f64,
    /// What set the forwarded request's delay (`crawl-delay`, `floor`, `override`,
    /// `none`); `None` for robotsgate's own answers.
    pub delay_rule: Option<&'a str>,
    /// The usage verdict for the crawler's purposes (`X-Robots-Usage`'s form), when
    /// one was judged and the request forwarded.
    pub usage: Option<&'a str>,
    /// The Web Bot Auth identity the forwarded request was signed as.
    pub identity: Option<&'a str>,
    /// Pay per crawl: `charged USD 0.01`, or `payment-required USD 0.02` (the price the
    /// origin asked), when its answer said.
    pub payment: Option<&'a str>,
    /// From arrival to the response's end.
    pub duration_seconds: f64,
    /// How the exchange failed, if it did.
    pub error: Option<&'a dyn Display>,
}

impl AccessRecord<'_> {
    /// Writes the record (the caller has checked [`access_enabled`]).
    pub fn emit(&self) {
        thread_local!(static LINE: RefCell<String> = const { RefCell::new(String::new()) });
        let Some(&format) = FORMAT.get() else {
            let mut fields = String::new();
            self.write_fields(&mut Fields::new(&mut fields, LogFormat::Text));
            tracing::info!(target: "access", "{fields}");
            return;
        };
        LINE.with_borrow_mut(|line| {
            line.clear();
            let json = format == LogFormat::Json;
            if json {
                line.push_str("{\"timestamp\":\"");
                write_timestamp(line);
                line.push_str("\",\"level\":\"INFO\"");
            } else {
                write_timestamp(line);
                line.push_str("  INFO access: ");
            }
            self.write_fields(&mut Fields::new(line, format));
            line.push_str(if json {
                ",\"target\":\"access\"}\n"
            } else {
                "\n"
            });
            sink::write_line(line.as_bytes());
        });
    }

    /// Writes every field of the record.
    fn write_fields(&self, f: &mut Fields<'_>) {
        f.display("origin", self.origin);
        f.text("path", self.path);
        if let Some(agent) = self.agent {
            f.text("agent", agent);
        }
        f.text("tokens_from", self.tokens_from);
        if !self.mode_from.is_empty() {
            f.text("mode_from", self.mode_from);
        }
        f.text("mode", self.mode);
        f.text("protocol", self.protocol);
        f.text("decision", self.decision);
        f.number("status", self.status.into());
        if let Some(status) = self.upstream_status {
            f.number("upstream_status", status.into());
        }
        if let Some(protocol) = self.upstream_protocol {
            f.text("upstream_protocol", protocol);
        }
        if let Some(line) = self.line {
            f.number("line", line);
        }
        f.display("why", self.why);
        f.seconds("pacing_wait_seconds", self.pacing_wait_seconds);
        if let Some(rule) = self.delay_rule {
            f.text("delay_rule", rule);
        }
        if let Some(usage) = self.usage {
            f.text("usage", usage);
        }
        if let Some(identity) = self.identity {
            f.text("identity", identity);
        }
        if let Some(payment) = self.payment {
            f.text("payment", payment);
        }
        f.seconds("duration_seconds", self.duration_seconds);
        if let Some(error) = self.error {
            f.display("error", error);
        }
    }
}

/// Writes `name=value` pairs (text) or `,"name":value` members (JSON) onto a line.
struct Fields<'a> {
    /// The line written to.
    line: &'a mut String,
    /// Text or JSON.
    format: LogFormat,
    /// No field written yet.
    first: bool,
}

impl<'a> Fields<'a> {
    /// Fields appended to `line` in `format`.
    fn new(line: &'a mut String, format: LogFormat) -> Fields<'a> {
        Fields {
            line,
            format,
            first: true,
        }
    }

    /// Writes a field's name and separator.
    fn name(&mut self, name: &str) {
        match self.format {
            LogFormat::Text => {
                if !std::mem::take(&mut self.first) {
                    self.line.push(' ');
                }
                self.line.push_str(name);
                self.line.push('=');
            }
            LogFormat::Json => {
                self.line.push_str(",\"");
                self.line.push_str(name);
                self.line.push_str("\":");
            }
        }
    }

    /// A string value, quoted and escaped when it has to be.
    fn text(&mut self, name: &str, value: &str) {
        self.name(name);
        let start = self.line.len();
        self.line.push('"');
        self.line.push_str(value);
        self.close_string(start);
    }

    /// A value's `Display`, as a string.
    fn display(&mut self, name: &str, value: &dyn Display) {
        self.name(name);
        let start = self.line.len();
        self.line.push('"');
        let _ = write!(self.line, "{value}");
        self.close_string(start);
    }

    /// Ends the string value begun (with its quote) at `start`: escaped in place only
    /// when it has to be (rarely: a quote, a backslash, a control or non-ASCII
    /// character).
    fn close_string(&mut self, start: usize) {
        if needs_no_escape(&self.line.as_bytes()[start + 1..]) {
            self.line.push('"');
            return;
        }
        let raw = self.line.split_off(start + 1);
        self.line.truncate(start);
        match self.format {
            // `tracing`'s text formatter writes strings with `Debug`.
            LogFormat::Text => {
                let _ = write!(self.line, "{raw:?}");
            }
            LogFormat::Json => {
                let quoted = serde_json::to_string(&raw).unwrap_or_else(|_| "null".into());
                self.line.push_str(&quoted);
            }
        }
    }

    /// Writes `name` with a number.
    fn number(&mut self, name: &str, value: u32) {
        self.name(name);
        self.line.push_str(itoa::Buffer::new().format(value));
    }

    /// Seconds as `tracing` writes an `f64` (`Debug`); JSON has no NaN or infinity.
    fn seconds(&mut self, name: &str, value: f64) {
        self.name(name);
        if value.is_finite() || self.format == LogFormat::Text {
            write_debug_f64(self.line, value);
        } else {
            self.line.push_str("null");
        }
    }
}

/// Are these bytes a string's content as it is, in `Debug` and JSON alike: printable
/// ASCII, no quote, no backslash? Eight bytes at a time (SWAR): a byte of a word is
/// flagged when it is below 0x20, 0x7f or above, `"` or `\`.
fn needs_no_escape(bytes: &[u8]) -> bool {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    // The high bit of each byte of `word` that is below `n` (exact for n <= 0x80).
    let below = |word: u64, n: u8| word.wrapping_sub(ONES * u64::from(n)) & !word & HIGH;
    let equal = |word: u64, b: u8| below(word ^ (ONES * u64::from(b)), 1);
    let mut words = bytes.chunks_exact(8);
    for chunk in &mut words {
        let mut word = [0; 8];
        word.copy_from_slice(chunk);
        let word = u64::from_ne_bytes(word);
        if (word & HIGH)
            | below(word, 0x20)
            | equal(word, 0x7f)
            | equal(word, b'"')
            | equal(word, b'\\')
            != 0
        {
            return false;
        }
    }
    words.remainder().iter().all(plain)
}

/// A byte a string value holds as it is: printable ASCII but `"` and `\`.
fn plain(byte: &u8) -> bool {
    (b' '..=b'~').contains(byte) && *byte != b'"' && *byte != b'\\'
}

/// Appends `value` exactly as `{:?}` writes it, from ryu's digits (`fmt`'s float
/// machinery took a fifth of the line's instructions). Both write the shortest digits
/// that read back as `value`; they part only where `{:?}` switches to an exponent below
/// 1e-4 and ryu below 1e-5, and where two shortest spellings are equally near (they
/// round the tie differently), which takes 16 digits or more. Those, NaN and the
/// infinities go through `{:?}`; a request's seconds rarely do.
fn write_debug_f64(line: &mut String, value: f64) {
    if write_nanoseconds(line, value) {
        return;
    }
    let mut buffer = ryu::Buffer::new();
    if value.is_finite() && !(1e-5..1e-4).contains(&value.abs()) {
        let text = buffer.format_finite(value);
        // Each spelling has a `.` or an `e`: 16 bytes or fewer hold at most 15 digits.
        let significant = || {
            let mantissa = text.split('e').next().unwrap_or(text);
            let digits = mantissa.bytes().filter(u8::is_ascii_digit);
            digits.skip_while(|&d| d == b'0').count()
        };
        if text.len() <= 16 || significant() < 16 {
            line.push_str(text);
            return;
        }
    }
    let _ = write!(line, "{value:?}");
}

/// Appends `value` as `{:?}` writes it when it is a whole number of nanoseconds below
/// 10^6 seconds (a [`Duration`](std::time::Duration)'s `as_secs_f64`, as a request's
/// seconds are), with integer arithmetic: ryu's search for the shortest digits cost a
/// request's line 400 instructions per number. `false`, nothing written, for any other
/// value.
///
/// Why it is exact: `value` is checked to be the double nearest `n / 10^9` (IEEE
/// division rounds correctly), so the decimal of `n / 10^9` reads back as `value`.
/// Below 10^6 (indeed below 2^22) a double's spacing is under 10^-9, so no other
/// multiple of 10^-9 does: with its trailing zeros cut, `n`'s digits are the one
/// shortest spelling, which `{:?}` writes in decimal from 1e-4 up (`1.0` for a whole
/// number) and as `d.ddde-k` below.
fn write_nanoseconds(line: &mut String, value: f64) -> bool {
    if value.to_bits() == 0 {
        line.push_str("0.0");
        return true;
    }
    if !(value > 0.0 && value < 1e6) {
        return false;
    }
    let nanos = (value * 1e9).round();
    if nanos / 1e9 != value {
        return false;
    }
    // Below 10^15: exact in a double and a u64.
    let nanos = nanos as u64;
    if nanos < 100_000 {
        // Below 1e-4: `{:?}` writes an exponent.
        let mut buffer = itoa::Buffer::new();
        let digits = buffer.format(nanos).trim_end_matches('0');
        let exponent = nanos.ilog10() as i32 - 9;
        line.push_str(&digits[..1]);
        if digits.len() > 1 {
            line.push('.');
            line.push_str(&digits[1..]);
        }
        line.push('e');
        line.push_str(itoa::Buffer::new().format(exponent));
        return true;
    }
    line.push_str(itoa::Buffer::new().format(nanos / 1_000_000_000));
    line.push('.');
    // The fraction's nine places (a leading 1 keeps its zeros), trailing zeros cut.
    let mut buffer = itoa::Buffer::new();
    let places = &buffer.format(1_000_000_000 + nanos % 1_000_000_000)[1..];
    let places = places.trim_end_matches('0');
    line.push_str(if places.is_empty() { "0" } else { places });
    true
}

/// Appends the current UTC time as `tracing` writes it (`2026-11-23T06:41:29.518146Z`);
/// the date and time of day are formatted once per second per thread.
fn write_timestamp(line: &mut String) {
    thread_local!(static SECOND: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) });
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    SECOND.with_borrow_mut(|(second, prefix)| {
        if *second != now.as_secs() {
            *second = now.as_secs();
            prefix.clear();
            let at = i64::try_from(now.as_secs())
                .ok()
                .and_then(|s| time::OffsetDateTime::from_unix_timestamp(s).ok())
                .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
            let _ = write!(
                prefix,
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.",
                at.year(),
                u8::from(at.month()),
                at.day(),
                at.hour(),
                at.minute(),
                at.second()
            );
        }
        line.push_str(prefix);
    });
    let mut micros = itoa::Buffer::new();
    let micros = micros.format(now.subsec_micros());
    line.extend(std::iter::repeat_n('0', 6 - micros.len()));
    line.push_str(micros);
    line.push('Z');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record<'a>(path: &'a str, agent: Option<&'a str>) -> AccessRecord<'a> {
        AccessRecord {
            origin: &"http://example.com",
            path,
            agent,
            tokens_from: "default",
            mode_from: "config",
            protocol: "http/1.1",
            mode: "explicit",
            decision: "allowed",
            status: 200,
            upstream_status: None,
            upstream_protocol: None,
            line: Some(3),
            why: &"no matching rule",
            pacing_wait_seconds: 2.5e-6,
            delay_rule: Some("none"),
            usage: None,
            identity: None,
            payment: None,
            duration_seconds: 0.25,
            error: None,
        }
    }

    fn fields(record: &AccessRecord<'_>, format: LogFormat) -> String {
        let mut line = String::new();
        record.write_fields(&mut Fields::new(&mut line, format));
        line
    }

    /// Text lines are `tracing`'s: strings quoted and escaped as `Debug`, absent values
    /// left out.
    #[test]
    fn text_fields_are_tracings() {
        let line = fields(&record("/a b", Some("Bot/1")), LogFormat::Text);
        assert_eq!(
            line,
            "origin=\"http://example.com\" path=\"/a b\" agent=\"Bot/1\" tokens_from=\"default\" mode_from=\"config\" \
             mode=\"explicit\" protocol=\"http/1.1\" decision=\"allowed\" status=200 line=3 why=\"no matching rule\" \
             pacing_wait_seconds=2.5e-6 delay_rule=\"none\" duration_seconds=0.25"
        );
        let hostile = "/\"x\\\n\u{7f}é";
        let line = fields(&record(hostile, Some("a\"b")), LogFormat::Text);
        assert!(line.contains(&format!("path={hostile:?}")), "{line}");
        assert!(line.contains(r#"agent="a\"b""#), "{line}");
    }

    /// Seconds read exactly as `{:?}` writes them, at every magnitude and at the edges
    /// where its layout changes.
    #[test]
    fn seconds_are_written_as_debug_writes_them() {
        let mut values = vec![
            0.0,
            -0.0,
            1.0,
            0.25,
            2.5e-6,
            1e-4,
            1e-5,
            9.999999999999999e-5,
            1e16,
            1e15,
            9_999_999_999_999_998.0,
            1.5e16,
            f64::MIN_POSITIVE,
            f64::MAX,
            f64::EPSILON,
            5e-324,
            0.1 + 0.2,
            123.456,
        ];
        values.extend(
            [1e-5, 1e-4, 1e16]
                .iter()
                .flat_map(|&v: &f64| [v.next_down(), v.next_up()]),
        );
        // A deterministic spread over all magnitudes (an LCG over the bits) and over the
        // ones request durations have.
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        for _ in 0..200_000 {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            values.push(f64::from_bits(state));
            values.push(
                (state >> 11) as f64 / (1u64 << 53) as f64 * 10f64.powi((state % 24) as i32 - 8),
            );
            // Durations, as requests' seconds are: whole nanoseconds, up to 10^8 s.
            let nanos = (state >> 14) % 10u64.pow((state % 17) as u32 + 1);
            values.push(std::time::Duration::from_nanos(nanos).as_secs_f64());
        }
        for value in values.into_iter().filter(|v| v.is_finite()) {
            let mut line = String::new();
            write_debug_f64(&mut line, value);
            assert_eq!(line, format!("{value:?}"), "{:#x}", value.to_bits());
        }
    }

    /// The word-at-a-time check agrees with a byte-at-a-time one, at every position.
    #[test]
    fn strings_needing_no_escape_are_found_at_every_position() {
        for special in (0..=255u8).filter(|b| !plain(b)) {
            for len in 0..20 {
                for at in 0..len {
                    let mut bytes = vec![b'a'; len];
                    assert!(needs_no_escape(&bytes));
                    bytes[at] = special;
                    assert!(!needs_no_escape(&bytes), "{special:#x} at {at} of {len}");
                }
            }
        }
        for b in (0..=255u8).filter(plain) {
            assert!(needs_no_escape(&[b; 17]), "{b:#x}");
        }
    }

    /// JSON lines parse, whatever the values hold, and keep every field.
    #[test]
    fn json_fields_parse() {
        let hostile = "/\"x\\\n\u{1}é";
        let line = fields(&record(hostile, Some("a\"b")), LogFormat::Json);
        let value: serde_json::Value =
            serde_json::from_str(&format!("{{\"level\":\"INFO\"{line}}}")).expect("JSON");
        assert_eq!(value["path"], hostile);
        assert_eq!(value["agent"], "a\"b");
        assert_eq!(value["line"], 3);
        assert_eq!(value["duration_seconds"], 0.25);
        assert!(value.get("upstream_status").is_none());
    }
}
