//! Logs: human-readable text, or one JSON object per line for log pipelines
//! (`robotsgate.log_format: json`).
//!
//! robotsgate logs with `tracing`; Pingora and other dependencies log through the `log`
//! facade, which is bridged into the same subscriber, so one format covers every line.
//! Everything goes to stderr (the journal under systemd), filtered by `RUST_LOG` (`info`
//! by default). The access log is target `access`: one event per request whose fields
//! ([`AccessRecord`]) are the record — in JSON they are top-level keys. Warnings that
//! concern an origin (robots.txt fetch failures, clamped Crawl-delays) name it;
//! configuration errors name the key.

use std::sync::Once;

use tracing_subscriber::EnvFilter;

static INIT: Once = Once::new();

/// Installs the process's logger in `format`; later calls do nothing. Commands call it
/// once they know the format (`run` after reading its configuration).
pub fn init(format: crate::config::LogFormat) {
    INIT.call_once(|| {
        let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
        let builder = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr);
        // `try_init` also routes `log` records (Pingora's) here.
        let installed = match format {
            crate::config::LogFormat::Text => builder.with_ansi(false).try_init(),
            crate::config::LogFormat::Json => builder
                .json()
                .flatten_event(true)
                .with_current_span(false)
                .try_init(),
        };
        if let Err(e) = installed {
            eprintln!("robotsgate: logging not installed: {e}");
        }
    });
}

/// One request, as the access log records it.
#[derive(Debug)]
pub struct AccessRecord<'a> {
    pub origin: &'a str,
    pub path: &'a str,
    pub agent: Option<&'a str>,
    /// Where the robots.txt tokens came from: credential, rule, default, header, none.
    pub tokens_from: &'a str,
    /// How it arrived: explicit, transparent, tunnel.
    pub mode: &'a str,
    pub decision: &'a str,
    /// The status sent to the client (0: none, the client left).
    pub status: u16,
    /// The origin's status, when the request was forwarded.
    pub upstream_status: Option<u16>,
    /// The deciding rule's line in robots.txt, when a rule decided.
    pub line: Option<u32>,
    /// Why: the allow reason or the `X-Robots-Decision` of robotsgate's own answer.
    pub why: &'a str,
    pub pacing_wait_seconds: f64,
    /// What set the forwarded request's delay (`crawl-delay`, `floor`, `override`,
    /// `none`); `None` for robotsgate's own answers.
    pub delay_rule: Option<&'a str>,
    pub duration_seconds: f64,
    pub error: Option<String>,
}

impl AccessRecord<'_> {
    pub fn emit(&self) {
        tracing::info!(
            target: "access",
            origin = self.origin,
            path = self.path,
            agent = self.agent,
            tokens_from = self.tokens_from,
            mode = self.mode,
            decision = self.decision,
            status = self.status,
            upstream_status = self.upstream_status,
            line = self.line,
            why = self.why,
            pacing_wait_seconds = self.pacing_wait_seconds,
            delay_rule = self.delay_rule,
            duration_seconds = self.duration_seconds,
            error = self.error.as_deref(),
        );
    }
}
