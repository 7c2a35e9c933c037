//! A randomized fault campaign against real processes, as Jepsen runs one: three
//! members on one `redis-server`, each through a relay the nemesis can cut, crawled
//! through whichever members are up, while a nemesis (seeded; the seed and every fault
//! printed) pauses members past their lease (SIGSTOP), kills them and starts new ones
//! (SIGKILL), stops them gracefully (SIGTERM), cuts them from Redis, stalls Redis
//! (SIGSTOP) and restarts it empty. Meanwhile every member's `/origins/...` is sampled.
//!
//! Kept at the origins (each logs when a request arrives and ends): no gap under the
//! Crawl-delay, never two requests at once; in the samples, never two members saying
//! `here` for one origin at once; and once the faults stop, every member serves every
//! origin again. `ROBOTSGATE_CAMPAIGN_SEED` replays a campaign;
//! `ROBOTSGATE_CAMPAIGN_SECONDS` sets its length.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::common::{curl, eventually, free_port, most_at_once, pages, Conf, Proxy};
use crate::fleet_fixture::{certs, members_up, paced_origin, short_fleet, signal, Relay};
use crate::redis_servers::Redis;

/// The Crawl-delay of every crawled origin.
const DELAY: Duration = Duration::from_millis(300);

/// How long the nemesis runs: `ROBOTSGATE_CAMPAIGN_SECONDS`, 36 s in the suite (the
/// long runs of `docs/fleet.md` set it).
fn campaign() -> Duration {
    let seconds = std::env::var("ROBOTSGATE_CAMPAIGN_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(36);
    Duration::from_secs(seconds)
}

/// A small deterministic random source (xorshift).
struct Dice(u64);

impl Dice {
    /// A number below `n`.
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }

    /// A duration between `low` and `high` ms.
    fn millis(&mut self, low: u64, high: u64) -> Duration {
        Duration::from_millis(low + self.below(high - low))
    }
}

/// What the load and the sampler reach of a running member.
#[derive(Clone, Debug)]
struct Endpoint {
    /// Its proxy URL.
    proxy: String,
    /// Its admin address.
    admin: std::net::SocketAddr,
}

/// A member the nemesis holds: the process, and its relay to Redis.
struct Member {
    /// The process.
    proxy: Proxy,
    /// Its way to Redis.
    relay: Relay,
}

/// The fleet under the campaign.
struct Fleet {
    /// Redis' port (it keeps it across restarts).
    redis_port: u16,
    /// Redis, while it runs.
    redis: Option<Redis>,
    /// The members.
    members: Vec<Member>,
    /// What the load and the sampler reach.
    endpoints: Arc<Mutex<Vec<Endpoint>>>,
    /// Outage mode.
    mode: &'static str,
    /// The logs of members no longer running, kept for a failure's report.
    logs: Vec<String>,
}

impl Fleet {
    /// Redis and three members.
    async fn start(mode: &'static str) -> Fleet {
        let redis_port = free_port();
        let mut fleet = Fleet {
            redis_port,
            redis: Some(Redis::start_on(redis_port, &[])),
            members: Vec::new(),
            endpoints: Arc::default(),
            mode,
            logs: Vec::new(),
        };
        for _ in 0..3 {
            fleet.add().await;
        }
        fleet
    }

    /// A new member, through a relay of its own.
    async fn add(&mut self) {
        let relay = Relay::start(self.redis_port).await;
        let conf = certs()
            .conf()
            .set("fleet.redis", format!("redis://127.0.0.1:{}", relay.port))
            .set("fleet.new_data_set", "fence")
            .with(&short_fleet(self.mode))
            .with(&Conf::new().set("pacing.max_in_flight", 1));
        let proxy = Proxy::start_for_loopback(&conf);
        self.members.push(Member { proxy, relay });
        self.publish();
    }

    /// Tells the load and the sampler which members run.
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

    /// One fault, on the fleet as it is; what it was, for the record.
    async fn fault(&mut self, dice: &mut Dice) -> String {
        let i = dice.below(self.members.len() as u64) as usize;
        let pid = self.members[i].proxy.pid();
        match dice.below(6) {
            0 => {
                let pause = dice.millis(500, 3500);
                signal(pid, "-STOP");
                tokio::time::sleep(pause).await;
                signal(pid, "-CONT");
                format!("member {i} paused {pause:?}")
            }
            1 => {
                let cut = dice.millis(1000, 4000);
                self.members[i].relay.cut();
                tokio::time::sleep(cut).await;
                self.members[i].relay.restore().await;
                format!("member {i} cut from Redis {cut:?}")
            }
            2 => {
                signal(pid, "-KILL");
                let killed = self.members.remove(i);
                self.logs.push(killed.proxy.log());
                self.add().await;
                format!("member {i} killed, a new one started")
            }
            3 => {
                signal(pid, "-TERM");
                let mut leaving = self.members.remove(i);
                self.publish();
                let left = eventually(Duration::from_secs(15), || leaving.proxy.exited()).await;
                self.logs.push(leaving.proxy.log());
                self.add().await;
                format!("member {i} stopped gracefully (left: {left}), a new one started")
            }
            4 => {
                let stall = dice.millis(500, 2500);
                let redis = self.redis.as_ref().map(|r| r.child.id());
                if let Some(pid) = redis {
                    signal(pid, "-STOP");
                    tokio::time::sleep(stall).await;
                    signal(pid, "-CONT");
                }
                format!("Redis stalled {stall:?}")
            }
            _ => {
                let down = dice.millis(200, 1500);
                drop(self.redis.take());
                tokio::time::sleep(down).await;
                self.redis = Some(Redis::start_on(self.redis_port, &[]));
                format!("Redis restarted empty after {down:?}")
            }
        }
    }
}

/// Every line of every member's log (running or not) that names `target`.
fn lines_naming(fleet: &Fleet, target: &str) -> Vec<String> {
    let running = fleet.members.iter().map(|m| m.proxy.log());
    let needle = format!("path=\"{target}\"");
    running
        .chain(fleet.logs.iter().cloned())
        .enumerate()
        .flat_map(|(n, log)| {
            log.lines()
                .filter(|l| l.contains(&needle))
                .map(|l| format!("log {n}: {l}"))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Each gap under the Crawl-delay at `seen`: both requests, their times from `start`,
/// and what the members logged of them.
fn short_gaps(fleet: &Fleet, seen: &[crate::common::Seen], start: Instant) -> Vec<String> {
    let at = |i: std::time::Instant| i.saturating_duration_since(start.into_std());
    seen.windows(2)
        .filter(|w| {
            let done = w[0].done.unwrap_or(w[0].arrived);
            w[1].arrived.saturating_duration_since(done) < DELAY
        })
        .map(|w| {
            let done = w[0].done.unwrap_or(w[0].arrived);
            format!(
                "{} arrived {:?} ended {:?}; {} arrived {:?}\n  {}\n  {}",
                w[0].target,
                at(w[0].arrived),
                at(done),
                w[1].target,
                at(w[1].arrived),
                lines_naming(fleet, &w[0].target).join("\n  "),
                lines_naming(fleet, &w[1].target).join("\n  "),
            )
        })
        .collect()
}

/// Requests through random running members for random origins until `until`: their
/// statuses.
async fn load(
    endpoints: Arc<Mutex<Vec<Endpoint>>>,
    origins: Vec<String>,
    seed: u64,
    until: Instant,
) -> Vec<u16> {
    let mut dice = Dice(seed | 1);
    let mut statuses = Vec::new();
    let mut n = 0u64;
    while Instant::now() < until {
        let members = endpoints.lock().expect("endpoints").clone();
        if members.is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        let member = &members[dice.below(members.len() as u64) as usize];
        let origin = &origins[dice.below(origins.len() as u64) as usize];
        n += 1;
        let client = reqwest::Client::builder()
            .proxy(reqwest::Proxy::http(&member.proxy).expect("proxy"))
            .timeout(Duration::from_secs(8))
            .build()
            .expect("client");
        let status = match client.get(format!("{origin}/p/{seed}-{n}")).send().await {
            Ok(r) => r.status().as_u16(),
            Err(_) => 0,
        };
        statuses.push(status);
        if status != 200 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    statuses
}

/// What one member says of one origin's owner (`None`: no answer).
async fn owner_seen(
    client: &reqwest::Client,
    admin: std::net::SocketAddr,
    origin: &str,
) -> Option<String> {
    let encoded: String = origin
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'.' | b'-' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    let url = format!("http://{admin}/origins/{encoded}");
    let body = client.get(url).send().await.ok()?.text().await.ok()?;
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    v["owner"].as_str().map(str::to_string)
}

/// Samples every member's view of every origin's owner until `until`, twice around in
/// each sweep: a member saying `here` before and after another one said it for the
/// same origin is two owners at once. The overlaps seen.
async fn sample(
    endpoints: Arc<Mutex<Vec<Endpoint>>>,
    origins: Vec<String>,
    until: Instant,
) -> Vec<String> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(500))
        .build()
        .expect("client");
    let mut overlaps = Vec::new();
    while Instant::now() < until {
        let members = endpoints.lock().expect("endpoints").clone();
        for origin in &origins {
            let mut said = Vec::new();
            for _round in 0..2 {
                for (i, m) in members.iter().enumerate() {
                    let here =
                        owner_seen(&client, m.admin, origin).await.as_deref() == Some("here");
                    said.push((i, here));
                }
            }
            let n = members.len();
            for (x, y) in (0..n).flat_map(|x| (0..n).map(move |y| (x, y))) {
                // x here in the first round, y here after it, x here again in the second.
                let (first, again) = (said[x].1, said[n + x].1);
                let between = said[x + 1..n + x].iter().any(|(m, here)| *m == y && *here);
                if x != y && first && again && between {
                    overlaps.push(format!("{origin}: members {x} and {y} both said here"));
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    overlaps
}

/// The seed of this run: `ROBOTSGATE_CAMPAIGN_SEED`, or the clock's.
fn seed() -> u64 {
    std::env::var("ROBOTSGATE_CAMPAIGN_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_randomized_fault_campaign_never_gives_an_origin_two_owners() {
    let seed = seed();
    let mut dice = Dice(seed | 1);
    let mode = if dice.below(2) == 0 {
        "refuse"
    } else {
        "keep_owned"
    };
    eprintln!("campaign seed {seed} (ROBOTSGATE_CAMPAIGN_SEED replays it), mode {mode}");
    let origins = [
        paced_origin("0.3").await,
        paced_origin("0.3").await,
        paced_origin("0.3").await,
    ];
    let urls: Vec<String> = origins
        .iter()
        .map(|o| o.url("").trim_end_matches('/').to_string())
        .collect();
    let mut fleet = Fleet::start(mode).await;
    members_up(&fleet.members.iter().map(|m| &m.proxy).collect::<Vec<_>>()).await;
    let start = Instant::now();
    let until = start + campaign();
    let loads: Vec<_> = (0..5)
        .map(|c| tokio::spawn(load(fleet.endpoints.clone(), urls.clone(), seed ^ c, until)))
        .collect();
    let sampler = tokio::spawn(sample(fleet.endpoints.clone(), urls.clone(), until));
    let mut faults = Vec::new();
    while Instant::now() + Duration::from_secs(4) < until {
        tokio::time::sleep(dice.millis(1000, 2500)).await;
        let began = start.elapsed();
        let fault = fleet.fault(&mut dice).await;
        let fault = format!("{:.2}s {fault}", began.as_secs_f64());
        eprintln!("  {fault}");
        faults.push(fault);
    }
    let mut statuses = Vec::new();
    for load in loads {
        statuses.extend(load.await.expect("load"));
    }
    let overlaps = sampler.await.expect("sampler");
    let ok = statuses.iter().filter(|s| **s == 200).count();
    eprintln!(
        "{} faults, {} requests, {ok} answered 200",
        faults.len(),
        statuses.len()
    );
    let record = format!(
        "seed {seed}, mode {mode}, faults:\n  {}",
        faults.join("\n  ")
    );
    for origin in &origins {
        let seen = pages(origin, "/p/");
        assert!(
            most_at_once(&seen) <= 1,
            "two at once at {}\n{record}",
            origin.url("")
        );
        let short = short_gaps(&fleet, &seen, start);
        assert!(
            short.is_empty(),
            "gaps under the Crawl-delay at {}:\n{}\n{record}",
            origin.url(""),
            short.join("\n")
        );
    }
    assert!(
        overlaps.is_empty(),
        "two owners at once: {overlaps:?}\n{record}"
    );
    assert!(ok > 0, "nothing was answered\n{record}");
    // Healed: every member serves every origin again.
    members_up(&fleet.members.iter().map(|m| &m.proxy).collect::<Vec<_>>()).await;
    for (i, member) in fleet.members.iter().enumerate() {
        for (o, origin) in origins.iter().enumerate() {
            let url = origin.url(&format!("/after/{i}"));
            let served = eventually(Duration::from_secs(40), || {
                curl(&member.proxy, &url, &["--max-time", "8"]).0 == 200
            })
            .await;
            assert!(served, "member {i} never served origin {o} again\n{record}");
        }
    }
    for origin in &origins {
        let short = short_gaps(&fleet, &pages(origin, "/"), start);
        assert!(
            short.is_empty(),
            "gaps under the Crawl-delay at {} (robots.txt fetches and pages after healing included):\n{}\n{record}",
            origin.url(""),
            short.join("\n")
        );
    }
}
