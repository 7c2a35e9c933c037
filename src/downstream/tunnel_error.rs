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

/// Why it failed: a [`TunnelErrorKind`], in words, and the error behind it.
pub type TunnelError = crate::error::Failure<TunnelErrorKind>;
