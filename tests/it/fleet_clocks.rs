//! The fleet against the clocks it trusts, kept at the origin: a takeover
//! asked for long after the owner vanished keeps the Crawl-delay from the owner's last
//! exchange (with the fleet's robots.txt copy, fresh or stale, and without it: the new
//! owner's robots.txt fetch keeps it too, by the copy's largest delay or the largest
//! delay it obeys), Redis' wall clock stepped forward under a crawl does not hand an origin
//! to a second member while its owner still acts, and an owner cut from Redis ages its
//! view of the members by its own clock (a vanished member's key opens nothing there
//! once its lease and the outage grace have run out).
//!
//! Real `redis-server`s and robotsgate processes; a vanished owner is SIGKILLed, a
//! partition is a relay the test cuts; Redis' clock is stepped by `clock_shim.c` (tests/helpers), a preload library that adds an
//! offset the test writes to a file to the wall clock Redis reads for `TIME`.

use std::time::Duration;

use tokio::time::Instant;

use crate::common::*;
use crate::fleet_fixture::{
    backend_up, certs, fleet_conf, instances, members, owner_index, owner_seen_by, short_fleet,
    signal, HttpsFleet, Relay,
};
use crate::redis_servers::{redis_cli, Redis};

/// The Crawl-delay of the takeover tests: longer than the lease plus the longest hold
/// of [`short_fleet`] (about 5 s), so that the bound a takeover waits for is past long
/// before the delay is.
const LONG_DELAY: u64 = 12;

/// Where the gap after `before` ends at the origin: the first request that arrived
/// after `before`'s arrival, and the gap from `before`'s end to it.
fn gap_after(origin: &TestOrigin, before: &str) -> (String, Duration) {
    let after = received_from(origin, before);
    let next = after
        .get(1)
        .unwrap_or_else(|| panic!("nothing reached the origin after {before}"));
    (next.target.clone(), gaps(&after[..2])[0])
}

/// Two members on `conf`: the first serves `/last-of-a` and so owns `origin`; then
/// `before_kill` runs, the owner is SIGKILLed, and nothing is asked for until well past
/// its lease (1.5 s) and longest hold (3 s), when the survivor is asked for
/// `/first-of-b` (curl's `--max-time`: `max_time` seconds). The survivor, once it
/// answered 200.
async fn kill_the_owner_and_ask_late(
    conf: &Conf,
    origin: &TestOrigin,
    before_kill: impl FnOnce(),
    max_time: u64,
) -> Proxy {
    let mut proxies = instances(2, conf);
    backend_up(&proxies).await;
    let first = curl(&proxies[0], &origin.url("/last-of-a"), &[]);
    assert_eq!(first.0, 200, "{first:?}\n{}", proxies[0].log());
    assert_eq!(owner_index(&proxies, origin), Some(0));
    before_kill();
    signal(proxies[0].pid(), "-KILL");
    let killed = Instant::now();
    drop(proxies.remove(0));
    // The schedule under test is a late request: time passing, not a wait for a state.
    tokio::time::sleep_until(killed + Duration::from_secs(8)).await;
    let survivor = proxies.remove(0);
    let max_time = max_time.to_string();
    let next = curl(
        &survivor,
        &origin.url("/first-of-b"),
        &["--max-time", &max_time],
    );
    assert_eq!(next.0, 200, "{next:?}\n{}", survivor.log());
    survivor
}

/// The owner SIGKILLed, and nothing asked for until well past its lease and longest
/// hold: the member that then takes the origin over (the fleet's robots.txt copy in
/// hand) still keeps the Crawl-delay from the dead owner's last page. The takeover's
/// bound (lease end plus the longest hold) is long past; the delay counts from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_asked_for_late_keeps_the_crawl_delay() {
    let redis = Redis::start();
    let origin = crate::fleet_fixture::paced_origin(&LONG_DELAY.to_string()).await;
    let conf = fleet_conf(&redis).with(&short_fleet("refuse"));
    let survivor = kill_the_owner_and_ask_late(&conf, &origin, || (), 30).await;
    let (target, gap) = gap_after(&origin, "/last-of-a");
    assert_eq!(
        target, "/first-of-b",
        "the fleet's robots.txt copy was used"
    );
    assert!(
        gap >= Duration::from_secs(LONG_DELAY),
        "the origin received the new owner's page {gap:?} after the dead owner's ended, \
         under a {LONG_DELAY} s Crawl-delay\n{}",
        survivor.log()
    );
    assert_eq!(
        crate::fleet_fixture::ownership_changes(&survivor, "taken_over"),
        1.0
    );
}

/// As above, with the fleet's robots.txt copy gone too (deleted,
/// as by a Redis that lost it): the new owner must fetch robots.txt without knowing the
/// Crawl-delay, so its fetch waits the largest delay it obeys (`pacing.ceiling_seconds`,
/// here the origin's own) past the takeover's bound. At the origin: the robots.txt
/// fetch, then the new owner's page, each at least the Crawl-delay after the one before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_without_the_robots_copy_keeps_the_crawl_delay() {
    let redis = Redis::start();
    let origin = crate::fleet_fixture::paced_origin(&LONG_DELAY.to_string()).await;
    let conf = fleet_conf(&redis)
        .with(&short_fleet("refuse"))
        .set("pacing.ceiling_seconds", LONG_DELAY);
    let delete_the_copy = || {
        let copy = crate::fleet_fixture::robots_copy_key(&origin);
        assert_eq!(redis_cli(redis.port, &["DEL", &copy]), "1");
    };
    kill_the_owner_and_ask_late(&conf, &origin, delete_the_copy, 90).await;
    let after = received_from(&origin, "/last-of-a");
    assert_eq!(
        targets(&after),
        ["/last-of-a", "/robots.txt", "/first-of-b"]
    );
    assert_gaps_at_least(&after, Duration::from_secs(LONG_DELAY));
}

/// As above, the fleet's robots.txt copy stale by then (its lifetime 5 s): the new
/// owner must fetch robots.txt, a request to the origin like its pages, and the fetch
/// keeps the Crawl-delay from the dead owner's last page, by the largest delay of the
/// stale copy in hand (the ceiling, 60 s, would outlast curl's wait). Before, the fetch
/// went as soon as asked, 8 s after that page, the takeover's bound long past. At the
/// origin: the robots.txt fetch, then the new owner's page, each at least the
/// Crawl-delay after the one before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_over_a_stale_robots_copy_keeps_the_crawl_delay_before_its_fetch() {
    let redis = Redis::start();
    let origin = crate::fleet_fixture::paced_origin(&LONG_DELAY.to_string()).await;
    let conf = fleet_conf(&redis)
        .with(&short_fleet("refuse"))
        .set("robots.ttl_seconds", 5)
        .set("robots.min_ttl_seconds", 5)
        .set("pacing.ceiling_seconds", 60);
    kill_the_owner_and_ask_late(&conf, &origin, || (), 45).await;
    let after = received_from(&origin, "/last-of-a");
    assert_eq!(
        targets(&after),
        ["/last-of-a", "/robots.txt", "/first-of-b"]
    );
    assert_gaps_at_least(&after, Duration::from_secs(LONG_DELAY));
}

/// `tests/helpers/clock_shim.c` built into `dir` with the system's compiler.
fn clock_shim(dir: &std::path::Path) -> std::path::PathBuf {
    let source =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/helpers/clock_shim.c");
    let shim = dir.join("clock_shim.so");
    let built = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(&shim)
        .arg(&source)
        .status()
        .expect("cc (installed by scripts/deps.sh)");
    assert!(built.success(), "clock_shim.c did not build");
    shim
}

/// Redis' wall clock stepped 30 s forward (past every lease and longest hold) while two
/// members crawl an origin the first owns, the owner cut from Redis at that moment (it
/// keeps serving until its lease ends by its own clock). To Redis the owner lapsed 30 s
/// ago, so the other member may take the origin over at once, while the owner still
/// serves it: the other member sees the step at its next renewal and fences takeovers,
/// its takeover waits for its confirmation and then for the fence, and the origin
/// receives no gap below the Crawl-delay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_clock_stepped_forward_keeps_one_owner_and_the_delay() {
    let dir = tempfile::tempdir().expect("tempdir");
    let offset = dir.path().join("offset");
    std::fs::write(&offset, "0").expect("offset");
    let redis = Redis::start_with_clock(&clock_shim(dir.path()), &offset);
    let mut relay = Relay::start(redis.port).await;
    let origin = crate::fleet_fixture::paced_origin("1").await;
    let through_relay = certs()
        .conf()
        .set("fleet.redis", format!("redis://127.0.0.1:{}", relay.port))
        .with(&short_fleet("refuse"));
    let proxies = vec![
        Proxy::start_for_loopback(&through_relay),
        Proxy::start_for_loopback(&fleet_conf(&redis).with(&short_fleet("refuse"))),
    ];
    backend_up(&proxies).await;
    assert_eq!(curl(&proxies[0], &origin.url("/p/first"), &[]).0, 200);
    assert_eq!(owner_index(&proxies, &origin), Some(0));
    let until = Instant::now() + Duration::from_secs(14);
    let step = async {
        let loaded = eventually(Duration::from_secs(10), || pages(&origin, "/p/").len() >= 4).await;
        assert!(loaded, "the load never reached the origin");
        relay.cut();
        std::fs::write(&offset, "30000").expect("step");
    };
    let crawled = [&origin];
    let (statuses, ()) = tokio::join!(
        crate::fleet_fixture::load(&proxies, &crawled, "/p/", 4, 2000, until),
        step
    );
    assert!(statuses.contains(&200), "{statuses:?}");
    let seen = pages(&origin, "/p/");
    assert!(seen.len() >= 6, "the crawl went on: {seen:#?}");
    assert_gaps_at_least(&seen, Duration::from_secs(1));
    let steps: f64 = proxies
        .iter()
        .map(|p| p.counter("robotsgate_fleet_redis_clock_steps_total"))
        .sum();
    assert!(
        steps >= 1.0,
        "no member saw the step:\n{}\n{}",
        proxies[0].log(),
        proxies[1].log()
    );
}

/// A member stopped between its turn and its request, resumed after another member took
/// the origin over, never sends it. The origin holds the member's TLS handshake (its
/// connect, which comes after the turn); the test SIGSTOPs the member there, waits until
/// the other member took the origin over and served a page, resumes it and lets the
/// handshake finish. The request is checked right before its head is written, given
/// back and answered 503; the origin never receives it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_stopped_between_its_turn_and_its_request_never_sends_it() {
    let conf = short_fleet("refuse")
        .set("upstream.http2", "off")
        .set("upstream.connect_timeout_seconds", 60);
    let fleet = HttpsFleet::start(&conf).await;
    let origin = fleet.origin("User-agent: *\nCrawl-delay: 1\n").await;
    let closing = Behaviour::with_headers(200, &[("Connection", "close")], "closing");
    origin.set("/first", closing);
    let through = |i: usize, path: &str| {
        fleet.curl(
            i,
            &origin.url(path),
            "operator-ca.pem",
            &["--max-time", "60"],
        )
    };
    let first = through(0, "/first");
    assert_eq!(first.0, 200, "{first:?}\n{}", fleet.member(0).log());
    assert_eq!(
        owner_seen_by(fleet.member(0), &origin).as_deref(),
        Some("here")
    );
    let handshake = origin.hold_next_handshake();
    let accepted = origin.accepted().len();
    let stopped_request = {
        let ca = fleet.setup.dir.path().join("operator-ca.pem");
        let (proxy, url) = (fleet.member(0).url(), origin.url("/second"));
        tokio::task::spawn_blocking(move || {
            let ca = ca.to_str().expect("path");
            let args = [
                "--cacert",
                ca,
                "--suppress-connect-headers",
                "--max-time",
                "60",
            ];
            curl_via(&proxy, &url, &args)
        })
    };
    let connecting = eventually(Duration::from_secs(10), || {
        origin.accepted().len() > accepted
    })
    .await;
    assert!(
        connecting,
        "no connect for /second\n{}",
        fleet.member(0).log()
    );
    signal(fleet.member(0).pid(), "-STOP");
    // The stopped member's lease lapses; the other member takes the origin over.
    let lapsed = eventually(Duration::from_secs(15), || members(fleet.member(1)) == 1).await;
    let third = through(1, "/third");
    signal(fleet.member(0).pid(), "-CONT");
    assert!(
        lapsed,
        "the stopped member never lapsed\n{}",
        fleet.member(1).log()
    );
    assert_eq!(third.0, 200, "{third:?}\n{}", fleet.member(1).log());
    assert_eq!(
        owner_seen_by(fleet.member(1), &origin).as_deref(),
        Some("here")
    );
    handshake.add_permits(1);
    let (status, _, body) = stopped_request.await.expect("the stopped member's request");
    assert_eq!(status, 503, "{body}\n{}", fleet.member(0).log());
    assert_eq!(
        origin.count("/second"),
        0,
        "sent after all: {:?}",
        origin.seen()
    );
    assert_eq!(origin.count("/third"), 1);
}

/// An owner ages its view of the members by its own clock, and takes a member's word
/// for as long as that member may still act: its lease, then the outage grace
/// (`keep_owned`: a member cut from Redis acts that long past its lease, so a stall
/// shorter than the grace loses nothing). Cut from Redis, the owner cannot learn that a
/// member vanished; its key is still served past its lease, within the grace, and once
/// both have run out by the owner's clock it opens nothing there, while the owner, cut
/// later than the member vanished, still serves its own clients the origin. Before the
/// aging, the owner's view stayed frozen at its last renewal, and the vanished member's
/// key was served for as long as the owner kept its origins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vanished_members_key_opens_nothing_at_an_owner_cut_from_redis() {
    use crate::fleet_fixture::{as_peer_at, Credential};
    let redis = Redis::start();
    let mut relay = Relay::start(redis.port).await;
    let origin = crate::fleet_fixture::paced_origin("0").await;
    let (lease, grace) = (5, 6);
    let keeps = short_fleet("keep_owned")
        .set("fleet.lease_seconds", lease)
        .set("fleet.outage_grace_seconds", grace);
    let through_relay = certs()
        .conf()
        .set("fleet.redis", format!("redis://127.0.0.1:{}", relay.port))
        .with(&keeps);
    let mut proxies = vec![
        Proxy::start_for_loopback(&through_relay),
        Proxy::start_for_loopback(&fleet_conf(&redis).with(&keeps)),
    ];
    backend_up(&proxies).await;
    assert_eq!(curl(&proxies[0], &origin.url("/first"), &[]).0, 200);
    assert_eq!(owner_index(&proxies, &origin), Some(0));
    let stolen = Credential::of(&proxies[1]);
    let context = r#"{"c":"127.0.0.1"}"#;
    let owner_peer = proxies[0].peer;
    let ask = |n: usize| {
        let target = origin.url(&format!("/stolen/{n}"));
        as_peer_at(owner_peer, &stolen.cert, &stolen.key, &target, context)
    };
    assert_eq!(ask(0), 200, "the live member's key is served");
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &proxies[1].pid().to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    let vanished = std::time::Instant::now();
    proxies[1].wait_exit(Duration::from_secs(10));
    // Cut 3.5 s later: the owner's last view still has the member live (its record
    // lapses in Redis 5 s after its last renewal), and the owner's own lease and grace
    // run 3.5 s longer than the member's.
    std::thread::sleep(Duration::from_millis(3500).saturating_sub(vanished.elapsed()));
    relay.cut();
    let served_after_its_lease = Duration::from_secs(lease + 1);
    std::thread::sleep(served_after_its_lease.saturating_sub(vanished.elapsed()));
    assert_eq!(
        ask(1),
        200,
        "revoked within the grace:\n{}",
        proxies[0].log()
    );
    let deadline = vanished + Duration::from_secs(lease + grace + 2);
    let mut n = 2;
    let refused_at = loop {
        let status = ask(n);
        if status != 200 {
            // Its record lapses in Redis within half a second (a renewal) of its lease
            // after the kill: never refused before that, and the grace.
            let lapsed = Duration::from_secs_f64(lease as f64 - 0.5 + grace as f64);
            assert!(vanished.elapsed() >= lapsed, "refused within its grace");
            break n;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "a vanished member's key still served at an owner cut from Redis:\n{}",
            proxies[0].log()
        );
        n += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // The owner itself still serves the origin: the refusal is the member's lapse.
    assert_eq!(curl(&proxies[0], &origin.url("/own"), &[]).0, 200);
    assert_eq!(origin.count("/own"), 1);
    for later in refused_at + 1..refused_at + 3 {
        assert_ne!(
            ask(later),
            200,
            "served again after its lease and grace ran out"
        );
    }
    for later in refused_at..refused_at + 3 {
        assert_eq!(origin.count(&format!("/stolen/{later}")), 0);
    }
}
