//! The target table itself: open it (through the shared object store), create it on first
//! use, check a query's schema against it, and the writer settings and commit rules it sets.

use std::sync::Arc;

use arrow::datatypes::{Schema, SchemaRef};
use delta_kernel::engine::arrow_conversion::TryIntoKernel;
use deltalake::datafile::writer::WriterConfig;
use deltalake::kernel::transaction::TransactionError;
use deltalake::kernel::{DataType, Metadata, MetadataExt, StructType};
use deltalake::operations::write::WriterStatsConfig;
use deltalake::protocol::SaveMode;
use deltalake::table::state::DeltaTableState;
use deltalake::{DeltaTable, DeltaTableBuilder, DeltaTableError, TableProperty};
use url::Url;

use crate::error::{Error, Result};
use crate::task::OnSchemaChange;

/// Commit attempts delta-rs makes when other writers commit first (disjoint windows rebase).
pub const COMMIT_RETRIES: usize = 25;

/// Open the Delta table at `url`; an empty location gives an unloaded table (`version() == None`).
/// A local directory that does not exist is not created: read-only commands (`validate`,
/// `status`, `audit`, `verify`) left an empty `lake/<task>/` behind; the first commit creates
/// it (the local store creates the directories it writes into).
pub async fn open(url: &Url) -> Result<DeltaTable> {
    let missing = url.scheme() == "file"
        && url
            .to_file_path()
            .is_ok_and(|p| !p.try_exists().unwrap_or(true));
    let url = if url.scheme() == "file" && !missing {
        deltalake::ensure_table_uri(url.as_str())?
    } else {
        url.clone()
    };
    let mut table = match missing && !crate::fault::wants_store_wrapper() {
        true => builder_for(&url)?
            .with_storage_backend(
                Arc::new(object_store::local::LocalFileSystem::new()),
                url.clone(),
            )
            .build()?,
        false => builder(&url)?.build()?,
    };
    if missing {
        return Ok(table);
    }
    match table.load().await {
        Ok(()) => Ok(table),
        Err(DeltaTableError::NotATable(_)) => Ok(table),
        Err(e) => Err(Error::runtime(format!("cannot open the target table: {e}"))),
    }
}

/// A table builder using the shared object store for `url`'s bucket (S3) or the local disk.
pub fn builder(url: &Url) -> Result<DeltaTableBuilder> {
    let b = builder_for(url)?;
    Ok(match crate::storage::store_for(url)? {
        Some((_, store)) => b.with_storage_backend(crate::fault::wrap_store(store), url.clone()),
        None if crate::fault::wants_store_wrapper() => b.with_storage_backend(
            crate::fault::wrap_store(Arc::new(object_store::local::LocalFileSystem::new())),
            url.clone(),
        ),
        None => b,
    })
}

/// A bare table builder for `url`; its object store is given by the caller
/// (`with_storage_backend`), as idemlake does for every table on S3.
pub fn builder_for(url: &Url) -> Result<DeltaTableBuilder> {
    register_s3_log_stores();
    Ok(DeltaTableBuilder::from_url(url.clone())?)
}

/// delta-rs's default log store for `s3://` and `s3a://` tables, over the object store each
/// table is given. It is what deltalake's `s3` feature registers (its S3 log store factory
/// returns the default log store), without the AWS SDK that feature compiles in: idemlake
/// never lets delta-rs build an S3 client, it passes its own (`crate::storage`).
fn register_s3_log_stores() {
    use deltalake::logstore::{
        LogStore, LogStoreFactory, ObjectStoreRef, StorageConfig, default_logstore,
        logstore_factories,
    };

    struct DefaultOverGivenStore;
    impl LogStoreFactory for DefaultOverGivenStore {
        fn with_options(
            &self,
            prefixed_store: ObjectStoreRef,
            root_store: ObjectStoreRef,
            location: &Url,
            options: &StorageConfig,
        ) -> deltalake::DeltaResult<Arc<dyn LogStore>> {
            Ok(default_logstore(
                prefixed_store,
                root_store,
                location,
                options,
            ))
        }
    }

    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let factory: Arc<dyn LogStoreFactory> = Arc::new(DefaultOverGivenStore);
        for scheme in ["s3://", "s3a://"] {
            let url = Url::parse(scheme).expect("a scheme is a URL");
            logstore_factories().insert(url, factory.clone());
        }
    });
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
        // Checkpoints also hold each file's statistics as a struct (the JSON string stays, for
        // readers that want it): loading the table then reads them parsed instead of parsing
        // one JSON string per live file, the largest part of a load (a day window on a table
        // of 2,500 files: 0.93-0.95x the wall time). Spark, DuckDB and delta-rs read both.
        .with_configuration_property(TableProperty::CheckpointWriteStatsAsStruct, Some("true"))
        // A checkpoint every 10 commits (Spark's default; delta-rs's is 100): loading the
        // table reads at most 9 commit files after the checkpoint, not up to 99 — on an object
        // store one GET each, every run (a day window on S3 read 35 log files of 34 commits).
        .with_configuration_property(TableProperty::CheckpointInterval, Some("10"))
        .with_table_name(name)
        .with_save_mode(SaveMode::ErrorIfExists)
        // Losing the race for version 0 ends the creation: delta-rs would otherwise retry it
        // on top of the winner's commits, writing a second CREATE TABLE (a new table id) later
        // in the log after reading each missed commit in turn.
        .with_commit_properties(
            deltalake::kernel::transaction::CommitProperties::default().with_max_retries(0),
        )
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

/// How a run's output goes into the table's columns (see [`schema_plan`]).
#[derive(Debug, Clone)]
pub struct SchemaPlan {
    /// The columns the data files are written with: the table's, in its order, then the ones
    /// this run adds; each typed as the query produces it unless it is cast up to the table's
    /// wider type (`evolve`).
    pub target: SchemaRef,
    /// The table's metadata with its new schema, when this run adds columns (committed with
    /// the window's data, in the same commit).
    pub metadata: Option<Metadata>,
    /// The columns this run adds.
    pub added: Vec<String>,
}

/// One column's difference between the table and the query.
enum Change {
    Added(String, DataType),
    Removed(String, DataType),
    Retyped(String, DataType, DataType),
    Widened(String),
}

/// Whether values of `from` (the query's type) fit `to` (the table's) without loss.
fn widens(from: &DataType, to: &DataType) -> bool {
    use deltalake::kernel::PrimitiveType as P;
    let (DataType::Primitive(a), DataType::Primitive(b)) = (from, to) else {
        return false;
    };
    match (a, b) {
        (P::Byte, P::Short | P::Integer | P::Long)
        | (P::Short, P::Integer | P::Long)
        | (P::Integer, P::Long)
        | (P::Float, P::Double) => true,
        (P::Decimal(x), P::Decimal(y)) => {
            let (p1, s1) = (i32::from(x.precision()), i32::from(x.scale()));
            let (p2, s2) = (i32::from(y.precision()), i32::from(y.scale()));
            s2 >= s1 && p2 - s2 >= p1 - s1
        }
        _ => false,
    }
}

/// Check the query's output `schema` against the table and decide, under `policy`, what the
/// run writes: the same columns (the common case), new columns added to the table
/// (`add_columns`, `evolve`), narrower values cast up (`evolve`). Anything else is refused
/// with the difference column by column (exit 2, nothing written). A table not created yet
/// takes the query's columns.
pub fn schema_plan(
    table: &DeltaTable,
    schema: &SchemaRef,
    partition_by: &str,
    policy: OnSchemaChange,
) -> Result<SchemaPlan> {
    let same = SchemaPlan {
        target: schema.clone(),
        metadata: None,
        added: Vec::new(),
    };
    if table.version().is_none() {
        return Ok(same);
    }
    let state = table.snapshot()?;
    crate::delta::features::check_writable(state)?;
    let table_schema = state.schema();
    let parts = state.metadata().partition_columns();
    if parts.len() != 1 || parts[0] != partition_by {
        return Err(Error::input(format!(
            "the target table is partitioned by [{}], but the task's window column is `{partition_by}`; a window overwrite needs the table partitioned by exactly that column: `idemlake adopt` rewrites it so, every row kept, in one commit (see the guide on taking over a table)",
            parts.join(", ")
        )));
    }
    let ours: StructType = schema
        .as_ref()
        .try_into_kernel()
        .map_err(|e| Error::input(format!("the output schema cannot be stored in Delta: {e}")))?;
    let theirs: Vec<(String, DataType)> = table_schema
        .fields()
        .map(|f| (f.name().clone(), f.data_type().clone()))
        .collect();
    let mine: Vec<(String, DataType)> = ours
        .fields()
        .map(|f| (f.name().clone(), f.data_type().clone()))
        .collect();
    if theirs == mine {
        return Ok(same);
    }
    let changes = differences(policy, &theirs, &mine);
    let refused = |c: &Change| match c {
        Change::Removed(..) | Change::Retyped(..) => true,
        Change::Added(..) => policy == OnSchemaChange::Fail,
        Change::Widened(..) => false,
    };
    let reordered = changes.is_empty();
    if changes.iter().any(refused) || (reordered && policy == OnSchemaChange::Fail) {
        return Err(Error::input(describe(policy, &changes, &theirs, &mine)));
    }
    planned(schema, state, &theirs, &changes)
}

/// The columns that differ between the table (`theirs`) and the query (`mine`), under
/// `policy`: removed, retyped, widened (`evolve` only) and added ones; none when only the
/// order differs.
fn differences(
    policy: OnSchemaChange,
    theirs: &[(String, DataType)],
    mine: &[(String, DataType)],
) -> Vec<Change> {
    let find = |v: &[(String, DataType)], n: &str| v.iter().find(|(m, _)| m == n).cloned();
    let mut changes = Vec::new();
    for (name, t) in theirs {
        match find(mine, name) {
            None => changes.push(Change::Removed(name.clone(), t.clone())),
            Some((_, q)) if &q == t => {}
            Some((_, q)) if policy == OnSchemaChange::Evolve && widens(&q, t) => {
                changes.push(Change::Widened(name.clone()));
            }
            Some((_, q)) => changes.push(Change::Retyped(name.clone(), t.clone(), q)),
        }
    }
    for (name, q) in mine {
        if find(theirs, name).is_none() {
            changes.push(Change::Added(name.clone(), q.clone()));
        }
    }
    changes
}

/// The plan for changes the policy allows: the files' columns (the table's in its order, cast
/// up where evolved, then the new ones) and, when columns are added, the table's new metadata.
fn planned(
    schema: &SchemaRef,
    state: &DeltaTableState,
    theirs: &[(String, DataType)],
    changes: &[Change],
) -> Result<SchemaPlan> {
    // The files' columns: the table's in its order (cast up where evolved), then the new ones.
    let field = |name: &str| schema.field_with_name(name).cloned();
    let table_arrow = state.snapshot().arrow_schema();
    let mut fields = Vec::new();
    for (name, _) in theirs {
        let widened = changes
            .iter()
            .any(|c| matches!(c, Change::Widened(n) if n == name));
        fields.push(if widened {
            table_arrow.field_with_name(name)?.clone()
        } else {
            field(name)?
        });
    }
    let added: Vec<String> = changes
        .iter()
        .filter_map(|c| match c {
            Change::Added(n, _) => Some(n.clone()),
            _ => None,
        })
        .collect();
    for name in &added {
        fields.push(field(name)?);
    }
    let target: SchemaRef = Arc::new(Schema::new(fields));
    let metadata = if added.is_empty() {
        None
    } else {
        let new: StructType = target.as_ref().try_into_kernel().map_err(|e| {
            Error::input(format!("the output schema cannot be stored in Delta: {e}"))
        })?;
        Some(
            state
                .metadata()
                .clone()
                .with_schema(&new)
                .map_err(|e| Error::runtime(format!("the new table schema: {e}")))?,
        )
    };
    Ok(SchemaPlan {
        target,
        metadata,
        added,
    })
}

/// The refusal: every difference, one line each, and what would allow it.
fn describe(
    policy: OnSchemaChange,
    changes: &[Change],
    theirs: &[(String, DataType)],
    mine: &[(String, DataType)],
) -> String {
    let mut s = format!(
        "the query's columns differ from the target table's ([target] on_schema_change = \"{}\"); nothing was written:",
        policy.as_str()
    );
    for c in changes {
        s.push_str(&match c {
            Change::Added(n, t) => format!("\n  + {n} {t}: new in the query"),
            Change::Removed(n, t) => format!("\n  - {n} {t}: in the table, not in the query"),
            Change::Retyped(n, t, q) => format!("\n  ~ {n}: table {t}, query {q}"),
            Change::Widened(n) => format!("\n  = {n}: cast up to the table's type"),
        });
    }
    if changes.is_empty() {
        let names = |v: &[(String, DataType)]| {
            v.iter()
                .map(|(n, _)| n.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        s.push_str(&format!(
            "\n  column order: table {}; query {}",
            names(theirs),
            names(mine)
        ));
    }
    let hint = match policy {
        OnSchemaChange::Fail => {
            "on_schema_change = \"add_columns\" adds new columns (older windows read NULL) and writes columns in the table's order; \"evolve\" also casts narrower types up to the table's"
        }
        OnSchemaChange::AddColumns => {
            "columns can be added, never removed or retyped; \"evolve\" casts narrower types up to the table's (INT into BIGINT, FLOAT into DOUBLE, a decimal into a wider one)"
        }
        OnSchemaChange::Evolve => {
            "columns can be added and narrower types cast up to the table's; removing a column, or a type wider than the table's (which would need Delta's typeWidening feature), cannot"
        }
    };
    s.push_str(&format!("\n  {hint}"));
    s
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
