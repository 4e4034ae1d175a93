//! Execution windows: the half-open time interval one run covers.
//!
//! A window is `[start, end)` at the task's grain (hour/day/week/month) in the task's IANA time
//! zone. It is built only from what the caller passes (a short form like `2026-11-28` or an
//! aligned RFC 3339 `START/END` interval); nothing here reads the wall clock.
//! Invariants: `start < end`; `start` is a grain boundary in the zone; `end` is the next one
//! (so a Berlin day is 23, 24 or 25 hours long); DATE bounds exist for day/week/month only.

use std::fmt;
use std::str::FromStr;

use jiff::Timestamp;
use jiff::Zoned;
use jiff::civil::{Date, ISOWeekDate, Weekday};
use jiff::tz::TimeZone;

use crate::error::{Error, Result};

/// The length of one window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Grain {
    Hour,
    Day,
    Week,
    Month,
}

impl Grain {
    pub fn as_str(self) -> &'static str {
        match self {
            Grain::Hour => "hour",
            Grain::Day => "day",
            Grain::Week => "week",
            Grain::Month => "month",
        }
    }

    /// An example of the short window form at this grain, for error messages.
    /// The grain's name with its article: "an hour", "a day".
    pub fn with_article(self) -> String {
        match self {
            Grain::Hour => "an hour".to_string(),
            other => format!("a {other}"),
        }
    }

    pub fn example(self) -> &'static str {
        match self {
            Grain::Hour => "2026-11-28T05",
            Grain::Day => "2026-11-28",
            Grain::Week => "2026-W48",
            Grain::Month => "2026-11",
        }
    }

    /// Whether the window column (and `$window_start`/`$window_end`) is a DATE.
    pub fn uses_dates(self) -> bool {
        !matches!(self, Grain::Hour)
    }
}

impl fmt::Display for Grain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Grain {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "hour" => Ok(Grain::Hour),
            "day" => Ok(Grain::Day),
            "week" => Ok(Grain::Week),
            "month" => Ok(Grain::Month),
            other => Err(Error::input(format!(
                "unknown grain `{other}`: expected hour, day, week or month"
            ))),
        }
    }
}

/// One execution window.
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    grain: Grain,
    start: Zoned,
    end: Zoned,
}

impl Window {
    /// Parse a window argument at `grain` in time zone `tz`.
    ///
    /// Accepts the short form of the grain or an explicit `START/END` RFC 3339 interval that
    /// must cover exactly one window of the grain.
    pub fn parse(text: &str, grain: Grain, tz: &TimeZone) -> Result<Window> {
        let text = text.trim();
        if text.is_empty() {
            return Err(Error::input(format!(
                "empty window: pass {} like {}",
                grain.with_article(),
                grain.example()
            )));
        }
        if let Some(date) = slashed_date(text) {
            return Err(Error::input(format!(
                "window `{text}` is a date written with slashes: write it {date} (a window names one {grain}, like {}; or give an interval START/END)",
                grain.example()
            )));
        }
        if let Some((a, b)) = text.split_once('/') {
            return Self::parse_interval(text, a, b, grain, tz);
        }
        let found = short_form_grain(text).ok_or_else(|| {
            Error::input(format!(
                "malformed window `{text}`: expected {} like {} or an RFC 3339 interval START/END",
                grain.with_article(),
                grain.example()
            ))
        })?;
        if found != grain {
            return Err(Error::input(format!(
                "window `{text}` is {}, but the task's grain is {grain}: pass {} like {}",
                found.with_article(),
                grain.with_article(),
                grain.example()
            )));
        }
        let bad = |e: jiff::Error| Error::input(format!("malformed window `{text}`: {e}"));
        let malformed = |_| Error::input(format!("malformed window `{text}`"));
        let start = match grain {
            Grain::Day => Date::from_str(text).map_err(bad)?,
            Grain::Month => {
                let (y, m) = text.split_once('-').expect("checked by short_form_grain");
                let (y, m) = (y.parse().map_err(malformed)?, m.parse().map_err(malformed)?);
                Date::new(y, m, 1).map_err(bad)?
            }
            Grain::Week => {
                let (y, w) = text.split_once("-W").expect("checked by short_form_grain");
                let (y, w) = (y.parse().map_err(malformed)?, w.parse().map_err(malformed)?);
                iso_week(text, y, w)?
            }
            Grain::Hour => return Self::parse_hour(text, tz),
        };
        let zoned = start.to_zoned(tz.clone()).map_err(bad)?;
        Self::from_start(grain, zoned)
    }

    fn parse_interval(text: &str, a: &str, b: &str, grain: Grain, tz: &TimeZone) -> Result<Window> {
        let parse = |s: &str| {
            Timestamp::from_str(s.trim()).map_err(|e| {
                Error::input(format!(
                    "malformed window interval `{text}`: `{s}` is not an RFC 3339 timestamp with offset ({e})"
                ))
            })
        };
        // `DATE/DATE` (day, week and month grains): midnights in the task's time zone, the
        // end exclusive: two dates as a cron script or Dagster's date partition keys give them.
        // Only a bare `YYYY-MM-DD` is a date here (jiff also reads the date of a timestamp).
        let date = |s: &str| {
            let s = s.trim();
            if s.len() == 10 && !s.contains(['T', 't', ' ']) {
                Date::from_str(s)
            } else {
                Err(jiff::Error::from_args(format_args!("not a bare date")))
            }
        };
        let dates = (date(a), date(b));
        let (start, end) = match dates {
            (Ok(a), Ok(b)) if grain.uses_dates() => {
                let midnight = |d: Date| {
                    d.to_zoned(tz.clone())
                        .map(|z| z.timestamp())
                        .map_err(|e| Error::input(format!("window interval `{text}`: {e}")))
                };
                (midnight(a)?, midnight(b)?)
            }
            (Ok(_), Ok(_)) => {
                return Err(Error::input(format!(
                    "window interval `{text}` gives dates, but the task's grain is {grain}: pass timestamps with offsets, START/END in RFC 3339"
                )));
            }
            _ => (parse(a)?, parse(b)?),
        };
        if start == end {
            return Err(Error::input(format!(
                "window interval `{text}` is empty: START equals END. Airflow 3's CronTriggerTimetable (its `@daily`) gives runs an empty data interval: use a CronDataIntervalTimetable and pass `{{{{ data_interval_start }}}}/{{{{ data_interval_end }}}}`, or name the window itself (the day before the trigger: `{{{{ macros.ds_add(ds, -1) }}}}`)"
            )));
        }
        if start > end {
            return Err(Error::input(format!(
                "window interval `{text}` is reversed: START must be before END"
            )));
        }
        let zoned = start.to_zoned(tz.clone());
        let aligned = Self::containing(grain, &zoned)?;
        if aligned.start.timestamp() == start && aligned.end.timestamp() < end {
            let last = Self::containing(
                grain,
                &(end - jiff::SignedDuration::from_nanos(1)).to_zoned(tz.clone()),
            )?;
            return Err(Error::input(format!(
                "window interval `{text}` spans more than one {grain}, but a window is one {grain} ({}): for a range, run `idemlake backfill <task> --from {} --to {}`",
                aligned.interval(),
                aligned.label(),
                last.label()
            )));
        }
        if aligned.start.timestamp() != start || aligned.end.timestamp() != end {
            return Err(Error::input(format!(
                "window interval `{text}` is not aligned with the task's grain ({grain} in {}): the {grain} containing its start is {}",
                tz_name(tz),
                aligned.interval()
            )));
        }
        Ok(aligned)
    }

    /// The window of `grain` that contains the instant `at`.
    pub fn containing(grain: Grain, at: &Zoned) -> Result<Window> {
        let err = |e: jiff::Error| {
            Error::input(format!(
                "cannot place {at} in {}: {e}",
                grain.with_article()
            ))
        };
        let tz = at.time_zone().clone();
        let start = match grain {
            Grain::Hour => {
                // Subtract the offset into the local hour, so both hours of a DST fold work.
                let into = jiff::SignedDuration::from_secs(
                    i64::from(at.minute()) * 60 + i64::from(at.second()),
                ) + jiff::SignedDuration::from_nanos(i64::from(at.subsec_nanosecond()));
                at.timestamp().checked_sub(into).map_err(err)?.to_zoned(tz)
            }
            Grain::Day => at.date().to_zoned(tz).map_err(err)?,
            Grain::Week => {
                let d = at.date();
                let monday = d
                    .checked_sub(
                        jiff::Span::new().days(i64::from(d.weekday().to_monday_zero_offset())),
                    )
                    .map_err(err)?;
                monday.to_zoned(tz).map_err(err)?
            }
            Grain::Month => at.date().first_of_month().to_zoned(tz).map_err(err)?,
        };
        Self::from_start(grain, start)
    }

    fn from_start(grain: Grain, start: Zoned) -> Result<Window> {
        let tz = start.time_zone().clone();
        let err =
            |e: jiff::Error| Error::input(format!("window after {start} is out of range: {e}"));
        let end = match grain {
            Grain::Hour => start
                .timestamp()
                .checked_add(jiff::SignedDuration::from_hours(1))
                .map_err(err)?
                .to_zoned(tz),
            Grain::Day => start
                .date()
                .tomorrow()
                .map_err(err)?
                .to_zoned(tz)
                .map_err(err)?,
            Grain::Week => start
                .date()
                .checked_add(jiff::Span::new().days(7))
                .map_err(err)?
                .to_zoned(tz)
                .map_err(err)?,
            Grain::Month => start
                .date()
                .last_of_month()
                .tomorrow()
                .map_err(err)?
                .to_zoned(tz)
                .map_err(err)?,
        };
        Ok(Window { grain, start, end })
    }

    /// A window from the start of `first` to the end of `last` (several grains long): used to
    /// bind a task's parameters to a whole range at once (audit). Not a runnable window.
    pub fn spanning(first: &Window, last: &Window) -> Result<Window> {
        if last.start < first.start {
            return Err(Error::input("window range is reversed"));
        }
        Ok(Window {
            grain: first.grain,
            start: first.start.clone(),
            end: last.end.clone(),
        })
    }

    /// The window right before this one.
    pub fn previous(&self) -> Result<Window> {
        let before = self
            .start_ts()
            .checked_sub(jiff::SignedDuration::from_nanos(1))
            .map_err(|e| Error::input(format!("no window before {}: {e}", self.label())))?;
        Self::containing(self.grain, &before.to_zoned(self.start.time_zone().clone()))
    }

    /// This window and the `n` before it, oldest first.
    pub fn with_lookback(&self, n: u32) -> Result<Vec<Window>> {
        let mut out = vec![self.clone()];
        for _ in 0..n {
            let before = out[0].previous()?;
            out.insert(0, before);
        }
        Ok(out)
    }

    /// The window right after this one.
    pub fn next(&self) -> Result<Window> {
        Self::from_start(self.grain, self.end.clone())
    }

    /// All windows from `first` through `last`, inclusive.
    pub fn range(first: &Window, last: &Window) -> Result<Vec<Window>> {
        if last.start < first.start {
            return Err(Error::input(format!(
                "window range is reversed: {} comes after {}",
                first.label(),
                last.label()
            )));
        }
        let mut out = vec![first.clone()];
        while out.last().expect("non-empty").start < last.start {
            out.push(out.last().expect("non-empty").next()?);
        }
        Ok(out)
    }

    pub fn grain(&self) -> Grain {
        self.grain
    }
    pub fn start(&self) -> &Zoned {
        &self.start
    }
    pub fn end(&self) -> &Zoned {
        &self.end
    }
    pub fn start_ts(&self) -> Timestamp {
        self.start.timestamp()
    }
    pub fn end_ts(&self) -> Timestamp {
        self.end.timestamp()
    }
    /// The local calendar date the window starts on (day/week/month bounds).
    pub fn start_date(&self) -> Date {
        self.start.date()
    }
    /// The local calendar date of the (exclusive) end.
    pub fn end_date(&self) -> Date {
        self.end.date()
    }
    /// Length of the window in whole hours (23/24/25 for a day across DST).
    pub fn hours(&self) -> i64 {
        self.end_ts().duration_since(self.start_ts()).as_secs() / 3600
    }

    /// The short form at this grain, e.g. `2026-11-28`, `2026-W48`, `2026-11`, `2026-11-28T05`.
    pub fn label(&self) -> String {
        match self.grain {
            Grain::Hour if self.repeats_local_hour() => {
                self.start.strftime("%Y-%m-%dT%H%:z").to_string()
            }
            Grain::Hour => self.start.strftime("%Y-%m-%dT%H").to_string(),
            Grain::Day => self.start.date().to_string(),
            Grain::Week => {
                let iso = self.start.date().iso_week_date();
                format!("{:04}-W{:02}", iso.year(), iso.week())
            }
            Grain::Month => self.start.strftime("%Y-%m").to_string(),
        }
    }

    /// Whether the local hour this window starts in happens twice (a DST fall-back fold):
    /// its label then carries the offset, so both hours have distinct labels.
    fn repeats_local_hour(&self) -> bool {
        matches!(
            self.start
                .time_zone()
                .to_ambiguous_zoned(self.start.datetime())
                .offset(),
            jiff::tz::AmbiguousOffset::Fold { .. }
        )
    }

    /// The window's identity: the instants it begins and ends (µs since the epoch). Labels
    /// are for people; everything that keys windows uses this.
    pub fn key(&self) -> (i64, i64) {
        (
            self.start.timestamp().as_microsecond(),
            self.end.timestamp().as_microsecond(),
        )
    }

    /// RFC 3339 with the zone's offset, e.g. `2026-03-29T00:00:00+01:00`.
    pub fn start_rfc3339(&self) -> String {
        rfc3339(&self.start)
    }
    pub fn end_rfc3339(&self) -> String {
        rfc3339(&self.end)
    }
    /// `START/END` in RFC 3339, the form orchestrators pass.
    pub fn interval(&self) -> String {
        format!("{}/{}", self.start_rfc3339(), self.end_rfc3339())
    }
}

fn rfc3339(z: &Zoned) -> String {
    // RFC 3339 offsets have whole minutes; a zone's historical local mean time may not
    // (Asia/Kolkata before 1854: +05:53:28). Such instants are written in UTC so the
    // interval names exactly the window (found by the window parser's property test).
    if z.offset().seconds() % 60 != 0 {
        return z.timestamp().to_string();
    }
    z.timestamp().display_with_offset(z.offset()).to_string()
}

/// The IANA name of a zone, for messages.
pub fn tz_name(tz: &TimeZone) -> String {
    tz.iana_name().unwrap_or("UTC").to_string()
}

/// Look up an IANA time zone by name, in the database DataFusion's time zone functions use
/// too (see `tzdb`); UTC and fixed offsets as jiff reads them.
pub fn time_zone(name: &str) -> Result<TimeZone> {
    if let Some(tz) = crate::task::tzdb::get(name) {
        return Ok(tz);
    }
    TimeZone::get(name).map_err(|e| Error::input(format!("unknown time zone `{name}`: {e}")))
}

/// The Monday of ISO week `w` of ISO year `y` (window `text`): a year has 52 or 53 weeks.
fn iso_week(text: &str, y: i16, w: i8) -> Result<Date> {
    let weeks = |y: i16| {
        // Dec 28th is always in the year's last ISO week.
        Date::new(y, 12, 28).map(|d| d.iso_week_date().week())
    };
    match (ISOWeekDate::new(y, w, Weekday::Monday), weeks(y)) {
        (Ok(d), _) => Ok(d.date()),
        (Err(_), Ok(n)) if w > n || w < 1 => Err(Error::input(format!(
            "window `{text}`: ISO year {y} has {n} weeks (W01 to W{n})"
        ))),
        (Err(e), _) => Err(Error::input(format!("malformed window `{text}`: {e}"))),
    }
}

/// `+HH:MM` / `-HH:MM` as an offset.
fn parse_offset(s: &str) -> Option<jiff::tz::Offset> {
    let b = s.as_bytes();
    if b.len() != 6 || !matches!(b[0], b'+' | b'-') || b[3] != b':' {
        return None;
    }
    let h: i32 = s[1..3].parse().ok()?;
    let m: i32 = s[4..6].parse().ok()?;
    if h > 23 || m > 59 {
        return None;
    }
    let secs = (h * 3600 + m * 60) * if b[0] == b'-' { -1 } else { 1 };
    jiff::tz::Offset::from_seconds(secs).ok()
}

mod hour;

mod forms;
use forms::{short_form_grain, slashed_date};

#[cfg(test)]
mod tests;
