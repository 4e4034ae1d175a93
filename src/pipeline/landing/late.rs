//! Rows no window reaches (`late_rows`): every row of the arrival-day directories a window
//! reads is placed — in this window, in another window whose reach holds its directory, or in
//! none (it arrived later than `lateness` after its window, or before it, or has no event
//! time). The last kind would be lost silently; it is counted per window, as a data check of
//! the source's `on_late` severity (`warn`: published and reported; `fail`: nothing
//! published).
//!
//! One query per zone over the checks' session (the zone registered plainly): the window's
//! arrival days, the rows whose event time is not in the window, counted by arrival day and
//! event minute; each minute's window (the task's grain and time zone) and that window's
//! arrival days then say whether the row is reached. A minute lies in one window whatever the
//! zone's offset (offsets are whole minutes).

use arrow::array::{Array, AsArray};
use arrow::datatypes::{DataType, Int64Type, TimeUnit};
use datafusion::common::TableReference;
use datafusion::functions_aggregate::expr_fn::count;
use datafusion::logical_expr::{Expr, cast, col, lit};
use datafusion::prelude::SessionContext;

use crate::error::Result;
use crate::report::record::DataCheckResult;
use crate::task::Task;
use crate::task::arrival::Arrival;
use crate::task::range::WindowRange;
use crate::task::window::Window;

/// Offending groups kept per check.
const SAMPLE: usize = 5;

/// The `late_rows(<alias>)` check of each zone of `task` declaring its `event_time`.
pub async fn late_rows(
    ctx: &SessionContext,
    task: &Task,
    window: &Window,
) -> Result<Vec<DataCheckResult>> {
    let mut out = Vec::new();
    for s in &task.sources {
        let Some(arrival) = s.arrival.as_ref() else {
            continue;
        };
        let Some(event_time) = &arrival.event_time else {
            continue;
        };
        let groups = unplaced_groups(ctx, task, window, (&s.alias, arrival), event_time).await?;
        let mut late = 0u64;
        let mut sample = Vec::new();
        for (at, minute, rows) in groups {
            if reached(task, arrival, at, minute)? {
                continue;
            }
            late += rows;
            if sample.len() < SAMPLE {
                let mut m = serde_json::Map::new();
                let arrival_at = match arrival.hourly() {
                    true => ("arrival_hour", at.strftime("%Y-%m-%dT%H").to_string()),
                    false => ("arrival_day", at.date().to_string()),
                };
                m.insert(arrival_at.0.into(), arrival_at.1.into());
                let at = minute.map(|t| t.to_string());
                m.insert("event_minute".into(), at.into());
                m.insert("rows".into(), rows.into());
                sample.push(m);
            }
        }
        out.push(DataCheckResult {
            check: format!("late_rows({})", s.alias),
            severity: arrival.on_late,
            ok: late == 0,
            failing_rows: late,
            sample,
        });
    }
    Ok(out)
}

/// Whether a row that arrived `at` (its arrival day's or hour's start) with its event in
/// `minute` is read by the window holding that minute.
fn reached(
    task: &Task,
    arrival: &Arrival,
    at: jiff::civil::DateTime,
    minute: Option<jiff::Timestamp>,
) -> Result<bool> {
    let Some(minute) = minute else {
        return Ok(false);
    };
    let w = Window::containing(task.grain, &minute.to_zoned(task.timezone.clone()))?;
    let (first, last) = arrival.span(w.start_ts(), w.end_ts())?;
    Ok(first <= at && at <= last)
}

/// The rows of the window's arrival days (or hours) whose event time is outside the window
/// (or NULL): (arrival day's or hour's start, event minute, rows).
async fn unplaced_groups(
    ctx: &SessionContext,
    task: &Task,
    window: &Window,
    (alias, arrival): (&str, &Arrival),
    event_time: &str,
) -> Result<Vec<(jiff::civil::DateTime, Option<jiff::Timestamp>, u64)>> {
    let table = TableReference::bare(alias);
    let df = ctx.table(table.clone()).await?;
    let reach = crate::task::arrival::reach(arrival, &table, df.logical_plan())?;
    let at = arrival.at(&table, df.logical_plan())?;
    let utc = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
    let ts = cast(col(event_time), utc.clone());
    let (start, end) = (
        window.start_ts().as_microsecond(),
        window.end_ts().as_microsecond(),
    );
    let bound = |us: i64| {
        lit(datafusion::common::ScalarValue::TimestampMicrosecond(
            Some(us),
            Some("UTC".into()),
        ))
    };
    let inside = ts
        .clone()
        .gt_eq(bound(start))
        .and(ts.clone().lt(bound(end)));
    let minute = datafusion::functions::expr_fn::date_bin(
        lit(datafusion::common::ScalarValue::new_interval_dt(0, 60_000)),
        ts.clone(),
        bound(0),
    );
    let params: std::collections::HashMap<String, _> =
        WindowRange::of(task, window).params().into_iter().collect();
    let df = df
        .filter(reach)?
        .with_param_values(params)?
        .filter(ts.is_null().or(Expr::Not(Box::new(inside))))?
        .aggregate(
            vec![
                at.alias("at"),
                cast(cast(minute, utc), DataType::Int64).alias("minute"),
            ],
            vec![count(lit(1)).alias("rows")],
        )?;
    let mut out = Vec::new();
    for b in df.collect().await? {
        let ats = b.column(0).as_primitive::<Int64Type>();
        let minutes = b.column(1).as_primitive::<Int64Type>();
        let rows = b.column(2).as_primitive::<Int64Type>();
        for i in 0..b.num_rows() {
            if ats.is_null(i) {
                continue;
            }
            let at = jiff::Timestamp::from_microsecond(ats.value(i))
                .map_err(|e| crate::error::Error::runtime(e.to_string()))?
                .to_zoned(jiff::tz::TimeZone::UTC)
                .datetime();
            let minute = (!minutes.is_null(i))
                .then(|| jiff::Timestamp::from_microsecond(minutes.value(i)).ok())
                .flatten();
            out.push((at, minute, rows.value(i) as u64));
        }
    }
    Ok(out)
}

/// The arrival days (or hours) of `window` itself (its first instant's to its last's, in the
/// arrival time zone, no lateness), as text, when none of them is among the directories
/// `dirs` that exist (each the partition values of a deepest directory of `zone`); `None`
/// when one has landed (a week or a month is landed by any of its days: a day without events
/// may have no directory).
pub fn own_days_absent(
    arrival: &Arrival,
    zone: &super::LandingZone,
    window: &Window,
    dirs: &[Vec<datafusion::common::ScalarValue>],
) -> Result<Option<String>> {
    use datafusion::common::ScalarValue;
    let own = Arrival {
        lateness_us: 0,
        ..arrival.clone()
    };
    let (first, last) = own.span(window.start_ts(), window.end_ts())?;
    let at: Vec<usize> = arrival
        .columns
        .iter()
        .filter_map(|c| zone.columns.iter().position(|(n, _)| n == c))
        .collect();
    if at.len() != arrival.columns.len() {
        // Not levels of the zone: `arrival` checks say so elsewhere; nothing to add here.
        return Ok(None);
    }
    let int = |v: &ScalarValue| -> Option<i64> {
        match v {
            ScalarValue::Utf8(Some(s)) | ScalarValue::LargeUtf8(Some(s)) => s.parse().ok(),
            other => other.cast_to(&DataType::Int64).ok().and_then(|v| match v {
                ScalarValue::Int64(n) => n,
                _ => None,
            }),
        }
    };
    let date_of = |values: &[ScalarValue]| -> Option<jiff::civil::DateTime> {
        let date = match at.as_slice() {
            [i] => match &values[*i] {
                ScalarValue::Date32(Some(d)) => jiff::civil::date(1970, 1, 1)
                    .checked_add(jiff::Span::new().days(i64::from(*d)))
                    .ok(),
                ScalarValue::Utf8(Some(s)) | ScalarValue::LargeUtf8(Some(s)) => s.parse().ok(),
                _ => None,
            },
            [y, m, d] | [y, m, d, _] => jiff::civil::Date::new(
                i16::try_from(int(&values[*y])?).ok()?,
                i8::try_from(int(&values[*m])?).ok()?,
                i8::try_from(int(&values[*d])?).ok()?,
            )
            .ok(),
            _ => None,
        }?;
        let hour = match at.as_slice() {
            [.., h] if arrival.hourly() => i8::try_from(int(&values[*h])?).ok()?,
            _ => 0,
        };
        jiff::civil::DateTime::new(date.year(), date.month(), date.day(), hour, 0, 0, 0).ok()
    };
    let landed: std::collections::HashSet<jiff::civil::DateTime> =
        dirs.iter().filter_map(|v| date_of(v)).collect();
    if landed.iter().any(|d| first <= *d && *d <= last) {
        return Ok(None);
    }
    let shown = |t: jiff::civil::DateTime| match arrival.hourly() {
        true => t.strftime("%Y-%m-%dT%H").to_string(),
        false => t.date().to_string(),
    };
    Ok(Some(match first == last {
        true => shown(first),
        false => format!("{} to {}", shown(first), shown(last)),
    }))
}
