//! The routing guide, tested: HAProxy (Debian's `haproxy`) in front of the fleet sends
//! each host to one member (`balance hdr(host)`, `hash-type consistent`), which meets
//! the host first and so owns it: almost nothing is handed over. A CONNECT carries its
//! host in `Host` too, so tunnels (intercepted here) are routed the same way.

use std::time::Duration;

use tokio::time::Instant;

use crate::common::{curl_via, eventually, Conf, Proxy, TestOrigin};
use crate::fleet_fixture::{
    access_lines, backend_up, fleet_conf, handed_on, handed_over, instances, owner_seen_by,
    ownership_changes, paced_origin, HttpsFleet,
};
use crate::haproxy_front::Front;
use crate::redis_servers::Redis;

/// Three members behind HAProxy routing by host, twenty origins, 600 requests: at most
/// 1% handed over, and every origin owned by exactly the member HAProxy sends it to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn haproxy_routing_by_host_hands_over_at_most_one_percent() {
    let redis = Redis::start();
    let members = instances(3, &fleet_conf(&redis));
    backend_up(&members).await;
    let front = Front::start(&members.iter().collect::<Vec<_>>());
    let mut origins: Vec<TestOrigin> = Vec::new();
    for _ in 0..20 {
        origins.push(paced_origin("0").await);
    }
    let client = front.client();
    let until = Instant::now() + Duration::from_secs(60);
    let answered = crawl(&client, &origins, "/r/", 30, until).await;
    assert!(answered >= 590, "{answered} of 600 answered");
    let handed = all_handed_over(&members.iter().collect::<Vec<_>>());
    println!("{handed} of {answered} requests handed over behind HAProxy");
    assert!(
        handed <= answered as f64 * 0.01,
        "{handed} of {answered} handed over"
    );
    for origin in &origins {
        assert_eq!(origin.count("/r/0"), 1);
    }
}

/// A member joins behind the front, and the operator reloads the front with it: the
/// front now sends about a third of the hosts to the new member, whose requests for them
/// are first handed to their old owners; ownership follows them there
/// (`fleet.follow_traffic_seconds`), and once it has, at most 1% is handed over again.
/// Every request reaches its origin once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_haproxy_ownership_follows_the_hosts_a_new_member_gets() {
    let redis = Redis::start();
    let following = fleet_conf(&redis).set("fleet.follow_traffic_seconds", 1);
    let members = instances(3, &following);
    backend_up(&members).await;
    let all: Vec<&Proxy> = members.iter().collect();
    let mut origins: Vec<TestOrigin> = Vec::new();
    for _ in 0..20 {
        origins.push(paced_origin("0").await);
    }
    let long = Instant::now() + Duration::from_secs(60);
    let before = Front::start(&all[..2]);
    assert_eq!(crawl(&before.client(), &origins, "/a/", 3, long).await, 60);
    assert!(origins
        .iter()
        .all(|o| owner_seen_by(&members[2], o).as_deref() != Some("here")));
    drop(before);

    let front = Front::start(&all);
    let client = front.client();
    // Three windows of following.
    let settling = Instant::now() + Duration::from_secs(3);
    let moving = crawl(&client, &origins, "/b/", 2000, settling).await;
    let settled = crawl(&client, &origins, "/c/", 20, long).await;
    assert_eq!(settled, 400, "every request answered");
    // Each phase's hand-overs by its own paths' access lines (no count of one phase
    // written late can land in the other's).
    let lines_of = |prefix: &str| -> Vec<String> {
        all.iter().flat_map(|p| access_lines(p, prefix)).collect()
    };
    let handed_in = |prefix: &str| lines_of(prefix).iter().filter(|l| handed_on(l)).count();
    // Written once each request is served where it ends (one line there, one more at
    // each member that handed it on).
    let served = || lines_of("/c/").iter().filter(|l| !handed_on(l)).count();
    eventually(Duration::from_secs(10), || served() >= settled).await;
    let (handed_moving, handed) = (handed_in("/b/"), handed_in("/c/"));
    println!("moving: {handed_moving} of {moving} handed over; settled: {handed} of {settled}");
    assert!(handed_moving > 0, "the front moved no host");
    assert!(handed * 100 <= settled, "{handed} of {settled} handed over");
    let followed: f64 = all.iter().map(|p| ownership_changes(p, "followed")).sum();
    let new_owns = origins
        .iter()
        .filter(|o| owner_seen_by(&members[2], o).as_deref() == Some("here"))
        .count();
    assert!(
        new_owns > 0 && followed >= new_owns as f64,
        "{new_owns} owned, {followed} followed"
    );
    for origin in &origins {
        for round in [0, 19] {
            assert_eq!(origin.count(&format!("/c/{round}")), 1);
        }
        assert_eq!(origin.count("/b/0"), 1);
    }
}

/// Sends one GET per origin (`{prefix}{round}`) per round, each round's at once, for
/// `rounds` rounds or until `until`; how many were answered 200.
async fn crawl(
    client: &reqwest::Client,
    origins: &[TestOrigin],
    prefix: &str,
    rounds: usize,
    until: Instant,
) -> usize {
    let mut answered = 0;
    for round in 0..rounds {
        let sends = origins.iter().map(|o| {
            let (client, url) = (client.clone(), o.url(&format!("{prefix}{round}")));
            async move { client.get(url).send().await.map(|r| r.status().as_u16()) }
        });
        for status in futures_util::future::join_all(sends).await {
            answered += usize::from(status.ok() == Some(200));
        }
        if Instant::now() > until {
            break;
        }
    }
    answered
}

/// The members' handed-over requests, summed.
fn all_handed_over(members: &[&Proxy]) -> f64 {
    members.iter().map(|p| handed_over(p)).sum()
}

/// CONNECT through HAProxy: two members intercepting HTTPS, sixteen HTTPS origins (one
/// `localhost:port` each), three tunnels each, one request per tunnel: every tunnel goes
/// to the member HAProxy picks for its `Host`, which owns the origin, so none is handed
/// over; each request reached its origin once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn haproxy_routes_connect_tunnels_by_host_too() {
    let fleet = HttpsFleet::start(&Conf::new()).await;
    let members = [fleet.member(0), fleet.member(1)];
    let front = Front::start(&members);
    let mut origins: Vec<TestOrigin> = Vec::new();
    for _ in 0..16 {
        origins.push(fleet.origin("User-agent: *\nDisallow: /private\n").await);
    }
    let ca = fleet.setup.dir.path().join("operator-ca.pem");
    let via = format!("http://127.0.0.1:{}", front.port);
    let mut answered = 0usize;
    for round in 0..3 {
        for origin in &origins {
            let args = ["--cacert", ca.to_str().expect("path"), "--http1.1"];
            let (status, _, _) = curl_via(&via, &origin.url(&format!("/t/{round}")), &args);
            answered += usize::from(status == 200);
        }
    }
    assert_eq!(answered, 48, "every tunnel answered");
    let handed = all_handed_over(&members);
    println!("{handed} of {answered} tunnelled requests handed over behind HAProxy");
    assert!(
        handed <= answered as f64 * 0.01,
        "{handed} of {answered} handed over"
    );
    let owners: Vec<usize> = origins
        .iter()
        .map(|o| {
            assert_eq!(o.count("/t/0"), 1);
            members
                .iter()
                .position(|m| owner_seen_by(m, o).as_deref() == Some("here"))
                .expect("an owner")
        })
        .collect();
    assert!(
        owners.contains(&0) && owners.contains(&1),
        "HAProxy spread the hosts over both members: {owners:?}"
    );
}
