//! `robotsgate evidence`: a bundle exported from evidence directories (`export`), a
//! bundle or a directory checked offline (`verify`), and the URLs a bundle shows were
//! fetched, judged against each origin's robots.txt as a running robotsgate holds it
//! now (`recheck`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::rc::Rc;

use anyhow::Context;
use clap::{Args, Subcommand};
use serde_json::Value;

use crate::enforce::judge;
use crate::evidence::bundle::{gather, Bundle, Filter, Format};
use crate::evidence::verify::{verify, JudgedOn};
use crate::policy::agent::Tokens;
use crate::policy::target::{Origin, Target};
use crate::robots::tdmrep::TdmFile;
use crate::robots::{CanonicalPath, RobotsTxt};

/// `robotsgate evidence`'s subcommands.
#[derive(Subcommand)]
pub enum EvidenceCommand {
    /// Write a self-contained bundle: the records chosen (merged by time across the
    /// directories, a fleet's members' each), every robots.txt they name, every chain's
    /// heads and each record's inclusion proof.
    Export(ExportArgs),
    /// Check a bundle (or an evidence directory, as its complete export): signatures,
    /// the heads' chain, every record's proof and links, missing segments; and every
    /// decision judged again by this build's matcher. Exits 1 on any break.
    Verify {
        /// The bundle (JSON lines), or an evidence directory.
        path: PathBuf,
        /// The public key (a JWK file) every chain must be signed with: the operator's
        /// published key. Unset: each chain's own, as its records name it.
        #[arg(long, value_name = "FILE")]
        key: Option<PathBuf>,
    },
    /// For each URL a bundle shows was fetched, judge it against its origin's robots.txt
    /// as a running robotsgate holds it now (asked to refresh it first, a paced fetch
    /// like any other): the URLs its rules refuse now, with their body digests where
    /// kept.
    Recheck {
        /// The bundle (JSON lines).
        bundle: PathBuf,
        /// The running robotsgate's admin listener (`http://127.0.0.1:9090`).
        #[arg(long, value_name = "URL")]
        admin: String,
        /// A file holding the admin token, when one is needed.
        #[arg(long, value_name = "FILE")]
        token_file: Option<PathBuf>,
    },
}

/// `robotsgate evidence export`'s arguments.
#[derive(Args)]
pub struct ExportArgs {
    /// An evidence directory (`evidence.dir`); several merge by time.
    #[arg(long = "dir", value_name = "DIR", required = true)]
    dirs: Vec<PathBuf>,
    /// Only this origin's records (`https://example.com`).
    #[arg(long)]
    origin: Option<String>,
    /// Only this URL's decisions, and its origin's robots.txt records.
    #[arg(long)]
    url: Option<String>,
    /// Only records written at or after this time (`2026-12-07` or
    /// `2026-12-07T15:00:00Z`, UTC).
    #[arg(long, value_name = "TIME")]
    from: Option<String>,
    /// Only records written before this time.
    #[arg(long, value_name = "TIME")]
    to: Option<String>,
    /// The bundle's form.
    #[arg(long, value_enum, default_value = "jsonl")]
    format: Format,
    /// Where to write it.
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
}

impl EvidenceCommand {
    /// Runs the subcommand.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            EvidenceCommand::Export(args) => export(args),
            EvidenceCommand::Verify { path, key } => verify_path(&path, key.as_deref()),
            EvidenceCommand::Recheck {
                bundle,
                admin,
                token_file,
            } => recheck(&bundle, &admin, token_file.as_deref()),
        }
    }
}

/// A time argument in the records' form.
fn time(arg: Option<String>, name: &str) -> anyhow::Result<Option<String>> {
    arg.map(|t| {
        crate::evidence::record::parse_stamp(&t)
            .with_context(|| format!("--{name} {t}: not a time like 2026-12-07T15:00:00Z"))
    })
    .transpose()
}

/// `export`.
fn export(args: ExportArgs) -> anyhow::Result<ExitCode> {
    let filter = Filter {
        origin: args.origin,
        url: args.url,
        from: time(args.from, "from")?,
        to: time(args.to, "to")?,
    };
    let bundle = gather(&args.dirs, &filter)?;
    let written = bundle.write(args.format, &args.out)?;
    println!(
        "wrote {}: {} records ({} decisions) of {} chains, {} robots.txt files",
        args.out.display(),
        written.records,
        written.decisions,
        written.chains,
        written.policies
    );
    Ok(ExitCode::SUCCESS)
}

/// `verify`: a bundle, or a directory as its complete export.
fn verify_path(path: &Path, key: Option<&Path>) -> anyhow::Result<ExitCode> {
    let bundle = if path.is_dir() {
        gather(&[path.to_path_buf()], &Filter::default())?
    } else {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        Bundle::read_jsonl(&text)?
    };
    let pinned = match key {
        Some(file) => {
            let text =
                std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
            let jwk: Value = serde_json::from_slice(&text)
                .with_context(|| format!("{}: not a JSON Web Key", file.display()))?;
            Some(
                crate::evidence::head::public_key(&jwk)
                    .with_context(|| format!("{}: not an Ed25519 public key", file.display()))?,
            )
        }
        None => None,
    };
    // Each robots.txt parsed once, however many decisions name it.
    let parsed = std::cell::RefCell::new(HashMap::<String, Rc<RobotsTxt>>::new());
    let rederive = |judged: JudgedOn, sha: &str, octets: &[u8], record: &Value| match judged {
        JudgedOn::RobotsTxt => {
            let robots = Rc::clone(
                parsed
                    .borrow_mut()
                    .entry(sha.to_string())
                    .or_insert_with(|| Rc::new(RobotsTxt::parse(octets))),
            );
            rederive(&robots, record)
        }
        JudgedOn::TdmRep => rederive_tdm(&TdmFile::parse(octets), record),
    };
    let report = verify(&bundle, pinned.as_deref(), &rederive);
    for line in &report.breaks {
        println!("BREAK {line}");
    }
    for line in &report.differs {
        println!("DIFFERS {line}");
    }
    for line in &report.notes {
        println!("NOTE {line}");
    }
    println!(
        "{} chains, {} records, {} decisions ({} judged again): {} breaks, {} decided otherwise by this build ({})",
        report.chains,
        report.records,
        report.decisions,
        report.rederived,
        report.breaks.len(),
        report.differs.len(),
        crate::evidence::MATCHER
    );
    Ok(if report.breaks.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// What this build's matcher says of a decision record's URL under `robots`: `None`
/// when it agrees with the record (or the record is no robots.txt verdict), else what
/// it decides.
fn rederive(robots: &RobotsTxt, record: &Value) -> Option<String> {
    // A usage refusal (a robots.txt usage statement's, or TDMRep's) names no
    // Allow/Disallow rule: only that robots.txt allowed the path is compared.
    let (recorded_allowed, rule_named) = match record["verdict"].as_str()? {
        "allowed" => (true, true),
        "usage_refused" | "would_usage_refuse" => (true, false),
        "disallowed" | "would_disallow" => (false, true),
        _ => return None,
    };
    let (allowed, line, said) = judged(robots, record)?;
    let recorded_line = record["rule"]["line"].as_u64().map(|l| l as u32);
    (allowed != recorded_allowed || rule_named && line != recorded_line).then_some(said)
}

/// What this build's TDMRep reading says of a decision record that a rule of `file`
/// refused (or would have): `None` when that rule reserves the record's URL (or the
/// spelling a lenient origin may read), else what it finds.
fn rederive_tdm(file: &TdmFile, record: &Value) -> Option<String> {
    let recorded = record["tdmrep"]["rule"].as_u64()? as usize;
    let origin = Origin::parse(record["origin"].as_str()?).ok()?;
    let path = CanonicalPath::from_url(record["url"].as_str()?).into_owned();
    let target = Target { origin, path };
    let spellings = std::iter::once(target.path.clone()).chain(target.lenient_path());
    let mut found = Vec::new();
    for path in spellings {
        match file.lookup(&path) {
            Some((index, Some(s))) if s.reserved && index == recorded => return None,
            Some((index, Some(s))) => found.push(format!(
                "rule {index} (tdm-reservation={})",
                u8::from(s.reserved)
            )),
            Some((index, None)) => found.push(format!("rule {index} (a protocol error: unset)")),
            None => found.push("no TDMRep rule".into()),
        }
    }
    Some(found.join(", "))
}

/// A decision record's URL judged against `robots` for its tokens: allowed, the
/// deciding rule's line, and that said in words.
fn judged(robots: &RobotsTxt, record: &Value) -> Option<(bool, Option<u32>, String)> {
    let tokens: Vec<String> = record["tokens"]
        .as_array()?
        .iter()
        .filter_map(|t| t.as_str().map(str::to_string))
        .collect();
    let origin = Origin::parse(record["origin"].as_str()?).ok()?;
    let path = CanonicalPath::from_url(record["url"].as_str()?).into_owned();
    let target = Target { origin, path };
    let judgement = judge(robots, &target, &Tokens::Rule(&tokens));
    let verdict = &judgement.verdict;
    let rule = verdict.rule();
    let said = match (verdict.allowed, rule) {
        (true, Some(rule)) => format!("allowed by {rule}"),
        (true, None) => "allowed (no rule applies)".into(),
        (false, Some(rule)) => format!("disallowed by {rule}"),
        (false, None) => "disallowed".into(),
    };
    Some((verdict.allowed, rule.map(|r| r.line), said))
}

/// `recheck`.
fn recheck(path: &Path, admin: &str, token_file: Option<&Path>) -> anyhow::Result<ExitCode> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let bundle = Bundle::read_jsonl(&text)?;
    let token = token_file
        .map(|f| std::fs::read_to_string(f).with_context(|| format!("cannot read {}", f.display())))
        .transpose()?
        .map(|t| t.trim().to_string());
    let admin = Admin {
        base: admin.trim_end_matches('/').to_string(),
        token,
    };
    // Each decision that let a request go, and the digest of what came back.
    let mut bodies = std::collections::HashMap::new();
    for item in &bundle.records {
        if item.json["type"] == "outcome" {
            if let (Some(seq), Some(sha)) = (
                item.json["decision"].as_u64(),
                item.json["body_sha256"].as_str(),
            ) {
                bodies.insert((item.chain.clone(), seq), sha.to_string());
            }
        }
    }
    let fetched: Vec<&crate::evidence::bundle::Item> = bundle
        .records
        .iter()
        .filter(|i| i.json["type"] == "decision")
        .filter(|i| {
            matches!(
                i.json["verdict"].as_str(),
                Some("allowed" | "would_disallow" | "would_usage_refuse")
            )
        })
        .collect();
    let mut origins: Vec<&str> = fetched
        .iter()
        .filter_map(|i| i.json["origin"].as_str())
        .collect();
    origins.sort_unstable();
    origins.dedup();
    let mut today = std::collections::HashMap::new();
    for origin in origins {
        today.insert(origin, admin.robots_now(origin)?);
    }
    let mut refused = 0;
    for item in fetched {
        let record = &item.json;
        let Some(origin) = record["origin"].as_str() else {
            continue;
        };
        let now = match today.get(origin) {
            Some(Now::Rules(robots)) => judged(robots, record),
            Some(Now::AllowAll) | None => None,
            Some(Now::Unknown(case)) => {
                println!(
                    "UNKNOWN {} (robots.txt now: {case})",
                    record["url"].as_str().unwrap_or("?")
                );
                continue;
            }
        };
        let Some((false, _, said)) = now else {
            continue;
        };
        refused += 1;
        let body = record["seq"]
            .as_u64()
            .and_then(|seq| bodies.get(&(item.chain.clone(), seq)));
        println!(
            "REFUSED-NOW {} fetched {}{}: {said}",
            record["url"].as_str().unwrap_or("?"),
            record["t"].as_str().unwrap_or("?"),
            body.map(|b| format!(" body sha256 {b}"))
                .unwrap_or_default(),
        );
    }
    println!("{refused} URLs fetched then are refused by their robots.txt now");
    Ok(ExitCode::SUCCESS)
}

/// An origin's robots.txt now, as the running robotsgate holds it.
enum Now {
    /// A file.
    Rules(RobotsTxt),
    /// None (4xx): everything allowed.
    AllowAll,
    /// Unreadable now (its case).
    Unknown(String),
}

/// An admin API's answer: its status, headers and body.
type AdminAnswer = (u16, Vec<(String, String)>, Vec<u8>);

/// A running robotsgate's admin API.
struct Admin {
    /// `http://host:port`.
    base: String,
    /// The admin token.
    token: Option<String>,
}

impl Admin {
    /// `origin`'s robots.txt now: refreshed first (a paced fetch; refused within
    /// `min_ttl` of the last one, when the copy held is that recent), then read.
    fn robots_now(&self, origin: &str) -> anyhow::Result<Now> {
        let encoded =
            percent_encoding::utf8_percent_encode(origin, percent_encoding::NON_ALPHANUMERIC);
        let at = format!("{}/origins/{encoded}", self.base);
        let _ = self.call("POST", &format!("{at}/refresh"));
        let (status, headers, body) = self.call("GET", &format!("{at}/robots.txt"))?;
        let case = headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("x-robots-case"))
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        Ok(match (status, case.as_str()) {
            (200, _) => Now::Rules(RobotsTxt::parse(&body)),
            (404, "unavailable" | "unreachable-long") => Now::AllowAll,
            _ => Now::Unknown(if case.is_empty() {
                format!("HTTP {status}")
            } else {
                case
            }),
        })
    }

    /// One request to the admin API (Pingora's HTTP/1.1 client): its status, headers
    /// and body.
    fn call(&self, method: &str, url: &str) -> anyhow::Result<AdminAnswer> {
        let rest = url
            .strip_prefix("http://")
            .context("the admin URL is http://host:port")?;
        let (authority, path) = rest
            .split_once('/')
            .map_or((rest, "/".to_string()), |(a, p)| (a, format!("/{p}")));
        let addr = std::net::ToSocketAddrs::to_socket_addrs(authority)
            .with_context(|| format!("{authority}: not host:port"))?
            .next()
            .with_context(|| format!("{authority}: no address"))?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        runtime.block_on(async {
            let connector = pingora::connectors::http::Connector::new(None);
            let peer = pingora::upstreams::peer::HttpPeer::new(addr, false, String::new());
            let failed =
                |e: Box<pingora::Error>| anyhow::anyhow!("the admin API at {authority}: {e}");
            let (mut session, _) = connector.get_http_session(&peer).await.map_err(failed)?;
            let mut request = pingora::http::RequestHeader::build(method, path.as_bytes(), None)
                .map_err(failed)?;
            request.insert_header("Host", authority).map_err(failed)?;
            request
                .insert_header("Content-Length", "0")
                .map_err(failed)?;
            if let Some(token) = &self.token {
                request
                    .insert_header("Authorization", format!("Bearer {token}"))
                    .map_err(failed)?;
            }
            session
                .write_request_header(Box::new(request))
                .await
                .map_err(failed)?;
            session.finish_request_body().await.map_err(failed)?;
            session.read_response_header().await.map_err(failed)?;
            let head = session
                .response_header()
                .context("the admin API sent no answer")?;
            let status = head.status.as_u16();
            let headers = head
                .headers
                .iter()
                .map(|(n, v)| {
                    (
                        n.to_string(),
                        String::from_utf8_lossy(v.as_bytes()).into_owned(),
                    )
                })
                .collect();
            let mut body = Vec::new();
            while let Some(chunk) = session.read_response_body().await.map_err(failed)? {
                body.extend_from_slice(&chunk);
            }
            Ok((status, headers, body))
        })
    }
}
