//! Single-flight: one robots.txt fetch per origin at a time. Concurrent requests for an
//! origin with no usable snapshot wait for the one fetch in flight and re-check after it
//! instead of fetching again.

use std::sync::{Arc, Mutex};

use super::OriginEntry;

/// The single-flight locks of the entries being fetched (or waited for), by entry: a
/// lock exists only while someone holds or waits for it, so the many held origins that
/// are not being fetched carry none.
#[derive(Default)]
pub(super) struct Flights(Mutex<FlightTable>);

/// Fetch locks by entry address; an entry is present while its lock is held or waited for.
type FlightTable = std::collections::HashMap<usize, Arc<tokio::sync::Mutex<()>>>;

/// One entry's fetch, held: the lock (its guard owns it), and the entry (kept alive,
/// so its address, the table's key, names no other entry meanwhile).
pub(super) struct Flight<'a> {
    /// The table the lock is in (its entry is removed with the last holder).
    flights: &'a Flights,
    /// The entry whose fetch is held.
    entry: Arc<OriginEntry>,
    /// The lock's guard (taken on drop, before the table entry is cleaned up).
    held: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Flights {
    /// Waits for `entry`'s fetch lock.
    pub(super) async fn lock(&self, entry: &Arc<OriginEntry>) -> Flight<'_> {
        let key = Arc::as_ptr(entry) as usize;
        let lock = self.table().entry(key).or_default().clone();
        Flight {
            flights: self,
            entry: entry.clone(),
            held: Some(lock.lock_owned().await),
        }
    }

    /// The table, usable after a panic elsewhere.
    pub(super) fn table(&self) -> std::sync::MutexGuard<'_, FlightTable> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Flight<'_> {
    fn drop(&mut self) {
        let key = Arc::as_ptr(&self.entry) as usize;
        let mut table = self.flights.table();
        drop(self.held.take());
        // The table's own reference is the last: nobody holds or waits for it (a waiter
        // took its reference under the table's lock).
        if table
            .get(&key)
            .is_some_and(|lock| Arc::strong_count(lock) == 1)
        {
            table.remove(&key);
        }
    }
}
