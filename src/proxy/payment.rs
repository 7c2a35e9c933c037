//! Pay per crawl on the way back: what an origin's answer says about payment, for a
//! request signed as an identity. A `crawler-charged` settles the request's reservation
//! (the budget counts exactly what was charged); a `402` is relayed to the crawler and
//! counted, with the price the origin asks (`crawler-price`) in the log; a
//! `crawler-error` is counted by code.

use pingora::http::ResponseHeader;

use crate::identity::payment::{Price, Reservation};
use crate::identity::Identity;
use crate::telemetry::metrics;

/// Reads the payment headers of `response` (status `status`) to a request of `identity`
/// that held `reservation` (if it offered to pay). Returns what to log: the charge or
/// the price asked.
pub(super) fn settle(
    identity: &Identity,
    reservation: Option<Reservation>,
    status: u16,
    response: &ResponseHeader,
) -> Option<String> {
    let header = |name: &str| {
        response
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    if let Some(code) = header("crawler-error") {
        metrics::record_crawler_error(&identity.name, &code);
    }
    let charged = header("crawler-charged").and_then(|c| Price::parse(&c));
    if let Some(price) = &charged {
        metrics::record_charge(&identity.name, &price.currency, price.units());
    }
    if let Some(reservation) = reservation {
        reservation.settle(charged.as_ref());
    }
    if status == 402 {
        metrics::record_payment_required(&identity.name);
        let asked = header("crawler-price").unwrap_or_default();
        log::info!(
            "payment required: identity={} crawler_price={asked:?}",
            identity.name
        );
        return Some(format!("payment-required {asked}"));
    }
    charged.map(|c| format!("charged {c}"))
}
