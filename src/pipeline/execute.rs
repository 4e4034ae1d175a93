//! Execution stage: stream the planned query into uncommitted Delta data files.
//!
//! The result is never collected: batches flow from DataFusion through a window-bounds check
//! into delta-rs's `DeltaWriter`, which writes Parquet files under the table root. Those files
//! are invisible to readers until the publish stage commits them, so any failure here
//! publishes nothing (the files written so far are deleted best-effort; leftovers are
//! unreferenced and removed by `VACUUM`). When the task has a `[reconcile]` section, every
//! batch is also teed into a bounded channel that feeds the `[reconcile].output` query, so the
//! output-side aggregates come from exactly the rows being written, in the same single pass.

use std::sync::{Arc, Mutex};

use arrow::array::{Array, BooleanArray, RecordBatch};
use arrow::compute::kernels::{boolean, cmp};
use arrow::datatypes::SchemaRef;
use datafusion::catalog::streaming::StreamingTable;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::PartitionStream;
use datafusion::physical_plan::{ExecutionPlan, SendableRecordBatchStream};
use deltalake::ObjectStore;
use deltalake::datafile::writer::{DeltaWriter, WriterConfig};
use deltalake::kernel::Add;
use futures::StreamExt;
use object_store::ObjectStoreExt;
use tokio::sync::mpsc;

use crate::error::{Error, Result};
use crate::task::range::WindowRange;

/// Rows staged for one window, not yet visible to any reader.
#[derive(Debug, Default)]
pub struct Staged {
    pub adds: Vec<Add>,
    /// Rows the query produced (all of them passed the window check).
    pub rows: u64,
    /// The `[reconcile].output` query's result over exactly these rows.
    pub output_aggregates: Option<Vec<RecordBatch>>,
}

/// Where and how to write the files.
pub struct Sink {
    pub store: Arc<dyn ObjectStore>,
    pub config: WriterConfig,
    /// The table's columns, when the query's differ (order, a type cast up, see
    /// `delta::table::schema_plan`): every batch is written in these.
    pub adapt: Option<SchemaRef>,
}

/// `batch` in `schema`'s columns: taken by name, cast where the type differs.
pub fn adapt(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    let mut columns = Vec::with_capacity(schema.fields().len());
    for f in schema.fields() {
        let c = batch.column_by_name(f.name()).ok_or_else(|| {
            Error::runtime(format!("column `{}` missing from the output", f.name()))
        })?;
        columns.push(if c.data_type() == f.data_type() {
            c.clone()
        } else {
            arrow::compute::cast(c, f.data_type())?
        });
    }
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

/// Check that every row of `batch` has its window column in the range's `[lo, hi)`.
pub fn check_bounds(batch: &RecordBatch, b: &WindowRange) -> Result<()> {
    let col = batch.column_by_name(b.column()).ok_or_else(|| {
        Error::runtime(format!(
            "window column `{}` missing from output",
            b.column()
        ))
    })?;
    let (lo, hi) = b.lo_hi();
    let lo = lo.to_scalar()?;
    let hi = hi.to_scalar()?;
    let outside: BooleanArray = boolean::or(&cmp::lt(col, &lo)?, &cmp::gt_eq(col, &hi)?)?;
    let bad = outside.true_count() + col.null_count();
    if bad == 0 {
        return Ok(());
    }
    let first = (0..col.len())
        .find(|&i| col.is_null(i) || outside.value(i))
        .expect("bad > 0");
    let example = if col.is_null(first) {
        "NULL".to_string()
    } else {
        arrow::util::display::array_value_to_string(col, first)?
    };
    // The same SQL over the same inputs returns them again: not retryable (exit 1).
    Err(Error::runtime(format!(
        "rows outside the window: the query returned rows whose `{}` is not in {} (first: {example}); nothing was published. Filter the sources with $window_start/$window_end",
        b.column(),
        b.shown()
    ))
    .permanent())
}

/// A one-shot partition stream fed by a channel: the `output` table of `[reconcile].output`.
#[derive(Debug)]
struct ChannelPartition {
    schema: SchemaRef,
    rx: Mutex<Option<mpsc::Receiver<RecordBatch>>>,
}

impl PartitionStream for ChannelPartition {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }
    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let rx = self.rx.lock().expect("not poisoned").take();
        let stream = futures::stream::unfold(rx, |rx| async move {
            let mut rx = rx?;
            let batch = rx.recv().await?;
            Some((Ok(batch), Some(rx)))
        });
        Box::pin(RecordBatchStreamAdapter::new(self.schema.clone(), stream))
    }
}

/// The run's output as a table provider (and as the one stream partition behind it), and
/// the sender that feeds it.
pub type OutputChannel = (
    Arc<StreamingTable>,
    Arc<dyn PartitionStream>,
    mpsc::Sender<RecordBatch>,
);

pub fn output_channel(schema: SchemaRef) -> Result<OutputChannel> {
    let (tx, rx) = mpsc::channel(4);
    let part: Arc<dyn PartitionStream> = Arc::new(ChannelPartition {
        schema: schema.clone(),
        rx: Mutex::new(Some(rx)),
    });
    Ok((
        Arc::new(StreamingTable::try_new(schema, vec![part.clone()])?),
        part,
        tx,
    ))
}

/// Stream `df` into `sink`, checking window bounds; tee into `tee` (the output-reconcile
/// query, already planned against the channel) when given.
pub async fn stage(
    plan: Arc<dyn ExecutionPlan>,
    task_ctx: Arc<TaskContext>,
    schema: SchemaRef,
    bounds: &WindowRange,
    sink: Sink,
    tee: Option<(mpsc::Sender<RecordBatch>, Arc<dyn ExecutionPlan>)>,
) -> Result<Staged> {
    let (tx, agg_task) = match tee {
        Some((tx, out)) => (
            Some(tx),
            Some(tokio::spawn(datafusion::physical_plan::collect(
                out,
                task_ctx.clone(),
            ))),
        ),
        None => (None, None),
    };
    let store = sink.store.clone();
    let adapt_to = sink.adapt.clone();
    let mut writer = DeltaWriter::new(sink.store, sink.config);
    let result = async {
        let mut stream = datafusion::physical_plan::execute_stream(plan, task_ctx)?;
        let mut rows = 0u64;
        let mut batches = 0u64;
        let mut uncorrupted = true;
        while let Some(batch) = stream.next().await {
            let batch = batch?;
            if batch.num_rows() == 0 {
                continue;
            }
            // The plan already casts to the table types; re-label with the all-nullable schema.
            let batch = RecordBatch::try_new(schema.clone(), batch.columns().to_vec())?;
            // An `output-*` mutation corrupts the first batch holding two rows or more (an
            // aggregate's groups may arrive one row a batch first).
            let first = uncorrupted && batch.num_rows() >= 2;
            uncorrupted &= !first;
            let batch = crate::fault::corrupt_output(batch, first)?;
            check_bounds(&batch, bounds)?;
            if let Some(tx) = &tx {
                // A closed channel means the reconcile query failed; its error is reported below.
                let _ = tx.send(batch.clone()).await;
            }
            match &adapt_to {
                Some(schema) => writer.write(&adapt(&batch, schema)?).await?,
                None => writer.write(&batch).await?,
            }
            rows += batch.num_rows() as u64;
            batches += 1;
            crate::fault::hit("batch", Some(batches))?;
        }
        Ok::<_, Error>(rows)
    }
    .await;
    drop(tx);
    let rows = match result {
        Ok(rows) => rows,
        Err(e) => {
            let _ = writer.abort().await;
            if let Some(t) = agg_task {
                t.abort();
            }
            return Err(e);
        }
    };
    let adds = writer.close().await?;
    let output_aggregates = output_aggregates(agg_task, &store, &adds).await?;
    Ok(Staged {
        adds,
        rows,
        output_aggregates,
    })
}

/// The `[reconcile].output` query's result, once the rows are written (`None` without the
/// query); when it failed, the files staged (`adds`) are discarded.
async fn output_aggregates(
    agg_task: Option<tokio::task::JoinHandle<datafusion::common::Result<Vec<RecordBatch>>>>,
    store: &Arc<dyn ObjectStore>,
    adds: &[Add],
) -> Result<Option<Vec<RecordBatch>>> {
    let output_aggregates = match agg_task {
        None => None,
        Some(t) => match t.await {
            Ok(Ok(b)) => Some(b),
            Ok(Err(e)) => {
                discard(store, adds).await;
                return Err(Error::runtime(format!("[reconcile].output failed: {e}")));
            }
            Err(e) => {
                discard(store, adds).await;
                return Err(Error::runtime(format!(
                    "[reconcile].output task failed: {e}"
                )));
            }
        },
    };
    Ok(output_aggregates)
}

/// Best-effort delete of staged, never-committed files.
pub async fn discard(store: &Arc<dyn ObjectStore>, adds: &[Add]) {
    for a in adds {
        let Ok(path) = object_store::path::Path::parse(&a.path) else {
            continue;
        };
        if let Err(e) = store.delete(&path).await {
            tracing::debug!("could not delete staged file {}: {e}", a.path);
        }
    }
}

/// Rows in `adds`, from the `numRecords` statistic the writer recorded per file.
pub fn rows_in(adds: &[Add]) -> Result<u64> {
    let mut total = 0u64;
    for a in adds {
        total += stats_rows(&a.path, a.stats.as_deref())?;
    }
    Ok(total)
}

/// `numRecords` from a file's Delta statistics JSON.
pub fn stats_rows(path: &str, stats: Option<&str>) -> Result<u64> {
    let stats =
        stats.ok_or_else(|| Error::runtime(format!("no statistics recorded for {path}")))?;
    let v: serde_json::Value = serde_json::from_str(stats)
        .map_err(|e| Error::runtime(format!("unreadable statistics for {path}: {e}")))?;
    v.get("numRecords")
        .and_then(serde_json::Value::as_u64)
        .ok_or_else(|| Error::runtime(format!("statistics for {path} have no numRecords")))
}
