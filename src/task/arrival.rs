//! A landing zone's arrival time and lateness (`arrival`, `arrival_timezone`, `lateness` in
//! `[sources.<alias>]`): which partition columns give the day a file arrived, in which time
//! zone, and how late an event may arrive.
//!
//! With them declared, the task filters only on its event time: every query of the task that
//! reads the zone reads it through [`reach`], a filter on those partition columns placed right
//! above the zone's scan. It keeps the arrival days from the one the window starts in to the
//! one its last instant plus the lateness falls in, both in the arrival time zone, so a New
//! York day over UTC `dt=` directories reads the two UTC days it spans, and an event of that
//! day that arrived up to `lateness` later is read too. It is a filter on the window
//! parameters like one the task would have written: every route (the runner, its plain twin,
//! the checks) prunes by it the way it prunes by the task's own.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, IntervalMonthDayNano, TimeUnit};
use datafusion::common::{Column, ScalarValue, TableReference};
use datafusion::logical_expr::expr::Placeholder;
use datafusion::logical_expr::{Expr, ExprSchemable, LogicalPlan, cast, lit};

use crate::error::{Error, Result};

/// A zone's declared arrival time and lateness.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arrival {
    /// The partition columns giving a file's arrival day: one date column (`dt`), or a year,
    /// a month and a day.
    pub columns: Vec<String>,
    /// The IANA time zone the arrival days are days of.
    pub timezone: String,
    /// How late an event may arrive, in microseconds.
    pub lateness_us: i64,
    /// The column holding each row's event time (`event_time`): with it, the rows of the
    /// directories a window reads that no window reaches are counted (`late_rows`).
    pub event_time: Option<String>,
    /// What rows no window reaches do (`on_late`): `warn` (default) publishes and reports
    /// them, `error` (`"fail"`) publishes nothing.
    pub on_late: crate::task::checks::Severity,
}

impl Arrival {
    /// `lateness` parsed: `"2 days"`, `"36h"`, `"P2D"`, `"0"` (jiff's friendly or ISO 8601
    /// forms, days of 24 hours), not negative.
    pub fn lateness(text: &str) -> std::result::Result<i64, String> {
        let text = text.trim();
        if text == "0" {
            return Ok(0);
        }
        let span: jiff::Span = text.parse().map_err(|e| {
            format!("`{text}` is not a duration like \"2 days\" or \"6 hours\": {e}")
        })?;
        let d = span
            .to_duration(jiff::SpanRelativeTo::days_are_24_hours())
            .map_err(|e| format!("`{text}`: {e} (use days, hours or minutes)"))?;
        if d.is_negative() {
            return Err(format!("`{text}` is negative"));
        }
        i64::try_from(d.as_micros()).map_err(|_| format!("`{text}` is too long"))
    }

    /// The arrival days a window `[start, end)` reaches: from its first instant's day to the
    /// day of its last instant plus the lateness, in the arrival time zone (what [`reach`]
    /// keeps).
    pub fn days(
        &self,
        start: jiff::Timestamp,
        end: jiff::Timestamp,
    ) -> Result<(jiff::civil::Date, jiff::civil::Date)> {
        let tz = jiff::tz::TimeZone::get(&self.timezone)
            .map_err(|e| Error::input(format!("arrival_timezone: {e}")))?;
        let last = end
            .checked_add(jiff::SignedDuration::from_micros(self.lateness_us - 1))
            .map_err(|e| Error::runtime(e.to_string()))?;
        Ok((start.to_zoned(tz.clone()).date(), last.to_zoned(tz).date()))
    }

    /// The arrival day of a row of `scan` (`table`'s columns), as a DATE.
    pub fn day(&self, table: &TableReference, scan: &LogicalPlan) -> Result<Expr> {
        let schema = scan.schema();
        let column = |name: &str| -> Result<Expr> {
            let c = Column::new(Some(table.clone()), name);
            if !schema.has_column(&c) {
                return Err(Error::input(format!(
                    "source `{table}`: arrival column `{name}` is not one of its columns (arrival names the zone's partition columns, e.g. arrival = \"dt\" for dt=YYYY-MM-DD directories)"
                )));
            }
            Ok(Expr::Column(c))
        };
        match self.columns.as_slice() {
            [one] => {
                let c = column(one)?;
                Ok(match c.get_type(schema)? {
                    DataType::Date32 => c,
                    _ => cast(c, DataType::Date32),
                })
            }
            [y, m, d] => {
                let part =
                    |name: &str| -> Result<Expr> { Ok(cast(column(name)?, DataType::Int32)) };
                Ok(datafusion::functions::expr_fn::make_date(
                    part(y)?,
                    part(m)?,
                    part(d)?,
                ))
            }
            _ => Err(Error::input(format!(
                "source `{table}`: arrival must name one date column or a year, a month and a day column"
            ))),
        }
    }
}

/// A window parameter (`window_start_ts`, `window_end_ts`) as a typed placeholder.
fn instant(name: &str) -> Expr {
    let ty = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
    let field = Arc::new(Field::new(name, ty, true));
    Expr::Placeholder(Placeholder::new_with_field(format!("${name}"), Some(field)))
}

/// The date an instant falls on in `tz`.
fn local_date(instant: Expr, tz: &str) -> Expr {
    let zoned = cast(
        instant,
        DataType::Timestamp(TimeUnit::Microsecond, Some(tz.into())),
    );
    cast(
        datafusion::functions::expr_fn::to_local_time(vec![zoned]),
        DataType::Date32,
    )
}

/// The filter keeping the arrival days a window reaches, for the zone scanned by `scan` (a
/// table scan of `table`): from the window's first instant's day to the day of its last
/// instant plus the lateness, in the arrival time zone.
pub fn reach(arrival: &Arrival, table: &TableReference, scan: &LogicalPlan) -> Result<Expr> {
    let day = arrival.day(table, scan)?;
    // The last instant of the window, `end - 1µs`, plus the lateness.
    let widen = IntervalMonthDayNano::new(0, 0, (arrival.lateness_us - 1) * 1_000);
    let last = instant("window_end_ts") + lit(ScalarValue::IntervalMonthDayNano(Some(widen)));
    let first = local_date(instant("window_start_ts"), &arrival.timezone);
    let last = local_date(last, &arrival.timezone);
    Ok(day.clone().gt_eq(first).and(day.lt_eq(last)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lateness_reads_days_hours_and_iso_durations_and_refuses_the_rest() {
        let day = 86_400_000_000i64;
        assert_eq!(Arrival::lateness("2 days"), Ok(2 * day));
        assert_eq!(Arrival::lateness("36h"), Ok(3 * day / 2));
        assert_eq!(Arrival::lateness("P1D"), Ok(day));
        assert_eq!(Arrival::lateness("0"), Ok(0));
        assert!(Arrival::lateness("soon").is_err());
        assert!(Arrival::lateness("-1 day").is_err());
        assert!(Arrival::lateness("1 month").is_err());
    }
}
