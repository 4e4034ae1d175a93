//! One time zone database for windows and SQL.
//!
//! DataFusion's time zone functions (`AT TIME ZONE`, `date_trunc`/`date_part`/`to_local_time`
//! on zoned timestamps, `from_unixtime(x, zone)`) go through arrow and chrono-tz, which bundles
//! one release of the IANA database (2025b). Window bounds are computed by jiff; its own
//! bundled database was a newer release (2026f), so `AT TIME ZONE` in a task could disagree
//! with the task's own window (in 104 zones, `EET` and `WET` after 1977). Windows now look
//! their zone up here, in a copy of the release chrono-tz bundles (see `tzdb/NOTICE.md`),
//! and a test holds the two to the same release and the same offsets.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Mutex, OnceLock};

use jiff::tz::TimeZone;

/// The IANA release of this database; chrono-tz's `IANA_TZDB_VERSION` must be the same.
pub const VERSION: &str = "2025b";

/// Every zone compiled to TZif, one after another (`tzdb/index.txt` says where each is).
static DATA: &[u8] = include_bytes!("tzdb/concatenated-zoneinfo.dat");

/// `name start end` per zone, sorted by name ignoring ASCII case.
static INDEX: &str = include_str!("tzdb/index.txt");

/// The zones' names and bytes, parsed once.
fn index() -> &'static [(&'static str, Range<usize>)] {
    static PARSED: OnceLock<Vec<(&'static str, Range<usize>)>> = OnceLock::new();
    PARSED.get_or_init(|| {
        INDEX
            .lines()
            .filter_map(|l| {
                let mut parts = l.split(' ');
                let name = parts.next()?;
                let start = parts.next()?.parse().ok()?;
                let end = parts.next()?.parse().ok()?;
                Some((name, start..end))
            })
            .collect()
    })
}

/// Every zone name the database holds.
pub fn names() -> impl Iterator<Item = &'static str> {
    index().iter().map(|(n, _)| *n)
}

/// The zone named `name` (ASCII case ignored, as jiff does), or `None` if there is none.
pub fn get(name: &str) -> Option<TimeZone> {
    static CACHE: OnceLock<Mutex<HashMap<String, TimeZone>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let key = name.to_ascii_lowercase();
    if let Some(tz) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return Some(tz.clone());
    }
    let (canonical, range) = index().iter().find(|(n, _)| n.eq_ignore_ascii_case(name))?;
    let tz = TimeZone::tzif(canonical, DATA.get(range.clone())?).ok()?;
    cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, tz.clone());
    Some(tz)
}

#[cfg(test)]
mod tests {
    use chrono::{Offset, TimeZone as _};

    /// Issue 37: one time zone database for windows and SQL. The release is chrono-tz's, and
    /// every zone gives the same UTC offset in both, every 3 days from 1900 to 2100 and on
    /// each side of every transition.
    #[test]
    fn the_windows_and_datafusion_use_one_time_zone_database() {
        assert_eq!(super::VERSION, chrono_tz::IANA_TZDB_VERSION);
        let mut compared = 0;
        for name in super::names() {
            let ours = super::get(name).expect("every indexed zone parses");
            let Ok(theirs) = name.parse::<chrono_tz::Tz>() else {
                // `Factory` is not a zone chrono-tz knows (nor DataFusion).
                assert_eq!(name, "Factory");
                continue;
            };
            let offset = |t: jiff::Timestamp| {
                let utc = chrono::DateTime::from_timestamp(t.as_second(), 0)
                    .unwrap()
                    .naive_utc();
                theirs
                    .offset_from_utc_datetime(&utc)
                    .fix()
                    .local_minus_utc()
            };
            let start = jiff::Timestamp::from_second(-2_208_988_800).unwrap();
            let end = jiff::Timestamp::from_second(4_102_444_800).unwrap();
            let mut instants: Vec<jiff::Timestamp> = ours
                .following(start)
                .take_while(|t| t.timestamp() < end)
                .flat_map(|t| {
                    [
                        t.timestamp(),
                        t.timestamp() - jiff::SignedDuration::from_secs(1),
                    ]
                })
                .collect();
            let mut t = start;
            while t < end {
                instants.push(t);
                t += jiff::SignedDuration::from_hours(72);
            }
            for t in instants {
                // Whole seconds, as chrono-tz reads them.
                let t = jiff::Timestamp::from_second(t.as_second()).unwrap();
                assert_eq!(ours.to_offset(t).seconds(), offset(t), "{name} at {t}");
            }
            compared += 1;
        }
        assert!(compared > 590, "{compared} zones");
        assert_eq!(
            super::get("europe/paris").unwrap().iana_name(),
            Some("Europe/Paris")
        );
        assert!(super::get("Mars/Olympus").is_none());
    }
}
