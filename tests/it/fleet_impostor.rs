//! An owner's peer address answered by another key from the fleet CA — a member that
//! left, or a fleet key used by someone between two members — is sent nothing
//! (`fleet::answered_by`): the member handing a request over checks that the
//! certificate names the owner it meant, on the front's relay and on the proxy's path
//! alike, and for a blind tunnel. Real members and `redis-server`; the network between them is a TCP forwarder
//! the test switches; the impostor is OpenSSL's `s_server` (an independent TLS
//! implementation) with the fleet CA's `stranger` certificate, printing every octet it
//! receives.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::common::{curl, eventually, free_port, listens_on, Conf, Proxy, TestOrigin};
use crate::fleet_fixture::{backend_up, certs, first_owns_second_learns, fleet_conf, HttpsFleet};
use crate::redis_servers::Redis;

/// The network between the members: each connection to it is piped to its current
/// target; switching the target cuts every connection already piped.
struct Forwarder {
    /// Where members connect.
    addr: SocketAddr,
    /// Where connections go now (`None`: dropped on arrival).
    target: Arc<Mutex<Option<SocketAddr>>>,
    /// The pipes running, cut on a switch.
    pipes: Arc<Mutex<Vec<JoinHandle<()>>>>,
    /// The accepting task.
    accepting: JoinHandle<()>,
}

impl Forwarder {
    /// A forwarder on 127.0.0.1 with no target yet.
    async fn start() -> Forwarder {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let target: Arc<Mutex<Option<SocketAddr>>> = Arc::default();
        let pipes: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let (to, running) = (target.clone(), pipes.clone());
        let accepting = tokio::spawn(async move {
            while let Ok((mut from, _)) = listener.accept().await {
                let Some(target) = *to.lock().expect("lock") else {
                    continue;
                };
                running.lock().expect("lock").push(tokio::spawn(async move {
                    if let Ok(mut onward) = TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut from, &mut onward).await;
                    }
                }));
            }
        });
        Forwarder {
            addr,
            target,
            pipes,
            accepting,
        }
    }

    /// New connections go to `target`; those piped so far are cut.
    fn switch(&self, target: SocketAddr) {
        *self.target.lock().expect("lock") = Some(target);
        for pipe in self.pipes.lock().expect("lock").drain(..) {
            pipe.abort();
        }
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.accepting.abort();
        for pipe in self.pipes.lock().expect("lock").drain(..) {
            pipe.abort();
        }
    }
}

/// OpenSSL's `s_server` with a certificate from the fleet CA that names member
/// `stranger`, for the name members connect to: what it receives is in its output.
struct Impostor {
    child: Child,
    addr: SocketAddr,
    output: tempfile::NamedTempFile,
}

impl Impostor {
    /// Started and listening (on another port when the one picked was taken before
    /// s_server bound it).
    async fn start() -> Impostor {
        for _attempt in 0..5 {
            let output = tempfile::NamedTempFile::new().expect("output file");
            let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
            let mut child = Command::new("openssl")
                .args(["s_server", "-accept", &addr.to_string(), "-quiet"])
                .args(["-alpn", "http/1.1", "-cert"])
                .arg(certs().file("member.pem"))
                .arg("-key")
                .arg(certs().file("member.key"))
                // Its standard input held open: at its end, s_server stops.
                .stdin(Stdio::piped())
                .stdout(output.reopen().expect("output"))
                .stderr(Stdio::null())
                .spawn()
                .expect("openssl s_server");
            let pid = child.id();
            // Listening itself: a port picked free may be another test's by now.
            let up = eventually(Duration::from_secs(10), || {
                listens_on(pid, addr.port()) || matches!(child.try_wait(), Ok(Some(_)))
            })
            .await;
            if up && listens_on(pid, addr.port()) {
                return Impostor {
                    child,
                    addr,
                    output,
                };
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("s_server never listened");
    }

    /// Every octet it received.
    fn received(&self) -> String {
        std::fs::read_to_string(self.output.path()).unwrap_or_default()
    }
}

impl Drop for Impostor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Connections to the owner's advertised address that the fleet's `stranger` key
/// answers: the member handing requests over sends nothing on them (on its front's
/// relay, then on the proxy's path it falls back to), counts each, routes it again no
/// more often than any request, and answers 503; the origin receives nothing. Once the owner answers there again, its requests are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owners_address_answered_by_another_fleet_key_is_sent_nothing() {
    let redis = Redis::start();
    let origin = TestOrigin::robots("User-agent: *\n").await;
    let network = Forwarder::start().await;
    let conf = fleet_conf(&redis);
    let owner = Proxy::start_for_loopback(
        &conf
            .clone()
            .set("fleet.peer_address", network.addr.to_string()),
    );
    network.switch(owner.peer.expect("a fleet member"));
    let proxies = [owner, Proxy::start_for_loopback(&conf)];
    backend_up(&proxies).await;
    first_owns_second_learns(&proxies, &origin);
    assert_eq!(origin.count("/learn"), 1, "handed over through the network");

    let impostor = Impostor::start().await;
    network.switch(impostor.addr);
    let (status, head, _) = curl(&proxies[1], &origin.url("/stolen"), &[]);
    assert_eq!(status, 503, "{head}\n{}", proxies[1].log());
    assert!(head.contains("fleet-unavailable"), "{head}");
    assert_eq!(impostor.received(), "", "the impostor was sent a request");
    assert_eq!(origin.count("/stolen"), 0);
    // The relay's connection, then the proxy path's, each answered by the impostor:
    // one attempt and two routings in all (`Reroutes`), the relay's attempt counted.
    let met = proxies[1].counter("robotsgate_fleet_impostors_total");
    assert_eq!(met, 3.0, "{}", proxies[1].log());
    // Log lines leave the process in batches (`telemetry::sink`, every 20 ms).
    let named = eventually(Duration::from_secs(5), || {
        proxies[1].log().contains("naming stranger")
    });
    assert!(named.await, "{}", proxies[1].log());

    network.switch(proxies[0].peer.expect("a fleet member"));
    assert_eq!(curl(&proxies[1], &origin.url("/after"), &[]).0, 200);
    assert_eq!(origin.count("/after"), 1);
    assert_eq!(impostor.received(), "");
}

/// The same for a blind tunnel handed to its owner (`handover::tunnel`): the CONNECT is
/// not written to the impostor, the tunnel is routed again as a request the owner never
/// received is (meeting the impostor again), the client is answered 503, and the origin
/// sees no connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tunnel_to_an_owners_address_answered_by_another_fleet_key_carries_nothing() {
    let network = Forwarder::start().await;
    let fleet = HttpsFleet::start_routed(
        &Conf::new().set("tls.blind_tunnel", ["localhost"]),
        &Conf::new().set("fleet.peer_address", network.addr.to_string()),
        |owner| network.switch(owner.peer.expect("a fleet member")),
    )
    .await;
    let origin = fleet.origin("User-agent: *\n").await;
    let blind = |i: usize, path: &str| fleet.curl(i, &origin.url(path), "origin-ca.pem", &[]);
    assert_eq!(blind(0, "/first").0, 200);
    let (status, _, body) = blind(1, "/handed");
    assert_eq!((status, body.as_str()), (200, "page /handed\n"));
    let connections = origin.accepted().len();

    let impostor = Impostor::start().await;
    network.switch(impostor.addr);
    // Without `--suppress-connect-headers`: the CONNECT's own answer is the status.
    let ca = fleet.setup.dir.path().join("origin-ca.pem");
    let ca = ["--cacert", ca.to_str().expect("path")];
    let (status, head, _) = curl(fleet.member(1), &origin.url("/stolen"), &ca);
    assert_eq!(status, 503, "{head}\n{}", fleet.member(1).log());
    assert_eq!(impostor.received(), "", "the impostor was sent a CONNECT");
    assert_eq!(
        origin.accepted().len(),
        connections,
        "a connection reached the origin"
    );
    // Never received by the owner, the tunnel was routed again (like a request), and
    // met the impostor again: one attempt and two routings, as a request's, none
    // carrying anything.
    let met = fleet.member(1).counter("robotsgate_fleet_impostors_total");
    assert_eq!(met, 3.0, "{}", fleet.member(1).log());
}
