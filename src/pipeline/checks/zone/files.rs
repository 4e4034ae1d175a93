//! The checks' own reader of a local landing zone's Parquet files, for a scan of the whole
//! zone (a long backfill's grouped check, an initial load).
//!
//! DataFusion's Parquet scan costs some 350 µs of CPU a file whatever its size (measured as a
//! whole, not broken down): on a zone of 17,520 files of 100 rows that is 6 CPU-seconds,
//! more than the runner's whole load. Here each file's projected columns are read in one pass
//! by arrow-rs's synchronous Parquet reader on a blocking thread, its columns adapted to the zone's schema as DataFusion adapts them (by name; a missing
//! column is NULL, another type is cast), the partition values appended.
//!
//! What is read is DataFusion's own answer to "which files": the listing is its
//! `ListingTableUrl` listing of the zone (files of the format's extension, none empty), each
//! file's partition values parsed and filtered by its own helpers, as its listing table does
//! for a scan's partition filters (which it reports as exact, so they are applied here, and
//! only here). Filters on file columns are applied by DataFusion above this scan.
//!
//! Shares nothing with the runner's route (`landing`, `accel::mapped`): its own listing, its
//! own reads. The plain twin is DataFusion's listing table (`IDEMLAKE_ACCELERATE=0`); the
//! tests compare the two on the same zone.

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, RecordBatchOptions, new_null_array};
use arrow::datatypes::{DataType, SchemaRef};
use datafusion::catalog::Session;
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::datasource::listing::helpers::{
    expr_applicable_for_cols, filter_partitioned_file, parse_partitions_for_path,
};
use datafusion::datasource::listing::{ListingTableUrl, PartitionedFile};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::SendableRecordBatchStream;
use datafusion::physical_plan::stream::RecordBatchReceiverStreamBuilder;
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use futures::TryStreamExt;
use object_store::local::LocalFileSystem;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

/// Where an output column comes from.
#[derive(Debug, Clone)]
enum Column {
    /// The file's column of this name, as this type.
    File(String, DataType),
    /// The file's value of the partition column at this index.
    Partition(usize),
}

/// The files of the zone under `root` (extension `ext`, partitioned by `columns`) that the
/// partition filters among `filters` accept, as DataFusion's listing table lists them.
pub async fn list(
    state: &dyn Session,
    root: &ListingTableUrl,
    ext: &str,
    columns: &[(String, DataType)],
    filters: &[Expr],
) -> Result<Vec<PartitionedFile>> {
    let names: Vec<&str> = columns.iter().map(|(n, _)| n.as_str()).collect();
    let on_partitions: Vec<Expr> = filters
        .iter()
        .filter(|f| expr_applicable_for_cols(&names, f))
        .map(|f| super::unqualified(f.clone()))
        .collect();
    let schema = DFSchema::from_unqualified_fields(
        columns
            .iter()
            .map(|(n, t)| arrow::datatypes::Field::new(n, t.clone(), true))
            .collect(),
        Default::default(),
    )?;
    let store = state.runtime_env().object_store(root)?;
    let metas: Vec<_> = root
        .list_prefixed_files(state, store.as_ref(), None, ext)
        .await?
        .try_filter(|m| futures::future::ready(m.size > 0))
        .try_collect()
        .await?;
    let mut out = Vec::with_capacity(metas.len());
    for meta in metas {
        let Some(parsed) = parse_partitions_for_path(root, &meta.location, names.iter().copied())
        else {
            continue;
        };
        let values = parsed
            .into_iter()
            .zip(columns)
            .map(|(v, (_, ty))| ScalarValue::try_from_string(v.into_owned(), ty))
            .collect::<Result<Vec<_>>>()?;
        let mut file = PartitionedFile::from(meta);
        file.partition_values = values;
        if let Some(file) = filter_partitioned_file(file, &on_partitions, &schema)? {
            out.push(file);
        }
    }
    Ok(out)
}

/// A scan of `files` producing `schema` (the table's schema projected; partition columns are
/// those named in `columns`), in `partitions` streams of consecutive files.
pub fn scan(
    files: Vec<PartitionedFile>,
    schema: SchemaRef,
    columns: &[(String, DataType)],
    partitions: usize,
) -> Result<Arc<dyn ExecutionPlan>> {
    let plan: Arc<[Column]> = schema
        .fields()
        .iter()
        .map(|f| match columns.iter().position(|(n, _)| n == f.name()) {
            Some(i) => Column::Partition(i),
            None => Column::File(f.name().clone(), f.data_type().clone()),
        })
        .collect();
    let per = files.len().div_ceil(partitions.max(1)).max(1);
    let mut streams: Vec<Arc<dyn PartitionStream>> = Vec::new();
    let mut files = files.into_iter().peekable();
    while files.peek().is_some() {
        streams.push(Arc::new(Files {
            schema: schema.clone(),
            plan: plan.clone(),
            files: files.by_ref().take(per).collect(),
        }));
    }
    if streams.is_empty() {
        return Ok(Arc::new(datafusion::physical_plan::empty::EmptyExec::new(
            schema,
        )));
    }
    Ok(Arc::new(StreamingTableExec::try_new(
        schema,
        streams,
        None,
        Vec::new(),
        false,
        None,
    )?))
}

/// One partition's files, read one after the other on a blocking thread.
#[derive(Debug)]
struct Files {
    schema: SchemaRef,
    plan: Arc<[Column]>,
    files: Vec<PartitionedFile>,
}

impl PartitionStream for Files {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let mut builder = RecordBatchReceiverStreamBuilder::new(self.schema.clone(), 2);
        let tx = builder.tx();
        let (schema, plan, files) = (self.schema.clone(), self.plan.clone(), self.files.clone());
        let batch_size = ctx.session_config().batch_size();
        builder.spawn_blocking(move || {
            let fs = LocalFileSystem::new();
            for file in &files {
                // `false`: the query was dropped.
                let send = &mut |batch| tx.blocking_send(Ok(batch)).is_ok();
                if !read(&fs, file, &schema, &plan, batch_size, send)? {
                    break;
                }
            }
            Ok(())
        });
        builder.build()
    }
}

/// `file`'s rows as `schema`'s columns, batch by batch to `send` (`false`: stop reading);
/// `false` if it stopped.
fn read(
    fs: &LocalFileSystem,
    file: &PartitionedFile,
    schema: &SchemaRef,
    plan: &[Column],
    batch_size: usize,
    send: &mut dyn FnMut(RecordBatch) -> bool,
) -> Result<bool> {
    let location = &file.object_meta.location;
    let path = fs
        .path_to_filesystem(location)
        .map_err(|e| DataFusionError::ObjectStore(Box::new(e)))?;
    let context = |e: &dyn std::fmt::Display| {
        DataFusionError::Execution(format!("the checks' read of {}: {e}", path.display()))
    };
    let handle = std::fs::File::open(&path).map_err(|e| context(&e))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(handle).map_err(|e| context(&e))?;
    let file_schema = builder.schema().clone();
    let mut wanted: Vec<usize> = plan
        .iter()
        .filter_map(|c| match c {
            Column::File(name, _) => file_schema.index_of(name).ok(),
            Column::Partition(_) => None,
        })
        .collect();
    wanted.sort_unstable();
    wanted.dedup();
    let mask = ProjectionMask::roots(builder.parquet_schema(), wanted);
    let reader = builder
        .with_projection(mask)
        .with_batch_size(batch_size)
        .build()
        .map_err(|e| context(&e))?;
    for batch in reader {
        let batch = batch.map_err(|e| context(&e))?;
        let rows = batch.num_rows();
        let columns = plan
            .iter()
            .map(|c| -> Result<ArrayRef> {
                Ok(match c {
                    Column::Partition(i) => file.partition_values[*i].to_array_of_size(rows)?,
                    Column::File(name, ty) => match batch.column_by_name(name) {
                        None => new_null_array(ty, rows),
                        Some(a) if a.data_type() == ty => a.clone(),
                        Some(a) => arrow::compute::cast(a, ty).map_err(|e| context(&e))?,
                    },
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let options = RecordBatchOptions::new().with_row_count(Some(rows));
        if !send(RecordBatch::try_new_with_options(
            schema.clone(),
            columns,
            &options,
        )?) {
            return Ok(false);
        }
    }
    Ok(true)
}
