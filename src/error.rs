//! The shape the crate's typed errors share: a `kind` the caller matches on, the problem
//! in words, and the error behind it (`source()`). A module names its own
//! `Failure<ItsKind>` (`StateError`, `TunnelError`); nothing here knows what the kinds
//! are. The bottom layer: it uses nothing else of the crate.

/// A problem of kind `K`: what kind, in words, and the error behind it.
#[derive(Debug)]
pub struct Failure<K> {
    /// What kind of problem.
    kind: K,
    /// What is wrong, in words.
    message: String,
    /// The error behind it, when there is one.
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl<K: Copy> Failure<K> {
    /// A problem of `kind`, said in `message`.
    pub fn new(kind: K, message: impl Into<String>) -> Failure<K> {
        Failure {
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// The same, with the error behind it.
    pub fn because(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    /// What kind of problem it is.
    pub fn kind(&self) -> K {
        self.kind
    }
}

impl<K> std::fmt::Display for Failure<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl<K: std::fmt::Debug> std::error::Error for Failure<K> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}
