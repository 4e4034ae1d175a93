//! `vacuum`: delete the data files a task's table no longer references (delta-rs vacuum).
//!
//! - Retention below the table's `delta.deletedFileRetentionDuration` (7 days unless the table
//!   says otherwise) is refused (exit 2, nothing deleted) unless `--force`: readers of older
//!   versions and in-flight time travel need those files.
//! - The default (`lite`) deletes only files a `remove` in the log names. `--full` also deletes
//!   files no version of the log mentions and older than the retention — the staged files of
//!   runs killed before their commit. Files staged by a run still in flight are younger than
//!   any retention a user can choose without `--force`, so a vacuum is safe beside
//!   publishing windows.
//! - `_idemlake/` (the run log) and `_delta_log/` are never touched (delta-rs skips paths whose
//!   first component starts with `_`, other than partition directories).
//! - `--dry-run` lists what would be deleted and deletes nothing.

use deltalake::operations::vacuum::VacuumMode;
use deltalake::table::config::TablePropertiesExt as _;
use serde::Serialize;

use crate::delta::table;
use crate::error::{Error, Result};
use crate::task::Task;
use crate::task::project::Project;

/// The commitInfo key of idemlake's upkeep commits (not a run: `idemlake` holds run records).
pub const UPKEEP_INFO_KEY: &str = "idemlake_upkeep";

/// What a vacuum did (or would do, with `dry_run`).
#[derive(Debug, Clone, Serialize)]
pub struct VacuumReport {
    pub task: String,
    /// The table version the vacuum read (its own commits come after it).
    pub table_version: Option<i64>,
    pub dry_run: bool,
    pub full: bool,
    pub retention_hours: i64,
    /// The table's own minimum (`delta.deletedFileRetentionDuration`) in hours.
    pub table_retention_hours: i64,
    /// Files deleted (or to delete), relative to the table root.
    pub files: Vec<String>,
}

/// Options of one vacuum.
#[derive(Debug, Clone, Copy, Default)]
pub struct VacuumOptions {
    /// Keep files removed less than this many hours ago (default: the table's retention).
    pub retain_hours: Option<u64>,
    pub dry_run: bool,
    pub full: bool,
    /// Allow a retention below the table's.
    pub force: bool,
}

/// The longest `--retain-hours` accepted: a million hours (about 114 years), longer than any
/// table has existed; beyond it the retention would overflow the timestamps vacuum compares.
pub const MAX_RETAIN_HOURS: u64 = 1_000_000;

/// `--retain-hours h` as a duration; a value beyond [`MAX_RETAIN_HOURS`] is a usage error.
fn retention_of(h: u64) -> Result<chrono::Duration> {
    i64::try_from(h)
        .ok()
        .filter(|_| h <= MAX_RETAIN_HOURS)
        .and_then(chrono::Duration::try_hours)
        .ok_or_else(|| {
            Error::input(format!(
                "--retain-hours {h} is too large: at most {MAX_RETAIN_HOURS} hours \
                 (about 114 years) is accepted (nothing was deleted)"
            ))
        })
}

/// Vacuum `task`'s table.
pub async fn vacuum(project: &Project, task: &Task, opts: VacuumOptions) -> Result<VacuumReport> {
    let asked = opts.retain_hours.map(retention_of).transpose()?;
    let url = project.table_url(task)?;
    let table = table::open(&url).await?;
    let Some(version) = table.version() else {
        return Err(Error::input(format!(
            "task {} has no table yet at {url}: nothing to vacuum",
            task.name
        )));
    };
    let minimum = table
        .snapshot()?
        .table_config()
        .deleted_file_retention_duration();
    let minimum =
        chrono::Duration::milliseconds(i64::try_from(minimum.as_millis()).unwrap_or(i64::MAX));
    let retention = asked.unwrap_or(minimum);
    if retention < minimum && !opts.force {
        return Err(Error::input(format!(
            "--retain-hours {} is below the table's delta.deletedFileRetentionDuration ({} hours): \
             readers of versions younger than that may still need the files; pass --force to \
             delete them anyway (nothing was deleted)",
            retention.num_hours(),
            minimum.num_hours()
        )));
    }
    let metadata = serde_json::json!({
        "task": task.name,
        "command": "vacuum",
        "retention_hours": retention.num_hours(),
        "full": opts.full,
    });
    let (_, metrics) = table
        .vacuum()
        .with_retention_period(retention)
        .with_enforce_retention_duration(!opts.force)
        .with_dry_run(opts.dry_run)
        .with_mode(if opts.full {
            VacuumMode::Full
        } else {
            VacuumMode::Lite
        })
        .with_commit_properties(
            deltalake::kernel::transaction::CommitProperties::default()
                .with_metadata([(UPKEEP_INFO_KEY.to_string(), metadata)]),
        )
        .await
        .map_err(|e| Error::runtime(format!("vacuum of {url} failed: {e}")))?;
    let root = url.path().trim_end_matches('/').to_string();
    let mut files: Vec<String> = metrics
        .files_deleted
        .iter()
        .map(|f| {
            f.strip_prefix(&root)
                .map(|r| r.trim_start_matches('/').to_string())
                .unwrap_or_else(|| f.clone())
        })
        .collect();
    files.sort();
    Ok(VacuumReport {
        task: task.name.clone(),
        table_version: Some(version as i64),
        dry_run: opts.dry_run,
        full: opts.full,
        retention_hours: retention.num_hours(),
        table_retention_hours: minimum.num_hours(),
        files,
    })
}
