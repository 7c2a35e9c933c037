//! The fleet backend's metrics (fleet mode only: they appear when the backend starts).

use std::sync::LazyLock;

use super::DownCause;
use prometheus::{
    register_histogram_vec, register_int_counter, register_int_counter_vec, register_int_gauge,
    HistogramVec, IntCounter, IntCounterVec, IntGauge,
};

/// 1 while the fleet backend (Redis) answers, 0 while it does not (fleet mode only).
pub static FLEET_BACKEND_UP: LazyLock<IntGauge> = LazyLock::new(|| {
    register_int_gauge!(
        "robotsgate_fleet_backend_up",
        "1 while the fleet backend (Redis) answers, 0 while it is down or slow (fleet mode)."
    )
    .expect("metric registers once")
});

/// `robotsgate_fleet_backend_unavailable`: 1 on the cause that keeps the fleet backend down.
static FLEET_BACKEND_UNAVAILABLE: LazyLock<prometheus::IntGaugeVec> = LazyLock::new(|| {
    prometheus::register_int_gauge_vec!(
        "robotsgate_fleet_backend_unavailable",
        "1 on the cause that keeps the fleet backend down (connecting, unreachable, timeout, out_of_memory, eviction_policy, read_only, error), 0 on the others and while it is up (fleet mode).",
        &["cause"]
    )
    .expect("metric registers once")
});

/// Sets `robotsgate_fleet_backend_unavailable`: 1 on `cause` (none while up), 0 on the
/// others.
pub fn set_fleet_backend_unavailable(cause: Option<DownCause>) {
    for each in DownCause::ALL {
        FLEET_BACKEND_UNAVAILABLE
            .with_label_values(&[each.label()])
            .set(i64::from(Some(*each) == cause));
    }
}

/// Live members of the fleet, as the last renewal of this instance's lease saw them.
pub static FLEET_MEMBERS: LazyLock<IntGauge> = LazyLock::new(|| {
    register_int_gauge!(
        "robotsgate_fleet_members",
        "Live members of the fleet at this instance's last lease renewal (fleet mode)."
    )
    .expect("metric registers once")
});

/// Pacing keys (origins, or addresses) this instance owns.
pub static FLEET_OWNED: LazyLock<IntGauge> = LazyLock::new(|| {
    register_int_gauge!(
        "robotsgate_fleet_owned_keys",
        "Pacing keys (origins, or addresses with pacing.key: address) this instance owns and paces (fleet mode)."
    )
    .expect("metric registers once")
});

/// 1 while this instance's lease is valid by its own clock.
pub static FLEET_LEASE_VALID: LazyLock<IntGauge> = LazyLock::new(|| {
    register_int_gauge!(
        "robotsgate_fleet_lease_valid",
        "1 while this instance's fleet lease is valid by its own clock (it may pace what it owns), 0 otherwise."
    )
    .expect("metric registers once")
});

/// `robotsgate_fleet_command_duration_seconds`: round-trip time of fleet backend commands.
static FLEET_COMMAND_DURATION: LazyLock<HistogramVec> = LazyLock::new(|| {
    register_histogram_vec!(
        "robotsgate_fleet_command_duration_seconds",
        "Round-trip time of fleet backend commands (member_renew, own_claim, robots_read, ...).",
        &["command"],
        vec![0.0002, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0]
    )
    .expect("metric registers once")
});

/// Times one fleet backend command.
pub fn observe_fleet_command(command: &str, seconds: f64) {
    FLEET_COMMAND_DURATION
        .with_label_values(&[command])
        .observe(seconds);
}

/// `robotsgate_fleet_ownership_changes_total`: pacing keys this instance took or lost, by how.
static FLEET_OWNERSHIP: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "robotsgate_fleet_ownership_changes_total",
        "Pacing keys this instance took or lost, by how: claimed (nobody held it), handed (its owner released it, leaving, idle or following its traffic, and this one took it), taken_over (its owner vanished; taken once its exchanges must be over), released (handed over by this one as it left), idle (released by this one, nobody having asked for it for fleet.release_idle_seconds), followed (handed by this one to the member its requests came from, fleet.follow_traffic_seconds), lost (another member holds it now).",
        &["how"]
    )
    .expect("metric registers once")
});

/// The ways a key changes hands, as `robotsgate_fleet_ownership_changes_total` labels.
pub const OWNERSHIP_CHANGES: [&str; 7] = [
    "claimed",
    "handed",
    "taken_over",
    "released",
    "idle",
    "followed",
    "lost",
];

/// Counts one change of a key's ownership (`how`: one of [`OWNERSHIP_CHANGES`]).
pub fn record_ownership(how: &'static str) {
    FLEET_OWNERSHIP.with_label_values(&[how]).inc();
}

/// `robotsgate_fleet_peer_new_origins_refused_total`: requests handed over for an
/// origin new to this owner, refused because their member was past
/// `fleet.peer_max_new_origins_per_second`.
static PEER_NEW_ORIGINS_REFUSED: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "robotsgate_fleet_peer_new_origins_refused_total",
        "Requests another member handed over for an origin new to this owner, refused (503) because that member was past fleet.peer_max_new_origins_per_second (fleet mode)."
    )
    .expect("metric registers once")
});

/// Counts a request refused by `fleet.peer_max_new_origins_per_second`.
pub fn record_peer_new_origin_refused() {
    PEER_NEW_ORIGINS_REFUSED.inc();
}

/// `robotsgate_fleet_impostors_total`: connections to an owner's peer address that
/// another certificate answered.
static FLEET_IMPOSTORS: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "robotsgate_fleet_impostors_total",
        "Connections this instance opened to an owner's peer address that a certificate from the fleet CA naming another member answered (a member that left, or a fleet key used between the two): closed before anything was sent on them, the owner looked up again."
    )
    .expect("metric registers once")
});

/// Counts one connection to an owner answered by another member's certificate.
pub fn record_impostor() {
    FLEET_IMPOSTORS.inc();
}

/// `robotsgate_fleet_redis_clock_steps_total`: forward steps of Redis' clock seen.
static FLEET_CLOCK_STEPS: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "robotsgate_fleet_redis_clock_steps_total",
        "Forward steps of Redis' clock this instance saw between two renewals (Redis' TIME advanced more than this instance's clock allows): each extended Redis' fence, so that no origin is taken over before its owner's exchanges must be over."
    )
    .expect("metric registers once")
});

/// Counts one forward step of Redis' clock.
pub fn record_redis_clock_step() {
    FLEET_CLOCK_STEPS.inc();
}

/// Registers the fleet metrics whose labels are known, at zero (see [`super::init`]):
/// called when the fleet backend starts.
pub fn init_fleet() {
    LazyLock::force(&FLEET_MEMBERS);
    LazyLock::force(&FLEET_IMPOSTORS);
    LazyLock::force(&PEER_NEW_ORIGINS_REFUSED);
    LazyLock::force(&FLEET_CLOCK_STEPS);
    LazyLock::force(&FLEET_OWNED);
    LazyLock::force(&FLEET_LEASE_VALID);
    for how in OWNERSHIP_CHANGES {
        FLEET_OWNERSHIP.with_label_values(&[how]);
    }
}
