//! Merge mode: upsert a window's staged rows on the task's key with delta-rs MERGE, pruned to
//! the window's partitions by a predicate carrying its bounds.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::common::Column;
use datafusion::prelude::{DataFrame, col};
use deltalake::DeltaTable;
use deltalake::kernel::transaction::CommitProperties;

use crate::delta::partition::{window_files, window_rows};
use crate::delta::table::{COMMIT_RETRIES, CONFLICT_RETRIES, cleanup_due, is_conflict, open};
use crate::error::{Error, Result};
use crate::task::range::WindowRange;

/// Outcome of a MERGE.
pub struct Merged {
    pub table: DeltaTable,
    pub inserted: u64,
    pub updated: u64,
    /// Rows the window held in the snapshot the merge was applied to.
    pub rows_before: u64,
}

/// What to upsert where: the output's columns, the key, and the window on the partition column.
pub struct MergeSpec<'a> {
    pub columns: &'a [String],
    pub key: &'a [String],
    pub range: &'a WindowRange,
    /// Let the merge add the source's new columns to the table (`on_schema_change`).
    pub add_columns: bool,
}

/// Upsert `source` into the window on `spec.key`; on a conflict with a concurrent run of
/// the same window, the merge is re-applied on top of the new snapshot (it is idempotent).
pub async fn merge(
    mut table: DeltaTable,
    session: Arc<dyn datafusion::catalog::Session>,
    source: DataFrame,
    spec: MergeSpec<'_>,
    app_metadata: HashMap<String, serde_json::Value>,
) -> Result<Merged> {
    let MergeSpec {
        columns,
        key,
        range,
        add_columns,
    } = spec;
    let t = |c: &str| col(Column::new(Some("target"), c));
    let s = |c: &str| col(Column::new(Some("source"), c));
    let mut predicate = range.filter(t(range.column()));
    for k in key {
        predicate = predicate.and(t(k).eq(s(k)));
    }
    let url = table.table_url().clone();
    let mut attempt = 0;
    loop {
        let rows_before = window_rows(&window_files(&table, range)?)?;
        let cleanup = cleanup_due(&table, table.version().unwrap_or(0) as i64 + 1)?;
        let result = table
            .merge(source.clone(), predicate.clone())
            .with_source_alias("source")
            .with_target_alias("target")
            .with_merge_schema(add_columns)
            .with_session_state(session.clone())
            .with_commit_properties(
                CommitProperties::default()
                    .with_metadata(app_metadata.clone())
                    .with_max_retries(COMMIT_RETRIES)
                    .with_cleanup_expired_logs(Some(cleanup)),
            )
            .when_matched_update(|u| columns.iter().fold(u, |u, c| u.update(c.as_str(), s(c))))?
            .when_not_matched_insert(|i| columns.iter().fold(i, |i, c| i.set(c.as_str(), s(c))))?
            .await;
        match result {
            Ok(_) if crate::fault::mutation("merge-error-after-commit") => {
                return Err(Error::runtime(
                    "merge failed, nothing was published: injected error after the merge's commit",
                ));
            }
            Ok((table, metrics)) => {
                return Ok(Merged {
                    table,
                    inserted: metrics.num_target_rows_inserted as u64,
                    updated: metrics.num_target_rows_updated as u64,
                    rows_before,
                });
            }
            Err(e) if is_conflict(&e) && attempt < CONFLICT_RETRIES => {
                attempt += 1;
                tracing::info!(
                    "window merged concurrently ({e}); re-applying on top, attempt {attempt}"
                );
                table = open(&url).await?;
            }
            Err(e) => {
                return Err(Error::runtime(format!(
                    "merge failed, nothing was published: {e}"
                )));
            }
        }
    }
}
