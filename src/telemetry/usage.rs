//! The usage metric: `robotsgate_usage_verdicts_total{purpose,source,result}`, one count
//! per declared purpose judged (source: the robots.txt rule that stated it, or `none`)
//! and per purpose an origin's `Content-Usage`/`Content-Signal` response header states
//! (source `header`). Handles are resolved once: no label hashing per request.

use std::sync::LazyLock;

use prometheus::{register_int_counter_vec, IntCounter, IntCounterVec};

use crate::config::Purpose;
use crate::policy::usage::UsageVerdict;
use crate::robots::{Preference, UsageSource};

/// `robotsgate_usage_verdicts_total`: usage verdicts by purpose, source and result.
static VERDICTS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "robotsgate_usage_verdicts_total",
        "Usage preferences met, per declared purpose: where they were stated (content-usage, \
         content-signal, header, too-many-rules, none) and what they said (allow, refuse, unknown).",
        &["purpose", "source", "result"]
    )
    .expect("metric registers once")
});

/// Every source a verdict label can name (none: no statement).
const SOURCES: [Option<UsageSource>; 5] = [
    Some(UsageSource::ContentUsage),
    Some(UsageSource::ContentSignal),
    Some(UsageSource::Header),
    Some(UsageSource::TooManyRules),
    None,
];
/// Every result a verdict label can name.
const RESULTS: [Preference; 3] = [Preference::Allow, Preference::Refuse, Preference::Unknown];

/// The verdict counters for every (purpose, source, result), resolved once.
static HANDLES: LazyLock<Vec<IntCounter>> = LazyLock::new(|| {
    let mut handles = Vec::new();
    for purpose in Purpose::ALL {
        for source in SOURCES {
            for result in RESULTS {
                let source = source.map_or("none", UsageSource::label);
                handles.push(VERDICTS.with_label_values(&[
                    purpose.label(),
                    source,
                    result.label(),
                ]));
            }
        }
    }
    handles
});

/// The counter for one (purpose, source, result).
fn handle(
    purpose: Purpose,
    source: Option<UsageSource>,
    result: Preference,
) -> Option<&'static IntCounter> {
    let p = Purpose::ALL.iter().position(|&x| x == purpose)?;
    let s = SOURCES.iter().position(|&x| x == source)?;
    let r = RESULTS.iter().position(|&x| x == result)?;
    HANDLES.get((p * SOURCES.len() + s) * RESULTS.len() + r)
}

/// Counts a request's verdict, one per declared purpose.
pub fn record_verdict(verdict: &UsageVerdict) {
    for v in verdict.purposes() {
        if let Some(counter) = handle(v.purpose, v.source, v.preference) {
            counter.inc();
        }
    }
}

/// Counts what an origin's response header states for one purpose.
pub fn record_header(purpose: Purpose, preference: Preference) {
    if let Some(counter) = handle(purpose, Some(UsageSource::Header), preference) {
        counter.inc();
    }
}

/// Per purpose: (judged, refused) so far, over every source but headers (the status
/// page's share refused).
pub fn refused_share() -> Vec<(&'static str, u64, u64)> {
    Purpose::ALL
        .iter()
        .map(|&purpose| {
            let (mut judged, mut refused) = (0, 0);
            for source in SOURCES
                .into_iter()
                .filter(|s| *s != Some(UsageSource::Header))
            {
                for result in RESULTS {
                    let n = handle(purpose, source, result).map_or(0, IntCounter::get);
                    judged += n;
                    if result == Preference::Refuse {
                        refused += n;
                    }
                }
            }
            (purpose.label(), judged, refused)
        })
        .collect()
}
