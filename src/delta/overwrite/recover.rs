//! After a failed attempt of an overwrite commit: read the log again to tell whether other
//! writers moved the table (replayed onto the file map) or the commit landed anyway.

use deltalake::{DeltaTable, DeltaTableError};

use super::WindowCommit;
use crate::delta::actions::find_run_commit;
use crate::delta::filemap::{FileMap, Replayed};
use crate::error::{Error, Result};
use crate::task::range::WindowRange;

/// What [`catch_up`] found in the log after a failed attempt.
pub(super) enum CatchUp {
    /// Other writers' commits, replayed onto the map: it is at the latest version.
    Moved,
    /// The attempt itself is in the log at this version.
    Ours(i64),
    /// Nothing new in the log, or something the map cannot follow (the map is dropped): the
    /// caller re-reads the table.
    Rebuild,
}

/// Replay onto `files` every commit in the log after its version (read from storage, until
/// the first version not there), stopping at a commit that names `run_id`.
///
/// The versions are fetched [`AHEAD`] at a time, concurrently: a worker that lost a race to
/// seven others pays one round trip for the seven, not seven one after the other. The ones
/// past the log's end are 404s, and are dropped.
pub(super) async fn catch_up(
    table: &DeltaTable,
    files: &mut Option<FileMap>,
    kind: &WindowRange,
    run_id: &str,
) -> CatchUp {
    let Some(map) = files.as_mut() else {
        return CatchUp::Rebuild;
    };
    let start = map.version;
    let store = table.log_store();
    // Far behind (a long-idle worker): one snapshot load costs less than this many GETs.
    const MAX_REPLAYED: i64 = 500;
    while map.version - start < MAX_REPLAYED {
        let first = map.version + 1;
        let fetched = futures::future::join_all(
            (first..first + AHEAD).map(|v| store.read_commit_entry(v as u64)),
        )
        .await;
        for (v, entry) in (first..).zip(fetched) {
            let bytes = match entry {
                Ok(Some(b)) => b,
                Ok(None) if map.version > start => return CatchUp::Moved,
                _ => {
                    *files = None;
                    return CatchUp::Rebuild;
                }
            };
            match map.replay(v, kind, &bytes, run_id) {
                Replayed::Applied => {}
                Replayed::Ours => return CatchUp::Ours(v),
                Replayed::Unknown => {
                    *files = None;
                    return CatchUp::Rebuild;
                }
            }
        }
    }
    *files = None;
    CatchUp::Rebuild
}

/// How many versions [`catch_up`] asks for at once.
pub(super) const AHEAD: i64 = 8;

/// After a failed attempt: re-read the table and tell whether the commit landed anyway (its
/// version) or not (`None`: rebuild on top). Whether it landed cannot be told without
/// reading the log: if that fails too, the error says so — never "nothing was published"
/// (re-running the window is safe).
pub(super) async fn after_failure(
    table: &mut DeltaTable,
    windows: &[WindowCommit],
    base: i64,
    e: &DeltaTableError,
) -> Result<Option<i64>> {
    let unknown = |why: &dyn std::fmt::Display| {
        Error::runtime(format!(
            "commit failed ({e}) and the log could not be read back ({why}): the window may or may not have been published; re-running it is safe"
        ))
    };
    if let Err(why) = table.update_state().await {
        return Err(unknown(&why));
    }
    let found = landed(table, windows, base)
        .await
        .map_err(|why| unknown(&why))?;
    if let Some(version) = found {
        tracing::warn!(
            "the commit reported an error ({e}) but it is in the log at version {version}; not applying it twice"
        );
    }
    Ok(found)
}

/// If this commit is in the table's log after `base`, its version: the commit that names the
/// run. The log, not the latest snapshot: a commit that landed and whose windows another
/// writer has replaced since has landed all the same (committing it again would put the run's
/// rows over the newer ones and report a second version).
pub(super) async fn landed(
    table: &DeltaTable,
    windows: &[WindowCommit],
    base: i64,
) -> Result<Option<i64>> {
    let run_id = &windows[0].tags.run_id;
    if let Some(version) = find_run_commit(table, base, run_id).await? {
        return Ok(Some(version));
    }
    // No commit since `base` names the run: its files had better not be in the table.
    let Some(first) = windows.iter().find_map(|w| w.adds.first()) else {
        return Ok(None);
    };
    let present = table
        .snapshot()?
        .snapshot()
        .log_data()
        .iter()
        .any(|f| f.path() == first.path.as_str());
    if present {
        return Err(Error::runtime(format!(
            "run {run_id}'s files are in the table but no commit names the run"
        )));
    }
    Ok(None)
}
