//! Parsed robots.txt files, shared by every origin that serves the same octets.
//!
//! Many origins serve byte-identical robots.txt files: every subdomain of a hosting
//! platform, the defaults of a CMS or a CDN, `User-agent: *` with an empty `Disallow`.
//! Held per origin, each copy costs its parse (most of what an origin costs: see
//! `bench/origins_mem.py`); held once, a thousand such origins cost one. So a fetched
//! body is looked up by its hash among the files currently held, and a live file with
//! the same octets is shared instead of parsing again.
//!
//! The table maps a 64-bit hash to a weak reference: it never keeps a file alive, and a
//! file goes when its last origin does. Dead references are swept whenever the table has
//! doubled since the last sweep, so it stays within twice the files held (16 octets
//! each). A hash collision (or a crafted body) costs nothing but the sharing: octets are
//! compared before a file is shared, and a colliding file simply takes the slot.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use bytes::Bytes;

use crate::robots::RobotsTxt;

/// A robots.txt as the origin sent it and as it was parsed.
#[derive(Debug)]
pub struct RobotsFile {
    /// The octets the origin sent (for serving `/robots.txt`), exactly as long as they are.
    pub body: Box<[u8]>,
    /// The parsed file.
    pub robots: RobotsTxt,
    /// The SHA-256 of `body`: what the evidence names the file by.
    pub sha256: [u8; 32],
    /// The same in hex, as records write it (made once, not per decision).
    pub sha256_hex: Box<str>,
}

/// The files held, by the hash of their octets.
#[derive(Default)]
struct Table {
    /// Each file by the hash of its octets; an entry dies with its last holder.
    files: HashMap<u64, Weak<RobotsFile>>,
    /// Entries after the last sweep of dead references.
    swept_at: usize,
}

/// The process's one table.
fn table() -> &'static Mutex<Table> {
    static TABLE: OnceLock<Mutex<Table>> = OnceLock::new();
    TABLE.get_or_init(Mutex::default)
}

/// The table, usable after a panic elsewhere.
fn lock() -> std::sync::MutexGuard<'static, Table> {
    table().lock().unwrap_or_else(|e| e.into_inner())
}

/// The parsed file for `body`: one already held with the same octets, or a new parse.
pub fn parse(body: Bytes) -> Arc<RobotsFile> {
    let key = {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        body.hash(&mut hasher);
        hasher.finish()
    };
    let held = lock().files.get(&key).and_then(Weak::upgrade);
    if let Some(file) = held.filter(|f| *f.body == *body) {
        return file;
    }
    // Parsed outside the lock: a large file takes milliseconds.
    let mut sha256 = [0u8; 32];
    sha256.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, &body).as_ref());
    let file = Arc::new(RobotsFile {
        robots: RobotsTxt::parse(&body),
        body: body.to_vec().into_boxed_slice(),
        sha256,
        sha256_hex: crate::evidence::record::hex(&sha256).into(),
    });
    let mut table = lock();
    table.files.insert(key, Arc::downgrade(&file));
    if table.files.len() >= 2 * table.swept_at.max(1024) {
        table.files.retain(|_, file| file.strong_count() > 0);
        table.swept_at = table.files.len();
    }
    file
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identical_octets_share_one_file_and_it_goes_with_its_last_holder() {
        let body = Bytes::from_static(b"User-agent: *\nDisallow: /files-test\n");
        let a = parse(body.clone());
        let b = parse(Bytes::copy_from_slice(&body));
        assert!(Arc::ptr_eq(&a, &b));
        let other = parse(Bytes::from_static(b"User-agent: *\nDisallow: /other\n"));
        assert!(!Arc::ptr_eq(&a, &other));
        let weak = Arc::downgrade(&a);
        drop((a, b));
        assert!(weak.upgrade().is_none(), "the table holds no file alive");
        assert!(!parse(body).robots.check(&["x"], "/files-test").allowed);
    }
}
