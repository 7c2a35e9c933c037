//! Engine benchmark: robotsgate vs `texting_robots` (the baseline) on `large_robots.txt`.
//!
//! Measures, in one run: parse time of the file, matches per second over 100,000 URLs
//! aimed at its rules, and heap bytes held by one parsed file (a counting allocator).
//! Before timing anything it checks both engines give the same verdicts on every URL and
//! prints the cases where they differ (known, documented divergences of the baseline).
//! Ends with a summary table of ratios, and the cost of judging usage preferences: the
//! verdict alone (the baseline) against the verdict, two declared purposes judged and
//! `X-Robots-Usage` rendered, per URL, on the same file with Content-Signal and
//! Content-Usage rules in its `*` group (as `bench/proxy_bench.py` serves it).

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant};

use criterion::{criterion_group, Criterion, Throughput};
use robotsgate::config::{Purpose, UsageConfig, UsageMode};
use robotsgate::policy::usage::UsageCheck;
use robotsgate::robots::{CanonicalPath, RobotsTxt};

#[path = "support/urls.rs"]
mod urls;

struct Counting;
static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const ROBOTS: &str = include_str!("../tests/data/large_robots.txt");
const ORIGIN: &str = "https://www.example-megasite.com";
const AGENTS: &[&str] = &["ExampleBot", "Googlebot", "YandexBot"];
const URLS: usize = 100_000;

fn held_bytes<T>(make: impl FnOnce() -> T) -> (T, isize) {
    let before = LIVE.load(Ordering::Relaxed);
    let value = make();
    (value, LIVE.load(Ordering::Relaxed) - before)
}

fn ours(robots: &RobotsTxt, agent: &str, urls: &[String]) -> usize {
    let group = robots.group_for(&[agent]);
    urls.iter()
        .filter(|u| robots.decide(group, &CanonicalPath::from_url(u)).allowed)
        .count()
}

/// The file with usage rules in its `*` group, as `bench/proxy_bench.py` serves it.
fn with_usage_rules() -> String {
    ROBOTS.replacen(
        "User-agent: *\n",
        "User-agent: *\nContent-Signal: search=yes, ai-train=no\nContent-Usage: /index train-ai=y\n",
        1,
    )
}

/// The verdicts [`ours`] takes, and for each allowed URL the usage verdict of two purposes with its
/// `X-Robots-Usage` rendered: the work `agent.default_purposes` adds per request.
fn verdicts_and_usage(robots: &RobotsTxt, check: &UsageCheck, urls: &[String]) -> usize {
    let group = robots.group_for(&["UsageBot"]);
    let usage_group = robots.usage_group_for(&["UsageBot"]);
    urls.iter()
        .filter(|u| {
            let path = CanonicalPath::from_url(u);
            let allowed = robots.decide(group, &path).allowed;
            allowed && {
                let verdict = check.judge(&robots.usage(usage_group, &path));
                !black_box(verdict.header()).is_empty()
            }
        })
        .count()
}

fn usage_check() -> UsageCheck {
    UsageCheck::new(
        [Purpose::Search, Purpose::TrainAi].into_iter().collect(),
        UsageMode::Enforce,
        &UsageConfig::default(),
    )
}

fn usage_summary(urls: &[String]) {
    let robots = RobotsTxt::parse(with_usage_rules().as_bytes());
    let check = usage_check();
    // Rounds interleave the two, so drift hits both alike; the ratio is per round.
    let mut rounds: Vec<(f64, f64)> = (0..7)
        .map(|_| {
            let alone = best_of(3, || {
                black_box(ours(&robots, "UsageBot", urls));
            });
            let judged = best_of(3, || {
                black_box(verdicts_and_usage(&robots, &check, urls));
            });
            let per_url = |d: Duration| d.as_secs_f64() * 1e9 / urls.len() as f64;
            (per_url(alone), per_url(judged))
        })
        .collect();
    rounds.sort_by(|a, b| (a.1 - a.0).total_cmp(&(b.1 - b.0)));
    let added: Vec<f64> = rounds.iter().map(|(a, j)| j - a).collect();
    let ratios: Vec<f64> = rounds.iter().map(|(a, j)| j / a).collect();
    let (lo, mid, hi) = (0, rounds.len() / 2, rounds.len() - 1);
    println!();
    println!(
        "usage preferences (two purposes, X-Robots-Usage rendered) against the verdict alone, \
         per URL, median [min-max] over {} rounds:",
        rounds.len()
    );
    println!(
        "  verdict alone {:.0} ns, with usage {:.0} ns: +{:.0} ns [{:.0}-{:.0}], {:.2}x [{:.2}-{:.2}]",
        rounds[mid].0, rounds[mid].1, added[mid], added[lo], added[hi], ratios[mid],
        ratios.iter().copied().fold(f64::MAX, f64::min),
        ratios.iter().copied().fold(0.0, f64::max)
    );
}

fn baseline(robot: &texting_robots::Robot, urls: &[String]) -> usize {
    urls.iter().filter(|u| robot.allowed(u)).count()
}

fn verdicts_agree(urls: &[String]) {
    for agent in AGENTS {
        let robots = RobotsTxt::parse(ROBOTS.as_bytes());
        let robot = texting_robots::Robot::new(agent, ROBOTS.as_bytes()).expect("baseline parses");
        let group = robots.group_for(&[agent]);
        let differ: Vec<&String> = urls
            .iter()
            .filter(|u| {
                robots.decide(group, &CanonicalPath::from_url(u)).allowed != robot.allowed(u)
            })
            .collect();
        println!(
            "verdicts for {agent}: {} of {} URLs differ from texting_robots",
            differ.len(),
            urls.len()
        );
        for u in differ.iter().take(5) {
            let v = robots.decide(group, &CanonicalPath::from_url(u));
            println!(
                "  {u}: robotsgate {} ({v})",
                if v.allowed { "allows" } else { "disallows" }
            );
        }
    }
}

fn best_of(runs: usize, mut f: impl FnMut()) -> Duration {
    (0..runs)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .min()
        .unwrap_or_default()
}

fn summary(urls: &[String]) {
    let (robots, ours_bytes) = held_bytes(|| RobotsTxt::parse(ROBOTS.as_bytes()));
    let (robot, base_bytes) =
        held_bytes(|| texting_robots::Robot::new("ExampleBot", ROBOTS.as_bytes()).expect("parses"));
    let parse_ours = best_of(50, || {
        drop(black_box(RobotsTxt::parse(black_box(ROBOTS.as_bytes()))))
    });
    let parse_base = best_of(50, || {
        drop(black_box(texting_robots::Robot::new(
            "ExampleBot",
            black_box(ROBOTS.as_bytes()),
        )))
    });
    let match_ours = best_of(10, || {
        black_box(ours(&robots, "ExampleBot", urls));
    });
    let match_base = best_of(10, || {
        black_box(baseline(&robot, urls));
    });
    let rate = |d: Duration| urls.len() as f64 / d.as_secs_f64();
    println!();
    println!(
        "summary (best of runs; {} URLs; file {} bytes)",
        urls.len(),
        ROBOTS.len()
    );
    println!(
        "{:<26} {:>14} {:>16} {:>8}",
        "", "robotsgate", "texting_robots", "ratio"
    );
    println!(
        "{:<26} {:>14.1} {:>16.1} {:>7.1}x",
        "parse (µs)",
        parse_ours.as_secs_f64() * 1e6,
        parse_base.as_secs_f64() * 1e6,
        parse_base.as_secs_f64() / parse_ours.as_secs_f64()
    );
    println!(
        "{:<26} {:>14.0} {:>16.0} {:>7.1}x",
        "matches/s",
        rate(match_ours),
        rate(match_base),
        rate(match_ours) / rate(match_base)
    );
    println!(
        "{:<26} {:>14} {:>16} {:>7.2}x",
        "heap bytes per parsed file",
        ours_bytes,
        base_bytes,
        ours_bytes as f64 / base_bytes as f64
    );
    println!("(texting_robots parses for one agent; robotsgate's parse serves every agent)");
    drop((robots, robot));
}

fn benches(c: &mut Criterion, urls: &[String]) {
    let mut parse = c.benchmark_group("parse large_robots.txt");
    parse.throughput(Throughput::Bytes(ROBOTS.len() as u64));
    parse.bench_function("robotsgate", |b| {
        b.iter(|| RobotsTxt::parse(black_box(ROBOTS.as_bytes())))
    });
    parse.bench_function("texting_robots", |b| {
        b.iter(|| texting_robots::Robot::new("ExampleBot", black_box(ROBOTS.as_bytes())))
    });
    parse.finish();

    let robots = RobotsTxt::parse(ROBOTS.as_bytes());
    let robot = texting_robots::Robot::new("ExampleBot", ROBOTS.as_bytes()).expect("parses");
    let mut matching = c.benchmark_group("match 100k URLs");
    matching.throughput(Throughput::Elements(urls.len() as u64));
    matching.sample_size(10);
    matching.bench_function("robotsgate", |b| {
        b.iter(|| ours(&robots, "ExampleBot", urls))
    });
    matching.bench_function("texting_robots", |b| b.iter(|| baseline(&robot, urls)));
    matching.finish();

    let robots = RobotsTxt::parse(with_usage_rules().as_bytes());
    let check = usage_check();
    let mut usage = c.benchmark_group("usage judged, 100k URLs");
    usage.throughput(Throughput::Elements(urls.len() as u64));
    usage.sample_size(10);
    usage.bench_function("verdict alone", |b| {
        b.iter(|| ours(&robots, "UsageBot", urls))
    });
    usage.bench_function("verdict + usage", |b| {
        b.iter(|| verdicts_and_usage(&robots, &check, urls))
    });
    usage.finish();
}

fn main() {
    let urls = urls::urls_for(ROBOTS, ORIGIN, URLS, 42);
    verdicts_agree(&urls);
    let mut c = Criterion::default()
        .configure_from_args()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    benches(&mut c, &urls);
    c.final_summary();
    summary(&urls);
    usage_summary(&urls);
}

// `criterion_group!` is not used: main() needs the URL set and prints the summary.
#[allow(unused_imports)]
use criterion_group as _;
