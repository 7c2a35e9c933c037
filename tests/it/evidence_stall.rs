//! A disk that stalls under the evidence: `evidence.dir` on an ext4 filesystem (a loop
//! device) frozen with `fsfreeze`, so that every write to it blocks, as a hung disk's
//! or network filesystem's does. Requests wait for their records at most
//! `evidence.max_wait_seconds`, then are answered 503 with nothing sent; the one whose
//! write is in progress (and its thread) goes on when the disk does; the chain then
//! says what was not sent, and `verify` finds it whole.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::{
    curl, decisions, eventually, evidence_cli, records, run_ok, Conf, Proxy, TestOrigin,
};

/// An ext4 filesystem on a loop device, mounted; thawed, unmounted and detached when
/// dropped.
struct LoopDisk {
    /// Keeps the image and the mount point.
    _dir: tempfile::TempDir,
    /// Where it is mounted.
    path: PathBuf,
    /// The loop device.
    device: String,
}

impl LoopDisk {
    fn mount(megabytes: u64) -> LoopDisk {
        let dir = tempfile::tempdir().expect("tempdir");
        let image = dir.path().join("disk.img");
        let file = std::fs::File::create(&image).expect("image");
        file.set_len(megabytes * 1024 * 1024).expect("size");
        let device = run_ok(
            std::process::Command::new("losetup")
                .args(["-f", "--show"])
                .arg(&image),
        )
        .trim()
        .to_string();
        run_ok(std::process::Command::new("mkfs.ext4").args(["-q", &device]));
        let path = dir.path().join("disk");
        std::fs::create_dir(&path).expect("mkdir");
        run_ok(std::process::Command::new("mount").arg(&device).arg(&path));
        LoopDisk {
            _dir: dir,
            path,
            device,
        }
    }

    /// `fsfreeze -f` (`true`) or `-u`.
    fn freeze(&self, frozen: bool) {
        let flag = if frozen { "-f" } else { "-u" };
        run_ok(
            std::process::Command::new("fsfreeze")
                .arg(flag)
                .arg(&self.path),
        );
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for LoopDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("fsfreeze")
            .arg("-u")
            .arg(&self.path)
            .status();
        let _ = std::process::Command::new("umount")
            .arg(&self.path)
            .status();
        let _ = std::process::Command::new("losetup")
            .args(["-d", &self.device])
            .status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_disk_holds_requests_no_longer_than_the_wait_bound() {
    let disk = LoopDisk::mount(32);
    // Two threads: the write blocks the one that makes it (with one, every request).
    let conf = Conf::new()
        .set("evidence.dir", disk.path().display().to_string())
        .set("evidence.max_wait_seconds", 1)
        .server("threads", 2);
    let proxy = Proxy::start_for_loopback(&conf);
    let origin = TestOrigin::robots("User-agent: *\nAllow: /\n").await;
    assert_eq!(curl(&proxy, &origin.url("/before"), &[]).0, 200);
    disk.freeze(true);
    // Five at once: one of them makes the write and waits for the disk; the others
    // wait for theirs no longer than the bound, and are answered while it is frozen.
    let sent: Vec<_> = (0..5)
        .map(|i| {
            let (url, proxy_url) = (origin.url(&format!("/stalled/{i}")), proxy.url());
            std::thread::spawn(move || {
                crate::common::curl_via(&proxy_url, &url, &["--max-time", "30"])
            })
        })
        .collect();
    let refused = || proxy.counter("robotsgate_evidence_failures_total");
    let answered = eventually(Duration::from_secs(15), || refused() >= 4.0).await;
    assert!(
        answered,
        "not answered while the disk was frozen\n{}",
        proxy.log()
    );
    assert_eq!(
        crate::common::pages(&origin, "/stalled/").len(),
        0,
        "sent while its record was not written"
    );
    disk.freeze(false);
    let answers: Vec<(u16, String, String)> = sent
        .into_iter()
        .map(|t| t.join().expect("curl thread"))
        .collect();
    let refusals = answers
        .iter()
        .filter(|(status, head, _)| *status == 503 && head.contains("evidence-unwritable"))
        .count();
    let served = answers
        .iter()
        .filter(|(status, _, _)| *status == 200)
        .count();
    assert_eq!((refusals, served), (4, 1), "{answers:?}\n{}", proxy.log());
    let seen = crate::common::pages(&origin, "/stalled/");
    assert_eq!(seen.len(), 1, "{seen:?}");
    // The chain, once the disk answered: every request's decision, and for each one
    // not sent an outcome saying so.
    let chain_says = || {
        let all = records(disk.path());
        all.iter()
            .filter(|r| {
                r["type"] == "outcome"
                    && r["ended"]
                        .as_str()
                        .is_some_and(|e| e.starts_with("not-sent"))
            })
            .count()
            == 4
    };
    assert!(
        eventually(Duration::from_secs(10), chain_says).await,
        "{:?}",
        records(disk.path())
    );
    let stalled = decisions(disk.path())
        .iter()
        .filter(|d| d["url"].as_str().is_some_and(|u| u.contains("/stalled/")))
        .count();
    assert_eq!(stalled, 5);
    drop(proxy);
    let (ok, said) = evidence_cli(&["verify", disk.path().to_str().expect("path")]);
    assert!(ok, "{said}");
}
