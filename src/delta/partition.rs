//! The published path's one mapping between windows and partition values, in the file
//! map's key space: a window's range ([`WindowRange`]) as keys, a file's partition value (as
//! the log types it, or as a commit serialises it) as a key, and the window a partition value
//! belongs to. The read-back does not use it (see `readback`).

use datafusion::common::ScalarValue;
use delta_kernel::expressions::Scalar;
use deltalake::DeltaTable;
use deltalake::kernel::LogicalFileView;

use crate::error::{Error, Result};
use crate::task::Task;
use crate::task::range::{Span, WindowRange, epoch_days};
use crate::task::window::{Grain, Window};

/// The range's bounds as keys, `[lo, hi)`: days since the epoch for dates, microseconds
/// since the epoch for timestamps (see [`partition_key`] and [`scalar_key`]).
pub fn keys(range: &WindowRange) -> (i64, i64) {
    let shift = shift(range);
    match range.span() {
        Span::Date(lo, hi) => (i64::from(lo) + shift, i64::from(hi) + shift),
        Span::Micros(lo, hi) => (lo + shift, hi + shift),
    }
}

/// What the `partition-shift` mutation adds to a key (else 0): one day, or one hour.
fn shift(range: &WindowRange) -> i64 {
    if !crate::fault::mutation("partition-shift") {
        return 0;
    }
    match range.span() {
        Span::Date(..) => 1,
        Span::Micros(..) => 3_600_000_000,
    }
}

/// The key of a partition value as the log types it (a file of a loaded snapshot).
pub fn scalar_key(v: &Scalar) -> Option<i64> {
    match v {
        Scalar::Date(d) => Some(i64::from(*d)),
        Scalar::Timestamp(t) | Scalar::TimestampNtz(t) => Some(*t),
        _ => None,
    }
}

/// The key of a partition value as a commit serialises it (for `range`'s column type):
/// `YYYY-MM-DD` for dates; `YYYY-MM-DD HH:MM:SS[.ffffff]` (UTC, optionally ISO-8601 with
/// `T`/`Z`) for timestamps.
pub fn partition_key(range: &WindowRange, raw: &str) -> Option<i64> {
    raw_key(matches!(range.span(), Span::Date(..)), raw).map(|k| k + shift(range))
}

/// The key of a partition value as a commit serialises it, for a DATE column (`dates`) or a
/// TIMESTAMP one (see [`partition_key`]).
fn raw_key(dates: bool, raw: &str) -> Option<i64> {
    if dates {
        return raw
            .parse::<jiff::civil::Date>()
            .ok()
            .map(|d| i64::from(epoch_days(d)));
    }
    let civil = raw.trim_end_matches(['Z', 'z']);
    let dt = civil.parse::<jiff::civil::DateTime>().ok()?;
    let ts = dt.to_zoned(jiff::tz::TimeZone::UTC).ok()?.timestamp();
    Some(ts.as_microsecond())
}

/// The window of `task` a partition value as a commit serialises it lies in (`None`: not a
/// value of the task's partition column type, or one no window can hold).
pub fn raw_window(task: &Task, raw: &str) -> Option<Window> {
    let dates = task.grain.uses_dates();
    let key = raw_key(dates, raw)?;
    let value = if dates {
        PartitionValue::Date(i32::try_from(key).ok()?)
    } else {
        PartitionValue::Micros(key)
    };
    value.window(task.grain, &task.timezone).ok()
}

/// A file of the current snapshot whose partition lies in the window.
#[derive(Debug, Clone)]
pub struct WindowFile {
    pub path: String,
    pub rows: Option<u64>,
}

/// The files of the window, from the log (partition values and statistics only).
pub fn window_files(table: &DeltaTable, range: &WindowRange) -> Result<Vec<WindowFile>> {
    let Ok(state) = table.snapshot() else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for view in state.snapshot().log_data().iter() {
        if in_window(&view, range) {
            out.push(WindowFile {
                path: view.path().to_string(),
                rows: view.num_records().map(|n| n as u64),
            });
        }
    }
    Ok(out)
}

/// Does a live file's partition value lie in `range`?
pub fn in_window(view: &LogicalFileView, range: &WindowRange) -> bool {
    let (lo, hi) = keys(range);
    let key = partition_value(view, range.column()).and_then(|v| scalar_key(&v));
    key.is_some_and(|k| lo <= k && k < hi)
}

/// Rows the log says the window holds (sum of `numRecords`); errors if a file has no stats.
pub fn window_rows(files: &[WindowFile]) -> Result<u64> {
    files.iter().try_fold(0u64, |acc, f| {
        f.rows.map(|r| acc + r).ok_or_else(|| {
            Error::runtime(format!(
                "file {} has no row-count statistics, so the window cannot be verified from the log",
                f.path
            ))
        })
    })
}

/// The window of `task` a live file's partition value lies in (`None`: no partition value,
/// or one no window of the calendar can hold).
pub fn file_window(view: &LogicalFileView, task: &Task) -> Option<Window> {
    let v = PartitionValue::from_scalar(&partition_value(view, &task.partition_by)?)?;
    v.window(task.grain, &task.timezone).ok()
}

/// The typed value of column `partition_by` among a file's partition values.
pub fn partition_value(view: &LogicalFileView, partition_by: &str) -> Option<Scalar> {
    let values = view.partition_values()?;
    values
        .fields()
        .iter()
        .zip(values.values())
        .find(|(f, _)| f.name() == partition_by)
        .map(|(_, v)| v.clone())
}

/// A partition value as idemlake reads it back: a date (days since the epoch) or an instant
/// (microseconds since the epoch, UTC).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PartitionValue {
    Date(i32),
    Micros(i64),
}

impl PartitionValue {
    /// From the log's typed value (a file's partition value).
    pub fn from_scalar(v: &Scalar) -> Option<PartitionValue> {
        match v {
            Scalar::Date(d) => Some(PartitionValue::Date(*d)),
            Scalar::Timestamp(us) | Scalar::TimestampNtz(us) => Some(PartitionValue::Micros(*us)),
            _ => None,
        }
    }

    /// From a value DataFusion read from the table's partition column.
    pub fn from_scalar_value(v: &ScalarValue) -> Option<PartitionValue> {
        match v {
            ScalarValue::Date32(Some(d)) => Some(PartitionValue::Date(*d)),
            ScalarValue::TimestampMicrosecond(Some(us), _) => Some(PartitionValue::Micros(*us)),
            _ => None,
        }
    }

    /// The instant the value stands for: a date's midnight in `tz`.
    pub fn instant(self, tz: &jiff::tz::TimeZone) -> Result<jiff::Timestamp> {
        let bad = |e: jiff::Error| Error::runtime(format!("partition value {self:?}: {e}"));
        match self {
            PartitionValue::Date(d) => Ok(jiff::civil::date(1970, 1, 1)
                .checked_add(jiff::Span::new().days(i64::from(d)))
                .and_then(|d| d.to_zoned(tz.clone()))
                .map_err(bad)?
                .timestamp()),
            PartitionValue::Micros(us) => jiff::Timestamp::from_microsecond(us).map_err(bad),
        }
    }

    /// The window of `grain` (in `tz`) that holds this value.
    pub fn window(self, grain: Grain, tz: &jiff::tz::TimeZone) -> Result<Window> {
        Window::containing(grain, &self.instant(tz)?.to_zoned(tz.clone()))
    }
}
