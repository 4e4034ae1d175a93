//! One mapping between windows and partition values: a window as a range of the partition
//! column in the log's typed representation, a file's partition value, and the window a
//! partition value belongs to.

use datafusion::common::ScalarValue;
use datafusion::prelude::{Expr, lit};
use delta_kernel::expressions::Scalar;
use deltalake::DeltaTable;
use deltalake::kernel::LogicalFileView;

use crate::error::{Error, Result};
use crate::task::Task;
use crate::task::plan::epoch_days;
use crate::task::window::{Grain, Window};

/// The window as bounds on the partition value, in the log's typed representation.
#[derive(Debug, Clone, Copy)]
pub enum PartitionRange {
    /// Days since the epoch, `[lo, hi)`.
    Date(i32, i32),
    /// Microseconds since the epoch (UTC), `[lo, hi)`.
    Timestamp(i64, i64),
}

impl PartitionRange {
    /// The window's bounds on the partition column: dates for day and longer grains (and
    /// date-typed columns), instants otherwise.
    pub fn of(task: &Task, w: &Window) -> PartitionRange {
        if task.grain.uses_dates() {
            PartitionRange::Date(epoch_days(w.start_date()), epoch_days(w.end_date()))
        } else {
            PartitionRange::Timestamp(w.start_ts().as_microsecond(), w.end_ts().as_microsecond())
        }
    }

    pub fn contains(&self, v: &Scalar) -> bool {
        match (self, v) {
            (PartitionRange::Date(lo, hi), Scalar::Date(d)) => lo <= d && d < hi,
            (PartitionRange::Timestamp(lo, hi), Scalar::Timestamp(t) | Scalar::TimestampNtz(t)) => {
                lo <= t && t < hi
            }
            _ => false,
        }
    }
    /// The range from the start of `self` to the end of `last` (windows of one task).
    pub fn through(self, last: PartitionRange) -> PartitionRange {
        match (self, last) {
            (PartitionRange::Date(lo, _), PartitionRange::Date(_, hi)) => {
                PartitionRange::Date(lo, hi)
            }
            (PartitionRange::Timestamp(lo, _), PartitionRange::Timestamp(_, hi)) => {
                PartitionRange::Timestamp(lo, hi)
            }
            (first, _) => first,
        }
    }

    /// The window filter on `column` (the partition column, however qualified):
    /// `column >= lo AND column < hi`. The one way idemlake filters a table to its windows.
    pub fn filter(&self, column: Expr) -> Expr {
        let (lo, hi) = self.lo_hi();
        column.clone().gt_eq(lit(lo)).and(column.lt(lit(hi)))
    }

    pub fn lo_hi(&self) -> (ScalarValue, ScalarValue) {
        match *self {
            PartitionRange::Date(lo, hi) => {
                (ScalarValue::Date32(Some(lo)), ScalarValue::Date32(Some(hi)))
            }
            PartitionRange::Timestamp(lo, hi) => (
                ScalarValue::TimestampMicrosecond(Some(lo), Some("UTC".into())),
                ScalarValue::TimestampMicrosecond(Some(hi), Some("UTC".into())),
            ),
        }
    }
}

/// A file of the current snapshot whose partition lies in the window.
#[derive(Debug, Clone)]
pub struct WindowFile {
    pub path: String,
    pub rows: Option<u64>,
}

/// The files of the window, from the log (partition values and statistics only).
pub fn window_files(
    table: &DeltaTable,
    partition_by: &str,
    range: PartitionRange,
) -> Result<Vec<WindowFile>> {
    let Ok(state) = table.snapshot() else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for view in state.snapshot().log_data().iter() {
        let value = partition_value(&view, partition_by);
        if value.is_some_and(|v| range.contains(&v)) {
            out.push(WindowFile {
                path: view.path().to_string(),
                rows: view.num_records().map(|n| n as u64),
            });
        }
    }
    Ok(out)
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

/// The range's bounds as file-map keys (see [`partition_key`]).
pub fn bounds(range: PartitionRange) -> (i64, i64) {
    match range {
        PartitionRange::Date(lo, hi) => (lo as i64, hi as i64),
        PartitionRange::Timestamp(lo, hi) => (lo, hi),
    }
}

/// The map key of a partition value as Delta serialises it: `YYYY-MM-DD` for dates;
/// `YYYY-MM-DD HH:MM:SS[.ffffff]` (UTC, optionally ISO-8601 with `T`/`Z`) for timestamps.
pub fn partition_key(kind: PartitionRange, raw: &str) -> Option<i64> {
    match kind {
        PartitionRange::Date(..) => raw
            .parse::<jiff::civil::Date>()
            .ok()
            .map(|d| epoch_days(d) as i64),
        PartitionRange::Timestamp(..) => {
            let civil = raw.trim_end_matches(['Z', 'z']);
            let dt = civil.parse::<jiff::civil::DateTime>().ok()?;
            let ts = dt.to_zoned(jiff::tz::TimeZone::UTC).ok()?.timestamp();
            Some(ts.as_microsecond())
        }
    }
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
