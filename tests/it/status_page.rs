//! The status page in a real browser: headless Chromium (Debian `chromium`) loads the
//! admin listener's `/`, whose script fills the check form from the page's query string
//! and submits it; the decision it shows, the busiest-origins table and a screenshot are
//! checked. The origin is a real test origin; robotsgate a real process.

use serde_json::json;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::{
    admin, assert_gaps_at_least, concurrent, curl, eventually, pages, Conf, Proxy, TestOrigin,
};

pub(crate) fn chromium(profile: &Path, args: &[&str], url: &str) -> String {
    let mut command = Command::new("chromium");
    command
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--virtual-time-budget=10000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url);
    // Chromium is the Debian package `chromium` (scripts/deps.sh installs it).
    crate::common::run_ok(&mut command)
}

/// A screenshot of `page` at `size` ("width,height"), checked to be a PNG with content:
/// its path.
fn screenshot(dir: &Path, page: &str, size: &str) -> std::path::PathBuf {
    let shot = dir.join("status.png");
    tokio::task::block_in_place(|| {
        chromium(
            dir,
            &[
                &format!("--window-size={size}"),
                &format!("--screenshot={}", shot.display()),
            ],
            page,
        )
    });
    let png = std::fs::read(&shot).expect("screenshot written");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "{} bytes",
        png.len()
    );
    shot
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_page_checks_a_url_in_a_browser() {
    let origin = TestOrigin::robots("User-agent: *\nDisallow: /private\nCrawl-delay: 0.2\n").await;
    let proxy = Proxy::start_for_loopback(&Conf::new());
    // Some traffic, so the page has an origin and totals to show.
    assert_eq!(curl(&proxy, &origin.url("/page"), &[]).0, 200);
    assert_eq!(curl(&proxy, &origin.url("/private/x"), &[]).0, 403);

    let dir = tempfile::tempdir().expect("tempdir");
    let checked: String = form_urlencoded::Serializer::new(String::new())
        .append_pair("url", &origin.url("/private/report"))
        .append_pair("agent", "ExampleBot/1.0")
        .finish();
    let page = format!("http://{}/?{checked}", proxy.admin);

    let dom = tokio::task::block_in_place(|| chromium(dir.path(), &["--dump-dom"], &page));
    assert!(
        dom.contains(r#"data-decision="disallowed""#),
        "the form's decision is not shown:\n{dom}"
    );
    assert!(dom.contains("Disallow: /private (line 2)"), "{dom}");
    assert!(
        dom.contains(&origin.url("")),
        "busiest origins lack the origin:\n{dom}"
    );
    // The totals: one allowed, one disallowed request went through the proxy.
    assert!(
        dom.contains(r#"<div class="total disallowed"><b>1</b>disallowed</div>"#),
        "{dom}"
    );
    // The check did not request the URL.
    assert_eq!(origin.count("/private/report"), 0);

    screenshot(dir.path(), &page, "1200,800");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_page_shows_the_share_refused_per_purpose_and_checks_a_purpose() {
    let origin = TestOrigin::robots(
        "User-agent: *\nContent-Usage: train-ai=y\nContent-Usage: /news/ train-ai=n\n",
    )
    .await;
    let proxy = Proxy::start_for_loopback(&Conf::new().set(
        "agent",
        json!({"default_tokens": ["ExampleBot"], "default_purposes": ["train-ai"]}),
    ));
    assert_eq!(curl(&proxy, &origin.url("/page"), &[]).0, 200);
    assert_eq!(curl(&proxy, &origin.url("/news/a"), &[]).0, 403);
    assert_eq!(curl(&proxy, &origin.url("/news/b"), &[]).0, 403);

    let dir = tempfile::tempdir().expect("tempdir");
    let checked: String = form_urlencoded::Serializer::new(String::new())
        .append_pair("url", &origin.url("/news/c"))
        .append_pair("purpose", "train-ai")
        .finish();
    let page = format!("http://{}/?{checked}", proxy.admin);
    let dom = tokio::task::block_in_place(|| chromium(dir.path(), &["--dump-dom"], &page));
    assert!(
        dom.contains("train-ai: 66.7% refused (2 of 3)"),
        "the share refused is not shown:\n{dom}"
    );
    assert!(dom.contains(r#"data-decision="usage_refused""#), "{dom}");
    assert!(
        dom.contains("train-ai refused (Content-Usage: /news/ train-ai=n (line 3))"),
        "{dom}"
    );
    assert_eq!(origin.count("/news/c"), 0, "the check requests nothing");
}

/// The charts of the last minutes: a paced origin under a burst (its queue grows and
/// drains at the Crawl-delay) and a disallowed path give the decision chart its
/// `allowed` and `disallowed` lines and the queue chart the origin's line, drawn by the
/// page's own script from `/status.json` (no external asset) in headless Chromium.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_page_charts_the_last_minutes() {
    let origin = TestOrigin::robots("User-agent: *\nDisallow: /private\nCrawl-delay: 0.3\n").await;
    let proxy = Proxy::start_for_loopback(&Conf::new());
    // 16 paced pages at once (a queue that lasts some 5 s: two samples or more see
    // it), and disallowed paths alongside.
    let mut urls: Vec<(String, &'static str)> = (0..16)
        .map(|i| (origin.url(&format!("/page/{i}")), "ExampleBot/1.0"))
        .collect();
    urls.extend((0..6).map(|i| (origin.url(&format!("/private/{i}")), "ExampleBot/1.0")));
    let origin_key = origin.url("");
    let origin_key = origin_key.trim_end_matches('/').to_string();
    let status = || {
        let (code, body) = admin(&proxy, "GET", "/status.json");
        assert_eq!(code, 200, "{body}");
        serde_json::from_str::<serde_json::Value>(&body).expect("status.json")
    };
    let queued_most = |s: &serde_json::Value| {
        s["history"]["queues"][&origin_key]
            .as_array()
            .map(|q| q.iter().filter_map(|v| v.as_u64()).max().unwrap_or(0))
            .unwrap_or(0)
    };
    let statuses = concurrent(&proxy, urls).await;
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        16,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == 403).count(),
        6,
        "{statuses:?}"
    );
    assert!(
        eventually(Duration::from_secs(10), || {
            let s = status();
            let rate = |d: &str| {
                s["history"]["decisions"][d]
                    .as_array()
                    .map(|r| r.iter().filter_map(|v| v.as_f64()).sum::<f64>())
                    .unwrap_or(0.0)
            };
            rate("allowed") > 0.0 && rate("disallowed") > 0.0
        })
        .await,
        "no rates in {}",
        status()["history"]
    );
    let s = status();
    assert!(
        queued_most(&s) >= 2,
        "queue not seen: {} (origin {origin_key})",
        s["history"]
    );
    // What reached the origin: the 16 pages, paced; no disallowed path.
    let seen = pages(&origin, "/page/");
    assert_eq!(seen.len(), 16);
    assert_gaps_at_least(&seen, Duration::from_millis(300));
    assert_eq!(pages(&origin, "/private").len(), 0);

    let dir = tempfile::tempdir().expect("tempdir");
    let page = format!("http://{}/", proxy.admin);
    let dom = tokio::task::block_in_place(|| chromium(dir.path(), &["--dump-dom"], &page));
    for series in ["allowed", "disallowed", origin_key.as_str()] {
        assert!(
            dom.contains(&format!(r#"data-series="{series}""#)),
            "no line for {series}:\n{dom}"
        );
    }
    for chart in ["rates-chart", "queues-chart"] {
        let points = dom
            .split(&format!(r#"id="{chart}""#))
            .nth(1)
            .and_then(|rest| rest.split("data-points=\"").nth(1))
            .and_then(|rest| rest.split('"').next())
            .and_then(|n| n.parse::<usize>().ok())
            .unwrap_or(0);
        assert!(points >= 2, "{chart} has {points} points:\n{dom}");
    }
    // The page's own status line was filled from status.json (not its error).
    assert!(dom.contains(" held, "), "{dom}");
    let shot = screenshot(dir.path(), &page, "1200,900");
    if let Ok(keep) = std::env::var("ROBOTSGATE_KEEP_SCREENSHOT") {
        std::fs::copy(&shot, keep).expect("keep screenshot");
    }
}
