//! Pingora's stop and upgrade signals, and what robotsgate does before Pingora acts on
//! one ([`Signals`]): the fleet left, the requests still waiting answered within the
//! bound Pingora gives them ([`StopBounds`]), a stop's drain, the state file written.
//! Uses the enforcer (`crate::enforce`), the drain (`crate::downstream::drain`) and the
//! state file (`crate::origin::state`).

use std::sync::Arc;
use std::time::Duration;

use pingora::server::configuration::ServerConf;

use crate::enforce::Enforcer;

/// Pingora's stop and upgrade signals (SIGTERM, SIGINT: stop; SIGQUIT: graceful
/// upgrade). Before the shutdown starts: in fleet mode a graceful stop or upgrade leaves
/// the fleet (each owned origin handed over with its facts, SIGINT does not: it is the
/// fast stop); a graceful stop answers every request still waiting (for a turn, for an
/// owner's answer) within `graceful_shutdown_timeout_seconds` of the signal
/// (`enforce::stop`), and drains the requests in progress (`downstream::drain`) until
/// that same deadline, the leave included, after which Pingora stops at once; the
/// membership is then left within [`LEFT_WITHIN`] (so a unit's `TimeoutStopSec` must
/// exceed `graceful_shutdown_timeout_seconds` + [`LEFT_WITHIN`]);
/// an upgrade's old process serves what it has in progress for Pingora's 5 s and
/// `grace_period_seconds` after it handed its listeners over, which is after the leave,
/// and answers what still waits (for a turn, for an owner's answer) that bound after the
/// signal, so before it, as a stop does within its own (Pingora then drops what is
/// still in progress: the client's connection would close unanswered);
/// then the state file is written when there is one (before the listeners
/// are handed to the successor, which loads it). Either stays a member, `leaving`,
/// until Pingora has stopped ([`left_after_run`]): owners admit what it hands on
/// meanwhile, however late an upgrade's successor registers.
pub(super) struct Signals {
    /// The enforcer, to leave the fleet and to save the state.
    enforcer: Arc<Enforcer>,
    /// The state file, when configured.
    state: Option<Arc<crate::origin::state::StateFile>>,
    /// What a stop and an upgrade's old process give the requests in progress.
    bounds: StopBounds,
}

impl Signals {
    /// The signals' handling for `enforcer`, with the state file `state` and `bounds`.
    pub(super) fn new(
        enforcer: Arc<Enforcer>,
        state: Option<Arc<crate::origin::state::StateFile>>,
        bounds: StopBounds,
    ) -> Signals {
        Signals {
            enforcer,
            state,
            bounds,
        }
    }

    /// A graceful stop (`drain`) or upgrade: what still waits (for a turn, for an
    /// owner's answer) answered within `within` of now (`enforce::stop`); the fleet left
    /// (each owned origin handed over, or left to lapse when its exchanges outlast the
    /// deadline); a stop's requests in progress drained until `within` of now. The membership is left once Pingora stopped
    /// ([`left_after_run`]): a member until then, the requests it handed on meanwhile
    /// are still admitted by their owners.
    async fn leave(&self, drain: bool, within: Duration) {
        if drain {
            crate::downstream::drain::begin();
        }
        // One deadline from the signal for all of it: a slow exchange that holds the
        // leave back takes its time from the drain, never adds to it (the unit's
        // `TimeoutStopSec` counts from the signal too).
        let by = tokio::time::Instant::now() + within;
        self.enforcer.stopping(by);
        self.enforcer.leave_fleet(by).await;
        if drain {
            // Pingora drops what is still in progress when it stops: the requests in
            // progress end first (those handed to other owners too).
            let left = crate::downstream::drain::drain_until(by).await;
            if left > 0 {
                log::warn!("stop: {left} requests still in progress are cut");
            }
        }
    }
}

/// Once Pingora's run ended (its runtimes stopped, nothing accepted still in progress:
/// a stop's drain ended, an upgrade's old process served its grace), a member that was
/// leaving leaves the membership: until then the requests it handed on were admitted
/// by their owners, also while an upgrade's successor was not registered yet. A fast
/// stop does not leave (its record lapses).
pub(super) fn left_after_run(enforcer: &Enforcer) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    match runtime {
        Ok(runtime) => runtime.block_on(async {
            let leaving = tokio::time::timeout(LEFT_WITHIN, enforcer.left_fleet());
            if leaving.await.is_err() {
                log::warn!("fleet: the membership was not left in time; its record lapses");
            }
        }),
        Err(e) => log::warn!("fleet: cannot leave the membership ({e}); its record lapses"),
    }
}

/// The longest the process waits, once Pingora's run ended, for Redis to mark its
/// record `left`.
pub const LEFT_WITHIN: Duration = Duration::from_secs(5);

/// What a graceful stop, and an upgrade's old process, give the requests in progress.
pub(super) struct StopBounds {
    /// The longest a graceful stop waits for the requests in progress
    /// (`graceful_shutdown_timeout_seconds`).
    drain_within: Duration,
    /// How long an upgrade's old process serves once it handed its listeners over:
    /// [`PINGORA_UPGRADE_CLOSE`] and `grace_period_seconds`.
    upgrade_within: Duration,
}

impl StopBounds {
    /// The bounds Pingora's settings `conf` set (its defaults where unset).
    pub(super) fn of(conf: &ServerConf) -> StopBounds {
        let grace = Duration::from_secs(conf.grace_period_seconds.unwrap_or(300));
        StopBounds {
            drain_within: Duration::from_secs(conf.graceful_shutdown_timeout_seconds.unwrap_or(5)),
            upgrade_within: PINGORA_UPGRADE_CLOSE + grace,
        }
    }
}

/// How long Pingora's old process waits after handing its listeners to the new one
/// before its grace period starts (`CLOSE_TIMEOUT` in `pingora_core::server`, not
/// exported).
const PINGORA_UPGRADE_CLOSE: Duration = Duration::from_secs(5);

#[async_trait::async_trait]
impl pingora::server::ShutdownSignalWatch for Signals {
    async fn recv(&self) -> pingora::server::ShutdownSignal {
        use pingora::server::ShutdownSignal;
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut quit), Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::quit()),
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            log::error!("cannot watch the stop signals; stopping");
            return ShutdownSignal::FastShutdown;
        };
        let (signal, why) = tokio::select! {
            _ = quit.recv() => (ShutdownSignal::GracefulUpgrade, "upgrade"),
            _ = term.recv() => (ShutdownSignal::GracefulTerminate, "stop"),
            _ = int.recv() => (ShutdownSignal::FastShutdown, "stop"),
        };
        match signal {
            ShutdownSignal::GracefulTerminate => self.leave(true, self.bounds.drain_within).await,
            // Set at the signal, before the leave hands the queued requests on: their
            // waits for the next owner's answer are bounded by it.
            ShutdownSignal::GracefulUpgrade => self.leave(false, self.bounds.upgrade_within).await,
            ShutdownSignal::FastShutdown => {}
        }
        if let Some(state) = &self.state {
            self.enforcer.save_state(state, why);
        }
        match signal {
            // Drained already: Pingora's fixed `grace_period_seconds` (kept for an
            // upgrade's old process, which cannot drain before it hands its listeners
            // over) would only delay the exit.
            ShutdownSignal::GracefulTerminate => ShutdownSignal::FastShutdown,
            signal => signal,
        }
    }
}
