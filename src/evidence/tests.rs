//! The chain written, exported and verified in one process: a chain of several segments
//! verifies whole and in part, and each kind of change to its files is named.

use std::path::Path;

use super::bundle::{gather, Bundle, Filter};
use super::record::Decided;
use super::verify::{verify, Report};
use super::*;
use crate::config::Timeout;

/// Evidence in `dir` with small segments (a few records each), heads at every tick.
fn open_small(dir: &Path, instance: &str) -> Arc<Evidence> {
    let config = EvidenceConfig {
        dir: Some(dir.to_path_buf()),
        segment_bytes: 4096,
        head_interval_seconds: Timeout::new(0.001),
        ..EvidenceConfig::default()
    };
    let evidence = Evidence::open(&config, instance, "m")
        .expect("open")
        .expect("on");
    evidence.run_in_background();
    evidence
}

/// `n` decisions on `origin`, each waited for, under the policy `octets`.
async fn decide(evidence: &Evidence, origin: &str, octets: &[u8], n: usize) {
    let sha = evidence.keep_policy(octets).expect("policy");
    for i in 0..n {
        let url = format!("{origin}/page/{i}");
        let decided = Decided {
            arrived: "explicit",
            origin,
            url: &url,
            tokens: vec!["ExampleBot"],
            tokens_from: "default",
            mode: "enforce",
            verdict: if i % 2 == 0 { "allowed" } else { "disallowed" },
            why: "x",
            policy: Some(PolicyRef {
                sha256: Some(&sha),
                case: "fresh",
                age_s: Some(1.0),
            }),
            ..Decided::default()
        };
        let recorded = evidence.record(&Entry::Decision(Box::new(decided))).await;
        assert!(matches!(recorded, Ok(Recorded::At(_))), "{recorded:?}");
        evidence.chain.tick();
    }
}

/// Verifies the whole of `dir` (every record agreeing with the matcher).
fn check(dir: &Path) -> Report {
    let bundle = gather(&[dir.to_path_buf()], &Filter::default()).expect("gather");
    verify(&bundle, None, &|_, _, _, _| None)
}

/// The name of segment `n` of the only chain in `dir`.
fn segment(dir: &Path, n: u32) -> std::path::PathBuf {
    let chains = read::chains(dir).expect("chains");
    chains[0].segments[&n].clone()
}

#[tokio::test]
async fn a_chain_of_segments_verifies_whole_in_part_and_as_read_back() {
    let dir = tempfile::tempdir().expect("dir");
    let evidence = open_small(dir.path(), "m/1.1");
    decide(
        &evidence,
        "http://a.example",
        b"User-agent: *\nDisallow: /p\n",
        40,
    )
    .await;
    decide(&evidence, "http://b.example", b"User-agent: *\n", 5).await;
    evidence.close();
    let segments = read::chains(dir.path()).expect("chains")[0].segments.len();
    assert!(segments > 3, "{segments} segments");
    let report = check(dir.path());
    assert!(report.breaks.is_empty(), "{:#?}", report.breaks);
    assert_eq!((report.records, report.decisions), (46, 45));
    // One origin's, each with its proof, through the bundle's text.
    let filter = Filter {
        origin: Some("http://b.example".into()),
        ..Filter::default()
    };
    let part = gather(&[dir.path().to_path_buf()], &filter).expect("gather");
    let mut text = Vec::new();
    part.write_jsonl(&mut text).expect("write");
    let read = Bundle::read_jsonl(std::str::from_utf8(&text).expect("utf-8")).expect("read");
    let report = verify(&read, None, &|_, _, _, _| None);
    assert!(report.breaks.is_empty(), "{:#?}", report.breaks);
    assert_eq!(report.decisions, 5);
    assert_eq!(read.policies.len(), 1);
    // A changed line in the bundle is named.
    let forged = String::from_utf8(text)
        .expect("utf-8")
        .replacen("page/1", "page/X", 1);
    let read = Bundle::read_jsonl(&forged).expect("read");
    let report = verify(&read, None, &|_, _, _, _| None);
    assert!(
        report
            .breaks
            .iter()
            .any(|b| b.contains("not the record the signed head holds")),
        "{:#?}",
        report.breaks
    );
}

#[tokio::test]
async fn each_change_to_the_files_is_named() {
    type Change = fn(&Path);
    let changes: [(&str, Change, &str); 5] = [
        (
            "a byte flipped",
            flip,
            "not the record the signed head holds",
        ),
        ("a record removed", remove, "records removed"),
        ("two records swapped", swap, "follows seq"),
        ("a segment deleted", delete, "segment 2 is missing"),
        (
            "a head removed",
            unhead,
            "does not follow the line before it",
        ),
    ];
    for (what, change, named) in changes {
        let dir = tempfile::tempdir().expect("dir");
        let evidence = open_small(dir.path(), "m/1.2");
        decide(&evidence, "http://a.example", b"User-agent: *\n", 30).await;
        evidence.close();
        assert!(check(dir.path()).breaks.is_empty(), "{what}: before");
        change(dir.path());
        let report = check(dir.path());
        assert!(
            report.breaks.iter().any(|b| b.contains(named)),
            "{what}: {:#?}",
            report.breaks
        );
    }

    fn flip(dir: &Path) {
        let path = segment(dir, 2);
        let mut octets = std::fs::read(&path).expect("read");
        // A digit of the second record's URL: the line still reads.
        let second = octets.iter().position(|b| *b == b'\n').expect("a line") + 1;
        let page = second
            + octets[second..]
                .windows(6)
                .position(|w| w == b"/page/")
                .expect("a page");
        octets[page + 6] ^= 0x01;
        std::fs::write(&path, octets).expect("write");
    }
    fn lines(dir: &Path) -> (std::path::PathBuf, Vec<String>) {
        let path = segment(dir, 2);
        let text = std::fs::read_to_string(&path).expect("read");
        (path, text.lines().map(String::from).collect())
    }
    fn remove(dir: &Path) {
        let (path, mut lines) = lines(dir);
        lines.remove(1);
        std::fs::write(&path, lines.join("\n") + "\n").expect("write");
    }
    fn swap(dir: &Path) {
        let (path, mut lines) = lines(dir);
        lines.swap(0, 1);
        std::fs::write(&path, lines.join("\n") + "\n").expect("write");
    }
    fn delete(dir: &Path) {
        std::fs::remove_file(segment(dir, 2)).expect("delete");
    }
    fn unhead(dir: &Path) {
        let chains = read::chains(dir).expect("chains");
        let path = chains[0].dir.join("heads.jsonl");
        let mut heads = chains[0].heads.clone();
        heads.remove(1);
        std::fs::write(&path, heads.join("\n") + "\n").expect("write");
    }
}

#[tokio::test]
async fn segments_past_their_age_are_dropped_under_a_signed_cut() {
    let dir = tempfile::tempdir().expect("dir");
    let evidence = open_small(dir.path(), "m/1.6");
    decide(&evidence, "http://a.example", b"User-agent: *\n", 30).await;
    // The closed segments last written an hour ago; the open one now.
    let chain = &read::chains(dir.path()).expect("chains")[0];
    let open = evidence.chain.open_segment();
    let hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
    for (n, path) in &chain.segments {
        if *n < open {
            let file = std::fs::File::options()
                .write(true)
                .open(path)
                .expect("open");
            file.set_modified(hour_ago).expect("mtime");
        }
    }
    let retention = upkeep::Retention {
        age: Duration::from_secs(60),
        bytes: 0,
        key: evidence.retention.key.clone(),
    };
    retention.apply(dir.path(), &evidence.chain);
    evidence.close();
    let left = read::chains(dir.path()).expect("chains")[0].segments.len();
    assert_eq!(left, 1, "only the segment open then is left");
    let report = check(dir.path());
    assert!(report.breaks.is_empty(), "{:#?}", report.breaks);
    assert!(
        report
            .notes
            .iter()
            .any(|n| n.contains("dropped by retention (age)")),
        "{:#?}",
        report.notes
    );
}

#[tokio::test]
async fn a_segment_dropped_by_retention_is_a_signed_cut_not_a_break() {
    let dir = tempfile::tempdir().expect("dir");
    let evidence = open_small(dir.path(), "m/1.3");
    decide(&evidence, "http://a.example", b"User-agent: *\n", 30).await;
    let retention = upkeep::Retention {
        age: Duration::ZERO,
        bytes: 8192,
        key: evidence.retention.key.clone(),
    };
    retention.apply(dir.path(), &evidence.chain);
    evidence.close();
    let report = check(dir.path());
    assert!(report.breaks.is_empty(), "{:#?}", report.breaks);
    assert!(
        report
            .notes
            .iter()
            .any(|n| n.contains("dropped by retention (size)")),
        "{:#?}",
        report.notes
    );
}

#[tokio::test]
async fn a_crashed_chains_tail_is_signed_by_the_next_process() {
    let dir = tempfile::tempdir().expect("dir");
    let config = EvidenceConfig {
        dir: Some(dir.path().to_path_buf()),
        head_interval_seconds: Timeout::new(3600.0),
        ..EvidenceConfig::default()
    };
    let first = Evidence::open(&config, "m/1.4", "m")
        .expect("open")
        .expect("on");
    decide(&first, "http://a.example", b"User-agent: *\n", 3).await;
    // No close: as if killed (its lock let go as the process's would be, once its
    // upkeep thread lets the chain go too).
    drop(first);
    let lock = dir.path().join("chains/m_1.4/lock");
    let free = || files::try_lock(&std::fs::File::open(&lock).expect("lock"));
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !free() {
        assert!(
            std::time::Instant::now() < deadline,
            "the chain never let go"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let report = check(dir.path());
    assert!(
        report.notes.iter().any(|n| n.contains("under no head yet")),
        "{:#?}",
        report.notes
    );
    let second = Evidence::open(&config, "m/1.5", "m")
        .expect("open")
        .expect("on");
    second.close();
    let report = check(dir.path());
    assert!(report.breaks.is_empty(), "{:#?}", report.breaks);
    assert!(
        report
            .notes
            .iter()
            .any(|n| n.contains("signed by a later process")),
        "{:#?}",
        report.notes
    );
}

/// Records nobody writes (a stalled disk: the writer never returns) queue up to
/// `max_pending_bytes` and no further: the next is refused at once, and once a write
/// takes the queue, records are taken again.
#[tokio::test]
async fn records_queued_past_max_pending_bytes_are_refused_at_once() {
    let dir = tempfile::tempdir().expect("dir");
    let config = EvidenceConfig {
        dir: Some(dir.path().to_path_buf()),
        max_pending_bytes: 65_536,
        ..EvidenceConfig::default()
    };
    let evidence = Evidence::open(&config, "a/1", "m")
        .expect("open")
        .expect("on");
    let decided = Decided {
        arrived: "explicit",
        origin: "http://a.test",
        url: "http://a.test/page",
        tokens: vec!["ExampleBot"],
        tokens_from: "default",
        mode: "enforce",
        verdict: "allowed",
        why: "x",
        ..Decided::default()
    };
    let entry = Entry::Decision(Box::new(decided));
    let mut queued = Vec::new();
    let refused = loop {
        match evidence.chain.append(&entry) {
            Ok(seq) => queued.push(seq),
            Err(refused) => break refused,
        }
        assert!(queued.len() < 10_000, "never refused");
    };
    assert!(matches!(refused, Unwritten::Full), "{refused:?}");
    let before = std::fs::metadata(segment(dir.path(), 1))
        .expect("segment")
        .len();
    // Each queued record is a line of a few hundred octets: the queue held at most the
    // bound, and at least the bound less one record.
    assert!(queued.len() > 65_536 / 1024, "{} queued", queued.len());
    let last = *queued.last().expect("queued");
    evidence.chain.written(last).await.expect("written");
    let written = std::fs::metadata(segment(dir.path(), 1))
        .expect("segment")
        .len()
        - before;
    assert!(
        written <= 65_536 && written > 65_536 - 2048,
        "{written} octets queued"
    );
    assert!(evidence.chain.append(&entry).is_ok(), "taken again");
}
