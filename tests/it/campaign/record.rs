//! The campaign's crawl, its owner sampler and its report. Crawlers ask random origins
//! through random members and through the HAProxy front, each answer recorded with
//! when it was asked; the sampler asks every member's `/origins/...` who may grant
//! turns now; the report puts both beside the faults, by kind: how many, the requests
//! asked while each lasted (and for 3 s after) answered 5xx or not at all, and how
//! long after one ended each paced origin received its next request (faults come every
//! 1 to 2.5 s, so a wait after one can be another's doing).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::nemesis::{Endpoint, Fault, Kind};
use super::Dice;
use crate::common::Seen;

/// How long after a fault the requests asked still count as its.
const AFTERMATH: Duration = Duration::from_secs(3);

/// One request of the crawl.
#[derive(Clone, Debug)]
pub(crate) struct Asked {
    /// When it was sent.
    pub(crate) sent: Instant,
    /// Its status (0: no answer within 8 s).
    pub(crate) status: u16,
    /// It asked for a disallowed path.
    pub(crate) private: bool,
}

/// What the crawl asks for of one origin.
#[derive(Clone, Debug)]
pub(crate) enum Target {
    /// A Crawl-delay origin: pages under `/p/`, now and then a disallowed `/private/`.
    Paced(String),
    /// An origin without a delay whose `/s/0` to `/s/{n-1}` answer slowly.
    Slow(String, u64),
}

impl Target {
    /// Its `n`th request's URL, and whether it is disallowed.
    fn url(&self, n: u64, dice: &mut Dice) -> (String, bool) {
        match self {
            Target::Paced(base) if dice.below(10) == 0 => (format!("{base}/private/{n}"), true),
            Target::Paced(base) => (format!("{base}/p/{n}"), false),
            Target::Slow(base, pages) => (format!("{base}/s/{}", n % pages), false),
        }
    }
}

/// One crawler until `until`: each request for a random target through a random
/// running member, or through `front` when given; pauses 100 ms after a refusal.
pub(crate) async fn crawl(
    endpoints: Arc<Mutex<Vec<Endpoint>>>,
    front: Option<String>,
    targets: Vec<Target>,
    seed: u64,
    until: Instant,
) -> Vec<Asked> {
    let mut dice = Dice(seed | 1);
    let mut asked = Vec::new();
    let mut n = seed.wrapping_mul(1_000_000);
    while Instant::now() < until {
        let proxy = match &front {
            Some(front) => front.clone(),
            None => {
                let members = endpoints.lock().expect("endpoints").clone();
                if members.is_empty() {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
                members[dice.below(members.len() as u64) as usize]
                    .proxy
                    .clone()
            }
        };
        let target = &targets[dice.below(targets.len() as u64) as usize];
        n += 1;
        let (url, private) = target.url(n, &mut dice);
        let client = reqwest::Client::builder()
            .proxy(reqwest::Proxy::http(&proxy).expect("proxy"))
            .timeout(Duration::from_secs(8))
            .build()
            .expect("client");
        let sent = Instant::now();
        let status = match client.get(url).send().await {
            Ok(r) => r.status().as_u16(),
            Err(_) => 0,
        };
        asked.push(Asked {
            sent,
            status,
            private,
        });
        if status != 200 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    asked
}

/// What one member says of one origin's owner (`None`: no answer).
async fn owner_seen(
    client: &reqwest::Client,
    admin: std::net::SocketAddr,
    origin: &str,
) -> Option<String> {
    let encoded = crate::fleet_fixture::urlencode(origin);
    let url = format!("http://{admin}/origins/{encoded}");
    let body = client.get(url).send().await.ok()?.text().await.ok()?;
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    v["owner"].as_str().map(str::to_string)
}

/// Samples every member's view of every origin's owner until `until`, twice around in
/// each sweep: a member saying `here` before and after another one said it for the
/// same origin is two owners at once. The overlaps seen.
pub(crate) async fn sample(
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
                    overlaps.push(format!(
                        "{origin}: {} and {} both said here",
                        members[x].admin, members[y].admin
                    ));
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    overlaps
}

/// The figures of one kind of fault.
#[derive(Default)]
struct Tally {
    /// Faults of the kind.
    faults: usize,
    /// Requests asked during one, or within [`AFTERMATH`] of its end.
    asked: usize,
    /// Of those, answered 5xx.
    failed: usize,
    /// Of those, not answered at all.
    lost: usize,
    /// How long after each one ended each paced origin received its next request.
    waits: Vec<Duration>,
}

/// The report by kind of fault: one line each.
pub(crate) fn by_kind(faults: &[Fault], asked: &[Asked], paced: &[Vec<Seen>]) -> String {
    let mut tallies: BTreeMap<Kind, Tally> = BTreeMap::new();
    for fault in faults {
        let tally = tallies.entry(fault.kind).or_default();
        tally.faults += 1;
        let during = asked
            .iter()
            .filter(|a| a.sent >= fault.began && a.sent <= fault.ended + AFTERMATH);
        for a in during {
            tally.asked += 1;
            tally.failed += usize::from(a.status >= 500);
            tally.lost += usize::from(a.status == 0);
        }
        tally
            .waits
            .extend(paced.iter().filter_map(|seen| served_after(seen, fault)));
    }
    tallies
        .iter()
        .map(|(kind, t)| {
            let mut waits = t.waits.clone();
            waits.sort();
            let at = |q: f64| {
                let i = ((waits.len() as f64 - 1.0) * q).round() as usize;
                waits.get(i).map_or(0.0, Duration::as_secs_f64)
            };
            format!(
                "{kind:?}: {} faults; of {} requests asked meanwhile or within 3 s, {} answered 5xx, {} not answered; a paced origin's next request after one: median {:.2} s, p90 {:.2} s, longest {:.2} s",
                t.faults,
                t.asked,
                t.failed,
                t.lost,
                at(0.5),
                at(0.9),
                at(1.0)
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// How long after `fault` ended the origin that saw `seen` received its next request
/// (`None`: none came before the crawl stopped).
fn served_after(seen: &[Seen], fault: &Fault) -> Option<Duration> {
    let ended = fault.ended.into_std();
    seen.iter()
        .find(|s| s.arrived >= ended)
        .map(|s| s.arrived.saturating_duration_since(ended))
}
