//! `robots`: fetching and caching robots.txt (see `origin::store`, `origin::fetch`),
//! and the state file that keeps the copies across restarts (`origin::state`).

use std::path::PathBuf;

use serde::Deserialize;

use super::{ConfigError, Seconds, Timeout};

#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
/// Fetching and caching robots.txt (see `origin::store`, `origin::fetch`).
pub struct RobotsConfig {
    /// Most origins whose robots.txt is kept; the least recently used is evicted.
    pub max_origins: usize,
    /// Whole robots.txt fetch, redirects included.
    pub fetch_timeout_seconds: Timeout,
    /// Freshness when the answer has no usable `Cache-Control: max-age` (SPEC §2: 24 h).
    pub ttl_seconds: Timeout,
    /// Bounds for `max-age`.
    pub min_ttl_seconds: Seconds,
    /// Upper bound for `max-age`.
    pub max_ttl_seconds: Seconds,
    /// A fresh entry this close to expiry is refreshed in the background.
    pub refresh_ahead_seconds: Seconds,
    /// First retry after a 5xx/network failure; doubles up to `retry_max_seconds`.
    pub retry_initial_seconds: Timeout,
    /// Longest wait between retries of an unreachable robots.txt.
    pub retry_max_seconds: Timeout,
    /// Continuous unreachability after which an origin with no copy is allowed (SPEC §2).
    pub unreachable_allow_after_seconds: Seconds,
    /// Redirect hops followed (SPEC §2: at least 5).
    pub max_redirects: u32,
    /// The User-Agent robots.txt is fetched with: one identity for every fetch, never a
    /// client's (the copy serves every crawler). Set it to the fleet's bot identity.
    pub user_agent: String,
    /// Where the held robots.txt copies, their fetch state and the origins' pauses are
    /// kept across restarts (see `origin::state`); unset: nothing is kept.
    pub state_file: Option<PathBuf>,
    /// The key that authenticates the state file (an HMAC-SHA256 key: at least 16
    /// octets, e.g. `head -c 32 /dev/urandom | base64`), kept apart from it: a file
    /// robotsgate did not write with this key is refused. Required with `state_file`.
    pub state_key_file: Option<PathBuf>,
    /// How often the state file is written (also at every stop and upgrade).
    pub state_save_seconds: Timeout,
}

/// robotsgate's own User-Agent (the default `robots.user_agent`).
pub const DEFAULT_USER_AGENT: &str = concat!("robotsgate/", env!("CARGO_PKG_VERSION"));

impl Default for RobotsConfig {
    fn default() -> Self {
        RobotsConfig {
            max_origins: 100_000,
            fetch_timeout_seconds: Timeout::new(10.0),
            ttl_seconds: Timeout::new(86_400.0),
            min_ttl_seconds: Seconds::new(60.0),
            max_ttl_seconds: Seconds::new(7.0 * 86_400.0),
            refresh_ahead_seconds: Seconds::new(300.0),
            retry_initial_seconds: Timeout::new(5.0),
            retry_max_seconds: Timeout::new(600.0),
            unreachable_allow_after_seconds: Seconds::new(30.0 * 86_400.0),
            max_redirects: 5,
            user_agent: DEFAULT_USER_AGENT.into(),
            state_file: None,
            state_key_file: None,
            state_save_seconds: Timeout::new(300.0),
        }
    }
}

impl RobotsConfig {
    /// Its checks: lifetimes in order, at least one origin held, SPEC §2's five hops,
    /// and a key for the state file.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let r = self;
        if r.state_file.is_some() && r.state_key_file.is_none() {
            return Err(ConfigError::invalid(
                "key `robotsgate.robots.state_key_file`: robots.state_file is set, and the state file must be authenticated: set a key file (at least 16 octets, e.g. `head -c 32 /dev/urandom | base64 > FILE`, mode 0600) kept apart from it",
            ));
        }
        if r.min_ttl_seconds > r.max_ttl_seconds {
            return Err(ConfigError::invalid(
                "key `robotsgate.robots.min_ttl_seconds`: must be between 0 and max_ttl_seconds",
            ));
        }
        if r.max_origins == 0 {
            return Err(ConfigError::invalid(
                "key `robotsgate.robots.max_origins`: must be at least 1",
            ));
        }
        if r.max_redirects < 5 {
            return Err(ConfigError::invalid(
                "key `robotsgate.robots.max_redirects`: SPEC §2 requires following at least 5 hops",
            ));
        }
        Ok(())
    }
}
