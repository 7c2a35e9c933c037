//! What clients may hold open at once: `limits.max_connections` for everyone and
//! `limits.max_connections_per_client` for each client.
//!
//! A connection takes a slot for as long as it is open; an HTTP/2 stream takes another
//! for as long as its request is in progress, so one connection carrying a hundred
//! streams counts as a hundred and one — the work a client can have in hand is bounded
//! the same whichever protocol it speaks. A client is an IPv4 address or an IPv6 /64
//! (one host's share of addresses: counting single IPv6 addresses would let one host
//! take as many slots as it has addresses).
//!
//! Cost: a semaphore permit and one short-held mutex over a map of the clients that
//! hold slots (an entry leaves with its client's last slot).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::telemetry::metrics;

/// The slots of every client listener (all of them count against the same limits).
#[derive(Debug)]
pub struct Slots {
    /// Slots (connections and HTTP/2 streams) for all clients together.
    all: Arc<Semaphore>,
    /// Slots one client address may hold.
    per_client: usize,
    /// Slots held per client address (an address leaves the map with its last slot).
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// What a slot is held for (which gauge counts it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotKind {
    /// An open client connection (tunnels included).
    Connection,
    /// An HTTP/2 stream whose request is in progress.
    Stream,
    /// A peer-channel connection (fleet mode; slots of their own: `fleet.peer_max_*`).
    Peer,
}

/// Why no slot was free.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Full {
    /// This client holds its `limits.max_connections_per_client`.
    Client,
    /// Every one of `limits.max_connections` is held.
    All,
}

impl Full {
    /// The `reason` label of `robotsgate_downstream_refusals_total`.
    pub fn reason(self) -> metrics::RefusalReason {
        match self {
            Full::Client => metrics::RefusalReason::ClientConnectionLimit,
            Full::All => metrics::RefusalReason::ConnectionLimit,
        }
    }

    /// Why, for the client.
    pub fn why(self) -> &'static str {
        match self {
            Full::Client => {
                "too many open connections and streams from this client (limits.max_connections_per_client)"
            }
            Full::All => "too many open connections and streams (limits.max_connections)",
        }
    }
}

/// One held slot, given back when dropped.
#[derive(Debug)]
pub struct Slot {
    /// The process-wide slot, given back when this drops.
    _all: OwnedSemaphorePermit,
    /// The client address counted (none: not counted per client).
    client: Option<IpAddr>,
    /// Where the slot is given back.
    slots: Arc<Slots>,
    /// What kind of slot this is (its gauge).
    held: SlotKind,
}

/// The key a client's slots are counted under.
fn client_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6(std::net::Ipv6Addr::from(
            u128::from(v6) & !(u64::MAX as u128),
        )),
        v4 => v4,
    }
}

impl Slots {
    /// `max` slots in all, `per_client` for each client.
    pub fn new(max: usize, per_client: usize) -> Arc<Slots> {
        Arc::new(Slots {
            all: Arc::new(Semaphore::new(max)),
            per_client,
            open: Mutex::default(),
        })
    }

    /// A slot for `client` (`None`: a client with no address, counted only in all).
    pub fn take(self: &Arc<Self>, client: Option<IpAddr>, held: SlotKind) -> Result<Slot, Full> {
        if let Some(ip) = client {
            let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
            let count = open.entry(client_key(ip)).or_insert(0);
            if *count >= self.per_client {
                return Err(Full::Client);
            }
            *count += 1;
        }
        let Ok(permit) = self.all.clone().try_acquire_owned() else {
            self.give_back(client);
            return Err(Full::All);
        };
        gauge(held).inc();
        Ok(Slot {
            _all: permit,
            client,
            slots: self.clone(),
            held,
        })
    }

    /// Gives back one of `client`'s slots.
    fn give_back(&self, client: Option<IpAddr>) {
        let Some(ip) = client else { return };
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let key = client_key(ip);
        if let Some(count) = open.get_mut(&key) {
            *count -= 1;
            if *count == 0 {
                open.remove(&key);
            }
        }
    }
}

/// The gauge counting slots of kind `held`.
fn gauge(held: SlotKind) -> &'static prometheus::IntGauge {
    match held {
        SlotKind::Connection => &metrics::DOWNSTREAM_CONNECTIONS,
        SlotKind::Stream => &metrics::DOWNSTREAM_STREAMS,
        SlotKind::Peer => &metrics::PEER_CONNECTIONS,
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        gauge(self.held).dec();
        self.slots.give_back(self.client);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_and_connections_share_a_clients_slots() {
        let slots = Slots::new(3, 2);
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        let conn = slots.take(Some(a), SlotKind::Connection).expect("first");
        let stream = slots.take(Some(a), SlotKind::Stream).expect("second");
        assert_eq!(
            slots.take(Some(a), SlotKind::Stream).unwrap_err(),
            Full::Client
        );
        let other = slots.take(Some(b), SlotKind::Connection).expect("b");
        assert_eq!(
            slots.take(Some(b), SlotKind::Stream).unwrap_err(),
            Full::All
        );
        drop(stream);
        // The refused take gave b's count back: b has one slot, and one is free.
        let again = slots.take(Some(b), SlotKind::Stream).expect("b again");
        drop((conn, other, again));
        assert!(slots.open.lock().unwrap().is_empty());
    }

    #[test]
    fn an_ipv6_64_is_one_client() {
        let slots = Slots::new(10, 1);
        let one: IpAddr = "2001:db8::1".parse().unwrap();
        let same: IpAddr = "2001:db8::2".parse().unwrap();
        let _held = slots.take(Some(one), SlotKind::Connection).expect("one");
        assert_eq!(
            slots.take(Some(same), SlotKind::Connection).unwrap_err(),
            Full::Client
        );
    }
}
