//! Hour windows written in their short form, `2026-11-28T05`, or with an offset,
//! `2026-10-25T02+01:00`, for one of the two local hours a time zone repeats.

use jiff::civil::{Date, DateTime};
use jiff::tz::{AmbiguousOffset, Offset, TimeZone};

use super::{Grain, Window, parse_offset, tz_name};
use crate::error::{Error, Result};

impl Window {
    /// An hour window, `2026-11-28T05`, or `2026-10-25T02+01:00` for one of the two local
    /// hours a time zone repeats when its clocks go back.
    pub(super) fn parse_hour(text: &str, tz: &TimeZone) -> Result<Window> {
        let bad = |e: jiff::Error| Error::input(format!("malformed window `{text}`: {e}"));
        let (d, h) = text.split_once('T').expect("checked by short_form_grain");
        let d: Date = d.parse().map_err(bad)?;
        let (h, offset) = match h.len() {
            2 => (h, None),
            _ => (&h[..2], Some(&h[2..])),
        };
        let h: i8 = h
            .parse()
            .map_err(|_| Error::input(format!("malformed window `{text}`")))?;
        let dt = DateTime::new(d.year(), d.month(), d.day(), h, 0, 0, 0).map_err(bad)?;
        let Some(offset) = offset else {
            return Self::from_start(Grain::Hour, local_hour(text, dt, tz)?);
        };
        // `2026-10-25T02+01:00`: the local hour at that offset (the label of a repeated hour).
        let wanted = parse_offset(offset).ok_or_else(|| {
            Error::input(format!(
                "malformed window `{text}`: `{offset}` is not an offset like +01:00"
            ))
        })?;
        let zoned = dt
            .to_zoned(TimeZone::fixed(wanted))
            .map_err(bad)?
            .timestamp()
            .to_zoned(tz.clone());
        if zoned.datetime() != dt || zoned.offset() != wanted {
            return Err(Error::input(format!(
                "window `{text}`: {} has no local hour {} at offset {offset}",
                tz_name(tz),
                &text[..13]
            )));
        }
        Self::from_start(Grain::Hour, zoned)
    }
}

/// Local hour `dt` (window `text`) in `tz`: refused if the clocks skip it, or repeat it
/// (naming the two labels that pick one).
fn local_hour(text: &str, dt: DateTime, tz: &TimeZone) -> Result<jiff::Zoned> {
    let ambiguous = tz.to_ambiguous_zoned(dt);
    match ambiguous.offset() {
        AmbiguousOffset::Gap { before, after } => Err(Error::input(format!(
            "window `{text}`: that hour does not exist in time zone {}: clocks skip it, going from UTC{} to UTC{}, so no window has it",
            tz_name(tz),
            hhmm(before),
            hhmm(after),
        ))),
        AmbiguousOffset::Fold { before, after } => Err(Error::input(format!(
            "window `{text}`: time zone {} has that local hour twice (clocks go back): pass `{}{}` for the first or `{}{}` for the second",
            tz_name(tz),
            &text[..13],
            hhmm(before),
            &text[..13],
            hhmm(after),
        ))),
        AmbiguousOffset::Unambiguous { .. } => ambiguous
            .unambiguous()
            .map_err(|e| Error::input(format!("window `{text}`: {e}"))),
    }
}

/// An offset as `+HH:MM`.
fn hhmm(o: Offset) -> String {
    let s = o.seconds();
    let sign = if s < 0 { '-' } else { '+' };
    let s = s.unsigned_abs();
    format!("{sign}{:02}:{:02}", s / 3600, s % 3600 / 60)
}
