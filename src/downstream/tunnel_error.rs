//! Why a tunnel could not be opened: a CONNECT head that is not one, a redirected
//! connection that does not start with a usable TLS ClientHello, or a TLS handshake with
//! the client that failed or took too long. Typed, so that callers tell the kinds apart
//! (a malformed request is the client's 400; a failed handshake is counted and closed)
//! and keep the error behind it.

/// What kind of problem a [`TunnelError`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TunnelErrorKind {
    /// The CONNECT request head is malformed or not a CONNECT.
    Malformed,
    /// The octets are not a usable TLS ClientHello.
    NotTls,
    /// The TLS handshake with the client failed.
    Handshake,
    /// The client took longer than allowed.
    Timeout,
    /// Reading from the client failed, or it closed.
    Io,
}

/// Why a tunnel could not be opened.
#[derive(Debug)]
pub struct TunnelError {
    /// What kind of problem.
    kind: TunnelErrorKind,
    /// What is wrong, in words.
    message: String,
    /// The error behind it, when there is one.
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl TunnelError {
    /// A problem of `kind`, said in `message`.
    pub fn new(kind: TunnelErrorKind, message: impl Into<String>) -> TunnelError {
        TunnelError {
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// The same, with the error behind it.
    pub fn because(
        mut self,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> TunnelError {
        self.source = Some(Box::new(source));
        self
    }

    /// What kind of problem it is.
    pub fn kind(&self) -> TunnelErrorKind {
        self.kind
    }
}

impl std::fmt::Display for TunnelError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for TunnelError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}
