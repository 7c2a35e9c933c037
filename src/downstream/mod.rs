//! The client side: the [`front`] door every connection starts at, request [`head`]s
//! read within limits, HTTP/2 connections whose streams are requests ([`http2`]), what
//! a client may hold open ([`slots`]), what the front tells the proxy about each request
//! ([`context`]), [`access`] control, CONNECT tunnels ([`connect`]), TLS interception
//! ([`intercept`]) with the operator CA ([`ca`]), connections the kernel redirected
//! ([`transparent`]), refusals and answers written on raw client streams ([`refuse`]),
//! the peer channel's door ([`peer_door`]) and what a member may name there
//! ([`peer_scope`]), an HTTP/1.1 client's side of each exchange ([`client_stream`]) with response heads
//! sent together with their bodies ([`coalesce`]), a client that takes none of its
//! answer ([`unread`]), and the requests in progress a
//! graceful stop waits for ([`drain`]). Requests for origins another fleet member
//! owns go to [`crate::handover`]. Uses it, [`crate::enforce`] and the layers below
//! them; never the Pingora proxy that serves the requests.
//!
//! **Its other files:** `h2_stream.rs` (one HTTP/2 stream as the proxy sees it),
//! `tunnel_error.rs` (why a tunnel could not be opened).

pub mod access;
pub mod ca;
pub mod client_stream;
pub mod coalesce;
pub mod connect;
pub mod context;
pub mod drain;
pub mod front;
pub mod h2_stream;
pub mod head;
pub mod http2;
pub mod intercept;
pub mod peer_door;
pub mod peer_scope;
pub mod refuse;
pub mod slots;
pub mod transparent;
pub mod tunnel_error;
pub mod unread;

/// Resolves once the server begins shutting down, or draining when `drains` (at once if
/// it has): what every client connection watches to close when idle, or to send its
/// GOAWAY. Connections on the peer channel do not close when draining begins: a leaving
/// member holds what other members hand it until it has handed its origins over, then
/// refuses it, and they route it again (closed, their pooled connections would each
/// fail a request's attempt).
pub(crate) async fn shutting_down(mut shutdown: pingora::server::ShutdownWatch, drains: bool) {
    let pingora = async {
        while !*shutdown.borrow() {
            if shutdown.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        // In order: no random draw each time an idle connection waits.
        biased;
        () = pingora => {}
        () = drain::began(), if drains => {}
    }
}
