//! The evidence directory's files, each made readable by the service user and its
//! group only (directories 0750, files 0640, keys 0600), and the robots.txt files
//! acted on, kept once each by the SHA-256 of their octets under `policies/`.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::record::hex;
use super::{EvidenceError, EvidenceErrorKind};

/// An I/O error on `path`, as an evidence error.
fn io(path: &Path, e: std::io::Error) -> EvidenceError {
    EvidenceError::new(EvidenceErrorKind::Io, format!("{}: {e}", path.display())).because(e)
}

/// Makes `dir` (and its parents), 0750.
pub fn directory(dir: &Path) -> Result<(), EvidenceError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o750)
        .create(dir)
        .map_err(|e| io(dir, e))
}

/// A new file at `path` for writing, 0640; an existing one is an error.
pub fn new_file(path: &Path) -> Result<File, EvidenceError> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o640)
        .open(path)
        .map_err(|e| io(path, e))
}

/// `path` opened to append (made, 0640, when missing).
pub fn append_only(path: &Path) -> Result<File, EvidenceError> {
    OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o640)
        .open(path)
        .map_err(|e| io(path, e))
}

/// The robots.txt files acted on, by SHA-256.
pub struct Policies {
    /// `policies/`.
    dir: PathBuf,
}

impl Policies {
    /// The store under `root`.
    pub fn open(root: &Path) -> Result<Policies, EvidenceError> {
        let dir = root.join("policies");
        directory(&dir)?;
        Ok(Policies { dir })
    }

    /// Keeps `octets` (once: a file already kept is not written again); their SHA-256,
    /// hex. Written whole and synced before any record names it.
    pub fn keep(&self, octets: &[u8]) -> Result<String, EvidenceError> {
        let sha = hex(ring::digest::digest(&ring::digest::SHA256, octets).as_ref());
        let path = self.dir.join(&sha);
        if path.exists() {
            return Ok(sha);
        }
        let temporary = self.dir.join(format!(".{sha}.{}", std::process::id()));
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o640)
            .open(&temporary)
            .map_err(|e| io(&temporary, e))?;
        file.write_all(octets)
            .and_then(|()| file.sync_all())
            .map_err(|e| io(&temporary, e))?;
        std::fs::rename(&temporary, &path).map_err(|e| io(&path, e))?;
        Ok(sha)
    }
}

/// The key client addresses are made pseudonyms with: `path`'s octets (32 or more), or
/// 32 random octets written there (0600) when it does not exist.
pub fn pseudonym_key(path: &Path) -> Result<Vec<u8>, EvidenceError> {
    match std::fs::read(path) {
        Ok(key) if key.len() >= 32 => return Ok(key),
        Ok(_) => {
            return Err(EvidenceError::new(
                EvidenceErrorKind::Key,
                format!(
                    "{}: a pseudonym key needs 32 octets or more",
                    path.display()
                ),
            ))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(path, e)),
    }
    let mut key = vec![0u8; 32];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut key).map_err(|_| {
        EvidenceError::new(EvidenceErrorKind::Key, "no randomness for a pseudonym key")
    })?;
    let mut file = match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(file) => file,
        // Another process sharing the directory made it meanwhile: its key is the one.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            std::thread::sleep(std::time::Duration::from_millis(50));
            return pseudonym_key(path);
        }
        Err(e) => return Err(io(path, e)),
    };
    file.write_all(&key)
        .and_then(|()| file.sync_all())
        .map_err(|e| io(path, e))?;
    Ok(key)
}

/// Makes an existing file readable by its owner and group only.
pub fn restrict(path: &Path) -> Result<(), EvidenceError> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o640)).map_err(|e| io(path, e))
}

/// Takes `file`'s exclusive `flock` if nobody holds it (kept until the file is closed).
pub fn try_lock(file: &File) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor this process owns, open for the call's length.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}
