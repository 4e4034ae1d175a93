//! The read-back's first replay, opened while the window's last checks run.
//!
//! A process's first read-back opens the log through the read-back's own client at a version
//! before its commit (its last checkpoint, `_last_checkpoint`, a listing and the commits
//! after it: four round trips on an object store) and then reads the commits up to its own.
//! Nothing of that depends on the commit: once a window is staged and reconciled, the replay
//! is opened at the version the runner loaded, beside the window's remaining checks, the
//! re-check of its sources and its commit; the read-back then only reads the commits after
//! that version (`readback::follow`). Same route, same requests, earlier.
//!
//! Plain twin: `IDEMLAKE_ACCELERATE=0` (the replay is opened by the read-back itself).

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::delta::readback::{LogReplay, Route};
use crate::error::Result;

use super::Target;

/// The one prefetched replay of a process.
#[derive(Default)]
pub(super) struct Prefetch {
    started: AtomicBool,
    opening: Mutex<Option<tokio::task::JoinHandle<Result<LogReplay>>>>,
}

impl Prefetch {
    /// Open the replay at `version` through `route`, unless one was started before.
    fn start(&self, route: &Route, column: &str, version: i64) {
        if self.started.swap(true, Ordering::SeqCst) {
            return;
        }
        let (route, column) = (route.clone(), column.to_string());
        let handle = tokio::spawn(async move { LogReplay::open(&route, &column, version).await });
        *self.opening.lock().expect("not poisoned") = Some(handle);
    }

    /// The prefetched replay, once opened (`None`: none was started, or it failed).
    pub(super) async fn take(&self) -> Option<LogReplay> {
        let handle = self.opening.lock().expect("not poisoned").take()?;
        match handle.await {
            Ok(Ok(replay)) => Some(replay),
            Ok(Err(e)) => {
                tracing::debug!("the read-back's prefetched replay failed: {}", e.message());
                None
            }
            Err(e) => {
                tracing::debug!("the read-back's prefetched replay failed: {e}");
                None
            }
        }
    }
}

impl std::fmt::Debug for Prefetch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Prefetch({:?})", self.started)
    }
}

impl Target {
    /// A window of this process is about to be committed: open the read-back's replay at the
    /// version the table was loaded at, in the background (accelerated; the first time only,
    /// and only for a table that exists).
    pub async fn prefetch_readback(&self) {
        if !crate::config::get().accelerate || self.loaded().await.is_err() {
            return;
        }
        if let Some(v) = self.view().version() {
            self.prefetch
                .start(&self.readback, &self.partition_by, v as i64);
        }
    }
}
