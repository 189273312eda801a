//! The Tokio runtime each binary runs on: the multi-threaded scheduler with every driver, its
//! worker count read like every other setting, so that a value that cannot work stops the
//! start with a message naming the variable rather than a panic inside Tokio.
//!
//! The count is Tokio's own variable and Tokio's own default: one worker per CPU the process
//! may use (a CPU limit counts, a request does not). Measured on two cores, one worker made
//! the services' threads sleep and wake a fifth to a third less often per order at a moderate rate but
//! spent the same CPU, and created 8–10 % fewer orders at saturation (the benchmarks of
//! 2026-12-05, `docs/benchmarks/2026-12-05-worker-threads.md`).

use std::num::NonZeroUsize;

use anyhow::Context;
use tokio::runtime::Runtime;

use crate::config;

/// Tokio's variable for the number of worker threads.
pub const WORKER_THREADS: &str = "TOKIO_WORKER_THREADS";

/// A new runtime, with `TOKIO_WORKER_THREADS` workers when it is set (at least 1).
pub fn build() -> anyhow::Result<Runtime> {
    let cpus = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
    // Always given explicitly: left to Tokio, a value it cannot parse (an empty one included)
    // panics when the runtime is built.
    let workers = config::at_least(WORKER_THREADS, cpus, 1)?;
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .context("could not start the Tokio runtime")
}
