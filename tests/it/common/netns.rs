//! Network namespaces a test creates (kernel redirection, addresses beyond loopback),
//! and running code or commands inside one.

use super::*;

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

/// A `redis-server` inside a test's namespace, stopped by its PID when dropped.
pub struct NsRedis {
    /// The process (`ip netns exec` execs it: one PID).
    _child: super::Running,
}

impl NsRedis {
    /// Starts one on `port` inside `ns`; returns once it answers.
    pub fn start(ns: &Netns, port: u16) -> NsRedis {
        let child = ns
            .command("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
            ])
            .args(["--appendonly", "no", "--dir", "/tmp"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server in the namespace");
        let redis = NsRedis {
            _child: super::Running(child),
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let ping = || {
            let out = ns
                .command("redis-cli")
                .args(["-p", &port.to_string(), "ping"])
                .output();
            out.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "PONG")
        };
        while !ping() {
            assert!(
                std::time::Instant::now() < deadline,
                "redis-server did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        redis
    }
}
