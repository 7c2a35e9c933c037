//! Processes the tests start: a real `robotsgate run` ([`Proxy`]) on its own ports,
//! any server waited for until it listens, the commands tests run, and the admin API.

use super::*;

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

/// A free TCP port on 127.0.0.1 (bound and released). Two calls can return the same
/// port: one process's listeners take theirs from [`free_ports`].
pub fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// `N` free ports, all different (robotsgate refuses two listeners on one port).
pub fn free_ports<const N: usize>() -> [u16; N] {
    let mut out = [0; N];
    for i in 0..N {
        out[i] = std::iter::repeat_with(free_port)
            .find(|port| !out[..i].contains(port))
            .expect("a port");
    }
    out
}

/// A loopback port kept from every other process while the server listening there is
/// down: bound and listening, each connection reset at once (as a stopped server's port
/// refuses it). A port merely released can be taken by another test's process while its
/// server is down, which then answers for it or keeps it from starting again. Dropping
/// the hold closes the port (synchronously), right before the server starts again.
pub struct PortHold {
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl PortHold {
    /// Holds `port`, which its server has just released.
    pub fn new(port: u16) -> PortHold {
        let listener = StdListener::bind(("127.0.0.1", port))
            .unwrap_or_else(|e| panic!("port {port} taken the moment its server stopped: {e}"));
        listener.set_nonblocking(true).expect("nonblocking");
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            while !stopping.load(std::sync::atomic::Ordering::Acquire) {
                match listener.accept() {
                    Ok((stream, _)) => reset(stream),
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        PortHold {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for PortHold {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Closes `stream` with a reset (no linger), as a port nobody listens on answers.
pub fn reset(stream: impl Into<socket2::Socket>) {
    let socket: socket2::Socket = stream.into();
    let _ = socket.set_linger(Some(Duration::ZERO));
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

/// A child process the test started, stopped (killed and reaped) when dropped, however
/// the test ends.
#[derive(Debug)]
pub struct Running(pub Child);

impl std::ops::Deref for Running {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Running {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `robotsgate fleet-cert`: member `member`'s certificate and key written to `cert`
/// and `key`, signed by the fleet CA `ca` (its key `ca_key`), which is made first when
/// neither exists.
pub fn fleet_cert(
    ca: &std::path::Path,
    ca_key: &std::path::Path,
    cert: &std::path::Path,
    key: &std::path::Path,
    member: &str,
) {
    let (made, said) = run_output(
        Command::new(env!("CARGO_BIN_EXE_robotsgate"))
            .arg("fleet-cert")
            .arg("--ca")
            .arg(ca)
            .arg("--ca-key")
            .arg(ca_key)
            .arg("--cert")
            .arg(cert)
            .arg("--key")
            .arg(key)
            .args(["--member", member]),
    );
    assert!(made, "fleet-cert: {said}");
}

/// `conf` for a fleet member: one given the fleet CA (`fleet.peer_ca`, its key
/// `ca.key` beside it) and no certificate of its own gets one, for a member named
/// after it (`member-N`), made in `dir` by `robotsgate fleet-cert`.
fn member_certificate(conf: &Conf, dir: &std::path::Path) -> Conf {
    static MEMBERS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let (Some(ca), false) = (conf.text("fleet.peer_ca"), conf.has("fleet.peer_cert")) else {
        return conf.clone();
    };
    let ca = PathBuf::from(ca);
    let ca_key = ca.with_file_name("ca.key");
    let n = MEMBERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let (cert, key) = (dir.join("member.pem"), dir.join("member.key"));
    fleet_cert(&ca, &ca_key, &cert, &key, &format!("member-{n}"));
    conf.clone()
        .set("fleet.peer_cert", cert.to_string_lossy())
        .set("fleet.peer_key", key.to_string_lossy())
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
    /// Starts robotsgate with the `robotsgate:` settings `conf` and extra command-line
    /// arguments; waits until it accepts.
    pub fn start(conf: &Conf, args: &[&str]) -> Proxy {
        Proxy::start_with_env(conf, args, &[])
    }

    /// As [`Proxy::start`], with extra environment variables.
    pub fn start_with_env(conf: &Conf, args: &[&str], env: &[(&str, &str)]) -> Proxy {
        Proxy::launch(conf, args, env, None)
    }

    /// As [`Proxy::start`], inside network namespace `netns`.
    pub fn start_in(netns: &Netns, conf: &Conf, args: &[&str]) -> Proxy {
        Proxy::launch(conf, args, &[], Some(&netns.name))
    }

    fn launch(conf: &Conf, args: &[&str], env: &[(&str, &str)], netns: Option<&str>) -> Proxy {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("robotsgate.yaml");
        let path = |name: &str| dir.path().join(name).to_string_lossy().into_owned().into();
        let server = [
            ("version", 1.into()),
            ("threads", 1.into()),
            ("pid_file", path("pid")),
            ("upgrade_sock", path("upgrade.sock")),
            ("grace_period_seconds", 0.into()),
            ("graceful_shutdown_timeout_seconds", 1.into()),
        ];
        let conf = &member_certificate(conf, dir.path());
        std::fs::write(&config, conf.file(&server)).expect("write config");
        let log_path = dir.path().join("robotsgate.log");
        // A port picked free can be taken by another test before robotsgate binds it; a
        // robotsgate that could not bind exits, and is started again on other ports.
        for _attempt in 0..5 {
            // Each listener its own port (two on one port would share a socket: a full
            // run once had its proxy's requests answered by its admin listener), a fleet
            // member's peer channel too.
            let ports = free_ports::<3>();
            let at = |port: u16| -> SocketAddr { SocketAddr::from(([127, 0, 0, 1], port)) };
            let (addr, admin) = (at(ports[0]), at(ports[1]));
            let peer: Option<SocketAddr> = conf.has("fleet").then(|| at(ports[2]));
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
pub fn healthz(admin: SocketAddr) -> bool {
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
        let next = self.successor();
        self.quit();
        self.started(next)
    }

    /// The rest of an upgrade whose SIGQUIT was sent already (a new process that starts
    /// late: Pingora's old process offers its listeners for 5 s): the new process,
    /// returned once it answers on the admin listener.
    pub fn upgrade_begun(&self) -> Proxy {
        self.started(self.successor())
    }

    /// SIGQUIT: Pingora's graceful upgrade begins.
    fn quit(&self) {
        let status = Command::new("kill")
            .args(["-QUIT", &self.pid().to_string()])
            .status()
            .expect("kill -QUIT");
        assert!(status.success());
    }

    /// This process's successor, started with `--upgrade` and its arguments.
    fn successor(&self) -> Proxy {
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
        Proxy {
            child,
            netns: self.netns.clone(),
            addr: self.addr,
            admin: self.admin,
            peer: self.peer,
            dir: self.dir.clone(),
            log_path,
            args: self.args.clone(),
        }
    }

    /// `next`, once it has read its configuration and waits for (or holds) the
    /// listeners.
    fn started(&self, mut next: Proxy) -> Proxy {
        let deadline = Instant::now() + Duration::from_secs(20);
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
        self.wait_exit(Duration::from_secs(15));
    }

    /// Waits up to `timeout` for the process to exit; panics with its log if it does not.
    pub fn wait_exit(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while !self.exited() {
            assert!(
                Instant::now() < deadline,
                "robotsgate did not exit:\n{}",
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
    pub fn start_for_loopback(conf: &Conf) -> Proxy {
        Proxy::start(conf, &["--allow-destination", "127.0.0.0/8"])
    }

    /// A file in this process's own directory (its configuration, its member
    /// certificate `member.pem` and key `member.key`...).
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// The log once a line contains every one of `parts` (see [`Proxy::log_with`]).
    pub async fn log_with_all(&self, parts: &[&str]) -> String {
        self.log_with(|l| parts.iter().all(|p| l.contains(p))).await
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

    /// curl run where this process's listeners are reachable (its namespace, if any).
    fn curl_here(&self) -> Command {
        match &self.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, "curl"]);
                c
            }
            None => Command::new("curl"),
        }
    }

    /// The `/metrics` page (retried for 30 s while the scrape fails); `None` when curl
    /// cannot run.
    fn scrape(&self) -> Option<String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let page = loop {
            let out = self
                .curl_here()
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

    /// Counter `name` once it has reached `want`, or its value after 10 s. What is
    /// counted when an exchange ends (`robotsgate_requests_total`, the exchange ends) is
    /// counted after the client has its last octet, so a test that has just been
    /// answered reads it this way; a count past `want` is returned as it is.
    pub async fn counted(&self, name: &str, want: f64) -> f64 {
        eventually(Duration::from_secs(10), || self.counter(name) >= want).await;
        self.counter(name)
    }

    /// [`Proxy::sum`] once it has reached `want`, or its value after 10 s (as
    /// [`Proxy::counted`]).
    pub async fn summed(&self, name: &str, label: &str, want: f64) -> f64 {
        eventually(Duration::from_secs(10), || self.sum(name, label) >= want).await;
        self.sum(name, label)
    }

    /// A reqwest client that uses this proxy for http URLs.
    pub fn client(&self) -> reqwest::Client {
        reqwest::Client::builder()
            .proxy(reqwest::Proxy::http(self.url()).expect("proxy url"))
            .timeout(Duration::from_secs(20))
            .build()
            .expect("client")
    }

    /// A GET for `url` through this proxy, sent in a task of its own: its status.
    pub fn spawn_get(&self, url: String) -> tokio::task::JoinHandle<reqwest::Result<u16>> {
        let client = self.client();
        tokio::spawn(async move { client.get(url).send().await.map(|r| r.status().as_u16()) })
    }

    /// Whether the pacing queue's gauge reaches `n` requests within 5 s (polled).
    pub async fn queued(&self, n: f64) -> bool {
        eventually(Duration::from_secs(5), || {
            self.metric("robotsgate_pacing_queued_requests") == Some(n)
        })
        .await
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An admin request: (status, body).
pub fn admin(proxy: &Proxy, method: &str, path: &str) -> (u16, String) {
    let out = proxy
        .curl_here()
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
    status_and_body(&out.stdout)
}

/// What `curl -w '\n%{http_code}'` printed, as (status, body).
pub fn status_and_body(printed: &[u8]) -> (u16, String) {
    let text = String::from_utf8_lossy(printed);
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
