//! Limits on what one client can make robotsgate hold: each answers with its status, is
//! counted in `robotsgate_downstream_refusals_total{reason}`, and leaves other clients
//! served. Raw TCP clients on loopback send exactly the bytes each case needs.

use serde_json::json;
use std::time::Duration;

use crate::common::{
    eventually, get_status, raw_exchange, raw_status, Behaviour, Conf, Proxy, TestOrigin,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn limits() -> Conf {
    Conf::new().set("limits", json!({"max_request_line_bytes": 256, "max_header_bytes": 1024, "max_headers": 10, "max_body_bytes": 1000, "header_read_timeout_seconds": 1, "idle_timeout_seconds": 1}))
        .set("limits.max_connections", 6)
}

fn refused(proxy: &Proxy, reason: &str) -> f64 {
    proxy
        .metric(&format!(
            "robotsgate_downstream_refusals_total{{reason=\"{reason}\"}}"
        ))
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_limit_answers_with_its_status_and_is_counted() {
    let origin = TestOrigin::robots_and(
        "User-agent: *\nAllow: /\n",
        vec![("/slow", Behaviour::delayed(3000, "late\n"))],
    )
    .await;
    let proxy = Proxy::start_for_loopback(&limits());
    let url = origin.url("/page");
    let host = format!("Host: {}\r\n", origin.addr);
    let many: String = (0..12).map(|i| format!("X-H{i}: v\r\n")).collect();
    let cases: Vec<(String, Vec<u8>, &str, &str)> = vec![
        (
            "long request line".into(),
            format!("GET {url}?{} HTTP/1.1\r\n{host}\r\n", "a".repeat(300)).into_bytes(),
            "HTTP/1.1 414",
            "request_line_too_long",
        ),
        (
            "large header".into(),
            format!(
                "GET {url} HTTP/1.1\r\n{host}X-Big: {}\r\n\r\n",
                "b".repeat(1500)
            )
            .into_bytes(),
            "HTTP/1.1 431",
            "header_too_large",
        ),
        (
            "many headers".into(),
            format!("GET {url} HTTP/1.1\r\n{host}{many}\r\n").into_bytes(),
            "HTTP/1.1 431",
            "too_many_headers",
        ),
        (
            "declared body".into(),
            format!("POST {url} HTTP/1.1\r\n{host}Content-Length: 5000\r\n\r\n").into_bytes(),
            "HTTP/1.1 413",
            "body_too_large",
        ),
        (
            "garbage".into(),
            b"\x16\x03\x01 not http at all\r\n\r\n".to_vec(),
            "HTTP/1.1 400",
            "malformed",
        ),
    ];
    for (name, request, want, reason) in &cases {
        let reply = raw_exchange(proxy.addr, request).await;
        assert!(reply.starts_with(want), "{name}: {reply}");
        assert!(
            reply.contains(&format!("reason=\"{reason}\"")),
            "{name}: {reply}"
        );
        assert_eq!(refused(&proxy, reason), 1.0, "{name}");
    }
    assert!(origin.seen().is_empty(), "none of them reached the origin");

    // A chunked body has no length up front: it is counted as it streams.
    let mut chunked = format!(
        "POST {} HTTP/1.1\r\n{host}Transfer-Encoding: chunked\r\n\r\n",
        origin.url("/slow")
    )
    .into_bytes();
    for _ in 0..3 {
        chunked.extend_from_slice(format!("200\r\n{}\r\n", "c".repeat(512)).as_bytes());
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let reply = raw_exchange(proxy.addr, &chunked).await;
    assert!(reply.starts_with("HTTP/1.1 413"), "chunked: {reply}");
    assert_eq!(refused(&proxy, "body_too_large"), 2.0);

    // Within every limit: served.
    let _reply = raw_status(
        proxy.addr,
        format!("GET {url} HTTP/1.1\r\n{host}Connection: close\r\n\r\n"),
        200,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_heads_are_cut_at_the_deadline_while_others_are_served() {
    let origin = TestOrigin::robots("User-agent: *\n").await;
    let proxy = Proxy::start_for_loopback(&limits());
    let addr = proxy.addr;
    let target = origin.url("/slow");
    // Four clients each send a head one octet every 100 ms: every read is prompt, the
    // head is never finished.
    let slow: Vec<_> = (0..4)
        .map(|_| {
            let request = format!(
                "GET {target} HTTP/1.1\r\nHost: x\r\nX-Slow: {}",
                "s".repeat(200)
            );
            tokio::spawn(async move {
                let mut stream = TcpStream::connect(addr).await.expect("connect");
                for b in request.bytes() {
                    if stream.write_all(&[b]).await.is_err() {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                let mut reply = Vec::new();
                let _ = stream.read_to_end(&mut reply).await;
                String::from_utf8_lossy(&reply).into_owned()
            })
        })
        .collect();
    // Meanwhile another client is served.
    let client = proxy.client();
    assert_eq!(get_status(&client, origin.url("/fast")).await, 200);
    assert!(
        slow.iter().any(|h| !h.is_finished()),
        "the slow clients were still connected while another was served"
    );
    for handle in slow {
        let reply = handle.await.expect("task");
        assert!(reply.starts_with("HTTP/1.1 408"), "{reply}");
    }
    assert_eq!(refused(&proxy, "header_timeout"), 4.0);
    assert_eq!(origin.count("/slow"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_kept_alive_connections_are_closed() {
    let origin = TestOrigin::robots("User-agent: *\n").await;
    let proxy = Proxy::start_for_loopback(&limits());

    // A kept-alive connection that goes quiet is closed after limits.idle_timeout_seconds.
    let mut kept = TcpStream::connect(proxy.addr).await.expect("connect");
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\n\r\n",
        origin.url("/a"),
        origin.addr
    );
    kept.write_all(request.as_bytes()).await.expect("write");
    let mut buf = vec![0u8; 4096];
    let n = kept.read(&mut buf).await.expect("response");
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    let closed = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match kept.read(&mut buf).await {
                Ok(0) | Err(_) => return true,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert_eq!(closed, Ok(true), "the idle connection was closed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connection_limit_answers_503_until_slots_free_up() {
    let origin = TestOrigin::robots("User-agent: *\n").await;
    // Silent connections may hold a slot for the header timeout: long enough here.
    let proxy = Proxy::start_for_loopback(&limits().set("limits.header_read_timeout_seconds", 30));
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\n\r\n",
        origin.url("/a"),
        origin.addr
    );

    // Six silent connections take every slot (max_connections: 6)...
    let mut held = Vec::new();
    for _ in 0..6 {
        held.push(TcpStream::connect(proxy.addr).await.expect("connect"));
    }
    assert!(
        eventually(Duration::from_secs(5), || {
            proxy.metric("robotsgate_downstream_connections") == Some(6.0)
        })
        .await
    );
    // ...so the seventh is told to come back.
    let reply = raw_status(proxy.addr, request, 503).await;
    assert!(reply.contains("Retry-After: 1"), "{reply}");
    assert_eq!(refused(&proxy, "connection_limit"), 1.0);
    drop(held);
    // Slots come back as connections close.
    let mut served = false;
    for _ in 0..50 {
        let close = format!(
            "GET {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            origin.url("/b"),
            origin.addr
        );
        if raw_exchange(proxy.addr, close.as_bytes())
            .await
            .starts_with("HTTP/1.1 200")
        {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(served, "served again once the slots were free");
}

/// Sends `request` from the loopback address `from` and reads the answer until the
/// proxy closes (or 5 s pass).
async fn exchange_from(from: &str, proxy: std::net::SocketAddr, request: &str) -> String {
    let mut stream = connect_from(from, proxy).await;
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut reply = String::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut reply)).await;
    reply
}

/// A TCP connection to the proxy from `local` (another loopback address: another client).
async fn connect_from(local: &str, proxy: std::net::SocketAddr) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket
        .bind(format!("{local}:0").parse().expect("addr"))
        .expect("bind");
    socket.connect(proxy).await.expect("connect")
}

/// Waits (up to `within`) for the proxy to close `stream`; true if it did.
async fn closed_by_proxy(stream: &mut TcpStream, within: Duration) -> bool {
    let mut byte = [0u8; 1];
    matches!(
        tokio::time::timeout(within, stream.read(&mut byte)).await,
        Ok(Ok(0)) | Ok(Err(_))
    )
}

/// One client address cannot take every slot, and silent sockets are closed at the
/// first-byte deadline — also a CONNECT tunnel that never sends its ClientHello.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_cannot_hold_every_slot() {
    let origin = TestOrigin::robots("User-agent: *\n").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let (cert, key) = crate::common::operator_ca(dir.path());
    let proxy = Proxy::start(
        &Conf::new().set("limits", json!({"max_connections": 20, "max_connections_per_client": 5, "first_byte_timeout_seconds": 1})),
        &[
            "--allow-destination",
            "127.0.0.0/8",
            "--ca-cert",
            cert.to_str().expect("utf-8"),
            "--ca-key",
            key.to_str().expect("utf-8"),
        ],
    );
    let request = |path: &str| {
        format!(
            "GET {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            origin.url(path),
            origin.addr
        )
    };
    let mut held = Vec::new();
    for _ in 0..5 {
        held.push(connect_from("127.0.0.1", proxy.addr).await);
    }
    assert!(
        eventually(Duration::from_secs(5), || {
            proxy.metric("robotsgate_downstream_connections") == Some(5.0)
        })
        .await
    );
    // The sixth from the same address is told to come back...
    let reply = exchange_from("127.0.0.1", proxy.addr, &request("/a")).await;
    assert!(reply.starts_with("HTTP/1.1 503"), "{reply}");
    assert!(reply.contains("client_connection_limit"), "{reply}");
    assert_eq!(
        origin.count("/a"),
        0,
        "the refused request reached the origin"
    );
    // ...while another client is served.
    let reply = exchange_from("127.0.0.2", proxy.addr, &request("/b")).await;
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    // The silent ones are closed at the first-byte deadline (1 s), not the head's (10 s).
    for stream in &mut held {
        assert!(closed_by_proxy(stream, Duration::from_secs(4)).await);
    }
    assert_eq!(refused(&proxy, "first_byte_timeout"), 5.0);
    assert_eq!(refused(&proxy, "client_connection_limit"), 1.0);
    // A CONNECT answered 200 whose client never starts TLS: closed at the same deadline.
    let mut tunnel = connect_from("127.0.0.3", proxy.addr).await;
    let connect = format!(
        "CONNECT 127.0.0.1:{p} HTTP/1.1\r\nHost: 127.0.0.1:{p}\r\n\r\n",
        p = origin.addr.port()
    );
    tunnel.write_all(connect.as_bytes()).await.expect("write");
    let mut head = [0u8; 39];
    tunnel.read_exact(&mut head).await.expect("200");
    assert!(head.starts_with(b"HTTP/1.1 200"), "{head:?}");
    let started = std::time::Instant::now();
    assert!(closed_by_proxy(&mut tunnel, Duration::from_secs(4)).await);
    assert!(started.elapsed() < Duration::from_secs(4));
    assert_eq!(refused(&proxy, "first_byte_timeout"), 6.0);
}

/// Idle connections hold no read buffer, and their memory is given back: RSS with 5,000
/// silent connections open stays small, and after they close it returns near where it
/// started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_cost_little_and_give_their_memory_back() {
    let origin = TestOrigin::robots("User-agent: *\n").await;
    let proxy = Proxy::start_for_loopback(&Conf::new().set(
        "limits",
        json!({"max_connections_per_client": 20000, "first_byte_timeout_seconds": 60}),
    ));
    let _warm = raw_status(
        proxy.addr,
        format!(
            "GET {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            origin.url("/warm"),
            origin.addr
        ),
        200,
    )
    .await;
    let baseline = crate::common::rss_bytes(proxy.pid());
    let mut peak = baseline;
    for wave in 0..3 {
        let mut held = Vec::with_capacity(5000);
        for _ in 0..5000 {
            held.push(TcpStream::connect(proxy.addr).await.expect("connect"));
        }
        assert!(
            eventually(Duration::from_secs(20), || {
                proxy.metric("robotsgate_downstream_connections") == Some(5000.0)
            })
            .await,
            "wave {wave}: {:?}",
            proxy.metric("robotsgate_downstream_connections")
        );
        peak = peak.max(crate::common::rss_bytes(proxy.pid()));
        drop(held);
        assert!(
            eventually(Duration::from_secs(20), || {
                proxy.metric("robotsgate_downstream_connections") == Some(0.0)
            })
            .await
        );
    }
    // Freed memory goes back to the system (the allocator returns it after a short
    // delay): poll rather than judge the first reading.
    let pid = proxy.pid();
    let near = baseline + 24 * 1024 * 1024;
    eventually(Duration::from_secs(30), || {
        crate::common::rss_bytes(pid) < near
    })
    .await;
    let after = crate::common::rss_bytes(pid);
    let per_connection = (peak.saturating_sub(baseline)) as f64 / 5000.0;
    eprintln!(
        "RSS baseline {:.1} MiB, peak with 5000 idle {:.1} MiB ({per_connection:.0} B each), after {:.1} MiB",
        baseline as f64 / 1048576.0,
        peak as f64 / 1048576.0,
        after as f64 / 1048576.0
    );
    assert!(
        per_connection < 32_768.0,
        "{per_connection} B per idle connection"
    );
    assert!(
        after < near,
        "RSS {after} after the waves vs {baseline} before"
    );
}
