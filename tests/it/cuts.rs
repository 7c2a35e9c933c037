//! What an exchange robotsgate cuts still holds, checked at the origin (which logs when
//! each request arrived and when its handler ended):
//! * a client that takes no octet of its answer for `limits.unread_timeout_seconds`
//!   ends the exchange on both legs, so two unread never-ending answers cannot lock an
//!   origin's other clients out for `pacing.max_exchange_seconds`;
//! * a client that left is a sink for at most that long, then the same;
//! * the same when the client stops reading at a fleet member that relays its request
//!   to the origin's owner;
//! * an exchange cut before the origin answered holds its turn until
//!   `pacing.max_exchange_seconds` from its start: the origin may still be working.

use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::{curl, eventually, most_at_once, pages, Behaviour, Conf, Proxy, TestOrigin};
use crate::fleet_fixture::{
    backend_up, first_owns_second_learns, fleet_conf, handed_over, instances,
};
use crate::redis_servers::Redis;

/// A chunked answer that never ends, sent as fast as the connection takes it.
fn firehose() -> Behaviour {
    Behaviour::Endless {
        every: Duration::from_millis(1),
        chunk: 16 * 1024,
    }
}

/// An origin allowing everything whose `path` answers as `behaviour`, and robotsgate
/// for it with `conf`, robots.txt fetched by a first request.
async fn warmed(path: &str, behaviour: Behaviour, conf: &Conf) -> (TestOrigin, Proxy) {
    let origin = TestOrigin::robots_and("User-agent: *\n", vec![(path, behaviour)]).await;
    let proxy = warm(&origin, conf);
    (origin, proxy)
}

/// robotsgate for `origin` with `conf`, robots.txt fetched by a first request.
fn warm(origin: &TestOrigin, conf: &Conf) -> Proxy {
    let proxy = Proxy::start_for_loopback(conf);
    assert_eq!(curl(&proxy, &origin.url("/warm"), &[]).0, 200);
    proxy
}

/// Two in-flight turns, a short unread time and read timeout, and a long
/// `max_exchange_seconds`: without the unread rule an unread answer would hold its
/// turn for a minute.
fn two_turns() -> Conf {
    two_turns_of(Conf::new())
}

/// `conf` with [`two_turns`]' settings.
fn two_turns_of(conf: Conf) -> Conf {
    conf.set(
        "pacing",
        json!({"max_in_flight": 2, "max_wait_seconds": 30, "max_exchange_seconds": 60}),
    )
    .set(
        "upstream",
        json!({"read_timeout_seconds": 1, "write_timeout_seconds": 60}),
    )
    .set("limits.unread_timeout_seconds", 1)
}

/// A request for `path` of `origin` through `proxy` on a raw connection with a small
/// receive buffer, which is then never read.
async fn unread_request(proxy: &Proxy, origin: &TestOrigin, path: &str) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("small window");
    let mut stream = socket.connect(proxy.addr).await.expect("connect");
    let host = origin.addr;
    let request = format!("GET http://{host}{path} HTTP/1.1\r\nHost: {host}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("write");
    stream
}

/// The origin's next client, once two never-ending answers hold both turns: served,
/// and only after both ended at the origin.
async fn next_client_is_served_after(proxy: &Proxy, origin: &TestOrigin) {
    let (status, _, body) = curl(proxy, &origin.url("/after"), &[]);
    assert_eq!(
        (status, body.as_str()),
        (200, "page /after\n"),
        "{}",
        proxy.log()
    );
    let after = &pages(origin, "/after")[0];
    for cut in pages(origin, "/forever") {
        let ended = cut
            .done
            .expect("the never-ending answer ended at the origin");
        assert!(
            after.arrived >= ended,
            "served while a never-ending answer ran: {cut:#?} {after:#?}"
        );
    }
    assert!(most_at_once(&origin.seen()) <= 2, "{:#?}", origin.seen());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_stop_reading_end_their_exchanges_and_free_the_origin() {
    let (origin, proxy) = warmed("/forever", firehose(), &two_turns()).await;
    let unread = [
        unread_request(&proxy, &origin, "/forever?1").await,
        unread_request(&proxy, &origin, "/forever?2").await,
    ];
    assert!(
        eventually(Duration::from_secs(5), || pages(&origin, "/forever").len()
            == 2)
        .await
    );
    next_client_is_served_after(&proxy, &origin).await;
    assert_eq!(
        proxy.counter("robotsgate_upstream_exchange_ends_total{end=\"cut_client\"}"),
        2.0,
        "{}",
        proxy.log()
    );
    drop(unread);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_leave_a_never_ending_answer_free_the_origin() {
    let (origin, proxy) = warmed("/forever", firehose(), &two_turns()).await;
    for i in 0..2 {
        let mut stream = unread_request(&proxy, &origin, &format!("/forever?{i}")).await;
        let mut first = [0u8; 1];
        stream
            .read_exact(&mut first)
            .await
            .expect("the answer began");
        #[allow(deprecated)]
        stream.set_linger(Some(Duration::ZERO)).expect("linger");
        drop(stream); // reset: the client is gone
    }
    next_client_is_served_after(&proxy, &origin).await;
    assert_eq!(
        proxy.counter("robotsgate_upstream_exchange_ends_total{end=\"cut_client\"}"),
        2.0,
        "{}",
        proxy.log()
    );
}

/// The same through a fleet: two clients that stop reading at a member that hands
/// their requests over (the front's relay) hold the owner's two turns no longer than
/// the unread time, whichever of the two members notices first; the origin's next
/// client is then served, only after both never-ending answers ended at the origin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_stop_reading_at_a_relaying_member_free_the_origin() {
    let origin = TestOrigin::robots_and("User-agent: *\n", vec![("/forever", firehose())]).await;
    let redis = Redis::start();
    let proxies = instances(2, &two_turns_of(fleet_conf(&redis)));
    backend_up(&proxies).await;
    first_owns_second_learns(&proxies, &origin);
    let relay = &proxies[1];
    let unread = [
        unread_request(relay, &origin, "/forever?1").await,
        unread_request(relay, &origin, "/forever?2").await,
    ];
    assert!(
        eventually(Duration::from_secs(5), || pages(&origin, "/forever").len()
            == 2)
        .await
    );
    next_client_is_served_after(relay, &origin).await;
    assert!(handed_over(relay) >= 4.0, "{}", relay.log());
    assert_eq!(
        proxies[0].counter("robotsgate_upstream_exchange_ends_total{end=\"cut_client\"}"),
        2.0,
        "{}",
        proxies[0].log()
    );
    drop(unread);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_that_ends_soon_after_its_client_left_ends_the_turn_with_it() {
    // The client leaves 300 ms in; the origin answers at 800 ms, well within the unread
    // time: the answer is read to its end, and the turn ends with the origin's end.
    let slow = Behaviour::delayed(800, "slow\n");
    let (origin, proxy) = warmed(
        "/slow",
        slow,
        &two_turns()
            .set("pacing.max_in_flight", 1)
            .set("upstream.read_timeout_seconds", 5)
            .set("limits.unread_timeout_seconds", 5),
    )
    .await;
    let mut stream = unread_request(&proxy, &origin, "/slow").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    stream.shutdown().await.expect("FIN");
    drop(stream);
    let (status, _, _) = curl(&proxy, &origin.url("/after"), &[]);
    assert_eq!(status, 200, "{}", proxy.log());
    let (slow, after) = (&pages(&origin, "/slow")[0], &pages(&origin, "/after")[0]);
    let ended = slow.done.expect("answered");
    assert!(after.arrived >= ended, "{slow:#?} {after:#?}");
    // Ended with the origin's answer, not held a cut's read timeout (5 s) more.
    assert!(
        after.arrived - ended < Duration::from_secs(4),
        "{slow:#?} {after:#?}"
    );
    assert_eq!(
        proxy
            .counted(
                "robotsgate_upstream_exchange_ends_total{end=\"complete\"}",
                3.0
            )
            .await,
        3.0,
        "warm, slow, after: {}",
        proxy.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exchange_cut_before_the_origin_answered_holds_its_turn_until_max_exchange() {
    // The origin works 3.5 s on /silent; robotsgate gives up after its 1 s read timeout.
    // Held a read timeout more (the rule for an answered exchange), the turn would free
    // the origin at 2 s, while it still works on /silent; held until max_exchange (4 s)
    // from its start, the next request arrives once the origin is done.
    let silent = Behaviour::delayed(3500, "late\n");
    let (origin, proxy) = warmed(
        "/silent",
        silent,
        &Conf::new()
            .set(
                "pacing",
                json!({"max_in_flight": 1, "max_wait_seconds": 30, "max_exchange_seconds": 4}),
            )
            .set("upstream.read_timeout_seconds", 1),
    )
    .await;
    let (status, _, _) = curl(&proxy, &origin.url("/silent"), &[]);
    assert_eq!(status, 504, "{}", proxy.log());
    let (status, _, _) = curl(&proxy, &origin.url("/after"), &[]);
    assert_eq!(status, 200, "{}", proxy.log());
    let seen = origin.seen();
    assert_eq!(
        most_at_once(&seen),
        1,
        "max_in_flight 1, yet the origin worked on two at once: {seen:#?}"
    );
    let (silent, after) = (&pages(&origin, "/silent")[0], &pages(&origin, "/after")[0]);
    assert!(
        after.arrived - silent.arrived >= Duration::from_millis(3900),
        "{silent:#?} {after:#?}"
    );
    assert_eq!(
        proxy.counter("robotsgate_upstream_exchange_ends_total{end=\"cut_timeout\"}"),
        1.0
    );
}

/// Two clients leave a trickling, never-ending answer (an octet every half second)
/// unread and close as soon as it began. Their exchanges are cut, and their turns are
/// held for the pace those exchanges showed, not the read timeout (60 s by default):
/// the origin's third client, queued for `max_in_flight: 2` with a 20 s
/// `max_wait_seconds`, is served (held a read timeout, it would be refused
/// `wait-too-long`), and only after both trickles ended at the origin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickle_left_unread_holds_its_turn_for_its_own_pace_not_the_read_timeout() {
    let trickle = Behaviour::Endless {
        every: Duration::from_millis(500),
        chunk: 1,
    };
    let (origin, proxy) = warmed(
        "/forever",
        trickle,
        &Conf::new()
            .set(
                "pacing",
                json!({"max_in_flight": 2, "max_wait_seconds": 20}),
            )
            .set("limits.unread_timeout_seconds", 2),
    )
    .await;
    let unread = [
        unread_request(&proxy, &origin, "/forever?1").await,
        unread_request(&proxy, &origin, "/forever?2").await,
    ];
    let both = eventually(Duration::from_secs(5), || {
        pages(&origin, "/forever").len() == 2
    })
    .await;
    assert!(both, "{:#?}", origin.seen());
    drop(unread);
    next_client_is_served_after(&proxy, &origin).await;
    let cut = ["cut_client", "cut_other", "cut_timeout"]
        .iter()
        .map(|end| {
            proxy.counter(&format!(
                "robotsgate_upstream_exchange_ends_total{{end=\"{end}\"}}"
            ))
        })
        .sum::<f64>();
    assert_eq!(cut, 2.0, "both trickles cut: {}", proxy.log());
}
