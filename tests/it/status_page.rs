//! The status page in a real browser: headless Chromium (Debian `chromium`) loads the
//! admin listener's `/`, whose script fills the check form from the page's query string
//! and submits it; the decision it shows, the busiest-origins table and a screenshot are
//! checked. The origin is a real test origin; robotsgate a real process.

use std::path::Path;
use std::process::Command;

use crate::common::{curl, Behaviour, Proxy, TestOrigin};

pub(crate) fn chromium(profile: &Path, args: &[&str], url: &str) -> String {
    let out = Command::new("chromium")
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
        .arg(url)
        .output()
        .expect("chromium (Debian package `chromium`; scripts/deps.sh installs it)");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_page_checks_a_url_in_a_browser() {
    let origin = TestOrigin::start(vec![(
        "/robots.txt",
        Behaviour::ok("User-agent: *\nDisallow: /private\nCrawl-delay: 0.2\n"),
    )])
    .await;
    let proxy = Proxy::start_for_loopback("");
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

    let shot = dir.path().join("status.png");
    tokio::task::block_in_place(|| {
        chromium(
            dir.path(),
            &[
                "--window-size=1200,800",
                &format!("--screenshot={}", shot.display()),
            ],
            &page,
        )
    });
    let png = std::fs::read(&shot).expect("screenshot written");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "{} bytes",
        png.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_page_shows_the_share_refused_per_purpose_and_checks_a_purpose() {
    let origin = TestOrigin::start(vec![(
        "/robots.txt",
        Behaviour::ok(
            "User-agent: *\nContent-Usage: train-ai=y\nContent-Usage: /news/ train-ai=n\n",
        ),
    )])
    .await;
    let proxy = Proxy::start_for_loopback(
        "  agent:\n    default_tokens: [ExampleBot]\n    default_purposes: [train-ai]\n",
    );
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
