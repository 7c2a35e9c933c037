//! `examples/embedded.rs`: robotsgate's enforcement inside someone else's Pingora proxy
//! (a reverse proxy here) blocks disallowed paths before they reach the origin.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::{eventually, free_port, TestOrigin};

fn example(name: &str) -> PathBuf {
    // `cargo test` builds examples next to the test binaries' profile directory.
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_robotsgate"));
    bin.parent()
        .expect("profile dir")
        .join("examples")
        .join(name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_enforcer_guards_a_reverse_proxy() {
    let origin =
        TestOrigin::robots("User-agent: ExampleBot\nDisallow: /private\nCrawl-delay: 0.5\n").await;
    let listen = format!("127.0.0.1:{}", free_port());
    let mut child = Command::new(example("embedded"))
        .args(["--listen", &listen, "--origin", &origin.addr.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("example binary built by cargo test");
    assert!(
        eventually(Duration::from_secs(20), || std::net::TcpStream::connect(
            &listen
        )
        .is_ok())
        .await
    );

    let client = reqwest::Client::new();
    let get = |path: &str| {
        client
            .get(format!("http://{listen}{path}"))
            .header("User-Agent", "ExampleBot/1.0")
            .send()
    };
    let private = get("/private/x").await.expect("request");
    let public = get("/public").await.expect("request");
    let again = get("/public/again").await.expect("request");
    let (private, public, again) = (
        private.status().as_u16(),
        public.status().as_u16(),
        again.status().as_u16(),
    );
    let _ = child.kill();
    let _ = child.wait();

    assert_eq!((private, public, again), (403, 200, 200));
    assert_eq!(origin.count("/private/x"), 0);
    assert_eq!(origin.count("/public"), 1);
    // The plugin paces too: the second page kept the Crawl-delay from the first's end.
    let seen = origin.seen();
    let first = seen.iter().find(|s| s.target == "/public").expect("first");
    let second = seen
        .iter()
        .find(|s| s.target == "/public/again")
        .expect("second");
    let gap = second.arrived.duration_since(first.done.expect("done"));
    assert!(gap >= Duration::from_millis(500), "{gap:?}");
}
