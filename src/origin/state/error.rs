//! Why a state file was not loaded, or its key not read: a [`StateError`] with a kind
//! and the error behind it.

/// What kind of problem a [`StateError`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StateErrorKind {
    /// The key (`robots.state_key_file`) is missing, unreadable or too short.
    Key,
    /// The file is not one robotsgate may trust to be its own (its kind, owner, mode).
    Untrusted,
    /// The file cannot be opened or read.
    Io,
    /// The file is not a state file this robotsgate reads (magic, version, lengths).
    Format,
    /// Its HMAC does not verify: robotsgate did not write it with this key.
    Forged,
}

/// Why it failed: a [`StateErrorKind`], in words, and the error behind it.
pub type StateError = crate::error::Failure<StateErrorKind>;
