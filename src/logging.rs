//! Logs: `key=value` text for people, or one JSON object per line for log pipelines
//! (`robotsgate.log_format: json`).
//!
//! Everything goes through the `log` facade to stderr (journald under systemd). The
//! access log is target `access`, one record per request, built as an [`AccessRecord`]
//! so both formats carry the same fields. Warnings that concern an origin (robots.txt
//! fetch failures, clamped Crawl-delays) name it; configuration errors name the key.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

static JSON: AtomicBool = AtomicBool::new(false);

/// Chooses the format from now on (set once the configuration is read).
pub fn set_format(format: LogFormat) {
    JSON.store(format == LogFormat::Json, Ordering::Relaxed);
}

/// Installs the logger (`RUST_LOG` filters; `info` by default).
pub fn init() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
        .format(|buf, record| {
            if JSON.load(Ordering::Relaxed) {
                let message = record.args().to_string();
                // An access record is already a JSON object: embed it, not its text.
                let fields = (record.target() == "access")
                    .then(|| serde_json::from_str::<serde_json::Value>(&message).ok())
                    .flatten();
                let line = serde_json::json!({
                    "ts": buf.timestamp_micros().to_string(),
                    "level": record.level().as_str(),
                    "target": record.target(),
                    "message": if fields.is_some() { serde_json::Value::Null } else { message.into() },
                    "access": fields,
                });
                writeln!(buf, "{line}")
            } else {
                writeln!(
                    buf,
                    "[{} {:<5} {}] {}",
                    buf.timestamp_micros(),
                    record.level(),
                    record.target(),
                    record.args()
                )
            }
        })
        .init();
}

/// One request, as the access log records it.
#[derive(Debug, Default, Serialize)]
pub struct AccessRecord<'a> {
    pub origin: &'a str,
    pub path: &'a str,
    pub agent: Option<&'a str>,
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
    pub duration_seconds: f64,
    pub error: Option<String>,
}

impl AccessRecord<'_> {
    pub fn emit(&self) {
        if JSON.load(Ordering::Relaxed) {
            if let Ok(line) = serde_json::to_string(self) {
                log::info!(target: "access", "{line}");
            }
            return;
        }
        log::info!(
            target: "access",
            "origin={} path={} agent=\"{}\" mode={} decision={} status={} upstream_status={} line={} pacing_wait_s={:.3} duration_s={:.6} why=\"{}\"{}",
            self.origin,
            self.path,
            self.agent.unwrap_or("").replace('"', "'"),
            self.mode,
            self.decision,
            self.status,
            self.upstream_status.map_or("-".to_string(), |s| s.to_string()),
            self.line.map_or("-".to_string(), |l| l.to_string()),
            self.pacing_wait_seconds,
            self.duration_seconds,
            self.why.replace('"', "'"),
            self.error
                .as_ref()
                .map(|e| format!(" error=\"{}\"", e.replace('"', "'")))
                .unwrap_or_default()
        );
    }
}
