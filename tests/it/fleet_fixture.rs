//! What the fleet tests share: the fleet's credentials (a fleet CA and a member
//! certificate, made once per test process by `robotsgate fleet-cert`), each backend's
//! `fleet:` section, instances started together, the origins they crawl, the loads
//! they send, and a member's key used by someone else (`Credential`, `as_peer`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use base64::Engine;
use serde_json::json;
use tokio::time::Instant;

use crate::common::{admin, curl, eventually, status_of, Behaviour, Conf, Proxy, TestOrigin};
use crate::redis_servers::Redis;

/// The fleet CA every test member trusts, and a certificate from it naming no member.
pub(crate) struct FleetCerts {
    /// Keeps the files.
    dir: tempfile::TempDir,
}

impl FleetCerts {
    /// Makes a CA and a member certificate with `robotsgate fleet-cert` in a new directory.
    pub(crate) fn make() -> FleetCerts {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = |name: &str| dir.path().join(name);
        let [ca, ca_key, cert, key] = ["ca.pem", "ca.key", "member.pem", "member.key"].map(path);
        crate::common::fleet_cert(&ca, &ca_key, &cert, &key, "stranger");
        FleetCerts { dir }
    }

    /// One file of the set: `ca.pem`, `member.pem`, `member.key` (a certificate from
    /// the fleet CA naming member `stranger`, which never runs).
    pub(crate) fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The peer channel's keys of a `fleet:` section: the fleet CA (each member started
    /// gets a certificate of its own from it: `Proxy::start`).
    pub(crate) fn conf(&self) -> Conf {
        Conf::new().set("fleet.peer_ca", self.file("ca.pem").to_string_lossy())
    }
}

/// The credentials every fleet test's members share.
pub(crate) fn certs() -> &'static FleetCerts {
    static CERTS: OnceLock<FleetCerts> = OnceLock::new();
    CERTS.get_or_init(FleetCerts::make)
}

/// A `fleet:` section over one `redis-server`, with the peer channel's credentials.
pub(crate) fn fleet_conf(redis: &Redis) -> Conf {
    certs().conf().set("fleet.redis", redis.url())
}

/// `n` robotsgate processes with the same settings (each with its own ports).
pub(crate) fn instances(n: usize, conf: &Conf) -> Vec<Proxy> {
    (0..n).map(|_| Proxy::start_for_loopback(conf)).collect()
}

/// Waits until every instance is ready (its lease valid) and knows every other one.
pub(crate) async fn backend_up(proxies: &[Proxy]) {
    members_up(&proxies.iter().collect::<Vec<_>>()).await;
}

/// As [`backend_up`], for members held apart.
pub(crate) async fn members_up(proxies: &[&Proxy]) {
    for proxy in proxies {
        let ready = eventually(Duration::from_secs(15), || {
            admin(proxy, "GET", "/readyz").0 == 200 && members(proxy) >= proxies.len()
        })
        .await;
        assert!(ready, "fleet never came up:\n{}", proxy.log());
    }
}

/// How many live members `proxy` knows of (its `/fleet` view).
pub(crate) fn members(proxy: &Proxy) -> usize {
    let (_, body) = admin(proxy, "GET", "/fleet");
    serde_json::from_str::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| {
            v["members"]
                .as_array()
                .map(|m| m.iter().filter(|m| m["state"] == "up").count())
        })
        .unwrap_or(0)
}

/// `proxy`'s own member id (its `/fleet`): its instance's, as Redis' records name it.
pub(crate) fn member_id(proxy: &Proxy) -> String {
    let (_, body) = admin(proxy, "GET", "/fleet");
    let fleet: serde_json::Value = serde_json::from_str(&body).expect("/fleet JSON");
    fleet["me"].as_str().expect("me").to_string()
}

/// The member id that owns `origin` as `proxy` knows (`here` when it is `proxy`).
pub(crate) fn owner_seen_by(proxy: &Proxy, origin: &TestOrigin) -> Option<String> {
    let url = origin.url("");
    let base = url.trim_end_matches('/');
    let (_, body) = admin(proxy, "GET", &format!("/origins/{}", urlencode(base)));
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    v["owner"].as_str().map(str::to_string)
}

/// Which of `proxies` owns `origin` (asked of each: the one that says `here`).
pub(crate) fn owner_index(proxies: &[Proxy], origin: &TestOrigin) -> Option<usize> {
    proxies
        .iter()
        .position(|p| owner_seen_by(p, origin).as_deref() == Some("here"))
}

/// `origin` met first through `proxies[0]`, which so owns it (`/first`), then through
/// `proxies[1]`, which learns its owner and hands that request over (`/learn`): the
/// second member's next requests for it go to the owner on the front's relay.
pub(crate) fn first_owns_second_learns(proxies: &[Proxy], origin: &TestOrigin) {
    assert_eq!(curl(&proxies[0], &origin.url("/first"), &[]).0, 200);
    assert_eq!(owner_index(proxies, origin), Some(0));
    assert_eq!(curl(&proxies[1], &origin.url("/learn"), &[]).0, 200);
}

/// Percent-encodes an origin for an admin path.
pub(crate) fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'.' | b'-' | b'_' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Requests `proxy` handed over to another member.
pub(crate) fn handed_over(proxy: &Proxy) -> f64 {
    proxy.sum("robotsgate_requests_total", "decision=\"handed_over\"")
}

/// [`handed_over`] once it has reached `want` (counted as each exchange ends, after its
/// client has the answer), or its value after 10 s.
pub(crate) async fn handed_over_reaching(proxy: &Proxy, want: f64) -> f64 {
    proxy
        .summed(
            "robotsgate_requests_total",
            "decision=\"handed_over\"",
            want,
        )
        .await
}

/// `proxy`'s access lines for the paths that start with `prefix` (each written a few
/// milliseconds after its answer, by a thread of its own).
pub(crate) fn access_lines(proxy: &Proxy, prefix: &str) -> Vec<String> {
    let path = format!("path=\"{prefix}");
    proxy
        .log()
        .lines()
        .filter(|l| l.contains(" access: ") && l.contains(&path))
        .map(String::from)
        .collect()
}

/// Is this access line a request handed over to another member?
pub(crate) fn handed_on(line: &str) -> bool {
    line.contains("decision=\"handed_over\"")
}

/// Keys `proxy` took or let go of by `how` (`claimed`, `handed`, `taken_over`, `idle`,
/// `followed`, ...).
pub(crate) fn ownership_changes(proxy: &Proxy, how: &str) -> f64 {
    proxy.sum(
        "robotsgate_fleet_ownership_changes_total",
        &format!("how=\"{how}\""),
    )
}

/// The Redis key of the fleet's robots.txt copy for `origin` (deleted by tests, as by a
/// Redis that lost it).
pub(crate) fn robots_copy_key(origin: &TestOrigin) -> String {
    format!("rg:{{{}}}:r", origin.url("").trim_end_matches('/'))
}

/// An origin whose robots.txt asks every crawler for `delay` seconds between requests.
pub(crate) async fn paced_origin(delay: &str) -> TestOrigin {
    let robots = format!("User-agent: *\nCrawl-delay: {delay}\nDisallow: /private\n");
    TestOrigin::robots(&robots).await
}

/// An origin allowing everything, with no Crawl-delay, whose pages `{prefix}0` to
/// `{prefix}{count - 1}` take 300 ms each to answer: what the in-flight limit guards.
pub(crate) async fn slow_origin(prefix: &str, count: usize) -> TestOrigin {
    let slow = || Behaviour::delayed(300, "slow\n");
    let routes: Vec<(String, Behaviour)> = std::iter::once((
        "/robots.txt".to_string(),
        Behaviour::ok("User-agent: *\nAllow: /\n"),
    ))
    .chain((0..count).map(|i| (format!("{prefix}{i}"), slow())))
    .collect();
    TestOrigin::start_owned(&routes).await
}

/// GETs `count` pages through the instances in turn, all at once; the statuses.
pub(crate) async fn spread(
    proxies: &[Proxy],
    origin: &TestOrigin,
    prefix: &str,
    count: usize,
) -> Vec<u16> {
    let answers = spread_answers(proxies, origin, prefix, count).await;
    answers.into_iter().map(|(status, _)| status).collect()
}

/// [`spread`], with each answer's headers and body as well (what to show when a status
/// is not the one expected: who made it).
pub(crate) async fn spread_answers(
    proxies: &[Proxy],
    origin: &TestOrigin,
    prefix: &str,
    count: usize,
) -> Vec<(u16, String)> {
    let clients: Vec<reqwest::Client> = proxies.iter().map(|p| p.client()).collect();
    let tasks: Vec<_> = (0..count)
        .map(|i| {
            let member = i % clients.len();
            let client = clients[member].clone();
            let url = origin.url(&format!("{prefix}{i}"));
            tokio::spawn(async move {
                let answer = client.get(&url).send().await.expect("request");
                let status = answer.status().as_u16();
                let head = format!("{url} via member {member}: {:?}", answer.headers());
                let body = answer.text().await.unwrap_or_default();
                (status, format!("{head}\n{body}"))
            })
        })
        .collect();
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.expect("task"));
    }
    answers
}

/// `clients` clients, client `c` through `proxies[c % len]`, GETting `{prefix}{i}` for
/// i from 0 until `count` are sent or `until`; each pauses 100 ms after a refusal. The
/// statuses (0: no answer).
pub(crate) async fn load(
    proxies: &[Proxy],
    origins: &[&TestOrigin],
    prefix: &str,
    clients: usize,
    count: usize,
    until: Instant,
) -> Vec<u16> {
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let bases: Vec<String> = origins.iter().map(|o| o.url(prefix)).collect();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let client = proxies[c % proxies.len()].client();
        let (next, bases) = (next.clone(), bases.clone());
        tasks.push(tokio::spawn(async move {
            let mut statuses = Vec::new();
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= count || Instant::now() >= until {
                    return statuses;
                }
                let base = &bases[i % bases.len()];
                let status = match client.get(format!("{base}{i}")).send().await {
                    Ok(r) => r.status().as_u16(),
                    Err(_) => 0,
                };
                statuses.push(status);
                if status != 200 {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.expect("client task"));
    }
    all
}

/// Sends `signal` (`-STOP`, `-CONT`, `-TERM`, `-KILL`) to the process `pid` started.
pub(crate) fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
}

/// Two fleet members that intercept HTTPS (the `https` tests' CAs and DNS), with
/// `extra` settings added.
pub(crate) struct HttpsFleet {
    /// The first member, with its CAs and their directory.
    pub(crate) setup: crate::https::Setup,
    /// The second member.
    second: Proxy,
    _redis: Redis,
}

impl HttpsFleet {
    pub(crate) async fn start(extra: &Conf) -> HttpsFleet {
        HttpsFleet::start_routed(extra, &Conf::new(), |_| {}).await
    }

    /// As [`HttpsFleet::start`], the first member with `first` added to its settings
    /// and handed to `started` before the fleet is waited for (a test routing its peer
    /// address, say).
    pub(crate) async fn start_routed(
        extra: &Conf,
        first: &Conf,
        started: impl FnOnce(&Proxy),
    ) -> HttpsFleet {
        let redis = Redis::start();
        let conf = fleet_conf(&redis).with(extra);
        let setup = crate::https::Setup::start(&conf.clone().with(first)).await;
        started(&setup.proxy);
        let second = setup.another(&conf);
        crate::fleet_fixture::members_up(&[&setup.proxy, &second]).await;
        HttpsFleet {
            setup,
            second,
            _redis: redis,
        }
    }

    /// Member `i` (0 or 1).
    pub(crate) fn member(&self, i: usize) -> &Proxy {
        [&self.setup.proxy, &self.second][i]
    }

    /// An HTTPS origin for `localhost` serving `robots`.
    pub(crate) async fn origin(&self, robots: &str) -> TestOrigin {
        self.setup.origin(robots).await
    }

    /// curl through member `i` trusting `ca` (a file in the directory), `extra` added.
    pub(crate) fn curl(
        &self,
        i: usize,
        url: &str,
        ca: &str,
        extra: &[&str],
    ) -> (u16, String, String) {
        let ca = self.setup.dir.path().join(ca);
        let ca = ca.to_str().expect("path");
        let args = [&["--cacert", ca, "--suppress-connect-headers"][..], extra].concat();
        crate::common::curl(self.member(i), url, &args)
    }
}

/// Timeouts short enough for a test: the longest an exchange can hold a turn is a few
/// seconds, the lease 1.5 s.
pub(crate) fn short() -> Conf {
    Conf::new()
        .set(
            "upstream",
            json!({"read_timeout_seconds": 1, "write_timeout_seconds": 1}),
        )
        .set("pacing.max_exchange_seconds", 1)
        .set("robots.fetch_timeout_seconds", 1)
}

/// The fleet section's keys for short leases, and the outage mode; with [`short`]'s
/// timeouts.
pub(crate) fn short_fleet(mode: &str) -> Conf {
    Conf::new()
        .set(
            "fleet",
            json!({"lease_seconds": 1.5, "command_timeout_seconds": 0.2}),
        )
        .set("fleet.on_unavailable", mode)
        .set("fleet.outage_grace_seconds", 2)
        .with(&short())
}

/// A TCP relay between one member and Redis, which the test cuts (every connection
/// dropped, each new one reset as a port nobody listens on) and restores: a partition.
/// It keeps its listener throughout, so no other process can take its port meanwhile.
pub(crate) struct Relay {
    /// Where the member connects.
    pub(crate) port: u16,
    /// Whether it is cut: its connections watch it.
    cut: tokio::sync::watch::Sender<bool>,
    /// The listener's task.
    accepting: tokio::task::JoinHandle<()>,
}

impl Relay {
    /// A relay to Redis on `target`, accepting.
    pub(crate) async fn start(target: u16) -> Relay {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("relay port");
        let port = listener.local_addr().expect("relay address").port();
        let (cut, _) = tokio::sync::watch::channel(false);
        let watch = cut.clone();
        let accepting = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if *watch.borrow() {
                    if let Ok(client) = client.into_std() {
                        crate::common::reset(client);
                    }
                    continue;
                }
                tokio::spawn(relay_one(client, target, watch.subscribe()));
            }
        });
        Relay {
            port,
            cut,
            accepting,
        }
    }

    /// Accepts again, forwarding each connection to Redis.
    pub(crate) fn restore(&mut self) {
        self.cut.send_replace(false);
    }

    /// Cuts every connection; new ones are reset until [`Relay::restore`].
    pub(crate) fn cut(&mut self) {
        self.cut.send_replace(true);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.accepting.abort();
        // Every connection ends too: its watch sees the relay cut.
        self.cut.send_replace(true);
    }
}

/// Forwards `client` to Redis on `target` until either side closes or the relay is cut.
async fn relay_one(
    mut client: tokio::net::TcpStream,
    target: u16,
    mut cut: tokio::sync::watch::Receiver<bool>,
) {
    let Ok(mut redis) = tokio::net::TcpStream::connect(("127.0.0.1", target)).await else {
        return;
    };
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut redis) => {}
        _ = cut.wait_for(|cut| *cut) => {}
    }
}

/// A member certificate and key, kept where a test can still use them.
pub(crate) struct Credential {
    /// Keeps the files.
    pub(crate) _dir: tempfile::TempDir,
    pub(crate) cert: PathBuf,
    pub(crate) key: PathBuf,
}

impl Credential {
    /// A copy of `proxy`'s own certificate and key (a member's key stolen).
    pub(crate) fn of(proxy: &Proxy) -> Credential {
        let dir = tempfile::tempdir().expect("tempdir");
        let (cert, key) = (dir.path().join("m.pem"), dir.path().join("m.key"));
        std::fs::copy(proxy.file("member.pem"), &cert).expect("copy cert");
        std::fs::copy(proxy.file("member.key"), &key).expect("copy key");
        Credential {
            _dir: dir,
            cert,
            key,
        }
    }
}

/// The status of `GET target` sent to `proxy`'s peer channel with `cert`/`key` and
/// the peer context `context` (JSON); 0 when no HTTP answer came.
pub(crate) fn as_peer(proxy: &Proxy, cert: &Path, key: &Path, target: &str, context: &str) -> u16 {
    as_peer_at(proxy.peer, cert, key, target, context)
}

/// [`as_peer`] to the peer channel at `peer`.
pub(crate) fn as_peer_at(
    peer: Option<SocketAddr>,
    cert: &Path,
    key: &Path,
    target: &str,
    context: &str,
) -> u16 {
    let context = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(context);
    let host = target.split('/').nth(2).expect("authority");
    let (cert, key) = (cert.to_str().expect("path"), key.to_str().expect("path"));
    let peer_header = format!("robotsgate-peer: {context}");
    let host_header = format!("Host: {host}");
    peer_curl(
        peer,
        &["--cert", cert, "--key", key, "--request-target", target],
        &["-H", &peer_header, "-H", &host_header],
    )
}

/// curl to a member's peer channel at `peer` (`https://robotsgate-fleet:PORT/`, the
/// fleet CA trusted) with `extra` and `more` arguments: the HTTP status, 0 when no
/// exchange took place.
pub(crate) fn peer_curl(peer: Option<SocketAddr>, extra: &[&str], more: &[&str]) -> u16 {
    let peer = peer.expect("a fleet member");
    status_of(
        Command::new("curl")
            .arg("--resolve")
            .arg(format!("robotsgate-fleet:{}:127.0.0.1", peer.port()))
            .arg("--cacert")
            .arg(certs().file("ca.pem"))
            .args(extra)
            .args(more)
            .arg(format!("https://robotsgate-fleet:{}/", peer.port())),
    )
}
