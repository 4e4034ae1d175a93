//! The published path's one reader of a commit file: its lines parsed into actions (`add`,
//! `remove`, `commitInfo`, `metaData`, `protocol`, `txn`, any other kind by name), and the
//! run records idemlake keeps in `commitInfo`. The file map follows other writers' commits
//! with it (`filemap`), a commit whose response was lost is found with it (`overwrite`,
//! `pipeline::commit`), and `restore` and `status` read run records with it.
//!
//! The read-back does not use it: it reads the commits it checks with a parser of its own
//! (see `readback::replay`), so that a mistake here cannot hide what a commit holds.

use deltalake::DeltaTable;
use deltalake::kernel::{Add, Remove};

use crate::error::Result;
use crate::report::record::COMMIT_INFO_KEY;

/// One line of a commit file.
#[derive(Debug)]
pub enum Action {
    /// A file added (parsed as delta-rs parses the log: its path percent-decoded).
    Add(Add),
    /// A file removed.
    Remove(Remove),
    /// The commit's provenance, as written.
    CommitInfo(serde_json::Value),
    /// New table metadata (schema, partition columns, configuration).
    MetaData(serde_json::Value),
    /// New reader/writer protocol versions or features.
    Protocol(serde_json::Value),
    /// An application's transaction version.
    Txn,
    /// An action of another kind (`cdc`, `domainMetadata`, …), by name.
    Other(String),
    /// A line that is not one action (not JSON, not one key, an add or remove that does not
    /// parse), and why.
    Unreadable(String),
}

/// The actions of a commit file, line by line (empty lines skipped).
pub fn parse(bytes: &[u8]) -> Vec<Action> {
    bytes
        .split(|b| *b == b'\n')
        .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
        .map(parse_line)
        .collect()
}

fn parse_line(line: &[u8]) -> Action {
    let value = match serde_json::from_slice::<serde_json::Value>(line) {
        Ok(v) => v,
        Err(e) => return Action::Unreadable(format!("not JSON: {e}")),
    };
    let Some((name, body)) = value
        .as_object()
        .filter(|o| o.len() == 1)
        .and_then(|o| o.iter().next())
    else {
        return Action::Unreadable("not an object with one action".into());
    };
    let typed = |r: std::result::Result<Action, serde_json::Error>| {
        r.unwrap_or_else(|e| Action::Unreadable(format!("{name}: {e}")))
    };
    match name.as_str() {
        "add" => typed(serde_json::from_value(body.clone()).map(Action::Add)),
        "remove" => typed(serde_json::from_value(body.clone()).map(Action::Remove)),
        "commitInfo" => Action::CommitInfo(body.clone()),
        "metaData" => Action::MetaData(body.clone()),
        "protocol" => Action::Protocol(body.clone()),
        "txn" => Action::Txn,
        other => Action::Other(other.to_string()),
    }
}

/// The run record of `run_id` in a commitInfo entry: the entry itself, or one of the runs of
/// a group commit.
pub fn run_in(info: &serde_json::Value, run_id: &str) -> Option<serde_json::Value> {
    let entry = info.get(COMMIT_INFO_KEY)?;
    let is =
        |r: &serde_json::Value| r.get("run_id").and_then(serde_json::Value::as_str) == Some(run_id);
    if is(entry) {
        return Some(entry.clone());
    }
    entry
        .get("runs")
        .and_then(serde_json::Value::as_array)
        .and_then(|runs| runs.iter().find(|r| is(r)))
        .cloned()
}

/// Does a commitInfo entry name `run_id` (alone or among the runs of a group commit)?
pub fn names_run(info: &serde_json::Value, run_id: &str) -> bool {
    run_in(info, run_id).is_some()
}

/// The actions of commit `version` of `table`, read through its log store (`None`: no
/// such commit).
pub async fn read(table: &DeltaTable, version: i64) -> Result<Option<Vec<Action>>> {
    let bytes = table.log_store().read_commit_entry(version as u64).await?;
    Ok(bytes.map(|b| parse(&b)))
}

/// The run record (commitInfo) of `run_id` in commit `version`, alone or among the runs of a
/// group commit; `None` if that commit does not name the run.
pub async fn run_record(
    table: &DeltaTable,
    version: i64,
    run_id: &str,
) -> Result<Option<serde_json::Value>> {
    let actions = read(table, version).await?.unwrap_or_default();
    Ok(actions.iter().find_map(|a| match a {
        Action::CommitInfo(info) => run_in(info, run_id),
        _ => None,
    }))
}

/// The version after `base` whose commitInfo names `run_id`.
pub async fn find_run_commit(table: &DeltaTable, base: i64, run_id: &str) -> Result<Option<i64>> {
    let latest = table.version().unwrap_or(0) as i64;
    for v in (base + 1..=latest).rev() {
        let actions = read(table, v).await?.unwrap_or_default();
        let ours = actions
            .iter()
            .any(|a| matches!(a, Action::CommitInfo(info) if names_run(info, run_id)));
        if ours {
            return Ok(Some(v));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_commits_lines_parse_into_its_actions() {
        let lines = br#"{"commitInfo":{"idemlake":{"runs":[{"run_id":"a"},{"run_id":"b"}]}}}
{"remove":{"path":"d%3D1/x.parquet","dataChange":true}}
{"add":{"path":"d%3D1/y.parquet","partitionValues":{"d":"1970-01-02"},"size":1,"modificationTime":0,"dataChange":true}}
{"metaData":{"id":"t"}}
{"protocol":{"minReaderVersion":1}}
{"txn":{"appId":"x","version":1}}
{"cdc":{"path":"z"}}

not json
{"add":{"path":"no size"}}
{"add":{},"remove":{}}
"#;
        let actions = parse(lines);
        assert_eq!(actions.len(), 10, "{actions:?}");
        let Action::CommitInfo(info) = &actions[0] else {
            panic!("{actions:?}")
        };
        assert!(names_run(info, "b") && !names_run(info, "c"));
        assert_eq!(run_in(info, "a").unwrap()["run_id"], "a");
        assert!(matches!(&actions[1], Action::Remove(r) if r.path == "d=1/x.parquet"));
        assert!(matches!(&actions[2], Action::Add(a) if a.path == "d=1/y.parquet"));
        assert!(matches!(actions[3], Action::MetaData(_)));
        assert!(matches!(actions[4], Action::Protocol(_)));
        assert!(matches!(actions[5], Action::Txn));
        assert!(matches!(&actions[6], Action::Other(n) if n == "cdc"));
        for bad in &actions[7..] {
            assert!(matches!(bad, Action::Unreadable(_)), "{bad:?}");
        }
    }
}
