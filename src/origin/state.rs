//! The state file (`robots.state_file`): the held robots.txt copies, their fetch state
//! and the origins' pauses, kept across restarts and graceful upgrades so that a proxy
//! holding 100,000 origins does not refetch them all in its first minutes, nor forget
//! which origins asked it to back off.
//!
//! **Format** (version 2, little-endian): the magic `RGSTATE\0`, the version (u32), the
//! number of origins (u64), the origins, then `RGEND\0\0\0` and an HMAC-SHA256 of
//! everything before it, keyed by `robots.state_key_file` ([`StateKey`]). An origin: its URL, the policy (0 rules, 1 allow all, 2
//! disallow all) with the file's octets or the reason, the wall-clock times (ms since
//! the Unix epoch; `i64::MIN` for none) of freshness, last confirmation, unreachable
//! since and next retry, the failure count, the last outcome and cause, then its
//! schedules' pauses (group, paused until, backoff ms). Strings are a u32 length and
//! their octets. Times are wall-clock so that ages survive the restart: a copy that
//! expired while the proxy was down is refreshed, not trusted.
//!
//! **Safety.** The file is written to a temporary file in the same directory, flushed
//! and renamed over the old one: a reader sees the old file or the new one, never half
//! of one. A load parses and checks the whole file (magic, version, every length, the
//! count, the hash) before it puts anything into the store: a corrupt, truncated or
//! foreign file is a WARN naming it and an empty start — never a crash, never a partial
//! load taken as complete.
//!
//! **Trust.** The HMAC authenticates the file: only one written by a robotsgate holding
//! the same key (kept apart from the file, a systemd credential in production) is
//! loaded; a file anyone else wrote — forged, copied from another installation, or
//! damaged — is refused whole before any of it is used. Beyond that, a load trusts the
//! file no further than this: only a regular file owned by robotsgate's own user and
//! writable by no one else is read — opened without blocking and without following a symbolic link,
//! so a FIFO, a device or a link planted at the path is refused (a WARN naming it), never
//! waited on — and every lifetime in it is clamped to the configuration's limits
//! ([`Limits`]): freshness to `robots.max_ttl_seconds`, retries to
//! `robots.retry_max_seconds`, pauses and backoffs to `pacing.ceiling_seconds`, and no
//! fetch in the future. `robotsgate check-state` applies the same checks.
//!
//! **When.** Loaded at start, before the listeners accept. Saved every
//! `robots.state_save_seconds`, and when a stop or upgrade signal arrives (SIGTERM,
//! SIGINT, SIGQUIT), before the server starts shutting down or hands its listeners
//! over; a process started with `--upgrade` waits (at most five seconds) for the file
//! its predecessor writes on SIGQUIT, so an upgrade refetches nothing.
//!
//! **Cost.** One pass over the store to save (the snapshots are shared, not copied);
//! loading parses every held robots.txt once.
//!
//! **Its other files:** `error.rs` (why a state file was not loaded (`StateError`, with
//! a kind)), `wire.rs` (the state file's encoding: a writer and a bounded reader).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use tokio::time::Instant;

use crate::origin::store::{Failing, Kept, OriginStore, Policy, Snapshot};
use crate::policy::target::Origin;

/// The file's first eight octets.
const MAGIC: &[u8; 8] = b"RGSTATE\0";
/// The octets that end a complete file (before its tag).
const END: &[u8; 8] = b"RGEND\0\0\0";
/// The format's version; another version is refused whole.
const VERSION: u32 = 2;
/// The HMAC-SHA256 tag's length.
const TAG: usize = 32;
/// The shortest key accepted.
pub const MIN_KEY_BYTES: usize = 16;

/// The key that authenticates the state file: an HMAC-SHA256 key read from
/// `robots.state_key_file`, never logged.
pub struct StateKey(ring::hmac::Key);

impl StateKey {
    /// A key from its octets (at least [`MIN_KEY_BYTES`]).
    pub fn new(octets: &[u8]) -> Result<StateKey, StateError> {
        if octets.len() < MIN_KEY_BYTES {
            return Err(StateError::new(
                StateErrorKind::Key,
                format!(
                    "the key has {} octets, fewer than {MIN_KEY_BYTES}",
                    octets.len()
                ),
            ));
        }
        Ok(StateKey(ring::hmac::Key::new(
            ring::hmac::HMAC_SHA256,
            octets,
        )))
    }

    /// The key in `path` (its octets, surrounding white space removed).
    pub fn load(path: &Path) -> Result<StateKey, StateError> {
        let octets = std::fs::read(path).map_err(|e| {
            StateError::new(
                StateErrorKind::Key,
                format!("key {}: cannot read: {e}", path.display()),
            )
        })?;
        StateKey::new(octets.trim_ascii()).map_err(|e| {
            StateError::new(StateErrorKind::Key, format!("key {}: {e}", path.display()))
        })
    }

    /// The HMAC-SHA256 tag of `data`.
    fn tag(&self, data: &[u8]) -> ring::hmac::Tag {
        ring::hmac::sign(&self.0, data)
    }

    /// Whether `tag` authenticates `data` (compared in constant time).
    fn verifies(&self, data: &[u8], tag: &[u8]) -> bool {
        ring::hmac::verify(&self.0, data, tag).is_ok()
    }
}
/// No time.
const NONE: i64 = i64::MIN;

/// The state file robotsgate keeps: where it is, and the key that authenticates it.
pub struct StateFile {
    /// Where the file is.
    path: PathBuf,
    /// The key that authenticates it.
    key: StateKey,
}

impl StateFile {
    /// The state file of `robots` (`state_file` and `state_key_file`), if one is kept;
    /// an error names the key file that cannot be read.
    pub fn of(robots: &crate::config::RobotsConfig) -> Result<Option<StateFile>, StateError> {
        let Some(path) = &robots.state_file else {
            return Ok(None);
        };
        let Some(key) = &robots.state_key_file else {
            return Err(StateError::new(
                StateErrorKind::Key,
                "robots.state_file is set without robots.state_key_file",
            ));
        };
        Ok(Some(StateFile {
            path: path.clone(),
            key: StateKey::load(key)?,
        }))
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Loads it at start (see [`load_at_start`]).
    pub fn load_at_start(&self, store: &OriginStore, limits: Limits, upgrade: bool) {
        load_at_start(store, &self.path, limits, &self.key, upgrade);
    }

    /// Writes it now (see [`write()`]).
    pub fn write(&self, store: &OriginStore, why: &str) {
        write(store, &self.path, &self.key, why);
    }

    /// Keeps it written every `every`, on a thread of its own.
    pub fn keep_writing(
        self: Arc<Self>,
        store: Arc<OriginStore>,
        every: Duration,
    ) -> std::io::Result<()> {
        std::thread::Builder::new()
            .name("robotsgate-state".into())
            .spawn(move || loop {
                std::thread::sleep(every);
                self.write(&store, "periodic");
            })?;
        Ok(())
    }
}

/// Converts between the monotonic clock of this process and wall-clock milliseconds.
#[derive(Clone, Copy)]
struct Clock {
    /// This process's monotonic now.
    instant: Instant,
    /// The wall clock at that instant, in milliseconds since the Unix epoch.
    wall_ms: i64,
}

impl Clock {
    /// Both clocks, read now.
    fn now() -> Clock {
        let wall_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        Clock {
            instant: Instant::now(),
            wall_ms,
        }
    }

    /// `at` as wall-clock milliseconds ([`NONE`] for none).
    fn to_wall(self, at: Option<Instant>) -> i64 {
        match at {
            None => NONE,
            Some(at) if at >= self.instant => self
                .wall_ms
                .saturating_add(at.duration_since(self.instant).as_millis() as i64),
            Some(at) => self
                .wall_ms
                .saturating_sub(self.instant.duration_since(at).as_millis() as i64),
        }
    }

    /// `None` for no time, and for a past this process's clock cannot express.
    fn to_instant(self, wall_ms: i64) -> Option<Instant> {
        if wall_ms == NONE {
            return None;
        }
        let offset = Duration::from_millis(wall_ms.abs_diff(self.wall_ms));
        if wall_ms >= self.wall_ms {
            Some(self.instant + offset.min(crate::config::MAX_DURATION))
        } else {
            self.instant.checked_sub(offset)
        }
    }
}

/// Encodes `kept` (the store's export) as a state file sealed with `key`.
fn encode(kept: &[Kept], clock: Clock, key: &StateKey) -> Vec<u8> {
    let mut w = Writer(Vec::with_capacity(64 + kept.len() * 256));
    w.0.extend_from_slice(MAGIC);
    w.u32(VERSION);
    w.u64(kept.len() as u64);
    for k in kept {
        let s = &k.snapshot;
        w.bytes(k.origin.to_string().as_bytes());
        match &s.policy {
            Policy::Rules(file) => {
                w.u8(0);
                w.bytes(&file.body);
            }
            Policy::AllowAll { why } => {
                w.u8(1);
                w.bytes(why.as_bytes());
            }
            Policy::DisallowAll { why } => {
                w.u8(2);
                w.bytes(why.as_bytes());
            }
        }
        w.i64(clock.to_wall(Some(s.fresh_until)));
        w.i64(clock.to_wall(s.fetched_at));
        w.i64(clock.to_wall(s.unreachable_since()));
        w.i64(clock.to_wall(s.retry_at()));
        w.u32(s.failures());
        w.bytes(s.last_outcome.as_bytes());
        w.bytes(s.cause().unwrap_or("").as_bytes());
        w.u32(k.pauses.len() as u32);
        for (group, paused_until, backoff) in &k.pauses {
            w.bytes(group.as_bytes());
            w.i64(clock.to_wall(*paused_until));
            w.u64(backoff.as_millis() as u64);
        }
    }
    w.0.extend_from_slice(END);
    let tag = key.tag(&w.0);
    w.0.extend_from_slice(tag.as_ref());
    w.0
}

/// The longest lifetimes a loaded state may carry: what this configuration would ever
/// have written. Longer ones (a forged or foreign file) are clamped.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// `robots.max_ttl_seconds`: the longest a copy stays fresh.
    pub fresh: Duration,
    /// `robots.retry_max_seconds`: the longest until a failing origin's next retry.
    pub retry: Duration,
    /// `pacing.ceiling_seconds`: the longest pause or backoff.
    pub pause: Duration,
}

impl Limits {
    /// The limits of a configuration.
    pub fn of(config: &crate::config::Config) -> Limits {
        Limits {
            fresh: config.robots.max_ttl_seconds.duration(),
            retry: config.robots.retry_max_seconds.duration(),
            pause: config.pacing.ceiling_seconds.duration(),
        }
    }
}

/// Origins and clamped lifetimes in one decoded file.
struct Decoded {
    /// The origins read, each with its snapshot and pacing facts.
    kept: Vec<Kept>,
    /// Lifetimes past [`Limits`], clamped.
    clamped: usize,
}

/// `at`, at most `limit` after `now` (counted in `clamped` when it was later).
fn clamp(
    at: Option<Instant>,
    now: Instant,
    limit: Duration,
    clamped: &mut usize,
) -> Option<Instant> {
    let latest = now + limit;
    match at {
        Some(at) if at > latest => {
            *clamped += 1;
            Some(latest)
        }
        other => other,
    }
}

/// Decodes a whole state file; nothing is returned unless every part checks, the
/// HMAC with `key` first.
fn decode(
    data: &[u8],
    clock: Clock,
    limits: Limits,
    key: &StateKey,
) -> Result<Decoded, StateError> {
    let mut r = Reader { rest: data };
    let count = decode_header(&mut r, data, key)?;
    let mut clamped = 0;
    // Every origin takes more than 40 octets: the count cannot make us reserve more
    // than the file could hold.
    let mut kept = Vec::with_capacity(count.min(data.len() as u64 / 40) as usize);
    for _ in 0..count {
        kept.push(decode_origin(&mut r, clock, limits, &mut clamped)?);
    }
    if &r.array::<8>()? != END || r.rest.len() != TAG {
        return Err(StateError::new(
            StateErrorKind::Format,
            "the count does not match the contents",
        ));
    }
    Ok(Decoded { kept, clamped })
}

/// Checks the file's magic, version and HMAC (over everything before the tag): the
/// number of origins it says it holds.
fn decode_header(r: &mut Reader<'_>, data: &[u8], key: &StateKey) -> Result<u64, StateError> {
    let body_len = data
        .len()
        .checked_sub(TAG)
        .ok_or_else(|| StateError::new(StateErrorKind::Format, "truncated"))?;
    if &r.array::<8>()? != MAGIC {
        return Err(StateError::new(
            StateErrorKind::Format,
            "not a robotsgate state file",
        ));
    }
    let version = r.u32()?;
    if version != VERSION {
        return Err(StateError::new(
            StateErrorKind::Format,
            format!("format version {version}, this robotsgate reads {VERSION}"),
        ));
    }
    let (body, tag) = data.split_at(body_len);
    if !key.verifies(body, tag) {
        return Err(StateError::new(StateErrorKind::Forged,
            "its HMAC does not verify with robots.state_key_file: not written by this robotsgate, or damaged",
        ));
    }
    r.u64()
}

/// One origin's record: its policy, its snapshot's times (clamped to `limits`, each
/// clamp counted in `clamped`) and its groups' pauses.
fn decode_origin(
    r: &mut Reader<'_>,
    clock: Clock,
    limits: Limits,
    clamped: &mut usize,
) -> Result<Kept, StateError> {
    let origin = Origin::parse(&r.string()?).map_err(|e| {
        StateError::new(StateErrorKind::Format, format!("an origin: {e}")).because(e)
    })?;
    let kind = r.u8()?;
    let payload = r.bytes()?;
    let policy = match kind {
        0 => Policy::Rules(crate::origin::files::parse(Bytes::copy_from_slice(payload))),
        1 | 2 => {
            let why: Box<str> = String::from_utf8_lossy(payload).into();
            if kind == 1 {
                Policy::AllowAll { why }
            } else {
                Policy::DisallowAll { why }
            }
        }
        other => {
            return Err(StateError::new(
                StateErrorKind::Format,
                format!("unknown policy kind {other}"),
            ))
        }
    };
    let now = clock.instant;
    let fresh_until = clock.to_instant(r.i64()?).unwrap_or(now);
    let fresh_until = clamp(Some(fresh_until), now, limits.fresh, clamped).unwrap_or(now);
    let fetched_at = clamp(clock.to_instant(r.i64()?), now, Duration::ZERO, clamped);
    let unreachable_since = match r.i64()? {
        NONE => None,
        since => clamp(
            Some(clock.to_instant(since).unwrap_or(now)),
            now,
            Duration::ZERO,
            clamped,
        ),
    };
    let retry_at = clamp(clock.to_instant(r.i64()?), now, limits.retry, clamped);
    let failures = r.u32()?;
    let last_outcome = r.string()?;
    let cause = Some(r.string()?).filter(|c| !c.is_empty());
    let mut pauses = Vec::new();
    for _ in 0..r.u32()? {
        let group = r.string()?;
        let paused_until = clamp(clock.to_instant(r.i64()?), now, limits.pause, clamped);
        let mut backoff = Duration::from_millis(r.u64()?);
        if backoff > limits.pause {
            backoff = limits.pause;
            *clamped += 1;
        }
        pauses.push((group, paused_until, backoff));
    }
    Ok(Kept {
        origin,
        snapshot: Arc::new(Snapshot {
            policy,
            fresh_until,
            fetched_at,
            last_outcome: last_outcome.into_boxed_str(),
            failing: Failing::new(unreachable_since, retry_at, failures, cause),
        }),
        pauses,
    })
}

/// What a state file holds, as a load would take it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Inspected {
    /// Origins in it.
    pub origins: usize,
    /// Its size in bytes.
    pub bytes: usize,
    /// Lifetimes past the configuration's limits, clamped.
    pub clamped: usize,
}

/// Checks a state file as a load would (the file itself, then everything in it) and
/// stores nothing; `Ok(None)` when there is none.
pub fn inspect(
    path: &Path,
    limits: Limits,
    key: &StateKey,
) -> Result<Option<Inspected>, StateError> {
    Ok(read(path, limits, key)?.map(|(_, found)| found))
}

/// Decodes a state file's octets as a load would, with `limits`: the number of origins,
/// or why it would be refused (the fuzz target's entry).
pub fn inspect_bytes(data: &[u8], limits: Limits, key: &StateKey) -> Result<usize, StateError> {
    decode(data, Clock::now(), limits, key).map(|d| d.kept.len())
}

/// Seals `body` (a state file without its tag) with `key`: lets a fuzzer past the HMAC
/// to the records themselves.
pub fn seal(body: &[u8], key: &StateKey) -> Vec<u8> {
    let mut sealed = body.to_vec();
    sealed.extend_from_slice(key.tag(body).as_ref());
    sealed
}

/// The trusted file at `path`, decoded, and what it holds; `Ok(None)`: no file.
fn read(
    path: &Path,
    limits: Limits,
    key: &StateKey,
) -> Result<Option<(Vec<Kept>, Inspected)>, StateError> {
    let Some(data) = read_trusted(path)? else {
        return Ok(None);
    };
    let Decoded { kept, clamped } = decode(&data, Clock::now(), limits, key)?;
    let found = Inspected {
        origins: kept.len(),
        bytes: data.len(),
        clamped,
    };
    Ok(Some((kept, found)))
}

/// The state file's octets, when robotsgate may trust the file to be its own: a regular
/// file, owned by this process's user, writable by no one else, reached without a
/// symbolic link. Opened without blocking (a FIFO would otherwise wait for a writer).
/// `Ok(None)`: no file.
fn read_trusted(path: &Path) -> Result<Option<Vec<u8>>, StateError> {
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(path);
    let mut file = match opened {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(StateError::new(
                StateErrorKind::Untrusted,
                "a symbolic link: refused",
            ))
        }
        Err(e) => {
            return Err(StateError::new(
                StateErrorKind::Io,
                format!("cannot open: {e}"),
            ))
        }
    };
    let meta = file
        .metadata()
        .map_err(|e| StateError::new(StateErrorKind::Io, format!("cannot stat: {e}")))?;
    if !meta.file_type().is_file() {
        return Err(StateError::new(
            StateErrorKind::Untrusted,
            "not a regular file (a FIFO, socket or device): refused",
        ));
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let own = unsafe { libc::geteuid() };
    if meta.uid() != own {
        return Err(StateError::new(
            StateErrorKind::Untrusted,
            format!(
                "owned by uid {}, not robotsgate's user (uid {own}): refused",
                meta.uid()
            ),
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(StateError::new(
            StateErrorKind::Untrusted,
            format!(
                "writable by group or others (mode {:o}): refused",
                meta.mode() & 0o7777
            ),
        ));
    }
    let mut data = Vec::with_capacity(meta.len().min(1 << 30) as usize);
    file.read_to_end(&mut data)
        .map_err(|e| StateError::new(StateErrorKind::Io, format!("cannot read: {e}")))?;
    Ok(Some(data))
}

/// Writes the store's state to `path` atomically (temporary file, flush, rename).
/// Returns the number of origins and bytes written.
pub fn save(store: &OriginStore, path: &Path, key: &StateKey) -> std::io::Result<(usize, usize)> {
    use std::io::Write;
    let kept = store.export();
    let data = encode(&kept, Clock::now(), key);
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty());
    let mut file = tempfile::NamedTempFile::new_in(dir.unwrap_or(Path::new(".")))?;
    file.write_all(&data)?;
    file.as_file().sync_all()?;
    file.persist(path).map_err(|e| e.error)?;
    Ok((kept.len(), data.len()))
}

/// Loads `path` into the store (see the module's **Trust**); a missing file is an empty
/// start.
pub fn load(
    store: &OriginStore,
    path: &Path,
    limits: Limits,
    key: &StateKey,
) -> Result<Inspected, StateError> {
    let Some((kept, found)) = read(path, limits, key)? else {
        return Ok(Inspected::default());
    };
    for k in kept {
        store.import(k);
    }
    Ok(found)
}

/// Loads the state file at start, logging what it found (origins, size, load time,
/// lifetimes clamped) or why it was not loaded. `upgrade`: first wait for the file the
/// predecessor writes on SIGQUIT.
fn load_at_start(store: &OriginStore, path: &Path, limits: Limits, key: &StateKey, upgrade: bool) {
    if upgrade {
        wait_for_handover(path);
    }
    let started = std::time::Instant::now();
    match load(store, path, limits, key) {
        Ok(found) => {
            log::info!(
                "state file {}: {} origins, {} bytes, loaded in {:.0} ms",
                path.display(),
                found.origins,
                found.bytes,
                started.elapsed().as_secs_f64() * 1000.0
            );
            if found.clamped > 0 {
                log::warn!(
                    "state file {}: {} lifetimes beyond this configuration's limits (robots.max_ttl_seconds, robots.retry_max_seconds, pacing.ceiling_seconds, or in the future) clamped",
                    path.display(),
                    found.clamped
                );
            }
        }
        Err(e) => log::warn!(
            "state file {} not loaded ({e}); starting empty",
            path.display()
        ),
    }
}

/// Writes the state file now, logging the outcome (`why`: periodic, upgrade, stop).
fn write(store: &OriginStore, path: &Path, key: &StateKey, why: &str) {
    let started = std::time::Instant::now();
    match save(store, path, key) {
        Ok((origins, bytes)) => log::info!(
            "state file {} written ({why}): {origins} origins, {bytes} bytes in {:.0} ms",
            path.display(),
            started.elapsed().as_secs_f64() * 1000.0
        ),
        Err(e) => log::warn!("state file {} not written ({why}): {e}", path.display()),
    }
}

/// A process taking over by graceful upgrade: waits (at most five seconds) until the
/// state file was written in the last second — by its predecessor, on SIGQUIT.
fn wait_for_handover(path: &Path) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let fresh = || {
        std::fs::metadata(path)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|m| SystemTime::now().duration_since(m).ok())
            .is_some_and(|age| age < Duration::from_secs(1))
    };
    while !fresh() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
}

mod error;
#[cfg(test)]
mod tests;
mod wire;

pub use error::{StateError, StateErrorKind};
use wire::{Reader, Writer};
