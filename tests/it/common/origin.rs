//! The test origin: a loopback server that logs when each request arrives and ends
//! (and can misbehave on purpose), and what tests read from its log: pages, gaps, the
//! most requests at once.

use super::*;

/// What the origin does for one path.
#[derive(Clone, Debug)]
pub enum Behaviour {
    /// A complete response.
    Respond {
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
    /// `Content-Length` promises `total` octets, `body` is sent, then the connection is reset.
    ResetMidBody { body: Vec<u8>, total: usize },
    /// A chunked body whose last chunk never comes (connection closed instead).
    TruncatedChunked { body: Vec<u8> },
    /// `body` in chunks of `chunk` octets, each written on its own, and a trailer.
    Chunked { body: Vec<u8>, chunk: usize },
    /// `body` without a length, ended by closing the connection.
    UntilClose { body: Vec<u8> },
    /// These octets as they are (a head and whatever follows), then the connection
    /// closed: an origin that frames its answer as it likes.
    Raw { octets: Vec<u8> },
    /// Sends the body one octet every `every`.
    Trickle { body: Vec<u8>, every: Duration },
    /// The response after a delay.
    Delayed { delay: Duration, body: Vec<u8> },
    /// Informational answers (`102`, `103 Early Hints`…) at once, then the final `200`
    /// with `body` after `delay`.
    Informational {
        codes: Vec<u16>,
        delay: Duration,
        body: Vec<u8>,
    },
    /// A chunked response that never ends: a chunk of `chunk` octets every `every`
    /// until the write fails.
    Endless { every: Duration, chunk: usize },
    /// The head (`Content-Length: total`) and `first` body octets at once, then nothing
    /// for `stall`, then the rest.
    Stall {
        first: Vec<u8>,
        total: usize,
        stall: Duration,
    },
}

impl Behaviour {
    /// `body` after `millis` milliseconds.
    pub fn delayed(millis: u64, body: &str) -> Behaviour {
        Behaviour::Delayed {
            delay: Duration::from_millis(millis),
            body: body.as_bytes().to_vec(),
        }
    }

    pub fn ok(body: &str) -> Behaviour {
        Behaviour::Respond {
            status: 200,
            headers: vec![("Content-Type".into(), "text/plain".into())],
            body: body.as_bytes().to_vec(),
        }
    }
    pub fn status(status: u16) -> Behaviour {
        Behaviour::Respond {
            status,
            headers: vec![],
            body: format!("status {status}\n").into_bytes(),
        }
    }
    pub fn with_headers(status: u16, headers: &[(&str, &str)], body: &str) -> Behaviour {
        Behaviour::Respond {
            status,
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            body: body.as_bytes().to_vec(),
        }
    }
    pub fn redirect(status: u16, location: &str) -> Behaviour {
        Behaviour::Respond {
            status,
            headers: vec![("Location".into(), location.into())],
            body: vec![],
        }
    }
}

/// One request as the origin received it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    pub target: String,
    pub headers: Vec<(String, String)>,
    /// When the request head had arrived, and when the origin began writing its
    /// response's last octets: no later than a proxy can have seen the response end (a
    /// time taken after the write would add the origin's own scheduling delay to every
    /// gap measured from it, and find gaps shorter than the proxy kept).
    pub arrived: Instant,
    pub done: Option<Instant>,
    /// Which connection it came on: the order of its accept, from 0.
    pub connection: usize,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// What the origin can do to a connection besides reading and writing.
pub trait OriginStream: AsyncRead + AsyncWrite + Unpin + Send {
    /// Makes the close send RST (SO_LINGER 0).
    fn reset_on_close(&self);
}

/// An origin's stream that notes when its latest write began.
struct Timed<S> {
    /// The connection.
    inner: S,
    /// When the latest write call began (before its octets went out).
    last_write: Option<Instant>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Timed<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Timed<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.last_write = Some(Instant::now());
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl<S: OriginStream> OriginStream for Timed<S> {
    fn reset_on_close(&self) {
        self.inner.reset_on_close();
    }
}

impl OriginStream for TcpStream {
    fn reset_on_close(&self) {
        #[allow(deprecated)]
        let _ = self.set_linger(Some(Duration::ZERO));
    }
}

impl OriginStream for tokio_rustls::server::TlsStream<TcpStream> {
    fn reset_on_close(&self) {
        self.get_ref().0.reset_on_close();
    }
}

#[derive(Clone)]
pub struct TestOrigin {
    pub addr: SocketAddr,
    /// `http://127.0.0.1:PORT`, or `https://NAME:PORT` for a TLS origin.
    base: String,
    routes: Arc<Mutex<HashMap<String, Behaviour>>>,
    log: Arc<Mutex<Vec<Seen>>>,
    /// The TLS config new connections get (a TLS origin only); replaceable, like a
    /// certificate rotation.
    tls: Option<Arc<Mutex<Arc<rustls::ServerConfig>>>>,
    /// When each connection was accepted.
    accepted: Arc<Mutex<Vec<Instant>>>,
    /// The next connection's TLS handshake waits for a permit of this (a connect held,
    /// as a slow origin holds it).
    hold: Arc<Mutex<Option<Arc<tokio::sync::Semaphore>>>>,
}

impl TestOrigin {
    /// Starts an origin on 127.0.0.1 (an ephemeral port) in the current tokio runtime.
    /// Paths without a route answer `200 page <path>`.
    pub async fn start(routes: Vec<(&str, Behaviour)>) -> TestOrigin {
        TestOrigin::listen(routes, None).await
    }

    /// An origin serving `robots` as its robots.txt (every other path: `200 page <path>`).
    pub async fn robots(robots: &str) -> TestOrigin {
        TestOrigin::start(vec![("/robots.txt", Behaviour::ok(robots))]).await
    }

    /// An origin serving `robots` as its robots.txt, to be kept `max_age` seconds
    /// (`Cache-Control: max-age`).
    pub async fn robots_for(robots: &str, max_age: u32) -> TestOrigin {
        let cache = format!("max-age={max_age}");
        let headers = [("Cache-Control", cache.as_str())];
        let file = Behaviour::with_headers(200, &headers, robots);
        TestOrigin::start(vec![("/robots.txt", file)]).await
    }

    /// An origin serving `robots` as its robots.txt and `routes` besides.
    pub async fn robots_and(robots: &str, mut routes: Vec<(&str, Behaviour)>) -> TestOrigin {
        routes.insert(0, ("/robots.txt", Behaviour::ok(robots)));
        TestOrigin::start(routes).await
    }

    /// [`TestOrigin::start`] with routes whose paths were built at run time.
    pub async fn start_owned(routes: &[(String, Behaviour)]) -> TestOrigin {
        let routes = routes
            .iter()
            .map(|(p, b)| (p.as_str(), b.clone()))
            .collect();
        TestOrigin::listen(routes, None).await
    }

    /// Starts an origin on `listener` (one bound elsewhere, e.g. in a [`Netns`]).
    pub async fn start_on(listener: StdListener, routes: Vec<(&str, Behaviour)>) -> TestOrigin {
        TestOrigin::serve_listener(listener, routes, None)
    }

    /// Starts an HTTPS-only origin on `listener`, named `host` in its URLs.
    pub async fn start_tls_on(
        listener: StdListener,
        routes: Vec<(&str, Behaviour)>,
        tls: Arc<rustls::ServerConfig>,
        host: &str,
    ) -> TestOrigin {
        TestOrigin::serve_listener(listener, routes, Some((tls, host)))
    }

    /// Starts an HTTPS-only origin with `tls` (certificates from a [`TestCa`]); its URLs
    /// name it `host`.
    pub async fn start_tls(
        routes: Vec<(&str, Behaviour)>,
        tls: Arc<rustls::ServerConfig>,
        host: &str,
    ) -> TestOrigin {
        TestOrigin::listen(routes, Some((tls, host))).await
    }

    async fn listen(
        routes: Vec<(&str, Behaviour)>,
        tls: Option<(Arc<rustls::ServerConfig>, &str)>,
    ) -> TestOrigin {
        let listener = StdListener::bind("127.0.0.1:0").expect("bind origin");
        TestOrigin::serve_listener(listener, routes, tls)
    }

    fn serve_listener(
        listener: StdListener,
        routes: Vec<(&str, Behaviour)>,
        tls: Option<(Arc<rustls::ServerConfig>, &str)>,
    ) -> TestOrigin {
        listener.set_nonblocking(true).expect("nonblocking");
        let listener = TcpListener::from_std(listener).expect("tokio listener");
        let addr = listener.local_addr().expect("addr");
        let base = match &tls {
            Some((_, host)) => format!("https://{host}:{}", addr.port()),
            None => format!("http://{addr}"),
        };
        let origin = TestOrigin {
            addr,
            base,
            routes: Arc::new(Mutex::new(
                routes
                    .into_iter()
                    .map(|(p, b)| (p.to_string(), b))
                    .collect(),
            )),
            log: Arc::default(),
            tls: tls.map(|(config, _)| Arc::new(Mutex::new(config))),
            accepted: Arc::default(),
            hold: Arc::default(),
        };
        let server = origin.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let connection = {
                    let mut accepted = server.accepted.lock().expect("accepted");
                    accepted.push(Instant::now());
                    accepted.len() - 1
                };
                let server = server.clone();
                // The TLS config current at accept time (see `set_tls`).
                let tls = server.tls.as_ref().map(|t| t.lock().expect("tls").clone());
                let hold = server.hold.lock().expect("hold").take();
                tokio::spawn(async move {
                    match tls {
                        None => server.serve(stream, connection).await,
                        Some(config) => {
                            if let Some(gate) = hold {
                                let _ = gate.acquire().await;
                            }
                            let acceptor = tokio_rustls::TlsAcceptor::from(config);
                            if let Ok(stream) = acceptor.accept(stream).await {
                                server.serve(stream, connection).await;
                            }
                        }
                    }
                });
            }
        });
        origin
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The next connection to this TLS origin is accepted, and its handshake waits
    /// until the test adds a permit to the semaphore returned: a connect held open.
    pub fn hold_next_handshake(&self) -> Arc<tokio::sync::Semaphore> {
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        *self.hold.lock().expect("hold") = Some(gate.clone());
        gate
    }

    /// New connections to this TLS origin get `config` from now on.
    pub fn set_tls(&self, config: Arc<rustls::ServerConfig>) {
        *self
            .tls
            .as_ref()
            .expect("a TLS origin")
            .lock()
            .expect("tls") = config;
    }

    pub fn set(&self, path: &str, behaviour: Behaviour) {
        self.routes
            .lock()
            .expect("routes")
            .insert(path.to_string(), behaviour);
    }

    /// When each connection to this origin was accepted, in order.
    pub fn accepted(&self) -> Vec<Instant> {
        self.accepted.lock().expect("accepted").clone()
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.log.lock().expect("log").clone()
    }

    /// The first request for `target` the origin saw; panics naming it when none came.
    pub fn first(&self, target: &str) -> Seen {
        self.seen()
            .into_iter()
            .find(|s| s.target == target)
            .unwrap_or_else(|| panic!("{target} never reached the origin"))
    }

    pub fn count(&self, target: &str) -> usize {
        self.seen().iter().filter(|s| s.target == target).count()
    }

    async fn serve<S: OriginStream>(&self, stream: S, connection: usize) {
        let mut stream = Timed {
            inner: stream,
            last_write: None,
        };
        loop {
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                match stream.read(&mut byte).await {
                    Ok(1) => head.push(byte[0]),
                    _ => return,
                }
                if head.len() > 65536 {
                    return;
                }
            }
            let text = String::from_utf8_lossy(&head).into_owned();
            let mut lines = text.split("\r\n");
            let mut parts = lines.next().unwrap_or("").split(' ');
            let method = parts.next().unwrap_or("").to_string();
            let target = parts.next().unwrap_or("").to_string();
            let headers: Vec<(String, String)> = lines
                .filter_map(|l| l.split_once(':'))
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                .collect();
            let index = {
                let mut log = self.log.lock().expect("log");
                log.push(Seen {
                    method,
                    target: target.clone(),
                    headers,
                    arrived: Instant::now(),
                    done: None,
                    connection,
                });
                log.len() - 1
            };
            let path = target.split('?').next().unwrap_or("").to_string();
            let behaviour = self
                .routes
                .lock()
                .expect("routes")
                .get(&path)
                .cloned()
                .unwrap_or_else(|| Behaviour::ok(&format!("page {target}\n")));
            stream.last_write = None;
            let keep = self.respond(&mut stream, behaviour).await;
            let done = stream.last_write.unwrap_or_else(Instant::now);
            self.log.lock().expect("log")[index].done = Some(done);
            if !keep {
                return;
            }
        }
    }

    /// Writes one response; true if the connection may carry another request.
    async fn respond<S: OriginStream>(&self, stream: &mut S, behaviour: Behaviour) -> bool {
        match behaviour {
            Behaviour::Respond {
                status,
                headers,
                body,
            } => {
                let close = headers.iter().any(|(k, v)| {
                    k.eq_ignore_ascii_case("connection") && v.eq_ignore_ascii_case("close")
                });
                let mut out = format!("HTTP/1.1 {status} X\r\nContent-Length: {}\r\n", body.len());
                for (k, v) in headers {
                    out.push_str(&format!("{k}: {v}\r\n"));
                }
                out.push_str("\r\n");
                let mut bytes = out.into_bytes();
                bytes.extend_from_slice(&body);
                stream.write_all(&bytes).await.is_ok() && !close
            }
            Behaviour::Delayed { delay, body } => ok_after(stream, delay, &body).await,
            Behaviour::Raw { octets } => {
                let _ = stream.write_all(&octets).await;
                false
            }
            Behaviour::Informational { codes, delay, body } => {
                for code in codes {
                    let hint = format!(
                        "HTTP/1.1 {code} Informational\r\nLink: </style.css>; rel=preload\r\n\r\n"
                    );
                    if stream.write_all(hint.as_bytes()).await.is_err() {
                        return false;
                    }
                }
                ok_after(stream, delay, &body).await
            }
            Behaviour::Endless { every, chunk } => endless(stream, every, chunk).await,
            Behaviour::ResetMidBody { body, total } => {
                let mut bytes =
                    format!("HTTP/1.1 200 OK\r\nContent-Length: {total}\r\n\r\n").into_bytes();
                bytes.extend_from_slice(&body);
                let _ = stream.write_all(&bytes).await;
                // Close sends RST. Blocking on drop is fine in a test origin.
                stream.reset_on_close();
                false
            }
            Behaviour::TruncatedChunked { body } => {
                let mut bytes = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
                bytes.extend_from_slice(format!("{:x}\r\n", body.len()).as_bytes());
                bytes.extend_from_slice(&body);
                bytes.extend_from_slice(b"\r\n");
                let _ = stream.write_all(&bytes).await;
                false
            }
            Behaviour::Chunked { body, chunk } => chunked(stream, &body, chunk).await,
            Behaviour::UntilClose { body } => {
                let mut bytes = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n".to_vec();
                bytes.extend_from_slice(&body);
                let _ = stream.write_all(&bytes).await;
                false
            }
            Behaviour::Stall {
                first,
                total,
                stall,
            } => {
                let mut bytes =
                    format!("HTTP/1.1 200 OK\r\nContent-Length: {total}\r\n\r\n").into_bytes();
                bytes.extend_from_slice(&first);
                if stream.write_all(&bytes).await.is_err() || stream.flush().await.is_err() {
                    return false;
                }
                tokio::time::sleep(stall).await;
                let rest = vec![b'z'; total.saturating_sub(first.len())];
                stream.write_all(&rest).await.is_ok()
            }
            Behaviour::Trickle { body, every } => trickle(stream, &body, every).await,
        }
    }
}

/// A `200` with `body` after `delay`; true if it was written.
async fn ok_after<S: OriginStream>(stream: &mut S, delay: Duration, body: &[u8]) -> bool {
    tokio::time::sleep(delay).await;
    let mut bytes =
        format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
    bytes.extend_from_slice(body);
    stream.write_all(&bytes).await.is_ok()
}

/// Requests for `prefix` at the origin, in arrival order.
pub fn pages(origin: &TestOrigin, prefix: &str) -> Vec<Seen> {
    let mut seen: Vec<Seen> = origin
        .seen()
        .into_iter()
        .filter(|s| s.target.starts_with(prefix))
        .collect();
    seen.sort_by_key(|s| s.arrived);
    seen
}

/// What the origin received from the first request for `target` on, in arrival order;
/// panics naming `target` when it never came.
pub fn received_from(origin: &TestOrigin, target: &str) -> Vec<Seen> {
    let mut seen = pages(origin, "/");
    let at = seen
        .iter()
        .position(|s| s.target == target)
        .unwrap_or_else(|| panic!("{target} never reached the origin: {seen:?}"));
    seen.split_off(at)
}

/// The targets of `seen`, in order.
pub fn targets(seen: &[Seen]) -> Vec<&str> {
    seen.iter().map(|s| s.target.as_str()).collect()
}

/// Gaps from one response's end to the next request's arrival (0 when they overlap).
pub fn gaps(seen: &[Seen]) -> Vec<Duration> {
    seen.windows(2)
        .map(|w| {
            w[1].arrived
                .saturating_duration_since(w[0].done.expect("completed"))
        })
        .collect()
}

/// The smallest of [`gaps`] (`Duration::MAX` for fewer than two requests).
pub fn min_gap(seen: &[Seen]) -> Duration {
    gaps(seen).into_iter().min().unwrap_or(Duration::MAX)
}

/// Asserts that no request in `seen` started sooner than `delay` after the previous
/// one ended, at the origin.
pub fn assert_gaps_at_least(seen: &[Seen], delay: Duration) {
    let gap = min_gap(seen);
    assert!(gap >= delay, "gap {gap:?} at the origin, below {delay:?}");
}

/// The most requests the origin was serving at any one moment. A response counts as
/// ended when the origin task noted its end, which a busy machine can delay past the
/// proxy's next request by a few milliseconds; overlaps shorter than [`JITTER`] are
/// that, not two requests served at once (a real overlap lasts a response's length).
pub fn most_at_once(seen: &[Seen]) -> usize {
    seen.iter()
        .map(|s| {
            seen.iter()
                .filter(|o| o.arrived <= s.arrived && o.done.is_none_or(|d| d > s.arrived + JITTER))
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// How late an origin task may note a response's end on a loaded machine.
pub const JITTER: Duration = Duration::from_millis(20);

/// An endless chunked answer: a chunk of `chunk` dots every `every`, until the reader
/// goes. False: the connection is not reused.
async fn endless<S: OriginStream>(stream: &mut S, every: Duration, chunk: usize) -> bool {
    let head = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
    if stream.write_all(head.as_bytes()).await.is_err() {
        return false;
    }
    let mut part = format!("{chunk:x}\r\n").into_bytes();
    part.extend(std::iter::repeat_n(b'.', chunk));
    part.extend_from_slice(b"\r\n");
    loop {
        tokio::time::sleep(every).await;
        if stream.write_all(&part).await.is_err() {
            return false;
        }
    }
}

/// `body` chunked in parts of `chunk` octets, each flushed and 2 ms apart, then a
/// trailer. True when all of it was written.
async fn chunked<S: OriginStream>(stream: &mut S, body: &[u8], chunk: usize) -> bool {
    let head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
    if stream.write_all(head).await.is_err() {
        return false;
    }
    for part in body.chunks(chunk.max(1)) {
        let mut bytes = format!("{:x}\r\n", part.len()).into_bytes();
        bytes.extend_from_slice(part);
        bytes.extend_from_slice(b"\r\n");
        if stream.write_all(&bytes).await.is_err() || stream.flush().await.is_err() {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    stream.write_all(b"0\r\nX-Trailer: t\r\n\r\n").await.is_ok()
}

/// `body` with its length, one octet every `every`. True when all of it was written.
async fn trickle<S: OriginStream>(stream: &mut S, body: &[u8], every: Duration) -> bool {
    let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
    if stream.write_all(head.as_bytes()).await.is_err() {
        return false;
    }
    for &b in body {
        tokio::time::sleep(every).await;
        if stream.write_all(&[b]).await.is_err() {
            return false;
        }
    }
    true
}
