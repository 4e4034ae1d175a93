//! The checks' own reader of a landing zone's Parquet files.
//!
//! DataFusion's Parquet scan costs some 350 µs of CPU a file whatever its size (measured as a
//! whole, not broken down): on a zone of 17,520 files of 100 rows that is 6 CPU-seconds,
//! more than the runner's whole load. On an object store it reads a file with two requests
//! at least (its footer, then its pages), each a round trip. Here a local file's projected
//! columns are read in one pass by arrow-rs's synchronous Parquet reader on a blocking thread;
//! a remote file of at most [`WHOLE_FILE_BYTES`] is fetched with one GET (a few at a time)
//! and read by the same reader from memory, a larger one by arrow-rs's asynchronous reader
//! (its footer, then the projected column chunks). Each file's columns are adapted to the
//! zone's schema as DataFusion adapts them (by name; a missing column is NULL, another type is
//! cast), the partition values appended.
//!
//! What is read is DataFusion's own answer to "which files": the listing is its
//! `ListingTableUrl` listing of the zone, or of the top-level directories named (files of the
//! format's extension, none empty), each file's partition values parsed and filtered by its
//! own helpers, as its listing table does for a scan's partition filters (which it reports as
//! exact, so they are applied here, and only here). Filters on file columns are applied by
//! DataFusion above this scan.
//!
//! Shares nothing with the runner's route (`landing`, `accel::mapped`): its own listing, its
//! own reads, through the checks' own object-store client. The plain twin is DataFusion's
//! listing table (`IDEMLAKE_ACCELERATE=0`); the tests compare the two on the same zone, on
//! local disk and in an object store.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, RecordBatch, RecordBatchOptions, StructArray, new_null_array};
use arrow::datatypes::{DataType, SchemaRef};
use datafusion::catalog::Session;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::datasource::listing::helpers::{
    expr_applicable_for_cols, filter_partitioned_file, parse_partitions_for_path,
};
use datafusion::datasource::listing::{ListingTableUrl, PartitionedFile};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::Expr;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::execution_plan::ReplaceChildrenOptions;
use datafusion::physical_plan::stream::RecordBatchReceiverStreamBuilder;
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, SendableRecordBatchStream,
};
use futures::{StreamExt, TryStreamExt};
use object_store::ObjectStore;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{ArrowReaderBuilder, ParquetRecordBatchReaderBuilder};
use parquet::arrow::async_reader::ParquetRecordBatchStreamBuilder;
use parquet::file::reader::ChunkReader;

/// A remote file this small or smaller is fetched whole, with one GET; a larger one is read
/// by ranges (its footer, then the columns the scan needs).
pub const WHOLE_FILE_BYTES: u64 = 8 << 20;

/// Remote files fetched at once by one partition of a scan.
const FETCHES: usize = 8;

/// Whole remote files a scan holds in memory at once, fetched or waiting to be read, across
/// its partitions: at most this many times [`WHOLE_FILE_BYTES`] (128 MiB).
const HELD: usize = 16;

/// Directory listings made at once.
const LISTINGS: usize = 8;

/// Where an output column comes from.
#[derive(Debug, Clone)]
enum Column {
    /// The file's column of this name, as this type.
    File(String, DataType),
    /// The file's value of the partition column at this index.
    Partition(usize),
}

/// The files of the zone under `root` (extension `ext`, partitioned by `columns`) that the
/// partition filters among `filters` accept, as DataFusion's listing table lists them: the
/// whole zone, or with `prefixes` (paths below `root`, such as `dt=2026-11-28`) only the files
/// under them.
pub async fn list(
    state: &dyn Session,
    root: &ListingTableUrl,
    ext: &str,
    columns: &[(String, DataType)],
    filters: &[Expr],
    prefixes: Option<&[Path]>,
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
    let store = store.as_ref();
    let listed = |prefix: Option<Path>| async move {
        root.list_prefixed_files(state, store, prefix, ext)
            .await?
            .try_filter(|m| futures::future::ready(m.size > 0))
            .try_collect::<Vec<_>>()
            .await
    };
    let metas: Vec<_> = match prefixes {
        None => listed(None).await?,
        Some(prefixes) => {
            futures::stream::iter(prefixes.iter().cloned())
                .map(|p| listed(Some(p)))
                .buffered(LISTINGS)
                .try_concat()
                .await?
        }
    };
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

/// A scan of `files` (in `store`, the zone's at `root`; remote files of at most `whole` bytes
/// fetched whole) producing `schema` (the table's schema projected; partition columns are
/// those named in `columns`), in `partitions` streams of consecutive files.
pub fn scan(
    files: Vec<PartitionedFile>,
    schema: SchemaRef,
    columns: &[(String, DataType)],
    partitions: usize,
    (store, root, whole): (Arc<dyn ObjectStore>, &ListingTableUrl, u64),
) -> Result<Arc<dyn ExecutionPlan>> {
    let plan: Arc<[Column]> = schema
        .fields()
        .iter()
        .map(|f| match columns.iter().position(|(n, _)| n == f.name()) {
            Some(i) => Column::Partition(i),
            None => Column::File(f.name().clone(), f.data_type().clone()),
        })
        .collect();
    // Local files are read from the file system directly (a read of a part is a `pread`).
    let local = root.scheme() == "file";
    let store = (!local).then_some(store);
    let read = files.clone();
    let held = Arc::new(tokio::sync::Semaphore::new(HELD));
    let per = files.len().div_ceil(partitions.max(1)).max(1);
    let mut streams: Vec<Arc<dyn PartitionStream>> = Vec::new();
    let mut files = files.into_iter().peekable();
    while files.peek().is_some() {
        streams.push(Arc::new(Files {
            schema: schema.clone(),
            plan: plan.clone(),
            files: files.by_ref().take(per).collect(),
            store: store.clone(),
            whole,
            held: held.clone(),
        }));
    }
    let inner: Arc<dyn ExecutionPlan> = if streams.is_empty() {
        Arc::new(datafusion::physical_plan::empty::EmptyExec::new(schema))
    } else {
        Arc::new(StreamingTableExec::try_new(
            schema,
            streams,
            None,
            Vec::new(),
            false,
            None,
        )?)
    };
    Ok(Arc::new(ZoneScanExec { inner, read, local }))
}

/// The checks' own scan of a zone's files: DataFusion's streaming table over `Files`
/// partitions, which says which files it reads (the checks' memo keys on them, see `memo`).
#[derive(Debug)]
pub struct ZoneScanExec {
    inner: Arc<dyn ExecutionPlan>,
    read: Vec<PartitionedFile>,
    /// Its files are on local disk.
    local: bool,
}

impl ZoneScanExec {
    /// The files the scan reads, with their partition values.
    pub fn files(&self) -> &[PartitionedFile] {
        &self.read
    }

    /// Whether its files are on local disk (their locations are absolute paths).
    pub fn is_local(&self) -> bool {
        self.local
    }
}

impl DisplayAs for ZoneScanExec {
    fn fmt_as(&self, _: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "ZoneScanExec: files={}", self.read.len())
    }
}

impl ExecutionPlan for ZoneScanExec {
    fn name(&self) -> &'static str {
        "ZoneScanExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.inner.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn apply_expressions(
        &self,
        _: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn replace_children(
        self: Arc<Self>,
        _: Vec<Arc<dyn ExecutionPlan>>,
        _: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn with_new_children(
        self: Arc<Self>,
        _: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        self.inner.execute(partition, context)
    }
}

/// One partition's files, read one after the other: local ones on a blocking thread, remote
/// ones fetched a few at a time.
#[derive(Debug)]
struct Files {
    schema: SchemaRef,
    plan: Arc<[Column]>,
    files: Vec<PartitionedFile>,
    /// `None`: the files are on local disk.
    store: Option<Arc<dyn ObjectStore>>,
    /// A remote file this small or smaller is fetched whole.
    whole: u64,
    /// Permits to hold a fetched file, shared by the scan's partitions (see [`HELD`]).
    held: Arc<tokio::sync::Semaphore>,
}

impl PartitionStream for Files {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let mut builder = RecordBatchReceiverStreamBuilder::new(self.schema.clone(), 2);
        let tx = builder.tx();
        let out = Out {
            schema: self.schema.clone(),
            plan: self.plan.clone(),
            batch_size: ctx.session_config().batch_size(),
        };
        let files = self.files.clone();
        let Some(store) = self.store.clone() else {
            builder.spawn_blocking(move || {
                let fs = LocalFileSystem::new();
                for file in &files {
                    let location = &file.object_meta.location;
                    let path = fs
                        .path_to_filesystem(location)
                        .map_err(|e| DataFusionError::ObjectStore(Box::new(e)))?;
                    let handle = std::fs::File::open(&path).map_err(|e| out.context(file, &e))?;
                    let opened = handle.metadata().map_err(|e| out.context(file, &e))?;
                    super::ranges::local_unchanged(&file.object_meta, &opened)
                        .map_err(|e| out.context(file, &e))?;
                    // `false`: the query was dropped.
                    let send = &mut |batch| tx.blocking_send(Ok(batch)).is_ok();
                    if !out.read(handle, file, send)? {
                        break;
                    }
                }
                Ok(())
            });
            return builder.build();
        };
        let (whole, held) = (self.whole, self.held.clone());
        builder.spawn(async move {
            let out = Arc::new(out);
            let fetched = futures::stream::iter(files)
                .map(|file| super::ranges::fetch(store.clone(), file, whole, held.clone()))
                // In the order they arrive: a fetched file holding a permit is always read
                // next, never waiting behind one that waits for a permit.
                .buffer_unordered(FETCHES);
            futures::pin_mut!(fetched);
            while let Some(fetched) = fetched.next().await {
                let (file, bytes) = fetched?;
                let going = match bytes {
                    Some((bytes, permit)) => {
                        let (out, tx) = (out.clone(), tx.clone());
                        tokio::task::spawn_blocking(move || {
                            let send = &mut |batch| tx.blocking_send(Ok(batch)).is_ok();
                            let read = out.read(bytes, &file, send);
                            drop(permit);
                            read
                        })
                        .await
                        .map_err(|e| DataFusionError::External(Box::new(e)))??
                    }
                    None => out.read_ranges(store.clone(), &file, &tx).await?,
                };
                if !going {
                    break;
                }
            }
            Ok(())
        });
        builder.build()
    }
}

/// What a scan produces from each file.
struct Out {
    schema: SchemaRef,
    plan: Arc<[Column]>,
    batch_size: usize,
}

impl Out {
    /// An error of reading `file`.
    fn context(&self, file: &PartitionedFile, e: &dyn std::fmt::Display) -> DataFusionError {
        DataFusionError::Execution(format!(
            "the checks' read of {}: {e}",
            file.object_meta.location
        ))
    }

    /// The file's columns the scan needs, among those of `builder`'s file.
    fn projection<T>(&self, builder: &ArrowReaderBuilder<T>) -> ProjectionMask {
        let file_schema = builder.schema();
        let mut wanted: Vec<usize> = self
            .plan
            .iter()
            .filter_map(|c| match c {
                Column::File(name, _) => file_schema.index_of(name).ok(),
                Column::Partition(_) => None,
            })
            .collect();
        wanted.sort_unstable();
        wanted.dedup();
        ProjectionMask::roots(builder.parquet_schema(), wanted)
    }

    /// `file`'s rows (read from `source`, all of it at hand) as the scan's columns, batch by
    /// batch to `send` (`false`: stop reading); `false` if it stopped.
    fn read<R: ChunkReader + 'static>(
        &self,
        source: R,
        file: &PartitionedFile,
        send: &mut dyn FnMut(RecordBatch) -> bool,
    ) -> Result<bool> {
        let builder =
            ParquetRecordBatchReaderBuilder::try_new(source).map_err(|e| self.context(file, &e))?;
        let mask = self.projection(&builder);
        let reader = builder
            .with_projection(mask)
            .with_batch_size(self.batch_size)
            .build()
            .map_err(|e| self.context(file, &e))?;
        for batch in reader {
            let batch = batch.map_err(|e| self.context(file, &e))?;
            if !send(self.adapt(file, &batch)?) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// `file`'s rows read by ranges from `store`, batch by batch to `tx`; `false` if the
    /// query was dropped.
    async fn read_ranges(
        &self,
        store: Arc<dyn ObjectStore>,
        file: &PartitionedFile,
        tx: &tokio::sync::mpsc::Sender<Result<RecordBatch>>,
    ) -> Result<bool> {
        let reader = super::ranges::Ranges {
            store,
            listed: file.object_meta.clone(),
        };
        let builder = ParquetRecordBatchStreamBuilder::new(reader)
            .await
            .map_err(|e| self.context(file, &e))?;
        let mask = self.projection(&builder);
        let mut stream = builder
            .with_projection(mask)
            .with_batch_size(self.batch_size)
            .build()
            .map_err(|e| self.context(file, &e))?;
        while let Some(batch) = stream.next().await {
            let batch = batch.map_err(|e| self.context(file, &e))?;
            if tx.send(Ok(self.adapt(file, &batch)?)).await.is_err() {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// `batch` of `file` as the scan's columns.
    fn adapt(&self, file: &PartitionedFile, batch: &RecordBatch) -> Result<RecordBatch> {
        let rows = batch.num_rows();
        let columns = self
            .plan
            .iter()
            .map(|c| -> Result<ArrayRef> {
                Ok(match c {
                    Column::Partition(i) => file.partition_values[*i].to_array_of_size(rows)?,
                    Column::File(name, ty) => match batch.column_by_name(name) {
                        None => new_null_array(ty, rows),
                        Some(a) if a.data_type() == ty => a.clone(),
                        Some(a) => conform(a, ty).map_err(|e| self.context(file, &e))?,
                    },
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let options = RecordBatchOptions::new().with_row_count(Some(rows));
        Ok(RecordBatch::try_new_with_options(
            self.schema.clone(),
            columns,
            &options,
        )?)
    }
}

/// Array `a` as type `ty`: arrow's cast, except for a struct, whose fields are matched by name
/// (a field the file lacks is NULL, one the zone lacks is dropped), field by field.
fn conform(a: &ArrayRef, ty: &DataType) -> std::result::Result<ArrayRef, arrow::error::ArrowError> {
    let (DataType::Struct(want), Some(got)) = (ty, a.as_any().downcast_ref::<StructArray>()) else {
        return arrow::compute::cast(a, ty);
    };
    let columns = want
        .iter()
        .map(|f| match got.column_by_name(f.name()) {
            Some(c) => conform(c, f.data_type()),
            None => Ok(new_null_array(f.data_type(), a.len())),
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Ok(Arc::new(StructArray::try_new(
        want.clone(),
        columns,
        got.nulls().cloned(),
    )?))
}
