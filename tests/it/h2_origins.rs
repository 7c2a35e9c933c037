//! HTTP/2 to origins (`upstream.http2: auto`, the default): robotsgate offers `h2` to
//! HTTPS origins and carries concurrent requests to one origin as streams of one
//! connection, and each stream is still one turn: the in-flight limit and the
//! Crawl-delay hold at the origin exactly as over HTTP/1.1. The origin is Debian's
//! nginx (`listen … ssl http2`), logging each request's protocol, connection, and when
//! it started and ended (`$msec` at the end, minus `$request_time`; both in ms).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::common::{free_port, start_listening, Conf, TestCa};
use crate::fleet_fixture::slow_origin;
use crate::https::Setup;

/// An origin server process on a loopback port (TLS for `localhost`), logging each
/// request to a file in its own directory; stopped (by its PID) when dropped.
struct OriginProcess {
    /// The server.
    _child: crate::common::Running,
    /// Its port on 127.0.0.1.
    port: u16,
    /// Its request log.
    log: PathBuf,
    /// Its certificate, configuration and log.
    _dir: tempfile::TempDir,
}

impl OriginProcess {
    /// The process `child`, listening on `port`, logging to `log` in `dir`.
    fn new(child: std::process::Child, port: u16, log: PathBuf, dir: tempfile::TempDir) -> Self {
        let _child = crate::common::Running(child);
        OriginProcess {
            _child,
            port,
            log,
            _dir: dir,
        }
    }

    /// `path` at this origin.
    fn url(&self, path: &str) -> String {
        format!("https://localhost:{}{path}", self.port)
    }

    /// Its request log so far.
    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// An nginx origin, TLS with a certificate from `ca`.
struct Nginx(OriginProcess);

/// One request as nginx logged it.
#[derive(Debug)]
struct Logged {
    path: String,
    protocol: String,
    connection: u64,
    start_ms: f64,
    end_ms: f64,
}

impl Nginx {
    /// Serves `robots` at /robots.txt, a small page everywhere else and, under
    /// `/slow/`, what `slow` (a loopback HTTP origin on that port) answers, proxied:
    /// nginx logs a request from its start to the end of its response, the backend's
    /// time included. `http2` adds h2 to the listener's ALPN.
    fn start(ca: &TestCa, robots: &str, http2: bool, slow: u16) -> Nginx {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("www");
        std::fs::create_dir_all(&root).expect("www");
        std::fs::write(root.join("robots.txt"), robots).expect("robots");
        std::fs::write(root.join("page"), "page\n").expect("page");
        let (cert, key) = ca.leaf_pem(&["localhost", "127.0.0.1"]);
        std::fs::write(dir.path().join("cert.pem"), cert).expect("cert");
        std::fs::write(dir.path().join("key.pem"), key).expect("key");
        let log = dir.path().join("access.log");
        let d = dir.path().display();
        // Debian installs it in /usr/sbin, which a user's PATH may not hold.
        let nginx = if Path::new("/usr/sbin/nginx").exists() {
            "/usr/sbin/nginx"
        } else {
            "nginx"
        };
        let (child, port) = start_listening("nginx", free_port, |port| {
            let conf = format!(
                "daemon off;
master_process off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log;
events {{ worker_connections 256; }}
http {{
    log_format timed '$msec $request_time $server_protocol $connection $request_uri';
    access_log {d}/access.log timed;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    default_type text/plain;
    server {{
        listen 127.0.0.1:{port} ssl{h2};
        ssl_certificate {d}/cert.pem;
        ssl_certificate_key {d}/key.pem;
        root {d}/www;
        location /slow/ {{ proxy_pass http://127.0.0.1:{slow}; }}
    }}
}}
",
                h2 = if http2 { " http2" } else { "" },
            );
            let conf_file = dir.path().join("nginx.conf");
            std::fs::write(&conf_file, conf).expect("nginx.conf");
            Command::new(nginx)
                .args(["-e", "stderr", "-p"])
                .arg(dir.path())
                .arg("-c")
                .arg(&conf_file)
                .stderr(Stdio::inherit())
                .spawn()
                .expect("nginx (Debian package nginx-light)")
        });
        Nginx(OriginProcess::new(child, port, log, dir))
    }

    fn url(&self, path: &str) -> String {
        self.0.url(path)
    }

    /// Requests for paths starting with `prefix`, as logged (nginx writes a line when a
    /// request ends).
    fn logged(&self, prefix: &str) -> Vec<Logged> {
        let text = self.0.log_text();
        let mut out: Vec<Logged> = text
            .lines()
            .filter_map(|line| {
                let f: Vec<&str> = line.split(' ').collect();
                let end: f64 = f.first()?.parse().ok()?;
                let took: f64 = f.get(1)?.parse().ok()?;
                Some(Logged {
                    end_ms: end * 1000.0,
                    start_ms: (end - took) * 1000.0,
                    protocol: f.get(2)?.to_string(),
                    connection: f.get(3)?.parse().ok()?,
                    path: f.get(4)?.to_string(),
                })
            })
            .filter(|l| l.path.starts_with(prefix))
            .collect();
        out.sort_by(|a, b| a.start_ms.total_cmp(&b.start_ms));
        out
    }
}

/// GETs `urls` through `gate`, all at once; their statuses.
fn get_all(gate: &Setup, urls: &[String]) -> Vec<u16> {
    std::thread::scope(|scope| {
        let running: Vec<_> = urls
            .iter()
            .map(|url| scope.spawn(move || gate.curl(url).0))
            .collect();
        running
            .into_iter()
            .map(|r| r.join().expect("curl"))
            .collect()
    })
}

/// Most requests of `logged` at the origin at once (a request ending as another
/// starts, in the same millisecond, is not counted as overlapping).
fn most_at_once(logged: &[Logged]) -> usize {
    logged
        .iter()
        .map(|l| {
            logged
                .iter()
                .filter(|o| o.start_ms <= l.start_ms && l.start_ms < o.end_ms - 0.5)
                .count()
        })
        .max()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_share_one_h2_connection_within_the_in_flight_limit() {
    let gate = Setup::start(&Conf::new().set("pacing.max_in_flight", 2)).await;
    let backend = slow_origin("/slow/", 8).await;
    let robots = "User-agent: *\nDisallow: /private\n";
    let nginx = Nginx::start(&gate.origin_ca, robots, true, backend.addr.port());
    let urls: Vec<String> = (0..8).map(|i| nginx.url(&format!("/slow/{i}"))).collect();
    let statuses = get_all(&gate, &urls);
    assert!(statuses.iter().all(|&s| s == 200), "{statuses:?}");
    let refused = gate.curl(&nginx.url("/private/x"));
    assert_eq!(refused.0, 403, "{}", gate.proxy.log());
    let slow = nginx.logged("/slow/");
    assert_eq!(slow.len(), 8, "{slow:?}");
    assert!(
        slow.iter().all(|l| l.protocol == "HTTP/2.0"),
        "upstream requests arrive as HTTP/2: {slow:?}"
    );
    // Two at a time, never more, on as few connections as streams allow.
    assert_eq!(most_at_once(&slow), 2, "{slow:?}");
    let mut connections: Vec<u64> = slow.iter().map(|l| l.connection).collect();
    connections.sort_unstable();
    connections.dedup();
    assert!(
        connections.len() < slow.len(),
        "streams share a connection: {slow:?}"
    );
    assert!(nginx.logged("/private").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crawl_delay_is_kept_between_h2_streams() {
    let gate = Setup::start(&Conf::new()).await;
    let backend = slow_origin("/slow/", 4).await;
    let robots = "User-agent: *\nCrawl-delay: 0.4\n";
    let nginx = Nginx::start(&gate.origin_ca, robots, true, backend.addr.port());
    let urls: Vec<String> = (0..4).map(|i| nginx.url(&format!("/slow/{i}"))).collect();
    let statuses = get_all(&gate, &urls);
    assert!(statuses.iter().all(|&s| s == 200), "{statuses:?}");
    let slow = nginx.logged("/slow/");
    assert_eq!(slow.len(), 4, "{slow:?}");
    assert!(slow.iter().all(|l| l.protocol == "HTTP/2.0"), "{slow:?}");
    // From the end of one response to the start of the next, at the origin (nginx logs
    // in milliseconds: 2 ms of rounding allowed).
    for pair in slow.windows(2) {
        let gap = pair[1].start_ms - pair[0].end_ms;
        assert!(gap >= 400.0 - 2.0, "gap {gap} ms: {slow:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http1_only_origin_is_reached_over_http1_and_off_means_off() {
    let allow = "User-agent: *\nAllow: /\n";
    let gate = Setup::start(&Conf::new()).await;
    let h1 = Nginx::start(&gate.origin_ca, allow, false, 9);
    assert_eq!(gate.curl(&h1.url("/page")).0, 200);
    assert_eq!(h1.logged("/page")[0].protocol, "HTTP/1.1");
    // An h2 origin: h2, and the access log says which.
    let h2 = Nginx::start(&gate.origin_ca, allow, true, 9);
    assert_eq!(gate.curl(&h2.url("/page")).0, 200);
    assert_eq!(h2.logged("/page")[0].protocol, "HTTP/2.0");
    let log = gate
        .proxy
        .log_with_all(&["/page", "upstream_protocol=\"h2\""])
        .await;
    let h1_line = format!("origin=\"{}\"", h1.url("").trim_end_matches('/'));
    assert!(
        log.lines()
            .any(|l| l.contains(&h1_line) && l.contains("upstream_protocol=\"http/1.1\"")),
        "{log}"
    );
    // An h2 origin with `upstream.http2: off`: HTTP/1.1.
    let off = Setup::start(&Conf::new().set("upstream.http2", "off")).await;
    let h2 = Nginx::start(&off.origin_ca, allow, true, 9);
    assert_eq!(off.curl(&h2.url("/page")).0, 200);
    assert_eq!(h2.logged("/page")[0].protocol, "HTTP/1.1");
    off.proxy
        .log_with_all(&["/page", "upstream_protocol=\"http/1.1\""])
        .await;
}

/// An HTTP/2-only origin that refuses streams on purpose (`tests/helpers/h2_origin.py`,
/// hyper-h2), logging each request's arrival and end.
struct RefusingOrigin(OriginProcess);

/// One request as the refusing origin logged it (wall-clock seconds).
#[derive(Debug, serde::Deserialize)]
struct Refused {
    path: String,
    arrived: f64,
    ended: f64,
}

impl RefusingOrigin {
    fn start(ca: &TestCa, robots: &str) -> RefusingOrigin {
        let dir = tempfile::tempdir().expect("tempdir");
        let (cert, key) = ca.leaf_pem(&["localhost", "127.0.0.1"]);
        let (cert_file, key_file) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
        std::fs::write(&cert_file, cert).expect("cert");
        std::fs::write(&key_file, key).expect("key");
        let log = dir.path().join("origin.log");
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/helpers/h2_origin.py");
        let (child, port) = start_listening("h2_origin.py", free_port, |port| {
            Command::new("python3")
                .arg(script)
                .args(["--port", &port.to_string(), "--robots", robots])
                .arg("--cert")
                .arg(&cert_file)
                .arg("--key")
                .arg(&key_file)
                .arg("--log")
                .arg(&log)
                .spawn()
                .expect("python3 tests/helpers/h2_origin.py")
        });
        RefusingOrigin(OriginProcess::new(child, port, log, dir))
    }

    fn url(&self, path: &str) -> String {
        self.0.url(path)
    }

    /// Every request but robots.txt's, in arrival order.
    fn logged(&self) -> Vec<Refused> {
        let text = self.0.log_text();
        let mut out: Vec<Refused> = text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .filter(|r: &Refused| r.path != "/robots.txt")
            .collect();
        out.sort_by(|a, b| a.arrived.total_cmp(&b.arrived));
        out
    }
}

/// An origin that refuses a stream (RST_STREAM REFUSED_STREAM, or a GOAWAY below it)
/// gets it again at most `upstream.max_retries` times, each attempt in a turn of its
/// own: after the Crawl-delay and the backoff the refusal adds, never at once. The
/// turn ends with the refusal (the origin is not working on it), not a read timeout
/// later: the next page follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_h2_stream_is_sent_again_once_in_a_turn_of_its_own() {
    let gate = Setup::start(&Conf::new()).await;
    let origin = RefusingOrigin::start(&gate.origin_ca, "User-agent: *\nCrawl-delay: 0.5\n");
    for (path, reason) in [("/refuse/1", "refused"), ("/goaway/1", "refused")] {
        let before = origin.logged().len();
        let (status, head, _) = gate.curl(&origin.url(path));
        assert_eq!(status, 502, "{head}\n{}", gate.proxy.log());
        let (status, _, _) = gate.curl(&origin.url("/page"));
        assert_eq!(status, 200, "{}", gate.proxy.log());
        let seen = origin.logged();
        let attempts = seen[before..].iter().filter(|r| r.path == path).count();
        assert_eq!(attempts, 2, "one attempt and one retry: {seen:?}");
        assert_eq!(
            gate.proxy.counter(&format!(
                "robotsgate_upstream_retries_total{{reason=\"{reason}\"}}"
            )),
            if path.starts_with("/refuse") {
                1.0
            } else {
                2.0
            }
        );
    }
    // Every request, refused or not, one Crawl-delay after the previous one ended; after
    // a refusal at least the backoff (1 s) too.
    let seen = origin.logged();
    for pair in seen.windows(2) {
        let gap = pair[1].arrived - pair[0].ended;
        assert!(gap >= 0.5 - 0.002, "gap {gap:.3} s: {seen:?}");
        if pair[0].path != "/page" {
            assert!(gap >= 1.0 - 0.002, "no backoff after a refusal: {seen:?}");
        }
    }
    assert_eq!(
        gate.proxy
            .counter("robotsgate_upstream_exchange_ends_total{end=\"cut_other\"}"),
        0.0,
        "a refusal ends the turn, it is not held as a cut"
    );
}
