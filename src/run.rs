//! Drives one window through the pipeline: plan → execute → reconcile → publish → read back.
//!
//! Ordering is the guarantee: data files are written first (invisible), every check runs on
//! them, and only then is the single commit made. Any failure before the commit publishes
//! nothing; the commit itself is atomic; the read-back after it fails loudly if the log
//! disagrees with what was written. Nothing here reads the wall clock to decide *what* to
//! compute: the window comes from the caller.

use std::sync::Arc;
use std::time::Instant;

use arrow::datatypes::SchemaRef;
use datafusion::prelude::{ParquetReadOptions, SessionContext};
use deltalake::DeltaTable;
use deltalake::datafile::writer::WriterConfig;
use object_store::local::LocalFileSystem;

use crate::error::{Error, ErrorKind, Result};
use crate::execute::{self, Bounds, Sink, Staged};
use crate::plan::{self, Planned};
use crate::project::Project;
use crate::publish::{self, PartitionRange};
use crate::reconcile::{self, Check};
use crate::record::{Report, RunRecord, Status};
use crate::sources;
use crate::task::{Mode, OnEmpty, OnMismatch, Task};
use crate::window::Window;

/// A DataFusion session configured for idemlake: standard SQL identifier rules (unquoted
/// names are case-insensitive), Delta's planner for Delta sources.
pub fn new_session() -> Result<SessionContext> {
    let overrides = std::collections::HashMap::from([(
        "datafusion.sql_parser.enable_ident_normalization".to_string(),
        "true".to_string(),
    )]);
    Ok(
        deltalake::delta_datafusion::DeltaSessionContext::new_with_session_overrides(&overrides)?
            .into_inner(),
    )
}

/// The window's bounds on the partition column (for the row check and the log).
pub fn partition_range(task: &Task, w: &Window) -> PartitionRange {
    if task.grain.uses_dates() {
        PartitionRange::Date(
            plan::epoch_days(w.start_date()),
            plan::epoch_days(w.end_date()),
        )
    } else {
        PartitionRange::Timestamp(w.start_ts().as_microsecond(), w.end_ts().as_microsecond())
    }
}

fn bounds(task: &Task, w: &Window) -> Bounds {
    let (lo, hi) = partition_range(task, w).lo_hi();
    let shown = if task.grain.uses_dates() {
        format!("[{}, {})", w.start_date(), w.end_date())
    } else {
        format!("[{}, {})", w.start_ts(), w.end_ts())
    };
    Bounds {
        column: task.partition_by.clone(),
        lo,
        hi,
        shown,
    }
}

/// A report for a window that has not run (yet); filled in by [`Runner::run`].
fn new_report(task: &Task, window: &Window, run_id: &str) -> Report {
    Report {
        task: task.name.clone(),
        window: window.into(),
        status: Status::Failed,
        rows_written: 0,
        table_version: None,
        reconciliation: Vec::new(),
        duration_ms: 0,
        error: None,
        run_id: Some(run_id.to_string()),
        sql_hash: None,
        exit_code: None,
    }
}

/// Mark `report` as failed with `e`.
pub fn fail_report(report: &mut Report, e: &Error) {
    report.status = if e.kind() == ErrorKind::Mismatch {
        Status::Mismatch
    } else {
        Status::Failed
    };
    report.error = Some(e.message().to_string());
    report.exit_code = Some(e.kind().exit_code());
    report.rows_written = 0;
    report.table_version = None;
}

/// Run one window and publish it; always returns a report (errors included).
pub async fn run_window(project: &Project, task: &Task, window: &Window) -> Report {
    let started = Instant::now();
    match Runner::new(project, task).await {
        Ok(runner) => runner.run(window).await,
        Err(e) => {
            let mut report = new_report(task, window, &uuid::Uuid::new_v4().to_string());
            fail_report(&mut report, &e);
            report.duration_ms = started.elapsed().as_millis() as u64;
            report
        }
    }
}

/// Everything a task's windows share: one DataFusion session with the sources registered
/// (Delta sources pinned once), and the target table's latest known state. A backfill runs
/// many windows, concurrently, through one runner.
pub struct Runner {
    task: Task,
    url: url::Url,
    ctx: SessionContext,
    sources: Vec<sources::SourceVersion>,
    table: tokio::sync::Mutex<DeltaTable>,
}

impl Runner {
    pub async fn new(project: &Project, task: &Task) -> Result<Runner> {
        let ctx = new_session()?;
        let sources = sources::register(&ctx, &task.sources).await?;
        let url = project.table_url(task)?;
        let table = publish::open(&url).await?;
        Ok(Runner {
            task: task.clone(),
            url,
            ctx,
            sources,
            table: tokio::sync::Mutex::new(table),
        })
    }

    pub fn task(&self) -> &Task {
        &self.task
    }

    /// The table as last seen by this runner (refresh with [`Runner::refresh`]).
    pub async fn table(&self) -> DeltaTable {
        self.table.lock().await.clone()
    }

    /// Bring the runner's table state up to the latest version.
    pub async fn refresh(&self) -> Result<()> {
        let mut t = self.table.lock().await;
        if t.version().is_some() {
            t.update_state().await?;
        } else {
            *t = publish::open(&self.url).await?;
        }
        Ok(())
    }

    /// Plan the task for `window` in this runner's session.
    pub async fn plan(&self, window: &Window) -> Result<Planned> {
        plan::plan(&self.ctx, &self.task, Some(window)).await
    }

    /// Run one window and publish it.
    pub async fn run(&self, window: &Window) -> Report {
        let started = Instant::now();
        let run_id = uuid::Uuid::new_v4().to_string();
        let mut report = new_report(&self.task, window, &run_id);
        if let Err(e) = self.run_inner(window, &run_id, &mut report).await {
            fail_report(&mut report, &e);
        }
        report.duration_ms = started.elapsed().as_millis() as u64;
        let store = self.table.lock().await.log_store().object_store(None);
        crate::runlog::record(&store, &report).await;
        report
    }

    async fn run_inner(&self, window: &Window, run_id: &str, report: &mut Report) -> Result<()> {
        let task = &self.task;
        let ctx = &self.ctx;
        let url = &self.url;
        let planned = self.plan(window).await?;
        report.sql_hash = Some(planned.sql_hash.clone());
        let table = self.table().await;
        if table.version().is_some() {
            publish::check_schema(&table, &planned.schema, &task.partition_by)?;
        }
        crate::storage::probe_conditional_put(url).await?;

        let mut record = RunRecord::new(task, window, run_id, &planned.sql_hash);
        record.sources = self.sources.clone();

        // Stage the rows: into the table's own directory (overwrite) or a private temp dir (merge).
        let temp = tempdir_for_merge(task)?;
        let (store, config) = match &temp {
            None => (
                table.log_store().object_store(None),
                writer_config(&table, planned.schema.clone(), &task.partition_by)?,
            ),
            Some(dir) => temp_sink(dir, &planned)?,
        };
        let staged = stage(
            ctx,
            task,
            window,
            &planned,
            Sink {
                store: store.clone(),
                config,
            },
        )
        .await?;
        tracing::info!(
            window = %window.label(),
            rows = staged.rows,
            files = staged.adds.len(),
            "staged the window's rows (not visible to readers yet)"
        );

        // Checks, before anything is published.
        let mut checks = vec![Check::counts(
            "rows_staged",
            staged.rows,
            execute::rows_in(&staged.adds)?,
        )];
        let mut warn = false;
        if let (Some(r), Some(src)) = (&task.reconcile, &planned.reconcile_source) {
            let source_rows = src.clone().collect().await?;
            let out = staged.output_aggregates.as_deref().unwrap_or_default();
            let rc = reconcile::compare(&source_rows, out, &r.tolerance)?;
            if rc.iter().any(|c| !c.ok) {
                match r.on_mismatch {
                    OnMismatch::Fail => {
                        execute::discard(&store, &staged.adds).await;
                        report.reconciliation = checks.iter().chain(&rc).cloned().collect();
                        return Err(Error::mismatch(format!(
                            "reconciliation failed, nothing was published: {}",
                            reconcile::describe_failures(&rc)
                        )));
                    }
                    OnMismatch::Warn => warn = true,
                }
            }
            checks.extend(rc);
        }
        if !checks[0].ok {
            execute::discard(&store, &staged.adds).await;
            report.reconciliation = checks.clone();
            return Err(Error::runtime(format!(
                "the files written hold {} rows but the query produced {}; nothing was published",
                checks[0].output, checks[0].source
            )));
        }
        report.reconciliation = checks.clone();
        tracing::info!(window = %window.label(), checks = checks.len(), warn, "reconciled");

        if staged.rows == 0 {
            match task.on_empty {
                OnEmpty::Fail => {
                    return Err(Error::runtime(format!(
                        "the query returned no rows for window {} and [write].on_empty = \"fail\"; nothing was published",
                        window.label()
                    )));
                }
                OnEmpty::Skip => {
                    report.status = Status::Skipped;
                    report.table_version = table.version().map(|v| v as i64);
                    return Ok(());
                }
                OnEmpty::Clear => {}
            }
        }

        crate::fault::hit("before-commit", None)?;
        record.rows_written = staged.rows;
        record.reconciliation = checks.clone();
        let range = partition_range(task, window);
        let mut table = {
            let mut shared = self.table.lock().await;
            if shared.version().is_none() {
                *shared = publish::ensure_exists(
                    shared.clone(),
                    &planned.schema,
                    &task.partition_by,
                    &task.name,
                )
                .await?;
                publish::check_schema(&shared, &planned.schema, &task.partition_by)?;
            }
            shared.clone()
        };
        // A private copy at the pre-commit version, to read the commit back from storage.
        let mut before = table.clone();

        let (version, expected_rows) = match task.mode {
            Mode::Overwrite => {
                let committed = publish::commit_overwrite(
                    &mut table,
                    &task.partition_by,
                    range,
                    plan::replace_where(task, window),
                    staged.adds,
                    record.app_metadata(),
                    &publish::RunTags {
                        run_id: run_id.to_string(),
                        window: window.label(),
                        sql_hash: planned.sql_hash.clone(),
                    },
                )
                .await?;
                (committed.version, staged.rows)
            }
            Mode::Merge => {
                let dir = temp.as_ref().expect("merge stages into a temp dir");
                let source = ctx
                    .read_parquet(
                        dir.path().to_string_lossy().as_ref(),
                        ParquetReadOptions::default().schema(&planned.schema),
                    )
                    .await?;
                check_unique_key(source.clone(), &task.key).await?;
                let columns: Vec<String> = planned
                    .schema
                    .fields()
                    .iter()
                    .map(|f| f.name().clone())
                    .collect();
                let merged = publish::merge(
                    table,
                    Arc::new(ctx.state()),
                    source,
                    publish::MergeSpec {
                        columns: &columns,
                        key: &task.key,
                        partition_by: &task.partition_by,
                        range,
                    },
                    record.app_metadata(),
                )
                .await?;
                let upserted = Check::counts(
                    "rows_upserted",
                    staged.rows,
                    merged.inserted + merged.updated,
                );
                checks.push(upserted.clone());
                if !upserted.ok {
                    report.reconciliation = checks.clone();
                    return Err(Error::runtime(format!(
                        "merge inserted {} and updated {} rows for {} produced rows",
                        merged.inserted, merged.updated, staged.rows
                    )));
                }
                let v = merged
                    .table
                    .version()
                    .ok_or_else(|| Error::runtime("merge produced no version"))?;
                (v as i64, merged.rows_before + merged.inserted)
            }
        };
        {
            let mut shared = self.table.lock().await;
            if shared.version().is_none_or(|v| (v as i64) < version) {
                let _ = shared.update_incremental(Some(version as u64)).await;
            }
        }

        // Read the committed window back from the log on storage (statistics only, no data scan).
        if before.version().is_none_or(|v| (v as i64) < version) {
            before.update_incremental(Some(version as u64)).await?;
        }
        let committed_rows =
            publish::window_rows(&publish::window_files(&before, &task.partition_by, range)?)?;
        let readback = Check::counts("rows_committed", expected_rows, committed_rows);
        checks.push(readback.clone());
        report.reconciliation = checks;
        report.table_version = Some(version);
        report.rows_written = staged.rows;
        tracing::info!(
            window = %window.label(),
            version,
            rows_committed = committed_rows,
            "published in one commit; read back from the log"
        );
        if !readback.ok {
            return Err(Error::runtime(format!(
                "read-back mismatch: version {version} holds {committed_rows} rows for window {}, expected {expected_rows}",
                window.label()
            )));
        }
        report.status = if warn { Status::Mismatch } else { Status::Ok };
        Ok(())
    }
}

/// A sink writing unpartitioned Parquet files into a local temporary directory.
fn temp_sink(
    dir: &tempfile::TempDir,
    planned: &Planned,
) -> Result<(Arc<dyn object_store::ObjectStore>, WriterConfig)> {
    Ok((
        Arc::new(LocalFileSystem::new_with_prefix(dir.path())?)
            as Arc<dyn object_store::ObjectStore>,
        WriterConfig::new(
            planned.schema.clone(),
            vec![],
            None,
            None,
            None,
            delta_kernel::table_properties::DataSkippingNumIndexedCols::NumColumns(32),
            None,
        ),
    ))
}

/// A private temporary directory for staged rows.
pub fn temp_dir(prefix: &str) -> Result<tempfile::TempDir> {
    Ok(tempfile::Builder::new().prefix(prefix).tempdir()?)
}

impl Runner {
    /// Execute the window into a private temporary directory without publishing anything
    /// (same plan, window check and reconciliation tee as a run). For `verify`.
    pub async fn stage_to_temp(
        &self,
        window: &Window,
    ) -> Result<(tempfile::TempDir, Staged, Planned)> {
        let planned = self.plan(window).await?;
        let dir = temp_dir("idemlake-verify-")?;
        let (store, config) = temp_sink(&dir, &planned)?;
        let staged = stage(
            &self.ctx,
            &self.task,
            window,
            &planned,
            Sink { store, config },
        )
        .await?;
        Ok((dir, staged, planned))
    }

    /// The session the runner plans in (sources registered).
    pub fn session(&self) -> &SessionContext {
        &self.ctx
    }

    /// What the runner pinned/fingerprinted of each source when it was created.
    pub fn source_versions(&self) -> &[sources::SourceVersion] {
        &self.sources
    }
}

fn tempdir_for_merge(task: &Task) -> Result<Option<tempfile::TempDir>> {
    Ok(match task.mode {
        Mode::Overwrite => None,
        Mode::Merge => Some(
            tempfile::Builder::new()
                .prefix("idemlake-merge-")
                .tempdir()?,
        ),
    })
}

fn writer_config(
    table: &DeltaTable,
    schema: SchemaRef,
    partition_by: &str,
) -> Result<WriterConfig> {
    if table.version().is_some() {
        return publish::writer_config(table, schema, partition_by);
    }
    Ok(WriterConfig::new(
        schema,
        vec![partition_by.to_string()],
        None,
        std::num::NonZeroU64::new(128 * 1024 * 1024),
        None,
        delta_kernel::table_properties::DataSkippingNumIndexedCols::NumColumns(32),
        None,
    ))
}

/// Execute the plan into `sink`, teeing into the output-reconcile query if there is one.
async fn stage(
    ctx: &SessionContext,
    task: &Task,
    window: &Window,
    planned: &Planned,
    sink: Sink,
) -> Result<Staged> {
    let tee = match &task.reconcile {
        None => None,
        Some(_) => {
            let (provider, tx) = execute::output_channel(planned.schema.clone())?;
            let out = plan::plan_output_query(ctx, task, provider, Some(&planned.params)).await?;
            Some((tx, out))
        }
    };
    execute::stage(
        planned.df.clone(),
        planned.schema.clone(),
        &bounds(task, window),
        sink,
        tee,
    )
    .await
}

/// A merge key must be unique within one run's output.
async fn check_unique_key(source: datafusion::prelude::DataFrame, key: &[String]) -> Result<()> {
    use datafusion::functions_aggregate::expr_fn::count;
    use datafusion::prelude::{col, lit};
    let keys: Vec<_> = key
        .iter()
        .map(|k| col(datafusion::common::Column::from_name(k)))
        .collect();
    let dups = source
        .aggregate(keys, vec![count(lit(1)).alias("n")])?
        .filter(col("n").gt(lit(1i64)))?
        .limit(0, Some(3))?
        .collect()
        .await?;
    let n: usize = dups.iter().map(|b| b.num_rows()).sum();
    if n > 0 {
        let shown = arrow::util::pretty::pretty_format_batches(&dups)?.to_string();
        return Err(Error::runtime(format!(
            "[write].key ({}) is not unique in this run's output, so a merge would be ambiguous; nothing was published. Duplicates (first {n}):\n{shown}",
            key.join(", ")
        )));
    }
    Ok(())
}

/// Parse, lint and plan a task without a window and without reading rows.
pub async fn validate(task: &Task) -> Result<()> {
    let ctx = new_session()?;
    sources::register(&ctx, &task.sources).await?;
    plan::plan(&ctx, task, None).await?;
    Ok(())
}

/// The bound parameters, plans and replaceWhere predicate of a window, as text.
pub async fn explain(project: &Project, task: &Task, window: &Window) -> Result<String> {
    use std::fmt::Write;
    let ctx = new_session()?;
    let versions = sources::register(&ctx, &task.sources).await?;
    let planned = plan::plan(&ctx, task, Some(window)).await?;
    let mut s = String::new();
    let _ = writeln!(s, "task:          {} ({})", task.name, task.file.display());
    let _ = writeln!(s, "table:         {}", project.table_url(task)?);
    let _ = writeln!(s, "mode:          {:?}", task.mode);
    let _ = writeln!(
        s,
        "window:        {} = {} ({} {}, {} h)",
        window.label(),
        window.interval(),
        task.grain,
        task.timezone_name,
        window.hours()
    );
    let _ = writeln!(s, "replaceWhere:  {}", plan::replace_where(task, window));
    let _ = writeln!(s, "sql hash:      {}", planned.sql_hash);
    if !task.lint_allow.is_empty() {
        let _ = writeln!(
            s,
            "lint allow:    {} (non-deterministic functions allowed: reruns may differ)",
            task.lint_allow.join(", ")
        );
    }
    let _ = writeln!(s, "\nparameters (bound by DataFusion, not by text):");
    for (name, value) in &planned.params {
        let _ = writeln!(s, "  ${name:<16} = {value} ({})", value.data_type());
    }
    let _ = writeln!(s, "\nsources:");
    for v in &versions {
        let pin = match (v.version, v.files) {
            (Some(ver), _) => format!("delta version {ver}"),
            (None, Some(n)) => format!(
                "{n} file(s), fingerprint {}",
                v.fingerprint.clone().unwrap_or_default()
            ),
            _ => String::new(),
        };
        let _ = writeln!(s, "  {:<16} {:?}  {pin}", v.alias, v.format);
    }
    let _ = writeln!(
        s,
        "\nsql ({}):\n{}",
        task.sql_file.display(),
        task.sql.trim()
    );
    let _ = writeln!(
        s,
        "\nlogical plan (window bound):\n{}",
        planned.df.logical_plan().display_indent()
    );
    let optimized = planned.df.clone().into_optimized_plan()?;
    let _ = writeln!(s, "\noptimized plan:\n{}", optimized.display_indent());
    let physical = planned.df.clone().create_physical_plan().await?;
    let _ = writeln!(
        s,
        "\nphysical plan:\n{}",
        datafusion::physical_plan::displayable(physical.as_ref()).indent(true)
    );
    Ok(s)
}
