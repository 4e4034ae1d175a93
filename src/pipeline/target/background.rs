//! The target table's first load, in the background on its own runtime, and the background
//! work the process waits for before it exits.

use std::time::Instant;

use deltalake::DeltaTable;

use crate::delta::table;
use crate::error::Result;

/// Start loading the target table; the runner awaits it before first use.
///
/// The load runs on [`loader`], its own runtime and thread, not on the runtime that executes
/// the window's scans: there its log reads queued behind CPU-bound scan tasks, and a day
/// window's commit waited for a load that had listed the log 45 ms after start but read the
/// commit files only as the scans ended (~165 ms later). On its own thread the kernel's
/// scheduler shares the cores between the load and the scans.
///
/// `loaded` learns the version loaded (`None`: no table yet, or the load failed) as soon as the
/// load ends, on that thread: what waits for it there need not wait for the scans.
pub(super) fn open_in_background(
    url: &url::Url,
    loaded: tokio::sync::watch::Sender<Option<Option<u64>>>,
) -> tokio::task::JoinHandle<Result<DeltaTable>> {
    let url = url.clone();
    let load = background().track_future(async move {
        let t = Instant::now();
        // The record of an earlier conditional-PUT probe is read beside the log (S3 only).
        let (table, ()) = tokio::join!(table::open(&url), crate::storage::recall_probe(&url));
        tracing::debug!(
            ms = t.elapsed().as_millis() as u64,
            version = ?table.as_ref().ok().and_then(|t| t.version()),
            "target table loaded"
        );
        let _ = loaded.send(Some(table.as_ref().ok().and_then(|t| t.version())));
        table
    });
    spawn_off_scans(load)
}

/// Spawn `work` (log reads) on [`loader`]'s thread, off the runtime the scans keep busy.
pub(super) fn spawn_off_scans<T: Send + 'static>(
    work: impl std::future::Future<Output = T> + Send + 'static,
) -> tokio::task::JoinHandle<T> {
    match loader() {
        Some(rt) => rt.spawn(work),
        None => tokio::spawn(work),
    }
}

/// The runtime target tables are first loaded on: one worker thread, living until the process
/// exits (delta-rs's engine for an operation runs on the runtime that started it, so a runtime
/// dropped after the load could not serve it). `None` if the thread cannot be started: the
/// load then runs on the caller's runtime.
fn loader() -> Option<&'static tokio::runtime::Runtime> {
    static LOADER: std::sync::OnceLock<Option<tokio::runtime::Runtime>> =
        std::sync::OnceLock::new();
    LOADER
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .max_blocking_threads(4)
                .thread_name("idemlake-table-load")
                .enable_all()
                .build()
                .map_err(|e| tracing::debug!("no separate runtime for table loads: {e}"))
                .ok()
        })
        .as_ref()
}

/// Background work that must end before the process does: the target table's load started
/// by [`Target::open`](super::Target::open) may still be running when a command finishes without needing it
/// (`backfill --missing` with nothing missing), and a runtime shut down under it made
/// delta-kernel's executor panic on stderr. The binary waits for these before exiting
/// ([`finish_background`]).
pub fn background() -> &'static tokio_util::task::TaskTracker {
    static TRACKER: std::sync::OnceLock<tokio_util::task::TaskTracker> = std::sync::OnceLock::new();
    TRACKER.get_or_init(tokio_util::task::TaskTracker::new)
}

/// Wait (at most `limit`) for the [`background`] work to end.
pub async fn finish_background(limit: std::time::Duration) {
    let tracker = background();
    tracker.close();
    if tokio::time::timeout(limit, tracker.wait()).await.is_err() {
        tracing::warn!("background work still running after {limit:?}; exiting anyway");
    }
}
