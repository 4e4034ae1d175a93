//! The read-back's first replay, opened while the first window's scans run.
//!
//! A process's first read-back opens the log through the read-back's own client at a version
//! before its commit (its last checkpoint, `_last_checkpoint`, a listing and the commits
//! after it: four round trips on an object store) and then reads the commits up to its own.
//! Nothing of that depends on the commit: when the first window starts its scans, the replay
//! is opened at the version the runner loaded, as soon as that load ends, on the table loads'
//! thread (on the scans' runtime it would wait for them to end), beside the window's scans,
//! checks and commit; the read-back then only reads the commits after that version
//! (`readback::follow`). Same route, same requests, earlier.
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
    /// Open the replay through `route` at the version `loaded` learns, unless one was started
    /// before (nothing when the table did not exist or failed to load).
    fn start(
        &self,
        route: &Route,
        column: &str,
        mut loaded: tokio::sync::watch::Receiver<Option<Option<u64>>>,
    ) {
        if self.started.swap(true, Ordering::SeqCst) {
            return;
        }
        let (route, column) = (route.clone(), column.to_string());
        let open = async move {
            let version = match loaded.wait_for(Option::is_some).await {
                Ok(v) => (*v).flatten(),
                Err(_) => None,
            };
            let Some(version) = version else {
                return Err(crate::error::Error::runtime("no table was loaded"));
            };
            let replay = LogReplay::open(&route, &column, version as i64).await;
            tracing::debug!(version, "the read-back's replay is open (prefetched)");
            replay
        };
        let open = super::background::background().track_future(open);
        *self.opening.lock().expect("not poisoned") =
            Some(super::background::spawn_off_scans(open));
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
    /// A window of this process starts its scans: open the read-back's replay at the version
    /// the table is loaded at, in the background (accelerated; the first time only, and only
    /// for a table that exists).
    pub fn prefetch_readback(&self) {
        if crate::config::get().accelerate {
            self.prefetch.start(
                &self.readback,
                &self.partition_by,
                self.loaded_version.clone(),
            );
        }
    }
}
