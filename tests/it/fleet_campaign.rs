//! A randomized fault campaign against real processes, as Jepsen runs one: three to
//! five members on one `redis-server` (each through a relay the nemesis can cut) or on
//! a Cluster with a replica per master, behind HAProxy, crawled through the front and
//! through random members, while a nemesis (seeded; the seed and every fault printed)
//! pauses members past their lease (SIGSTOP), kills them and starts new ones
//! (SIGKILL), stops them gracefully (SIGTERM), adds and removes members, cuts them from
//! Redis, stalls Redis (SIGSTOP) and restarts it empty, pauses and kills Cluster
//! masters. Meanwhile every member's `/origins/...` is sampled.
//!
//! Kept at the origins (each logs when a request arrives and ends): no gap under the
//! Crawl-delay, never more at once than the delay or `max_in_flight` allow, nothing
//! disallowed; in the samples, never two members saying `here` for one origin at once;
//! once the faults stop, every member serves every origin again. The report gives,
//! per kind of fault, the requests answered 5xx and the longest an origin waited.
//! `ROBOTSGATE_CAMPAIGN_SEED` replays a campaign; `ROBOTSGATE_CAMPAIGN_SECONDS` sets
//! its length (the long runs of `docs/fleet.md`).

use std::time::Duration;

use tokio::time::Instant;

use crate::campaign::nemesis::{Backend, Fleet};
use crate::campaign::record::{by_kind, crawl, sample, Target};
use crate::campaign::Dice;
use crate::common::{curl, eventually, most_at_once, pages, TestOrigin};
use crate::fleet_fixture::{members_up, paced_origin, slow_origin};

/// The Crawl-delay of every paced origin.
const DELAY: Duration = Duration::from_millis(300);

/// The slow origin's pages.
const SLOW_PAGES: u64 = 200;

/// How long the nemesis runs: `ROBOTSGATE_CAMPAIGN_SECONDS`, 36 s in the suite.
fn campaign() -> Duration {
    let seconds = std::env::var("ROBOTSGATE_CAMPAIGN_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(36);
    Duration::from_secs(seconds)
}

/// The lines of every member's log (running or not) that `keep` keeps, each with its
/// log's number.
fn log_lines(fleet: &Fleet, keep: impl Fn(&str) -> bool) -> Vec<String> {
    let logs = fleet.all_logs();
    let numbered = logs.iter().enumerate().flat_map(|(n, log)| {
        log.lines()
            .filter(|l| keep(l))
            .map(move |l| format!("log {n}: {l}"))
    });
    numbered.collect()
}

/// Every line of every member's log that names `target`.
fn lines_naming(fleet: &Fleet, target: &str) -> Vec<String> {
    let needle = format!("path=\"{target}\"");
    log_lines(fleet, |l| l.contains(&needle))
}

/// What the members logged of `origin`'s ownership, and their warnings: a short gap's
/// context.
fn ownership_lines(fleet: &Fleet, origin: &str) -> Vec<String> {
    let authority = origin.trim_start_matches("http://").trim_end_matches('/');
    log_lines(fleet, |l| {
        !l.contains(" access: ")
            && (l.contains(authority) || l.contains(" WARN ") || l.contains("fleet: l"))
    })
}

/// Each gap under the Crawl-delay at `seen`: both requests, their times from `start`,
/// and what the members logged of them.
fn short_gaps(fleet: &Fleet, seen: &[crate::common::Seen], start: Instant) -> Vec<String> {
    let at = |i: std::time::Instant| i.saturating_duration_since(start.into_std());
    seen.windows(2)
        .filter(|w| gap(&w[0], &w[1]) < DELAY)
        .map(|w| {
            let done = ended(&w[0]);
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

/// When the origin answered `request` (its arrival, for one still unanswered).
fn ended(request: &crate::common::Seen) -> std::time::Instant {
    request.done.unwrap_or(request.arrived)
}

/// The gap from `before`'s answer to `after`'s arrival at the origin.
fn gap(before: &crate::common::Seen, after: &crate::common::Seen) -> Duration {
    after.arrived.saturating_duration_since(ended(before))
}

/// The shortest gap between an answer's end and the next request's arrival in `seen`.
fn shortest_gap(seen: &[crate::common::Seen]) -> Option<Duration> {
    seen.windows(2).map(|w| gap(&w[0], &w[1])).min()
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

/// The origins crawled: three with a 0.3 s Crawl-delay and a disallowed `/private`,
/// one without a delay whose pages take 300 ms (`max_in_flight`, 2, guards it).
struct Origins {
    paced: Vec<TestOrigin>,
    slow: TestOrigin,
}

impl Origins {
    async fn start() -> Origins {
        let mut paced = Vec::new();
        for _ in 0..3 {
            paced.push(paced_origin("0.3").await);
        }
        Origins {
            paced,
            slow: slow_origin("/s/", SLOW_PAGES as usize).await,
        }
    }

    /// Each origin's base URL.
    fn base(origin: &TestOrigin) -> String {
        origin.url("").trim_end_matches('/').to_string()
    }

    /// What the crawl asks for.
    fn targets(&self) -> Vec<Target> {
        let paced = self.paced.iter().map(|o| Target::Paced(Origins::base(o)));
        paced
            .chain([Target::Slow(Origins::base(&self.slow), SLOW_PAGES)])
            .collect()
    }

    /// Every origin.
    fn all(&self) -> Vec<&TestOrigin> {
        self.paced.iter().chain([&self.slow]).collect()
    }
}

/// A campaign on `backend`: faults for `campaign()`, then the checks.
async fn run(backend: Backend) {
    let seed = seed();
    let mut dice = Dice(seed | 1);
    let mode = if dice.below(2) == 0 {
        "refuse"
    } else {
        "keep_owned"
    };
    eprintln!(
        "campaign seed {seed} (ROBOTSGATE_CAMPAIGN_SEED replays it), {backend:?}, mode {mode}"
    );
    let origins = Origins::start().await;
    let mut fleet = Fleet::start(backend, mode).await;
    members_up(&fleet.members.iter().map(|m| &m.proxy).collect::<Vec<_>>()).await;
    let start = Instant::now();
    let until = start + campaign();
    let crawlers: Vec<_> = (0..6u64)
        .map(|c| {
            // Two crawlers through the front, four through random members.
            let front = (c < 2).then(|| fleet.front.url());
            let endpoints = fleet.endpoints.clone();
            tokio::spawn(crawl(
                endpoints,
                front,
                origins.targets(),
                seed ^ (c + 1),
                until,
            ))
        })
        .collect();
    let bases = origins.all().into_iter().map(Origins::base).collect();
    let sampler = tokio::spawn(sample(fleet.endpoints.clone(), bases, until));
    let mut faults = Vec::new();
    while Instant::now() + Duration::from_secs(4) < until {
        tokio::time::sleep(dice.millis(1000, 2500)).await;
        let fault = fleet.fault(&mut dice).await;
        eprintln!(
            "  {:.2}s {}",
            (fault.began - start).as_secs_f64(),
            fault.what
        );
        faults.push(fault);
    }
    let mut asked = Vec::new();
    for crawler in crawlers {
        asked.extend(crawler.await.expect("crawler"));
    }
    let overlaps = sampler.await.expect("sampler");
    let paced: Vec<_> = origins.paced.iter().map(|o| pages(o, "/p/")).collect();
    let ok = asked.iter().filter(|a| a.status == 200).count();
    let private = asked.iter().filter(|a| a.private).count();
    // A request shorter than the overlap tolerance is not counted at its own arrival.
    let most: Vec<usize> = paced
        .iter()
        .map(|seen| most_at_once(seen).max(usize::from(!seen.is_empty())))
        .collect();
    let slow = most_at_once(&pages(&origins.slow, "/s/"));
    eprintln!(
        "{} faults, {} requests, {ok} answered 200, {private} for disallowed paths; shortest gap at a paced origin {:.3} s, most at once {most:?} (paced), {slow} (max_in_flight 2)\n{}",
        faults.len(),
        asked.len(),
        paced.iter().filter_map(|seen| shortest_gap(seen)).min().unwrap_or_default().as_secs_f64(),
        by_kind(&faults, &asked, &paced)
    );
    let record = format!(
        "seed {seed}, {backend:?}, mode {mode}, faults:\n  {}",
        faults
            .iter()
            .map(|f| format!("{:.2}s {}", (f.began - start).as_secs_f64(), f.what))
            .collect::<Vec<_>>()
            .join("\n  ")
    );
    for (origin, seen) in origins.paced.iter().zip(&paced) {
        let at = origin.url("");
        assert!(most_at_once(seen) <= 1, "two at once at {at}\n{record}");
        let short = short_gaps(&fleet, seen, start);
        assert!(
            short.is_empty(),
            "gaps under the Crawl-delay at {at}:\n{}\nownership:\n  {}\n{record}",
            short.join("\n"),
            ownership_lines(&fleet, &at).join("\n  ")
        );
        assert!(
            pages(origin, "/private").is_empty(),
            "disallowed reached at {at}\n{record}"
        );
    }
    let allowed = asked
        .iter()
        .filter(|a| a.private && a.status == 200)
        .count();
    assert_eq!(allowed, 0, "disallowed paths answered 200\n{record}");
    assert!(slow <= 2, "{slow} at once for max_in_flight 2\n{record}");
    assert!(
        overlaps.is_empty(),
        "two owners at once: {overlaps:?}\n{record}"
    );
    assert!(ok > 0, "nothing was answered\n{record}");
    healed(&fleet, &origins, start, &record).await;
}

/// Once the faults stop, every member serves every origin again, and no request,
/// robots.txt fetches included, came under a Crawl-delay.
async fn healed(fleet: &Fleet, origins: &Origins, start: Instant, record: &str) {
    members_up(&fleet.members.iter().map(|m| &m.proxy).collect::<Vec<_>>()).await;
    for (i, member) in fleet.members.iter().enumerate() {
        for (o, origin) in origins.all().into_iter().enumerate() {
            let path = if o < origins.paced.len() {
                format!("/after/{i}")
            } else {
                "/s/0".into()
            };
            let url = origin.url(&path);
            let served = eventually(Duration::from_secs(40), || {
                curl(&member.proxy, &url, &["--max-time", "8"]).0 == 200
            })
            .await;
            assert!(served, "member {i} never served origin {o} again\n{record}");
        }
    }
    for origin in &origins.paced {
        let short = short_gaps(fleet, &pages(origin, "/"), start);
        assert!(
            short.is_empty(),
            "gaps under the Crawl-delay at {} (robots.txt fetches and pages after healing included):\n{}\n{record}",
            origin.url(""),
            short.join("\n")
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_randomized_fault_campaign_on_one_redis_never_gives_an_origin_two_owners() {
    run(Backend::Single).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_randomized_fault_campaign_on_a_cluster_never_gives_an_origin_two_owners() {
    run(Backend::Cluster).await;
}
