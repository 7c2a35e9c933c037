//! The operator's Prometheus side, against Debian's real `prometheus` and `promtool`
//! (scripts/deps.sh unpacks them into target/test-tools/ when they are not on PATH):
//! the alert rules pass `promtool check rules` and their unit tests, and a Prometheus
//! on loopback scraping two robotsgates under a short load evaluates every dashboard
//! panel query and every alert expression through its HTTP API.
//!
//! Instance A is an explicit proxy: a paced origin (its Crawl-delay above the ceiling,
//! more requests than its queue holds), a disallowed path, a slow origin held by its
//! in-flight limit, an origin answering 503, and a malformed request. Instance B runs in
//! fleet mode (a real `redis-server`), intercepts TLS with a CA that expires in 20 days,
//! and has a transparent listener. Panels that need what neither load provokes are in
//! [`NOT_UNDER_LOAD`], with the reason.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::common::{
    admin, assert_gaps_at_least, concurrent, curl, eventually, free_port, pages, raw_exchange,
    run_output, Behaviour, Conf, Proxy, TestOrigin, JITTER,
};
use crate::redis_servers::Redis;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Panels whose queries are checked for validity only: what they show does not happen
/// under the test's load (each is exercised by the test named).
const NOT_UNDER_LOAD: &[(&str, &str)] = &[(
    "Process starts (reloads included)",
    "needs a restart or reload (tests/it/reload.rs; the alert's promtool test)",
)];

/// `prometheus` or `promtool`: on PATH (Debian's package installed), else as
/// scripts/deps.sh unpacked it.
fn tool(name: &str) -> PathBuf {
    if let Some(found) = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    }) {
        return found;
    }
    let unpacked = Path::new(ROOT)
        .join("target/test-tools/prometheus/usr/bin")
        .join(name);
    assert!(
        unpacked.is_file(),
        "{name} not found on PATH nor at {}: run scripts/deps.sh",
        unpacked.display()
    );
    unpacked
}

#[test]
fn alert_rules_pass_promtool_and_their_unit_tests() {
    let rules = format!("{ROOT}/conf/prometheus-alerts.yaml");
    let (ok, text) = run_output(Command::new(tool("promtool")).args(["check", "rules", &rules]));
    assert!(ok && text.contains("SUCCESS"), "{text}");
    let (ok, text) = run_output(Command::new(tool("promtool")).args([
        "test",
        "rules",
        &format!("{ROOT}/tests/prometheus/alerts_test.yaml"),
    ]));
    assert!(ok && text.contains("SUCCESS"), "{text}");
    // Every alert of the file has a unit test.
    let tests = std::fs::read_to_string(format!("{ROOT}/tests/prometheus/alerts_test.yaml"))
        .expect("tests");
    for alert in alert_rules() {
        assert!(
            tests.contains(&format!("alertname: {}", alert.0)),
            "no unit test for {}",
            alert.0
        );
    }
}

/// The alert rules: (name, expression).
fn alert_rules() -> Vec<(String, String)> {
    let text =
        std::fs::read_to_string(format!("{ROOT}/conf/prometheus-alerts.yaml")).expect("rules");
    let doc: serde_yaml::Value = serde_yaml::from_str(&text).expect("rules parse");
    let mut rules = Vec::new();
    for group in doc["groups"].as_sequence().expect("groups") {
        for rule in group["rules"].as_sequence().expect("rules") {
            let name = rule["alert"].as_str().expect("alert").to_string();
            let expr = rule["expr"].as_str().expect("expr").to_string();
            rules.push((name, expr));
        }
    }
    rules
}

/// The dashboard's panels: (title, queries), `$instance` matching every instance and
/// `$__rate_interval` a window of several scrapes.
fn panels() -> Vec<(String, Vec<String>)> {
    let text =
        std::fs::read_to_string(format!("{ROOT}/conf/grafana-dashboard.json")).expect("dashboard");
    let doc: Value = serde_json::from_str(&text).expect("dashboard parses");
    doc["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .filter(|p| p["type"] != "row")
        .map(|p| {
            let title = p["title"].as_str().expect("title").to_string();
            let queries = p["targets"]
                .as_array()
                .expect("targets")
                .iter()
                .map(|t| {
                    t["expr"]
                        .as_str()
                        .expect("expr")
                        .replace("$instance", ".*")
                        .replace("$__rate_interval", "1m")
                })
                .collect();
            (title, queries)
        })
        .collect()
}

/// A Prometheus on loopback, ended (by PID) when dropped.
struct Prometheus {
    _child: crate::common::Running,
    port: u16,
    dir: tempfile::TempDir,
}

impl Prometheus {
    fn start(targets: &[std::net::SocketAddr]) -> Prometheus {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("prometheus.yml");
        let targets: Vec<String> = targets.iter().map(|t| format!("\"{t}\"")).collect();
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files: [\"{ROOT}/conf/prometheus-alerts.yaml\"]\nscrape_configs:\n  - job_name: robotsgate\n    static_configs:\n      - targets: [{}]\n",
                targets.join(", ")
            ),
        )
        .expect("config");
        // A port picked free may be taken before Prometheus binds it: picked again then.
        let (child, port) = crate::common::start_listening("prometheus", free_port, |port| {
            let log = std::fs::File::create(dir.path().join("prometheus.log")).expect("log");
            Command::new(tool("prometheus"))
                .arg(format!("--config.file={}", config.display()))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    dir.path().join("data").display()
                ))
                .arg(format!("--web.listen-address=127.0.0.1:{port}"))
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("start prometheus")
        });
        let prometheus = Prometheus {
            _child: crate::common::Running(child),
            port,
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while prometheus.get("/-/ready").0 != 200 {
            assert!(
                Instant::now() < deadline,
                "prometheus not ready: {}",
                prometheus.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        prometheus
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// GET `path` (query string included): (status, body).
    fn get(&self, path: &str) -> (u16, String) {
        let out = Command::new("curl")
            .args(["-s", "--max-time", "10", "-w", "\n%{http_code}"])
            .arg(format!("http://127.0.0.1:{}{path}", self.port))
            .output()
            .expect("curl");
        crate::common::status_and_body(&out.stdout)
    }

    /// An instant query at `at` (seconds since the epoch): the API's answer.
    fn query(&self, expr: &str, at: f64) -> Value {
        let query: String = form_urlencoded::Serializer::new(String::new())
            .append_pair("query", expr)
            .append_pair("time", &format!("{at:.3}"))
            .finish();
        let (_, body) = self.get(&format!("/api/v1/query?{query}"));
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"))
    }
}

/// The values of a query's answer (NaN included).
fn values(answer: &Value) -> Vec<f64> {
    answer["data"]["result"]
        .as_array()
        .map(|series| {
            series
                .iter()
                .filter_map(|s| s["value"][1].as_str()?.parse::<f64>().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Does a query's answer hold a series with a number (not NaN)? For an alert
/// expression: is it true?
fn has_data(answer: &Value) -> bool {
    values(answer).into_iter().any(f64::is_finite)
}

/// Does a panel's query show something happened: a number other than zero (every
/// counter exists at zero from the start, so a zero series shows nothing)?
fn shows_events(answer: &Value) -> bool {
    values(answer)
        .into_iter()
        .any(|v| v.is_finite() && v != 0.0)
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_and_alerts_evaluate_in_a_real_prometheus() {
    // ---- Instance A: an explicit proxy under a short crawl ----
    let paced = TestOrigin::robots("User-agent: *\nDisallow: /private\nCrawl-delay: 0.3\n").await;
    let slow = TestOrigin::start(vec![("/slow", Behaviour::delayed(300, "slow\n"))]).await;
    let failing = TestOrigin::start(vec![("/fail", Behaviour::status(503))]).await;
    let a = Proxy::start_for_loopback(&Conf::new().set(
        "pacing",
        json!({"ceiling_seconds": 0.2, "max_in_flight": 2, "max_queue": 4}),
    ));

    // ---- Instance B: fleet mode, TLS interception, a transparent listener ----
    let redis = Redis::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let (b, ca_cert, transparent) = instance_b(&redis, dir.path());

    let prometheus = Prometheus::start(&[a.admin, b.admin]);
    // Both scraped once before the load: its first events are increases from zero.
    let both_up = || {
        prometheus.query("sum(up{job=\"robotsgate\"})", now())["data"]["result"][0]["value"][1]
            == "2"
    };
    assert!(
        eventually(Duration::from_secs(60), both_up).await,
        "targets not up:\n{}",
        prometheus.log()
    );

    load_a(&a, &paced, &slow, &failing).await;
    load_b(&b, &ca_cert, transparent).await;
    let load_end = now();

    // Prometheus has scraped both after the load: A's requests as A counts them.
    let (_, status) = admin(&a, "GET", "/status.json");
    let status: Value = serde_json::from_str(&status).expect("status.json");
    let total: u64 = status["totals"]
        .as_object()
        .expect("totals")
        .values()
        .filter_map(Value::as_u64)
        .sum();
    let scraped = || {
        let seen = prometheus.query(
            &format!("sum(robotsgate_requests_total{{instance=\"{}\"}})", a.admin),
            now(),
        );
        seen["data"]["result"][0]["value"][1]
            .as_str()
            .and_then(|v| v.parse::<f64>().ok())
    };
    let b_up = || has_data(&prometheus.query("robotsgate_fleet_backend_up == 1", now()));
    assert!(
        eventually(Duration::from_secs(60), || scraped() == Some(total as f64)
            && b_up())
        .await,
        "prometheus has {:?} of {total} requests (B up: {}):\n{}",
        scraped(),
        b_up(),
        prometheus.log()
    );
    // ... and both scraped once more after the last event of the load.
    let scraped_after_load = || {
        let oldest = prometheus.query("min(timestamp(up{job=\"robotsgate\"}))", now());
        values(&oldest).first().is_some_and(|t| *t > load_end)
    };
    assert!(eventually(Duration::from_secs(30), scraped_after_load).await);
    let at = now();

    every_panel_shows_data(&prometheus, at);
    only_the_ca_alert_is_active(&prometheus, &b, at).await;
}

/// Instance B: a fleet member on `redis` intercepting TLS with a CA (made in `dir`) that
/// expires in 20 days, and a transparent listener: (B, the CA's certificate, the
/// listener's port).
fn instance_b(redis: &Redis, dir: &std::path::Path) -> (Proxy, std::path::PathBuf, u16) {
    let (ca_cert, ca_key) = (dir.join("ca.pem"), dir.join("ca.key"));
    let (ok, text) = run_output(Command::new(env!("CARGO_BIN_EXE_robotsgate")).args([
        "ca",
        "init",
        "--cert",
        ca_cert.to_str().expect("utf-8"),
        "--key",
        ca_key.to_str().expect("utf-8"),
        "--days",
        "20",
    ]));
    assert!(ok, "{text}");
    let transparent = free_port();
    let b = Proxy::start(
        &crate::fleet_fixture::fleet_conf(redis).set(
            "transparent.http_listen",
            format!("127.0.0.1:{transparent}"),
        ),
        &[
            "--allow-destination",
            "127.0.0.0/8",
            "--ca-cert",
            ca_cert.to_str().expect("utf-8"),
            "--ca-key",
            ca_key.to_str().expect("utf-8"),
        ],
    );
    (b, ca_cert, transparent)
}

/// A's load: 12 pages of the paced origin at once (a queue of 4: some refused for
/// waiting too long), disallowed paths, 4 slow pages at once (in-flight limit 2),
/// errors from an origin (adaptive slow-down), a malformed request.
async fn load_a(a: &Proxy, paced: &TestOrigin, slow: &TestOrigin, failing: &TestOrigin) {
    let mut urls: Vec<(String, &'static str)> = (0..12)
        .map(|i| (paced.url(&format!("/page/{i}")), "ExampleBot/1.0"))
        .collect();
    urls.extend((0..4).map(|i| (paced.url(&format!("/private/{i}")), "ExampleBot/1.0")));
    urls.extend((0..4).map(|_| (slow.url("/slow"), "ExampleBot/1.0")));
    urls.extend((0..2).map(|_| (failing.url("/fail"), "ExampleBot/1.0")));
    let statuses = concurrent(a, urls).await;
    assert!(
        statuses.contains(&200) && statuses.contains(&403),
        "{statuses:?}"
    );
    assert!(
        statuses.contains(&503),
        "nothing refused or failed: {statuses:?}"
    );
    let answer = raw_exchange(a.addr, b"NOT HTTP AT ALL\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    // What the origins received: no disallowed path, and the pages served paced by the
    // Crawl-delay clamped to the 0.2 s ceiling (less the origin's noting of an end).
    assert_eq!(pages(paced, "/private").len(), 0);
    let served = pages(paced, "/page/");
    assert!(served.len() >= 2, "{served:?}");
    assert_gaps_at_least(&served, Duration::from_millis(200) - JITTER);
}

/// B's load: a page through the fleet, a CONNECT intercepted with the expiring CA,
/// a direct (not redirected) connection on the transparent listener.
async fn load_b(b: &Proxy, ca_cert: &std::path::Path, transparent: u16) {
    let fleet_origin = TestOrigin::start(vec![]).await;
    assert_eq!(curl(b, &fleet_origin.url("/fleet"), &[]).0, 200);
    assert_eq!(fleet_origin.count("/fleet"), 1);
    let closed = free_port();
    let (status, head, _) = curl(
        b,
        &format!("https://127.0.0.1:{closed}/x"),
        &[
            "--cacert",
            ca_cert.to_str().expect("utf-8"),
            "--http1.1",
            "--suppress-connect-headers",
        ],
    );
    assert!(status >= 500, "the intercepted request: {status} {head}");
    let _ = raw_exchange(
        format!("127.0.0.1:{transparent}").parse().expect("addr"),
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    )
    .await;
}

/// Every panel query is valid, and every panel shows data (but those listed).
fn every_panel_shows_data(prometheus: &Prometheus, at: f64) {
    let mut missing = Vec::new();
    for (title, queries) in panels() {
        let mut shown = false;
        for query in &queries {
            let answer = prometheus.query(query, at);
            assert_eq!(answer["status"], "success", "{title}: {query}: {answer}");
            // A query of events (a rate, an increase, a count of changes) shows them
            // when not zero; a level (a gauge: queued, open, up) when it has a value.
            let events = ["rate(", "increase(", "changes("]
                .iter()
                .any(|f| query.contains(f));
            shown |= if events {
                shows_events(&answer)
            } else {
                has_data(&answer)
            };
        }
        let exempt = NOT_UNDER_LOAD.iter().any(|(t, _)| *t == title);
        if !shown && !exempt {
            missing.push(format!("{title}: {queries:?}"));
        }
    }
    assert!(
        missing.is_empty(),
        "panels without data:\n{}",
        missing.join("\n")
    );
    for (title, _) in NOT_UNDER_LOAD {
        assert!(
            panels().iter().any(|(t, _)| t == title),
            "{title} is no longer a panel"
        );
    }
}

/// Every alert expression is valid; on these instances only the CA's is true (B's
/// CA expires in 20 days): Prometheus holds it pending for its `for: 1h`. (The
/// backend's latency alert is left out of that: a loaded host can take 50 ms over a
/// Redis round trip.) Every rule evaluates without error.
async fn only_the_ca_alert_is_active(prometheus: &Prometheus, b: &Proxy, at: f64) {
    const HOST_DEPENDENT: &str = "RobotsgateFleetBackendDegraded";
    for (name, expr) in alert_rules() {
        let answer = prometheus.query(&expr, at);
        assert_eq!(answer["status"], "success", "{name}: {answer}");
        if name != HOST_DEPENDENT {
            let true_now = has_data(&answer);
            assert_eq!(
                true_now,
                name == "RobotsgateCAExpiresWithin30Days",
                "{name}: {answer}"
            );
        }
    }
    // Alerts active (pending or firing): (name, instance).
    let active = || -> Vec<(String, String)> {
        let (_, body) = prometheus.get("/api/v1/alerts");
        let alerts: Value = serde_json::from_str(&body).expect("alerts");
        alerts["data"]["alerts"]
            .as_array()
            .expect("alerts")
            .iter()
            .map(|a| {
                let label = |name: &str| a["labels"][name].as_str().unwrap_or("").to_string();
                (label("alertname"), label("instance"))
            })
            .collect()
    };
    let ca_pending = (
        "RobotsgateCAExpiresWithin30Days".to_string(),
        b.admin.to_string(),
    );
    assert!(
        eventually(Duration::from_secs(30), || active().contains(&ca_pending)).await,
        "{:?}",
        active()
    );
    let others: Vec<_> = active()
        .into_iter()
        .filter(|(name, _)| *name != ca_pending.0 && name != HOST_DEPENDENT)
        .collect();
    assert!(others.is_empty(), "{others:?}");
    // Every rule evaluated without error.
    let (_, body) = prometheus.get("/api/v1/rules");
    let rules: Value = serde_json::from_str(&body).expect("rules");
    for group in rules["data"]["groups"].as_array().expect("groups") {
        for rule in group["rules"].as_array().expect("rules") {
            assert_eq!(rule["health"], "ok", "{rule}");
        }
    }
}
