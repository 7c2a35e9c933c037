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
/// only, 20 of each large size and twice a slab's worth of each small one, and collects
/// its cache every 64 KiB allocated: so the 64 KiB buffer went to the arena (its lock,
/// an extent search) on every request, and the cache flushed blocks that the next
/// requests then fetched back. Caching up to 64 KiB, 64 large blocks of a size, four
/// slabs' worth of small ones, and collecting every 1 MiB took about 2 µs of CPU from
/// each request (`bench/proxy_bench.py`, about 7%). The cache stays bounded — per
/// thread, 64 blocks of each size from 16 to 64 KiB, about 21 MiB at the very worst,
/// held only after that many were in use at once — and its collection still returns
/// what goes unused (RSS per held origin and after a wave of connections is unchanged:
/// `bench/origins_mem.py`, `tests/it/limits.rs`).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

// A thin `&[u8; N]`: jemalloc reads this symbol as a `const char *`.
#[allow(non_upper_case_globals)]
#[export_name = "_rjem_malloc_conf"]
pub static malloc_conf: &[u8; 155] = b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:1000,tcache_max:65536,tcache_nslots_large:64,lg_tcache_nslots_mul:2,tcache_gc_incr_bytes:1048576\0";

fn main() -> ExitCode {
    match robotsgate::cli::Cli::parse().run() {
        Ok(code) => code,
        Err(err) => {
            eprintln!("robotsgate: {err:#}");
            ExitCode::from(2)
        }
    }
}
