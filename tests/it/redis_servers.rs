//! Real Redis servers for the fleet tests, on free loopback ports and stopped by their
//! PIDs: a single `redis-server`, a Cluster (with replicas when asked), and Sentinels.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{free_port, listens_on, Conf, PortHold};

/// A `redis-server` on a free loopback port, stopped (by its PID) when dropped.
pub(crate) struct Redis {
    pub(crate) child: crate::common::Running,
    pub(crate) port: u16,
    /// Its working directory (a Cluster node's nodes file), removed when dropped.
    _dir: tempfile::TempDir,
    /// Its command line, to start it again.
    args: Vec<String>,
    /// Its environment beyond the test's (a preloaded clock).
    env: Vec<(String, String)>,
}

impl Redis {
    /// A `redis-server` on a port picked free ([`Redis::start_free`]).
    pub(crate) fn start() -> Redis {
        Redis::start_free(&[])
    }

    /// A `redis-server` with `extra` arguments on a port picked free, picked again when
    /// another process took it first (another test's server, whose PING would answer
    /// for this one: two tests' fleets would share one Redis).
    pub(crate) fn start_free(extra: &[&str]) -> Redis {
        on_a_free_port(u16::MAX, |port| Redis::try_start_on(port, extra))
    }

    /// A `redis-server` whose wall clock (its `TIME`) is this machine's plus the offset
    /// in milliseconds the file `offset` holds, read at every reading: `clock_shim.c`
    /// (built as `shim`) preloaded.
    pub(crate) fn start_with_clock(shim: &std::path::Path, offset: &std::path::Path) -> Redis {
        let env = vec![
            (
                "LD_PRELOAD".to_string(),
                shim.to_string_lossy().into_owned(),
            ),
            (
                "CLOCK_SHIM_FILE".to_string(),
                offset.to_string_lossy().into_owned(),
            ),
        ];
        on_a_free_port(u16::MAX, |port| {
            let dir = tempfile::tempdir().expect("tempdir");
            let args = Redis::plain_args(port, &dir, &[]);
            Redis::launch(args, env.clone(), port, dir)
        })
    }

    /// A `redis-server` on `port`; `None` when it could not listen there.
    fn try_start_on(port: u16, extra: &[&str]) -> Option<Redis> {
        let dir = tempfile::tempdir().expect("tempdir");
        let args = Redis::plain_args(port, &dir, extra);
        Redis::launch(args, Vec::new(), port, dir)
    }

    /// The command line of a server on `port` in `dir`, with `extra` arguments.
    fn plain_args(port: u16, dir: &tempfile::TempDir, extra: &[&str]) -> Vec<String> {
        let mut args: Vec<String> = ["--port", &port.to_string(), "--bind", "127.0.0.1"]
            .iter()
            .chain(&["--save", "", "--appendonly", "no", "--dir"])
            .map(|a| a.to_string())
            .collect();
        args.push(dir.path().to_string_lossy().into_owned());
        args.extend(extra.iter().map(|a| a.to_string()));
        args
    }

    /// A Sentinel (`redis-server --sentinel`) watching the master on `master` as `main`
    /// (quorum 2, down after 1 s).
    pub(crate) fn sentinel(master: u16) -> Redis {
        on_a_free_port(u16::MAX, |port| Redis::try_sentinel(port, master))
    }

    /// [`Redis::sentinel`] on `port`; `None` when it could not listen there.
    fn try_sentinel(port: u16, master: u16) -> Option<Redis> {
        let dir = tempfile::tempdir().expect("tempdir");
        let conf = dir.path().join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {}\nsentinel monitor main 127.0.0.1 {master} 2\nsentinel down-after-milliseconds main 1000\nsentinel failover-timeout main 5000\n",
                dir.path().display()
            ),
        )
        .expect("sentinel.conf");
        let args = vec![conf.to_string_lossy().into_owned(), "--sentinel".into()];
        Redis::launch(args, Vec::new(), port, dir)
    }

    /// Runs `redis-server args`, up once it listens on `port` itself and answers PING
    /// there; `None` when it exited first (the port was taken).
    fn launch(
        args: Vec<String>,
        env: Vec<(String, String)>,
        port: u16,
        dir: tempfile::TempDir,
    ) -> Option<Redis> {
        let mut redis = Redis {
            child: Redis::spawn(&args, &env),
            port,
            _dir: dir,
            args,
            env,
        };
        redis.wait_up().then_some(redis)
    }

    /// `redis-server args`, its output discarded.
    fn spawn(args: &[String], env: &[(String, String)]) -> crate::common::Running {
        let child = Command::new("redis-server")
            .args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server (installed by scripts/deps.sh)");
        crate::common::Running(child)
    }

    /// Waits until this process listens on its port and answers PING: `false` when it
    /// exited first.
    fn wait_up(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(_)) = self.child.0.try_wait() {
                return false;
            }
            if listens_on(self.child.id(), self.port) && redis_cli(self.port, &["ping"]) == "PONG" {
                return true;
            }
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL, then the same command again in the same directory, once `down` has
    /// passed: no data kept (no persistence), a Cluster node's nodes file kept (it
    /// rejoins its cluster). Its port is held meanwhile ([`PortHold`]: connections
    /// reset, no other process taking it).
    pub(crate) async fn kill_and_restart(&mut self, down: Duration) {
        let _ = self.child.0.kill();
        let _ = self.child.0.wait();
        let hold = PortHold::new(self.port);
        tokio::time::sleep(down).await;
        drop(hold);
        self.child = Redis::spawn(&self.args, &self.env);
        let port = self.port;
        assert!(
            self.wait_up(),
            "redis-server could not listen on {port} again: taken"
        );
    }

    /// Its role in replication: `master`, `slave`, or empty when it does not answer.
    pub(crate) fn role(&self) -> String {
        redis_cli(self.port, &["role"])
            .lines()
            .next()
            .unwrap_or_default()
            .to_string()
    }

    /// As a Sentinel: the port of the master it names `main`.
    pub(crate) fn sentinel_master(&self) -> Option<u16> {
        redis_cli(self.port, &["sentinel", "get-master-addr-by-name", "main"])
            .lines()
            .nth(1)?
            .trim()
            .parse()
            .ok()
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }
}

pub(crate) fn redis_cli(port: u16, args: &[&str]) -> String {
    Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// A three-master Redis Cluster on loopback (with a replica each, when asked).
pub(crate) struct Cluster {
    pub(crate) nodes: Vec<Redis>,
}

impl Cluster {
    pub(crate) fn start() -> Cluster {
        Cluster::start_with(0)
    }

    /// Three masters with `replicas` replicas each; a node silent for 1 s is failed over.
    pub(crate) fn start_with(replicas: usize) -> Cluster {
        let nodes: Vec<Redis> = (0..3 * (1 + replicas))
            .map(|_| {
                // A Cluster node also listens on port + 10000 (its bus): at most 55535.
                on_a_free_port(55_535, |port| {
                    Redis::try_start_on(
                        port,
                        &[
                            "--cluster-enabled",
                            "yes",
                            "--cluster-config-file",
                            &format!("nodes-{port}.conf"),
                            "--cluster-node-timeout",
                            "1000",
                        ],
                    )
                })
            })
            .collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let created = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("redis-cli --cluster create");
        assert!(created.success());
        let cluster = Cluster { nodes };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !cluster.healthy() {
            assert!(Instant::now() < deadline, "cluster did not form");
            std::thread::sleep(Duration::from_millis(50));
        }
        cluster
    }

    /// Every node says the cluster is ok, and every replica's link to its master is up.
    pub(crate) fn healthy(&self) -> bool {
        let replicating = |n: &Redis| {
            let info = redis_cli(n.port, &["info", "replication"]);
            info.contains("role:master") || info.contains("master_link_status:up")
        };
        self.nodes.iter().all(|n| {
            redis_cli(n.port, &["cluster", "info"]).contains("cluster_state:ok") && replicating(n)
        })
    }

    /// The port of the master serving `key`'s slot, as `node` sees the cluster (`None`
    /// while that master is failing and no replica has taken over).
    pub(crate) fn master_of(&self, node: u16, key: &str) -> Option<u16> {
        let slot: u16 = redis_cli(node, &["cluster", "keyslot", key])
            .parse()
            .expect("a slot");
        redis_cli(node, &["cluster", "nodes"])
            .lines()
            .filter(|l| l.contains("master") && !l.contains("fail"))
            .find_map(|l| {
                let fields: Vec<&str> = l.split_whitespace().collect();
                let serves = fields.iter().skip(8).any(|range| {
                    let (a, b) = range.split_once('-').unwrap_or((range, range));
                    matches!((a.parse::<u16>(), b.parse::<u16>()), (Ok(a), Ok(b)) if a <= slot && slot <= b)
                });
                let port = fields.get(1)?.split(['@', ':']).nth(1)?.parse().ok()?;
                serves.then_some(port)
            })
    }

    pub(crate) fn conf(&self) -> Conf {
        let seeds: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("redis://127.0.0.1:{}", n.port))
            .collect();
        crate::fleet_fixture::certs()
            .conf()
            .set("fleet.redis_cluster", seeds)
    }
}

/// `start` on a port picked free (at most `highest`), again on another while it gives
/// `None` (the port was taken before the server bound it).
fn on_a_free_port(highest: u16, start: impl Fn(u16) -> Option<Redis>) -> Redis {
    for _ in 0..5 {
        let port = std::iter::repeat_with(free_port)
            .find(|p| *p <= highest)
            .expect("a port");
        if let Some(redis) = start(port) {
            return redis;
        }
    }
    panic!("redis-server found five free ports taken");
}

/// A port another `redis-server` holds is never taken for a new one (its PING would
/// answer, and two tests would share one Redis): the new one is not started there.
#[test]
fn a_port_another_server_holds_is_not_taken_for_a_new_one() {
    let first = Redis::start();
    assert!(Redis::try_start_on(first.port, &[]).is_none());
    assert_ne!(Redis::start().port, first.port);
}
