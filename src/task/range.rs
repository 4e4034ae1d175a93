//! A window's range on the published path: one value, built once per window from the task
//! and the window ([`WindowRange::of`]), from which everything the published path bounds by
//! that window is derived — the typed query parameters (`$window_start`, …), the bounds on
//! the partition column (rows outside them fail the window; the file map replaces the files
//! inside them: `delta::partition`), the filter on that column, and the replaceWhere
//! predicate recorded in the commit.
//!
//! The read-back of a commit does not derive its window→partition mapping from here: it
//! evaluates the replaceWhere text over the partition values it replays itself (see
//! `delta::readback`), so a wrong mapping here is caught after the commit.

use datafusion::common::ScalarValue;
use datafusion::prelude::{Expr, lit};

use crate::task::Task;
use crate::task::window::{Grain, Window};

/// The window's bounds on the partition column, `[lo, hi)`, typed like the column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Span {
    /// Days since the epoch (a DATE column: day, week and month grains).
    Date(i32, i32),
    /// Microseconds since the epoch, UTC (a TIMESTAMP column: the hour grain).
    Micros(i64, i64),
}

/// One window's range on the published path (see the module's documentation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowRange {
    /// The partition (window) column.
    column: String,
    /// The bounds on that column.
    span: Span,
    /// The window's start and end instants, microseconds since the epoch (`_ts` parameters).
    instants: (i64, i64),
}

impl WindowRange {
    /// The range of `w`, a window of `task`.
    pub fn of(task: &Task, w: &Window) -> WindowRange {
        WindowRange::new(task.grain, &task.partition_by, w)
    }

    /// The range of `w` (of `grain`) on the partition column `column`.
    pub fn new(grain: Grain, column: &str, w: &Window) -> WindowRange {
        let instants = (w.start_ts().as_microsecond(), w.end_ts().as_microsecond());
        let span = if grain.uses_dates() {
            Span::Date(epoch_days(w.start_date()), epoch_days(w.end_date()))
        } else {
            Span::Micros(instants.0, instants.1)
        };
        WindowRange {
            column: column.to_string(),
            span,
            instants,
        }
    }

    /// The partition column.
    pub fn column(&self) -> &str {
        &self.column
    }

    /// The bounds on the partition column.
    pub fn span(&self) -> Span {
        self.span
    }

    /// The range from the start of `self` to the end of `last` (windows of one task).
    pub fn through(&self, last: &WindowRange) -> WindowRange {
        let span = match (self.span, last.span) {
            (Span::Date(lo, _), Span::Date(_, hi)) => Span::Date(lo, hi),
            (Span::Micros(lo, _), Span::Micros(_, hi)) => Span::Micros(lo, hi),
            (first, _) => first,
        };
        WindowRange {
            column: self.column.clone(),
            span,
            instants: (self.instants.0, last.instants.1),
        }
    }

    /// The bounds as values of the partition column's type: `DATE` or `TIMESTAMP` (UTC).
    pub fn lo_hi(&self) -> (ScalarValue, ScalarValue) {
        match self.span {
            Span::Date(lo, hi) => (ScalarValue::Date32(Some(lo)), ScalarValue::Date32(Some(hi))),
            Span::Micros(lo, hi) => (timestamp(lo), timestamp(hi)),
        }
    }

    /// The query parameters, typed like the window column (`$window_start`, `$window_end`)
    /// and as instants (`$window_start_ts`, `$window_end_ts`).
    pub fn params(&self) -> Vec<(String, ScalarValue)> {
        let (start, end) = self.lo_hi();
        vec![
            ("window_start".into(), start),
            ("window_end".into(), end),
            ("window_start_ts".into(), timestamp(self.instants.0)),
            ("window_end_ts".into(), timestamp(self.instants.1)),
        ]
    }

    /// The value of the parameter `name` (without `$`), if it is one of [`Self::params`].
    pub fn param(&self, name: &str) -> Option<ScalarValue> {
        self.params()
            .into_iter()
            .find_map(|(n, v)| (n == name).then_some(v))
    }

    /// The window filter on `column` (the partition column, however qualified):
    /// `column >= lo AND column < hi`.
    pub fn filter(&self, column: Expr) -> Expr {
        let (lo, hi) = self.lo_hi();
        column.clone().gt_eq(lit(lo)).and(column.lt(lit(hi)))
    }

    /// The bounds as SQL literals: `DATE 'YYYY-MM-DD'` or `TIMESTAMP '…Z'`.
    fn literals(&self) -> (String, String) {
        match self.span {
            Span::Date(lo, hi) => (
                format!("DATE '{}'", civil_date(lo)),
                format!("DATE '{}'", civil_date(hi)),
            ),
            Span::Micros(lo, hi) => (
                format!("TIMESTAMP '{}'", instant(lo)),
                format!("TIMESTAMP '{}'", instant(hi)),
            ),
        }
    }

    /// The replaceWhere predicate on the window column, as SQL (recorded in the commit and
    /// used by Delta conflict detection).
    pub fn replace_where(&self) -> String {
        let c = format!("\"{}\"", self.column.replace('"', "\"\""));
        let (lo, hi) = self.literals();
        format!("{c} >= {lo} AND {c} < {hi}")
    }

    /// The half-open interval for messages: `[2026-01-01, 2026-01-02)`.
    pub fn shown(&self) -> String {
        match self.span {
            Span::Date(lo, hi) => format!("[{}, {})", civil_date(lo), civil_date(hi)),
            Span::Micros(lo, hi) => format!("[{}, {})", instant(lo), instant(hi)),
        }
    }
}

fn timestamp(us: i64) -> ScalarValue {
    ScalarValue::TimestampMicrosecond(Some(us), Some("UTC".into()))
}

/// The date `days` after the epoch.
pub fn civil_date(days: i32) -> jiff::civil::Date {
    jiff::civil::date(1970, 1, 1)
        .checked_add(jiff::Span::new().days(i64::from(days)))
        .expect("window dates are within range")
}

fn instant(us: i64) -> jiff::Timestamp {
    jiff::Timestamp::from_microsecond(us).expect("window instants are within range")
}

/// Days since 1970-01-01.
pub fn epoch_days(d: jiff::civil::Date) -> i32 {
    let epoch = jiff::civil::date(1970, 1, 1);
    d.since((jiff::Unit::Day, epoch))
        .expect("dates are within range")
        .get_days()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(grain: Grain, text: &str) -> WindowRange {
        let tz = jiff::tz::TimeZone::get("Europe/Paris").unwrap();
        WindowRange::new(grain, "d", &Window::parse(text, grain, &tz).unwrap())
    }

    /// Everything derives from one value, and says what the window's own accessors say.
    #[test]
    fn a_ranges_parameters_bounds_and_predicate_agree_with_its_window() {
        let tz = jiff::tz::TimeZone::get("Europe/Paris").unwrap();
        for (grain, text) in [
            (Grain::Day, "1995-06-03"),
            (Grain::Week, "2026-W10"),
            (Grain::Month, "2026-03"),
            (Grain::Hour, "2026-03-29T01"),
        ] {
            let w = Window::parse(text, grain, &tz).unwrap();
            let r = WindowRange::new(grain, "d", &w);
            let (lo, hi) = r.lo_hi();
            assert_eq!(r.param("window_start"), Some(lo.clone()));
            assert_eq!(r.param("window_end"), Some(hi.clone()));
            let ts = |t: jiff::Timestamp| timestamp(t.as_microsecond());
            assert_eq!(r.param("window_start_ts"), Some(ts(w.start_ts())));
            assert_eq!(r.param("window_end_ts"), Some(ts(w.end_ts())));
            let (a, b) = if grain.uses_dates() {
                (w.start_date().to_string(), w.end_date().to_string())
            } else {
                (w.start_ts().to_string(), w.end_ts().to_string())
            };
            assert_eq!(r.shown(), format!("[{a}, {b})"));
            let kind = if grain.uses_dates() {
                "DATE"
            } else {
                "TIMESTAMP"
            };
            assert_eq!(
                r.replace_where(),
                format!("\"d\" >= {kind} '{a}' AND \"d\" < {kind} '{b}'")
            );
        }
        assert_eq!(
            range(Grain::Day, "1995-06-03").span(),
            Span::Date(9284, 9285)
        );
        let both = range(Grain::Day, "1995-06-03").through(&range(Grain::Day, "1995-06-05"));
        assert_eq!(both.span(), Span::Date(9284, 9287));
        assert_eq!(
            both.filter(datafusion::prelude::col("d")).to_string(),
            "d >= Date32(\"1995-06-03\") AND d < Date32(\"1995-06-06\")"
        );
        assert_eq!(epoch_days(jiff::civil::date(1969, 12, 31)), -1);
        assert_eq!(civil_date(-1), jiff::civil::date(1969, 12, 31));
    }
}
