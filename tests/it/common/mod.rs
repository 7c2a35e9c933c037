//! Test fixtures over real sockets on 127.0.0.1, split by what they provide: the test
//! origin and what it saw (`origin`), robotsgate and other processes (`process`),
//! network namespaces (`netns`), clients (`client`), DNS servers (`dns`), TLS (`tls`),
//! configurations built as data (`conf`), and what the evidence holds (`evidence`).

use std::collections::HashMap;
use std::io::Write as _;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

mod client;
mod conf;
mod dns;
mod evidence;
mod netns;
mod origin;
mod process;
mod tls;

pub use client::*;
pub use conf::*;
pub use dns::*;
pub use evidence::*;
pub use netns::*;
pub use origin::*;
pub use process::*;
pub use tls::*;

/// The repository's root (the crate's manifest directory).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}
