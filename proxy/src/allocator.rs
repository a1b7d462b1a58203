//! Settings for jemalloc, the `warden` binary's memory allocator (its `main.rs` installs
//! it for both planes; tests run on the system allocator, where these calls reach an
//! idle jemalloc and change nothing).
//!
//! Why jemalloc: measured with `load-tests/run.sh` on two cores, glibc's malloc cost the
//! proxy about a tenth of its CPU per request (`malloc_consolidate` and `unlink_chunk`
//! ran whenever a request allocated a large buffer after many small frees), and as much
//! of the control plane's. jemalloc has no such pass.
//!
//! Why these settings: jemalloc keeps freed pages for ten seconds by default, so loading
//! a snapshot of 100,000 keys left 165 MiB resident for a while before it settled at
//! 97 MiB (glibc: 119 MiB). Freed pages now go back after one second, from jemalloc's
//! own background thread (so an idle process shrinks too), and at once after a full
//! snapshot has been applied (`release_freed_pages`, called by `sync`).
//!
//! One setting can only be made when jemalloc is built: `.cargo/config.toml` sets
//! `tcache_max` to 64 KiB (default 32 KiB), so that the two 64 KiB body buffers pingora
//! allocates for every proxied request are reused from the thread's cache instead of
//! going through the arena's locked extent path (callgrind: 2,600 instructions a
//! request fewer; resident memory with 10,000 keys unchanged).

use tikv_jemalloc_ctl::{Access, AsName};

/// How long freed (dirty) pages stay mapped before jemalloc returns them.
const DIRTY_DECAY_MS: isize = 1_000;

/// Tunes jemalloc; call first thing in `main`. Each setting is an optimisation, so one
/// that jemalloc refuses is skipped.
pub fn configure() {
    // One purging thread is plenty (jemalloc would start one per core).
    let _ = tikv_jemalloc_ctl::max_background_threads::write(1);
    let _ = tikv_jemalloc_ctl::background_thread::write(true);
    // The default for arenas made from now on, then each arena made so far.
    let _ = b"arenas.dirty_decay_ms\0".name().write(DIRTY_DECAY_MS);
    set_decay_of_every_arena(DIRTY_DECAY_MS);
}

/// Returns every freed page to the system now: after a full snapshot, whose text and
/// parsed form (tens of megabytes at 100,000 keys) have just been dropped.
pub(crate) fn release_freed_pages() {
    // jemalloc purges an arena's dirty pages when its decay time is set to zero; the
    // usual time is then restored. (`arena.<i>.purge` takes no value, which the safe
    // interface cannot send.)
    set_decay_of_every_arena(0);
    set_decay_of_every_arena(DIRTY_DECAY_MS);
}

fn set_decay_of_every_arena(decay_ms: isize) {
    let arenas = tikv_jemalloc_ctl::arenas::narenas::read().unwrap_or(0);
    for arena in 0..arenas {
        // Arenas not yet made refuse the key; nothing to do for them.
        let key = format!("arena.{arena}.dirty_decay_ms\0");
        let _ = key.as_str().name().write(decay_ms);
    }
}
