//! HTTPS load client for `bench/https_bench.py`: what wrk cannot do (CONNECT through a
//! proxy, then TLS inside the tunnel).
//!
//! Two measurements, each printed as one JSON line:
//!
//! * `load`: `--connections` keep-alive connections, each opened once (through
//!   `--proxy` with CONNECT, or straight to the target) and then sending `GET --path` back
//!   to back for `--seconds`; prints requests, errors, requests/s and latency percentiles.
//! * `handshakes`: `--handshakes N` sequential connection setups (CONNECT + TLS handshake,
//!   or TLS alone without `--proxy`); with `--distinct`, each names a different IP
//!   literal (127.0.x.y), so every handshake through robotsgate needs a freshly minted
//!   leaf; without it, all name the target, so the leaf comes from the cache.
//!
//! With `--gateway ADDR`, connections go to ADDR, which is spoken to as if it were the
//! target (TLS for the target's name, origin-form requests with its `Host`): a
//! TLS-terminating proxy with no CONNECT, such as `examples/passthrough.rs --tls`.
//!
//! With `--h2 --streams S`, `load` speaks HTTP/2 inside the TLS (ALPN `h2` alone): each
//! connection carries `S` streams at once, each sending its next GET as soon as its
//! last response has been read.
//!
//! With `--plain`, `load` speaks plain HTTP instead (absolute-form requests through
//! `--proxy`, as a crawler with `HTTP_PROXY` does), so the cost TLS adds is measured with
//! the same client, the same origin server and the same request in one run.
//!
//! Usage: https_load --target 127.0.0.1:8443 --ca CA.pem [--proxy 127.0.0.1:8080 | --gateway ADDR]
//!        (--connections 16 --seconds 5 --path /page [--plain | --h2 --streams 8]
//!         | --handshakes 200 [--distinct])

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

type Error = Box<dyn std::error::Error + Send + Sync>;

struct Args {
    target: SocketAddr,
    proxy: Option<SocketAddr>,
    /// Connect here instead of the target, with no CONNECT (see the module docs).
    gateway: Option<SocketAddr>,
    ca: String,
    connections: usize,
    seconds: f64,
    path: String,
    handshakes: usize,
    distinct: bool,
    /// Name the target by this host name (CONNECT, SNI, `Host`) rather than its address:
    /// for proxies that mint a leaf for an IP literal with a DNS name in it (Squid 5).
    name: Option<String>,
    /// `load` over plain HTTP, no CONNECT and no TLS.
    plain: bool,
    /// `load` over HTTP/2: streams at once on each connection (0: HTTP/1.1).
    h2_streams: usize,
}

fn args() -> Result<Args, Error> {
    let argv: Vec<String> = std::env::args().collect();
    let flag = |name: &str| {
        argv.iter()
            .position(|a| a == name)
            .and_then(|i| argv.get(i + 1))
            .cloned()
    };
    Ok(Args {
        target: flag("--target").ok_or("--target HOST:PORT")?.parse()?,
        proxy: flag("--proxy").map(|p| p.parse()).transpose()?,
        gateway: flag("--gateway").map(|p| p.parse()).transpose()?,
        ca: flag("--ca").ok_or("--ca FILE")?,
        connections: flag("--connections").map_or(Ok(16), |v| v.parse())?,
        seconds: flag("--seconds").map_or(Ok(5.0), |v| v.parse())?,
        path: flag("--path").unwrap_or_else(|| "/".into()),
        handshakes: flag("--handshakes").map_or(Ok(0), |v| v.parse())?,
        distinct: argv.iter().any(|a| a == "--distinct"),
        name: flag("--name"),
        plain: argv.iter().any(|a| a == "--plain"),
        h2_streams: if argv.iter().any(|a| a == "--h2") {
            flag("--streams").map_or(Ok(8), |v| v.parse())?
        } else {
            0
        },
    })
}

fn tls_config(ca_file: &str, h2: bool) -> Result<Arc<rustls::ClientConfig>, Error> {
    let mut roots = rustls::RootCertStore::empty();
    for block in pem::parse_many(std::fs::read_to_string(ca_file)?)? {
        roots.add(rustls::pki_types::CertificateDer::from(
            block.into_contents(),
        ))?;
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![if h2 {
        b"h2".to_vec()
    } else {
        b"http/1.1".to_vec()
    }];
    // Every handshake measured is a full one, as a crawler meeting a host for the first time.
    config.resumption = rustls::client::Resumption::disabled();
    Ok(Arc::new(config))
}

/// One TLS connection to `target`, through a CONNECT tunnel when `proxy` is set, or
/// made to `gateway` when that is set.
async fn open(
    connector: &TlsConnector,
    (proxy, gateway): (Option<SocketAddr>, Option<SocketAddr>),
    target: SocketAddr,
    name: Option<&str>,
) -> Result<TlsStream<TcpStream>, Error> {
    let mut tcp = TcpStream::connect(proxy.or(gateway).unwrap_or(target)).await?;
    tcp.set_nodelay(true)?;
    if proxy.is_some() {
        let authority = authority(target, name);
        tcp.write_all(
            format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\nUser-Agent: https-load\r\n\r\n")
                .as_bytes(),
        )
        .await?;
        let mut reply = [0u8; 39];
        tcp.read_exact(&mut reply).await?;
        if !reply.starts_with(b"HTTP/1.1 200") {
            return Err(format!("CONNECT refused: {}", String::from_utf8_lossy(&reply)).into());
        }
    }
    let name = match name {
        Some(name) => rustls::pki_types::ServerName::try_from(name.to_string())?,
        None => rustls::pki_types::ServerName::IpAddress(target.ip().into()),
    };
    Ok(connector.connect(name, tcp).await?)
}

/// One plain TCP connection to `proxy`, or straight to `target`.
async fn open_plain(proxy: Option<SocketAddr>, target: SocketAddr) -> Result<TcpStream, Error> {
    let tcp = TcpStream::connect(proxy.unwrap_or(target)).await?;
    tcp.set_nodelay(true)?;
    Ok(tcp)
}

/// A boxed client stream: TLS or plain TCP, whichever the run measures.
trait Conn: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Conn for T {}

/// `host:port` as requests name the target.
fn authority(target: SocketAddr, name: Option<&str>) -> String {
    match name {
        Some(name) => format!("{name}:{}", target.port()),
        None => target.to_string(),
    }
}

/// Reads one response with a Content-Length body; its status.
async fn read_response<R: tokio::io::AsyncBufRead + Unpin>(r: &mut R) -> Result<u16, Error> {
    let (mut status, mut length) = (0u16, 0usize);
    let mut line = String::new();
    loop {
        line.clear();
        if r.read_line(&mut line).await? == 0 {
            return Err("connection closed".into());
        }
        let text = line.trim_end();
        if text.is_empty() {
            break;
        }
        if let Some(rest) = text.strip_prefix("HTTP/1.1 ") {
            status = rest.get(..3).unwrap_or("0").parse()?;
        } else if let Some((k, v)) = text.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                length = v.trim().parse()?;
            }
        }
    }
    let mut body = vec![0; length];
    r.read_exact(&mut body).await?;
    Ok(status)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// One HTTP/2 connection's `streams` request loops until `deadline`: latencies (ms) of
/// the 200s and the count of errors.
async fn h2_connection(
    tls: TlsStream<TcpStream>,
    streams: usize,
    uri: http::Uri,
    deadline: Instant,
) -> (Vec<f64>, u64) {
    let (sender, connection) = match h2::client::handshake(tls).await {
        Ok(pair) => pair,
        Err(e) => {
            eprintln!("h2 handshake: {e}");
            return (Vec::new(), 1);
        }
    };
    tokio::spawn(connection);
    let mut loops = Vec::new();
    for _ in 0..streams {
        let (mut sender, uri) = (sender.clone(), uri.clone());
        loops.push(tokio::spawn(async move {
            let (mut latencies, mut errors) = (Vec::new(), 0u64);
            while Instant::now() < deadline {
                let started = Instant::now();
                let request = http::Request::get(uri.clone())
                    .header("user-agent", "https-load")
                    .body(())
                    .expect("a GET");
                // Waits for a stream the connection's limit allows.
                let Ok(ready) = sender.clone().ready().await else {
                    errors += 1;
                    break;
                };
                sender = ready;
                let Ok((response, _)) = sender.send_request(request, true) else {
                    errors += 1;
                    break;
                };
                let Ok(response) = response.await else {
                    errors += 1;
                    break;
                };
                let status = response.status();
                let mut body = response.into_body();
                let mut failed = false;
                while let Some(chunk) = body.data().await {
                    match chunk {
                        Ok(chunk) => {
                            let _ = body.flow_control().release_capacity(chunk.len());
                        }
                        Err(_) => {
                            failed = true;
                            break;
                        }
                    }
                }
                if status == 200 && !failed {
                    latencies.push(started.elapsed().as_secs_f64() * 1000.0);
                } else {
                    errors += 1;
                }
            }
            (latencies, errors)
        }));
    }
    let (mut all, mut errors) = (Vec::new(), 0);
    for task in loops {
        if let Ok((latencies, e)) = task.await {
            all.extend(latencies);
            errors += e;
        }
    }
    (all, errors)
}

async fn load(args: &Args, connector: TlsConnector) -> Result<(), Error> {
    let deadline = Instant::now() + Duration::from_secs_f64(args.seconds);
    let mut tasks = Vec::new();
    for _ in 0..args.connections {
        let (connector, proxy, gateway, target, path, name, plain, h2_streams) = (
            connector.clone(),
            args.proxy,
            args.gateway,
            args.target,
            args.path.clone(),
            args.name.clone(),
            args.plain,
            args.h2_streams,
        );
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut errors = 0u64;
            if h2_streams > 0 {
                let host = authority(target, name.as_deref());
                let Ok(uri) = format!("https://{host}{path}").parse::<http::Uri>() else {
                    return (latencies, 1);
                };
                return match open(&connector, (proxy, gateway), target, name.as_deref()).await {
                    Ok(tls) => h2_connection(tls, h2_streams, uri, deadline).await,
                    Err(e) => {
                        eprintln!("open: {e}");
                        (latencies, 1)
                    }
                };
            }
            let opened: Result<Box<dyn Conn>, Error> = if plain {
                open_plain(proxy, target).await.map(|c| Box::new(c) as _)
            } else {
                open(&connector, (proxy, gateway), target, name.as_deref())
                    .await
                    .map(|c| Box::new(c) as _)
            };
            let conn = match opened {
                Ok(conn) => conn,
                Err(e) => {
                    eprintln!("open: {e}");
                    return (latencies, 1);
                }
            };
            let mut stream = BufReader::new(conn);
            let host = authority(target, name.as_deref());
            // Through a proxy in plain HTTP the request names its origin (absolute form).
            let line = match (plain, proxy) {
                (true, Some(_)) => format!("http://{host}{path}"),
                _ => path,
            };
            let request =
                format!("GET {line} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: https-load\r\n\r\n");
            while Instant::now() < deadline {
                let started = Instant::now();
                if stream
                    .get_mut()
                    .write_all(request.as_bytes())
                    .await
                    .is_err()
                {
                    errors += 1;
                    break;
                }
                match read_response(&mut stream).await {
                    Ok(200) => latencies.push(started.elapsed().as_secs_f64() * 1000.0),
                    Ok(_) => errors += 1,
                    Err(_) => {
                        errors += 1;
                        break;
                    }
                }
            }
            (latencies, errors)
        }));
    }
    let started = Instant::now();
    let (mut all, mut errors) = (Vec::new(), 0);
    for task in tasks {
        let (latencies, e) = task.await?;
        all.extend(latencies);
        errors += e;
    }
    let elapsed = started.elapsed().as_secs_f64().max(args.seconds);
    all.sort_by(f64::total_cmp);
    println!(
        "{{\"kind\":\"load\",\"requests\":{},\"errors\":{errors},\"rps\":{:.1},\"p50_ms\":{:.3},\"p99_ms\":{:.3}}}",
        all.len(),
        all.len() as f64 / elapsed,
        percentile(&all, 0.5),
        percentile(&all, 0.99)
    );
    Ok(())
}

async fn handshakes(args: &Args, connector: TlsConnector) -> Result<(), Error> {
    let mut times = Vec::with_capacity(args.handshakes);
    for i in 0..args.handshakes {
        let target = if args.distinct {
            // 127.0.x.y, never 127.0.0.1: a name robotsgate has not minted for yet.
            let n = i + 2;
            SocketAddr::from((
                [127, 0, (n / 250) as u8, (n % 250 + 2) as u8],
                args.target.port(),
            ))
        } else {
            args.target
        };
        let started = Instant::now();
        let tls = open(
            &connector,
            (args.proxy, args.gateway),
            target,
            args.name.as_deref(),
        )
        .await?;
        times.push(started.elapsed().as_secs_f64() * 1000.0);
        drop(tls);
    }
    times.sort_by(f64::total_cmp);
    println!(
        "{{\"kind\":\"handshakes\",\"count\":{},\"distinct\":{},\"p50_ms\":{:.3},\"p90_ms\":{:.3},\"mean_ms\":{:.3}}}",
        times.len(),
        args.distinct,
        percentile(&times, 0.5),
        percentile(&times, 0.9),
        times.iter().sum::<f64>() / times.len().max(1) as f64
    );
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let args = args()?;
    let connector = TlsConnector::from(tls_config(&args.ca, args.h2_streams > 0)?);
    if args.handshakes > 0 {
        handshakes(&args, connector).await
    } else {
        load(&args, connector).await
    }
}
