//! The schedule rules: what delay is in force on a schedule and why ([`DelayRule`]),
//! when its next request may start, and how an origin's answers move it (pauses,
//! backoff, the adaptive slow-down). Pure arithmetic over [`Timing`].

use std::time::Duration;

use tokio::time::Instant;

use crate::config::AdaptiveConfig;
use crate::telemetry::metrics;

/// A response quicker than this never counts as a sign of strain, however quick the
/// origin's baseline: below it, scheduling jitter is as large as the response time.
pub(super) const SLOW_AT_LEAST: Duration = Duration::from_millis(20);

/// Which rule set a schedule's delay.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DelayRule {
    /// Nothing: no delay in force.
    #[default]
    None,
    /// `pacing.floor_seconds`.
    Floor,
    /// The robots.txt Crawl-delay.
    CrawlDelay,
    /// A `pacing.overrides` entry.
    Override,
    /// The adaptive delay (response times, latency).
    Adaptive,
    /// The backoff after 429/5xx without `Retry-After`.
    Backoff,
    /// A pause the origin asked for with `Retry-After`.
    RetryAfter,
}

impl DelayRule {
    /// The label (`crawl-delay`, `floor`, `override`, `adaptive`, `backoff`,
    /// `retry-after`, `none`).
    pub fn label(self) -> &'static str {
        match self {
            DelayRule::None => "none",
            DelayRule::Floor => "floor",
            DelayRule::CrawlDelay => "crawl-delay",
            DelayRule::Override => "override",
            DelayRule::Adaptive => "adaptive",
            DelayRule::Backoff => "backoff",
            DelayRule::RetryAfter => "retry-after",
        }
    }
}

/// When a schedule's next start may come, and why.
#[derive(Debug, Default)]
pub(super) struct Timing {
    /// When the last request (or robots.txt fetch) on this schedule ended.
    pub(super) last_end: Option<Instant>,
    /// The origin asked for a pause (429/503 + Retry-After) until then.
    pub(super) paused_until: Option<Instant>,
    /// Extra delay from 429/5xx without Retry-After; doubles, decays on success.
    pub(super) backoff: Duration,
    /// The delay from the configuration and robots.txt, and which rule set it.
    pub(super) delay: Duration,
    /// The rule that set `delay`.
    pub(super) rule: DelayRule,
    /// The adaptive delay: max(response_time_factor × last response, slow-down).
    pub(super) adaptive: Duration,
    /// The slow-down while responses are far above the baseline.
    pub(super) slow_down: Duration,
    /// The origin's recent response time (an exponential average).
    pub(super) baseline: Option<Duration>,
}

impl Timing {
    /// The delay in force and the rule that set it.
    pub(super) fn effective(&self, now: Instant) -> (Duration, DelayRule) {
        let mut best = (self.delay, self.rule);
        for candidate in [
            (self.backoff, DelayRule::Backoff),
            (self.adaptive, DelayRule::Adaptive),
        ] {
            if candidate.0 > best.0 {
                best = candidate;
            }
        }
        if self.paused_until.is_some_and(|u| u > now) {
            best.1 = DelayRule::RetryAfter;
        }
        if best.0.is_zero() && best.1 != DelayRule::RetryAfter {
            best.1 = DelayRule::None;
        }
        best
    }

    /// Would a schedule made afresh (given the origin's baseline, which outlives it:
    /// [`ScheduleList::baseline`](crate::pacing::local::ScheduleList::baseline)) behave the same from now on? Then this one can be
    /// forgotten: no pause, backoff or slow-down, and no delay still running from the
    /// last request.
    pub(super) fn forgettable(&self, now: Instant) -> bool {
        self.paused_until.is_none_or(|until| until <= now)
            && self.backoff.is_zero()
            && self.adaptive.is_zero()
            && self.slow_down.is_zero()
            && self
                .last_end
                .is_none_or(|end| end + self.effective(now).0 <= now)
    }

    /// Is anything in force that spaces requests (a delay, a backoff, a pause)?
    pub(super) fn limited(&self, now: Instant) -> bool {
        self.effective(now).1 != DelayRule::None
    }

    /// The expected wait of a newcomer with `rounds` delays' worth of requests ahead of
    /// it: until the next start, plus one delay per round.
    pub(super) fn wait_estimate(&self, now: Instant, rounds: u32) -> Duration {
        let next_slot =
            next_start(self, now).map_or(Duration::ZERO, |at| at.saturating_duration_since(now));
        next_slot + self.effective(now).0 * rounds
    }

    /// The remaining pause the origin asked for, else the backoff in force.
    pub(super) fn backed_off_for(&self, now: Instant) -> Option<Duration> {
        self.paused_until
            .map(|until| until.saturating_duration_since(now))
            .filter(|p| !p.is_zero())
            .or((!self.backoff.is_zero()).then_some(self.backoff))
    }

    /// The origin answered `status` after `took`: pauses, backoff, adaptive delay.
    pub(super) fn answered(
        &mut self,
        status: u16,
        retry_after: Option<Duration>,
        took: Duration,
        adaptive: &AdaptiveConfig,
        ceiling: Duration,
    ) {
        let error = status == 429 || status == 503 || (adaptive.enabled && status >= 500);
        match (error, retry_after) {
            (true, Some(wait)) if matches!(status, 429 | 503) => {
                let until = Instant::now() + wait.min(ceiling);
                self.paused_until = Some(self.paused_until.map_or(until, |p| p.max(until)));
            }
            (true, _) => {
                let base = self.delay.max(Duration::from_secs(1));
                self.backoff = (self.backoff * 2).max(base).min(ceiling);
                metrics::record_slow_down(metrics::SlowDown::Error);
            }
            _ => self.backoff /= 2,
        }
        if !adaptive.enabled {
            return;
        }
        let slow = self.baseline.is_some_and(|baseline| {
            took > baseline.mul_f64(adaptive.latency_factor) && took > SLOW_AT_LEAST
        });
        if slow {
            self.slow_down = (self.slow_down * 2).max(took).min(took * 2).min(ceiling);
            metrics::record_slow_down(metrics::SlowDown::Latency);
        } else {
            self.slow_down /= 2;
            if self.slow_down < Duration::from_millis(1) {
                self.slow_down = Duration::ZERO;
            }
        }
        // The baseline follows normal responses closely and slow ones slowly: a lasting
        // new level becomes normal after some fifty responses, and the slow-down relaxes.
        let weight = if slow { 0.02 } else { 0.1 };
        self.baseline = Some(match self.baseline {
            Some(b) => b.mul_f64(1.0 - weight) + took.mul_f64(weight),
            None => took,
        });
        self.adaptive = self
            .slow_down
            .max(took.mul_f64(adaptive.response_time_factor))
            .min(ceiling);
    }
}

/// When a schedule's holder may start: the previous end plus the delay in force, and
/// past any pause the origin asked for.
pub(super) fn next_start(t: &Timing, now: Instant) -> Option<Instant> {
    let effective = t.effective(now).0;
    [t.last_end.map(|e| e + effective), t.paused_until]
        .into_iter()
        .flatten()
        .max()
}
