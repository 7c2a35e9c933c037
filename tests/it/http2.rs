//! HTTP/2 to origins (`upstream.http2: auto`, the default): robotsgate offers `h2` to
//! HTTPS origins and carries concurrent requests to one origin as streams of one
//! connection, and each stream is still one turn: the in-flight limit and the
//! Crawl-delay hold at the origin exactly as over HTTP/1.1. The origin is Debian's
//! nginx (`listen … ssl http2`), logging each request's protocol, connection, and when
//! it started and ended (`$msec` at the end, minus `$request_time`; both in ms).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{
    curl, free_port, listens_on, operator_ca, servfail_dns, Proxy, TestCa, TestOrigin,
};
use crate::fleet::slow_origin;

/// An nginx origin on a loopback port, TLS with a certificate from `ca`; stopped (by
/// its PID) when dropped.
struct Nginx {
    child: Child,
    port: u16,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

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
        for _attempt in 0..5 {
            let port = free_port();
            let d = dir.path().display();
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
            // Debian installs it in /usr/sbin, which a user's PATH may not hold.
            let nginx = if Path::new("/usr/sbin/nginx").exists() {
                "/usr/sbin/nginx"
            } else {
                "nginx"
            };
            let mut child = Command::new(nginx)
                .args(["-e", "stderr", "-p"])
                .arg(dir.path())
                .arg("-c")
                .arg(&conf_file)
                .stderr(Stdio::inherit())
                .spawn()
                .expect("nginx (Debian package nginx-light)");
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                if listens_on(child.id(), port) {
                    return Nginx {
                        child,
                        port,
                        log,
                        _dir: dir,
                    };
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("nginx did not start");
    }

    fn url(&self, path: &str) -> String {
        format!("https://localhost:{}{path}", self.port)
    }

    /// Requests for paths starting with `prefix`, as logged (nginx writes a line when a
    /// request ends).
    fn logged(&self, prefix: &str) -> Vec<Logged> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
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

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// robotsgate intercepting CONNECT with an operator CA, trusting `origin_ca`.
struct Gate {
    proxy: Proxy,
    operator_ca: PathBuf,
    _dir: tempfile::TempDir,
}

impl Gate {
    async fn start(origin_ca: &TestCa, extra_yaml: &str) -> Gate {
        let dir = tempfile::tempdir().expect("tempdir");
        let (ca_cert, ca_key) = operator_ca(dir.path());
        let origin_ca_file = dir.path().join("origin-ca.pem");
        std::fs::write(&origin_ca_file, &origin_ca.cert_pem).expect("write");
        let dns = servfail_dns().await;
        let path = |p: &Path| p.to_string_lossy().into_owned();
        let proxy = Proxy::start(
            &format!("  dns:\n    nameservers: [\"{dns}\"]\n{extra_yaml}"),
            &[
                "--allow-destination",
                "127.0.0.0/8",
                "--allow-destination",
                "::1/128",
                "--ca-cert",
                &path(&ca_cert),
                "--ca-key",
                &path(&ca_key),
                "--upstream-ca",
                &path(&origin_ca_file),
            ],
        );
        Gate {
            proxy,
            operator_ca: ca_cert,
            _dir: dir,
        }
    }

    /// GETs `urls` through the proxy, all at once; their statuses.
    fn get_all(&self, urls: &[String]) -> Vec<u16> {
        let ca = self.operator_ca.to_string_lossy().into_owned();
        std::thread::scope(|scope| {
            let running: Vec<_> = urls
                .iter()
                .map(|url| {
                    let ca = ca.clone();
                    scope.spawn(move || {
                        let extra = ["--suppress-connect-headers", "--cacert", &ca];
                        curl(&self.proxy, url, &extra).0
                    })
                })
                .collect();
            running
                .into_iter()
                .map(|r| r.join().expect("curl"))
                .collect()
        })
    }
}

/// The port of a loopback test origin.
fn port(origin: &TestOrigin) -> u16 {
    origin
        .url("/")
        .rsplit(':')
        .next()
        .and_then(|p| p.trim_end_matches('/').parse().ok())
        .expect("port")
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
    let ca = TestCa::new("h2 origins CA");
    let backend = slow_origin("/slow/", 8).await;
    let nginx = Nginx::start(
        &ca,
        "User-agent: *\nDisallow: /private\n",
        true,
        port(&backend),
    );
    let gate = Gate::start(&ca, "  pacing:\n    max_in_flight: 2\n").await;
    let urls: Vec<String> = (0..8).map(|i| nginx.url(&format!("/slow/{i}"))).collect();
    let statuses = gate.get_all(&urls);
    assert!(statuses.iter().all(|&s| s == 200), "{statuses:?}");
    assert_eq!(
        gate.get_all(&[nginx.url("/private/x")]),
        [403],
        "{}",
        gate.proxy.log()
    );
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
    let ca = TestCa::new("h2 origins CA");
    let backend = slow_origin("/slow/", 4).await;
    let nginx = Nginx::start(
        &ca,
        "User-agent: *\nCrawl-delay: 0.4\n",
        true,
        port(&backend),
    );
    let gate = Gate::start(&ca, "").await;
    let urls: Vec<String> = (0..4).map(|i| nginx.url(&format!("/slow/{i}"))).collect();
    let statuses = gate.get_all(&urls);
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
    let ca = TestCa::new("h1 origins CA");
    let h1 = Nginx::start(&ca, "User-agent: *\nAllow: /\n", false, 9);
    let gate = Gate::start(&ca, "").await;
    assert_eq!(gate.get_all(&[h1.url("/page")]), [200]);
    assert_eq!(h1.logged("/page")[0].protocol, "HTTP/1.1");
    // An h2 origin with `upstream.http2: off`: HTTP/1.1.
    let h2 = Nginx::start(&ca, "User-agent: *\nAllow: /\n", true, 9);
    let off = Gate::start(&ca, "  upstream:\n    http2: off\n").await;
    assert_eq!(off.get_all(&[h2.url("/page")]), [200]);
    assert_eq!(h2.logged("/page")[0].protocol, "HTTP/1.1");
}
