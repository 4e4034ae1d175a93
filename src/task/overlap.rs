//! How a window relates to another task's windows: by **overlap**, the one rule for waiting
//! (`require = "complete"`), staleness and `backfill --downstream`. Windows of grains that nest
//! relate exactly as by containment; windows that do not line up — hours of a half-hour zone
//! (Asia/Kolkata, +05:30) and UTC days — relate to every window they share an instant with:
//! the hour 23:30Z–00:30Z feeds (and is waited for by) both UTC days it straddles.

use jiff::Timestamp;

use crate::error::Result;
use crate::task::Task;
use crate::task::window::Window;

/// Whether the instants `[a_start, a_end)` and `[b_start, b_end)` share one.
pub fn overlaps(
    a_start: Timestamp,
    a_end: Timestamp,
    b_start: Timestamp,
    b_end: Timestamp,
) -> bool {
    a_start < b_end && b_start < a_end
}

/// The first and last windows of `task` overlapping the instants `[lo, hi)` (every window
/// between them overlaps it too).
pub fn overlapping(task: &Task, lo: Timestamp, hi: Timestamp) -> Result<Option<(Window, Window)>> {
    if hi <= lo {
        return Ok(None);
    }
    let at = |t: Timestamp| t.to_zoned(task.timezone.clone());
    let last = hi - jiff::SignedDuration::from_micros(1);
    Ok(Some((
        Window::containing(task.grain, &at(lo))?,
        Window::containing(task.grain, &at(last))?,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn a_half_hour_zone_hour_overlaps_both_days_it_straddles() {
        let tz = crate::task::window::time_zone("Asia/Kolkata").unwrap();
        let hour = Window::parse("2026-08-05T05", crate::task::window::Grain::Hour, &tz).unwrap();
        assert_eq!(hour.start_ts(), ts("2026-08-04T23:30:00Z"));
        let day = |d: &str| {
            let lo = ts(&format!("{d}T00:00:00Z"));
            (lo, lo + jiff::SignedDuration::from_hours(24))
        };
        for d in ["2026-08-04", "2026-08-05"] {
            let (lo, hi) = day(d);
            assert!(overlaps(hour.start_ts(), hour.end_ts(), lo, hi), "{d}");
        }
        let (lo, hi) = day("2026-08-06");
        assert!(!overlaps(hour.start_ts(), hour.end_ts(), lo, hi));
        // Touching ends do not overlap.
        assert!(!overlaps(lo, hi, hi, ts("2026-08-08T00:00:00Z")));
    }
}
