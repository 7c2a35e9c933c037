//! `docs/admin.md` is the admin API as it answers: every route the router matches has
//! its row, and every JSON answer's fields (top level, and one level into the objects
//! the page lists) are the ones the page names, read from a running fleet member (so
//! `/fleet` and the fleet fields answer too) after a request through it.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::common::{admin, curl, repo_root};
use crate::fleet_fixture::{backend_up, fleet_conf, instances, paced_origin, urlencode};
use crate::redis_servers::Redis;

/// The page.
fn page() -> String {
    let path = repo_root().join("docs/admin.md");
    std::fs::read_to_string(path).expect("docs/admin.md")
}

/// The page's field lists: for each `### `route`` heading, the fields its bullets name
/// before their colon, by their dotted path (`robots.age_seconds`).
fn documented_fields() -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut route = None;
    for line in page().lines() {
        if let Some(heading) = line.strip_prefix("### `") {
            route = heading.split('`').next().map(str::to_string);
        } else if let (Some(r), Some(item)) = (&route, line.trim_start().strip_prefix("* ")) {
            // Every `name` before the bullet's colon.
            let head = item.split(": ").next().unwrap_or_default();
            let names = head.split('`').skip(1).step_by(2).map(str::to_string);
            out.entry(r.clone()).or_default().extend(names);
        }
    }
    out
}

/// The fields of `value`: its keys, and for each object under one, `key.inner`.
fn fields(value: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let object = match value {
        Value::Array(items) => items.first().and_then(Value::as_object),
        other => other.as_object(),
    };
    for (key, inner) in object.into_iter().flatten() {
        out.insert(key.clone());
        if let Some(inner) = inner.as_object() {
            out.extend(inner.keys().map(|k| format!("{key}.{k}")));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_reference_is_what_the_admin_api_answers() {
    let redis = Redis::start();
    let evidence = tempfile::tempdir().expect("tempdir");
    let kept =
        crate::common::Conf::new().set("evidence.dir", evidence.path().display().to_string());
    let proxies = instances(1, &fleet_conf(&redis).with(&kept));
    backend_up(&proxies).await;
    let origin = paced_origin("1").await;
    assert_eq!(curl(&proxies[0], &origin.url("/page"), &[]).0, 200);
    let base = origin.url("").trim_end_matches('/').to_string();
    let routes = [
        (
            "/check",
            format!("/check?url={}", urlencode(&origin.url("/private/x"))),
        ),
        (
            "/origins/{origin}",
            format!("/origins/{}", urlencode(&base)),
        ),
        (
            "/origins/{origin}/evidence",
            format!("/origins/{}/evidence", urlencode(&base)),
        ),
        ("/status.json", "/status.json".to_string()),
        ("/fleet", "/fleet".to_string()),
    ];
    let documented = documented_fields();
    for (route, path) in routes {
        let (status, body) = admin(&proxies[0], "GET", &path);
        assert_eq!(status, 200, "{path}: {body}");
        let answer: Value = serde_json::from_str(&body).expect("JSON");
        let answered = fields(&answer);
        let listed = documented.get(route).cloned().unwrap_or_default();
        let missing: Vec<_> = answered.difference(&listed).collect();
        let extra: Vec<_> = listed.difference(&answered).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "{route}: answered but not listed {missing:?}; listed but not answered {extra:?}"
        );
    }
}

/// Every route the admin router matches has its `###` heading, and every heading is a
/// route it matches.
#[test]
fn every_admin_route_has_its_section() {
    let router = std::fs::read_to_string(repo_root().join("src/ops/admin.rs")).expect("admin.rs");
    let mut matched = BTreeSet::new();
    for arm in router.split("(\"").skip(1) {
        let mut parts = arm.split('"');
        let method = parts.next().unwrap_or_default();
        let path = parts.nth(1).unwrap_or_default();
        if matches!(method, "GET" | "POST" | "DELETE") && path.starts_with('/') {
            matched.insert(format!("{method} {path}"));
        }
    }
    for (method, sub) in [
        ("GET", ""),
        ("GET", "/robots.txt"),
        ("GET", "/evidence"),
        ("POST", "/refresh"),
        ("DELETE", ""),
    ] {
        assert!(router.contains(&format!(
            "(\"{method}\", \"{}\")",
            sub.trim_start_matches('/')
        )));
        matched.insert(format!("{method} /origins/{{origin}}{sub}"));
    }
    let page = page();
    let headed: BTreeSet<String> = page
        .lines()
        .filter_map(|l| l.strip_prefix("### `"))
        .filter_map(|h| h.split('`').next())
        .flat_map(|route| {
            let methods = page_methods(&page, route);
            methods.into_iter().map(move |m| format!("{m} {route}"))
        })
        .collect();
    assert_eq!(headed, matched, "the page's routes, and the router's");
}

/// The methods the page gives `route`, from its heading line (`### `route` (GET, POST)`).
fn page_methods(page: &str, route: &str) -> Vec<String> {
    let heading = format!("### `{route}`");
    page.lines()
        .find(|l| l.starts_with(&heading) && l[heading.len()..].starts_with(' '))
        .and_then(|l| l.split('(').nth(1))
        .map(|m| {
            m.trim_end_matches(')')
                .split(", ")
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}
