//! Windows whose files another tool rewrote without changing a row.
//!
//! `status` names a window's publisher from its files' tags. Another tool's compaction
//! (deltalake's `optimize.compact` or `z_order`, Spark's `OPTIMIZE`) replaces the files with
//! untagged ones in a commit whose actions say `dataChange: false`: the rows are the same, but
//! the window read as "published, not by idemlake", `backfill --missing` re-published every
//! such window, and that made every downstream window stale. Found by trying.
//!
//! For a window with untagged files, the log is read back from
//! the newest commit: commits whose actions on the window are all `dataChange: false` are
//! rewrites and are passed over; the first one that changes the window's data decides. If its
//! adds for the window are idemlake's (tagged with a run), the window is that run's; if it is
//! another writer's, or the log before it was cleaned up, or more than [`MAX_COMMITS`] commits
//! would have to be read, the window stays "published-untracked".

use std::collections::{BTreeMap, BTreeSet, HashMap};

use deltalake::DeltaTable;

use crate::delta::actions::{self, Action};
use crate::delta::overwrite::TAG_RUN_ID;
use crate::delta::partition::raw_window;
use crate::error::Result;
use crate::task::Task;

/// The most commits read back (one request each) to find the windows' publishers.
pub const MAX_COMMITS: i64 = 1000;

/// The tags of a file, as a commit holds them.
pub type Tags = HashMap<String, Option<String>>;

/// What the newest data-changing commit of a window says of it.
enum Found {
    /// idemlake's publish: one of its adds' tags.
    Ours(Tags),
    /// Another writer's change, or a commit with no idemlake add for the window.
    Other,
}

/// For each window of `wanted` (labels), the version and tags of the idemlake publish whose
/// rows its files still hold, read back through rewrites (see the module documentation).
/// Windows not resolved to one of idemlake's publishes are left out.
pub async fn publishers(
    table: &DeltaTable,
    task: &Task,
    wanted: &BTreeSet<String>,
) -> Result<BTreeMap<String, (i64, Tags)>> {
    let mut open = wanted.clone();
    let mut out = BTreeMap::new();
    let latest = table.version().map_or(-1, |v| v as i64);
    let oldest = (latest - MAX_COMMITS + 1).max(0);
    let mut v = latest;
    while v >= oldest && !open.is_empty() {
        let Some(commit) = actions::read(table, v).await? else {
            break;
        };
        for (label, found) in changes(task, &commit, &open) {
            open.remove(&label);
            if let Found::Ours(tags) = found {
                out.insert(label, (v, tags));
            }
        }
        v -= 1;
    }
    Ok(out)
}

/// The windows among `open` whose data commit `actions` changes, and by whom.
fn changes(task: &Task, actions: &[Action], open: &BTreeSet<String>) -> Vec<(String, Found)> {
    let label = |values: Option<&HashMap<String, Option<String>>>| {
        let raw = values?.get(&task.partition_by)?.as_deref()?;
        let w = raw_window(task, raw)?.label();
        open.contains(&w).then_some(w)
    };
    // Per window: tags of an idemlake add, and whether any data-changing action is not one.
    let mut seen: BTreeMap<String, (Option<Tags>, bool)> = BTreeMap::new();
    for a in actions {
        let (w, changes, tags) = match a {
            Action::Add(add) => (
                label(Some(&add.partition_values)),
                add.data_change,
                add.tags.clone(),
            ),
            Action::Remove(r) => (label(r.partition_values.as_ref()), r.data_change, None),
            _ => continue,
        };
        let Some(w) = w.filter(|_| changes) else {
            continue;
        };
        let entry = seen.entry(w).or_insert((None, false));
        let ours = tags
            .as_ref()
            .is_some_and(|t| t.get(TAG_RUN_ID).is_some_and(Option::is_some));
        match (a, ours) {
            (Action::Add(_), true) => entry.0 = tags,
            (Action::Add(_), false) => entry.1 = true,
            _ => {}
        }
    }
    seen.into_iter()
        .map(|(w, (tags, foreign))| match (tags, foreign) {
            (Some(t), false) => (w, Found::Ours(t)),
            _ => (w, Found::Other),
        })
        .collect()
}
