//! The `robotsgate` command: parses the command line and runs it ([`robotsgate::cli`]).

#![warn(clippy::missing_docs_in_private_items)]

use std::process::ExitCode;

use clap::Parser;

/// jemalloc, with a background thread that returns freed pages to the system after a
/// second (`_rjem_malloc_conf` below): after a wave of 5,000 idle client connections
/// closes, RSS goes back near where it was (glibc's allocator kept the peak;
/// `tests/it/limits.rs` measures it).
///
/// The thread cache is sized for a proxy's requests. Each allocates one 64 KiB body
/// buffer (Pingora's) and about 90 small blocks, and frees them when it ends, with tens
/// of requests in flight on a thread. By default jemalloc caches blocks up to 32 KiB
/// only, 20 of each large size, 20 to 200 of each small one, and collects its cache
/// every 64 KiB allocated: so the 64 KiB buffer went to the arena (its lock, an extent
/// search) on every request, and with 64 requests in flight small bins overflowed,
/// flushing slabs back to the arena that the next requests carved again (about one slab
/// a request, callgrind counted). Caching up to 64 KiB, 64 large blocks of a size and
/// collecting every 1 MiB took about 2 µs of CPU from each request
/// (`bench/proxy_bench.py`, about 7%); 128 to 512 of each small size took 3,200 more
/// instructions of about 120,000 (callgrind, 64 requests in flight).
/// The cache stays bounded — per thread, at the very worst, 64 blocks of each size from
/// 16 to 64 KiB (about 21 MiB) and 128 of each small size up to 14 KiB (about 12 MiB),
/// held only after that many were in use at once — and its collection still returns
/// what goes unused (RSS per held origin and after a wave of connections is unchanged:
/// `bench/origins_mem.py`, `tests/it/limits.rs`).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

// A thin `&[u8; N]`: jemalloc reads this symbol as a `const char *`.
#[allow(non_upper_case_globals)]
#[export_name = "_rjem_malloc_conf"]
pub static malloc_conf: &[u8; 211] = b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:1000,tcache_max:65536,tcache_nslots_large:64,lg_tcache_nslots_mul:2,tcache_nslots_small_min:128,tcache_nslots_small_max:512,tcache_gc_incr_bytes:1048576\0";

fn main() -> ExitCode {
    match robotsgate::cli::Cli::parse().run() {
        Ok(code) => code,
        Err(err) => {
            eprintln!("robotsgate: {err:#}");
            ExitCode::from(2)
        }
    }
}
