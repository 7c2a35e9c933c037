//! Any bytes as robots.txt, any URL and agent: parsing and deciding never panic, a
//! verdict's deciding rule really is one of the file's rules, and so is every usage
//! statement (`Content-Usage`, `Content-Signal`) said to apply. The URL's bytes are also
//! read as an origin's `Content-Usage`/`Content-Signal` response header.
#![no_main]

use libfuzzer_sys::fuzz_target;
use robotsgate::robots::{CanonicalPath, Purpose, RobotsTxt, Statement, UsageSource};

fuzz_target!(|data: &[u8]| {
    // Layout: [agent len][agent][url len][url][robots.txt...]
    let (agent, rest) = split(data);
    let (url, body) = split(rest);
    let robots = RobotsTxt::parse(body);
    for source in [UsageSource::ContentUsage, UsageSource::ContentSignal] {
        let statement = Statement::parse(source, url);
        for purpose in Purpose::ALL {
            let _ = statement.preference(purpose);
        }
    }
    let agent = String::from_utf8_lossy(agent);
    let url = String::from_utf8_lossy(url);
    let group = robots.group_for(&[agent.as_ref(), "*"]);
    let path = CanonicalPath::from_url(&url);
    // Canonical form is a fixed point: normalising it again changes nothing.
    assert_eq!(CanonicalPath::new(path.as_str()).as_str(), path.as_str());
    let verdict = robots.decide(group, &path);
    if let Some(rule) = verdict.rule() {
        assert!(robots.rules().iter().any(|r| std::ptr::eq(r, rule)));
    }
    let usage_group = robots.usage_group_for(&[agent.as_ref(), "*"]);
    let usage = robots.usage(usage_group, &path);
    for purpose in Purpose::ALL {
        if let (_, Some(rule)) = usage.preference(purpose) {
            assert!(robots.usage_rules().iter().any(|r| std::ptr::eq(r, rule)));
        }
    }
    let _ = robots.crawl_delay(group);
});

fn split(data: &[u8]) -> (&[u8], &[u8]) {
    match data.split_first() {
        Some((&len, rest)) => rest.split_at(usize::from(len).min(rest.len())),
        None => (&[], &[]),
    }
}
