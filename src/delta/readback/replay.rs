//! The read-back's own replay of the table's log: the live files by path with their
//! partition value as the log writes it, started from a snapshot loaded through the
//! read-back's own client and advanced by reading every later commit back from storage with
//! a parser of its own.

use std::collections::HashMap;

use delta_kernel::engine::arrow_conversion::TryIntoArrow;
use deltalake::{DeltaTable, DeltaTableBuilder};
use object_store::ObjectStore;

use crate::error::{Error, Result};

/// A file as the read-back knows it: its path (percent-decoded, as the table's adds name it)
/// and its partition value as the log writes it (`None`: NULL).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedFile {
    pub path: String,
    pub value: Option<String>,
}

/// The live files of one table version, replayed by the read-back itself.
///
/// It shares nothing with the file map the commits are built from (`filemap`): that map is
/// advanced by the actions idemlake meant to write and keyed by `delta::partition`; this one
/// is advanced by the bytes storage holds (whoever wrote them), read through the read-back's
/// own client and parsed here — not by `delta::actions` — and keeps each partition value as
/// written, for the read-back to map to windows by the commit's replaceWhere
/// (`readback::windows`).
pub struct LogReplay {
    pub version: i64,
    /// The partition (window) column.
    column: String,
    /// Its type, from the table's schema.
    pub column_type: arrow::datatypes::DataType,
    /// Live files: path → partition value as written.
    files: HashMap<String, Option<String>>,
}

impl LogReplay {
    /// The live files of the table at `url` as of `version`, loaded by delta-rs through the
    /// read-back's own client (a new S3 client without the log cache; delta-rs's local store
    /// for a local table) — never through the store the task's session and commits use.
    pub async fn open(route: &super::Route, column: &str, version: i64) -> Result<LogReplay> {
        let table = open_own(route, version).await?;
        let state = table.snapshot()?;
        let field = state.schema().field(column).cloned().ok_or_else(|| {
            Error::runtime(format!("read-back: the table has no column {column}"))
        })?;
        let column_type: arrow::datatypes::DataType = field
            .data_type()
            .try_into_arrow()
            .map_err(|e| Error::runtime(format!("read-back: column {column}: {e}")))?;
        let mut files = HashMap::new();
        for view in state.snapshot().log_data().iter() {
            let mut values = view.partition_values_map();
            let Some(value) = values.remove(column) else {
                return Err(Error::runtime(format!(
                    "read-back: version {version}: a file without a value for {column}"
                )));
            };
            files.insert(view.path().to_string(), value);
        }
        Ok(LogReplay {
            version,
            column: column.to_string(),
            column_type,
            files,
        })
    }

    /// The live files.
    pub fn files(&self) -> Vec<LoggedFile> {
        self.files
            .iter()
            .map(|(path, value)| LoggedFile {
                path: path.clone(),
                value: value.clone(),
            })
            .collect()
    }

    /// Apply every commit after `self.version` up to `version`, each read from storage
    /// through `store` (the read-back's own, rooted at the table: `readback::Route`).
    /// Returns the live files the last of them removed.
    pub async fn advance(
        &mut self,
        store: &dyn ObjectStore,
        version: i64,
    ) -> Result<Vec<LoggedFile>> {
        use object_store::ObjectStoreExt;
        let mut removed = Vec::new();
        for v in self.version + 1..=version {
            let path = object_store::path::Path::from(format!("_delta_log/{v:020}.json"));
            let bytes = match store.get(&path).await {
                Ok(got) => got.bytes().await?,
                Err(object_store::Error::NotFound { .. }) => {
                    return Err(Error::runtime(format!(
                        "commit {v} is not in the log (anymore)"
                    )));
                }
                Err(e) => return Err(e.into()),
            };
            removed = self.apply(v, &bytes)?;
            self.version = v;
        }
        Ok(removed)
    }

    /// Apply commit `v` (its bytes): its removes, then its adds. Returns the live files it
    /// removed.
    fn apply(&mut self, v: i64, bytes: &[u8]) -> Result<Vec<LoggedFile>> {
        let bad = |why: String| Error::runtime(format!("read-back: commit {v}: {why}"));
        let mut adds = Vec::new();
        let mut removed = Vec::new();
        for line in bytes.split(|b| *b == b'\n') {
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let action: serde_json::Value = serde_json::from_slice(line)
                .map_err(|e| bad(format!("a line is not JSON: {e}")))?;
            if let Some(add) = action.get("add") {
                adds.push(self.logged(add).map_err(&bad)?);
            } else if let Some(remove) = action.get("remove") {
                let path = decoded_path(remove).map_err(&bad)?;
                if let Some(value) = self.files.remove(&path) {
                    removed.push(LoggedFile { path, value });
                }
            }
        }
        for add in adds {
            self.files.insert(add.path, add.value);
        }
        Ok(removed)
    }

    /// An `add` action as the read-back keeps it. A value missing under the column's name (a
    /// column-mapped table keys it by a physical name) is an error: the caller loads the
    /// committed version instead.
    fn logged(&self, add: &serde_json::Value) -> std::result::Result<LoggedFile, String> {
        let path = decoded_path(add)?;
        let values = add
            .get("partitionValues")
            .and_then(serde_json::Value::as_object)
            .ok_or_else(|| format!("the add of {path} has no partitionValues"))?;
        let value = match values.get(&self.column) {
            Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(s)) => Some(s.clone()),
            Some(other) => {
                return Err(format!(
                    "the add of {path}: a value {other} for {}",
                    self.column
                ));
            }
            None => {
                return Err(format!(
                    "the add of {path} has no value for {}",
                    self.column
                ));
            }
        };
        Ok(LoggedFile { path, value })
    }
}

/// An action's `path`, percent-decoded (the log stores it as a URI).
fn decoded_path(action: &serde_json::Value) -> std::result::Result<String, String> {
    let raw = action
        .get("path")
        .and_then(serde_json::Value::as_str)
        .ok_or("an action without a path")?;
    percent_encoding::percent_decode_str(raw)
        .decode_utf8()
        .map(|p| p.into_owned())
        .map_err(|e| format!("the path {raw:?}: {e}"))
}

/// The table as of `version`, loaded through the read-back's own client (`route`).
async fn open_own(route: &super::Route, version: i64) -> Result<DeltaTable> {
    let builder = DeltaTableBuilder::from_url(route.url.clone())?;
    let builder = match &route.bucket {
        Some(store) => builder.with_storage_backend(store.clone(), route.url.clone()),
        None => builder,
    };
    let mut table = builder.build()?;
    table.load_version(version as u64).await.map_err(|e| {
        Error::runtime(format!(
            "read-back: version {version} cannot be loaded: {e}"
        ))
    })?;
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replay() -> LogReplay {
        LogReplay {
            version: 3,
            column: "d".into(),
            column_type: arrow::datatypes::DataType::Date32,
            files: HashMap::from([("old".to_string(), Some("1970-01-02".to_string()))]),
        }
    }

    fn add(path: &str, values: serde_json::Value) -> String {
        serde_json::json!({"add": {"path": path, "partitionValues": values, "size": 1,
            "modificationTime": 0, "dataChange": true}})
        .to_string()
    }

    /// The replay reads a commit's bytes itself: removes (returned with their values), adds
    /// (paths decoded), NULL values kept as NULL; an add keyed by another name (a physical
    /// name under column mapping) or a line that is not JSON is an error, never a NULL.
    #[test]
    fn a_commit_is_read_by_the_read_backs_own_parser() {
        let mut r = replay();
        let commit = [
            r#"{"commitInfo":{"operation":"WRITE"}}"#.to_string(),
            r#"{"remove":{"path":"old","dataChange":true}}"#.to_string(),
            add(
                "d=1970-01-02/a%20b.parquet",
                serde_json::json!({"d": "1970-01-02"}),
            ),
            add("n.parquet", serde_json::json!({"d": null})),
        ]
        .join("\n");
        let removed = r.apply(4, commit.as_bytes()).unwrap();
        assert_eq!(
            removed,
            [LoggedFile {
                path: "old".into(),
                value: Some("1970-01-02".into())
            }]
        );
        let mut files = r.files();
        files.sort_by(|a, b| a.path.cmp(&b.path));
        assert_eq!(files[0].path, "d=1970-01-02/a b.parquet");
        assert_eq!(files[1].value, None);
        for bad in [
            add("x", serde_json::json!({"col-5f1a": "1970-01-02"})),
            "not json".to_string(),
        ] {
            assert!(replay().apply(4, bad.as_bytes()).is_err(), "{bad}");
        }
    }
}
