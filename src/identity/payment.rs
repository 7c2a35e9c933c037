//! Pay-per-crawl budgets (Cloudflare's pay per crawl, on Web Bot Auth): a request whose
//! identity or agent rule has a `payment` offers to pay up to `max_price`, in a signed
//! `crawler-max-price` header, while that budget's day lasts.
//!
//! Amounts are exact: millionths of the currency's unit in integers, so `crawler-charged`
//! answers sum without rounding. The budget is never overspent, whatever runs at once:
//! each request offering to pay first reserves `max_price` from what is left of the day
//! (UTC), and its answer settles the reservation to what was charged (nothing, when the
//! origin charged nothing or the exchange failed). When what is left is less than
//! `max_price`, requests stop offering to pay and an origin's `402` reaches the crawler.
//!
//! Where the day is counted: in this process, or — in fleet mode — in a
//! [`SharedTally`] every instance reserves from and settles to, so the fleet together
//! spends at most the budget. A shared tally that cannot answer means no offer: a
//! request is never paid for from a count nobody can check.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

pub use crate::config::Price;

/// A budget's day counted where every instance of a fleet counts it (the fleet
/// backend, `enforce::budgets`).
#[async_trait::async_trait]
pub trait SharedTally: Send + Sync {
    /// A name for one reservation, unique across the fleet.
    fn ticket(&self) -> String;
    /// Holds `amount` of budget `budget`'s day `day` as `ticket` when what is left of
    /// `daily` covers it. `None`: the tally could not answer.
    async fn reserve(
        &self,
        budget: &str,
        day: u64,
        ticket: &str,
        amount: u64,
        daily: u64,
    ) -> Option<bool>;
    /// Returns `ticket`'s `held` amount to the day and counts `charged` as spent, in
    /// the background (it is called when an answer arrives, and from `Drop`).
    fn settle(&self, budget: &str, day: u64, ticket: String, held: u64, charged: u64);
    /// (spent, reserved) of the day so far. `None`: the tally could not answer.
    async fn read(&self, budget: &str, day: u64) -> Option<(u64, u64)>;
}

/// One daily budget: an identity's own, or an agent rule's.
pub struct Budget {
    /// Where it is configured: the identity's name, or `agent.rules[N]`.
    pub name: String,
    /// The most it pays for one request, as `crawler-max-price` says.
    pub max_price: Price,
    /// What may be charged in a day.
    pub daily: Price,
    /// This process's count of the day (when no tally is shared).
    day: Mutex<Day>,
    /// The fleet's count, set once at start in fleet mode.
    shared: OnceLock<Arc<dyn SharedTally>>,
}

/// A budget's day so far, for the status page.
pub struct Today {
    /// Charged so far today.
    pub spent: Price,
    /// Held by requests still waiting for their answer.
    pub reserved: Price,
}

/// One day's spend.
#[derive(Default)]
struct Day {
    /// Days since the epoch (UTC) this tally is for.
    number: u64,
    /// Charged so far today.
    spent: u64,
    /// Reserved by requests still waiting for their answer.
    reserved: u64,
}

/// `max_price` held from the day's budget for one request, until its answer settles it
/// (or, dropped unsettled, returns it whole).
pub struct Reservation {
    /// The budget the amount is held on.
    budget: Arc<Budget>,
    /// The day it counts against (days since the Unix epoch, UTC).
    day: u64,
    /// The amount held, in the currency's smallest unit.
    amount: u64,
    /// Its name in the shared tally, when the fleet shares one.
    ticket: Option<String>,
}

impl Budget {
    /// The budget called `name` of `daily` a day, paying at most `max_price` a request
    /// (same currency).
    pub fn new(name: String, max_price: Price, daily: Price) -> Budget {
        Budget {
            name,
            daily,
            max_price,
            day: Mutex::default(),
            shared: OnceLock::new(),
        }
    }

    /// Counts the day in `tally`, shared by the fleet, from now on (once, at start).
    pub fn share(&self, tally: Arc<dyn SharedTally>) {
        let _ = self.shared.set(tally);
    }

    /// Today, as days since the Unix epoch (UTC).
    fn today() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() / 86_400)
    }

    /// The day's tally, usable after a panic elsewhere.
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

    /// Holds `max_price` for one request, when today's budget still covers it (and,
    /// shared, when the fleet's tally can say so).
    pub async fn reserve(self: &Arc<Self>) -> Option<Reservation> {
        let amount = self.max_price.micros;
        if let Some(shared) = self.shared.get() {
            let day = Budget::today();
            let ticket = shared.ticket();
            let held = shared
                .reserve(&self.name, day, &ticket, amount, self.daily.micros)
                .await;
            return (held == Some(true)).then(|| Reservation {
                budget: self.clone(),
                day,
                amount,
                ticket: Some(ticket),
            });
        }
        let mut day = self.tally();
        let left = self.daily.micros.saturating_sub(day.spent + day.reserved);
        if left < amount {
            return None;
        }
        day.reserved += amount;
        Some(Reservation {
            budget: self.clone(),
            day: day.number,
            amount,
            ticket: None,
        })
    }

    /// Today so far (the fleet's, when shared; `None` when its tally cannot answer).
    pub async fn today_so_far(&self) -> Option<Today> {
        let (spent, reserved) = match self.shared.get() {
            Some(shared) => shared.read(&self.name, Budget::today()).await?,
            None => {
                let day = self.tally();
                (day.spent, day.reserved)
            }
        };
        let amount = |micros| Price {
            currency: self.daily.currency.clone(),
            micros,
        };
        Some(Today {
            spent: amount(spent),
            reserved: amount(reserved),
        })
    }
}

impl Reservation {
    /// The price it offers: its budget's `max_price`.
    pub fn offer(&self) -> &Price {
        &self.budget.max_price
    }

    /// The answer came, saying `charge`: what is counted as spent is at most the price
    /// offered, the rest of the reservation returns to the day. What cannot be read —
    /// an unreadable `crawler-charged`, one in another currency — counts as the price
    /// offered (fail closed: the budget is never under-counted). What was counted, and
    /// what the origin asked beyond the offer (its to explain), are returned.
    pub fn settle(mut self, charge: &Charge) -> Settled {
        let offered = self.budget.max_price.clone();
        let (spent, over) = match charge {
            Charge::Nothing => (0, None),
            Charge::Price(price) if price.currency != offered.currency => {
                (offered.micros, Some(Overcharge::OtherCurrency))
            }
            Charge::Price(price) if price.micros > offered.micros => (
                offered.micros,
                Some(Overcharge::AboveOffer {
                    charged: price.micros,
                }),
            ),
            Charge::Price(price) => (price.micros, None),
            Charge::Unreadable => (offered.micros, Some(Overcharge::Unreadable)),
        };
        self.give_back(spent);
        Settled {
            spent: Price {
                currency: offered.currency,
                micros: spent,
            },
            over,
        }
    }

    /// Returns the held amount to the day, counting `spent`; once.
    fn give_back(&mut self, spent: u64) {
        let held = std::mem::take(&mut self.amount);
        if let Some(ticket) = self.ticket.take() {
            if let Some(shared) = self.budget.shared.get() {
                shared.settle(&self.budget.name, self.day, ticket, held, spent);
            }
            return;
        }
        let mut day = self.budget.tally();
        if day.number == self.day {
            day.reserved = day.reserved.saturating_sub(held);
        }
        day.spent += spent;
    }
}

impl Drop for Reservation {
    /// An exchange that ended with no answer: the request was sent with its offer, and
    /// whether the origin charged cannot be read, so the offer counts as spent.
    fn drop(&mut self) {
        if self.amount > 0 {
            let offered = self.amount;
            self.give_back(offered);
        }
    }
}

/// What an origin's `crawler-charged` said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Charge {
    /// No `crawler-charged`: nothing charged.
    Nothing,
    /// A price (in any currency, as written).
    Price(Price),
    /// A `crawler-charged` robotsgate cannot read.
    Unreadable,
}

impl Charge {
    /// The charge a `crawler-charged` header value (or its absence) states.
    pub fn of(header: Option<&str>) -> Charge {
        match header {
            None => Charge::Nothing,
            Some(text) => Price::parse(text).map_or(Charge::Unreadable, Charge::Price),
        }
    }
}

/// A settled reservation: what the budget counted, and how the origin overcharged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settled {
    /// Counted as spent, in the budget's currency.
    pub spent: Price,
    /// The origin asked for more than was offered, or something unreadable.
    pub over: Option<Overcharge>,
}

/// How an origin charged beyond what robotsgate offered; the budget counted the offer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overcharge {
    /// More than `crawler-max-price` (`charged`, in millionths).
    AboveOffer {
        /// What the origin said it charged.
        charged: u64,
    },
    /// In a currency robotsgate did not offer.
    OtherCurrency,
    /// Unreadable.
    Unreadable,
    /// A charge for a request that offered nothing.
    Unoffered,
}

impl Overcharge {
    /// `above_offer`, `other_currency`, `unreadable` or `unoffered`: the metric's label.
    pub fn label(self) -> &'static str {
        match self {
            Overcharge::AboveOffer { .. } => "above_offer",
            Overcharge::OtherCurrency => "other_currency",
            Overcharge::Unreadable => "unreadable",
            Overcharge::Unoffered => "unoffered",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn price(text: &str) -> Price {
        Price::parse(text).expect(text)
    }

    #[tokio::test]
    async fn a_budget_is_never_overspent_and_settles_to_what_was_charged() {
        let budget = Arc::new(Budget::new(
            "main".into(),
            price("USD 0.01"),
            price("USD 0.03"),
        ));
        let mut held = Vec::new();
        while let Some(reservation) = budget.reserve().await {
            held.push(reservation);
        }
        assert_eq!(held.len(), 3, "all of today's budget is reserved");
        let mut held = held.into_iter();
        let charged = Charge::Price(price("USD 0.005"));
        let settled = held.next().map(|r| r.settle(&charged)).expect("held");
        assert_eq!((settled.spent.micros, settled.over), (5_000, None));
        // No charge stated: nothing spent.
        let settled = held
            .next()
            .map(|r| r.settle(&Charge::Nothing))
            .expect("held");
        assert_eq!(settled.spent.micros, 0);
        // 0.005 spent, 0.01 still reserved: 0.015 left, one more request (dropped
        // unanswered: its offer counts as spent).
        assert!(budget.reserve().await.is_some());
        let today = budget.today_so_far().await.expect("local");
        assert_eq!(
            (today.spent.micros, today.reserved.micros),
            (15_000, 10_000)
        );
    }

    #[tokio::test]
    async fn what_cannot_be_read_or_exceeds_the_offer_counts_as_the_offer() {
        let budget = Arc::new(Budget::new(
            "main".into(),
            price("USD 0.01"),
            price("USD 1.00"),
        ));
        let settle = |charge: Charge| {
            let budget = budget.clone();
            async move { budget.reserve().await.expect("budget").settle(&charge) }
        };
        let over = settle(Charge::Price(price("USD 1.50"))).await;
        assert_eq!(over.spent.micros, 10_000, "at most what was offered");
        assert_eq!(
            over.over,
            Some(Overcharge::AboveOffer { charged: 1_500_000 })
        );
        let other = settle(Charge::Price(price("XYZ 0.001"))).await;
        assert_eq!(
            (other.spent.to_string(), other.over),
            ("USD 0.01".into(), Some(Overcharge::OtherCurrency))
        );
        let unreadable = settle(Charge::of(Some("lots"))).await;
        assert_eq!(
            (unreadable.spent.micros, unreadable.over),
            (10_000, Some(Overcharge::Unreadable))
        );
        // An answer that never came: the offer is spent.
        drop(budget.reserve().await.expect("budget"));
        let today = budget.today_so_far().await.expect("local");
        assert_eq!((today.spent.micros, today.reserved.micros), (40_000, 0));
    }
}
