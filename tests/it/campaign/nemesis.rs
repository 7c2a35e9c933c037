//! The fleet under the campaign and the faults done to it: three to five members on one
//! `redis-server` (each through a relay the nemesis can cut) or on a Cluster with a
//! replica per master, behind one HAProxy front whose slots follow the members. A
//! fault is picked by the seeded dice from what the backend allows, done, and recorded
//! with its kind and its time.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::Dice;
use crate::common::{eventually, Conf, Proxy};
use crate::fleet_fixture::{certs, short_fleet, signal, Relay};
use crate::haproxy_front::Front;
use crate::redis_servers::{Cluster, Redis};

/// The most members the fleet grows to, and HAProxy's slots.
const MOST: usize = 5;
/// The fewest members it shrinks to.
const FEWEST: usize = 3;

/// What the fleet keeps its records in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Backend {
    /// One `redis-server`, no persistence.
    Single,
    /// Three masters with a replica each.
    Cluster,
}

/// One kind of fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Kind {
    /// A member SIGSTOPped, often past its lease, then SIGCONTed.
    Pause,
    /// A member's connections to Redis cut, then allowed again.
    Cut,
    /// A member SIGKILLed, a new one started in its place.
    Kill,
    /// A member stopped gracefully (SIGTERM), a new one started in its place.
    Stop,
    /// A new member.
    Join,
    /// A member stopped gracefully, none in its place.
    Leave,
    /// Redis SIGSTOPped, its data kept.
    RedisStall,
    /// Redis killed and started again empty.
    RedisRestart,
    /// A Cluster master SIGSTOPped (past the node timeout: its replica promoted).
    MasterPaused,
    /// A Cluster master SIGKILLed and started again empty (its replica promoted).
    MasterKilled,
}

impl Kind {
    /// The faults a backend allows (a Cluster has no single link to cut).
    fn of(backend: Backend) -> &'static [Kind] {
        use Kind::*;
        match backend {
            Backend::Single => &[
                Pause,
                Cut,
                Kill,
                Stop,
                Join,
                Leave,
                RedisStall,
                RedisRestart,
            ],
            Backend::Cluster => &[Pause, Kill, Stop, Join, Leave, MasterPaused, MasterKilled],
        }
    }
}

/// A fault done: what, when it began and when it was over.
#[derive(Clone, Debug)]
pub(crate) struct Fault {
    pub(crate) kind: Kind,
    pub(crate) began: Instant,
    pub(crate) ended: Instant,
    pub(crate) what: String,
}

/// What the crawl and the sampler reach of a running member.
#[derive(Clone, Debug)]
pub(crate) struct Endpoint {
    /// Its proxy URL.
    pub(crate) proxy: String,
    /// Its admin address.
    pub(crate) admin: std::net::SocketAddr,
}

/// The store the members share.
enum Store {
    /// One `redis-server`, restarted on its port ([`Redis::kill_and_restart`]).
    Single(Redis),
    /// A Cluster.
    Cluster(Cluster),
}

/// A member the nemesis holds.
pub(crate) struct Member {
    /// The process.
    pub(crate) proxy: Proxy,
    /// Its way to a single Redis, which a cut drops.
    relay: Option<Relay>,
    /// Its HAProxy slot.
    slot: usize,
}

/// The fleet under the campaign.
pub(crate) struct Fleet {
    store: Store,
    /// The members running.
    pub(crate) members: Vec<Member>,
    /// What the crawl and the sampler reach, kept current.
    pub(crate) endpoints: Arc<Mutex<Vec<Endpoint>>>,
    /// HAProxy routing by host over the members.
    pub(crate) front: Front,
    /// `fleet.on_unavailable`.
    mode: &'static str,
    /// The logs of members no longer running, for a failure's report.
    pub(crate) logs: Vec<String>,
}

impl Fleet {
    /// The backend and three members behind the front.
    pub(crate) async fn start(backend: Backend, mode: &'static str) -> Fleet {
        let store = match backend {
            Backend::Single => Store::Single(Redis::start()),
            Backend::Cluster => Store::Cluster(Cluster::start_with(1)),
        };
        let mut fleet = Fleet {
            store,
            members: Vec::new(),
            endpoints: Arc::default(),
            front: Front::slots(MOST),
            mode,
            logs: Vec::new(),
        };
        for _ in 0..FEWEST {
            fleet.add().await;
        }
        fleet
    }

    /// Its backend.
    pub(crate) fn backend(&self) -> Backend {
        match self.store {
            Store::Single(_) => Backend::Single,
            Store::Cluster(_) => Backend::Cluster,
        }
    }

    /// A new member in the first free slot.
    async fn add(&mut self) {
        let (backend, relay) = match &self.store {
            Store::Single(redis) => {
                let relay = Relay::start(redis.port).await;
                let url = format!("redis://127.0.0.1:{}", relay.port);
                (Conf::new().set("fleet.redis", url), Some(relay))
            }
            Store::Cluster(cluster) => (cluster.conf(), None),
        };
        let conf = certs()
            .conf()
            .with(&backend)
            .set("fleet.new_data_set", "fence")
            // The largest delay obeyed: above the origins' 0.3 s, and short enough that
            // a takeover without the robots.txt copy (Redis restarted empty), whose
            // fetch waits for it, heals within the final check's 40 s.
            .set("pacing.ceiling_seconds", 2)
            .with(&short_fleet(self.mode));
        // Ownership changes logged (debug), for a failure's report.
        let log = [("RUST_LOG", "info,robotsgate::fleet=debug")];
        let proxy = Proxy::start_with_env(&conf, &["--allow-destination", "127.0.0.0/8"], &log);
        let slot = (0..MOST)
            .find(|s| self.members.iter().all(|m| m.slot != *s))
            .expect("a free slot");
        self.front.put(slot, proxy.addr);
        self.members.push(Member { proxy, relay, slot });
        self.publish();
    }

    /// Takes member `i` out of the front and the crawl.
    fn remove(&mut self, i: usize) -> Member {
        let member = self.members.remove(i);
        self.front.empty(member.slot);
        self.publish();
        member
    }

    /// Tells the crawl and the sampler which members run.
    fn publish(&self) {
        let endpoints = self
            .members
            .iter()
            .map(|m| Endpoint {
                proxy: m.proxy.url(),
                admin: m.proxy.admin,
            })
            .collect();
        *self.endpoints.lock().expect("endpoints") = endpoints;
    }

    /// One fault picked by `dice`, done on the fleet as it is.
    pub(crate) async fn fault(&mut self, dice: &mut Dice) -> Fault {
        let kinds = Kind::of(self.backend());
        let mut kind = kinds[dice.below(kinds.len() as u64) as usize];
        if kind == Kind::Join && self.members.len() >= MOST {
            kind = Kind::Leave;
        } else if kind == Kind::Leave && self.members.len() <= FEWEST {
            kind = Kind::Join;
        }
        let began = Instant::now();
        let what = match kind {
            Kind::Pause | Kind::Cut | Kind::Kill | Kind::Stop | Kind::Leave => {
                self.on_member(kind, dice).await
            }
            Kind::Join => {
                self.add().await;
                format!("member joined ({} now)", self.members.len())
            }
            Kind::RedisStall | Kind::RedisRestart => self.on_redis(kind, dice).await,
            Kind::MasterPaused | Kind::MasterKilled => self.on_master(kind, dice).await,
        };
        Fault {
            kind,
            began,
            ended: Instant::now(),
            what,
        }
    }

    /// A fault done to a random member.
    async fn on_member(&mut self, kind: Kind, dice: &mut Dice) -> String {
        let i = dice.below(self.members.len() as u64) as usize;
        let pid = self.members[i].proxy.pid();
        match kind {
            Kind::Pause => {
                let pause = dice.millis(500, 3500);
                signal(pid, "-STOP");
                tokio::time::sleep(pause).await;
                signal(pid, "-CONT");
                format!("member {pid} paused {pause:?}")
            }
            Kind::Cut => {
                let cut = dice.millis(1000, 4000);
                let relay = self.members[i].relay.as_mut().expect("a relay");
                relay.cut();
                tokio::time::sleep(cut).await;
                relay.restore();
                format!("member {pid} cut from Redis {cut:?}")
            }
            Kind::Kill => {
                signal(pid, "-KILL");
                let killed = self.remove(i);
                self.logs.push(killed.proxy.log());
                self.add().await;
                format!("member {pid} killed, a new one started")
            }
            _ => {
                signal(pid, "-TERM");
                let mut leaving = self.remove(i);
                let left = eventually(Duration::from_secs(15), || leaving.proxy.exited()).await;
                self.logs.push(leaving.proxy.log());
                if kind == Kind::Stop {
                    self.add().await;
                }
                format!(
                    "member {pid} stopped gracefully (exited: {left}), {} left",
                    self.members.len()
                )
            }
        }
    }

    /// A fault done to a single Redis.
    async fn on_redis(&mut self, kind: Kind, dice: &mut Dice) -> String {
        let Store::Single(redis) = &mut self.store else {
            unreachable!("single-Redis faults are picked for a single Redis only")
        };
        if kind == Kind::RedisStall {
            let stall = dice.millis(500, 2500);
            let pid = redis.child.id();
            signal(pid, "-STOP");
            tokio::time::sleep(stall).await;
            signal(pid, "-CONT");
            return format!("Redis stalled {stall:?}");
        }
        let down = dice.millis(200, 1500);
        redis.kill_and_restart(down).await;
        format!("Redis restarted empty after {down:?}")
    }

    /// A fault done to a random Cluster master, once the Cluster is whole again (every
    /// slot served, every replica linked) after the last one.
    async fn on_master(&mut self, kind: Kind, dice: &mut Dice) -> String {
        let Store::Cluster(cluster) = &mut self.store else {
            unreachable!("Cluster faults are picked for a Cluster only")
        };
        let whole = eventually(Duration::from_secs(30), || cluster.healthy()).await;
        assert!(whole, "the Cluster did not heal within 30 s");
        let masters: Vec<usize> = (0..cluster.nodes.len())
            .filter(|n| cluster.nodes[*n].role() == "master")
            .collect();
        let node = &mut cluster.nodes[masters[dice.below(masters.len() as u64) as usize]];
        let port = node.port;
        if kind == Kind::MasterPaused {
            let pause = dice.millis(500, 3000);
            signal(node.child.id(), "-STOP");
            tokio::time::sleep(pause).await;
            signal(node.child.id(), "-CONT");
            return format!("Cluster master {port} paused {pause:?}");
        }
        let down = dice.millis(1000, 4000);
        node.kill_and_restart(down).await;
        format!("Cluster master {port} killed, started again empty after {down:?}")
    }

    /// Every member's log, running or not.
    pub(crate) fn all_logs(&self) -> Vec<String> {
        let running = self.members.iter().map(|m| m.proxy.log());
        running.chain(self.logs.iter().cloned()).collect()
    }
}
