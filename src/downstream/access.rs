//! Who may use the proxy: client networks and `Proxy-Authorization: Basic`.
//!
//! An egress proxy that anyone can reach is an open relay with robotsgate's reputation,
//! so clients are admitted by source network first (`access.allow_clients`, loopback and
//! private ranges by default). Optionally every request — and every CONNECT, whose
//! tunnel then carries the identity — must also name a user from `access.credentials_file`.
//! A user line can carry the robots.txt product tokens that user crawls as, so each team
//! is judged as itself rather than by whatever its User-Agent header claims.
//!
//! The file holds bcrypt hashes (`htpasswd -B` writes the same format; so does
//! `robotsgate passwd`), one `user:hash[:Token1,Token2[:purpose,purpose]]` per line; the
//! purposes (`search`, `train-ai`, `ai-input`) are what the user's content is for, judged
//! against the sites' usage preferences (`policy::usage`). bcrypt is slow on
//! purpose (tens of milliseconds), which an on-every-request check cannot pay, so a
//! verified header is remembered by its SHA-256 digest (never the password itself) and
//! later requests with the same header cost one hash-map lookup. Verifications run on
//! the blocking pool, at most two at a time, so a client guessing passwords cannot stall
//! the proxy's event loops. An unknown user is checked against a real hash too, so the
//! answer's timing does not tell which user names exist.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use base64::Engine;
use tokio::sync::Semaphore;

use crate::config::{AccessConfig, Cidr};

/// A proxy user: one line of the credentials file.
#[derive(Debug, PartialEq, Eq)]
pub struct User {
    /// The user name from the credentials file.
    pub name: String,
    /// robots.txt product tokens this user is judged as, most specific first; empty means
    /// the usual agent rules apply.
    pub tokens: Vec<String>,
    /// What this user fetches for; empty means the usual agent rules apply.
    pub purposes: crate::robots::Purposes,
}

/// Why a request was not admitted: the `reason` label of the refusal counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Denied {
    /// The client's address is outside `access.allow_clients` (403).
    ClientNetwork,
    /// Credentials are required and none were sent (407).
    AuthRequired,
    /// Credentials were sent and are wrong (407).
    AuthFailed,
}

impl Denied {
    /// The status to answer with: 403 for a client network, 407 for credentials.
    pub fn status(self) -> u16 {
        match self {
            Denied::ClientNetwork => 403,
            Denied::AuthRequired | Denied::AuthFailed => 407,
        }
    }

    /// The `reason` this refusal is counted under.
    pub fn reason(self) -> crate::telemetry::metrics::RefusalReason {
        use crate::telemetry::metrics::RefusalReason;
        match self {
            Denied::ClientNetwork => RefusalReason::ClientNetwork,
            Denied::AuthRequired => RefusalReason::AuthRequired,
            Denied::AuthFailed => RefusalReason::AuthFailed,
        }
    }
}

/// One credentials line as checked: its bcrypt hash, and the user it admits.
struct Credential {
    /// The password's bcrypt hash.
    hash: String,
    /// The user it admits.
    user: Arc<User>,
}

/// Verified `Proxy-Authorization` values kept (by digest) before the cache starts over.
const VERIFIED_CACHE: usize = 4096;

/// Who may use the proxy: client networks and, optionally, Basic proxy credentials.
pub struct AccessPolicy {
    /// The networks clients may connect from (empty: any).
    clients: Vec<Cidr>,
    /// The proxy users by name, when Basic auth is required.
    users: Option<HashMap<String, Credential>>,
    /// The realm named in `Proxy-Authenticate`.
    pub realm: String,
    /// Credentials already verified, by the SHA-256 of their header: a bcrypt check once per
    /// credential, not per request.
    verified: Mutex<HashMap<[u8; 32], Arc<User>>>,
    /// Bounds the bcrypt checks running at once (each costs milliseconds of CPU).
    verifying: Semaphore,
}

impl AccessPolicy {
    /// Reads `access.credentials_file` if set; errors name the key, file and line.
    pub fn new(config: &AccessConfig) -> anyhow::Result<AccessPolicy> {
        let users = match &config.credentials_file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    anyhow::anyhow!(
                        "key `robotsgate.access.credentials_file`: cannot read {}: {e}",
                        path.display()
                    )
                })?;
                Some(parse_credentials(&text).map_err(|e| {
                    anyhow::anyhow!(
                        "key `robotsgate.access.credentials_file`: {}: {e}",
                        path.display()
                    )
                })?)
            }
            None => None,
        };
        Ok(AccessPolicy {
            clients: config.allow_clients.clone(),
            users,
            realm: config.realm.clone(),
            verified: Mutex::new(HashMap::new()),
            verifying: Semaphore::new(2),
        })
    }

    /// Is this client address allowed to connect at all?
    pub fn client_allowed(&self, client: Option<IpAddr>) -> bool {
        // A dual-stack listener reports IPv4 clients as `::ffff:a.b.c.d`.
        client.is_some_and(|ip| {
            let ip = ip.to_canonical();
            self.clients.iter().any(|net| net.contains(ip))
        })
    }

    /// Checks a request's `Proxy-Authorization` value. `Ok(None)`: no credentials file,
    /// anyone admitted by network may proceed.
    pub async fn authenticate(&self, header: Option<&[u8]>) -> Result<Option<Arc<User>>, Denied> {
        let Some(users) = &self.users else {
            return Ok(None);
        };
        let header = header.ok_or(Denied::AuthRequired)?;
        let digest = digest(header);
        if let Some(identity) = self.lock().get(&digest) {
            return Ok(Some(identity.clone()));
        }
        let (user, password) = basic_credentials(header).ok_or(Denied::AuthFailed)?;
        let known = users.get(&user);
        // Unknown users are checked against some real hash, so timing reveals nothing.
        let Some(hash) = known
            .or_else(|| users.values().next())
            .map(|u| u.hash.clone())
        else {
            return Err(Denied::AuthFailed);
        };
        let _verifying = self
            .verifying
            .acquire()
            .await
            .map_err(|_| Denied::AuthFailed)?;
        let matched = tokio::task::spawn_blocking(move || bcrypt::verify(password, &hash))
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or(false);
        match known {
            Some(credential) if matched => {
                let mut verified = self.lock();
                if verified.len() >= VERIFIED_CACHE {
                    verified.clear();
                }
                verified.insert(digest, credential.user.clone());
                Ok(Some(credential.user.clone()))
            }
            _ => Err(Denied::AuthFailed),
        }
    }

    /// Does every request name a user (`access.credentials_file` is set)?
    pub fn requires_user(&self) -> bool {
        self.users.is_some()
    }

    /// The user another fleet member authenticated, by name: `Ok(None)` for none;
    /// refused when this instance's credentials file does not know the name (the
    /// members' files differ).
    pub fn user_named(&self, name: Option<&str>) -> Result<Option<Arc<User>>, Denied> {
        match (name, &self.users) {
            (None, _) => Ok(None),
            (Some(name), Some(users)) => users
                .get(name)
                .map(|c| Some(c.user.clone()))
                .ok_or(Denied::AuthFailed),
            (Some(_), None) => Err(Denied::AuthFailed),
        }
    }

    /// The verified-credential cache, usable after a panic elsewhere.
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Arc<User>>> {
        self.verified.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The SHA-256 of a `Proxy-Authorization` value: the cache's key.
fn digest(header: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, header).as_ref());
    out
}

/// `Basic base64(user:password)` → (user, password).
fn basic_credentials(header: &[u8]) -> Option<(String, Vec<u8>)> {
    let text = std::str::from_utf8(header).ok()?.trim();
    let (scheme, encoded) = text.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let colon = memchr::memchr(b':', &decoded)?;
    let user = String::from_utf8(decoded[..colon].to_vec()).ok()?;
    Some((user, decoded[colon + 1..].to_vec()))
}

/// Why a credentials file cannot be read: its line and what is wrong there, naming the
/// line and the user (never a hash or a password).
pub type CredentialsError = crate::error::Failure<CredentialsErrorKind>;

/// What kind of problem a [`CredentialsError`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CredentialsErrorKind {
    /// A line with no user name.
    NoUser,
    /// A user without a bcrypt hash.
    NoHash,
    /// A purpose that is not one.
    NotAPurpose,
    /// A user named twice.
    Twice,
}

/// Parses a credentials file: `user:bcrypt-hash[:Token1,Token2[:purposes]]` per line,
/// `#` comments.
fn parse_credentials(text: &str) -> Result<HashMap<String, Credential>, CredentialsError> {
    let mut users = HashMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let err = |kind, message: String| {
            CredentialsError::new(kind, format!("line {}: {message}", n + 1))
        };
        let mut fields = line.splitn(4, ':');
        let user = fields.next().unwrap_or_default();
        let hash = fields.next().unwrap_or_default();
        if user.is_empty() {
            return Err(err(CredentialsErrorKind::NoUser, "no user name".into()));
        }
        if !(hash.starts_with("$2a$") || hash.starts_with("$2b$") || hash.starts_with("$2y$"))
            || hash.parse::<bcrypt::HashParts>().is_err()
        {
            return Err(err(
                CredentialsErrorKind::NoHash,
                format!("user `{user}` has no bcrypt hash (`robotsgate passwd` or `htpasswd -B` writes one)"),
            ));
        }
        let tokens = fields
            .next()
            .map(|t| {
                t.split(',')
                    .map(str::trim)
                    .filter(|t| !t.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        let mut purposes = crate::robots::Purposes::NONE;
        for label in fields.next().unwrap_or_default().split(',').map(str::trim) {
            if label.is_empty() {
                continue;
            }
            let purpose = crate::config::Purpose::from_label(label).ok_or_else(|| {
                err(
                    CredentialsErrorKind::NotAPurpose,
                    format!(
                        "user `{user}`: `{label}` is not a purpose (search, train-ai, ai-input)"
                    ),
                )
            })?;
            purposes = purposes.with(purpose);
        }
        let entry = Credential {
            hash: hash.to_string(),
            user: Arc::new(User {
                name: user.to_string(),
                tokens,
                purposes,
            }),
        };
        if users.insert(user.to_string(), entry).is_some() {
            return Err(err(
                CredentialsErrorKind::Twice,
                format!("user `{user}` appears twice"),
            ));
        }
    }
    Ok(users)
}

/// A credentials-file line for `user` (what `robotsgate passwd` prints).
pub fn credentials_line(
    user: &str,
    password: &str,
    tokens: &[String],
    purposes: &[String],
    cost: u32,
) -> anyhow::Result<String> {
    if user.is_empty() || user.contains([':', '\n']) {
        anyhow::bail!("a user name must be non-empty and contain no `:`");
    }
    if let Some(bad) = purposes
        .iter()
        .find(|p| crate::config::Purpose::from_label(p).is_none())
    {
        anyhow::bail!("`{bad}` is not a purpose (search, train-ai, ai-input)");
    }
    let hash = bcrypt::hash(password, cost)?;
    let mut line = format!("{user}:{hash}");
    if !tokens.is_empty() || !purposes.is_empty() {
        line.push(':');
        line.push_str(&tokens.join(","));
    }
    if !purposes.is_empty() {
        line.push(':');
        line.push_str(&purposes.join(","));
    }
    Ok(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(lines: &str) -> AccessPolicy {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("users");
        std::fs::write(&path, lines).expect("write");
        let config = AccessConfig {
            credentials_file: Some(path),
            ..AccessConfig::default()
        };
        AccessPolicy::new(&config).expect("valid file")
    }

    fn basic(user: &str, password: &str) -> Vec<u8> {
        let encoded =
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        format!("Basic {encoded}").into_bytes()
    }

    #[test]
    fn default_clients_are_loopback_and_private() {
        let open = AccessPolicy::new(&AccessConfig::default()).expect("defaults");
        for ip in [
            "127.0.0.1",
            "::1",
            "10.1.2.3",
            "192.168.1.1",
            "::ffff:10.0.0.1",
            "fd00::1",
        ] {
            assert!(open.client_allowed(Some(ip.parse().expect(ip))), "{ip}");
        }
        for ip in ["8.8.8.8", "2001:db8::1", "::ffff:8.8.8.8", "100.64.0.1"] {
            assert!(!open.client_allowed(Some(ip.parse().expect(ip))), "{ip}");
        }
        assert!(!open.client_allowed(None));
    }

    #[tokio::test]
    async fn basic_auth_with_tokens() {
        let line = credentials_line(
            "news",
            "s3cret",
            &["AcmeNews".into(), "AcmeBot".into()],
            &[],
            4,
        )
        .expect("hash");
        let other = credentials_line("plain", "pw", &[], &[], 4).expect("hash");
        let trainer = credentials_line(
            "trainer",
            "pw",
            &[],
            &["train-ai".into(), "search".into()],
            4,
        )
        .expect("hash");
        assert!(trainer.ends_with("::train-ai,search"), "{trainer}");
        assert!(credentials_line("x", "pw", &[], &["ai-train".into()], 4).is_err());
        let policy = policy(&format!("# team accounts\n{line}\n\n{other}\n{trainer}\n"));
        let trainer = policy
            .authenticate(Some(&basic("trainer", "pw")))
            .await
            .expect("valid")
            .expect("identity");
        assert!(trainer.tokens.is_empty());
        assert_eq!(
            trainer.purposes,
            [
                crate::config::Purpose::TrainAi,
                crate::config::Purpose::Search
            ]
            .into_iter()
            .collect()
        );
        let identity = policy
            .authenticate(Some(&basic("news", "s3cret")))
            .await
            .expect("valid")
            .expect("identity");
        assert_eq!(identity.tokens, ["AcmeNews", "AcmeBot"]);
        // Second time from the cache: the same identity.
        let again = policy.authenticate(Some(&basic("news", "s3cret"))).await;
        assert_eq!(again, Ok(Some(identity)));
        let plain = policy.authenticate(Some(&basic("plain", "pw"))).await;
        assert!(plain.expect("valid").expect("identity").tokens.is_empty());
        for (header, want) in [
            (None, Denied::AuthRequired),
            (Some(basic("news", "wrong")), Denied::AuthFailed),
            (Some(basic("nobody", "s3cret")), Denied::AuthFailed),
            (Some(b"Bearer abc".to_vec()), Denied::AuthFailed),
            (Some(b"Basic !!!".to_vec()), Denied::AuthFailed),
        ] {
            assert_eq!(policy.authenticate(header.as_deref()).await, Err(want));
        }
    }

    #[test]
    fn bad_files_name_the_line() {
        use CredentialsErrorKind::*;
        for (text, kind, needle) in [
            (
                "alice:plaintext\n",
                NoHash,
                "line 1: user `alice` has no bcrypt hash",
            ),
            ("# c\n:$2b$04$abc\n", NoUser, "line 2: no user name"),
            (
                "bob:$2b$04$Bll7FjXq6C5mzO0AOSwA0uYQ3EIcymYyQOPIKh8yVpFNHq0OFbpD6::ai-train\n",
                NotAPurpose,
                "line 1: user `bob`: `ai-train` is not a purpose",
            ),
        ] {
            let err = parse_credentials(text).err().expect(text);
            assert_eq!(err.kind(), kind, "{err}");
            assert!(err.to_string().contains(needle), "{err}");
        }
        let line = credentials_line("a", "pw", &[], &[], 4).expect("hash");
        let err = parse_credentials(&format!("{line}\n{line}\n"))
            .err()
            .expect("dup");
        assert_eq!(err.kind(), Twice);
        assert!(
            err.to_string()
                .starts_with("line 2: user `a` appears twice"),
            "{err}"
        );
    }
}
