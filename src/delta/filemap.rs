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
//! `version`. It is only ever advanced by a commit this process wrote as *exactly* the next
//! version (put-if-absent); whenever another writer may have committed in between (a lost
//! race, an ambiguous failure), the caller discards it and rebuilds from a fresh snapshot.

use std::collections::BTreeMap;

use delta_kernel::expressions::Scalar;
use deltalake::DeltaTable;
use deltalake::kernel::{Add, Remove};

use crate::delta::partition::{PartitionRange, bounds, partition_key, partition_value};
use crate::error::Result;

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
            let key = partition_value(&view, partition_by).and_then(|v| match v {
                Scalar::Date(d) => Some(d as i64),
                Scalar::Timestamp(t) | Scalar::TimestampNtz(t) => Some(t),
                _ => None,
            });
            if let Some(key) = key {
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
    pub fn removes(&self, range: PartitionRange) -> Vec<Remove> {
        let (lo, hi) = bounds(range);
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
    pub fn apply(&mut self, version: i64, ranges: &[PartitionRange], adds: &[&Add]) -> bool {
        debug_assert_eq!(version, self.version + 1);
        for range in ranges {
            let (lo, hi) = bounds(*range);
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
    use std::collections::HashMap;

    #[test]
    fn partition_values_parse_as_delta_writes_them() {
        let d = PartitionRange::Date(0, 0);
        assert_eq!(partition_key(d, "1970-01-02"), Some(1));
        assert_eq!(partition_key(d, "1995-06-01"), Some(9282));
        assert_eq!(partition_key(d, "not a date"), None);
        let t = PartitionRange::Timestamp(0, 0);
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

    #[test]
    fn a_commit_replaces_exactly_its_windows() {
        let mut m = FileMap {
            version: 3,
            partition_by: "d".into(),
            files: BTreeMap::new(),
        };
        let day = |n: i32| PartitionRange::Date(n, n + 1);
        let (a, b, c) = (
            add("1970-01-02", "a"),
            add("1970-01-03", "b"),
            add("1970-01-03", "c"),
        );
        assert!(m.apply(4, &[day(1), day(2)], &[&a, &b, &c]));
        assert_eq!((m.version, m.len()), (4, 3));
        let paths = |rs: Vec<Remove>| rs.into_iter().map(|r| r.path).collect::<Vec<_>>();
        assert_eq!(paths(m.removes(day(2))), ["b", "c"]);
        assert_eq!(
            paths(m.removes(PartitionRange::Date(0, 10))),
            ["a", "b", "c"]
        );
        assert!(
            m.removes(day(2))
                .iter()
                .all(|r| r.deletion_timestamp.is_some())
        );
        let d = add("1970-01-03", "d");
        assert!(m.apply(5, &[day(2)], &[&d]));
        assert_eq!(paths(m.removes(PartitionRange::Date(0, 10))), ["a", "d"]);
        // An emptied window: its files go, nothing comes.
        assert!(m.apply(6, &[day(1)], &[]));
        assert_eq!(paths(m.removes(PartitionRange::Date(0, 10))), ["d"]);
        // An add whose partition value cannot be read makes the map unusable.
        let bad = add("someday", "e");
        assert!(!m.apply(7, &[day(5)], &[&bad]));
    }
}
