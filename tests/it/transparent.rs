//! Transparent mode: crawlers with no proxy settings whose connections the kernel
//! redirects to robotsgate. Each test makes its own network namespace: loopback only,
//! its own /etc/hosts, origins on 127.0.0.2/.3/.9 ports 80 and 443, robotsgate inside
//! it, and iptables or nftables rules redirecting the crawler uid's (65534) ports 80 and
//! 443 to robotsgate's transparent listeners. Crawlers run as that uid: curl, Python
//! `requests` and `openssl s_client`, none of them told about a proxy.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::{
    decisions, eventually, free_port, free_ports, min_gap, operator_ca, pages, recorded_once,
    split_response, zone_dns, Behaviour, Conf, Netns, NsRedis, Proxy, TestCa, TestOrigin,
};

pub(crate) const ROBOTS: &str = "User-agent: *\nDisallow: /private\n";

/// A namespace with `site.test` (127.0.0.2) served on ports 80 and 443, `other.test`
/// (127.0.0.3) and `blocked.test` (127.0.0.9, outside the allowed destinations) on 80,
/// and robotsgate with both transparent listeners.
pub(crate) struct World {
    ns: Netns,
    pub(crate) proxy: Proxy,
    pub(crate) site: TestOrigin,
    pub(crate) site_tls: TestOrigin,
    other: TestOrigin,
    blocked: TestOrigin,
    http_port: u16,
    tls_port: u16,
    /// The operator CA certificate, readable by the crawler uid.
    ca: PathBuf,
    /// With [`World::in_fleet`]: the namespace's Redis and the fleet section.
    fleet: Option<(NsRedis, Conf)>,
    _dir: tempfile::TempDir,
}

/// How the crawler uid's connections are redirected.
#[derive(Clone, Copy)]
pub(crate) enum Rules {
    /// iptables `REDIRECT` in nat OUTPUT, matching the uid.
    Iptables,
    /// The same with nftables.
    Nftables,
    /// iptables and ip6tables `REDIRECT` to a dual-stack listener (`[::]`).
    DualStack,
    /// `TPROXY` (mangle PREROUTING), the crawler's packets marked in OUTPUT and routed
    /// back in through loopback, as a gateway receives them (robotsgate in `tproxy` mode).
    Tproxy,
}

impl Rules {
    /// Installs these rules in `ns`: the crawler uid's connections to ports 80 and 443
    /// go to robotsgate's listeners on `http_port` and `tls_port`.
    fn install(self, ns: &Netns, http_port: u16, tls_port: u16) {
        match self {
            Rules::Iptables => ns.sh(&format!(
                "iptables -t nat -A OUTPUT -p tcp -m owner --uid-owner 65534 --dport 80 -j REDIRECT --to-ports {http_port}
                 iptables -t nat -A OUTPUT -p tcp -m owner --uid-owner 65534 --dport 443 -j REDIRECT --to-ports {tls_port}"
            )),
            Rules::Nftables => ns.sh(&format!(
                "nft add table ip robotsgate
                 nft add chain ip robotsgate out '{{ type nat hook output priority -100; }}'
                 nft add rule ip robotsgate out meta skuid 65534 tcp dport 80 redirect to :{http_port}
                 nft add rule ip robotsgate out meta skuid 65534 tcp dport 443 redirect to :{tls_port}"
            )),
            Rules::DualStack => ns.sh(&format!(
                "iptables -t nat -A OUTPUT -p tcp -m owner --uid-owner 65534 --dport 80 -j REDIRECT --to-ports {http_port}
                 ip6tables -t nat -A OUTPUT -p tcp -m owner --uid-owner 65534 --dport 80 -j REDIRECT --to-ports {http_port}"
            )),
            Rules::Tproxy => ns.sh(&format!(
                "iptables -t mangle -A OUTPUT -p tcp -m owner --uid-owner 65534 -m multiport --dports 80,443 -j MARK --set-mark 1
                 iptables -t mangle -A PREROUTING -p tcp --dport 80 -m mark --mark 1 -j TPROXY --on-port {http_port} --on-ip 127.0.0.1 --tproxy-mark 1
                 iptables -t mangle -A PREROUTING -p tcp --dport 443 -m mark --mark 1 -j TPROXY --on-port {tls_port} --on-ip 127.0.0.1 --tproxy-mark 1
                 ip rule add fwmark 1 lookup 100
                 ip route add local 0.0.0.0/0 dev lo table 100"
            )),
        }
    }
}

impl World {
    pub(crate) async fn new(robots: &str, rules: Rules, conf: &Conf) -> World {
        World::build(robots, rules, conf, false).await
    }

    /// The same world, its robotsgate a fleet member over a Redis inside the namespace
    /// (the fleet section kept for other members).
    async fn in_fleet(robots: &str) -> World {
        World::build(robots, Rules::Iptables, &Conf::new(), true).await
    }

    async fn build(robots: &str, rules: Rules, conf: &Conf, fleet: bool) -> World {
        let listen_ip = match rules {
            Rules::DualStack => "[::]",
            _ => "127.0.0.1",
        };
        let names = [
            ("site.test", "127.0.0.2"),
            ("other.test", "127.0.0.3"),
            ("blocked.test", "127.0.0.9"),
        ];
        // Crawlers read the namespace's /etc/hosts; robotsgate asks its DNS server.
        let ns = Netns::new(&names);
        zone_dns(ns.udp("127.0.0.1:53"), &names);
        let fleet = fleet.then(|| {
            let port = free_port();
            let section = crate::fleet_fixture::certs()
                .conf()
                .set("fleet.redis", format!("redis://127.0.0.1:{port}"));
            (NsRedis::start(&ns, port), section)
        });
        let mut conf = Conf::new()
            .set("dns.nameservers", ["127.0.0.1:53"])
            .with(conf);
        if let Some((_, section)) = &fleet {
            conf = conf.with(section);
        }
        let dir = tempfile::tempdir().expect("tempdir");
        readable_by_all(dir.path());
        let (ca, ca_key) = operator_ca(dir.path());
        readable_by_all(&ca);
        let origin_ca = TestCa::new("origin CA");
        let origin_ca_file = dir.path().join("origin-ca.pem");
        std::fs::write(&origin_ca_file, &origin_ca.cert_pem).expect("origin CA file");
        let routes = || vec![("/robots.txt", Behaviour::ok(robots))];
        let site = TestOrigin::start_on(ns.listener("127.0.0.2:80"), routes()).await;
        let site_tls = TestOrigin::start_tls_on(
            ns.listener("127.0.0.2:443"),
            routes(),
            origin_ca.server_config(&["site.test", "127.0.0.2"]),
            "site.test",
        )
        .await;
        let other = TestOrigin::start_on(ns.listener("127.0.0.3:80"), routes()).await;
        let blocked = TestOrigin::start_on(ns.listener("127.0.0.9:80"), routes()).await;
        let [http_port, tls_port] = free_ports();
        let proxy = Proxy::start_in(
            &ns,
            &conf,
            &[
                "--allow-destination",
                "127.0.0.2/31",
                "--allow-destination",
                "::1/128",
                "--transparent-http",
                &format!("{listen_ip}:{http_port}"),
                "--transparent-tls",
                &format!("{listen_ip}:{tls_port}"),
                "--ca-cert",
                &ca.to_string_lossy(),
                "--ca-key",
                &ca_key.to_string_lossy(),
                "--upstream-ca",
                &origin_ca_file.to_string_lossy(),
            ],
        );
        rules.install(&ns, http_port, tls_port);
        World {
            ns,
            proxy,
            site,
            site_tls,
            other,
            blocked,
            http_port,
            tls_port,
            ca,
            fleet,
            _dir: dir,
        }
    }

    /// curl as the crawler uid, with no proxy option or variable: (status, head, body);
    /// status 0 when no HTTP answer came.
    /// Debian's python3 running `tests/helpers/crawler/{name}` as the crawler uid (a copy
    /// it can read, in this world's directory). Only scripts under that folder: their
    /// imports are what `scripts/deps.sh` installs for Debian's interpreter.
    fn crawler_script(&self, name: &str) -> std::process::Command {
        let source = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/helpers/crawler")
            .join(name);
        let copy = self._dir.path().join(name);
        std::fs::copy(&source, &copy).expect("copy the crawler's script");
        readable_by_all(&copy);
        let mut command = self.ns.crawler("/usr/bin/python3");
        command.arg(copy);
        command
    }

    pub(crate) fn crawl(&self, url: &str, extra: &[&str]) -> (u16, String, String) {
        let mut curl = self.ns.crawler("curl");
        for var in [
            "http_proxy",
            "https_proxy",
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "ALL_PROXY",
        ] {
            curl.env_remove(var);
        }
        let ca = self.ca.to_string_lossy().into_owned();
        let out = curl
            .args(["-s", "--max-time", "20", "-D", "-", "--cacert", &ca])
            .args(extra)
            .arg(url)
            .output()
            .expect("run curl");
        split_response(&String::from_utf8_lossy(&out.stdout))
    }

    fn metric(&self, name: &str) -> f64 {
        self.proxy.counter(name)
    }
}

/// The crawler uid cannot read root's temporary directories.
fn readable_by_all(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let mode = if path.is_dir() { 0o755 } else { 0o644 };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

pub(crate) fn decision(head: &str) -> String {
    head.lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .starts_with("x-robots-decision:")
                .then(|| l.to_string())
        })
        .unwrap_or_default()
}

/// Plain HTTP and TLS redirected by the kernel are judged as proxied requests are, and
/// each is recorded in the evidence as it arrived, naming the file and rule that decided
/// (`evidence.rs` for the other paths).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirected_http_and_https_are_judged_like_proxied_ones() {
    let evidence = tempfile::tempdir().expect("tempdir");
    let kept = Conf::new().set("evidence.dir", evidence.path().display().to_string());
    let w = World::new(ROBOTS, Rules::Iptables, &kept).await;
    for (scheme, origin) in [("http", &w.site), ("https", &w.site_tls)] {
        let (status, head, body) = w.crawl(&format!("{scheme}://site.test/public"), &[]);
        assert_eq!(status, 200, "{scheme}: {head}\n{}", w.proxy.log());
        assert_eq!(body, "page /public\n");
        let (status, head, _) = w.crawl(&format!("{scheme}://site.test/private/x"), &[]);
        assert_eq!(status, 403, "{scheme}: {head}");
        assert!(decision(&head).contains("disallowed"), "{head}");
        assert_eq!(
            origin.count("/private/x"),
            0,
            "{scheme}: never at the origin"
        );
        let seen = pages(origin, "/public");
        assert_eq!(seen.len(), 1, "{scheme}");
        assert_eq!(seen[0].header("host"), Some("site.test"));
        assert!(
            seen[0]
                .header("via")
                .is_some_and(|v| v.contains("robotsgate-")),
            "{:?}",
            seen[0].headers
        );
        // robots.txt was fetched once per origin, by robotsgate, not by the crawler.
        assert_eq!(origin.count("/robots.txt"), 1, "{scheme}");
    }

    let requests = |decision: &str, mode: &str, protocol: &str, scheme: &str| {
        format!(
            "robotsgate_requests_total{{decision=\"{decision}\",mode=\"{mode}\",protocol=\"{protocol}\",scheme=\"{scheme}\"}}"
        )
    };
    // Each once; curl offers h2 inside TLS, and gets it.
    for (decision, mode, protocol, scheme) in [
        ("allowed", "transparent", "http/1.1", "http"),
        ("disallowed", "transparent", "http/1.1", "http"),
        ("allowed", "transparent_tls", "h2", "https"),
        ("disallowed", "transparent_tls", "h2", "https"),
    ] {
        let name = requests(decision, mode, protocol, scheme);
        assert_eq!(w.proxy.counted(&name, 1.0).await, 1.0, "{name}");
    }
    assert_eq!(
        w.metric(
            "robotsgate_transparent_connections_total{listener=\"tls\",outcome=\"intercepted\"}"
        ),
        2.0
    );
    // The access log names the mode.
    w.proxy.log_with(|l| l.contains("transparent_tls")).await;
    // The evidence: one decision each, as it arrived, the disallowed ones naming line 2.
    let tls = ("transparent_tls", "https://site.test");
    for ((arrived, at), (path, line)) in [("transparent", "http://site.test"), tls]
        .into_iter()
        .flat_map(|a| [(a, ("/public", None)), (a, ("/private/x", Some(2)))])
    {
        let record = recorded_once(evidence.path(), &format!("{at}{path}")).await;
        assert_eq!(record["arrived"], arrived, "{record}");
        assert_eq!(record["rule"]["line"].as_u64(), line, "{record}");
        assert!(record["policy"]["sha256"].is_string(), "{record}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tproxy_mode_takes_the_destination_from_the_socket() {
    let w = World::new(
        ROBOTS,
        Rules::Tproxy,
        &Conf::new().set("transparent.mode", "tproxy"),
    )
    .await;
    // The listeners turn transparent just after they are bound.
    let proxy = &w.proxy;
    let both_set = || proxy.log().matches("IP_TRANSPARENT set").count() == 2;
    assert!(
        eventually(Duration::from_secs(10), both_set).await,
        "{}",
        proxy.log()
    );
    for scheme in ["http", "https"] {
        let (status, head, body) = w.crawl(&format!("{scheme}://site.test/public"), &[]);
        assert_eq!(status, 200, "{head}\n{}", w.proxy.log());
        assert_eq!(body, "page /public\n");
        let (status, head, _) = w.crawl(&format!("{scheme}://site.test/private/t"), &[]);
        assert_eq!(status, 403, "{head}");
    }
    assert_eq!(w.site.count("/public"), 1);
    assert_eq!(w.site_tls.count("/public"), 1);
    assert_eq!(
        w.site.count("/private/t") + w.site_tls.count("/private/t"),
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dual_stack_listener_serves_redirected_ipv4_and_ipv6() {
    let w = World::new(ROBOTS, Rules::DualStack, &Conf::new()).await;
    let v6 = TestOrigin::start_on(
        w.ns.listener("[::1]:80"),
        vec![("/robots.txt", Behaviour::ok(ROBOTS))],
    )
    .await;
    for (url, origin) in [("http://site.test", &w.site), ("http://[::1]", &v6)] {
        let (status, head, body) = w.crawl(&format!("{url}/public"), &[]);
        assert_eq!(status, 200, "{url}: {head}\n{}", w.proxy.log());
        assert_eq!(body, "page /public\n");
        let (status, head, _) = w.crawl(&format!("{url}/private/6"), &[]);
        assert_eq!(status, 403, "{url}: {head}");
        assert_eq!(origin.count("/public"), 1, "{url}");
        assert_eq!(origin.count("/private/6"), 0, "{url}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blind_tunnel_origins_are_relayed_with_their_own_certificate() {
    let evidence = tempfile::tempdir().expect("tempdir");
    let conf = Conf::new()
        .set("tls.blind_tunnel", ["site.test"])
        .set("evidence.dir", evidence.path().display().to_string());
    let w = World::new(ROBOTS, Rules::Iptables, &conf).await;
    let origin_ca = w._dir.path().join("origin-ca.pem");
    readable_by_all(&origin_ca);
    // The origin's own certificate, not a minted leaf: only its CA verifies it.
    let origin_ca = origin_ca.to_string_lossy().into_owned();
    let (status, head, body) = w.crawl("https://site.test/public", &["--cacert", &origin_ca]);
    assert_eq!(status, 200, "{head}\n{}", w.proxy.log());
    assert_eq!(body, "page /public\n");
    let (status, _, _) = w.crawl("https://site.test/public", &[]);
    assert_eq!(
        status, 0,
        "the operator CA does not vouch for a relayed origin"
    );
    assert_eq!(
        w.metric("robotsgate_transparent_connections_total{listener=\"tls\",outcome=\"blind\"}"),
        2.0
    );
    assert_eq!(
        w.metric(
            "robotsgate_connect_tunnels_total{mode=\"transparent_blind\",outcome=\"established\"}"
        ),
        2.0
    );
    // Blind: robotsgate never saw the path; only robots.txt's verdict on `/` was judged.
    // The relayed request reached the origin; the refused handshake sent nothing.
    assert_eq!(w.site_tls.count("/robots.txt"), 1);
    assert_eq!(w.site_tls.count("/public"), 1);
    // Each connection start recorded, at host level (its origin's `/`).
    let tunnels: Vec<_> = decisions(evidence.path())
        .into_iter()
        .filter(|r| r["arrived"] == "transparent_blind")
        .collect();
    assert_eq!(tunnels.len(), 2, "{tunnels:#?}");
    assert!(
        tunnels.iter().all(|t| t["url"] == "https://site.test/"),
        "{tunnels:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_requests_over_https_keeps_the_crawl_delay() {
    let robots = "User-agent: *\nDisallow: /private\nCrawl-delay: 0.5\n";
    let w = World::new(robots, Rules::Nftables, &Conf::new()).await;
    let mut urls: Vec<String> = (0..4)
        .map(|i| format!("https://site.test/page/{i}"))
        .collect();
    urls.push("https://site.test/private/z".into());
    let out = w
        .crawler_script("crawl_requests.py")
        .arg(&w.ca)
        .args(&urls)
        .output()
        .expect("python");
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{printed}{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        w.proxy.log()
    );
    let statuses: Vec<&str> = printed.lines().map(|l| &l[..3]).collect();
    assert_eq!(statuses, ["200", "200", "200", "200", "403"], "{printed}");
    let seen = pages(&w.site_tls, "/page/");
    assert_eq!(seen.len(), 4);
    let gap = min_gap(&seen);
    assert!(
        gap >= Duration::from_millis(500),
        "gap {gap:?} below the Crawl-delay"
    );
    assert_eq!(w.site_tls.count("/private/z"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirected_h2_is_served_stream_by_stream() {
    let robots = "User-agent: *\nDisallow: /private\nCrawl-delay: 0.3\n";
    let w = World::new(robots, Rules::Iptables, &Conf::new()).await;
    // curl offers h2 and gets it.
    let (status, head, _) = w.crawl("https://site.test/page/curl", &["--http2"]);
    assert_eq!(status, 200, "{head}\n{}", w.proxy.log());
    assert!(head.starts_with("HTTP/2 200"), "{head}");
    // A client offering h2 alone, its streams on one connection: each judged and paced.
    let out = w
        .crawler_script("h2_client.py")
        .args(["get", "/page/1", "/private/z", "/page/2", "/page/3"])
        .args(["--target", "site.test:443", "--cafile"])
        .arg(&w.ca)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        w.proxy.log()
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("report");
    assert_eq!(report["alpn"], "h2");
    let statuses: Vec<u64> = crate::h2_clients::statuses(&report)
        .iter()
        .map(|(_, s)| *s)
        .collect();
    assert_eq!(statuses, [200, 403, 200, 200], "{report}");
    let seen = pages(&w.site_tls, "/page/");
    assert_eq!(seen.len(), 4);
    let gap = min_gap(&seen);
    assert!(gap >= Duration::from_millis(300), "gap {gap:?}");
    assert_eq!(w.site_tls.count("/private/z"), 0);
    assert_eq!(
        w.proxy.counted(
            "robotsgate_requests_total{decision=\"allowed\",mode=\"transparent_tls\",protocol=\"h2\",scheme=\"https\"}",
            4.0
        ).await,
        4.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_connections_get_their_documented_answers() {
    let w = World::new(ROBOTS, Rules::Iptables, &Conf::new()).await;

    // No SNI (an IP literal): a leaf for the address, the origin named by it.
    let (status, head, _) = w.crawl("https://127.0.0.2/public", &[]);
    assert_eq!(status, 200, "{head}\n{}", w.proxy.log());

    // A client offering only protocols robotsgate does not speak: the handshake fails
    // with no_application_protocol, counted.
    let out =
        w.ns.crawler("openssl")
            .args([
                "s_client",
                "-connect",
                "127.0.0.2:443",
                "-servername",
                "site.test",
                "-alpn",
                "spdy/3.1",
            ])
            .stdin(std::process::Stdio::null())
            .output()
            .expect("openssl");
    let said =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("no application protocol"), "{said}");
    assert_eq!(
        w.metric(
            "robotsgate_transparent_connections_total{listener=\"tls\",outcome=\"alpn_refused\"}"
        ),
        1.0
    );

    // Plain HTTP to port 443: not a ClientHello, closed unanswered and counted.
    let (status, _, _) = w.crawl("http://site.test:443/public", &[]);
    assert_eq!(status, 0);
    assert_eq!(
        w.metric("robotsgate_transparent_connections_total{listener=\"tls\",outcome=\"not_tls\"}"),
        1.0
    );

    // A request inside TLS for another origin than the SNI named: 421.
    let (status, head, _) = w.crawl("https://site.test/public", &["-H", "Host: other.test"]);
    assert_eq!(status, 421, "{head}");

    // A Host whose name does not resolve to where the connection was going: 409.
    let (status, head, _) = w.crawl(
        "http://site.test/public",
        &["--resolve", "site.test:80:127.0.0.3"],
    );
    assert_eq!(status, 409, "{head}");
    assert!(decision(&head).contains("host-mismatch"), "{head}");
    assert!(w.other.seen().is_empty() && w.other.accepted().is_empty());

    // A destination outside the allowed ranges: refused, no connection to it at all.
    let (status, head, _) = w.crawl("http://blocked.test/public", &[]);
    assert_eq!(status, 403, "{head}");
    assert!(decision(&head).contains("egress-denied"), "{head}");
    assert!(w.blocked.accepted().is_empty(), "no upstream connection");

    // Dialling a transparent listener directly: its original destination is itself.
    let (status, head, _) = w.crawl(&format!("http://127.0.0.1:{}/x", w.http_port), &[]);
    assert_eq!(status, 508, "{head}");
    assert!(decision(&head).contains("loop"), "{head}");
    let (status, _, _) = w.crawl(&format!("https://127.0.0.1:{}/x", w.tls_port), &[]);
    assert_eq!(status, 0, "closed without a handshake");
    for listener in ["http", "tls"] {
        assert_eq!(
            w.metric(&format!(
                "robotsgate_transparent_connections_total{{listener=\"{listener}\",outcome=\"loop\"}}"
            )),
            1.0,
            "{listener}"
        );
    }
    // Nothing of this reached site.test but the one page asked for by address.
    assert_eq!(pages(&w.site_tls, "/public").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upstream_mark_exempts_robotsgate_from_a_rule_matching_everyone() {
    // A gateway-style rule: every uid's port 80, robotsgate's included, except marked
    // sockets.
    let rule = |ns: &Netns, port: u16| {
        ns.sh(&format!(
            "iptables -t nat -A OUTPUT -p tcp --dport 80 -m mark ! --mark 42 -j REDIRECT --to-ports {port}"
        ))
    };
    let marked = World::new(
        ROBOTS,
        Rules::Iptables,
        &Conf::new().set("transparent.upstream_mark", 42),
    )
    .await;
    rule(&marked.ns, marked.http_port);
    let root_curl = |w: &World, url: &str| {
        let out =
            w.ns.command("curl")
                .args(["-s", "--max-time", "20", "-D", "-", url])
                .output()
                .expect("curl");
        split_response(&String::from_utf8_lossy(&out.stdout))
    };
    let (status, head, _) = root_curl(&marked, "http://site.test/public");
    assert_eq!(status, 200, "{head}\n{}", marked.proxy.log());
    assert_eq!(marked.site.count("/public"), 1);

    // Unmarked, robotsgate's own connections come back to it: refused as a loop (the
    // robots.txt fetch first, so the page's answer is robots-unreachable), never
    // forwarded around again.
    let unmarked = World::new(ROBOTS, Rules::Iptables, &Conf::new()).await;
    rule(&unmarked.ns, unmarked.http_port);
    let (status, head, _) = root_curl(&unmarked, "http://site.test/public");
    assert!(matches!(status, 503 | 508), "{head}");
    assert!(
        unmarked.metric("robotsgate_downstream_refusals_total{reason=\"loop\"}") >= 1.0,
        "{}",
        unmarked.proxy.log()
    );
    assert!(
        unmarked.site.seen().is_empty(),
        "nothing reached the origin"
    );
}

/// The documented rules (docs/transparent.md) parse (nft -c checks without applying).
#[test]
fn documented_nftables_rules_are_valid() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/transparent.md"))
            .expect("docs/transparent.md");
    let start = readme
        .find("```nft\n")
        .expect("an nft block in docs/transparent.md")
        + "```nft\n".len();
    let block = &readme[start..start + readme[start..].find("```").expect("block end")];
    let ns = Netns::new(&[]);
    let file = tempfile::NamedTempFile::new().expect("file");
    std::fs::write(file.path(), block).expect("write rules");
    let (ok, said) =
        crate::common::run_output(ns.command("nft").args(["-c", "-f"]).arg(file.path()));
    assert!(ok, "{block}\n{said}");
}

/// `Via` is for loop detection on transparent listeners; an explicit proxy alone sends
/// none (nginx origins stop compressing for requests with one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_transparent_listeners_requests_carry_no_via() {
    let origin = TestOrigin::start(vec![]).await;
    let proxy = Proxy::start_for_loopback(&Conf::new());
    assert_eq!(crate::common::curl(&proxy, &origin.url("/x"), &[]).0, 200);
    let seen = origin.seen();
    assert_eq!(seen.len(), 2, "robots.txt and the page");
    assert!(seen.iter().all(|s| s.header("via").is_none()), "{seen:?}");
}

/// Transparent mode in a fleet: a redirected connection that arrives at a member which
/// does not own its origin is handed over with its original destination (plain HTTP),
/// and with its tunnel's origin too (intercepted TLS); the owner connects to that
/// destination, and a disallowed page is refused the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirected_request_is_handed_to_its_origins_owner() {
    let w = World::in_fleet(ROBOTS).await;
    let (_, section) = w.fleet.as_ref().expect("a fleet");
    let file = |name: &str| w._dir.path().join(name).to_string_lossy().into_owned();
    let (ca, ca_key, origin_ca) = (
        file("operator-ca.pem"),
        file("operator-ca.key"),
        file("origin-ca.pem"),
    );
    let owner = Proxy::start_in(
        &w.ns,
        &Conf::new()
            .set("dns.nameservers", ["127.0.0.1:53"])
            .with(section),
        &[
            "--allow-destination",
            "127.0.0.2/31",
            "--ca-cert",
            &ca,
            "--ca-key",
            &ca_key,
            "--upstream-ca",
            &origin_ca,
        ],
    );
    crate::fleet_fixture::members_up(&[&w.proxy, &owner]).await;
    // The owner meets both origins first, through its proxy listener.
    for url in ["http://site.test/first", "https://site.test/first"] {
        let mut curl = w.ns.command("curl");
        curl.args([
            "--cacert",
            &ca,
            "-x",
            &format!("http://{}", owner.addr),
            url,
        ]);
        assert_eq!(crate::common::status_of(&mut curl), 200, "{url}");
    }
    for (scheme, origin) in [("http", &w.site), ("https", &w.site_tls)] {
        let (status, head, body) = w.crawl(&format!("{scheme}://site.test/handed"), &[]);
        assert_eq!(status, 200, "{scheme}: {head}\n{}", w.proxy.log());
        assert_eq!(body, "page /handed\n");
        assert_eq!(origin.count("/handed"), 1, "{scheme}");
        let (status, head, _) = w.crawl(&format!("{scheme}://site.test/private/x"), &[]);
        assert_eq!(status, 403, "{scheme}: {head}");
        assert_eq!(origin.count("/private/x"), 0, "{scheme}");
    }
    assert_eq!(
        crate::fleet_fixture::handed_over(&w.proxy),
        4.0,
        "the redirecting member handed every request to the owner"
    );
}
