//! The target table's live files by partition value, kept current by the commits idemlake
//! makes, so that publishing a window never needs delta-rs to re-materialise the table state.
//!
//! delta-rs brings its snapshot up to date after every commit by replaying the log into an
//! Arrow table of *all* live files: the cost of a commit grows with the table (measured: ~60 %
//! of an SF1 initial load's CPU, 2,500 partitions). An overwrite only needs the files of its
//! own windows, which are known: the map is built once from a snapshot, and every commit
//! idemlake writes updates it with exactly the removes and adds that commit holds.
//!
//! Invariant: a map is the exact set of live files with a window-typed partition value at
//! `version`. It is only ever advanced by exactly the next version: a commit this process
//! wrote (put-if-absent, [`FileMap::apply`]), or, after a lost race, each commit other writers
//! wrote since, replayed from its log lines as read from storage ([`FileMap::replay`]: adds
//! and removes only; anything else — new metadata or protocol, another action kind — and the
//! caller discards the map and rebuilds from a fresh snapshot, as it always does with
//! `IDEMLAKE_ACCELERATE=0` and after an ambiguous failure with nothing new in the log).

use std::collections::BTreeMap;

use deltalake::DeltaTable;
use deltalake::kernel::{Add, Remove};

use crate::delta::actions::{self, Action};
use crate::delta::partition::{keys, partition_key, partition_value, scalar_key};
use crate::error::Result;
use crate::task::range::WindowRange;

/// Live files keyed by their partition value (days since the epoch for dates, microseconds
/// since the epoch for timestamps), as the `remove` action that would delete each one.
#[derive(Clone)]
pub struct FileMap {
    pub version: i64,
    partition_by: String,
    files: BTreeMap<i64, Vec<Remove>>,
}

impl FileMap {
    /// The map of `table`'s loaded snapshot (no I/O: the snapshot's file list).
    pub fn from_table(table: &DeltaTable, partition_by: &str) -> Result<FileMap> {
        let state = table.snapshot()?;
        let mut files: BTreeMap<i64, Vec<Remove>> = BTreeMap::new();
        for view in state.snapshot().log_data().iter() {
            if let Some(key) = partition_value(&view, partition_by).and_then(|v| scalar_key(&v)) {
                files.entry(key).or_default().push(view.remove_action(true));
            }
        }
        Ok(FileMap {
            version: state.version() as i64,
            partition_by: partition_by.to_string(),
            files,
        })
    }

    /// Number of live files in the map.
    pub fn len(&self) -> usize {
        self.files.values().map(Vec::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// `remove` actions (stamped now) for every live file whose partition lies in `range`.
    pub fn removes(&self, range: &WindowRange) -> Vec<Remove> {
        let (lo, hi) = keys(range);
        let now = jiff::Timestamp::now().as_millisecond();
        let skip = usize::from(crate::fault::mutation("skip-remove"));
        self.files
            .range(lo..hi)
            .flat_map(|(_, v)| v.iter().cloned())
            .skip(skip)
            .map(|mut r| {
                r.deletion_timestamp = Some(now);
                r
            })
            .collect()
    }

    /// Advance the map by a commit written as version `self.version + 1` that replaced every
    /// range in `ranges` by `adds`. Returns `false` (and leaves the map unusable: the caller
    /// must drop it) if an added file's partition value cannot be read.
    #[must_use]
    pub fn apply(&mut self, version: i64, ranges: &[&WindowRange], adds: &[&Add]) -> bool {
        debug_assert_eq!(version, self.version + 1);
        for range in ranges {
            let (lo, hi) = keys(range);
            let keys: Vec<i64> = self.files.range(lo..hi).map(|(k, _)| *k).collect();
            for k in keys {
                self.files.remove(&k);
            }
        }
        for add in adds {
            let kind = ranges.first().copied();
            let raw = add
                .partition_values
                .get(&self.partition_by)
                .and_then(|v| v.as_deref());
            let Some(key) = kind.zip(raw).and_then(|(k, raw)| partition_key(k, raw)) else {
                return false;
            };
            self.files.entry(key).or_default().push(remove_for(add));
        }
        self.version = version;
        true
    }
}

/// What [`FileMap::replay`] made of one commit another writer wrote.
#[derive(Debug, PartialEq, Eq)]
pub enum Replayed {
    /// Its adds and removes are applied; the map is at its version.
    Applied,
    /// It names `run_id` in its commitInfo: the commit being retried landed after all.
    Ours,
    /// It holds what the map cannot follow (new metadata or protocol, an action of another
    /// kind, a line that does not parse, a partition value that does not read): the map is
    /// unusable and the caller rebuilds from a fresh snapshot.
    Unknown,
}

impl FileMap {
    /// Advance the map by commit `version` (exactly the next one) written by another writer,
    /// given as its log lines (read with `actions`, the published path's one parser of a
    /// commit): removes first (by path), then adds, keyed by partition value as
    /// [`FileMap::from_table`] keys them (`kind`: a window of the task, for the partition
    /// column's type; files with a NULL partition value are not window files and are not
    /// kept, as there).
    pub fn replay(
        &mut self,
        version: i64,
        kind: &WindowRange,
        lines: &[u8],
        run_id: &str,
    ) -> Replayed {
        debug_assert_eq!(version, self.version + 1);
        let mut adds: Vec<Add> = Vec::new();
        let mut removes: Vec<Remove> = Vec::new();
        for action in actions::parse(lines) {
            match action {
                Action::CommitInfo(info) if actions::names_run(&info, run_id) => {
                    return Replayed::Ours;
                }
                Action::CommitInfo(_) | Action::Txn => {}
                Action::Add(a) => adds.push(a),
                Action::Remove(r) => removes.push(r),
                Action::MetaData(_)
                | Action::Protocol(_)
                | Action::Other(_)
                | Action::Unreadable(_) => return Replayed::Unknown,
            }
        }
        for r in &removes {
            self.forget(&r.path);
        }
        for a in &adds {
            // The same path added again (a new deletion vector) replaces its entry.
            self.forget(&a.path);
            match a.partition_values.get(&self.partition_by) {
                // A NULL partition value: not a window file (as in `from_table`).
                Some(None) => {}
                Some(Some(raw)) => {
                    let Some(key) = partition_key(kind, raw) else {
                        return Replayed::Unknown;
                    };
                    self.files.entry(key).or_default().push(remove_for(a));
                }
                // No value under the column's name: keyed otherwise (column mapping's physical
                // names, say); only a snapshot reads it right.
                None => return Replayed::Unknown,
            }
        }
        self.version = version;
        Replayed::Applied
    }

    /// Drop the live file at `path`, if the map holds it.
    fn forget(&mut self, path: &str) {
        let mut emptied = None;
        for (k, v) in self.files.iter_mut() {
            if let Some(i) = v.iter().position(|r| r.path == path) {
                v.remove(i);
                if v.is_empty() {
                    emptied = Some(*k);
                }
                break;
            }
        }
        if let Some(k) = emptied {
            self.files.remove(&k);
        }
    }
}

/// The `remove` action that deletes `add` (timestamp filled in when used).
fn remove_for(add: &Add) -> Remove {
    Remove {
        path: add.path.clone(),
        data_change: true,
        deletion_timestamp: None,
        extended_file_metadata: Some(true),
        partition_values: Some(add.partition_values.clone()),
        size: Some(add.size),
        tags: None,
        deletion_vector: add.deletion_vector.clone(),
        base_row_id: add.base_row_id,
        default_row_commit_version: add.default_row_commit_version,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::window::{Grain, Window};
    use std::collections::HashMap;

    /// The range of day `n` after the epoch on the date column `d`.
    fn day(n: i32) -> WindowRange {
        let text = crate::task::range::civil_date(n).to_string();
        let tz = jiff::tz::TimeZone::UTC;
        WindowRange::new(
            Grain::Day,
            "d",
            &Window::parse(&text, Grain::Day, &tz).unwrap(),
        )
    }

    /// Days `a` to `b` (inclusive).
    fn days(a: i32, b: i32) -> WindowRange {
        day(a).through(&day(b))
    }

    #[test]
    fn partition_values_parse_as_delta_writes_them() {
        let d = &day(0);
        assert_eq!(partition_key(d, "1970-01-02"), Some(1));
        assert_eq!(partition_key(d, "1995-06-01"), Some(9282));
        assert_eq!(partition_key(d, "not a date"), None);
        let hour = Window::parse("1970-01-01T00", Grain::Hour, &jiff::tz::TimeZone::UTC);
        let t = &WindowRange::new(Grain::Hour, "d", &hour.unwrap());
        let hour = 3_600_000_000i64;
        assert_eq!(partition_key(t, "1970-01-01 01:00:00"), Some(hour));
        assert_eq!(
            partition_key(t, "1970-01-01 01:00:00.000001"),
            Some(hour + 1)
        );
        assert_eq!(partition_key(t, "1970-01-01T01:00:00.000000Z"), Some(hour));
        assert_eq!(partition_key(t, "01:00"), None);
    }

    fn add(day: &str, path: &str) -> Add {
        Add {
            path: path.to_string(),
            partition_values: HashMap::from([("d".to_string(), Some(day.to_string()))]),
            size: 10,
            data_change: true,
            ..Default::default()
        }
    }

    /// A map at version 3 of a table partitioned by the date column `d`, no files yet.
    fn empty_map() -> FileMap {
        FileMap {
            version: 3,
            partition_by: "d".into(),
            files: BTreeMap::new(),
        }
    }

    #[test]
    fn a_commit_replaces_exactly_its_windows() {
        let mut m = empty_map();
        let (a, b, c) = (
            add("1970-01-02", "a"),
            add("1970-01-03", "b"),
            add("1970-01-03", "c"),
        );
        assert!(m.apply(4, &[&day(1), &day(2)], &[&a, &b, &c]));
        assert_eq!((m.version, m.len()), (4, 3));
        let paths = |rs: Vec<Remove>| rs.into_iter().map(|r| r.path).collect::<Vec<_>>();
        assert_eq!(paths(m.removes(&day(2))), ["b", "c"]);
        assert_eq!(paths(m.removes(&days(0, 9))), ["a", "b", "c"]);
        assert!(
            m.removes(&day(2))
                .iter()
                .all(|r| r.deletion_timestamp.is_some())
        );
        let d = add("1970-01-03", "d");
        assert!(m.apply(5, &[&day(2)], &[&d]));
        assert_eq!(paths(m.removes(&days(0, 9))), ["a", "d"]);
        // An emptied window: its files go, nothing comes.
        assert!(m.apply(6, &[&day(1)], &[]));
        assert_eq!(paths(m.removes(&days(0, 9))), ["d"]);
        // An add whose partition value cannot be read makes the map unusable.
        let bad = add("someday", "e");
        assert!(!m.apply(7, &[&day(5)], &[&bad]));
    }

    /// Issue 17 §1: after a lost race the map follows the winners' commits from their log
    /// lines instead of a fresh snapshot; it must end exactly where a snapshot would.
    #[test]
    fn another_writers_commit_replays_onto_the_map_like_a_snapshot() {
        let mut m = empty_map();
        let (a, b) = (add("1970-01-02", "a"), add("1970-01-03", "b"));
        assert!(m.apply(4, &[&day(1), &day(2)], &[&a, &b]));
        let line = |kind: &str, body: serde_json::Value| {
            let mut v = serde_json::to_vec(&serde_json::json!({ kind: body })).unwrap();
            v.push(b'\n');
            v
        };
        let add_json = |d: &str, p: &str| serde_json::to_value(add(d, p)).unwrap();
        let info = |run: &str| serde_json::json!({"idemlake": {"run_id": run}});
        // Another writer replaces day 2 ("b" → "c") and adds a file with a NULL partition.
        let mut commit = line("commitInfo", info("other"));
        commit.extend(line(
            "remove",
            serde_json::json!({"path": "b", "dataChange": true}),
        ));
        commit.extend(line("add", add_json("1970-01-03", "c")));
        let mut null = serde_json::to_value(add("x", "n")).unwrap();
        null["partitionValues"] = serde_json::json!({"d": null});
        commit.extend(line("add", null));
        commit.extend(line("txn", serde_json::json!({"appId": "x", "version": 1})));
        assert_eq!(m.replay(5, &day(0), &commit, "me"), Replayed::Applied);
        let paths = |rs: Vec<Remove>| rs.into_iter().map(|r| r.path).collect::<Vec<_>>();
        assert_eq!((m.version, m.len()), (5, 2));
        assert_eq!(paths(m.removes(&days(0, 9))), ["a", "c"]);
        // The same path added again (a new deletion vector) stays one entry.
        let again = line("add", add_json("1970-01-03", "c"));
        assert_eq!(m.replay(6, &day(0), &again, "me"), Replayed::Applied);
        assert_eq!(paths(m.removes(&days(0, 9))), ["a", "c"]);
        // A commit naming this run (alone or in a group commit's runs): ours landed.
        let ours = line(
            "commitInfo",
            serde_json::json!({"idemlake": {"runs": [{"run_id": "me"}]}}),
        );
        assert_eq!(m.replay(7, &day(0), &ours, "me"), Replayed::Ours);
        // What the map cannot follow: new metadata, an unknown action, a bad line, a bad value.
        for bad in [
            line("metaData", serde_json::json!({"id": "t"})),
            line("protocol", serde_json::json!({"minReaderVersion": 1})),
            line("cdc", serde_json::json!({"path": "z"})),
            b"not json\n".to_vec(),
            line("add", add_json("someday", "e")),
            line(
                "add",
                serde_json::json!({"path": "f", "partitionValues": {"col-5f1a": "1970-01-02"},
                "size": 1, "modificationTime": 0, "dataChange": true}),
            ),
        ] {
            let mut copy = m.clone();
            assert_eq!(copy.replay(7, &day(0), &bad, "me"), Replayed::Unknown);
        }
    }
}
