//! Reading a commit back: the committed snapshot replayed from storage (not the file map the
//! commit was built from), the window's live files checked against the files the run added,
//! and a run's own commit found in the log after an ambiguous failure.

use deltalake::DeltaTable;

use deltalake::kernel::Add;

use crate::delta::partition::{PartitionRange, window_files, window_rows};
use crate::delta::table::open_at;
use crate::error::{Error, Result};

/// Does a commitInfo entry name `run_id` (alone or among the runs of a group commit)?
fn names_run(info: &serde_json::Value, run_id: &str) -> bool {
    let Some(entry) = info.get(crate::report::record::COMMIT_INFO_KEY) else {
        return false;
    };
    let is =
        |r: &serde_json::Value| r.get("run_id").and_then(serde_json::Value::as_str) == Some(run_id);
    is(entry)
        || entry
            .get("runs")
            .and_then(serde_json::Value::as_array)
            .is_some_and(|runs| runs.iter().any(is))
}

/// The version after `base` whose commitInfo names `run_id`.
pub async fn find_run_commit(table: &DeltaTable, base: i64, run_id: &str) -> Result<Option<i64>> {
    let latest = table.version().unwrap_or(0) as i64;
    let log_store = table.log_store();
    for v in (base + 1..=latest).rev() {
        let Some(bytes) = log_store.read_commit_entry(v as u64).await? else {
            continue;
        };
        for line in bytes.split(|b| *b == b'\n') {
            let Ok(action) = serde_json::from_slice::<serde_json::Value>(line) else {
                continue;
            };
            if action
                .get("commitInfo")
                .is_some_and(|c| names_run(c, run_id))
            {
                return Ok(Some(v));
            }
        }
    }
    Ok(None)
}

/// `table` brought to exactly `version` by replaying the log from storage (delta-rs's own
/// snapshot, not idemlake's file map): what readers of that version see. `table` itself is
/// advanced when it is behind; a table already past `version` is left as is and a copy is
/// loaded at `version`.
pub async fn snapshot_at(table: &mut DeltaTable, version: i64) -> Result<DeltaTable> {
    let at = version as u64;
    match table.version() {
        Some(v) if v == at => Ok(table.clone()),
        Some(v) if v < at => {
            table.update_incremental(Some(at)).await?;
            Ok(table.clone())
        }
        _ => open_at(table.table_url(), at).await,
    }
}

/// Read one window back from the committed snapshot `table`: every live file whose partition
/// value lies in the window must be a file this commit added for it (a file left over from
/// before — a remove the commit missed — or a staged file missing fails), and the rows are
/// the sum of their `numRecords` statistics.
pub fn read_back(
    table: &DeltaTable,
    partition_by: &str,
    range: PartitionRange,
    adds: &[Add],
    window: &str,
) -> Result<u64> {
    let version = table.version().map(|v| v as i64).unwrap_or(-1);
    let live = window_files(table, partition_by, range)?;
    let staged: std::collections::HashSet<&str> = adds.iter().map(|a| a.path.as_str()).collect();
    let foreign: Vec<&str> = live
        .iter()
        .map(|f| f.path.as_str())
        .filter(|p| !staged.contains(p))
        .collect();
    if let Some(first) = foreign.first() {
        return Err(Error::runtime(format!(
            "read-back: version {version} holds {} live file(s) in window {} that this run did not add (e.g. {first}): the window was not replaced whole",
            foreign.len(),
            window
        )));
    }
    let missing = staged.len() - (live.len() - foreign.len());
    if missing > 0 {
        return Err(Error::runtime(format!(
            "read-back: version {version} lacks {missing} of the {} file(s) this run staged for window {}",
            staged.len(),
            window
        )));
    }
    window_rows(&live)
}
