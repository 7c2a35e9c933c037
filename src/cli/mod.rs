//! The command line: `check` and `conformance` exercise the engine on files; `run` starts
//! the proxy. Parsing of arguments lives here so `main.rs` stays a one-liner.
//!
//! **Its other files:** `evidence.rs` (`robotsgate evidence`: export, verify, recheck).

mod evidence;

use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};

use crate::robots::{CanonicalPath, RobotsTxt};

#[derive(Parser)]
#[command(
    name = "robotsgate",
    version,
    about = "robots.txt-enforcing egress proxy for crawler fleets"
)]
/// The `robotsgate` command line: its subcommands and their arguments.
pub struct Cli {
    /// The subcommand to run.
    #[command(subcommand)]
    command: Command,
}

/// robotsgate's subcommands.
#[derive(Subcommand)]
enum Command {
    /// Decide URLs against a robots.txt file.
    Check(CheckArgs),
    /// Run the proxy.
    Run(crate::proxy::server::RunArgs),
    /// Load the configuration as `run` would (CA and roots included), report the first
    /// problem, and exit: 0 when it would start.
    CheckConfig(crate::proxy::server::RunArgs),
    /// Check a state file (`robots.state_file`): how many origins it holds, or why it
    /// would not be loaded. Exits 0 when `run` would load it.
    CheckState {
        /// The state file.
        file: PathBuf,
        /// The configuration whose limits apply (robots.max_ttl_seconds,
        /// robots.retry_max_seconds, pacing.ceiling_seconds) and whose
        /// robots.state_key_file authenticates the file; default: the defaults.
        #[arg(long, short = 'c')]
        config: Option<PathBuf>,
        /// The key file that authenticates the state file (instead of the
        /// configuration's robots.state_key_file).
        #[arg(long)]
        key: Option<PathBuf>,
    },
    /// Run SPEC §7 conformance cases from a JSON-lines file.
    Conformance {
        /// The `.jsonl` file of cases.
        file: PathBuf,
    },
    /// The crawler's statement, from a configuration: `statement.json`, `statement.html`
    /// and an Atom feed `statement.atom` whose newest entry is the statement in force
    /// (a new entry whenever what is stated changes; `statement-history.jsonl` in the
    /// same directory keeps them). The admin listener serves the same.
    Statement {
        /// The configuration (as `run` reads it).
        #[arg(long, short = 'c')]
        config: PathBuf,
        /// The directory to write into (made if missing).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// Where the page will be published, for the feed's link.
        #[arg(long, value_name = "URL")]
        link: Option<String>,
    },
    /// The operator CA for HTTPS interception.
    #[command(subcommand)]
    Ca(CaCommand),
    /// Fleet mode's peer channel: a member certificate (and key) signed by the fleet CA,
    /// which is created first when `--ca`/`--ca-key` do not exist yet. Never overwrites.
    FleetCert {
        /// The fleet CA certificate (`fleet.peer_ca` on every member).
        #[arg(long, value_name = "FILE")]
        ca: PathBuf,
        /// The fleet CA's key: keep it off the members.
        #[arg(long, value_name = "FILE")]
        ca_key: PathBuf,
        /// Where to write this member's certificate (`fleet.peer_cert`).
        #[arg(long, value_name = "FILE")]
        cert: PathBuf,
        /// Where to write its key (`fleet.peer_key`, mode 0600).
        #[arg(long, value_name = "FILE")]
        key: PathBuf,
        /// The member this certificate names: the peer channel takes it as that member,
        /// and only while the member is live in the fleet (letters, digits, `.`, `_`, `-`).
        #[arg(long, value_name = "NAME")]
        member: String,
        /// The member certificate's validity in days.
        #[arg(long, default_value_t = 825)]
        days: u32,
    },
    /// Web Bot Auth signing keys.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// The evidence of compliance (`evidence.dir`): export it, verify a bundle, check
    /// what was fetched against today's robots.txt.
    #[command(subcommand)]
    Evidence(evidence::EvidenceCommand),
    /// Print a line for `access.credentials_file`; the password is read from stdin.
    Passwd {
        /// The user name crawlers send in `Proxy-Authorization`.
        user: String,
        /// robots.txt product tokens this user crawls as (comma-separated, most
        /// specific first); empty: the usual agent rules apply.
        #[arg(long, value_delimiter = ',')]
        tokens: Vec<String>,
        /// What this user's crawls fetch for (`search`, `train-ai`, `ai-input`;
        /// comma-separated), judged against sites' usage preferences.
        #[arg(long, value_delimiter = ',')]
        purposes: Vec<String>,
        /// bcrypt cost (each verification takes 2^cost rounds; remembered after).
        #[arg(long, default_value_t = 10)]
        cost: u32,
    },
}

/// `robotsgate keys`: the Web Bot Auth signing keys.
#[derive(Subcommand)]
enum KeysCommand {
    /// Create an Ed25519 signing key (a JWK, mode 0600) and print its thumbprint (the
    /// `keyid` its signatures carry). Never overwrites.
    Generate {
        /// Where to write the key; keep it on this host only.
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
    /// Print an identity's key directory (JWKS of its current and next keys), to publish
    /// at `<signature_agent>/.well-known/http-message-signatures-directory`.
    Directory {
        /// The configuration naming the identity's key files.
        #[arg(long, short = 'c')]
        config: PathBuf,
        /// Which identity; default: the only one.
        #[arg(long)]
        identity: Option<String>,
    },
}

/// `robotsgate ca`: the operator CA that intercepted tunnels are minted from.
#[derive(Subcommand)]
enum CaCommand {
    /// Create a new CA (ECDSA P-256): certificate and key (mode 0600). Never overwrites.
    Init {
        /// Where to write the CA certificate (PEM); distribute it to crawler hosts.
        #[arg(long, value_name = "FILE")]
        cert: PathBuf,
        /// Where to write the private key (PEM, mode 0600); keep it on this host only.
        #[arg(long, value_name = "FILE")]
        key: PathBuf,
        /// Validity in days.
        #[arg(long, default_value_t = 1825)]
        days: u32,
        /// The CA's common name, as crawler hosts will see it.
        #[arg(long, default_value = "robotsgate interception CA")]
        name: String,
    },
}

/// `robotsgate check-config`'s arguments.
#[derive(Args)]
struct CheckArgs {
    /// The robots.txt file.
    #[arg(long)]
    robots: PathBuf,
    /// Crawler product token; repeat for an ordered list, most specific first.
    #[arg(long = "agent", required = true)]
    agents: Vec<String>,
    /// Read URLs from this file, one per line, instead of the arguments.
    #[arg(long = "urls", value_name = "FILE", conflicts_with = "url")]
    urls_from: Option<PathBuf>,
    /// Print only `allowed N, disallowed M`.
    #[arg(long)]
    summary: bool,
    /// URLs (absolute or /path).
    #[arg(value_name = "URL")]
    url: Vec<String>,
}

impl Cli {
    /// Runs the subcommand; the exit code says whether it succeeded.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        if !matches!(self.command, Command::Run(_) | Command::CheckConfig(_)) {
            // `run` and `check-config` install it once their configuration says how.
            crate::telemetry::logging::init(crate::config::LogFormat::Text);
        }
        match self.command {
            Command::Check(args) => check(args),
            Command::CheckConfig(args) => {
                crate::proxy::server::check_config(&args)?;
                Ok(ExitCode::SUCCESS)
            }
            Command::Run(args) => {
                crate::proxy::server::run(args)?;
                Ok(ExitCode::SUCCESS)
            }
            Command::Ca(CaCommand::Init {
                cert,
                key,
                days,
                name,
            }) => {
                crate::downstream::ca::init(&cert, &key, days, &name)?;
                println!(
                    "wrote CA certificate {} and key {} (valid {days} days)",
                    cert.display(),
                    key.display()
                );
                Ok(ExitCode::SUCCESS)
            }
            Command::FleetCert {
                ca,
                ca_key,
                cert,
                key,
                member,
                days,
            } => fleet_cert(&ca, &ca_key, &cert, &key, &member, days),
            Command::Keys(KeysCommand::Generate { out }) => {
                let thumbprint = crate::identity::key::generate_file(&out)?;
                println!("wrote {} (keyid {thumbprint})", out.display());
                Ok(ExitCode::SUCCESS)
            }
            Command::Keys(KeysCommand::Directory { config, identity }) => {
                keys_directory(&config, identity.as_deref())
            }
            Command::Passwd {
                user,
                tokens,
                purposes,
                cost,
            } => passwd(&user, &tokens, &purposes, cost),
            Command::CheckState { file, config, key } => check_state(&file, config, key),
            Command::Evidence(command) => command.run(),
            Command::Statement { config, out, link } => {
                let config = crate::config::Config::load(&config)?;
                let now = crate::evidence::record::stamp(std::time::SystemTime::now());
                let changed =
                    crate::ops::statement::write_into(&config, &out, &now, link.as_deref())
                        .with_context(|| format!("cannot write into {}", out.display()))?;
                println!(
                    "{}: statement {} ({})",
                    out.display(),
                    crate::ops::statement::CrawlerStatement::of(&config).fingerprint(),
                    if changed { "new" } else { "unchanged" }
                );
                Ok(ExitCode::SUCCESS)
            }
            Command::Conformance { file } => {
                let input = std::fs::File::open(&file)
                    .with_context(|| format!("cannot open {}", file.display()))?;
                let tally =
                    crate::conformance::run(BufReader::new(input), std::io::stdout().lock())?;
                Ok(if tally.failed == 0 {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                })
            }
        }
    }
}

/// `fleet-cert`: the fleet CA when it does not exist yet, then a member certificate.
fn fleet_cert(
    ca: &Path,
    ca_key: &Path,
    cert: &Path,
    key: &Path,
    member: &str,
    days: u32,
) -> anyhow::Result<ExitCode> {
    use crate::downstream::ca;
    if !crate::fleet::channel::member_name_valid(member) {
        anyhow::bail!("--member {member:?}: letters, digits, '.', '_' and '-' only (1 to 64)");
    }
    if !ca.exists() && !ca_key.exists() {
        ca::init(ca, ca_key, 3650, "robotsgate fleet CA")?;
        println!(
            "wrote fleet CA {} and key {}",
            ca.display(),
            ca_key.display()
        );
    }
    let authority = ca::OperatorCa::load(ca, ca_key)?;
    ca::issue(
        &authority,
        cert,
        key,
        days,
        crate::fleet::channel::PEER_NAME,
        Some(member),
    )?;
    println!(
        "wrote the certificate of member {member}: {} and key {}",
        cert.display(),
        key.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// `keys directory`: the JWKS of an identity (the only one, or `--identity`).
fn keys_directory(config: &Path, identity: Option<&str>) -> anyhow::Result<ExitCode> {
    let config = crate::config::Config::load(config)?;
    let identities = crate::identity::Identities::load(&config.signing, &config.agent)?;
    let found = match identity {
        Some(name) => identities.get(name),
        None => identities.only(),
    };
    let Some(found) = found else {
        let mut names: Vec<&str> = identities.iter().map(|i| i.name.as_str()).collect();
        names.sort_unstable();
        anyhow::bail!("--identity: one of {names:?} (signing.identities)");
    };
    println!("{}", found.directory());
    Ok(ExitCode::SUCCESS)
}

/// `passwd`: a credentials line for `user`, its password read from stdin.
fn passwd(
    user: &str,
    tokens: &[String],
    purposes: &[String],
    cost: u32,
) -> anyhow::Result<ExitCode> {
    let mut password = String::new();
    std::io::stdin().read_line(&mut password)?;
    let password = password.trim_end_matches(['\n', '\r']);
    if password.is_empty() {
        anyhow::bail!("no password on stdin");
    }
    println!(
        "{}",
        crate::downstream::access::credentials_line(user, password, tokens, purposes, cost)?
    );
    Ok(ExitCode::SUCCESS)
}

/// `check-state`: whether a start would load `file`, and what it holds.
fn check_state(
    file: &Path,
    config: Option<PathBuf>,
    key: Option<PathBuf>,
) -> anyhow::Result<ExitCode> {
    let config = match config {
        Some(path) => crate::config::Config::load(&path)?,
        None => crate::config::Config::default(),
    };
    let limits = crate::origin::state::Limits::of(&config);
    let Some(key) = key.or(config.robots.state_key_file) else {
        anyhow::bail!(
            "no key to authenticate {}: pass --key FILE, or --config with robots.state_key_file",
            file.display()
        );
    };
    let key = crate::origin::state::StateKey::load(&key).map_err(|e| anyhow::anyhow!("{e}"))?;
    match crate::origin::state::inspect(file, limits, &key) {
        Ok(Some(found)) => {
            let clamped = match found.clamped {
                0 => String::new(),
                n => format!("; {n} lifetimes beyond the configuration's limits would be clamped"),
            };
            println!(
                "{}: OK, {} origins, {} bytes{clamped}",
                file.display(),
                found.origins,
                found.bytes
            );
            Ok(ExitCode::SUCCESS)
        }
        Ok(None) => {
            println!(
                "{}: no such file (a start would begin empty)",
                file.display()
            );
            Ok(ExitCode::FAILURE)
        }
        Err(e) => {
            println!("{}: would not be loaded: {e}", file.display());
            Ok(ExitCode::FAILURE)
        }
    }
}

/// The key [`check_state_file`] authenticates with (the fuzz target's).
const FUZZ_STATE_KEY: &[u8] = b"robotsgate fuzz state key";

/// Checks a state file's octets as a start with the default configuration and
/// [`FUZZ_STATE_KEY`] would (every part, before using any): the number of origins it
/// holds, or why it would be refused. The file itself (owner, mode, kind) is
/// [`crate::origin::state::inspect`]'s to check.
pub fn check_state_file(data: &[u8]) -> Result<usize, crate::origin::state::StateError> {
    let limits = crate::origin::state::Limits::of(&crate::config::Config::default());
    let key = crate::origin::state::StateKey::new(FUZZ_STATE_KEY)?;
    crate::origin::state::inspect_bytes(data, limits, &key)
}

/// `body` sealed with [`FUZZ_STATE_KEY`]: lets a fuzzer past the HMAC to the records.
pub fn seal_state_file(body: &[u8]) -> Vec<u8> {
    match crate::origin::state::StateKey::new(FUZZ_STATE_KEY) {
        Ok(key) => crate::origin::state::seal(body, &key),
        Err(_) => body.to_vec(),
    }
}

/// Runs `check-config`: loads and validates the configuration, printing what it refuses.
fn check(args: CheckArgs) -> anyhow::Result<ExitCode> {
    let body = std::fs::read(&args.robots)
        .with_context(|| format!("cannot read --robots {}", args.robots.display()))?;
    let robots = RobotsTxt::parse(&body);
    let group = robots.group_for(&args.agents);
    let mut out = BufWriter::new(std::io::stdout().lock());
    let (mut allowed, mut disallowed) = (0u64, 0u64);
    let mut decide = |url: &str, out: &mut dyn Write| -> std::io::Result<()> {
        let verdict = robots.decide(group, &CanonicalPath::from_url(url));
        if verdict.allowed {
            allowed += 1;
        } else {
            disallowed += 1;
        }
        if !args.summary {
            let word = if verdict.allowed {
                "allowed"
            } else {
                "disallowed"
            };
            writeln!(out, "{word} {url} {verdict}")?;
        }
        Ok(())
    };
    match &args.urls_from {
        Some(path) => {
            let file = std::fs::File::open(path)
                .with_context(|| format!("cannot open --urls {}", path.display()))?;
            let mut reader = BufReader::with_capacity(1 << 16, file);
            let mut line = Vec::new();
            loop {
                line.clear();
                if reader.read_until(b'\n', &mut line)? == 0 {
                    break;
                }
                // URLs are bytes on the wire; decide on them even if not UTF-8 (the
                // strict check first: it is much faster on the common, valid input).
                let url = match std::str::from_utf8(&line) {
                    Ok(text) => std::borrow::Cow::Borrowed(text),
                    Err(_) => String::from_utf8_lossy(&line),
                };
                let url = url.trim_end_matches(['\n', '\r']);
                if !url.is_empty() {
                    decide(url, &mut out)?;
                }
            }
        }
        None => {
            for url in &args.url {
                decide(url, &mut out)?;
            }
        }
    }
    if args.summary {
        writeln!(out, "allowed {allowed}, disallowed {disallowed}")?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
