//! Ownership follows traffic (`fleet.follow_traffic_seconds`): an origin whose requests
//! all come handed over from one other member is handed to that member with its facts,
//! and a request handed to an owner that gave its origin up is routed once more instead
//! of refused. Real `redis-server`, real members on loopback, an origin that logs when
//! each request arrives and ends.

use std::time::Duration;

use tokio::time::Instant;

use crate::common::{
    assert_gaps_at_least, curl, eventually, most_at_once, pages, Behaviour, Proxy, TestOrigin,
};
use crate::fleet_fixture::{
    access_lines, backend_up, fleet_conf, handed_on, handed_over_reaching, instances, load,
    member_id, members_up, owner_index, ownership_changes, paced_origin, signal, slow_origin,
    Relay,
};
use crate::redis_servers::{redis_cli, Redis};

/// Two members of one Redis that follow traffic every `follow` seconds (0: never), and
/// `page` of `origin` fetched through the first, which so owns it. The Redis is kept.
async fn owned_by_the_first(follow: f64, origin: &TestOrigin, page: &str) -> (Redis, Vec<Proxy>) {
    let redis = Redis::start();
    let conf = fleet_conf(&redis).set("fleet.follow_traffic_seconds", follow);
    let proxies = instances(2, &conf);
    backend_up(&proxies).await;
    assert_eq!(curl(&proxies[0], &origin.url(page), &[]).0, 200);
    assert_eq!(owner_index(&proxies, origin), Some(0));
    (redis, proxies)
}

/// `proxy`'s log lines about refusals and the fleet, for a failure's message.
fn refusals(proxy: &Proxy) -> String {
    let log = proxy.log();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("status=503") || l.contains("fleet:") || l.contains("WARN"))
        .collect();
    lines.join("\n")
}

/// An origin crawled through both members stays with its owner; once its requests all
/// come through the other member, it moves there within a few windows. Across the move
/// no request is refused (those the old owner receives after it let go are routed
/// again by the member that handed them), every request reaches the origin once, and
/// the Crawl-delay holds at the origin; afterwards nothing is handed over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origin_follows_its_traffic_to_the_member_it_comes_from() {
    let origin = paced_origin("0.1").await;
    let (_redis, proxies) = owned_by_the_first(1.0, &origin, "/p/first").await;

    // Through both members for three windows: the owner keeps it.
    let until = Instant::now() + Duration::from_secs(3);
    let mixed = load(&proxies, &[&origin], "/p/mixed-", 2, 60, until).await;
    assert!(mixed.iter().all(|&s| s == 200), "{mixed:?}");
    assert_eq!(owner_index(&proxies, &origin), Some(0), "mixed traffic");
    assert_eq!(ownership_changes(&proxies[0], "followed"), 0.0);

    // Through member 1 only, three clients at once: it moves to member 1.
    let until = Instant::now() + Duration::from_secs(6);
    let only = load(&proxies[1..], &[&origin], "/p/only-", 3, 120, until).await;
    assert!(
        only.iter().all(|&s| s == 200),
        "refused on the way: {only:?}\n{}\n{}",
        refusals(&proxies[0]),
        refusals(&proxies[1])
    );
    let moved = eventually(Duration::from_secs(10), || {
        owner_index(&proxies, &origin) == Some(1)
    })
    .await;
    assert!(moved, "never moved:\n{}", proxies[0].log());
    assert_eq!(ownership_changes(&proxies[0], "followed"), 1.0);
    assert_eq!(
        ownership_changes(&proxies[1], "handed"),
        1.0,
        "taken as handed over"
    );

    // Served where it arrives now: each one's access line at member 1 (written a few
    // milliseconds after its answer) says it was not handed over.
    let until = Instant::now() + Duration::from_secs(3);
    let after = load(&proxies[1..], &[&origin], "/p/after-", 2, 10, until).await;
    assert!(after.iter().all(|&s| s == 200), "{after:?}");
    let lines = || access_lines(&proxies[1], "/p/after-");
    eventually(Duration::from_secs(10), || lines().len() >= after.len()).await;
    let served = lines();
    assert_eq!(served.len(), after.len(), "one access line each");
    assert!(
        !served.iter().any(|l| handed_on(l)),
        "handed over after the move: {served:#?}"
    );

    let seen = pages(&origin, "/p/");
    let sent = 1 + mixed.len() + only.len() + after.len();
    assert_eq!(seen.len(), sent, "every request reached the origin once");
    assert_gaps_at_least(&seen, Duration::from_millis(100));
    assert!(most_at_once(&seen) <= 1, "one at a time");
    assert_eq!(origin.count("/robots.txt"), 1);
}

/// With `fleet.follow_traffic_seconds: 0` ownership never follows: the origin stays
/// with the member that met it first, and its requests keep being handed to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_following_an_origin_stays_with_its_first_owner() {
    let origin = paced_origin("0").await;
    let (_redis, proxies) = owned_by_the_first(0.0, &origin, "/p/first").await;
    let until = Instant::now() + Duration::from_secs(2);
    let only = load(&proxies[1..], &[&origin], "/p/only-", 2, 40, until).await;
    assert!(only.iter().all(|&s| s == 200), "{only:?}");
    assert_eq!(owner_index(&proxies, &origin), Some(0));
    let sent = only.len() as f64;
    assert_eq!(handed_over_reaching(&proxies[1], sent).await, sent);
    assert_eq!(
        pages(&origin, "/p/only-").len(),
        only.len(),
        "each reached it once"
    );
    assert_eq!(ownership_changes(&proxies[0], "followed"), 0.0);
}

/// The owner leaves gracefully (SIGTERM) while another member hands it requests: none
/// of them is refused. Those the leaver receives once it has let go of the origin are
/// routed once more by the member that sent them, which then owns the origin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_handed_to_a_leaving_owner_are_routed_again() {
    let origin = paced_origin("0").await;
    routed_again_during_a_leave(&origin, "/p/").await;
}

/// As above, with exchanges of 300 ms still running when the owner starts leaving: the
/// other member learns that it leaves before it has handed the origin over, and still
/// hands it requests (it holds them until then, then refuses them) rather than
/// refusing them itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_handed_to_an_owner_leaving_slowly_are_routed_again() {
    let origin = slow_origin("/s/", 200).await;
    routed_again_during_a_leave(&origin, "/s/").await;
}

/// Requests queued at the owner for their turns (Crawl-delay: 3) when it leaves
/// gracefully are not refused, nor do they hold the hand-over back: they stop waiting
/// there, and are routed once more, to the member that stays, which takes the origin
/// well before their turns are due and paces them from the facts handed over. The
/// origin sees each once, a Crawl-delay apart, across the change of owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_queued_at_a_leaving_owner_are_routed_to_the_next() {
    let delay = Duration::from_secs(3);
    let origin = paced_origin("3").await;
    // Time for the requests handed on to end once the leaver's shutdown begins.
    let (_redis, mut proxies, queued) = queued_at_the_owner(&origin, 20, 2, Through::Owner).await;
    signal(proxies[0].pid(), "-TERM");
    let moved = eventually(Duration::from_secs(10), || {
        owner_index(&proxies, &origin) == Some(1)
    });
    assert!(
        moved.await,
        "never handed over:\nthe leaver:\n{}\nthe member that stays:\n{}",
        proxies[0].log(),
        proxies[1].log()
    );
    let moved_at = std::time::Instant::now();
    let answered = answers(queued, &proxies[0]).await;
    assert!(
        answered.iter().all(|a| a.1 == 200),
        "{answered:?}\n{}\nthe member that stays:\n{}",
        refusals(&proxies[0]),
        proxies[1].log()
    );
    let mut leaver = proxies.remove(0);
    assert!(eventually(Duration::from_secs(20), || leaver.exited()).await);
    assert_eq!(
        owner_index(&proxies, &origin),
        Some(0),
        "the member that stays"
    );
    let seen = pages(&origin, "/p/");
    assert_eq!(seen.len(), 3, "each reached it once");
    assert_gaps_at_least(&seen, delay);
    assert!(
        moved_at + Duration::from_secs(1) < seen[0].arrived + delay,
        "the hand-over waited for the queued turns"
    );
}

/// Requests queued at an owner that is upgraded (SIGQUIT, a new process taking its
/// listeners, as the unit's reload does): the old process hands the origin over and
/// leaves the membership before it gives its listeners up, and the requests queued at
/// it go to the next owner (the member that stays, or the new process), which admits
/// them and answers 200 within the old process's bound (5 s and `grace_period_seconds:
/// 4`). At the origin each once, a Crawl-delay apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_queued_at_an_upgraded_owner_are_answered() {
    let delay = Duration::from_secs(3);
    let origin = paced_origin("3").await;
    let (_redis, mut proxies, queued) = queued_at_the_owner(&origin, 4, 2, Through::Owner).await;
    let mut old = Going::Upgraded.go(&mut proxies);
    let answered = answers(queued, &old).await;
    assert!(
        answered.iter().all(|a| a.1 == 200),
        "{answered:?}\nthe old process:\n{}\nthe new one:\n{}\nthe member that stays:\n{}",
        old.log(),
        proxies[0].log(),
        proxies[1].log()
    );
    assert!(eventually(Duration::from_secs(30), || old.exited()).await);
    let seen = pages(&origin, "/p/");
    assert_eq!(seen.len(), 3, "each reached it once");
    assert_gaps_at_least(&seen, delay);
}

/// An upgrade whose new process starts late: the old process handed its origin over
/// and still accepts (Pingora's old process keeps its listeners until the new one takes
/// them). It stays a member, `leaving`, until Pingora stopped it, so the member that
/// stays admits what it hands on meanwhile (a member that left hands nothing over): the
/// request queued at it and one it accepts after its leave, before its successor
/// registered, both answered 200 (Crawl-delay 3, `grace_period_seconds: 4`). At the
/// origin each once, a Crawl-delay apart; once the old process exited its record reads
/// `left`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgraded_owner_hands_over_until_it_ends() {
    let delay = Duration::from_secs(3);
    let origin = paced_origin("3").await;
    let (redis, mut proxies, queued) = queued_at_the_owner(&origin, 4, 1, Through::Owner).await;
    let id = member_id(&proxies[0]);
    signal(proxies[0].pid(), "-QUIT");
    let left = eventually(Duration::from_secs(10), || {
        proxies[0].log().contains("origins handed over")
    });
    assert!(left.await, "never left:\n{}", proxies[0].log());
    let (client, url) = (proxies[0].client(), origin.url("/p/late"));
    let late = tokio::spawn(async move { client.get(url).send().await.map(|r| r.status()) });
    let handed = eventually(Duration::from_secs(10), || {
        late.is_finished() || proxies[1].metric("robotsgate_pacing_queued_requests") == Some(2.0)
    });
    assert!(handed.await, "never handed on:\n{}", proxies[0].log());
    let next = tokio::task::block_in_place(|| proxies[0].upgrade_begun());
    let mut old = std::mem::replace(&mut proxies[0], next);
    let late = late.await.expect("task").map_err(|e| e.to_string());
    let answered = answers(queued, &old).await;
    assert!(
        answered.iter().all(|a| a.1 == 200) && late == Ok(reqwest::StatusCode::OK),
        "{answered:?} {late:?}\nthe old process:\n{}\nthe member that stays:\n{}",
        old.log(),
        proxies[1].log()
    );
    assert!(eventually(Duration::from_secs(30), || old.exited()).await);
    let record = redis_cli(redis.port, &["HGET", "{robotsgate}:members", &id]);
    assert_eq!(record.split('|').nth(2), Some("left"), "{}", old.log());
    let seen = pages(&origin, "/p/");
    assert_eq!(seen.len(), 3, "each reached it once");
    assert_gaps_at_least(&seen, delay);
}

/// How the owner goes: stopped (SIGTERM) or upgraded (SIGQUIT and a new process
/// taking its listeners).
#[derive(Clone, Copy)]
enum Going {
    Stopped,
    Upgraded,
}

impl Going {
    /// Makes `proxies[0]` go this way; returns the process that goes (after an upgrade
    /// the new one takes its place in `proxies`, after a stop none does).
    fn go(self, proxies: &mut Vec<Proxy>) -> Proxy {
        match self {
            Going::Stopped => {
                signal(proxies[0].pid(), "-TERM");
                proxies.remove(0)
            }
            Going::Upgraded => {
                let next = tokio::task::block_in_place(|| proxies[0].upgrade());
                std::mem::replace(&mut proxies[0], next)
            }
        }
    }
}

/// More requests queued at a leaving owner than its bound lets the next owner serve
/// (Crawl-delay 1): each is answered, 200 through the next owner or 503 with
/// `Retry-After` before the leaver ends; none is closed unanswered. At the origin: each
/// page at most once, each page answered 200 seen there, a Crawl-delay apart.
async fn every_request_accepted_is_answered(going: Going, stop_within: u64, n: usize) {
    let origin = paced_origin("1").await;
    let (_redis, mut proxies, queued) =
        queued_at_the_owner(&origin, stop_within, n, Through::Owner).await;
    let leaver = going.go(&mut proxies);
    each_answered_once(queued, leaver, &origin, Duration::from_secs(1)).await;
}

/// `queued`'s answers, each 200 through its owner or 503 with `Retry-After` (some
/// 503: the bound was reached), none closed unanswered, once `leaver`, the process
/// they were sent through, exited; at `origin` each page at most once, each answered
/// 200 seen there, `delay` apart.
async fn each_answered_once(
    queued: Vec<Queued>,
    mut leaver: Proxy,
    origin: &TestOrigin,
    delay: Duration,
) {
    let answered = answers(queued, &leaver).await;
    assert!(eventually(Duration::from_secs(30), || leaver.exited()).await);
    let seen = pages(origin, "/p/");
    for (path, status, retry) in &answered {
        let times = seen.iter().filter(|p| p.target == *path).count();
        match status {
            200 => assert_eq!(times, 1, "{path} answered 200"),
            503 => assert!(*retry && times <= 1, "{path}: 503 without Retry-After"),
            other => panic!("{path}: {other}\n{}", refusals(&leaver)),
        }
    }
    assert!(
        answered.iter().any(|(_, status, _)| *status == 503),
        "the bound was never reached: {answered:?}"
    );
    assert_gaps_at_least(&seen, delay);
}

/// A stop's bound: `graceful_shutdown_timeout_seconds: 3`, eight queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_a_leaving_owner_accepted_is_answered() {
    every_request_accepted_is_answered(Going::Stopped, 3, 8).await;
}

/// An upgrade's: the old process is dropped 5 s and `grace_period_seconds: 1` after it
/// hands its listeners over; ten queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_an_upgraded_owner_accepted_is_answered() {
    every_request_accepted_is_answered(Going::Upgraded, 1, 10).await;
}

/// Requests a member handed to their owner before it was stopped (SIGTERM,
/// `graceful_shutdown_timeout_seconds: 3`), four queued there under Crawl-delay 2: the
/// stop's bound ends their wait for the owner's answer too, so each is answered before
/// the member ends, none closed unanswered. `through`: the path they took.
async fn every_request_a_stopping_member_handed_over_is_answered(through: Through) {
    let origin = paced_origin("2").await;
    let (_redis, mut proxies, queued) = queued_at_the_owner(&origin, 3, 4, through).await;
    signal(proxies[1].pid(), "-TERM");
    let member = proxies.remove(1);
    each_answered_once(queued, member, &origin, Duration::from_secs(2)).await;
}

/// On the proxy pass (the member's first requests for the origin).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_a_stopping_member_passed_on_is_answered() {
    every_request_a_stopping_member_handed_over_is_answered(Through::Passed).await;
}

/// Relayed by the front (the member knows the owner).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_a_stopping_member_relayed_is_answered() {
    every_request_a_stopping_member_handed_over_is_answered(Through::Relayed).await;
}

/// Which member queued requests are sent through, and how they reach the owner.
#[derive(Clone, Copy, PartialEq)]
enum Through {
    /// The owner itself.
    Owner,
    /// The other member, its first requests for the origin: the proxy pass.
    Passed,
    /// The other member, once one request taught it the owner: the front's relay.
    Relayed,
}

/// A queued request's answer: its path, status and whether it had `Retry-After`; or
/// the client's error.
type Queued = tokio::task::JoinHandle<Result<(String, u16, bool), String>>;

/// `queued`'s answers, in order; a client's error (a connection closed unanswered)
/// fails the test, with the log of `leaver`, the process the requests were queued at.
async fn answers(queued: Vec<Queued>, leaver: &Proxy) -> Vec<(String, u16, bool)> {
    let mut answered = Vec::new();
    for task in queued {
        let answer = task.await.expect("task");
        answered.push(answer.unwrap_or_else(|e| panic!("{e}\nthe leaver:\n{}", leaver.log())));
    }
    answered
}

/// Two members of one Redis (`graceful_shutdown_timeout_seconds` and
/// `grace_period_seconds`: `stop_within`),
/// `origin` owned by the first, and `n` requests (`/p/queued-{i}`) sent `through` a
/// member waiting there for their turns. The Redis is kept.
async fn queued_at_the_owner(
    origin: &TestOrigin,
    stop_within: u64,
    n: usize,
    through: Through,
) -> (Redis, Vec<Proxy>, Vec<Queued>) {
    let redis = Redis::start();
    // Renewals every half second: the member that stays reads the leaver's record again
    // before the leaver hands the queued requests on (it is still a member then).
    let conf = fleet_conf(&redis)
        .set("fleet.lease_seconds", 1.5)
        .server("graceful_shutdown_timeout_seconds", stop_within)
        .server("grace_period_seconds", stop_within);
    let proxies = instances(2, &conf);
    backend_up(&proxies).await;
    assert_eq!(curl(&proxies[0], &origin.url("/p/first"), &[]).0, 200);
    assert_eq!(owner_index(&proxies, origin), Some(0));
    if through == Through::Relayed {
        assert_eq!(curl(&proxies[1], &origin.url("/p/known"), &[]).0, 200);
    }
    let client = proxies[usize::from(through != Through::Owner)].client();
    let queued: Vec<Queued> = (0..n)
        .map(|i| {
            let (client, path) = (client.clone(), format!("/p/queued-{i}"));
            let url = origin.url(&path);
            tokio::spawn(async move {
                let answer = client.get(url).send().await.map_err(|e| e.to_string())?;
                let retry = answer.headers().get("retry-after").is_some();
                Ok((path, answer.status().as_u16(), retry))
            })
        })
        .collect();
    let waiting = eventually(Duration::from_secs(5), || {
        proxies[0].metric("robotsgate_pacing_queued_requests") == Some(n as f64)
    });
    assert!(waiting.await, "never queued");
    (redis, proxies, queued)
}

/// Two members; `origin` owned by the first, crawled through the second (`{prefix}{i}`)
/// while the first leaves (SIGTERM): every request answered 200 and seen once at the
/// origin, the origin handed over, and owned by the member that stays.
async fn routed_again_during_a_leave(origin: &TestOrigin, prefix: &str) {
    let first = format!("{prefix}first");
    let (_redis, mut proxies) = owned_by_the_first(0.0, origin, &first).await;
    let until = Instant::now() + Duration::from_secs(5);
    let targets = [origin];
    let leave = async {
        let handed = eventually(Duration::from_secs(10), || pages(origin, prefix).len() >= 5);
        assert!(handed.await, "the load never reached the origin");
        signal(proxies[0].pid(), "-TERM");
    };
    let (statuses, ()) = tokio::join!(load(&proxies[1..], &targets, prefix, 2, 150, until), leave);
    assert!(
        statuses.iter().all(|&s| s == 200),
        "refused: {:?}\n{}\nthe leaver:\n{}",
        statuses.iter().filter(|&&s| s != 200).collect::<Vec<_>>(),
        refusals(&proxies[1]),
        refusals(&proxies[0])
    );
    let mut leaver = proxies.remove(0);
    assert!(eventually(Duration::from_secs(20), || leaver.exited()).await);
    assert!(
        leaver.log().contains("1 origins handed over"),
        "{}",
        leaver.log()
    );
    assert_eq!(
        owner_index(&proxies, origin),
        Some(0),
        "the member that stays"
    );
    assert_eq!(
        pages(origin, prefix).len(),
        statuses.len() + 1,
        "each reached it once"
    );
}

/// The owner hands an origin to the member whose traffic it follows, and that member
/// has not routed a request for it since (it still takes the old owner for the owner):
/// a request through the old owner goes to the heir, which finds the claim its own in
/// Redis and serves it, rather than both sending it back and forth.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_through_the_old_owner_reaches_an_heir_that_has_not_taken_over_yet() {
    let origin = paced_origin("0").await;
    let (_redis, proxies) = owned_by_the_first(0.5, &origin, "/p/first").await;
    for i in 0..16 {
        assert_eq!(
            curl(&proxies[1], &origin.url(&format!("/p/via-{i}")), &[]).0,
            200
        );
    }
    let followed = eventually(Duration::from_secs(5), || {
        ownership_changes(&proxies[0], "followed") == 1.0
    });
    assert!(followed.await, "never handed on:\n{}", proxies[0].log());
    assert_eq!(
        owner_index(&proxies, &origin),
        None,
        "the heir has not taken it yet"
    );
    let (status, head, _) = curl(&proxies[0], &origin.url("/p/old-owner"), &[]);
    assert_eq!(status, 200, "{head}");
    assert_eq!(owner_index(&proxies, &origin), Some(1));
    assert_eq!(origin.count("/p/old-owner"), 1);
}

/// A member stopped (SIGTERM; it owns nothing) while a request it handed over still
/// runs stays a member, `leaving`, while it drains (its owner still admits what it hands
/// on), then leaves: its record in Redis reads `left` from then on, and is never
/// registered anew by a renewal it would still send (which would make it a member
/// again, under a new epoch).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_left_is_never_registered_again_before_it_exits() {
    let slow = Behaviour::Delayed {
        delay: Duration::from_secs(3),
        body: b"slow\n".to_vec(),
    };
    let origin = TestOrigin::robots_and("User-agent: *\n", vec![("/slow", slow)]).await;
    let redis = Redis::start();
    // Renewals every half second; time for the handed request to end at the stop.
    let conf = fleet_conf(&redis)
        .set("fleet.lease_seconds", 1.5)
        .server("graceful_shutdown_timeout_seconds", 20);
    let mut proxies = instances(2, &conf);
    backend_up(&proxies).await;
    assert_eq!(curl(&proxies[0], &origin.url("/first"), &[]).0, 200);
    assert_eq!(owner_index(&proxies, &origin), Some(0));
    let mut leaver = proxies.remove(1);
    let id = member_id(&leaver);
    let (client, url) = (leaver.client(), origin.url("/slow"));
    let handed = tokio::spawn(async move { client.get(url).send().await.map(|r| r.status()) });
    assert!(eventually(Duration::from_secs(5), || origin.count("/slow") == 1).await);
    signal(leaver.pid(), "-TERM");
    // Its record, read until the process exits (the handed request keeps it running).
    let mut states = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(15);
    let state = || {
        let record = redis_cli(redis.port, &["HGET", "{robotsgate}:members", &id]);
        record.split('|').nth(2).unwrap_or("gone").to_string()
    };
    let mut exited = false;
    while !exited && Instant::now() < deadline {
        // Read once more after it exits: it leaves just before.
        exited = leaver.exited();
        let state = state();
        if states.last() != Some(&state) {
            states.push(state);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(exited, "never exited:\n{}", leaver.log());
    assert!(
        states.iter().any(|s| s == "leaving"),
        "not a member while it drained: {states:?}"
    );
    let answer = handed.await.expect("task").map_err(|e| e.to_string());
    assert_eq!(answer, Ok(reqwest::StatusCode::OK));
    let left = states.iter().position(|s| s == "left");
    let left = left.unwrap_or_else(|| panic!("never marked left: {states:?}"));
    assert!(
        states[left..].iter().all(|s| s == "left" || s == "gone"),
        "registered again after its leave: {states:?}\n{}",
        leaver.log()
    );
}

/// A stop's deadline counts from the signal, the leave included: an owner whose origin
/// drips its answer (an exchange that may hold its turn for 30 s) is stopped with a 2 s
/// bound, and exits within that bound and the membership's leave (5 s), as the unit's
/// `TimeoutStopSec` assumes (`systemd::the_units_stop_timeout_covers_the_drain_and_the_leave`),
/// the dripping exchange cut and its origin left to lapse, not handed over mid-exchange.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_exchange_takes_its_time_from_the_stops_bound_not_beyond_it() {
    let drip = Behaviour::Trickle {
        body: vec![b'x'; 200],
        every: Duration::from_millis(200),
    };
    let origin = TestOrigin::robots_and("User-agent: *\n", vec![("/drip", drip)]).await;
    let redis = Redis::start();
    let conf = fleet_conf(&redis)
        .set("pacing.max_exchange_seconds", 30)
        .server("graceful_shutdown_timeout_seconds", 2);
    let mut proxies = instances(1, &conf);
    backend_up(&proxies).await;
    let (client, url) = (proxies[0].client(), origin.url("/drip"));
    let dripping = tokio::spawn(async move {
        let response = client.get(url).send().await?;
        response.bytes().await.map(|b| b.len())
    });
    assert!(eventually(Duration::from_secs(5), || origin.count("/drip") == 1).await);
    signal(proxies[0].pid(), "-TERM");
    // The bound (2 s), the leave of the membership (`LEFT_WITHIN`, 5 s), and 3 s for
    // the process to end: before the fix the leave alone waited for the exchange.
    proxies[0].wait_exit(Duration::from_secs(10));
    assert!(
        origin.first("/drip").done.is_none(),
        "the exchange ended before the stop"
    );
    let got = dripping.await.expect("task");
    assert!(!matches!(got, Ok(200)), "the whole answer came: {got:?}");
    let log = proxies[0].log();
    assert!(log.contains("left to lapse"), "{log}");
}

/// A leaving owner whose release Redis does not answer (its link to Redis cut as it
/// leaves, restored once it has tried) sends the release again, so its origin passes
/// on while it still drains (a handed request of 12 s keeps it running): the member
/// that stays takes the origin as handed, with its facts, and serves it before the
/// leaver's last exchange ends, where before it got 503 ("kept giving up") until the
/// leaver left the membership, and then waited as for a vanished owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_redis_did_not_answer_during_a_leave_is_sent_again() {
    let slow = Behaviour::Delayed {
        delay: Duration::from_secs(12),
        body: b"slow\n".to_vec(),
    };
    let draining = TestOrigin::robots_and("User-agent: *\n", vec![("/slow", slow)]).await;
    let owned = TestOrigin::robots_and("User-agent: *\n", Vec::new()).await;
    let redis = Redis::start();
    let mut relay = Relay::start(redis.port).await;
    // A lease that outlasts the cut: the leaver stays a live member throughout.
    let conf = fleet_conf(&redis)
        .set("fleet.lease_seconds", 3)
        .server("graceful_shutdown_timeout_seconds", 20);
    let relayed = format!("redis://127.0.0.1:{}", relay.port);
    let mut leaver = Proxy::start_for_loopback(&conf.clone().set("fleet.redis", relayed));
    let stays = Proxy::start_for_loopback(&conf);
    members_up(&[&leaver, &stays]).await;
    assert_eq!(curl(&leaver, &owned.url("/first"), &[]).0, 200);
    assert_eq!(curl(&stays, &draining.url("/first"), &[]).0, 200);
    let (client, url) = (leaver.client(), draining.url("/slow"));
    let handed = tokio::spawn(async move { client.get(url).send().await.map(|r| r.status()) });
    assert!(eventually(Duration::from_secs(5), || draining.count("/slow") == 1).await);
    relay.cut();
    signal(leaver.pid(), "-TERM");
    let missed = eventually(Duration::from_secs(5), || {
        leaver.log().contains("Redis did not answer the release")
    });
    assert!(missed.await, "the release was answered:\n{}", leaver.log());
    relay.restore();
    let served = eventually(Duration::from_secs(8), || {
        curl(&stays, &owned.url("/after"), &["--max-time", "3"]).0 == 200
    });
    assert!(
        served.await,
        "the origin never passed on:\nthe leaver:\n{}\nthe member that stays:\n{}",
        leaver.log(),
        stays.log()
    );
    let (after, slow) = (owned.first("/after"), draining.first("/slow"));
    assert!(
        slow.done.is_none_or(|done| after.arrived < done),
        "served only once the leaver's last exchange ended"
    );
    // Its log is written by a thread of its own: read until the line is there.
    let resent = eventually(Duration::from_secs(5), || {
        leaver.log().contains("was answered after")
    });
    assert!(resent.await, "{}", leaver.log());
    let changes = (
        ownership_changes(&stays, "handed"),
        ownership_changes(&stays, "taken_over"),
    );
    assert_eq!(changes, (1.0, 0.0), "handed over, not taken over");
    let answer = handed.await.expect("task").map_err(|e| e.to_string());
    assert_eq!(answer, Ok(reqwest::StatusCode::OK));
    leaver.wait_exit(Duration::from_secs(15));
}
