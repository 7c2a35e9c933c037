//! The crawler's published statement (what the GPAI Code of Practice asks an operator to
//! publish): from the configuration in force, each crawler (its robots.txt tokens, the
//! User-Agent robots.txt is fetched as, its Web Bot Auth identity and key directory,
//! its declared purposes and modes) and each protocol honoured with its settings
//! (RFC 9309 with its cache and error rules, aipref's Content-Usage, Content-Signal,
//! TDMRep), as JSON, as an HTML page, and as an Atom feed whose entry is named by the
//! SHA-256 of the JSON: any change to what is stated (a reload included) is a new entry.
//!
//! `robotsgate statement --config FILE --out DIR` writes `statement.json`,
//! `statement.html` and `statement.atom` into `DIR`, keeping `statement-history.jsonl`
//! there (one line per statement that was in force, newest last): the feed holds the
//! last [`FEED_ENTRIES`] of them, so a reader sees each change. The admin listener serves
//! the same three (`/statement.json`, `/statement.html`, `/statement.atom`), the feed
//! with the one statement in force, dated when this process began serving it.
//!
//! Costs: made once, at start (or by the command); a few KiB.

use serde_json::{json, Value};

use crate::config::{Config, EnforceMode, IdentityConfig, UsageMode};

/// Entries an Atom feed written by the command keeps.
pub const FEED_ENTRIES: usize = 20;

/// One statement: its JSON and the SHA-256 (hex) that names it.
#[derive(Clone, Debug)]
pub struct CrawlerStatement {
    /// The statement itself.
    json: Value,
    /// SHA-256 of its serialisation, in hex.
    fingerprint: String,
}

/// A statement in force from a time: a feed entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dated {
    /// The statement's fingerprint.
    pub fingerprint: String,
    /// When it came in force (RFC 3339).
    pub since: String,
}

impl CrawlerStatement {
    /// The statement of `config`.
    pub fn of(config: &Config) -> CrawlerStatement {
        let robots = &config.robots;
        let usage = &config.usage;
        let identity = |name: Option<&String>| -> Value {
            let found = name.and_then(|n| config.signing.identities.iter().find(|i| &i.name == n));
            found.map_or(Value::Null, identity_json)
        };
        let mode = |m: Option<EnforceMode>| enforce_label(m.unwrap_or(config.enforce.mode));
        let usage_mode = |m: Option<UsageMode>| usage_label(m.unwrap_or(usage.mode));
        let mut crawlers = vec![json!({
            "name": "default",
            "matches": "requests no agent rule matches",
            "tokens": config.agent.default_tokens,
            "purposes": config.agent.default_purposes,
            "mode": mode(None),
            "usage_mode": usage_mode(None),
            "identity": identity(config.agent.default_identity.as_ref()),
        })];
        for (n, rule) in config.agent.rules.iter().enumerate() {
            let mut matches = Vec::new();
            if let Some(cidr) = &rule.client {
                matches.push(format!("clients in {}", cidr.0));
            }
            if let Some(text) = &rule.user_agent_contains {
                matches.push(format!("a User-Agent containing \"{text}\""));
            }
            crawlers.push(json!({
                "name": format!("agent.rules[{n}]"),
                "matches": matches.join(" and "),
                "tokens": rule.tokens,
                "purposes": rule.purposes.as_ref().unwrap_or(&config.agent.default_purposes),
                "mode": mode(rule.mode),
                "usage_mode": usage_mode(rule.usage_mode),
                "identity": identity(rule.identity.as_ref().or(config.agent.default_identity.as_ref())),
            }));
        }
        let json = json!({
            "statement_version": 1,
            "made_by": format!("robotsgate {}", env!("CARGO_PKG_VERSION")),
            "matcher": crate::evidence::MATCHER,
            "robots_txt_user_agent": robots.user_agent,
            "crawlers": crawlers,
            "protocols": {
                "robots_txt": {
                    "spec": "RFC 9309",
                    "honoured": "Allow and Disallow, longest match, per crawler token; a disallowed request is refused (403) before it reaches the origin",
                    "cache": {
                        "ttl_seconds": robots.ttl_seconds.get(),
                        "min_ttl_seconds": robots.min_ttl_seconds.get(),
                        "max_ttl_seconds": robots.max_ttl_seconds.get(),
                    },
                    "errors": {
                        "4xx": "allow all",
                        "5xx_or_unreachable": "disallow all",
                        "unreachable_allow_after_seconds": robots.unreachable_allow_after_seconds.get(),
                    },
                    "max_redirects": robots.max_redirects,
                    "max_bytes": crate::robots::MAX_ROBOTS_BYTES,
                    "crawl_delay": {
                        "honoured": true,
                        "ceiling_seconds": config.pacing.ceiling_seconds.get(),
                        "max_in_flight_per_origin": config.pacing.max_in_flight,
                    },
                },
                "aipref": {
                    "spec": "draft-ietf-aipref-attach, draft-ietf-aipref-vocab (Content-Usage in robots.txt and responses)",
                    "mode": usage_label(usage.mode),
                    "unknown": format!("{:?}", usage.unknown).to_lowercase(),
                    "refuse_when": format!("{:?}", usage.refuse_when).to_lowercase(),
                },
                "content_signal": {
                    "spec": "Cloudflare Content Signals (Content-Signal in robots.txt and responses)",
                    "mode": usage_label(usage.mode),
                },
                "tdmrep": {
                    "spec": "W3C TDM Reservation Protocol, Community Group final report (2024)",
                    "tdm_purposes": usage.tdm_purposes,
                    "mode": usage_label(usage.mode),
                    "enforced": [
                        "/.well-known/tdmrep.json: fetched and paced as robots.txt, a reservation refused before the request is sent (403)",
                        "tdm-reservation response header: the answer withheld (451)",
                    ],
                    "resolved_not_enforced": ["HTML meta"],
                    "not_read": ["EPUB metadata", "PDF XMP metadata"],
                },
            },
        });
        let text = serde_json::to_vec(&json).unwrap_or_default();
        let fingerprint = crate::evidence::record::hex(
            ring::digest::digest(&ring::digest::SHA256, &text).as_ref(),
        );
        CrawlerStatement { json, fingerprint }
    }

    /// The SHA-256 (hex) that names this statement.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// `statement.json`: the statement with its fingerprint.
    pub fn to_json(&self) -> String {
        let mut json = self.json.clone();
        json["fingerprint"] = Value::from(self.fingerprint.as_str());
        serde_json::to_string_pretty(&json).unwrap_or_default() + "\n"
    }

    /// `statement.html`: the statement as a page.
    pub fn to_html(&self) -> String {
        let mut out = String::from(
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
             <title>Crawler statement</title></head><body>\n<h1>Crawler statement</h1>\n",
        );
        out.push_str(&format!(
            "<p>Made by {} from the configuration in force. Fingerprint (SHA-256): \
             <code id=\"fingerprint\">{}</code>.</p>\n",
            escape(self.json["made_by"].as_str().unwrap_or("")),
            self.fingerprint
        ));
        out.push_str("<h2>Crawlers</h2>\n<table id=\"crawlers\"><tr><th>name</th><th>matches</th><th>robots.txt tokens</th><th>purposes</th><th>mode</th><th>usage mode</th><th>identity (Web Bot Auth)</th></tr>\n");
        for crawler in self.json["crawlers"].as_array().into_iter().flatten() {
            let list = |v: &Value| {
                v.as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let identity = match &crawler["identity"] {
                Value::Null => "unsigned".to_string(),
                i => format!(
                    "{} (key directory {})",
                    i["signature_agent"].as_str().unwrap_or(""),
                    i["key_directory"].as_str().unwrap_or("")
                ),
            };
            out.push_str(&format!(
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
                escape(crawler["name"].as_str().unwrap_or("")),
                escape(crawler["matches"].as_str().unwrap_or("")),
                escape(&list(&crawler["tokens"])),
                escape(&list(&crawler["purposes"])),
                escape(crawler["mode"].as_str().unwrap_or("")),
                escape(crawler["usage_mode"].as_str().unwrap_or("")),
                escape(&identity),
            ));
        }
        out.push_str("</table>\n<h2>Protocols honoured</h2>\n");
        for (name, protocol) in self.json["protocols"].as_object().into_iter().flatten() {
            out.push_str(&format!(
                "<h3 id=\"{}\">{}</h3>\n<pre>{}</pre>\n",
                escape(name),
                escape(protocol["spec"].as_str().unwrap_or(name)),
                escape(&serde_json::to_string_pretty(protocol).unwrap_or_default())
            ));
        }
        out.push_str("</body></html>\n");
        out
    }

    /// `statement.atom`: a feed of the statements in `history` (oldest first; the last
    /// is this one), newest entry first. `link`: where the page is published, if known.
    pub fn to_atom(&self, history: &[Dated], link: Option<&str>) -> String {
        let updated = history
            .last()
            .map_or("1970-01-01T00:00:00Z", |d| d.since.as_str());
        let user_agent = self.json["robots_txt_user_agent"].as_str().unwrap_or("");
        let feed_id = crate::evidence::record::hex(
            ring::digest::digest(&ring::digest::SHA256, user_agent.as_bytes()).as_ref(),
        );
        let mut out = format!(
            "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<feed xmlns=\"http://www.w3.org/2005/Atom\">\n\
             <id>urn:robotsgate:statement:{feed_id}</id>\n<title>Crawler statement: {}</title>\n\
             <updated>{updated}</updated>\n<author><name>{}</name></author>\n",
            escape(user_agent),
            escape(user_agent),
        );
        if let Some(link) = link {
            out.push_str(&format!(
                "<link rel=\"alternate\" href=\"{}\"/>\n",
                escape(link)
            ));
        }
        for dated in history.iter().rev().take(FEED_ENTRIES) {
            let current = dated.fingerprint == self.fingerprint;
            out.push_str(&format!(
                "<entry>\n<id>urn:sha256:{}</id>\n<title>Statement {}</title>\n<updated>{}</updated>\n\
                 <summary>{}</summary>\n</entry>\n",
                dated.fingerprint,
                &dated.fingerprint[..dated.fingerprint.len().min(12)],
                dated.since,
                if current {
                    "The statement in force: its JSON and page are published beside this feed."
                } else {
                    "A statement since replaced."
                },
            ));
        }
        out.push_str("</feed>\n");
        out
    }
}

/// An identity as the statement names it.
fn identity_json(identity: &IdentityConfig) -> Value {
    let agent = identity.signature_agent.trim_end_matches('/');
    json!({
        "name": identity.name,
        "signature_agent": identity.signature_agent,
        "key_directory": format!("{agent}/.well-known/http-message-signatures-directory"),
    })
}

/// `enforce` or `report`.
fn enforce_label(mode: EnforceMode) -> &'static str {
    match mode {
        EnforceMode::Enforce => "enforce",
        EnforceMode::Report => "report",
    }
}

/// `enforce`, `report` or `off`.
fn usage_label(mode: UsageMode) -> &'static str {
    match mode {
        UsageMode::Enforce => "enforce",
        UsageMode::Report => "report",
        UsageMode::Off => "off",
    }
}

/// `text` escaped for HTML and XML text and attributes.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => {}
            c => out.push(c),
        }
    }
    out
}

/// Writes the statement of `config` into `dir`, adding it to `statement-history.jsonl`
/// when it differs from the last one there: whether it did.
pub fn write_into(
    config: &Config,
    dir: &std::path::Path,
    now: &str,
    link: Option<&str>,
) -> std::io::Result<bool> {
    let statement = CrawlerStatement::of(config);
    std::fs::create_dir_all(dir)?;
    let history_file = dir.join("statement-history.jsonl");
    let mut history: Vec<Dated> = std::fs::read_to_string(&history_file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| {
            Some(Dated {
                fingerprint: v["fingerprint"].as_str()?.to_string(),
                since: v["since"].as_str()?.to_string(),
            })
        })
        .collect();
    let changed = history.last().map(|d| d.fingerprint.as_str()) != Some(statement.fingerprint());
    if changed {
        let dated = Dated {
            fingerprint: statement.fingerprint().to_string(),
            since: now.to_string(),
        };
        let line = json!({"fingerprint": dated.fingerprint, "since": dated.since}).to_string();
        let mut text = std::fs::read_to_string(&history_file).unwrap_or_default();
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&line);
        text.push('\n');
        std::fs::write(&history_file, text)?;
        history.push(dated);
    }
    std::fs::write(dir.join("statement.json"), statement.to_json())?;
    std::fs::write(dir.join("statement.html"), statement.to_html())?;
    std::fs::write(
        dir.join("statement.atom"),
        statement.to_atom(&history, link),
    )?;
    Ok(changed)
}

/// The statement as the admin listener serves it: made once, when this process began
/// serving it, the feed holding that one entry.
pub struct Published {
    /// `/statement.json`.
    json: String,
    /// `/statement.html`.
    html: String,
    /// `/statement.atom`.
    atom: String,
}

impl Published {
    /// The statement of `config`, in force from now.
    pub fn of(config: &Config) -> Published {
        let statement = CrawlerStatement::of(config);
        let since = crate::evidence::record::stamp(std::time::SystemTime::now());
        let dated = Dated {
            fingerprint: statement.fingerprint().to_string(),
            since,
        };
        Published {
            json: statement.to_json(),
            html: statement.to_html(),
            atom: statement.to_atom(&[dated], Some("/statement.html")),
        }
    }

    /// What `path` serves, and as what: `None` for any other path.
    pub fn serve(&self, path: &str) -> Option<(&'static str, &[u8])> {
        match path {
            "/statement.json" => Some(("application/json", self.json.as_bytes())),
            "/statement.html" => Some(("text/html; charset=utf-8", self.html.as_bytes())),
            "/statement.atom" => Some(("application/atom+xml", self.atom.as_bytes())),
            _ => None,
        }
    }
}
