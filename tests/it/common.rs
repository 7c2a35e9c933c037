//! Test fixtures over real sockets on 127.0.0.1: an origin server that logs every request
//! it receives and can misbehave on purpose, and a real `robotsgate run` process.

use std::collections::HashMap;
use std::io::Write as _;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

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
    /// A chunked response that never ends: a chunk every `every` until the write fails.
    Endless { every: Duration },
    /// The head (`Content-Length: total`) and `first` body octets at once, then nothing
    /// for `stall`, then the rest.
    Stall {
        first: Vec<u8>,
        total: usize,
        stall: Duration,
    },
}

impl Behaviour {
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
    /// When the request head had arrived, and when the response was fully written.
    pub arrived: Instant,
    pub done: Option<Instant>,
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
}

impl TestOrigin {
    /// Starts an origin on 127.0.0.1 (an ephemeral port) in the current tokio runtime.
    /// Paths without a route answer `200 page <path>`.
    pub async fn start(routes: Vec<(&str, Behaviour)>) -> TestOrigin {
        TestOrigin::listen(routes, None).await
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
        };
        let server = origin.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                server
                    .accepted
                    .lock()
                    .expect("accepted")
                    .push(Instant::now());
                let server = server.clone();
                // The TLS config current at accept time (see `set_tls`).
                let tls = server.tls.as_ref().map(|t| t.lock().expect("tls").clone());
                tokio::spawn(async move {
                    match tls {
                        None => server.serve(stream).await,
                        Some(config) => {
                            let acceptor = tokio_rustls::TlsAcceptor::from(config);
                            if let Ok(stream) = acceptor.accept(stream).await {
                                server.serve(stream).await;
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

    pub fn count(&self, target: &str) -> usize {
        self.seen().iter().filter(|s| s.target == target).count()
    }

    async fn serve<S: OriginStream>(&self, mut stream: S) {
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
            let keep = self.respond(&mut stream, behaviour).await;
            self.log.lock().expect("log")[index].done = Some(Instant::now());
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
            Behaviour::Endless { every } => {
                let head = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
                if stream.write_all(head.as_bytes()).await.is_err() {
                    return false;
                }
                loop {
                    tokio::time::sleep(every).await;
                    if stream.write_all(b"6\r\nmore.\n\r\n").await.is_err() {
                        return false;
                    }
                }
            }
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
            Behaviour::Trickle { body, every } => {
                let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
                if stream.write_all(head.as_bytes()).await.is_err() {
                    return false;
                }
                for b in body {
                    tokio::time::sleep(every).await;
                    if stream.write_all(&[b]).await.is_err() {
                        return false;
                    }
                }
                true
            }
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

/// Runs `robotsgate check-config` on `config`, which must be refused: what it said.
pub fn config_refusal(config: &std::path::Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_robotsgate"))
        .args(["check-config", "--config"])
        .arg(config)
        .output()
        .expect("robotsgate check-config");
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "accepted: {said}");
    said
}

/// A free TCP port on 127.0.0.1 (bound and released; the OS does not hand it out again
/// right away).
pub fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// A network namespace made for one test (`ip netns add`), loopback up, with its own
/// `/etc/hosts` and an `/etc/resolv.conf` naming only 127.0.0.1 (both bind-mounted by
/// `ip netns exec` for the processes run in it): nothing in it can reach the machine's
/// network, and its firewall rules touch nothing outside. Deleted on drop.
pub struct Netns {
    pub name: String,
}

impl Netns {
    /// A new namespace whose `/etc/hosts` maps each (name, address).
    pub fn new(hosts: &[(&str, &str)]) -> Netns {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("rgtest{}x{n}", std::process::id());
        let ns = Netns { name };
        run_ok(Command::new("ip").args(["netns", "add", &ns.name]));
        run_ok(Command::new("ip").args(["-n", &ns.name, "link", "set", "lo", "up"]));
        let etc = ns.etc();
        std::fs::create_dir_all(&etc).expect("/etc/netns/NAME");
        let mut text = String::from("127.0.0.1 localhost\n");
        for (name, addr) in hosts {
            text.push_str(&format!("{addr} {name}\n"));
        }
        std::fs::write(etc.join("hosts"), text).expect("hosts");
        std::fs::write(etc.join("resolv.conf"), "nameserver 127.0.0.1\n").expect("resolv.conf");
        ns
    }

    fn etc(&self) -> PathBuf {
        PathBuf::from("/etc/netns").join(&self.name)
    }

    /// `program` run in the namespace (as root).
    pub fn command(&self, program: &str) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.name, program]);
        command
    }

    /// `program` run in the namespace as the unprivileged crawler uid (65534), the one
    /// the firewall rules redirect.
    pub fn crawler(&self, program: &str) -> Command {
        let mut command = self.command("setpriv");
        command.args([
            "--reuid",
            "65534",
            "--regid",
            "65534",
            "--clear-groups",
            program,
        ]);
        command
    }

    /// Runs a shell script in the namespace as root; panics when it fails.
    pub fn sh(&self, script: &str) {
        run_ok(self.command("sh").args(["-ec", script]));
    }

    /// A listener bound to `addr` inside the namespace.
    pub fn listener(&self, addr: &str) -> StdListener {
        in_netns(Some(&self.name), || {
            StdListener::bind(addr).expect("bind in netns")
        })
    }

    /// A UDP socket bound to `addr` inside the namespace.
    pub fn udp(&self, addr: &str) -> std::net::UdpSocket {
        in_netns(Some(&self.name), || {
            std::net::UdpSocket::bind(addr).expect("bind in netns")
        })
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
        let _ = std::fs::remove_dir_all(self.etc());
    }
}

/// Runs `f` on a thread that joined network namespace `name` (sockets it opens stay
/// there), or on a plain thread.
pub fn in_netns<T: Send>(name: Option<&str>, f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                if let Some(name) = name {
                    let ns = std::fs::File::open(format!("/run/netns/{name}")).expect("netns");
                    nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
                }
                f()
            })
            .join()
            .expect("netns thread")
    })
}

/// Runs `command`: whether it succeeded, and its stdout followed by its stderr.
pub fn run_output(command: &mut Command) -> (bool, String) {
    let out = command.output().expect("run command");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Runs `command`; panics with its output when it fails.
pub fn run_ok(command: &mut Command) -> String {
    let out = command.output().expect("run command");
    assert!(
        out.status.success(),
        "{command:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A `robotsgate run` process with its own config, ports, pid file and upgrade socket.
pub struct Proxy {
    child: Child,
    /// The network namespace it runs in ([`Proxy::start_in`]).
    netns: Option<String>,
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    /// Fleet mode: the peer channel's listener.
    pub peer: Option<SocketAddr>,
    /// Shared with a process that took over by graceful upgrade.
    dir: Arc<tempfile::TempDir>,
    pub log_path: PathBuf,
    /// The command-line arguments after `run`, for an upgrade to repeat.
    args: Vec<String>,
}

impl Proxy {
    /// Starts robotsgate with `robotsgate:` settings appended from `extra_yaml` (indented
    /// under `robotsgate:`) and extra command-line arguments; waits until it accepts.
    pub fn start(extra_yaml: &str, args: &[&str]) -> Proxy {
        Proxy::start_with_env(extra_yaml, args, &[])
    }

    /// As [`Proxy::start`], with extra environment variables.
    pub fn start_with_env(extra_yaml: &str, args: &[&str], env: &[(&str, &str)]) -> Proxy {
        Proxy::launch(extra_yaml, args, env, None)
    }

    /// As [`Proxy::start`], inside network namespace `netns`.
    pub fn start_in(netns: &Netns, extra_yaml: &str, args: &[&str]) -> Proxy {
        Proxy::launch(extra_yaml, args, &[], Some(&netns.name))
    }

    fn launch(extra_yaml: &str, args: &[&str], env: &[(&str, &str)], netns: Option<&str>) -> Proxy {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("robotsgate.yaml");
        let mut file = std::fs::File::create(&config).expect("config");
        write!(
            file,
            "version: 1\nthreads: 1\npid_file: {pid}\nupgrade_sock: {sock}\ngrace_period_seconds: 0\ngraceful_shutdown_timeout_seconds: 1\nrobotsgate:\n{extra_yaml}",
            pid = dir.path().join("pid").display(),
            sock = dir.path().join("upgrade.sock").display(),
        )
        .expect("write config");
        let log_path = dir.path().join("robotsgate.log");
        // A port picked free can be taken by another test before robotsgate binds it; a
        // robotsgate that could not bind exits, and is started again on other ports.
        for _attempt in 0..5 {
            let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
            let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
            // A fleet member's peer channel: its own port too.
            let peer: Option<SocketAddr> = extra_yaml
                .contains("  fleet:")
                .then(|| format!("127.0.0.1:{}", free_port()).parse().expect("addr"));
            let log = std::fs::File::create(&log_path).expect("log file");
            let mut run_args: Vec<String> = vec![
                "--config".into(),
                config.to_string_lossy().into_owned(),
                "--listen".into(),
                addr.to_string(),
                "--admin-listen".into(),
                admin.to_string(),
            ];
            if let Some(peer) = peer {
                run_args.extend(["--peer-listen".into(), peer.to_string()]);
            }
            run_args.extend(args.iter().map(|a| a.to_string()));
            let mut command = match netns {
                Some(name) => {
                    let mut c = Command::new("ip");
                    c.args(["netns", "exec", name, env!("CARGO_BIN_EXE_robotsgate")]);
                    c
                }
                None => Command::new(env!("CARGO_BIN_EXE_robotsgate")),
            };
            let child = command
                .arg("run")
                .args(&run_args)
                .envs(env.iter().copied())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("spawn robotsgate");
            let mut child = child;
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                if let Ok(Some(_)) = child.try_wait() {
                    break; // exited: try other ports
                }
                // Ready when this process listens on both ports (a port picked free can be
                // another test's listener: answering is not enough) and the admin one
                // says it is robotsgate.
                if listens_on(child.id(), addr.port())
                    && listens_on(child.id(), admin.port())
                    && peer.is_none_or(|p| listens_on(child.id(), p.port()))
                    && in_netns(netns, || healthz(admin))
                {
                    return Proxy {
                        child,
                        netns: netns.map(str::to_string),
                        addr,
                        admin,
                        peer,
                        dir: Arc::new(dir),
                        log_path,
                        args: run_args,
                    };
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "robotsgate did not start:\n{}",
                        std::fs::read_to_string(&log_path).unwrap_or_default()
                    );
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        panic!(
            "robotsgate did not start after 5 attempts:\n{}",
            std::fs::read_to_string(&log_path).unwrap_or_default()
        );
    }
}

/// Starts a server process the test does not otherwise control: `spawn(port)` starts
/// it on the port `pick()` chose, and it is ready once it listens there itself (a port
/// picked free can be taken by another test meanwhile; such a process exits and is
/// started again on another port). Panics naming `what` after five attempts.
pub fn start_listening(
    what: &str,
    mut pick: impl FnMut() -> u16,
    mut spawn: impl FnMut(u16) -> Child,
) -> (Child, u16) {
    for _attempt in 0..5 {
        let port = pick();
        let mut child = spawn(port);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                break;
            }
            if listens_on(child.id(), port) {
                return (child, port);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    panic!("{what} did not start");
}

/// Does process `pid` hold a listening TCP socket on `port` (the sockets of its
/// network namespace's /proc/PID/net/tcp{,6} in LISTEN state, matched to its fds)?
pub fn listens_on(pid: u32, port: u16) -> bool {
    let mut inodes = Vec::new();
    for table in ["tcp", "tcp6"] {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let local_port = fields
                .get(1)
                .and_then(|a| a.rsplit(':').next())
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            if local_port == Some(port) && fields.get(3) == Some(&"0A") {
                if let Some(inode) = fields.get(9) {
                    inodes.push(format!("socket:[{inode}]"));
                }
            }
        }
    }
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path())
            .is_ok_and(|target| inodes.iter().any(|i| target.to_string_lossy() == *i))
    })
}

/// `GET /healthz` on an admin listener answers 200.
fn healthz(admin: SocketAddr) -> bool {
    use std::io::Read;
    let Ok(mut stream) = std::net::TcpStream::connect(admin) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    if stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut reply = String::new();
    let _ = stream.read_to_string(&mut reply);
    reply.starts_with("HTTP/1.1 200")
}

impl Proxy {
    /// The configuration file this process was started with.
    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("robotsgate.yaml")
    }

    /// Pingora's graceful upgrade, as the systemd unit's reload does it: a new process
    /// started with `--upgrade` (same arguments, configuration read again) and SIGQUIT
    /// to this one, which hands over its listening sockets and finishes what it has in
    /// flight. Returns the new process once it answers on the admin listener.
    pub fn upgrade(&self) -> Proxy {
        let log_path = self
            .dir
            .path()
            .join(format!("robotsgate-{}.log", self.pid()));
        let log = std::fs::File::create(&log_path).expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_robotsgate"))
            .arg("run")
            .args(&self.args)
            .arg("--upgrade")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn robotsgate --upgrade");
        let status = Command::new("kill")
            .args(["-QUIT", &self.pid().to_string()])
            .status()
            .expect("kill -QUIT");
        assert!(status.success());
        let mut next = Proxy {
            child,
            netns: self.netns.clone(),
            addr: self.addr,
            admin: self.admin,
            peer: self.peer,
            dir: self.dir.clone(),
            log_path,
            args: self.args.clone(),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        // Started: it has read its configuration and waits for (or holds) the listeners.
        while next.child.try_wait().ok().flatten().is_none() {
            if next.log().contains("robotsgate listening") {
                return next;
            }
            assert!(
                Instant::now() < deadline,
                "upgrade did not complete:\n{}",
                next.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("the upgraded robotsgate exited:\n{}", next.log());
    }

    /// Stops the process as systemd does (SIGTERM) and waits for it to exit.
    pub fn stop(&mut self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .expect("kill -TERM");
        assert!(status.success());
        let deadline = Instant::now() + Duration::from_secs(15);
        while !self.exited() {
            assert!(
                Instant::now() < deadline,
                "robotsgate did not stop:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether the process has exited.
    pub fn exited(&mut self) -> bool {
        self.child.try_wait().ok().flatten().is_some()
    }

    /// The common case: loopback origins allowed.
    pub fn start_for_loopback(extra_yaml: &str) -> Proxy {
        Proxy::start(extra_yaml, &["--allow-destination", "127.0.0.0/8"])
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// The log once a line satisfies `line` (access log lines are written by a thread
    /// of their own, a few milliseconds after their request), or after 10 s without one.
    pub async fn log_with(&self, line: impl Fn(&str) -> bool) -> String {
        let found = eventually(Duration::from_secs(10), || self.log().lines().any(&line)).await;
        let log = self.log();
        assert!(found, "no such line in the log:\n{log}");
        log
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The `/metrics` page (retried for 30 s while the scrape fails); `None` when curl
    /// cannot run.
    fn scrape(&self) -> Option<String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let page = loop {
            let mut curl = match &self.netns {
                Some(ns) => {
                    let mut c = Command::new("ip");
                    c.args(["netns", "exec", ns, "curl"]);
                    c
                }
                None => Command::new("curl"),
            };
            let out = curl
                .args([
                    "-sf",
                    "--max-time",
                    "10",
                    &format!("http://{}/metrics", self.admin),
                ])
                .output()
                .ok()?;
            if out.status.success() || Instant::now() > deadline {
                break String::from_utf8_lossy(&out.stdout).into_owned();
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        Some(page)
    }

    /// The value of a metric (no labels) on the admin listener's `/metrics`.
    /// A scrape that fails (a loaded CI machine can stall one past curl's
    /// timeout) is retried until a deadline, so that `None` means the metric
    /// is absent from a scrape that worked, not that the scrape failed.
    pub fn metric(&self, name: &str) -> Option<f64> {
        let page = self.scrape()?;
        page.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
    }

    /// The sum of metric `name` over its series whose labels contain `label` (e.g.
    /// `decision="handed_over"`).
    pub fn sum(&self, name: &str, label: &str) -> f64 {
        let page = self.scrape().unwrap_or_default();
        page.lines()
            .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(label))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// A counter's value, 0 when it has not been counted yet.
    pub fn counter(&self, name: &str) -> f64 {
        self.metric(name).unwrap_or(0.0)
    }

    /// A reqwest client that uses this proxy for http URLs.
    pub fn client(&self) -> reqwest::Client {
        reqwest::Client::builder()
            .proxy(reqwest::Proxy::http(self.url()).expect("proxy url"))
            .timeout(Duration::from_secs(20))
            .build()
            .expect("client")
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends GETs for `urls` (with the paired User-Agent) through the proxy all at once;
/// the statuses, in the order given.
pub async fn concurrent(proxy: &Proxy, urls: Vec<(String, &'static str)>) -> Vec<u16> {
    let client = proxy.client();
    let handles: Vec<_> = urls
        .into_iter()
        .map(|(url, ua)| {
            let client = client.clone();
            tokio::spawn(async move {
                client
                    .get(url)
                    .header("User-Agent", ua)
                    .send()
                    .await
                    .map(|r| r.status().as_u16())
            })
        })
        .collect();
    let mut statuses = Vec::new();
    for handle in handles {
        statuses.push(handle.await.expect("task").expect("request"));
    }
    statuses
}

/// Runs `curl -s -x PROXY URL`, returning (status, headers, body).
pub fn curl(proxy: &Proxy, url: &str, extra: &[&str]) -> (u16, String, String) {
    let out = Command::new("curl")
        .args([
            "-s",
            "-S",
            "--max-time",
            "20",
            "-D",
            "-",
            "-x",
            &proxy.url(),
        ])
        .args(extra)
        .arg(url)
        .output()
        .expect("run curl");
    split_response(&String::from_utf8_lossy(&out.stdout))
}

/// `curl -D -` output as (status, head, body); status 0 when no HTTP answer came.
pub fn split_response(text: &str) -> (u16, String, String) {
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, head.to_string(), body.to_string())
}

/// Sends raw bytes to `addr` and returns what comes back before the connection closes
/// (or 5 s pass).
pub async fn raw_exchange(addr: SocketAddr, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream.write_all(request).await.expect("write");
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut buf)).await;
    String::from_utf8_lossy(&buf).into_owned()
}

/// Polls `check` until it holds or `timeout` passes.
pub async fn eventually(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if check() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A DNS server on loopback that answers SERVFAIL to every query: configured as the
/// proxy's name server, no lookup ever leaves the machine.
pub async fn servfail_dns() -> SocketAddr {
    loopback_dns(None).await
}

/// A DNS server on loopback that answers every A query with `addrs` (in that order) and
/// every other query with no records: names the test invents resolve to its own
/// loopback addresses, and no lookup leaves the machine.
pub async fn static_dns(addrs: Vec<std::net::Ipv4Addr>) -> SocketAddr {
    loopback_dns(Some(addrs)).await
}

/// A DNS server on 127.0.0.1: SERVFAIL to everything (`None`), or these A records.
async fn loopback_dns(a_records: Option<Vec<std::net::Ipv4Addr>>) -> SocketAddr {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind dns");
    serve_dns(socket, move |_| a_records.clone())
}

/// A DNS server on `socket` (bound anywhere, e.g. in a [`Netns`]) answering A queries
/// for the names of `zone` with their address, and every other query with no records.
pub fn zone_dns(socket: std::net::UdpSocket, zone: &[(&str, &str)]) -> SocketAddr {
    let zone: HashMap<String, std::net::Ipv4Addr> = zone
        .iter()
        .map(|(name, addr)| (name.to_string(), addr.parse().expect("IPv4")))
        .collect();
    serve_dns(socket, move |name| {
        Some(zone.get(name).into_iter().copied().collect())
    })
}

/// Serves DNS on `socket`: `answer(name)` gives the A records for a name, `None` for
/// SERVFAIL; queries for other types get no records.
fn serve_dns(
    socket: std::net::UdpSocket,
    answer: impl Fn(&str) -> Option<Vec<std::net::Ipv4Addr>> + Send + 'static,
) -> SocketAddr {
    socket.set_nonblocking(true).expect("nonblocking");
    let socket = tokio::net::UdpSocket::from_std(socket).expect("tokio socket");
    let addr = socket.local_addr().expect("addr");
    tokio::spawn(async move {
        let mut buf = [0u8; 1500];
        while let Ok((len, peer)) = socket.recv_from(&mut buf).await {
            // Header + first question only.
            let mut end = 12;
            let mut labels = Vec::new();
            while end < len && buf[end] != 0 {
                let next = end + 1 + usize::from(buf[end]);
                labels.push(String::from_utf8_lossy(&buf[end + 1..next.min(len)]).to_lowercase());
                end = next;
            }
            if len < 12 || end + 5 > len {
                continue;
            }
            let qtype = u16::from_be_bytes([buf[end + 1], buf[end + 2]]);
            let end = end + 5;
            let mut reply = buf[..end].to_vec();
            reply[4..6].copy_from_slice(&[0, 1]);
            reply[6..12].fill(0);
            match answer(&labels.join(".")) {
                None => {
                    reply[2] = 0x80 | (buf[2] & 0x01); // QR, keep RD
                    reply[3] = 0x82; // RA, SERVFAIL
                }
                Some(addrs) => {
                    let answers: &[std::net::Ipv4Addr] = if qtype == 1 { &addrs } else { &[] };
                    reply[2] = 0x84 | (buf[2] & 0x01); // QR, AA, keep RD
                    reply[3] = 0x80; // RA, NOERROR
                    reply[6..8].copy_from_slice(&(answers.len() as u16).to_be_bytes());
                    for ip in answers {
                        reply.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4]);
                        reply.extend_from_slice(&ip.octets());
                    }
                }
            }
            let _ = socket.send_to(&reply, peer).await;
        }
    });
    addr
}

/// A certificate authority made in the test, for origins' certificates.
pub struct TestCa {
    pub cert_pem: String,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl TestCa {
    pub fn new(name: &str) -> TestCa {
        let key = rcgen::KeyPair::generate().expect("ca key");
        let mut params = rcgen::CertificateParams::default();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).expect("self-sign");
        TestCa {
            cert_pem: cert.pem(),
            issuer: rcgen::Issuer::new(params, key),
        }
    }

    /// A certificate for `names` and its key, both PEM: for origins outside this process.
    pub fn leaf_pem(&self, names: &[&str]) -> (String, String) {
        let key = rcgen::KeyPair::generate().expect("leaf key");
        let params =
            rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .expect("params");
        let cert = params.signed_by(&key, &self.issuer).expect("sign");
        (cert.pem(), key.serialize_pem())
    }

    /// A server config with a certificate for `names` (DNS names or IP literals).
    pub fn server_config(&self, names: &[&str]) -> Arc<rustls::ServerConfig> {
        let key = rcgen::KeyPair::generate().expect("leaf key");
        let params =
            rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .expect("params");
        let cert = params.signed_by(&key, &self.issuer).expect("sign");
        let key = rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).expect("key der");
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(vec![cert.der().clone()], key)
        .expect("server config");
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Arc::new(config)
    }
}

/// A TLS client config trusting only the certificates in `pem` (a CA file).
pub fn client_config_trusting(pem_text: &str) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for block in pem::parse_many(pem_text).expect("pem") {
        roots
            .add(rustls::pki_types::CertificateDer::from(
                block.into_contents(),
            ))
            .expect("root");
    }
    Arc::new(
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth(),
    )
}

/// An operator CA made by `robotsgate ca init` in `dir`: (certificate, key) paths.
pub fn operator_ca(dir: &std::path::Path) -> (PathBuf, PathBuf) {
    let (cert, key) = (dir.join("operator-ca.pem"), dir.join("operator-ca.key"));
    let out = Command::new(env!("CARGO_BIN_EXE_robotsgate"))
        .args(["ca", "init", "--cert"])
        .arg(&cert)
        .arg("--key")
        .arg(&key)
        .output()
        .expect("run ca init");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (cert, key)
}

/// An admin request: (status, body).
pub fn admin(proxy: &Proxy, method: &str, path: &str) -> (u16, String) {
    let out = Command::new("curl")
        .args([
            "-s",
            "--max-time",
            "5",
            "-X",
            method,
            "-w",
            "\n%{http_code}",
        ])
        .arg(format!("http://{}{path}", proxy.admin))
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

/// A credentials-file line made by the real `robotsgate passwd` (password on stdin).
pub fn passwd_line(user: &str, password: &str, tokens: &[&str]) -> String {
    let mut command = Command::new(env!("CARGO_BIN_EXE_robotsgate"));
    command.args(["passwd", user, "--cost", "4"]);
    if !tokens.is_empty() {
        command.args(["--tokens", &tokens.join(",")]);
    }
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn robotsgate passwd");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(format!("{password}\n").as_bytes())
        .expect("write password");
    let out = child.wait_with_output().expect("passwd");
    assert!(out.status.success(), "robotsgate passwd failed");
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .trim()
        .to_string()
}

/// Resident memory of a process, in bytes (`VmRSS` from /proc).
pub fn rss_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
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
