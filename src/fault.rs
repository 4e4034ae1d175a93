//! Fault injection for tests (`IDEMLAKE_TEST_FAULT`), documented in CONTRIBUTING.md as a testing aid.
//!
//! - `batch:N` fails after N streamed batches;
//! - `before-commit` fails after every file is written, just before the commit;
//! - `abort-before-commit` kills the process there, as `kill -9` would;
//! - `lose-commit-response` lets the first Delta commit reach storage but reports an error, as
//!   if the response to the PUT had been lost (tests exactly-once publication);
//! - `after-commit` fails right after the commit landed (the report must say published);
//! - `merge-error-after-commit` makes a merge whose commit landed return an error, as
//!   delta-rs does when its post-commit steps fail (the run must find its commit).
//!
//! - `pause-before-inputs-check:MS` sleeps MS ms right before a window's inputs are checked
//!   (after its checks, before its commit), printing `idemlake: paused at before-inputs-check`.
//!
//! Mutations of the accelerations, to prove the independent checks catch their bugs:
//! - `slice-drop-row`: every shared-scan slice loses its last row;
//! - `slice-move-row`: every slice starts one row late and ends one row late (a row of each
//!   window moves to the previous window's slice);
//! - `derived-keep-literal`: physical plans derived from the template keep the template's
//!   literals (after the first derived plan was checked);
//! - `skip-remove`: the file map forgets one file of each window it replaces.
//! - `partition-shift`: the published path's window→partition mapping (`delta::partition`)
//!   is one day off (one hour for timestamps): a window's range and each partition value a
//!   commit serialises are keyed one day later, a loaded snapshot's typed values are not —
//!   so the file map replaces the next day's files instead of the window's own.
//!
//! Mutations of a window's staged output, whatever the task's shape (the default
//! independent check must catch them):
//! - `output-drop-row`: the first batch a window stages loses its last row;
//! - `output-repeat-row`: the first batch a window stages has its last row replaced by a
//!   copy of its first (as many rows, other content).
//! - `staged-file-shrunk`: right before the commit, after every check, the window's first
//!   staged file is rewritten holding only its first row (same path, same statistics in its
//!   add): only a read-back that reads the committed files catches it.
//!
//! Without the variable every hook is a no-op.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use object_store::path::Path;
use object_store::{ObjectStore, PutResult};

use crate::error::{Error, Result};
use crate::storage::wrap::{Intercept, Wrapped};

fn spec() -> Option<String> {
    crate::config::get().test_fault.clone()
}

/// Fail (or abort) at `point` if the fault spec names it.
pub fn hit(point: &str, batches: Option<u64>) -> Result<()> {
    debug_assert!(point == "batch" || crate::config::TEST_FAULTS.contains(&point));
    let Some(spec) = spec() else {
        return Ok(());
    };
    let hit = match (spec.split_once(':'), batches) {
        (Some(("batch", n)), Some(b)) => n.parse::<u64>().is_ok_and(|n| b >= n),
        (None, None) => spec == point || spec == format!("abort-{point}"),
        _ => false,
    };
    if hit {
        if spec.starts_with("abort-") {
            eprintln!("idemlake: injected abort at {point}");
            std::process::abort();
        }
        return Err(Error::runtime(format!("injected fault at {spec}")));
    }
    Ok(())
}

/// Pause at `point` for `MS` milliseconds when the spec is `pause-<point>:<MS>`, saying so on
/// stderr first (a test then changes the sources under a running window).
pub async fn pause(point: &str) {
    let Some(spec) = spec() else {
        return;
    };
    let Some(ms) = spec
        .strip_prefix("pause-")
        .and_then(|rest| rest.strip_prefix(point))
        .and_then(|rest| rest.strip_prefix(':'))
        .and_then(|ms| ms.parse::<u64>().ok())
    else {
        return;
    };
    eprintln!("idemlake: paused at {point}");
    tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
}

/// Is the mutation `name` configured?
pub fn mutation(name: &str) -> bool {
    debug_assert!(crate::config::TEST_FAULTS.contains(&name), "{name}");
    spec().as_deref() == Some(name)
}

/// `batch` as an `output-*` mutation corrupts it, if `first` (the first batch of two rows or
/// more a window stages).
pub fn corrupt_output(
    batch: arrow::array::RecordBatch,
    first: bool,
) -> Result<arrow::array::RecordBatch> {
    let n = batch.num_rows();
    if !first || n < 2 {
        return Ok(batch);
    }
    if mutation("output-drop-row") {
        return Ok(batch.slice(0, n - 1));
    }
    if mutation("output-repeat-row") {
        let idx: Vec<u32> = (0..n as u32 - 1).chain([0]).collect();
        let idx = arrow::array::UInt32Array::from(idx);
        return Ok(arrow::compute::take_record_batch(&batch, &idx)?);
    }
    Ok(batch)
}

/// The `staged-file-shrunk` mutation of the staged files at `paths` (in `store`).
pub async fn shrink_staged(store: &Arc<dyn ObjectStore>, paths: &[String]) -> Result<()> {
    use object_store::ObjectStoreExt;
    if !mutation("staged-file-shrunk") {
        return Ok(());
    }
    let Some(p) = paths.first() else {
        return Ok(());
    };
    let bad = |e: &dyn fmt::Display| Error::runtime(format!("staged-file-shrunk: {e}"));
    let location = Path::parse(p).map_err(|e| bad(&e))?;
    let got = store.get(&location).await.map_err(|e| bad(&e))?;
    let bytes = got.bytes().await.map_err(|e| bad(&e))?;
    let mut reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes)
        .and_then(|b| b.build())
        .map_err(|e| bad(&e))?;
    let Some(batch) = reader.next() else {
        return Ok(());
    };
    let batch = batch.map_err(|e| bad(&e))?.slice(0, 1);
    let mut buf = Vec::new();
    let mut w = parquet::arrow::ArrowWriter::try_new(&mut buf, batch.schema(), None)
        .map_err(|e| bad(&e))?;
    w.write(&batch).map_err(|e| bad(&e))?;
    w.close().map_err(|e| bad(&e))?;
    store
        .put(&location, buf.into())
        .await
        .map_err(|e| bad(&e))?;
    Ok(())
}

/// Wrap `store` when a fault asks for it.
pub fn wrap_store(store: Arc<dyn ObjectStore>) -> Arc<dyn ObjectStore> {
    if wants_store_wrapper() {
        Arc::new(Wrapped(Instrumented {
            inner: store,
            lose_commit: spec().as_deref() == Some("lose-commit-response"),
            done: AtomicBool::new(false),
        }))
    } else {
        store
    }
}

/// Is a fault that needs a wrapped store configured?
pub fn wants_store_wrapper() -> bool {
    spec().as_deref() == Some("lose-commit-response")
}

#[derive(Debug)]
struct Instrumented {
    inner: Arc<dyn ObjectStore>,
    lose_commit: bool,
    done: AtomicBool,
}

impl fmt::Display for Instrumented {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Instrumented({})", self.inner)
    }
}

impl Intercept for Instrumented {
    fn inner(&self) -> &dyn ObjectStore {
        self.inner.as_ref()
    }
    fn after_put(
        &self,
        location: &Path,
        result: object_store::Result<PutResult>,
    ) -> object_store::Result<PutResult> {
        let r = result?;
        let is_commit =
            location.as_ref().contains("_delta_log/") && location.as_ref().ends_with(".json");
        if self.lose_commit && is_commit && !self.done.swap(true, Ordering::SeqCst) {
            return Err(object_store::Error::Generic {
                store: "fault",
                source: "injected: the commit was stored but its response was lost".into(),
            });
        }
        Ok(r)
    }
}
