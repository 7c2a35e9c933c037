//! HTTPS through `CONNECT`: TLS interception puts every request inside the tunnel through
//! the same robots decision as plain HTTP. Real sockets throughout: HTTPS-only origins
//! with certificates from a CA made in the test, an operator CA made by `robotsgate ca
//! init`, curl, Python `requests` and a hand-driven TLS client as crawlers.

use serde_json::json;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::common::{
    client_config_trusting, curl, operator_ca, Behaviour, Conf, Proxy, TestCa, TestOrigin,
};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

pub(crate) const ROBOTS: &str = "User-agent: *\nDisallow: /disallowed\n";

/// An operator CA, a test CA for origins, and a robotsgate that trusts the latter.
pub(crate) struct Setup {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) operator_ca: PathBuf,
    pub(crate) origin_ca: TestCa,
    pub(crate) proxy: Proxy,
    /// The DNS server robotsgate asks.
    dns: std::net::SocketAddr,
}

impl Setup {
    pub(crate) async fn start(conf: &Conf) -> Setup {
        Setup::start_with_dns(crate::common::servfail_dns().await, conf).await
    }

    /// As [`Setup::start`], with names resolved by the test's own DNS server `dns`.
    pub(crate) async fn start_with_dns(dns: std::net::SocketAddr, conf: &Conf) -> Setup {
        let dir = tempfile::tempdir().expect("tempdir");
        let (ca_cert, _) = operator_ca(dir.path());
        let origin_ca = TestCa::new("robotsgate test origins CA");
        std::fs::write(dir.path().join("origin-ca.pem"), &origin_ca.cert_pem).expect("write");
        let proxy = launch(dir.path(), dns, conf);
        Setup {
            dir,
            operator_ca: ca_cert,
            origin_ca,
            proxy,
            dns,
        }
    }

    /// One more robotsgate with the same CAs and DNS server (a fleet's second member).
    pub(crate) fn another(&self, conf: &Conf) -> Proxy {
        launch(self.dir.path(), self.dns, conf)
    }

    /// An HTTPS-only origin serving `ROBOTS`, its certificate from the test CA.
    pub(crate) async fn origin(&self, robots: &str) -> TestOrigin {
        TestOrigin::start_tls(
            vec![("/robots.txt", Behaviour::ok(robots))],
            self.origin_ca.server_config(&["localhost", "127.0.0.1"]),
            "localhost",
        )
        .await
    }

    /// curl through the proxy, trusting the operator CA, in HTTP/1.1 inside the tunnel
    /// (h2 from crawlers is `h2_clients.rs`'s).
    pub(crate) fn curl(&self, url: &str) -> (u16, String, String) {
        curl(
            &self.proxy,
            url,
            &[
                "--cacert",
                path(&self.operator_ca),
                "--suppress-connect-headers",
                "--http1.1",
            ],
        )
    }

    pub(crate) fn metric(&self, name: &str) -> f64 {
        self.proxy.counter(name)
    }
}

/// A robotsgate intercepting with the operator CA in `dir`, trusting the origins' CA
/// there. Names resolve through a loopback DNS server only (`localhost` is answered by
/// the resolver itself), so no lookup leaves the machine.
fn launch(dir: &std::path::Path, dns: std::net::SocketAddr, conf: &Conf) -> Proxy {
    let file = |name: &str| dir.join(name).to_string_lossy().into_owned();
    let (ca_cert, ca_key, origin_ca) = (
        file("operator-ca.pem"),
        file("operator-ca.key"),
        file("origin-ca.pem"),
    );
    Proxy::start(
        &Conf::new()
            .set("dns.nameservers", [dns.to_string()])
            .with(conf),
        &[
            "--allow-destination",
            "127.0.0.0/8",
            "--allow-destination",
            "::1/128",
            "--ca-cert",
            &ca_cert,
            "--ca-key",
            &ca_key,
            "--upstream-ca",
            &origin_ca,
        ],
    )
}

pub(crate) fn path(p: &std::path::Path) -> &str {
    p.to_str().expect("utf-8 path")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_https_is_enforced_like_http() {
    let s = Setup::start(&Conf::new()).await;
    let origin = s.origin(ROBOTS).await;

    let (status, _, body) = s.curl(&origin.url("/allowed?q=1"));
    assert_eq!(status, 200, "{}", s.proxy.log());
    assert_eq!(body, "page /allowed?q=1\n");

    let (status, head, body) = s.curl(&origin.url("/disallowed/x"));
    assert_eq!(status, 403, "{head}");
    assert!(
        head.contains("X-Robots-Decision: disallowed")
            && head.contains(&format!(
                "robots=\"https://localhost:{}/robots.txt\"",
                origin.addr.port()
            )),
        "{head}"
    );
    assert!(body.contains("Disallow: /disallowed (line 2)"), "{body}");

    // The origin speaks only TLS: robots.txt was fetched over HTTPS, once, and the
    // disallowed page never arrived.
    let seen: Vec<String> = origin.seen().iter().map(|r| r.target.clone()).collect();
    assert_eq!(seen, ["/robots.txt", "/allowed?q=1"]);
    assert_eq!(
        origin.seen()[1].header("host"),
        Some(format!("localhost:{}", origin.addr.port()).as_str())
    );
    assert!(s.metric("robotsgate_tls_leaf_mints_total") >= 1.0);
    assert_eq!(
        s.proxy.counted(
            "robotsgate_requests_total{decision=\"allowed\",mode=\"tunnel\",protocol=\"http/1.1\",scheme=\"https\"}",
            1.0
        ).await,
        1.0
    );
    assert_eq!(
        s.proxy.counted(
            "robotsgate_requests_total{decision=\"disallowed\",mode=\"tunnel\",protocol=\"http/1.1\",scheme=\"https\"}",
            1.0
        ).await,
        1.0
    );
    assert_eq!(
        s.metric("robotsgate_connect_tunnels_total{mode=\"intercepted\",outcome=\"established\"}"),
        2.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ip_literal_without_sni_gets_an_ip_certificate() {
    let s = Setup::start(&Conf::new()).await;
    let origin = s.origin(ROBOTS).await;
    let url = format!("https://127.0.0.1:{}/page", origin.addr.port());
    // curl sends no SNI for an IP literal and checks the IP SAN.
    let (status, _, body) = s.curl(&url);
    assert_eq!(status, 200, "{}", s.proxy.log());
    assert_eq!(body, "page /page\n");
    let (status, _, _) = s.curl(&format!(
        "https://127.0.0.1:{}/disallowed",
        origin.addr.port()
    ));
    assert_eq!(status, 403);
    assert_eq!(origin.count("/disallowed"), 0);
}

/// Reads one HTTP/1.1 response with a Content-Length body: (status, decision header, body).
async fn read_response<R: tokio::io::AsyncBufRead + Unpin>(r: &mut R) -> (u16, String, String) {
    let mut status = 0;
    let mut length = 0;
    let mut decision = String::new();
    loop {
        let mut line = String::new();
        r.read_line(&mut line).await.expect("read head");
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some(rest) = line.strip_prefix("HTTP/1.1 ") {
            status = rest[..3].parse().expect("status");
        } else if let Some((name, value)) = line.split_once(':') {
            match name.to_ascii_lowercase().as_str() {
                "content-length" => length = value.trim().parse().expect("length"),
                "x-robots-decision" => decision = value.trim().to_string(),
                _ => {}
            }
        }
    }
    let mut body = vec![0; length];
    r.read_exact(&mut body).await.expect("read body");
    (
        status,
        decision,
        String::from_utf8_lossy(&body).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_requests_on_one_connect_tunnel() {
    let s = Setup::start(&Conf::new()).await;
    let origin = s.origin(ROBOTS).await;
    let port = origin.addr.port();

    let mut tcp = tokio::net::TcpStream::connect(s.proxy.addr)
        .await
        .expect("connect");
    tcp.write_all(
        format!("CONNECT localhost:{port} HTTP/1.1\r\nHost: localhost:{port}\r\nUser-Agent: TunnelBot/1.0\r\n\r\n")
            .as_bytes(),
    )
    .await
    .expect("write CONNECT");
    let mut reply = [0u8; 39];
    tcp.read_exact(&mut reply).await.expect("CONNECT reply");
    assert_eq!(
        String::from_utf8_lossy(&reply),
        "HTTP/1.1 200 Connection Established\r\n\r\n",
        "{}",
        s.proxy.log()
    );

    let pem = std::fs::read_to_string(&s.operator_ca).expect("ca");
    let connector = tokio_rustls::TlsConnector::from(client_config_trusting(&pem));
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
    let tls = connector
        .connect(name, tcp)
        .await
        .unwrap_or_else(|e| panic!("TLS with the operator CA: {e}\n{}", s.proxy.log()));
    let mut tls = BufReader::new(tls);

    let mut results = Vec::new();
    for path in ["/a", "/disallowed", "/b", "/c/../robots.txt"] {
        tls.get_mut()
            .write_all(
                format!("GET {path} HTTP/1.1\r\nHost: localhost:{port}\r\nUser-Agent: TunnelBot/1.0\r\n\r\n")
                    .as_bytes(),
            )
            .await
            .expect("write request");
        results.push(read_response(&mut tls).await);
    }
    let statuses: Vec<u16> = results.iter().map(|r| r.0).collect();
    assert_eq!(
        statuses,
        [200, 403, 200, 200],
        "{results:?}\n{}",
        s.proxy.log()
    );
    assert_eq!(results[0].2, "page /a\n");
    assert!(results[1].1.starts_with("disallowed;"), "{results:?}");
    // robots.txt is answered from the store, not fetched again.
    assert!(
        results[3].1.starts_with("robots-txt-from-cache"),
        "{results:?}"
    );
    assert_eq!(results[3].2, ROBOTS);

    // A request for another origin inside this tunnel is refused, not misjudged.
    tls.get_mut()
        .write_all(b"GET /a HTTP/1.1\r\nHost: other.example\r\n\r\n")
        .await
        .expect("write");
    let (status, decision, _) = read_response(&mut tls).await;
    assert_eq!(status, 421, "{decision}");
    // Nor can a tunnel be opened inside the tunnel.
    tls.get_mut()
        .write_all(
            format!("CONNECT localhost:{port} HTTP/1.1\r\nHost: localhost:{port}\r\n\r\n")
                .as_bytes(),
        )
        .await
        .expect("write");
    let (status, decision, _) = read_response(&mut tls).await;
    assert_eq!(status, 400, "{decision}");

    let seen: Vec<String> = origin.seen().iter().map(|r| r.target.clone()).collect();
    assert_eq!(seen, ["/robots.txt", "/a", "/b"]);
    assert_eq!(origin.seen()[1].header("user-agent"), Some("TunnelBot/1.0"));
    assert_eq!(
        s.metric("robotsgate_connect_tunnels_total{mode=\"intercepted\",outcome=\"established\"}"),
        1.0,
        "all requests went through one tunnel"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untrusted_origin_certificate_is_a_502_with_the_reason() {
    let s = Setup::start(&Conf::new()).await;
    let stranger = TestCa::new("a CA nobody configured");
    let origin = TestOrigin::start_tls(
        vec![("/robots.txt", Behaviour::status(404))],
        stranger.server_config(&["localhost"]),
        "localhost",
    )
    .await;
    // robots.txt cannot be fetched either (same untrusted certificate): unreachable, and
    // not transient, so 502 naming the cause (a crawler should not retry forever).
    let (status, head, body) = s.curl(&origin.url("/page"));
    assert_eq!(status, 502, "{head}{body}");
    assert!(
        head.contains("robots-unreachable;") && head.contains("reason=\"tls-handshake-failed: "),
        "{head}"
    );
    assert!(body.contains("tls-handshake-failed"), "{body}");
    assert!(origin.seen().is_empty(), "no request completed a handshake");

    // With robots.txt already held, the page's own connection fails verification: 502
    // naming the reason. (The origin's certificate is rotated to an untrusted one; the
    // first page closes its connection so the next one needs a new handshake.)
    let origin = s.origin(ROBOTS).await;
    origin.set(
        "/first",
        Behaviour::with_headers(200, &[("Connection", "close")], "first\n"),
    );
    assert_eq!(s.curl(&origin.url("/first")).0, 200, "{}", s.proxy.log());
    origin.set_tls(stranger.server_config(&["localhost"]));
    let (status, head, body) = s.curl(&origin.url("/second"));
    assert_eq!(status, 502, "{head}{body}");
    assert!(
        head.contains("X-Robots-Decision: upstream-error; reason=\"tls-handshake-failed"),
        "{head}"
    );
    assert!(body.contains("tls-handshake-failed"), "{body}");
    assert_eq!(origin.count("/second"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_requests_with_proxies_and_verify() {
    let s = Setup::start(&Conf::new()).await;
    let origin = s.origin(ROBOTS).await;
    let script = r#"
import sys, requests
proxy, ca, base = sys.argv[1], sys.argv[2], sys.argv[3]
for path in ("/allowed", "/disallowed/page"):
    # Per request: requests lets REQUESTS_CA_BUNDLE override a Session's `verify`.
    r = requests.get(base + path, proxies={"https": proxy}, verify=ca,
                     headers={"User-Agent": "PyBot/1.0"}, timeout=20)
    print(r.status_code, r.headers.get("X-Robots-Decision", "-").split(";")[0], r.text.strip())
"#;
    let mut command = Command::new("python3");
    command.args([
        "-c",
        script,
        &s.proxy.url(),
        path(&s.operator_ca),
        &origin.url(""),
    ]);
    let stdout = crate::common::run_ok(&mut command);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "200 - page /allowed");
    assert!(
        lines[1].starts_with("403 disallowed robotsgate: /disallowed/page is disallowed"),
        "{stdout}"
    );
    assert_eq!(origin.count("/disallowed/page"), 0);
    assert_eq!(origin.seen()[1].header("user-agent"), Some("PyBot/1.0"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_refusals() {
    let s = Setup::start(&Conf::new()).await;
    // A port outside tls.connect_ports.
    let reply = crate::common::raw_exchange(
        s.proxy.addr,
        b"CONNECT localhost:25 HTTP/1.1\r\nHost: localhost:25\r\n\r\n",
    )
    .await;
    assert!(reply.starts_with("HTTP/1.1 403"), "{reply}");
    assert!(
        reply.contains("CONNECT to port 25 is not allowed"),
        "{reply}"
    );
    // A destination the egress policy refuses (link-local / metadata).
    let reply = crate::common::raw_exchange(
        s.proxy.addr,
        b"CONNECT 169.254.169.254:443 HTTP/1.1\r\nHost: 169.254.169.254:443\r\n\r\n",
    )
    .await;
    assert!(
        reply.starts_with("HTTP/1.1 403") && reply.contains("egress-denied"),
        "{reply}"
    );
    // Garbage target.
    let reply = crate::common::raw_exchange(s.proxy.addr, b"CONNECT /nope HTTP/1.1\r\n\r\n").await;
    assert!(reply.starts_with("HTTP/1.1 400"), "{reply}");
    assert_eq!(
        s.metric("robotsgate_connect_tunnels_total{mode=\"intercepted\",outcome=\"refused\"}"),
        3.0
    );
    // Plain HTTP still works on the same listener.
    let reply = crate::common::raw_exchange(
        s.proxy.addr,
        b"GET http://127.0.0.1:1/ HTTP/1.1\r\nHost: 127.0.0.1:1\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(reply.starts_with("HTTP/1.1 403"), "{reply}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_ca_connect_is_refused() {
    let origin = TestOrigin::start(vec![]).await;
    let proxy = Proxy::start_for_loopback(&Conf::new());
    let authority = format!("127.0.0.1:{}", origin.addr.port());
    let reply = crate::common::raw_exchange(
        proxy.addr,
        format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n").as_bytes(),
    )
    .await;
    assert!(reply.starts_with("HTTP/1.1 403"), "{reply}");
    assert!(reply.contains("interception is not configured"), "{reply}");
    // Refused, not tunnelled blind: nothing ever connected to the origin.
    assert!(origin.accepted().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_needs_credentials_and_its_tunnel_carries_the_user() {
    let users_dir = tempfile::tempdir().expect("tempdir");
    let users = users_dir.path().join("users");
    std::fs::write(
        &users,
        crate::common::passwd_line("team", "team-secret", &["TeamBot"]) + "\n",
    )
    .expect("write users");
    let s = Setup::start(&Conf::new().set("access.credentials_file", users.display().to_string()))
        .await;
    let origin = s
        .origin(
            "User-agent: TeamBot\nDisallow: /team-only\n\nUser-agent: *\nDisallow: /disallowed\n",
        )
        .await;
    // Without credentials the CONNECT itself is answered 407: no tunnel, no origin contact.
    let out = Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_connect}",
            "--max-time",
            "20",
        ])
        .args(["-x", &s.proxy.url(), "--cacert", path(&s.operator_ca)])
        .arg(origin.url("/allowed"))
        .output()
        .expect("run curl");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "407");
    assert!(origin.accepted().is_empty());
    // With them, every request in the tunnel is judged as the user's tokens.
    let with = |page: &str| {
        curl(
            &s.proxy,
            &origin.url(page),
            &[
                "--cacert",
                path(&s.operator_ca),
                "--suppress-connect-headers",
                "--proxy-user",
                "team:team-secret",
                "-A",
                "Unrelated/1.0",
            ],
        )
    };
    assert_eq!(with("/team-only/x").0, 403);
    assert_eq!(with("/disallowed/x").0, 200, "the * group is not TeamBot's");
    let seen = origin.seen();
    assert!(seen
        .iter()
        .all(|r| r.header("proxy-authorization").is_none()));
    assert_eq!(
        s.metric("robotsgate_downstream_refusals_total{reason=\"auth_required\"}"),
        1.0
    );
}

/// cause), with no 200 and no leaf minted for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_to_an_unresolvable_name_fails_at_the_connect() {
    let s = Setup::start(&Conf::new()).await;
    let reply = crate::common::raw_exchange(
        s.proxy.addr,
        b"CONNECT nosuch.test:443 HTTP/1.1\r\nHost: nosuch.test:443\r\n\r\n",
    )
    .await;
    assert!(reply.starts_with("HTTP/1.1 502"), "{reply}");
    assert!(reply.contains("reason=\"dns-"), "{reply}");
    assert_eq!(s.metric("robotsgate_tls_leaf_mints_total"), 0.0);
}

/// The leaf is minted for the CONNECT host only: a ClientHello naming another host fails
/// the handshake (counted), and mints nothing — so SNIs cannot churn the leaf cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sni_for_another_host_fails_the_handshake() {
    let s = Setup::start(&Conf::new()).await;
    let origin = s.origin(ROBOTS).await;
    let ca_pem = std::fs::read_to_string(&s.operator_ca).expect("ca");
    for n in 0..20 {
        let mut tcp = tokio::net::TcpStream::connect(s.proxy.addr)
            .await
            .expect("connect");
        let connect = format!(
            "CONNECT localhost:{p} HTTP/1.1\r\nHost: localhost:{p}\r\n\r\n",
            p = origin.addr.port()
        );
        tcp.write_all(connect.as_bytes()).await.expect("write");
        let mut reader = tokio::io::BufReader::new(tcp);
        let mut line = String::new();
        reader.read_line(&mut line).await.expect("read");
        assert!(line.starts_with("HTTP/1.1 200"), "{line}");
        line.clear();
        reader.read_line(&mut line).await.expect("blank line");
        let connector =
            tokio_rustls::TlsConnector::from(crate::common::client_config_trusting(&ca_pem));
        let name = rustls::pki_types::ServerName::try_from(format!("other{n}.test")).expect("name");
        let handshake = connector.connect(name, reader.into_inner()).await;
        assert!(handshake.is_err(), "a leaf for other{n}.test was served");
    }
    assert!(origin.seen().is_empty(), "{:?}", origin.seen());
    assert_eq!(s.metric("robotsgate_tls_sni_mismatches_total"), 20.0);
    assert_eq!(s.metric("robotsgate_tls_leaf_mints_total"), 0.0);
    // The tunnel's own name still works, and the CA's expiry is exported.
    assert_eq!(s.curl(&origin.url("/ok")).0, 200);
    let expiry = s.metric("robotsgate_tls_ca_expiry_timestamp_seconds");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64();
    assert!(expiry > now, "{expiry} vs {now}");
}

/// A client that closes its sending side inside the tunnel (TLS close_notify) once its
/// request is out still gets the response.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_closed_tunnel_still_gets_its_response() {
    let s = Setup::start(&Conf::new()).await;
    let origin = s.origin(ROBOTS).await;
    let ca_pem = std::fs::read_to_string(&s.operator_ca).expect("ca");
    let mut tcp = tokio::net::TcpStream::connect(s.proxy.addr)
        .await
        .expect("connect");
    let port = origin.addr.port();
    tcp.write_all(
        format!("CONNECT localhost:{port} HTTP/1.1\r\nHost: localhost:{port}\r\n\r\n").as_bytes(),
    )
    .await
    .expect("write");
    let mut reader = BufReader::new(tcp);
    let mut line = String::new();
    reader.read_line(&mut line).await.expect("read");
    assert!(line.starts_with("HTTP/1.1 200"), "{line}");
    line.clear();
    reader.read_line(&mut line).await.expect("blank");
    let connector = tokio_rustls::TlsConnector::from(client_config_trusting(&ca_pem));
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
    let mut tls = connector
        .connect(name, reader.into_inner())
        .await
        .expect("handshake");
    tls.write_all(format!("GET /half HTTP/1.1\r\nHost: localhost:{port}\r\n\r\n").as_bytes())
        .await
        .expect("request");
    tls.shutdown().await.expect("close_notify and FIN");
    let mut reply = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), tls.read_to_end(&mut reply)).await;
    let reply = String::from_utf8_lossy(&reply);
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(reply.contains("page /half"), "{reply}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_preferences_are_enforced_inside_an_intercepted_tunnel() {
    let s = Setup::start(&Conf::new().set(
        "agent",
        json!({"default_tokens": ["OtherBot"], "default_purposes": ["train-ai"]}),
    ))
    .await;
    let origin = s
        .origin("User-Agent: *\nAllow: /\nDisallow: /never/\nContent-Usage: / train-ai=n\nContent-Usage: /ai-ok/ train-ai=y\n")
        .await;
    let (status, head, _) = s.curl(&origin.url("/test"));
    assert_eq!(status, 403, "{head}");
    assert!(
        head.contains("X-Robots-Decision: usage-refused; robots=\"https://localhost:")
            && head.contains("purpose=train-ai; line=4"),
        "{head}"
    );
    let (status, head, _) = s.curl(&origin.url("/ai-ok/test"));
    assert_eq!(status, 200, "{head}\n{}", s.proxy.log());
    assert!(
        head.contains("X-Robots-Usage: train-ai=y;line=5;source=content-usage"),
        "{head}"
    );
    // train-ai is a TDM purpose: TDMRep's file is read before the first page.
    let seen: Vec<String> = origin.seen().iter().map(|r| r.target.clone()).collect();
    assert_eq!(
        seen,
        ["/robots.txt", "/.well-known/tdmrep.json", "/ai-ok/test"]
    );
    assert_eq!(
        s.proxy.counted(
            "robotsgate_requests_total{decision=\"usage_refused\",mode=\"tunnel\",protocol=\"http/1.1\",scheme=\"https\"}",
            1.0
        ).await,
        1.0
    );
}

/// Web Bot Auth inside an intercepted tunnel: the request robotsgate forwards over TLS is
/// signed for the origin's authority, and its robots.txt fetch too, as the origin's
/// independent verifier checks (see `signing.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_in_an_intercepted_tunnel_are_signed() {
    use crate::signing::{one_key, VerifyingOrigin};
    let (keys, signed) = one_key("string");
    let s = Setup::start(&signed.conf).await;
    let (cert, private) = s.origin_ca.leaf_pem(&["localhost", "127.0.0.1"]);
    let (cert_file, key_file) = (keys.path().join("leaf.pem"), keys.path().join("leaf.key"));
    std::fs::write(&cert_file, cert).expect("write");
    std::fs::write(&key_file, private).expect("write");
    let origin = VerifyingOrigin::start_tls(keys.path(), &signed.listener, &cert_file, &key_file);

    let (status, _, body) = s.curl(&format!("https://localhost:{}/page", origin.port));
    assert_eq!(
        (status, body.as_str()),
        (200, "verified"),
        "{}",
        s.proxy.log()
    );
    origin.assert_verified(&["/robots.txt", "/page"]);
    assert_eq!(
        s.proxy.counted(
            "robotsgate_requests_total{decision=\"allowed\",mode=\"tunnel\",protocol=\"http/1.1\",scheme=\"https\"}",
            1.0
        ).await,
        1.0
    );
}
