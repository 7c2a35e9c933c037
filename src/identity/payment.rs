//! Pay-per-crawl budgets (Cloudflare's pay per crawl, on Web Bot Auth): an identity with
//! a `payment` offers to pay up to `max_price` per request, in a signed
//! `crawler-max-price` header, while its day's budget lasts.
//!
//! Amounts are exact: millionths of the currency's unit in integers, so `crawler-charged`
//! answers sum without rounding. The budget is never overspent, whatever runs at once:
//! each request offering to pay first reserves `max_price` from what is left of the day
//! (UTC), and its answer settles the reservation to what was charged (nothing, when the
//! origin charged nothing or the exchange failed). When what is left is less than
//! `max_price`, requests stop offering to pay and an origin's `402` reaches the crawler.
//! The budget is this instance's: in fleet mode each instance keeps its own.

use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

pub use crate::config::Price;

/// One identity's daily budget.
pub struct Budget {
    /// The most it pays for one request, as `crawler-max-price` says.
    pub max_price: Price,
    daily: u64,
    day: Mutex<Day>,
}

#[derive(Default)]
struct Day {
    /// Days since the epoch (UTC) this tally is for.
    number: u64,
    /// Charged so far today.
    spent: u64,
    /// Reserved by requests still waiting for their answer.
    reserved: u64,
}

/// `max_price` held from the day's budget for one request, until its answer settles it.
pub struct Reservation {
    budget: Arc<Budget>,
    day: u64,
    amount: u64,
}

impl Budget {
    /// A budget of `daily` a day, paying at most `max_price` a request (same currency).
    pub fn new(max_price: Price, daily: Price) -> Budget {
        Budget {
            daily: daily.micros,
            max_price,
            day: Mutex::default(),
        }
    }

    fn today() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() / 86_400)
    }

    fn tally(&self) -> std::sync::MutexGuard<'_, Day> {
        let mut day = self.day.lock().unwrap_or_else(|e| e.into_inner());
        let today = Budget::today();
        if day.number != today {
            *day = Day {
                number: today,
                ..Day::default()
            };
        }
        day
    }

    /// Holds `max_price` for one request, when today's budget still covers it.
    pub fn reserve(self: &Arc<Self>) -> Option<Reservation> {
        let mut day = self.tally();
        let left = self.daily.saturating_sub(day.spent + day.reserved);
        if left < self.max_price.micros {
            return None;
        }
        day.reserved += self.max_price.micros;
        Some(Reservation {
            budget: self.clone(),
            day: day.number,
            amount: self.max_price.micros,
        })
    }

    /// Charged today, in millionths.
    pub fn spent_today(&self) -> u64 {
        self.tally().spent
    }
}

impl Reservation {
    /// The answer came: `charged` (a `crawler-charged` in the budget's currency, at most
    /// the amount reserved) is spent, the rest of the reservation returns to the day.
    /// What is counted as spent is returned.
    pub fn settle(mut self, charged: Option<&Price>) -> u64 {
        let spent = charged
            .filter(|c| c.currency == self.budget.max_price.currency)
            .map_or(0, |c| c.micros);
        let mut day = self.budget.tally();
        if day.number == self.day {
            day.reserved = day.reserved.saturating_sub(self.amount);
        }
        // An origin charging more than offered is counted as charged: the budget is
        // what was paid, and the overcharge is the origin's to explain.
        day.spent += spent;
        self.amount = 0;
        spent
    }
}

impl Drop for Reservation {
    /// An exchange that ended with no answer: nothing was charged.
    fn drop(&mut self) {
        if self.amount > 0 {
            let mut day = self.budget.tally();
            if day.number == self.day {
                day.reserved = day.reserved.saturating_sub(self.amount);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn price(text: &str) -> Price {
        Price::parse(text).expect(text)
    }

    #[test]
    fn a_budget_is_never_overspent_and_settles_to_what_was_charged() {
        let budget = Arc::new(Budget::new(price("USD 0.01"), price("USD 0.03")));
        let held: Vec<_> = (0..3).filter_map(|_| budget.reserve()).collect();
        assert_eq!(held.len(), 3);
        assert!(
            budget.reserve().is_none(),
            "all of today's budget is reserved"
        );
        let mut held = held.into_iter();
        let charged = price("USD 0.005");
        assert_eq!(held.next().map(|r| r.settle(Some(&charged))), Some(5_000));
        drop(held.next()); // no answer: nothing charged
                           // 0.005 spent, 0.01 still reserved: 0.015 left, one more request.
        assert!(budget.reserve().is_some());
        assert_eq!(budget.spent_today(), 5_000);
    }
}
