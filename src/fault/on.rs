//! The hooks themselves, compiled with the `faults` feature (the tests' builds).

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
