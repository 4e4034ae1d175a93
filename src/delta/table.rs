//! The target table itself: open it (through the shared object store), create it on first
//! use, check a query's schema against it, and the writer settings and commit rules it sets.

use std::sync::Arc;

use arrow::datatypes::Schema;
use delta_kernel::engine::arrow_conversion::TryIntoKernel;
use deltalake::datafile::writer::WriterConfig;
use deltalake::kernel::StructType;
use deltalake::kernel::transaction::TransactionError;
use deltalake::operations::write::WriterStatsConfig;
use deltalake::protocol::SaveMode;
use deltalake::{DeltaTable, DeltaTableBuilder, DeltaTableError};
use url::Url;

use crate::error::{Error, Result};

/// Commit attempts delta-rs makes when other writers commit first (disjoint windows rebase).
pub const COMMIT_RETRIES: usize = 25;

/// Open the Delta table at `url`; an empty location gives an unloaded table (`version() == None`).
pub async fn open(url: &Url) -> Result<DeltaTable> {
    let url = if url.scheme() == "file" {
        deltalake::ensure_table_uri(url.as_str())?
    } else {
        url.clone()
    };
    let mut table = builder(&url)?.build()?;
    match table.load().await {
        Ok(()) => Ok(table),
        Err(DeltaTableError::NotATable(_)) => Ok(table),
        Err(e) => Err(Error::runtime(format!("cannot open the target table: {e}"))),
    }
}

/// A table builder using the shared object store for `url`'s bucket (S3) or the local disk.
pub fn builder(url: &Url) -> Result<DeltaTableBuilder> {
    let b = DeltaTableBuilder::from_url(url.clone())?;
    Ok(match crate::storage::store_for(url)? {
        Some((_, store)) => b.with_storage_backend(crate::fault::wrap_store(store), url.clone()),
        None if crate::fault::wants_store_wrapper() => b.with_storage_backend(
            crate::fault::wrap_store(Arc::new(object_store::local::LocalFileSystem::new())),
            url.clone(),
        ),
        None => b,
    })
}

/// Load the table at `url` as of `version`, reading the log from storage.
pub async fn open_at(url: &Url, version: u64) -> Result<DeltaTable> {
    let mut table = builder(url)?.build()?;
    table
        .load_version(version)
        .await
        .map_err(|e| Error::runtime(format!("cannot read back version {version}: {e}")))?;
    Ok(table)
}

/// Create the table (version 0, no data) partitioned by the window column, unless it exists.
pub async fn ensure_exists(
    table: DeltaTable,
    schema: &Schema,
    partition_by: &str,
    name: &str,
) -> Result<DeltaTable> {
    if table.version().is_some() {
        return Ok(table);
    }
    let kernel: StructType = schema
        .try_into_kernel()
        .map_err(|e| Error::input(format!("the output schema cannot be stored in Delta: {e}")))?;
    let created = table
        .create()
        .with_columns(kernel.fields().cloned())
        .with_partition_columns(vec![partition_by.to_string()])
        .with_table_name(name)
        .with_save_mode(SaveMode::ErrorIfExists)
        .await;
    match created {
        Ok(t) => Ok(t),
        // Another process may have created it first: use theirs (the schema check follows).
        // If there is still no table, the creation failed for its own reason: say which.
        Err(e) => {
            let again = open(table.table_url()).await?;
            if again.version().is_none() {
                return Err(Error::runtime(format!(
                    "cannot create the target table: {e}"
                )));
            }
            Ok(again)
        }
    }
}

/// Check the output schema against the table's; returns the column order to write in.
pub fn check_schema(table: &DeltaTable, schema: &Schema, partition_by: &str) -> Result<()> {
    let state = table.snapshot()?;
    let table_schema = state.schema();
    let parts = state.metadata().partition_columns();
    if parts.len() != 1 || parts[0] != partition_by {
        return Err(Error::input(format!(
            "the target table is partitioned by [{}], but the task's window column is `{partition_by}`; a window overwrite needs the table partitioned by exactly that column",
            parts.join(", ")
        )));
    }
    let ours: StructType = schema
        .try_into_kernel()
        .map_err(|e| Error::input(format!("the output schema cannot be stored in Delta: {e}")))?;
    let theirs: Vec<(String, String)> = table_schema
        .fields()
        .map(|f| (f.name().clone(), f.data_type().to_string()))
        .collect();
    let mine: Vec<(String, String)> = ours
        .fields()
        .map(|f| (f.name().clone(), f.data_type().to_string()))
        .collect();
    if theirs != mine {
        let show = |v: &[(String, String)]| {
            v.iter()
                .map(|(n, t)| format!("{n} {t}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        return Err(Error::input(format!(
            "the query's columns do not match the target table's (name, type and order must match; schema evolution is not automatic)\n  table: {}\n  query: {}",
            show(&theirs),
            show(&mine)
        )));
    }
    Ok(())
}

/// Writer settings for the table: its stats configuration (Delta's defaults — 32 indexed
/// columns — for a table not created yet), 128 MiB files.
pub fn writer_config(
    table: &DeltaTable,
    schema: Arc<Schema>,
    partition_by: &str,
) -> Result<WriterConfig> {
    let (num_indexed_cols, stats_columns) = if table.version().is_some() {
        let stats =
            WriterStatsConfig::from_config(table.snapshot()?.snapshot().table_configuration());
        (stats.num_indexed_cols, stats.stats_columns)
    } else {
        (
            delta_kernel::table_properties::DataSkippingNumIndexedCols::NumColumns(32),
            None,
        )
    };
    Ok(WriterConfig::new(
        schema,
        vec![partition_by.to_string()],
        None,
        std::num::NonZeroU64::new(128 * 1024 * 1024),
        None,
        num_indexed_cols,
        stats_columns,
    ))
}

/// How often a commit whose window was concurrently rewritten is re-applied on top.
pub const CONFLICT_RETRIES: usize = 5;

/// Is `e` a Delta commit conflict (another writer touched what this commit read)?
pub fn is_conflict(e: &DeltaTableError) -> bool {
    matches!(
        e,
        DeltaTableError::Transaction {
            source: TransactionError::CommitConflict(_)
        } | DeltaTableError::VersionAlreadyExists(_)
    )
}

/// What committing `version` owes the table's upkeep: `Some(cleanup)` when that commit is
/// due a checkpoint (by the table's `delta.checkpointInterval`), `cleanup` saying whether
/// expired log files are then deleted too (`delta.enableExpiredLogCleanup`); `None` when
/// no checkpoint is due. Expired logs are cleaned up only at checkpoints: delta-rs otherwise
/// lists the whole `_delta_log` after *every* commit to look for them, a cost that grows
/// with the table's history; Spark likewise cleans up only at checkpoints.
pub fn checkpoint_due(table: &DeltaTable, version: i64) -> Result<Option<bool>> {
    use deltalake::table::config::TablePropertiesExt;
    let snapshot = table.snapshot()?;
    let config = snapshot.table_config();
    let interval = config.checkpoint_interval().get() as i64;
    Ok(((version + 1) % interval == 0).then(|| config.enable_expired_log_cleanup()))
}

/// Whether committing `version` should also delete expired log files (see
/// [`checkpoint_due`]).
pub fn cleanup_due(table: &DeltaTable, version: i64) -> Result<bool> {
    Ok(checkpoint_due(table, version)? == Some(true))
}
