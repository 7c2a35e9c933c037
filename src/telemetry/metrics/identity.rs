//! What signing and pay per crawl did: requests signed per identity, and what origins
//! charged, asked to be paid, or answered with `crawler-error`.

use std::sync::LazyLock;

use prometheus::IntCounterVec;

/// Requests signed as a Web Bot Auth identity: forwarded requests and robots.txt fetches.
static SIGNED_REQUESTS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    prometheus::register_int_counter_vec!(
        "robotsgate_signed_requests_total",
        "Requests signed as a Web Bot Auth identity (forwarded requests and robots.txt fetches), by identity.",
        &["identity"]
    )
    .expect("metric registers once")
});

/// Counts one request signed as `identity`.
pub fn record_signed(identity: &str) {
    SIGNED_REQUESTS.with_label_values(&[identity]).inc();
}

/// Pay per crawl: what origins charged (`crawler-charged`), by identity and currency,
/// in the currency's units.
static CRAWL_CHARGES: LazyLock<prometheus::CounterVec> = LazyLock::new(|| {
    prometheus::register_counter_vec!(
        "robotsgate_crawl_charges_total",
        "What origins charged (crawler-charged), by identity and currency, in the currency's units.",
        &["identity", "currency"]
    )
    .expect("metric registers once")
});

/// Pay per crawl: `402 Payment Required` answers passed to crawlers, by identity.
static PAYMENT_REQUIRED: LazyLock<IntCounterVec> = LazyLock::new(|| {
    prometheus::register_int_counter_vec!(
        "robotsgate_payment_required_total",
        "402 Payment Required answers relayed to crawlers (no budget, or the day's spent), by identity.",
        &["identity"]
    )
    .expect("metric registers once")
});

/// Pay per crawl: `crawler-error` answers, by identity and code.
static CRAWLER_ERRORS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    prometheus::register_int_counter_vec!(
        "robotsgate_crawler_errors_total",
        "crawler-error answers of pay-per-crawl origins, by identity and code (unknown codes as `other`).",
        &["identity", "code"]
    )
    .expect("metric registers once")
});

/// The `crawler-error` codes Cloudflare documents; others are counted as `other`.
const CRAWLER_ERROR_CODES: &[&str] = &[
    "MissingCrawlerPrice",
    "InvalidCrawlerExactPrice",
    "InvalidCrawlerMaxPrice",
    "ConflictingPriceHeaders",
    "InvalidSignature",
    "StrongAuthRequired",
    "InvalidCrawlerPriceValue",
    "CrawlerForbidden",
    "PaymentFailed",
    "InvalidContentPrice",
    "InternalError",
];

/// Counts a charge of `units` of `currency` to `identity`.
pub fn record_charge(identity: &str, currency: &str, units: f64) {
    CRAWL_CHARGES
        .with_label_values(&[identity, currency])
        .inc_by(units);
}

/// What origins charged since start, per (identity, currency), in the currency's units.
pub fn charges_by_identity() -> Vec<(String, String, f64)> {
    use prometheus::core::Collector;
    let mut out = Vec::new();
    for family in CRAWL_CHARGES.collect() {
        for metric in family.get_metric() {
            let label = |name: &str| {
                metric
                    .get_label()
                    .iter()
                    .find(|l| l.name() == name)
                    .map_or(String::new(), |l| l.value().to_string())
            };
            let value = metric.get_counter().value();
            out.push((label("identity"), label("currency"), value));
        }
    }
    out.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    out
}

/// Counts a `402` relayed to a crawler of `identity`.
pub fn record_payment_required(identity: &str) {
    PAYMENT_REQUIRED.with_label_values(&[identity]).inc();
}

/// Counts a `crawler-error` answer.
pub fn record_crawler_error(identity: &str, code: &str) {
    let code = CRAWLER_ERROR_CODES
        .iter()
        .find(|c| c.eq_ignore_ascii_case(code.trim()))
        .copied()
        .unwrap_or("other");
    CRAWLER_ERRORS.with_label_values(&[identity, code]).inc();
}
