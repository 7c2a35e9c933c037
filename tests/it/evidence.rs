//! Evidence of compliance, at the origin and from the bundle: every path leaves a record
//! naming the robots.txt (by SHA-256) and the rule that decided, as `/check` names them;
//! a robots.txt changed mid-crawl shows which version governed each request; a SIGKILL
//! under load leaves every request the origin received recorded; a changed, removed,
//! reordered record or a deleted segment is named by `verify`; the WARC export holds
//! what the JSON export holds (read by `warcio`); `recheck` lists the URLs refused
//! since; three members record each request once, merged; a full disk refuses with
//! nothing sent unrecorded, or lets requests go counted. Bundles are also read by an
//! independent reader (`tests/helpers/evidence_reader.py`: its own Ed25519 and Merkle
//! checks). The transparent listeners' records: `transparent.rs`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::common::*;
use crate::fleet_fixture::{backend_up, fleet_conf, HttpsFleet};
use crate::redis_servers::Redis;

/// Evidence kept in `dir`.
fn kept_in(dir: &Path) -> Conf {
    Conf::new().set("evidence.dir", dir.display().to_string())
}

/// `origin`'s robots.txt SHA-256 as `proxy` holds it (`/origins/{origin}`).
fn held_sha(proxy: &Proxy, origin: &str) -> String {
    let encoded = crate::fleet_fixture::urlencode(origin.trim_end_matches('/'));
    let (status, body) = admin(proxy, "GET", &format!("/origins/{encoded}"));
    assert_eq!(status, 200, "{body}");
    let view: Value = serde_json::from_str(&body).expect("json");
    view["sha256"].as_str().expect("sha256").to_string()
}

/// The line `/check` names for `url` (none when no rule decided).
fn checked_line(proxy: &Proxy, url: &str) -> Option<u64> {
    let (_, body) = admin(
        proxy,
        "GET",
        &format!("/check?url={}", crate::fleet_fixture::urlencode(url)),
    );
    let check: Value = serde_json::from_str(&body).expect("json");
    check["line"].as_u64()
}

/// The decisions recorded under `dir` for `url`, once there is one (a refusal's record
/// is queued, written with the next write or tick, at most 200 ms later).
async fn recorded(dir: &Path, url: &str) -> Vec<Value> {
    eventually(Duration::from_secs(5), || {
        !decisions_of(dir, url).is_empty()
    })
    .await;
    decisions_of(dir, url)
}

/// The one decision recorded under `dir` for `url`, checked against what `proxy` holds
/// and `/check` says: its verdict, the policy's SHA-256, the rule's line.
async fn one_decision(dir: &Path, proxy: &Proxy, url: &str, verdict: &str) -> Value {
    let found = recorded(dir, url).await;
    assert_eq!(found.len(), 1, "{url}: {found:#?}");
    let record = found.into_iter().next().expect("one");
    assert_eq!(record["verdict"], verdict, "{url}: {record}");
    let origin = record["origin"].as_str().expect("origin");
    assert_eq!(record["policy"]["sha256"], held_sha(proxy, origin), "{url}");
    assert_eq!(
        record["rule"]["line"].as_u64(),
        checked_line(proxy, url),
        "{url}"
    );
    record
}

const ROBOTS: &str = "User-agent: *\nDisallow: /private\nAllow: /private/ok\n";

/// Plain HTTP (allowed with no rule, allowed by a rule, disallowed, report mode),
/// HTTPS intercepted in HTTP/1.1 and in HTTP/2: one record each, before the origin saw
/// the request, naming the file and rule `/check` names; an outcome after each request
/// sent; robotsgate's own robots.txt fetches recorded before they left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_path_leaves_its_record_naming_the_policy_and_rule_that_decided() {
    let dir = tempfile::tempdir().expect("tempdir");
    let report = serde_json::json!([{"user_agent_contains": "ReportBot", "tokens": ["ExampleBot"], "mode": "report", "trust_client_text": true}]);
    let conf = kept_in(dir.path()).set("agent.rules", report);
    let setup = crate::https::Setup::start(&conf).await;
    let proxy = &setup.proxy;
    let plain = TestOrigin::robots(ROBOTS).await;
    let tls = setup.origin(ROBOTS).await;
    let cases = [
        (plain.url("/page"), "allowed", vec![]),
        (plain.url("/private/ok"), "allowed", vec![]),
        (plain.url("/private/x"), "disallowed", vec![]),
        (
            plain.url("/private/report"),
            "would_disallow",
            vec!["-A", "ReportBot/1"],
        ),
    ];
    for (url, verdict, extra) in &cases {
        let (status, head, _) = curl(proxy, url, extra);
        assert_eq!(status == 403, *verdict == "disallowed", "{url}: {head}");
        one_decision(dir.path(), proxy, url, verdict).await;
    }
    let ca = crate::https::path(&setup.operator_ca).to_string();
    for (path, protocol, verdict) in [
        ("/tls-page", "--http1.1", "allowed"),
        ("/private/tls", "--http1.1", "disallowed"),
        ("/h2-page", "--http2", "allowed"),
    ] {
        let url = tls.url(path);
        let args = [
            "--cacert",
            ca.as_str(),
            "--suppress-connect-headers",
            protocol,
        ];
        let (status, head, _) = curl(proxy, &url, &args);
        assert_eq!(status == 403, verdict == "disallowed", "{url}: {head}");
        let record = one_decision(dir.path(), proxy, &url, verdict).await;
        assert_eq!(record["arrived"], "tunnel", "{record}");
        let h2 = if protocol == "--http2" {
            "h2"
        } else {
            "http/1.1"
        };
        assert_eq!(record["protocol"], h2, "{record}");
    }
    let report = &recorded(dir.path(), &plain.url("/private/report")).await[0];
    assert_eq!(report["mode"], "report");
    assert!(report["would"]
        .as_str()
        .is_some_and(|w| w.starts_with("would-disallow")));
    // Each request sent has its outcome (queued after its exchange, written soon
    // after); robots.txt was recorded before each fetch.
    let outcomes = || {
        let all = records(dir.path());
        let sent: Vec<Option<u64>> = all
            .iter()
            .filter(|r| r["type"] == "decision")
            .filter(|r| matches!(r["verdict"].as_str(), Some("allowed" | "would_disallow")))
            .map(|r| r["seq"].as_u64())
            .collect();
        let ended: Vec<Value> = all.into_iter().filter(|r| r["type"] == "outcome").collect();
        (sent, ended)
    };
    let complete = eventually(Duration::from_secs(5), || {
        let (sent, ended) = outcomes();
        sent.len() == ended.len()
    })
    .await;
    let (sent, ended) = outcomes();
    assert!(complete, "{sent:?} {ended:#?}");
    for outcome in &ended {
        assert!(sent.contains(&outcome["decision"].as_u64()), "{outcome}");
        assert_eq!(outcome["status"], 200, "{outcome}");
    }
    let all = records(dir.path());
    for origin in [&plain, &tls] {
        let url = origin.url("/robots.txt");
        let fetch = all
            .iter()
            .find(|r| r["type"] == "fetch" && r["url"] == url.as_str());
        let fetched = all
            .iter()
            .find(|r| r["type"] == "fetched" && r["url"] == url.as_str());
        let (fetch, fetched) = (fetch.expect("fetch"), fetched.expect("fetched"));
        assert_eq!(fetched["fetch"], fetch["seq"]);
        assert_eq!(fetched["case"], "fresh");
        assert_eq!(fetched["sha256"], held_sha(proxy, &origin.url("")));
    }
}

/// The origin's robots.txt changes between requests: the records before name the first
/// file, those after the second, both kept; the admin API gives the two versions with
/// their decisions; the origin's bundle verifies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_robots_txt_changed_mid_crawl_shows_which_version_governed_each_request() {
    let dir = tempfile::tempdir().expect("tempdir");
    let proxy = Proxy::start_for_loopback(&kept_in(dir.path()).set("robots.min_ttl_seconds", 0));
    let origin = TestOrigin::robots("User-agent: *\nDisallow: /b\n").await;
    let first = [("/a1", 200), ("/b1", 403)];
    for (path, status) in first {
        assert_eq!(curl(&proxy, &origin.url(path), &[]).0, status, "{path}");
    }
    let before = held_sha(&proxy, &origin.url(""));
    origin.set(
        "/robots.txt",
        Behaviour::ok("User-agent: *\nDisallow: /a\n"),
    );
    let encoded = crate::fleet_fixture::urlencode(origin.url("").trim_end_matches('/'));
    assert_eq!(
        admin(&proxy, "POST", &format!("/origins/{encoded}/refresh")).0,
        200
    );
    let after = held_sha(&proxy, &origin.url(""));
    assert_ne!(before, after);
    for (path, status) in [("/a2", 403), ("/b2", 200)] {
        assert_eq!(curl(&proxy, &origin.url(path), &[]).0, status, "{path}");
    }
    for (path, sha) in [
        ("/a1", &before),
        ("/b1", &before),
        ("/a2", &after),
        ("/b2", &after),
    ] {
        let found = recorded(dir.path(), &origin.url(path)).await;
        assert_eq!(found[0]["policy"]["sha256"], sha.as_str(), "{path}");
    }
    let (status, body) = admin(&proxy, "GET", &format!("/origins/{encoded}/evidence"));
    assert_eq!(status, 200, "{body}");
    let history: Value = serde_json::from_str(&body).expect("json");
    let versions = history["versions"].as_array().expect("versions");
    assert_eq!(versions.len(), 2, "{history}");
    for (version, sha) in versions.iter().zip([&before, &after]) {
        assert_eq!(version["policy"], sha.as_str());
        assert_eq!(version["decisions"]["allowed"], 1, "{version}");
        assert_eq!(version["decisions"]["disallowed"], 1, "{version}");
    }
    let bundle = dir.path().join("origin.jsonl");
    let origin_name = origin.url("");
    let out = bundle.to_str().expect("path");
    let dir_arg = dir.path().to_str().expect("path");
    let (ok, said) = evidence_cli(&[
        "export",
        "--dir",
        dir_arg,
        "--origin",
        &origin_name,
        "--out",
        out,
    ]);
    assert!(ok, "{said}");
    let (ok, said) = evidence_cli(&["verify", out]);
    assert!(ok && said.contains("0 breaks"), "{said}");
    let read = independent("evidence_reader.py", &bundle);
    assert_eq!(read["breaks"], serde_json::json!([]), "{read}");
    assert_eq!(
        (read["decisions"].as_u64(), read["policies"].as_u64()),
        (Some(4), Some(2)),
        "{read}"
    );
}

/// Eight clients crawl as fast as the origin answers; robotsgate is SIGKILLed mid-load:
/// every request the origin received has its decision recorded (written before it was
/// sent), and the chain left behind verifies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkill_under_load_leaves_every_request_the_origin_received_recorded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut proxy = Proxy::start_for_loopback(&kept_in(dir.path()).set("pacing.max_in_flight", 0));
    let origin = TestOrigin::robots("User-agent: *\nDisallow: /private\n").await;
    let url = std::sync::Arc::new(origin.url("/load/"));
    let clients: Vec<_> = (0..8)
        .map(|c| {
            let (client, url) = (proxy.client(), url.clone());
            tokio::spawn(async move {
                for i in 0..10_000 {
                    if client.get(format!("{url}{c}-{i}")).send().await.is_err() {
                        return;
                    }
                }
            })
        })
        .collect();
    let loaded = eventually(Duration::from_secs(20), || {
        pages(&origin, "/load/").len() >= 200
    })
    .await;
    assert!(
        loaded,
        "the load never reached the origin:\n{}",
        proxy.log()
    );
    crate::fleet_fixture::signal(proxy.pid(), "-KILL");
    proxy.wait_exit(Duration::from_secs(5));
    for client in clients {
        let _ = client.await;
    }
    let recorded: std::collections::HashSet<String> = decisions(dir.path())
        .iter()
        .filter_map(|r| r["url"].as_str().map(str::to_string))
        .collect();
    let seen = pages(&origin, "/load/");
    let unrecorded: Vec<&str> = seen
        .iter()
        .map(|s| s.target.as_str())
        .filter(|t| !recorded.contains(&origin.url(t)))
        .collect();
    assert!(
        unrecorded.is_empty(),
        "{} of {} received unrecorded: {unrecorded:?}",
        unrecorded.len(),
        seen.len()
    );
    let (ok, said) = evidence_cli(&["verify", dir.path().to_str().expect("path")]);
    assert!(ok, "{said}");
}

/// A real chain of several segments (a process stopped as systemd stops it): whole, it
/// verifies, by robotsgate and by the independent reader, and its WARC export holds
/// what its JSON export holds (read by `warcio`); a copy with one byte flipped, one
/// with a record removed, one with two records swapped and one with a segment deleted
/// each fail `verify`, named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_verifies_whole_exports_alike_and_each_change_is_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let evidence = dir.path().join("evidence");
    let conf = kept_in(&evidence).set("evidence.segment_bytes", 4096);
    let mut proxy = Proxy::start_for_loopback(&conf);
    let origin = TestOrigin::robots("User-agent: *\nDisallow: /private\n").await;
    for i in 0..30 {
        let path = if i % 3 == 0 {
            format!("/private/{i}")
        } else {
            format!("/page/{i}")
        };
        curl(&proxy, &origin.url(&path), &[]);
    }
    proxy.stop();
    let chain = std::fs::read_dir(evidence.join("chains"))
        .expect("chains")
        .next()
        .expect("a chain")
        .expect("entry")
        .path();
    assert!(chain.join("000003.jsonl").exists(), "few segments");
    let out = |name: &str| dir.path().join(name);
    let (json, warc) = (out("all.jsonl"), out("all.warc"));
    for (file, format) in [(&json, "jsonl"), (&warc, "warc")] {
        let args = [
            "export",
            "--dir",
            evidence.to_str().expect("path"),
            "--format",
            format,
            "--out",
            file.to_str().expect("path"),
        ];
        let (ok, said) = evidence_cli(&args);
        assert!(ok, "{said}");
    }
    let (ok, said) = evidence_cli(&["verify", json.to_str().expect("path")]);
    assert!(
        ok && said.contains("30 decisions (30 judged again): 0 breaks, 0 decided otherwise"),
        "{said}"
    );
    let read = independent("evidence_reader.py", &json);
    assert_eq!(read["breaks"], serde_json::json!([]), "{read}");
    let warc_read = independent("warc_reader.py", &warc);
    assert_eq!(warc_read["records"], read["records"], "{warc_read} {read}");
    assert_eq!(warc_read["decisions"], 30, "{warc_read}");
    assert_eq!(
        warc_read["types"]["response"], read["policies"],
        "{warc_read}"
    );
    let robots = &warc_read["robots"][origin.url("/robots.txt")];
    assert_eq!(*robots, held_sha_of(&evidence), "{warc_read}");
    // Each change, on a copy of its own.
    let changes: [Tamper; 4] = [
        (
            "a byte flipped",
            flip,
            "not the record the signed head holds",
        ),
        ("a record removed", remove, "records removed"),
        ("two records swapped", swap, "follows seq"),
        ("a segment deleted", delete, "segment 2 is missing"),
    ];
    for (what, change, named) in changes {
        let copy = out(&what.replace(' ', "-"));
        copy_dir(&evidence, &copy);
        let chain = copy.join("chains").join(chain.file_name().expect("name"));
        change(&chain);
        let (ok, said) = evidence_cli(&["verify", copy.to_str().expect("path")]);
        assert!(!ok && said.contains(named), "{what}: {said}");
    }

    fn lines(chain: &Path) -> (PathBuf, Vec<String>) {
        let path = chain.join("000002.jsonl");
        let text = std::fs::read_to_string(&path).expect("segment");
        (path, text.lines().map(String::from).collect())
    }
    fn flip(chain: &Path) {
        let (path, mut lines) = lines(chain);
        // Its time, a year later: the line still reads.
        lines[1] = lines[1].replacen("\"t\":\"20", "\"t\":\"21", 1);
        std::fs::write(path, lines.join("\n") + "\n").expect("write");
    }
    fn remove(chain: &Path) {
        let (path, mut lines) = lines(chain);
        lines.remove(1);
        std::fs::write(path, lines.join("\n") + "\n").expect("write");
    }
    fn swap(chain: &Path) {
        let (path, mut lines) = lines(chain);
        lines.swap(0, 1);
        std::fs::write(path, lines.join("\n") + "\n").expect("write");
    }
    fn delete(chain: &Path) {
        std::fs::remove_file(chain.join("000002.jsonl")).expect("delete");
    }
}

/// A change made to a chain: what it is, how it is made, what `verify` must name.
type Tamper = (&'static str, fn(&Path), &'static str);

/// The one policy kept under an evidence directory.
fn held_sha_of(evidence: &Path) -> Value {
    let kept: Vec<String> = std::fs::read_dir(evidence.join("policies"))
        .expect("policies")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| !n.starts_with('.'))
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    Value::from(kept[0].clone())
}

/// Four pages fetched, their bodies digested; the site then disallows two of them:
/// `recheck` lists exactly those two, with the digests of the bodies fetched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recheck_lists_the_urls_refused_since_the_crawl() {
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = kept_in(dir.path())
        .set("evidence.body_digest", true)
        .set("robots.min_ttl_seconds", 0);
    let proxy = Proxy::start_for_loopback(&conf);
    let origin = TestOrigin::robots("User-agent: *\nAllow: /\n").await;
    for path in ["/keep/1", "/drop/1", "/drop/2", "/keep/2"] {
        assert_eq!(curl(&proxy, &origin.url(path), &[]).0, 200);
    }
    let bundle = dir.path().join("crawl.jsonl");
    let dir_arg = dir.path().to_str().expect("path");
    let (ok, said) = evidence_cli(&[
        "export",
        "--dir",
        dir_arg,
        "--out",
        bundle.to_str().expect("path"),
    ]);
    assert!(ok, "{said}");
    origin.set(
        "/robots.txt",
        Behaviour::ok("User-agent: *\nDisallow: /drop\n"),
    );
    let admin_url = format!("http://{}", proxy.admin);
    let (ok, said) = evidence_cli(&[
        "recheck",
        bundle.to_str().expect("path"),
        "--admin",
        &admin_url,
    ]);
    assert!(ok, "{said}");
    let refused: Vec<&str> = said
        .lines()
        .filter(|l| l.starts_with("REFUSED-NOW"))
        .collect();
    assert_eq!(refused.len(), 2, "{said}");
    for (line, path) in refused.iter().zip(["/drop/1", "/drop/2"]) {
        let body = format!("page {path}\n");
        let sha = ring::digest::digest(&ring::digest::SHA256, body.as_bytes());
        let sha: String = sha.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        assert!(
            line.contains(&origin.url(path)) && line.contains(&sha),
            "{line}"
        );
        assert!(line.contains("Disallow: /drop (line 2)"), "{line}");
    }
    assert!(
        said.contains("2 URLs fetched then are refused by their robots.txt now"),
        "{said}"
    );
}

/// Three members, each with its own evidence directory, the origin owned by the first:
/// every request, through whichever member, is recorded once, by the owner, naming the
/// member that handed it over; the three directories export as one bundle that
/// verifies, by robotsgate and by the independent reader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_record_each_request_once_and_merge() {
    let redis = Redis::start();
    let origin = TestOrigin::robots("User-agent: *\nDisallow: /private\n").await;
    let dirs: Vec<tempfile::TempDir> = (0..3)
        .map(|_| tempfile::tempdir().expect("tempdir"))
        .collect();
    let proxies: Vec<Proxy> = dirs
        .iter()
        .map(|d| Proxy::start_for_loopback(&fleet_conf(&redis).with(&kept_in(d.path()))))
        .collect();
    backend_up(&proxies).await;
    assert_eq!(curl(&proxies[0], &origin.url("/first"), &[]).0, 200);
    let mut sent = vec![origin.url("/first")];
    for round in 0..3 {
        for (i, proxy) in proxies.iter().enumerate() {
            for path in [format!("/p/{round}-{i}"), format!("/private/{round}-{i}")] {
                curl(proxy, &origin.url(&path), &[]);
                sent.push(origin.url(&path));
            }
        }
    }
    let members: Vec<String> = proxies
        .iter()
        .map(crate::fleet_fixture::member_id)
        .collect();
    for url in &sent {
        // A refusal's record is queued: written with the next write or tick.
        let _ = recorded(dirs[0].path(), url).await;
        let found: Vec<(usize, Value)> = dirs
            .iter()
            .enumerate()
            .flat_map(|(i, d)| decisions_of(d.path(), url).into_iter().map(move |r| (i, r)))
            .collect();
        assert_eq!(found.len(), 1, "{url}: {found:#?}");
        let (at, record) = &found[0];
        assert_eq!(*at, 0, "{url}: recorded by the owner");
        let through = url.rsplit('-').next().and_then(|i| i.parse::<usize>().ok());
        match through {
            Some(i) if i > 0 => assert_eq!(record["from"], members[i].as_str(), "{record}"),
            _ => assert!(record.get("from").is_none(), "{record}"),
        }
    }
    let bundle = dirs[0].path().join("fleet.jsonl");
    let mut args = vec!["export".to_string()];
    for d in &dirs {
        args.extend(["--dir".to_string(), d.path().display().to_string()]);
    }
    args.extend(["--out".to_string(), bundle.display().to_string()]);
    let (ok, said) = evidence_cli(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(ok, "{said}");
    let (ok, said) = evidence_cli(&["verify", bundle.to_str().expect("path")]);
    assert!(ok && said.contains("\n3 chains, "), "{said}");
    let read = independent("evidence_reader.py", &bundle);
    assert_eq!(read["breaks"], serde_json::json!([]), "{read}");
    assert_eq!(
        read["decisions"].as_u64(),
        Some(sent.len() as u64),
        "{read}"
    );
}

/// A blind tunnel handed to its owner is recorded there once (host level: its origin's
/// `/`), naming the member that sent it and the policy that allowed its start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blind_tunnel_is_recorded_once_by_its_owner() {
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = kept_in(dir.path()).set("tls.blind_tunnel", ["localhost"]);
    let fleet = HttpsFleet::start(&conf).await;
    let origin = fleet.origin("User-agent: *\nAllow: /\n").await;
    let ca = fleet.setup.dir.path().join("origin-ca.pem");
    let ca = ["--cacert", ca.to_str().expect("path")];
    assert_eq!(curl(fleet.member(0), &origin.url("/first"), &ca).0, 200);
    assert_eq!(curl(fleet.member(1), &origin.url("/handed"), &ca).0, 200);
    let tunnels: Vec<Value> = decisions(dir.path())
        .into_iter()
        .filter(|r| r["arrived"] == "blind")
        .collect();
    assert_eq!(tunnels.len(), 2, "{tunnels:#?}");
    let sender = crate::fleet_fixture::member_id(fleet.member(1));
    assert!(tunnels[0].get("from").is_none(), "{}", tunnels[0]);
    assert_eq!(tunnels[1]["from"], sender.as_str(), "{}", tunnels[1]);
    for tunnel in &tunnels {
        assert_eq!(tunnel["url"], origin.url("/"), "{tunnel}");
        assert_eq!(
            tunnel["policy"]["sha256"],
            held_sha(fleet.member(0), &origin.url(""))
        );
    }
}

/// A small filesystem (tmpfs) under the evidence fills up: with `on_failure: refuse`,
/// requests whose records cannot be written are answered 503 and never sent, and every
/// request the origin received is recorded; with `continue`, they go on, counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_with_nothing_sent_unrecorded_or_lets_requests_go_counted() {
    for mode in ["refuse", "continue"] {
        let small = Tmpfs::mount(48 * 1024);
        let conf = kept_in(&small.path).set("evidence.on_failure", mode);
        let proxy = Proxy::start_for_loopback(&conf);
        let origin = TestOrigin::robots("User-agent: *\nAllow: /\n").await;
        let mut refused = Vec::new();
        for i in 0..400 {
            let url = origin.url(&format!("/fill/{i}-{}", "x".repeat(200)));
            let (status, head, _) = curl(&proxy, &url, &[]);
            match status {
                200 => {}
                503 => {
                    assert!(head.contains("evidence-unwritable"), "{head}");
                    refused.push(url);
                }
                other => panic!("{mode}: {other} {head}\n{}", proxy.log()),
            }
            if refused.len() >= 3 {
                break;
            }
        }
        let failures = proxy.counter("robotsgate_evidence_failures_total");
        assert!(
            failures > 0.0,
            "{mode}: the disk never filled\n{}",
            proxy.log()
        );
        let recorded: std::collections::HashSet<String> = decisions(&small.path)
            .iter()
            .filter_map(|r| r["url"].as_str().map(str::to_string))
            .collect();
        let seen = pages(&origin, "/fill/");
        let unrecorded = seen
            .iter()
            .filter(|s| !recorded.contains(&origin.url(&s.target)))
            .count();
        match mode {
            "refuse" => {
                assert_eq!(refused.len(), 3, "nothing refused");
                assert_eq!(unrecorded, 0, "requests received unrecorded");
                for url in &refused {
                    let path = url
                        .splitn(4, '/')
                        .nth(3)
                        .map(|p| format!("/{p}"))
                        .expect("path");
                    assert_eq!(origin.count(&path), 0, "{url} was sent");
                }
            }
            _ => {
                assert!(refused.is_empty(), "refused with on_failure: continue");
                assert!(unrecorded > 0, "nothing went unrecorded");
            }
        }
    }
}

/// A tmpfs of a given size, unmounted when dropped.
struct Tmpfs {
    /// Keeps the mount point.
    _dir: tempfile::TempDir,
    /// Where it is mounted.
    path: PathBuf,
}

impl Tmpfs {
    fn mount(bytes: usize) -> Tmpfs {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("small");
        std::fs::create_dir(&path).expect("mkdir");
        let size = format!("size={bytes}");
        run_ok(
            std::process::Command::new("mount")
                .args(["-t", "tmpfs", "-o", &size, "tmpfs"])
                .arg(&path),
        );
        Tmpfs { _dir: dir, path }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.path)
            .status();
    }
}

/// The status page, in headless Chromium, shows an origin's robots.txt history: each
/// version decided on (its SHA-256's start) with its decisions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_shows_an_origins_robots_txt_history() {
    let dir = tempfile::tempdir().expect("tempdir");
    let proxy = Proxy::start_for_loopback(&kept_in(dir.path()).set("robots.min_ttl_seconds", 0));
    let origin = TestOrigin::robots("User-agent: *\nDisallow: /b\n").await;
    assert_eq!(curl(&proxy, &origin.url("/a"), &[]).0, 200);
    assert_eq!(curl(&proxy, &origin.url("/b"), &[]).0, 403);
    let before = held_sha(&proxy, &origin.url(""));
    origin.set(
        "/robots.txt",
        Behaviour::ok("User-agent: *\nDisallow: /a\n"),
    );
    let encoded = crate::fleet_fixture::urlencode(origin.url("").trim_end_matches('/'));
    assert_eq!(
        admin(&proxy, "POST", &format!("/origins/{encoded}/refresh")).0,
        200
    );
    assert_eq!(curl(&proxy, &origin.url("/b"), &[]).0, 200);
    let after = held_sha(&proxy, &origin.url(""));
    let profile = tempfile::tempdir().expect("tempdir");
    let page = format!("http://{}/", proxy.admin);
    let dom = tokio::task::block_in_place(|| {
        crate::status_page::chromium(profile.path(), &["--dump-dom"], &page)
    });
    for (sha, decisions) in [(&before, "allowed 1, disallowed 1"), (&after, "allowed 1")] {
        assert!(dom.contains(&format!("{} ", &sha[..12])), "{sha}:\n{dom}");
        assert!(dom.contains(decisions), "{decisions}:\n{dom}");
    }
}
