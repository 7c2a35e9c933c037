//! HAProxy (Debian's `haproxy`) in front of a fleet, as `docs/fleet.md`'s routing guide
//! sets it up: each host sent to one member (`balance hdr(host)`, `hash-type
//! consistent`), every member health-checked. Its servers are slots the test fills and
//! empties through HAProxy's runtime API (a stats socket at admin level), so a fleet
//! whose members come and go keeps one front.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::{free_port, start_listening, Proxy};

/// HAProxy on a free loopback port, stopped by its PID when dropped.
pub(crate) struct Front {
    /// The process.
    _child: crate::common::Running,
    /// Where crawlers connect.
    pub(crate) port: u16,
    /// Its configuration and runtime socket.
    dir: tempfile::TempDir,
}

impl Front {
    /// HAProxy routing by host over `members`, each in a slot of its own.
    pub(crate) fn start(members: &[&Proxy]) -> Front {
        let front = Front::slots(members.len());
        for (slot, member) in members.iter().enumerate() {
            front.put(slot, member.addr);
        }
        front
    }

    /// HAProxy with `n` empty slots (servers in maintenance), checked every 250 ms.
    pub(crate) fn slots(n: usize) -> Front {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("haproxy.cfg");
        let socket = dir.path().join("admin.sock");
        let servers: String = (0..n)
            .map(|i| {
                format!("  server m{i} 127.0.0.1:9 check inter 250ms fall 2 rise 1 disabled\n")
            })
            .collect();
        let text = |port: u16| {
            format!(
                "global\n  maxconn 1000\n  stats socket {} level admin\ndefaults\n  mode http\n  timeout connect 5s\n  timeout client 30s\n  timeout server 30s\nfrontend crawlers\n  bind 127.0.0.1:{port}\n  default_backend fleet\nbackend fleet\n  balance hdr(host)\n  hash-type consistent\n{servers}",
                socket.display()
            )
        };
        let haproxy = if std::path::Path::new("/usr/sbin/haproxy").exists() {
            "/usr/sbin/haproxy"
        } else {
            "haproxy"
        };
        let (child, port) = start_listening("haproxy", free_port, |port| {
            std::fs::write(&config, text(port)).expect("haproxy.cfg");
            Command::new(haproxy)
                .arg("-db")
                .arg("-f")
                .arg(&config)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("haproxy (installed by scripts/deps.sh)")
        });
        Front {
            _child: crate::common::Running(child),
            port,
            dir,
        }
    }

    /// Slot `slot` now sends to the member listening on `addr` (and checks it there).
    pub(crate) fn put(&self, slot: usize, addr: SocketAddr) {
        let server = format!("fleet/m{slot}");
        self.command(&format!(
            "set server {server} addr {} port {}",
            addr.ip(),
            addr.port()
        ));
        self.command(&format!("set server {server} state ready"));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !self.running(slot) {
            assert!(
                std::time::Instant::now() < deadline,
                "{server} never came up"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Does slot `slot` pass its checks (`show servers state`: operational state 2)?
    fn running(&self, slot: usize) -> bool {
        let name = format!("m{slot}");
        self.command("show servers state fleet")
            .lines()
            .any(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                fields.get(3) == Some(&name.as_str()) && fields.get(5) == Some(&"2")
            })
    }

    /// Slot `slot` sends nothing more (maintenance).
    pub(crate) fn empty(&self, slot: usize) {
        self.command(&format!("set server fleet/m{slot} state maint"));
    }

    /// One runtime API command; its answer.
    fn command(&self, line: &str) -> String {
        let mut stream =
            UnixStream::connect(self.dir.path().join("admin.sock")).expect("haproxy stats socket");
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        stream
            .write_all(format!("{line}\n").as_bytes())
            .expect("haproxy command");
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        answer
    }

    /// Its URL as a crawler's proxy.
    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// A client whose proxy is this front.
    pub(crate) fn client(&self) -> reqwest::Client {
        reqwest::Client::builder()
            .proxy(reqwest::Proxy::http(self.url()).expect("proxy"))
            .timeout(Duration::from_secs(20))
            .build()
            .expect("client")
    }
}
