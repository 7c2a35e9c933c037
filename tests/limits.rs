//! Limits on what one client can make robotsgate hold: each answers with its status, is
//! counted in `robotsgate_downstream_refusals_total{reason}`, and leaves other clients
//! served. Raw TCP clients on loopback send exactly the bytes each case needs.

mod common;

use std::time::Duration;

use common::{eventually, raw_exchange, Behaviour, Proxy, TestOrigin};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const LIMITS: &str = "  limits:
    max_request_line_bytes: 256
    max_header_bytes: 1024
    max_headers: 10
    max_body_bytes: 1000
    header_read_timeout_seconds: 1
    idle_timeout_seconds: 1
    max_connections: 6
";

fn refused(proxy: &Proxy, reason: &str) -> f64 {
    proxy
        .metric(&format!(
            "robotsgate_downstream_refusals_total{{reason=\"{reason}\"}}"
        ))
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_limit_answers_with_its_status_and_is_counted() {
    let origin = TestOrigin::start(vec![
        ("/robots.txt", Behaviour::ok("User-agent: *\nAllow: /\n")),
        (
            "/slow",
            Behaviour::Delayed {
                delay: Duration::from_secs(3),
                body: b"late\n".to_vec(),
            },
        ),
    ])
    .await;
    let proxy = Proxy::start_for_loopback(LIMITS);
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
    let reply = raw_exchange(
        proxy.addr,
        format!("GET {url} HTTP/1.1\r\n{host}Connection: close\r\n\r\n").as_bytes(),
    )
    .await;
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_heads_are_cut_at_the_deadline_while_others_are_served() {
    let origin = TestOrigin::start(vec![("/robots.txt", Behaviour::ok("User-agent: *\n"))]).await;
    let proxy = Proxy::start_for_loopback(LIMITS);
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
    let response = client.get(origin.url("/fast")).send().await.expect("fast");
    assert_eq!(response.status(), 200);
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
    let origin = TestOrigin::start(vec![("/robots.txt", Behaviour::ok("User-agent: *\n"))]).await;
    let proxy = Proxy::start_for_loopback(LIMITS);

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
    let origin = TestOrigin::start(vec![("/robots.txt", Behaviour::ok("User-agent: *\n"))]).await;
    // Silent connections may hold a slot for the header timeout: long enough here.
    let proxy = Proxy::start_for_loopback(&LIMITS.replace(
        "header_read_timeout_seconds: 1",
        "header_read_timeout_seconds: 30",
    ));
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
    let reply = raw_exchange(proxy.addr, request.as_bytes()).await;
    assert!(reply.starts_with("HTTP/1.1 503"), "{reply}");
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
