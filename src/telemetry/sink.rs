//! Where log lines go: stderr, written by a thread of its own once the server runs.
//!
//! The access log is a line per request. Written on the request path, each line is a
//! `write(2)` — to the journal's socket under systemd — paid by the request (measured:
//! about 4% of a proxied request's CPU), and a slow reader of stderr stalls the proxy.
//! So once [`start_writer`] has run, lines are appended to a shared buffer and a writer
//! thread sends the buffer every [`FLUSH_EVERY`] (sooner when it passes
//! [`WAKE_AT_BYTES`]): one `write(2)` for hundreds of lines, none on the request path.
//!
//! Order is kept: lines leave in the order they were appended, and every write to stderr
//! (the writer's batches, [`flush`], direct lines) holds stderr's lock, taken while the
//! buffer's lock is still held. Memory is bounded: a line that would grow the buffer past
//! [`MAX_PENDING_BYTES`] waits for the writer (the same back-pressure a blocking stderr
//! gives), so nothing is dropped. Before the writer starts — configuration errors, and
//! everything before a daemon's fork, which a thread would not survive — lines are written
//! directly. [`flush`] runs before the process exits.

use std::io::Write;
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

/// How long a line may wait in the buffer.
const FLUSH_EVERY: Duration = Duration::from_millis(20);
/// A buffer this full wakes the writer early.
const WAKE_AT_BYTES: usize = 64 * 1024;
/// A buffer this full makes new lines wait for the writer.
const MAX_PENDING_BYTES: usize = 4 * 1024 * 1024;

/// Lines not yet written, and whether a writer thread empties them.
struct Pending {
    /// Complete lines not yet written.
    lines: Vec<u8>,
    /// A writer thread is running.
    writer: bool,
}

/// The process's one sink.
struct Sink {
    /// The lines and the writer's state.
    pending: Mutex<Pending>,
    /// Wakes the writer (a full buffer, or a flush) and the lines waiting for room.
    changed: Condvar,
}

/// The process's one sink.
fn sink() -> &'static Sink {
    static SINK: OnceLock<Sink> = OnceLock::new();
    SINK.get_or_init(|| Sink {
        pending: Mutex::new(Pending {
            lines: Vec::new(),
            writer: false,
        }),
        changed: Condvar::new(),
    })
}

/// The pending lines, usable after a panic elsewhere.
fn lock() -> MutexGuard<'static, Pending> {
    // A panic while holding the lock leaves complete lines behind: keep using them.
    sink()
        .pending
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Appends `line` (complete, with its newline): buffered once the writer runs, written
/// directly before.
pub fn write_line(line: &[u8]) {
    let mut pending = lock();
    if !pending.writer {
        let mut stderr = std::io::stderr().lock();
        drop(pending);
        let _ = stderr.write_all(line);
        return;
    }
    while pending.lines.len() + line.len() > MAX_PENDING_BYTES && !pending.lines.is_empty() {
        sink().changed.notify_all();
        pending = sink()
            .changed
            .wait(pending)
            .unwrap_or_else(|poisoned| poisoned.into_inner());
    }
    let was_below = pending.lines.len() < WAKE_AT_BYTES;
    pending.lines.extend_from_slice(line);
    if was_below && pending.lines.len() >= WAKE_AT_BYTES {
        sink().changed.notify_all();
    }
}

/// Starts the writer thread; later calls do nothing. Call it once the process is what it
/// will stay (after a daemon's fork).
pub fn start_writer() -> std::io::Result<()> {
    let mut pending = lock();
    if pending.writer {
        return Ok(());
    }
    std::thread::Builder::new()
        .name("robotsgate-log".into())
        .spawn(write_batches)?;
    pending.writer = true;
    Ok(())
}

/// Writes everything appended so far.
pub fn flush() {
    let mut pending = lock();
    let lines = std::mem::take(&mut pending.lines);
    send(lines, pending);
}

/// Writes `batch` while holding stderr, taken before `pending` is released so batches
/// leave in the order they were taken.
fn send(mut batch: Vec<u8>, pending: MutexGuard<'static, Pending>) -> Vec<u8> {
    let mut stderr = std::io::stderr().lock();
    drop(pending);
    if !batch.is_empty() {
        // Nowhere to report a failed write to stderr; the lines are gone either way.
        let _ = stderr.write_all(&batch);
        sink().changed.notify_all();
    }
    batch.clear();
    batch
}

/// The writer thread: every `FLUSH_EVERY` (or when woken), the buffer's lines, in one
/// write; its spare buffer is swapped in, so neither side allocates in the steady state.
fn write_batches() {
    let mut spare = Vec::new();
    loop {
        let mut pending = lock();
        if pending.lines.len() < WAKE_AT_BYTES {
            pending = sink()
                .changed
                .wait_timeout(pending, FLUSH_EVERY)
                .map_or_else(|poisoned| poisoned.into_inner().0, |(guard, _)| guard);
        }
        let batch = std::mem::replace(&mut pending.lines, spare);
        spare = send(batch, pending);
    }
}

/// `tracing`'s writer: each formatted event is one [`write_line`].
#[derive(Clone, Copy, Debug, Default)]
pub struct SinkWriter;

impl Write for SinkWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        write_line(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for SinkWriter {
    type Writer = SinkWriter;

    fn make_writer(&'a self) -> SinkWriter {
        SinkWriter
    }
}
