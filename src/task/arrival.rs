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
    /// a month and a day; or its arrival hour: those and an hour (`0`–`23`).
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

    /// Whether the arrival is by the hour (a year, a month, a day and an hour column).
    pub fn hourly(&self) -> bool {
        self.columns.len() == 4
    }

    /// The arrival days a window `[start, end)` reaches: from its first instant's day to the
    /// day of its last instant plus the lateness, in the arrival time zone (what [`reach`]
    /// keeps).
    pub fn days(
        &self,
        start: jiff::Timestamp,
        end: jiff::Timestamp,
    ) -> Result<(jiff::civil::Date, jiff::civil::Date)> {
        let (first, last) = self.local(start, end)?;
        Ok((first.date(), last.date()))
    }

    /// The arrivals a window `[start, end)` reaches, as local date-times in the arrival time
    /// zone at the start of their day (or hour, [`Arrival::hourly`]): the first instant's to
    /// the last instant's plus the lateness.
    pub fn span(
        &self,
        start: jiff::Timestamp,
        end: jiff::Timestamp,
    ) -> Result<(jiff::civil::DateTime, jiff::civil::DateTime)> {
        let (first, last) = self.local(start, end)?;
        let unit = match self.hourly() {
            true => jiff::Unit::Hour,
            false => jiff::Unit::Day,
        };
        let floor = |t: jiff::civil::DateTime| {
            t.round(
                jiff::civil::DateTimeRound::new()
                    .smallest(unit)
                    .mode(jiff::RoundMode::Trunc),
            )
            .map_err(|e| Error::runtime(e.to_string()))
        };
        Ok((floor(first)?, floor(last)?))
    }

    /// The window's first instant and its last plus the lateness, in the arrival time zone.
    fn local(
        &self,
        start: jiff::Timestamp,
        end: jiff::Timestamp,
    ) -> Result<(jiff::civil::DateTime, jiff::civil::DateTime)> {
        let tz = jiff::tz::TimeZone::get(&self.timezone)
            .map_err(|e| Error::input(format!("arrival_timezone: {e}")))?;
        let last = end
            .checked_add(jiff::SignedDuration::from_micros(self.lateness_us - 1))
            .map_err(|e| Error::runtime(e.to_string()))?;
        Ok((
            start.to_zoned(tz.clone()).datetime(),
            last.to_zoned(tz).datetime(),
        ))
    }

    /// The arrival of a row of `scan` (`table`'s columns): its day's (or hour's) start as
    /// local microseconds since 1970-01-01T00:00 (a BIGINT).
    pub fn at(&self, table: &TableReference, scan: &LogicalPlan) -> Result<Expr> {
        let midnight = cast(
            cast(
                self.day(table, scan)?,
                DataType::Timestamp(TimeUnit::Microsecond, None),
            ),
            I64,
        );
        let [.., hour] = self.columns.as_slice() else {
            unreachable!("one column at least")
        };
        Ok(match self.hourly() {
            true => midnight + level(table, hour) * lit(3_600_000_000i64),
            false => midnight,
        })
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
            [y, m, d] | [y, m, d, _] => {
                let part =
                    |name: &str| -> Result<Expr> { Ok(cast(column(name)?, DataType::Int32)) };
                Ok(datafusion::functions::expr_fn::make_date(
                    part(y)?,
                    part(m)?,
                    part(d)?,
                ))
            }
            _ => Err(Error::input(format!(
                "source `{table}`: arrival must name one date column, a year, a month and a day column, or those and an hour column"
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
    let days = day
        .clone()
        .gt_eq(first.clone())
        .and(day.lt_eq(last.clone()));
    let (y, m) = match arrival.columns.as_slice() {
        [y, m, _] | [y, m, _, _] => (y, m),
        _ => return Ok(days),
    };
    // A year and a month level: the same range on each, conjuncts of their own, so the
    // listing keeps only the years and months in reach before it lists their days (and an
    // hour level, the hours in reach).
    let level = |name: &str| level(table, name);
    let part = |what: &str, date: &Expr| {
        cast(
            datafusion::functions::expr_fn::date_part(lit(what), date.clone()),
            I64,
        )
    };
    let month_of = |year: Expr, month: Expr| year * lit(12i64) + month;
    let (year, month) = (level(y), level(m));
    let years = year
        .clone()
        .gt_eq(part("year", &first))
        .and(year.clone().lt_eq(part("year", &last)));
    let months = month_of(year.clone(), month.clone())
        .gt_eq(month_of(part("year", &first), part("month", &first)))
        .and(month_of(year, month).lt_eq(month_of(part("year", &last), part("month", &last))));
    let reach = years.and(months).and(days);
    if !arrival.hourly() {
        return Ok(reach);
    }
    let at = arrival.at(table, scan)?;
    let hour_of = |instant: Expr| {
        let zoned = cast(
            instant,
            DataType::Timestamp(
                TimeUnit::Microsecond,
                Some(arrival.timezone.as_str().into()),
            ),
        );
        let local = datafusion::functions::expr_fn::to_local_time(vec![zoned]);
        let hour = datafusion::functions::expr_fn::date_trunc(lit("hour"), local);
        cast(
            cast(hour, DataType::Timestamp(TimeUnit::Microsecond, None)),
            I64,
        )
    };
    let last = instant("window_end_ts") + lit(ScalarValue::IntervalMonthDayNano(Some(widen)));
    let hours = at
        .clone()
        .gt_eq(hour_of(instant("window_start_ts")))
        .and(at.lt_eq(hour_of(last)));
    Ok(reach.and(hours))
}

const I64: DataType = DataType::Int64;

/// Partition column `name` of `table` as a BIGINT.
fn level(table: &TableReference, name: &str) -> Expr {
    cast(Expr::Column(Column::new(Some(table.clone()), name)), I64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_arrival_spans_the_days_or_hours_a_window_and_its_lateness_reach() {
        let hour = 3_600_000_000i64;
        let arrival = |columns: &[&str], timezone: &str, lateness_us: i64| Arrival {
            columns: columns.iter().map(|c| c.to_string()).collect(),
            timezone: timezone.into(),
            lateness_us,
            event_time: None,
            on_late: crate::task::checks::Severity::Warn,
        };
        let at = |s: &str| s.parse::<jiff::Timestamp>().unwrap();
        let local = |s: &str| s.parse::<jiff::civil::DateTime>().unwrap();
        let (start, end) = (at("2026-11-02T00:00:00Z"), at("2026-11-03T00:00:00Z"));
        let hourly = ["year", "month", "day", "hour"];
        assert_eq!(
            arrival(&hourly, "UTC", hour).span(start, end).unwrap(),
            (local("2026-11-02T00:00"), local("2026-11-03T00:00"))
        );
        assert_eq!(
            arrival(&hourly, "UTC", 0).span(start, end).unwrap(),
            (local("2026-11-02T00:00"), local("2026-11-02T23:00"))
        );
        // Half-hour offsets: the hours the local instants fall in.
        assert_eq!(
            arrival(&hourly, "Asia/Kolkata", 0)
                .span(start, end)
                .unwrap(),
            (local("2026-11-02T05:00"), local("2026-11-03T05:00"))
        );
        let daily = arrival(&["year", "month", "day"], "UTC", hour);
        assert_eq!(
            daily.span(start, end).unwrap(),
            (local("2026-11-02T00:00"), local("2026-11-03T00:00"))
        );
        assert_eq!(
            daily.days(start, end).unwrap(),
            (
                jiff::civil::date(2026, 11, 2),
                jiff::civil::date(2026, 11, 3)
            )
        );
    }

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
