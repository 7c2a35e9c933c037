//! Pay per crawl on the way back: what an origin's answer says about payment, for a
//! request signed as an identity. A `crawler-charged` settles the request's reservation:
//! the budget counts what was charged, at most the price offered; a charge robotsgate
//! cannot read, or in a currency it did not offer, counts as the offer (fail closed),
//! and every charge beyond the offer is logged and counted as an overcharge, by origin.
//! A `402` is relayed to the crawler and counted, with the price the origin asks
//! (`crawler-price`) in the log; a `crawler-error` is counted by code.

use pingora::http::ResponseHeader;

use crate::identity::payment::{Charge, Overcharge, Reservation};
use crate::identity::Identity;
use crate::policy::target::Origin;
use crate::telemetry::{metrics, overcharges};

/// Reads the payment headers of `response` (status `status`) from `origin` to a request
/// of `identity` that held `reservation` (if it offered to pay). Returns what to log:
/// the charge counted or the price asked.
pub(super) fn settle(
    origin: &Origin,
    identity: &Identity,
    reservation: Option<Reservation>,
    status: u16,
    response: &ResponseHeader,
) -> Option<String> {
    let header = |name: &str| response.headers.get(name).map(|v| v.to_str().ok());
    if let Some(code) = header("crawler-error").flatten() {
        metrics::record_crawler_error(&identity.name, code);
    }
    let charge = match header("crawler-charged") {
        None => Charge::Nothing,
        Some(text) => Charge::of(Some(text.unwrap_or(""))),
    };
    let counted = match reservation {
        Some(reservation) => {
            let settled = reservation.settle(&charge);
            if settled.spent.micros > 0 {
                metrics::record_charge(
                    &identity.name,
                    &settled.spent.currency,
                    settled.spent.units(),
                );
            }
            if let Some(over) = settled.over {
                overcharged(origin, identity, over, &charge);
            }
            (settled.spent.micros > 0).then(|| format!("charged {}", settled.spent))
        }
        None if charge != Charge::Nothing => {
            overcharged(origin, identity, Overcharge::Unoffered, &charge);
            None
        }
        None => None,
    };
    if status == 402 {
        metrics::record_payment_required(&identity.name);
        let asked = header("crawler-price").flatten().unwrap_or_default();
        log::info!(
            "payment required: identity={} crawler_price={asked:?}",
            identity.name
        );
        return Some(format!("payment-required {asked}"));
    }
    counted
}

/// Logs and counts an origin's charge beyond the offer.
fn overcharged(origin: &Origin, identity: &Identity, over: Overcharge, charge: &Charge) {
    let origin = origin.to_string();
    let said = match charge {
        Charge::Price(price) => price.to_string(),
        _ => "unreadable".to_string(),
    };
    log::warn!(
        "overcharge: {origin} charged {said} to identity {} ({}); the budget counted at most the offer",
        identity.name,
        over.label()
    );
    overcharges::record(&origin, &identity.name, over.label());
}
