//! Why a state file was not loaded, or its key not read: a [`StateError`] with a kind
//! and the error behind it.

/// Why a state file was not loaded (or its key not read): what kind of problem, in
/// words, and the error behind it.
#[derive(Debug)]
pub struct StateError {
    /// What kind of problem.
    kind: StateErrorKind,
    /// What is wrong, in words.
    message: String,
    /// The error behind it, when there is one.
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

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

impl StateError {
    /// A problem of `kind`, said in `message`.
    pub(super) fn new(kind: StateErrorKind, message: impl Into<String>) -> StateError {
        StateError {
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// The same, with the error behind it.
    pub(super) fn because(
        mut self,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> StateError {
        self.source = Some(Box::new(source));
        self
    }

    /// What kind of problem it is.
    pub fn kind(&self) -> StateErrorKind {
        self.kind
    }
}

impl std::fmt::Display for StateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for StateError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}
