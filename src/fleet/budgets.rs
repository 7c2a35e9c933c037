//! Pay-per-crawl budgets counted by the whole fleet: the fleet backend (Redis) as the
//! [`SharedTally`] every instance's budgets reserve from and settle to, so a fleet of
//! any size spends at most each budget's day.
//!
//! A budget's day is two keys in one hash slot (`rg:{budget:NAME}:DAY` and its `:held`
//! set), so they live together on one Redis Cluster shard. A reservation is one script
//! call (`scripts/budget_reserve.lua`) before a paying request is sent, its settlement
//! another (`budget_settle.lua`), run in the background once the answer came. Each
//! reservation carries an expiry, the longest an exchange can be held: one held by an
//! instance that died returns to the day then. While Redis cannot answer, nothing is
//! reserved, so no request offers to pay (the origin's `402` reaches the crawler): a
//! budget is never spent on a count nobody can check.

use std::sync::Arc;
use std::time::Duration;

use crate::fleet::backend::{ms, Fleet};
use crate::fleet::scripts::script;
use crate::identity::payment::SharedTally;

/// How long a day's tally outlives the day's last use: past any midnight skew between
/// instances.
const KEEP: Duration = Duration::from_secs(2 * 86_400);

/// The fleet backend as the tally of budgets' days.
pub struct FleetTally {
    /// The backend.
    fleet: Arc<Fleet>,
    /// How long a reservation is held at most: the longest an exchange can run.
    hold: Duration,
}

impl FleetTally {
    /// Budgets counted in `fleet`'s backend, reservations lapsing after `hold`.
    pub fn new(fleet: Arc<Fleet>, hold: Duration) -> FleetTally {
        FleetTally { fleet, hold }
    }

    /// The Redis keys of `budget`'s tally for `day`: what was spent, and what is held for requests
    /// awaiting their answer.
    fn keys(budget: &str, day: u64) -> (String, String) {
        let tally = format!("rg:{{budget:{budget}}}:{day}");
        let held = format!("{tally}:held");
        (tally, held)
    }
}

#[async_trait::async_trait]
impl SharedTally for FleetTally {
    fn ticket(&self) -> String {
        self.fleet.ticket()
    }

    async fn reserve(
        &self,
        budget: &str,
        day: u64,
        ticket: &str,
        amount: u64,
        daily: u64,
    ) -> Option<bool> {
        let (tally, held) = FleetTally::keys(budget, day);
        let answer: i64 = self
            .fleet
            .run(
                "budget_reserve",
                script("budget_reserve")
                    .key(&tally)
                    .key(&held)
                    .arg(ticket)
                    .arg(amount)
                    .arg(daily)
                    .arg(ms(self.hold).max(1))
                    .arg(ms(KEEP)),
            )
            .await
            .ok()?;
        Some(answer == 1)
    }

    fn settle(&self, budget: &str, day: u64, ticket: String, held: u64, charged: u64) {
        let (tally, held_set) = FleetTally::keys(budget, day);
        let (fleet, budget) = (self.fleet.clone(), budget.to_string());
        self.fleet.spawn(async move {
            let settled: Result<i64, _> = fleet
                .run(
                    "budget_settle",
                    script("budget_settle")
                        .key(&tally)
                        .key(&held_set)
                        .arg(ticket)
                        .arg(held)
                        .arg(charged)
                        .arg(ms(KEEP)),
                )
                .await;
            if settled.is_err() {
                // Held until it lapses: the day is underspent, never overspent. The
                // charge is still in the metrics and the access log.
                log::warn!(
                    "pay per crawl: budget {budget}: the fleet backend did not settle a reservation; it returns to the day when it lapses"
                );
            }
        });
    }

    async fn read(&self, budget: &str, day: u64) -> Option<(u64, u64)> {
        let (tally, _) = FleetTally::keys(budget, day);
        let (spent, reserved): (i64, i64) = self
            .fleet
            .run("budget_read", &mut script("budget_read").key(&tally))
            .await
            .ok()?;
        // Negative only if someone wrote to the keys by hand: read as nothing.
        let amount = |v: i64| u64::try_from(v).unwrap_or(0);
        Some((amount(spent), amount(reserved)))
    }
}
