use std::process::ExitCode;

use clap::Parser;

/// jemalloc, with a background thread that returns freed pages to the system after a
/// second (`_rjem_malloc_conf` below): after a wave of 5,000 idle client connections
/// closes, RSS goes back near where it was (glibc's allocator kept the peak;
/// `tests/it/limits.rs` measures it).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[allow(non_upper_case_globals)]
#[export_name = "_rjem_malloc_conf"]
pub static malloc_conf: &[u8] = b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:1000\0";

fn main() -> ExitCode {
    match robotsgate::cli::Cli::parse().run() {
        Ok(code) => code,
        Err(err) => {
            eprintln!("robotsgate: {err:#}");
            ExitCode::from(2)
        }
    }
}
