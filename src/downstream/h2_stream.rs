//! One HTTP/2 stream as the proxy sees it: Pingora's h2 stream session, kept from ending
//! the origin's exchange when the client resets the stream.
//!
//! The promise is kept at the origin, so once a request holds its pacing turn, nothing
//! the client does may end the origin's exchange early (see `client_stream.rs`, which
//! does this for HTTP/1.1). Pingora's h2 session aborts the whole exchange — upstream
//! stream or connection included — when the client resets its stream: the write of the
//! response head or body fails, or the wait for the client's end of the stream reports
//! it. The exchange would then be cut, and its turn held a read timeout more: two
//! resets to a slow page would freeze the origin for everyone.
//!
//! [`H2Stream`] wraps Pingora's session (as a custom session) and changes two things:
//! * **A client that left is a sink, for a while.** A failed write — the stream reset,
//!   the connection gone — marks the client gone (counted in
//!   `robotsgate_downstream_clients_left_total`); the write and later ones succeed and
//!   drop their octets, so an answer that ends soon ends the turn with the origin's own
//!   end. Past `limits.unread_timeout_seconds` from the first octet dropped, a write
//!   fails and the exchange ends on both legs (`unread.rs`).
//! * **A client that stops reading ends the exchange.** A write that waits
//!   `limits.unread_timeout_seconds` for the client's flow-control window fails the
//!   same way.
//! * **Once the exchange has started, a reset is not the end of it.** Before the request
//!   holds its turn, the wait for the client's end of the stream reports a reset (a
//!   client that left while queued gives up its place); once the proxy says the exchange
//!   has started ([`Started`], through the request's `ClientContext`), that wait stays
//!   pending and the exchange runs to its end.
//!
//! Everything else is Pingora's h2 session, unchanged. Cost: a branch per write.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use http::HeaderMap;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::protocols::http::custom::server::Session as CustomSession;
use pingora::protocols::http::custom::CustomMessageWrite;
use pingora::protocols::http::v2::server::HttpSession;
use pingora::protocols::http::HttpTask;
use pingora::protocols::l4::socket::SocketAddr;
use pingora::protocols::Digest;
use pingora::Result;

use crate::downstream::unread::{ClientStalled, Dropping};
use crate::telemetry::metrics;

/// Set once the request holds its pacing turn: from then on the origin's exchange is
/// the request's end, not the client's. Shared by the stream and the request's context.
#[derive(Debug, Default)]
pub struct Started(AtomicBool);

impl Started {
    /// The exchange with the origin has started.
    pub fn set(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// Whether the origin's exchange has started.
    fn is_set(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// One HTTP/2 stream: Pingora's session, a sink once the client has left.
pub struct H2Stream {
    /// Pingora's session for the stream.
    inner: HttpSession,
    /// Set once the request holds its turn (shared with its context).
    started: Arc<Started>,
    /// The client reset the stream or its connection failed: writes are dropped, for
    /// a while ([`Dropping`]).
    gone: bool,
    /// The client took nothing for `unread`, or was dropped for that long: every write
    /// fails, ending the exchange.
    stalled_out: bool,
    /// How long writes to a client that left are still dropped.
    dropping: Dropping,
    /// `limits.unread_timeout_seconds`: the longest one write may wait for the client.
    unread: Duration,
}

impl H2Stream {
    /// Wraps `inner`; `started` is set when its request's exchange begins; a write that
    /// waits longer than `unread` for the client's window leaves the client gone.
    pub fn new(mut inner: HttpSession, started: Arc<Started>, unread: Duration) -> H2Stream {
        let timeout = inner.get_write_timeout().map_or(unread, |t| t.min(unread));
        inner.set_write_timeout(Some(timeout));
        H2Stream {
            inner,
            started,
            gone: false,
            stalled_out: false,
            dropping: Dropping::new(unread),
            unread,
        }
    }

    /// A failed write: the client is gone (counted once), and the stream a sink.
    fn left(&mut self) {
        if !self.gone {
            self.gone = true;
            metrics::record_client_left();
        }
    }

    /// A write's outcome: a client that took nothing for `unread` (the write timed
    /// out) ends the exchange; any other failure makes the stream a sink, the write
    /// being its first octets dropped.
    fn sink<T>(&mut self, written: Result<T>, instead: T) -> Result<T> {
        match written {
            Ok(done) => Ok(done),
            Err(e) if matches!(e.etype(), pingora::ErrorType::WriteTimedout) => {
                self.left();
                self.stalled_out = true;
                Err(stalled_error())
            }
            Err(_) => {
                self.left();
                self.drop_write().map(|()| instead)
            }
        }
    }

    /// A write to a client that is gone: dropped while [`Dropping`] allows, then (and
    /// for a client that stalled, at once) the error that ends the exchange.
    fn drop_write(&mut self) -> Result<()> {
        if !self.stalled_out && self.dropping.drop_one().is_ok() {
            return Ok(());
        }
        self.stalled_out = true;
        Err(stalled_error())
    }
}

/// The error a write to a stalled client fails with.
fn stalled_error() -> pingora::BError {
    pingora::Error::because(
        pingora::ErrorType::WriteTimedout,
        "client stalled",
        ClientStalled,
    )
}

#[async_trait]
impl CustomSession for H2Stream {
    fn req_header(&self) -> &RequestHeader {
        self.inner.req_header()
    }

    fn req_header_mut(&mut self) -> &mut RequestHeader {
        self.inner.req_header_mut()
    }

    async fn read_body_bytes(&mut self) -> Result<Option<Bytes>> {
        self.inner.read_body_bytes().await
    }

    async fn drain_request_body(&mut self) -> Result<()> {
        self.inner.drain_request_body().await
    }

    async fn write_response_header(&mut self, resp: Box<ResponseHeader>, end: bool) -> Result<()> {
        if self.gone {
            return self.drop_write();
        }
        let written = self.inner.write_response_header(resp, end);
        self.sink(written, ())
    }

    async fn write_response_header_ref(&mut self, resp: &ResponseHeader, end: bool) -> Result<()> {
        self.write_response_header(Box::new(resp.clone()), end)
            .await
    }

    async fn write_body(&mut self, data: Bytes, end: bool) -> Result<()> {
        if self.gone {
            return self.drop_write();
        }
        let written = self.inner.write_body(data, end).await;
        self.sink(written, ())
    }

    async fn write_trailers(&mut self, trailers: HeaderMap) -> Result<()> {
        if self.gone {
            return self.drop_write();
        }
        let written = self.inner.write_trailers(trailers);
        self.sink(written, ())
    }

    async fn response_duplex_vec(&mut self, tasks: Vec<HttpTask>) -> Result<bool> {
        let end = tasks.iter().any(HttpTask::is_end);
        if self.gone {
            return self.drop_write().map(|()| end);
        }
        let written = self.inner.response_duplex_vec(tasks).await;
        self.sink(written, end)
    }

    fn set_read_timeout(&mut self, _timeout: Option<Duration>) {}

    fn get_read_timeout(&self) -> Option<Duration> {
        None
    }

    /// At most `unread`: a client that takes nothing longer has left.
    fn set_write_timeout(&mut self, timeout: Option<Duration>) {
        let timeout = timeout.map_or(self.unread, |t| t.min(self.unread));
        self.inner.set_write_timeout(Some(timeout));
    }

    fn get_write_timeout(&self) -> Option<Duration> {
        self.inner.get_write_timeout()
    }

    fn set_total_drain_timeout(&mut self, timeout: Option<Duration>) {
        self.inner.set_total_drain_timeout(timeout);
    }

    fn get_total_drain_timeout(&self) -> Option<Duration> {
        self.inner.get_total_drain_timeout()
    }

    fn request_summary(&self) -> String {
        self.inner.request_summary()
    }

    fn response_written(&self) -> Option<&ResponseHeader> {
        self.inner.response_written()
    }

    async fn shutdown(&mut self, _code: u32, _ctx: &str) {
        self.inner.shutdown();
    }

    fn is_body_done(&mut self) -> bool {
        self.inner.is_body_done()
    }

    async fn finish(&mut self) -> Result<()> {
        if self.gone {
            return Ok(());
        }
        let finished = self.inner.finish();
        self.sink(finished, ())
    }

    fn is_body_empty(&mut self) -> bool {
        self.inner.is_body_empty()
    }

    /// The client's end of the stream: a reset ends the wait while the request queues,
    /// and never once its exchange has started (nor once the client has left).
    async fn read_body_or_idle(&mut self, no_body_expected: bool) -> Result<Option<Bytes>> {
        if self.gone {
            return std::future::pending().await;
        }
        match self.inner.read_body_or_idle(no_body_expected).await {
            Err(_) if self.started.is_set() => {
                self.left();
                std::future::pending().await
            }
            read => read,
        }
    }

    fn body_bytes_sent(&self) -> usize {
        self.inner.body_bytes_sent()
    }

    fn body_bytes_read(&self) -> usize {
        self.inner.body_bytes_read()
    }

    fn digest(&self) -> Option<&Digest> {
        self.inner.digest()
    }

    fn digest_mut(&mut self) -> Option<&mut Digest> {
        self.inner.digest_mut()
    }

    fn client_addr(&self) -> Option<&SocketAddr> {
        self.inner.client_addr()
    }

    fn server_addr(&self) -> Option<&SocketAddr> {
        self.inner.server_addr()
    }

    fn pseudo_raw_h1_request_header(&self) -> Bytes {
        self.inner.pseudo_raw_h1_request_header()
    }

    fn enable_retry_buffering(&mut self) {
        self.inner.enable_retry_buffering();
    }

    fn retry_buffer_truncated(&self) -> bool {
        self.inner.retry_buffer_truncated()
    }

    fn get_retry_buffer(&self) -> Option<Bytes> {
        self.inner.get_retry_buffer()
    }

    async fn finish_custom(&mut self) -> Result<()> {
        Ok(())
    }

    fn take_custom_message_reader(
        &mut self,
    ) -> Option<Box<dyn futures_util::Stream<Item = Result<Bytes>> + Unpin + Send + Sync + 'static>>
    {
        None
    }

    fn restore_custom_message_reader(
        &mut self,
        _reader: Box<
            dyn futures_util::Stream<Item = Result<Bytes>> + Unpin + Send + Sync + 'static,
        >,
    ) -> Result<()> {
        Ok(())
    }

    fn take_custom_message_writer(&mut self) -> Option<Box<dyn CustomMessageWrite>> {
        None
    }

    fn restore_custom_message_writer(
        &mut self,
        _writer: Box<dyn CustomMessageWrite>,
    ) -> Result<()> {
        Ok(())
    }
}
