//! Web Bot Auth: robotsgate signs forwarded requests and its robots.txt fetches as the
//! configured identity, and an origin verifies them with an implementation of RFC 9421
//! robotsgate does not use (PyPI `http-message-signatures`, `tests/helpers/`), with the
//! keys it asks robotsgate's directory listener for, as a verifier asks the
//! `Signature-Agent`'s site (or, where a test says so, a JWKS file).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::{curl, free_port, start_listening, Conf, Netns, Proxy};

/// The verifying origin: a Python process, its port and its log of verdicts.
pub struct VerifyingOrigin {
    _child: crate::common::Running,
    pub port: u16,
    log: PathBuf,
}

/// Where a verifying origin takes its keys from: a directory listener's `http://…`
/// address, or the text of a JWKS (written to a file).
pub fn keys_argument(dir: &Path, keys: &str) -> String {
    if keys.starts_with("http://") {
        return keys.to_string();
    }
    let path = dir.join(format!("directory-{}.json", free_port()));
    std::fs::write(&path, keys).expect("directory file");
    path.to_string_lossy().into_owned()
}

impl VerifyingOrigin {
    /// An origin on a loopback port verifying with `keys` (see [`keys_argument`]).
    pub(crate) fn start(dir: &Path, keys: &str) -> VerifyingOrigin {
        VerifyingOrigin::launch(dir, keys, &[], None, None)
    }

    /// The same over HTTPS, with `cert` and `key` (PEM files).
    pub fn start_tls(dir: &Path, keys: &str, cert: &Path, key: &Path) -> VerifyingOrigin {
        VerifyingOrigin::launch(dir, keys, &[cert, key], None, None)
    }

    /// A pay-per-crawl origin asking `price` for every page.
    pub fn start_priced(dir: &Path, keys: &str, price: &str) -> VerifyingOrigin {
        VerifyingOrigin::launch(dir, keys, &[], Some(price), None)
    }

    /// An origin in network namespace `ns`, on `address` (`127.0.0.2:80`).
    pub fn start_in(ns: &Netns, address: &str, dir: &Path, keys: &str) -> VerifyingOrigin {
        VerifyingOrigin::launch(dir, keys, &[], None, Some((ns, address)))
    }

    fn launch(
        dir: &Path,
        keys: &str,
        tls: &[&Path],
        price: Option<&str>,
        netns: Option<(&Netns, &str)>,
    ) -> VerifyingOrigin {
        let keys = keys_argument(dir, keys);
        let log = dir.join(format!("origin-{}.log", free_port()));
        let helper = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/helpers/verifying_origin.py"
        );
        // In a namespace, on the address given; else on a free loopback port.
        let fixed = netns.map(|(_, address)| {
            let port = address.rsplit(':').next().and_then(|p| p.parse().ok());
            port.unwrap_or(80)
        });
        let (child, port) = start_listening(
            "the verifying origin",
            || fixed.unwrap_or_else(free_port),
            |port| {
                let (mut command, address) = match netns {
                    Some((ns, address)) => (ns.command("python3"), address.to_string()),
                    None => (Command::new("python3"), port.to_string()),
                };
                command
                    .args([helper, &address, &keys])
                    .arg(&log)
                    .args(tls)
                    .envs(price.map(|p| ("PRICE", p)))
                    .stderr(Stdio::inherit())
                    .spawn()
                    .expect("python3")
            },
        );
        VerifyingOrigin {
            _child: crate::common::Running(child),
            port,
            log,
        }
    }

    /// The origin's verdicts so far, one per request.
    pub fn seen(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Every request for `paths` arrived signed, and the signature verified.
    pub fn assert_verified(&self, paths: &[&str]) {
        for path in paths {
            let verdict = self.verdict(path);
            assert_eq!(verdict["verified"], true, "{verdict}");
        }
    }

    /// The verdict of the first request for `path`.
    pub fn verdict(&self, path: &str) -> Value {
        self.seen()
            .into_iter()
            .find(|l| l["path"] == path)
            .unwrap_or_else(|| panic!("the origin saw no {path}: {:?}", self.seen()))
    }

    /// The verdict for `path`, which must carry exactly one signature, verified.
    pub fn signed_once(&self, path: &str) -> Value {
        let verdict = self.verdict(path);
        assert_eq!(verdict["verified"], true, "{verdict}");
        let signatures = verdict["signature"].as_array().map(Vec::len);
        assert_eq!(signatures, Some(1), "{verdict}");
        verdict
    }
}

fn robotsgate(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_robotsgate"))
        .args(args)
        .output()
        .expect("robotsgate")
}

/// `robotsgate keys generate`: a new key file, mode 0600, never overwritten.
pub fn generate(path: &Path) {
    let out = robotsgate(&["keys", "generate", "--out", &path.to_string_lossy()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mode = std::fs::metadata(path)
        .expect("key file")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

/// A signing configuration for tests: the `signing:` and `agent:` sections (under
/// `robotsgate:`), the directory `robotsgate keys directory` prints for them, and the
/// address of the directory listener they configure.
pub struct Signing {
    /// The `signing:` and `agent:` settings.
    pub conf: Conf,
    /// The identity's entry in `signing.identities`, for a test to change.
    identity: serde_json::Value,
    /// What `robotsgate keys directory` printed.
    pub printed: String,
    /// `http://127.0.0.1:PORT`: where a verifying origin asks for the keys.
    pub listener: String,
    pub port: u16,
}

impl Signing {
    /// These settings with one key of the identity's entry set to `value`.
    pub fn with_identity(&self, key: &str, value: impl serde::Serialize) -> Conf {
        let mut identity = self.identity.clone();
        identity[key] = serde_json::to_value(value).expect("a JSON value");
        self.conf.clone().set("signing.identities", [identity])
    }
}

/// A new key `main.jwk` in a new directory, and one identity signing with it (see
/// [`signing`]).
pub fn one_key(form: &str) -> (tempfile::TempDir, Signing) {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = dir.path().join("main.jwk");
    generate(&key);
    let signed = signing(dir.path(), &key, None, form);
    (dir, signed)
}

/// One identity `main` (the default) signing with `key`, its directory listener on a
/// free port.
pub fn signing(dir: &Path, key: &Path, next: Option<&Path>, form: &str) -> Signing {
    signing_on(free_port(), dir, key, next, form)
}

/// The same with the directory listener on `port`.
fn signing_on(port: u16, dir: &Path, key: &Path, next: Option<&Path>, form: &str) -> Signing {
    let mut identity = json!({
        "name": "main",
        "key_file": key.display().to_string(),
        "signature_agent": "https://crawler.example",
        "expires_seconds": 60,
    });
    if let Some(next) = next {
        identity["next_key_file"] = next.display().to_string().into();
    }
    let conf = Conf::new()
        .set("signing.directory_listen", format!("127.0.0.1:{port}"))
        .set("signing.signature_agent_form", form)
        .set("signing.identities", [&identity])
        .set("agent.default_identity", "main");
    let config = dir.join(format!("signing-{form}-{port}.yaml"));
    std::fs::write(&config, conf.file(&[])).expect("config");
    let out = robotsgate(&["keys", "directory", "--config", &config.to_string_lossy()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Signing {
        conf,
        identity,
        printed: String::from_utf8_lossy(&out.stdout).into_owned(),
        listener: format!("http://127.0.0.1:{port}"),
        port,
    }
}

/// What the origin says when `verdict`'s signature headers arrive straight from the
/// test for `authority` (the one they were made for, or another).
fn replay(origin: &VerifyingOrigin, verdict: &Value, authority: &str, path: &str) -> u16 {
    let mut command = Command::new("curl");
    command.args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-H"]);
    command.arg(format!("Host: {authority}"));
    for (header, key) in [
        ("Signature", "signature"),
        ("Signature-Input", "signature_input"),
        ("Signature-Agent", "signature_agent"),
    ] {
        for value in verdict[key].as_array().into_iter().flatten() {
            command
                .arg("-H")
                .arg(format!("{header}: {}", value.as_str().unwrap_or_default()));
        }
    }
    let out = command
        .arg(format!("http://127.0.0.1:{}{path}", origin.port))
        .output()
        .expect("curl");
    String::from_utf8_lossy(&out.stdout).parse().unwrap_or(0)
}

#[test]
fn requests_and_robots_fetches_are_signed_and_verify_independently() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = dir.path().join("main.jwk");
    generate(&key);
    // Never over an existing key.
    let again = robotsgate(&["keys", "generate", "--out", &key.to_string_lossy()]);
    assert!(!again.status.success());
    let signed = signing(dir.path(), &key, None, "string");
    let origin = VerifyingOrigin::start(dir.path(), &signed.listener);
    let proxy = Proxy::start_for_loopback(&signed.conf);

    // A client's own signature, as if it could sign as the fleet: replaced.
    let url = format!("http://127.0.0.1:{}/page", origin.port);
    let (status, _, body) = curl(
        &proxy,
        &url,
        &[
            "-H",
            "Signature: sig1=:Zm9yZ2VkIGJ5IHRoZSBjbGllbnQ=:",
            "-H",
            "Signature-Input: sig1=(\"@authority\");created=1;keyid=\"client\"",
            "-H",
            "Signature-Agent: \"https://client.example\"",
        ],
    );
    assert_eq!((status, body.as_str()), (200, "verified"));
    let page = origin.signed_once("/page");
    assert!(!page.to_string().contains("Zm9yZ2Vk") && !page.to_string().contains("client"));
    assert_eq!(page["signature_agent"][0], "\"https://crawler.example\"");
    let input = page["signature_input"][0].as_str().unwrap_or_default();
    assert!(
        input.starts_with("sig1=(\"@authority\" \"signature-agent\");created=")
            && input.contains("tag=\"web-bot-auth\""),
        "{input}"
    );
    // `/check` names the identity a request would be signed as.
    let (status, check) = crate::common::admin(
        &proxy,
        "GET",
        &format!("/check?url=http%3A%2F%2F127.0.0.1%3A{}%2Fx", origin.port),
    );
    assert_eq!(status, 200, "{check}");
    let check: Value = serde_json::from_str(&check).expect("JSON");
    assert_eq!(check["identity"], "main", "{check}");
    // robots.txt was fetched signed, before the page.
    assert_eq!(origin.seen()[0]["path"], "/robots.txt");
    assert_eq!(origin.verdict("/robots.txt")["verified"], true);
    assert_eq!(
        proxy.counter("robotsgate_signed_requests_total{identity=\"main\"}"),
        2.0
    );

    // The verifier can fail: the same headers for another authority are refused, and
    // for their own one accepted.
    let authority = format!("127.0.0.1:{}", origin.port);
    assert_eq!(replay(&origin, &page, &authority, "/replayed"), 200);
    assert_eq!(replay(&origin, &page, "other.example", "/other"), 401);
    assert_eq!(origin.verdict("/other")["verified"], false);
    // A signature under a key the directory does not hold is refused too.
    let keyless = VerifyingOrigin::start(dir.path(), r#"{"keys":[]}"#);
    let authority = format!("127.0.0.1:{}", keyless.port);
    assert_eq!(replay(&keyless, &page, &authority, "/unknown-key"), 401);
}

#[test]
fn the_drafts_dictionary_form_is_covered_by_key() {
    let (dir, signed) = one_key("dictionary");
    let origin = VerifyingOrigin::start(dir.path(), &signed.listener);
    let proxy = Proxy::start_for_loopback(&signed.conf);
    let (status, _, body) = curl(
        &proxy,
        &format!("http://127.0.0.1:{}/page", origin.port),
        &[],
    );
    assert_eq!((status, body.as_str()), (200, "verified"));
    let page = origin.verdict("/page");
    assert_eq!(
        page["signature_agent"][0],
        "sig1=\"https://crawler.example\""
    );
    let input = page["signature_input"][0].as_str().unwrap_or_default();
    assert!(
        input.starts_with("sig1=(\"@authority\" \"signature-agent\";key=\"sig1\");"),
        "{input}"
    );
}

#[test]
fn a_rotated_key_signs_under_its_own_keyid_and_old_signatures_still_verify() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (old, new) = (dir.path().join("old.jwk"), dir.path().join("new.jwk"));
    generate(&old);
    generate(&new);
    // Before the rotation: the next key is published beside the current one.
    let before = signing(dir.path(), &old, Some(&new), "string");
    let keys: Value = serde_json::from_str(&before.printed).expect("JWKS");
    let kids: Vec<&str> = keys["keys"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|k| k["kid"].as_str())
        .collect();
    assert_eq!(kids.len(), 2, "{}", before.printed);
    // The origin asks the directory listener for the keys on every request.
    let origin = VerifyingOrigin::start(dir.path(), &before.listener);
    let proxy = Proxy::start_for_loopback(&before.conf);
    let url = |path: &str| format!("http://127.0.0.1:{}{path}", origin.port);
    let before_rotation = curl(&proxy, &url("/before"), &[]);
    assert_eq!(before_rotation.0, 200, "{before_rotation:?}");
    let signed_before = origin.verdict("/before");
    assert!(signed_before["signature_input"][0]
        .as_str()
        .is_some_and(|i| i.contains(&format!("keyid=\"{}\"", kids[0]))));
    drop(proxy);

    // The next key promoted, the old one kept published as the other key (the two
    // swapped): the new key signs, and the old one's signatures verify until they
    // expire.
    let after = signing_on(before.port, dir.path(), &new, Some(&old), "string");
    let proxy = Proxy::start_for_loopback(&after.conf);
    assert_eq!(curl(&proxy, &url("/after"), &[]).0, 200);
    let signed_after = origin.verdict("/after");
    assert_eq!(signed_after["verified"], true, "{signed_after}");
    assert!(signed_after["signature_input"][0]
        .as_str()
        .is_some_and(|i| i.contains(&format!("keyid=\"{}\"", kids[1]))));
    let authority = format!("127.0.0.1:{}", origin.port);
    assert_eq!(
        replay(&origin, &signed_before, &authority, "/old-signature"),
        200
    );
    // Once the old key is dropped from the directory, its signatures no longer verify.
    drop(proxy);
    let dropped = signing_on(before.port, dir.path(), &new, None, "string");
    let _proxy = Proxy::start_for_loopback(&dropped.conf);
    assert_eq!(
        replay(&origin, &signed_before, &authority, "/old-key-dropped"),
        401
    );
    assert_eq!(
        replay(&origin, &signed_after, &authority, "/new-key-kept"),
        200
    );
}

#[test]
fn identities_and_keys_are_checked_at_start_naming_the_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = dir.path().join("main.jwk");
    generate(&key);
    let secret = std::fs::read_to_string(&key).expect("key");
    let check = |conf: &Conf| {
        let config = dir.path().join("check.yaml");
        std::fs::write(&config, conf.file(&[])).expect("config");
        let out = robotsgate(&["check-config", "--config", &config.to_string_lossy()]);
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let signed = signing(dir.path(), &key, None, "string");
    assert!(check(&signed.conf).0, "{}", check(&signed.conf).1);
    let (ok, err) = check(&signed.conf.clone().set("agent.default_identity", "other"));
    assert!(
        !ok && err.contains("agent.default_identity") && err.contains("other"),
        "{err}"
    );
    let (ok, err) = check(&signed.with_identity("signature_agent", "crawler example"));
    assert!(!ok && err.contains("signature_agent"), "{err}");
    // A key file that is not a key: named, with its identity, and never printed.
    let broken = dir.path().join("broken.jwk");
    std::fs::write(&broken, secret.replace("\"x\":\"", "\"x\":\"A")).expect("write");
    let (ok, err) = check(&signed.with_identity("key_file", broken.display().to_string()));
    assert!(
        !ok && err.contains("broken.jwk") && err.contains("identity `main`"),
        "{err}"
    );
    let d: Value = serde_json::from_str(&secret).expect("JWK");
    let d = d["d"].as_str().unwrap_or("none");
    assert!(
        !err.contains(d),
        "the private key must not be printed: {err}"
    );
}

/// The directory listener serves the identity's JWKS (current and next keys), with its
/// media type, signed by each key it lists; the signatures are checked here with
/// Python's `cryptography` over the signature base RFC 9421 defines for
/// `"@authority";req`.
#[test]
fn the_directory_listener_serves_a_jwks_signed_by_each_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (key, next) = (dir.path().join("main.jwk"), dir.path().join("next.jwk"));
    generate(&key);
    generate(&next);
    let signed = signing(dir.path(), &key, Some(&next), "string");
    let (port, printed) = (signed.port, signed.printed);
    let _proxy = Proxy::start_for_loopback(&signed.conf);
    let out = Command::new("curl")
        .args(["-s", "-D", "-", "-H", "Host: crawler.example"])
        .arg(format!(
            "http://127.0.0.1:{port}/.well-known/http-message-signatures-directory"
        ))
        .output()
        .expect("curl");
    let response = String::from_utf8_lossy(&out.stdout).into_owned();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or_default();
    assert!(head.starts_with("HTTP/1.1 200"), "{response}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/http-message-signatures-directory+json"),
        "{head}"
    );
    let served: Value = serde_json::from_str(body).expect("JWKS");
    let printed: Value = serde_json::from_str(&printed).expect("JWKS");
    assert_eq!(served, printed, "the listener and `keys directory` agree");
    assert_eq!(served["keys"].as_array().map(Vec::len), Some(2));
    let header = |name: &str| {
        head.lines()
            .find_map(|l| {
                let (n, v) = l.split_once(':')?;
                n.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
            })
            .unwrap_or_default()
    };
    let check = format!(
        r#"
import base64, json, re, sys
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
keys = {{k["kid"]: k for k in json.loads(sys.argv[1])["keys"]}}
inputs = dict(re.findall(r'(sig\d+)=(\([^)]*\)[^,]*)', sys.argv[2]))
sigs = dict(re.findall(r'(sig\d+)=:([^:]*):', sys.argv[3]))
assert len(inputs) == 2 and inputs.keys() == sigs.keys(), (inputs, sigs)
for label, params in inputs.items():
    assert 'tag="http-message-signatures-directory"' in params, params
    kid = re.search(r'keyid="([^"]+)"', params).group(1)
    x = keys[kid]["x"]
    key = Ed25519PublicKey.from_public_bytes(base64.urlsafe_b64decode(x + "=" * (-len(x) % 4)))
    base = '"@authority";req: {authority}\n"@signature-params": ' + params
    key.verify(base64.b64decode(sigs[label]), base.encode())
    try:
        key.verify(base64.b64decode(sigs[label]), base.replace("crawler", "other").encode())
        sys.exit("a signature for another authority verified")
    except Exception:
        pass
print("ok")
"#,
        authority = "crawler.example"
    );
    let verified = Command::new("python3")
        .args([
            "-c",
            &check,
            body,
            &header("signature-input"),
            &header("signature"),
        ])
        .output()
        .expect("python3");
    assert_eq!(
        String::from_utf8_lossy(&verified.stdout).trim(),
        "ok",
        "{}",
        String::from_utf8_lossy(&verified.stderr)
    );
    // Only for the hosts the identities name: no signature over another authority, none
    // without a Host, none for a Host that is not an authority; and a bounded head.
    let status_for = |extra: &[&str]| {
        let out = Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}"])
            .args(extra)
            .arg(format!(
                "http://127.0.0.1:{port}/.well-known/http-message-signatures-directory"
            ))
            .output()
            .expect("curl");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(status_for(&["-H", "Host: crawler.example:443"]), "200");
    assert_eq!(status_for(&["-H", "Host: evil.example"]), "404");
    assert_eq!(status_for(&["-H", "Host:"]), "404");
    assert_ne!(status_for(&["-H", "Host: x y \"z\""]), "200");
    let big = format!("X-Big: {}", "a".repeat(64 * 1024));
    assert_eq!(
        status_for(&["-H", "Host: crawler.example", "-H", &big]),
        "431"
    );
}

/// A signature is refused once it has expired: `expires_seconds` is what a verifier
/// holds robotsgate to. Five seconds: the first request's verification (the verifier
/// fetches the key directory from robotsgate) must end within it on a loaded host
/// (with 2 it did not, once, in a full run).
#[test]
fn an_expired_signature_is_refused() {
    let (dir, signed) = one_key("string");
    let conf = signed.with_identity("expires_seconds", 5);
    let origin = VerifyingOrigin::start(dir.path(), &signed.listener);
    let proxy = Proxy::start_for_loopback(&conf);
    let url = format!("http://127.0.0.1:{}/page", origin.port);
    assert_eq!(curl(&proxy, &url, &[]).0, 200);
    let page = origin.verdict("/page");
    assert_eq!(page["verified"], true, "{page}");
    let authority = format!("127.0.0.1:{}", origin.port);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut attempt = 0;
    loop {
        let path = format!("/late{attempt}");
        if replay(&origin, &page, &authority, &path) == 401 {
            let refused = origin.verdict(&path);
            assert!(
                refused["why"]
                    .as_str()
                    .is_some_and(|w| w.contains("expires")),
                "{refused}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still accepted: {:?}",
            origin.seen()
        );
        attempt += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Transparent mode: a crawler with no proxy settings, its connection redirected by the
/// kernel (iptables, in a namespace the test makes), is signed like any other: the
/// origin at `site.test` verifies with the keys from the directory listener.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transparent_requests_are_signed() {
    let names = [("site.test", "127.0.0.2")];
    let ns = Netns::new(&names);
    crate::common::zone_dns(ns.udp("127.0.0.1:53"), &names);
    let (dir, signed) = one_key("string");
    let origin = VerifyingOrigin::start_in(&ns, "127.0.0.2:80", dir.path(), &signed.listener);
    let http_port = free_port();
    let proxy = Proxy::start_in(
        &ns,
        &Conf::new()
            .set("dns.nameservers", ["127.0.0.1:53"])
            .with(&signed.conf),
        &[
            "--allow-destination",
            "127.0.0.2/32",
            "--transparent-http",
            &format!("127.0.0.1:{http_port}"),
        ],
    );
    ns.sh(&format!(
        "iptables -t nat -A OUTPUT -p tcp -m owner --uid-owner 65534 --dport 80 -j REDIRECT --to-ports {http_port}"
    ));
    let out = ns
        .crawler("curl")
        .env_remove("http_proxy")
        .env_remove("HTTP_PROXY")
        .args(["-s", "--max-time", "20", "http://site.test/page"])
        .output()
        .expect("curl");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "verified",
        "{}",
        proxy.log()
    );
    origin.assert_verified(&["/robots.txt", "/page"]);
    assert_eq!(
        proxy.counted(
            "robotsgate_requests_total{decision=\"allowed\",mode=\"transparent\",protocol=\"http/1.1\",scheme=\"http\"}",
            1.0
        ).await,
        1.0
    );
    // The verifier can fail here too: the same headers replayed for another authority.
    let page = origin.verdict("/page");
    let mut replay = ns.command("curl");
    replay.args([
        "-s",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "-H",
        "Host: other.test",
    ]);
    for (header, key) in [
        ("Signature", "signature"),
        ("Signature-Input", "signature_input"),
        ("Signature-Agent", "signature_agent"),
    ] {
        let value = page[key][0].as_str().unwrap_or_default();
        replay.arg("-H").arg(format!("{header}: {value}"));
    }
    let out = replay
        .arg("http://127.0.0.2/replayed")
        .output()
        .expect("curl");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "401");
}
