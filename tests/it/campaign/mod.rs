//! What the fault campaign (`fleet_campaign.rs`) is made of: the fleet the nemesis holds
//! and the faults it injects ([`nemesis`]), and the crawl, the owner sampler and the
//! report over both ([`record`]).

pub(crate) mod nemesis;
pub(crate) mod record;

/// A small deterministic random source (xorshift): a seed replays a campaign.
pub(crate) struct Dice(pub(crate) u64);

impl Dice {
    /// A number below `n`.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }

    /// A duration between `low` and `high` ms.
    pub(crate) fn millis(&mut self, low: u64, high: u64) -> std::time::Duration {
        std::time::Duration::from_millis(low + self.below(high - low))
    }
}
