use super::*;

fn utc() -> TimeZone {
    TimeZone::UTC
}
fn berlin() -> TimeZone {
    time_zone("Europe/Berlin").unwrap()
}

#[test]
fn day_in_utc() {
    let w = Window::parse("2026-11-28", Grain::Day, &utc()).unwrap();
    assert_eq!(
        w.interval(),
        "2026-11-28T00:00:00+00:00/2026-11-29T00:00:00+00:00"
    );
    assert_eq!(w.label(), "2026-11-28");
    assert_eq!(w.hours(), 24);
}

#[test]
fn berlin_days_across_dst_are_23_and_25_hours() {
    let spring = Window::parse("2026-03-29", Grain::Day, &berlin()).unwrap();
    assert_eq!(spring.hours(), 23);
    assert_eq!(spring.start_ts().to_string(), "2026-03-28T23:00:00Z");
    assert_eq!(spring.end_ts().to_string(), "2026-03-29T22:00:00Z");
    let autumn = Window::parse("2026-10-25", Grain::Day, &berlin()).unwrap();
    assert_eq!(autumn.hours(), 25);
    let plain = Window::parse("2026-11-28", Grain::Day, &berlin()).unwrap();
    assert_eq!(plain.hours(), 24);
}

#[test]
fn week_month_hour() {
    let w = Window::parse("2026-W48", Grain::Week, &utc()).unwrap();
    assert_eq!(w.start_date().to_string(), "2026-11-23");
    assert_eq!(w.end_date().to_string(), "2026-11-30");
    assert_eq!(w.label(), "2026-W48");
    let m = Window::parse("2026-02", Grain::Month, &utc()).unwrap();
    assert_eq!(m.end_date().to_string(), "2026-03-01");
    let h = Window::parse("2026-11-28T05", Grain::Hour, &berlin()).unwrap();
    assert_eq!(h.start_ts().to_string(), "2026-11-28T04:00:00Z");
    assert_eq!(h.hours(), 1);
    assert_eq!(h.label(), "2026-11-28T05");
}

#[test]
fn aligned_interval_is_accepted_misaligned_is_not() {
    let w = Window::parse(
        "2026-11-28T00:00:00+00:00/2026-11-29T00:00:00+00:00",
        Grain::Day,
        &utc(),
    )
    .unwrap();
    assert_eq!(w.label(), "2026-11-28");
    let b = Window::parse(
        "2026-03-28T23:00:00Z/2026-03-29T22:00:00Z",
        Grain::Day,
        &berlin(),
    )
    .unwrap();
    assert_eq!(b.label(), "2026-03-29");
    for bad in [
        "2026-11-28T01:00:00Z/2026-11-29T01:00:00Z",
        "2026-11-28T00:00:00Z/2026-11-30T00:00:00Z",
        "2026-11-29T00:00:00Z/2026-11-28T00:00:00Z",
        // A date interval is accepted since issue 16 §6, but must still be one window.
        "2026-11-28/2026-11-30",
    ] {
        let e = Window::parse(bad, Grain::Day, &utc()).unwrap_err();
        assert_eq!(e.kind(), crate::error::ErrorKind::Input, "{bad}");
    }
}

#[test]
fn malformed_and_wrong_grain_windows_are_input_errors() {
    for bad in [
        "",
        "yesterday",
        "2026-13-01",
        "2026-11-31",
        "2026-W54",
        "2026-11",
        "2026-11-28T25",
    ] {
        let e = Window::parse(bad, Grain::Day, &utc()).unwrap_err();
        assert_eq!(e.kind(), crate::error::ErrorKind::Input, "{bad}");
    }
    let e = Window::parse("2026-11", Grain::Day, &utc()).unwrap_err();
    assert!(e.message().contains("is a month"), "{e}");
}

#[test]
fn hour_in_dst_gap_or_fold_needs_the_interval_form() {
    assert!(Window::parse("2026-03-29T02", Grain::Hour, &berlin()).is_err());
    assert!(Window::parse("2026-10-25T02", Grain::Hour, &berlin()).is_err());
    // Both 02:00 hours of the fold are reachable through the explicit interval.
    let first = Window::parse(
        "2026-10-25T00:00:00Z/2026-10-25T01:00:00Z",
        Grain::Hour,
        &berlin(),
    )
    .unwrap();
    let second = first.next().unwrap();
    assert_ne!(first.start_ts(), second.start_ts());
    assert_ne!(first.key(), second.key());
    // Regression (issue 14 §3): both hours were labelled `2026-10-25T02`.
    assert_eq!(first.label(), "2026-10-25T02+02:00");
    assert_eq!(second.label(), "2026-10-25T02+01:00");
    // Each label is accepted back as its own window; a wrong offset is refused.
    assert_eq!(
        Window::parse(&first.label(), Grain::Hour, &berlin()).unwrap(),
        first
    );
    assert_eq!(
        Window::parse(&second.label(), Grain::Hour, &berlin()).unwrap(),
        second
    );
    assert!(Window::parse("2026-10-25T02+05:00", Grain::Hour, &berlin()).is_err());
    assert!(Window::parse("2026-10-25T02+0100", Grain::Hour, &berlin()).is_err());
    // Hours next to the fold keep the short label; an offset on them is accepted if right.
    assert_eq!(
        first.next().unwrap().next().unwrap().label(),
        "2026-10-25T03"
    );
    assert_eq!(
        Window::parse("2026-11-28T05+01:00", Grain::Hour, &berlin())
            .unwrap()
            .label(),
        "2026-11-28T05"
    );
}

/// Found by the property test: a week of 1822 in Asia/Kolkata (local mean time
/// +05:53:28) printed its interval with the offset cut to +05:53, which named another
/// instant and was refused as misaligned when passed back.
#[test]
fn interval_of_a_window_in_local_mean_time_round_trips() {
    let tz = time_zone("Asia/Kolkata").unwrap();
    let w = Window::parse("1822-W28", Grain::Week, &tz).unwrap();
    assert!(w.interval().ends_with('Z'), "{}", w.interval());
    assert_eq!(Window::parse(&w.interval(), Grain::Week, &tz).unwrap(), w);
    let modern = Window::parse("2026-W28", Grain::Week, &tz).unwrap();
    assert!(
        modern.interval().contains("+05:30"),
        "{}",
        modern.interval()
    );
}

#[test]
fn ranges_are_inclusive() {
    let a = Window::parse("2026-02-27", Grain::Day, &utc()).unwrap();
    let b = Window::parse("2026-03-02", Grain::Day, &utc()).unwrap();
    let r = Window::range(&a, &b).unwrap();
    let labels: Vec<_> = r.iter().map(Window::label).collect();
    assert_eq!(
        labels,
        ["2026-02-27", "2026-02-28", "2026-03-01", "2026-03-02"]
    );
    assert!(Window::range(&b, &a).is_err());
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    fn grains() -> impl Strategy<Value = Grain> {
        prop_oneof![
            Just(Grain::Hour),
            Just(Grain::Day),
            Just(Grain::Week),
            Just(Grain::Month)
        ]
    }

    fn zones() -> impl Strategy<Value = TimeZone> {
        prop_oneof![
            Just("UTC"),
            Just("Europe/Berlin"),
            Just("America/New_York"),
            Just("Asia/Kolkata"),
            Just("Australia/Lord_Howe"),
        ]
        .prop_map(|z| time_zone(z).unwrap())
    }

    /// Text shaped like window arguments, often almost valid: short forms with any
    /// numbers, offsets, intervals of any timestamps, and arbitrary bytes.
    fn window_text() -> impl Strategy<Value = String> {
        let num = |w: usize| proptest::collection::vec(0u8..10, w..=w);
        let digits = move |w: usize| {
            num(w).prop_map(|d| d.iter().map(|c| (b'0' + c) as char).collect::<String>())
        };
        prop_oneof![
            any::<String>(),
            "[0-9T:/+Z. W-]{0,40}",
            (digits(4), digits(2), digits(2)).prop_map(|(y, m, d)| format!("{y}-{m}-{d}")),
            (digits(4), digits(2), digits(2), digits(2))
                .prop_map(|(y, m, d, h)| format!("{y}-{m}-{d}T{h}")),
            (
                digits(4),
                digits(2),
                digits(2),
                digits(2),
                digits(2),
                digits(2),
                any::<bool>()
            )
                .prop_map(|(y, m, d, h, oh, om, neg)| {
                    format!("{y}-{m}-{d}T{h}{}{oh}:{om}", if neg { '-' } else { '+' })
                }),
            (digits(4), digits(2)).prop_map(|(y, w)| format!("{y}-W{w}")),
            (digits(4), digits(2)).prop_map(|(y, m)| format!("{y}-{m}")),
            (any::<i64>(), any::<i64>()).prop_map(|(a, b)| {
                let t = |s: i64| {
                    Timestamp::from_second(s.rem_euclid(4_000_000_000) - 1_000_000_000)
                        .unwrap()
                        .to_string()
                };
                format!("{}/{}", t(a), t(b))
            }),
            (0i64..400, 0i64..100, any::<bool>()).prop_map(|(day, len, off)| {
                // Near-aligned intervals around 2026.
                let start = Timestamp::from_second(
                    1_767_225_600 + day * 86_400 + if off { 1800 } else { 0 },
                )
                .unwrap();
                let end = start
                    .checked_add(jiff::SignedDuration::from_hours(len))
                    .unwrap();
                format!("{start}/{end}")
            }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]

        /// The window parser never panics; every rejection is an input error (exit 2)
        /// naming the problem; every accepted window is aligned, non-empty and
        /// round-trips through its label and its interval.
        #[test]
        fn window_arguments_never_panic_and_accepted_ones_round_trip(
            text in window_text(), grain in grains(), tz in zones()
        ) {
            match Window::parse(&text, grain, &tz) {
                Err(e) => {
                    prop_assert_eq!(e.kind(), crate::error::ErrorKind::Input);
                    prop_assert!(!e.message().is_empty());
                }
                Ok(w) => {
                    prop_assert!(w.start_ts() < w.end_ts());
                    let again = Window::parse(&w.interval(), grain, &tz).unwrap();
                    prop_assert_eq!(&again, &w);
                    // The label is accepted back unless the hour is skipped/ambiguous
                    // without an offset (labels of repeated hours carry one).
                    if let Ok(l) = Window::parse(&w.label(), grain, &tz) {
                        prop_assert_eq!(l, w.clone());
                    }
                    prop_assert_eq!(w.next().unwrap().start_ts(), w.end_ts());
                }
            }
        }
    }
}

/// Issue 16 §6: `DATE/DATE` intervals (a cron script's dates, Dagster's date keys) pass unchanged.
#[test]
fn date_intervals_name_day_week_and_month_windows() {
    let berlin = time_zone("Europe/Berlin").unwrap();
    let w = Window::parse("2026-11-28/2026-11-29", Grain::Day, &berlin).unwrap();
    assert_eq!(w.label(), "2026-11-28");
    assert_eq!(w.start_rfc3339(), "2026-11-28T00:00:00+01:00");
    let w = Window::parse("2026-11-23/2026-11-30", Grain::Week, &utc()).unwrap();
    assert_eq!(w.label(), "2026-W48");
    let w = Window::parse("2026-11-01/2026-12-01", Grain::Month, &utc()).unwrap();
    assert_eq!(w.label(), "2026-11");
    // Not one window of the grain, empty, reversed, or dates for an hour task.
    for (text, grain, needle) in [
        (
            "2026-11-28/2026-11-30",
            Grain::Day,
            "spans more than one day",
        ),
        (
            "2026-11-28T12:00:00Z/2026-11-29T12:00:00Z",
            Grain::Day,
            "not aligned",
        ),
        ("2026-11-28/2026-11-28", Grain::Day, "START equals END"),
        ("2026-11-29/2026-11-28", Grain::Day, "reversed"),
        ("2026-11-28/2026-11-29", Grain::Hour, "pass timestamps"),
    ] {
        let e = Window::parse(text, grain, &utc()).unwrap_err();
        assert_eq!(e.kind(), crate::error::ErrorKind::Input);
        assert!(e.message().contains(needle), "{text}: {}", e.message());
    }
    // A timestamp interval is never read as dates (jiff reads the date of a timestamp).
    let h = Window::parse(
        "2026-11-28T01:00:00+11:00/2026-11-28T02:00:00+11:00",
        Grain::Hour,
        &utc(),
    )
    .unwrap();
    assert_eq!(h.label(), "2026-11-27T14");
    // An empty timestamp interval (a CronTriggerTimetable run) names the way out.
    let e = Window::parse(
        "2026-11-28T00:00:00Z/2026-11-28T00:00:00Z",
        Grain::Day,
        &utc(),
    )
    .unwrap_err();
    assert!(
        e.message()
            .contains("{{ data_interval_start }}/{{ data_interval_end }}"),
        "{}",
        e.message()
    );
}

/// Issue 16 §1: a window's lookback windows are the ones right before it, across DST and
/// month lengths.
#[test]
fn lookback_windows_are_the_ones_right_before() {
    let labels = |w: &Window, n| -> Vec<String> {
        w.with_lookback(n)
            .unwrap()
            .iter()
            .map(Window::label)
            .collect()
    };
    let day = Window::parse("2026-03-01", Grain::Day, &utc()).unwrap();
    assert_eq!(labels(&day, 2), ["2026-02-27", "2026-02-28", "2026-03-01"]);
    assert_eq!(labels(&day, 0), ["2026-03-01"]);
    let month = Window::parse("2026-01", Grain::Month, &utc()).unwrap();
    assert_eq!(labels(&month, 1), ["2025-12", "2026-01"]);
    let week = Window::parse("2026-W01", Grain::Week, &utc()).unwrap();
    assert_eq!(labels(&week, 1), ["2025-W52", "2026-W01"]);
    // The hour after a Berlin fall-back fold: both 02:00 hours come before it.
    let hour = Window::parse("2026-10-25T03", Grain::Hour, &berlin()).unwrap();
    assert_eq!(
        labels(&hour, 2),
        [
            "2026-10-25T02+02:00",
            "2026-10-25T02+01:00",
            "2026-10-25T03"
        ]
    );
}

/// `1995-W53`: ISO year 1995 has 52 weeks, and the message says so (it said "parameter
/// 'iso-week' is not in the required range of 1..=53").
#[test]
fn week_53_of_a_52_week_year_says_the_year_has_52_weeks() {
    let e = Window::parse("1995-W53", Grain::Week, &utc()).unwrap_err();
    assert_eq!(e.kind(), crate::error::ErrorKind::Input);
    assert!(e.message().contains("ISO year 1995 has 52 weeks"), "{e}");
    assert!(!e.message().contains("1..=53"), "{e}");
    assert!(Window::parse("2026-W53", Grain::Week, &utc()).is_ok());
    let e = Window::parse("2026-W54", Grain::Week, &utc()).unwrap_err();
    assert!(e.message().contains("ISO year 2026 has 53 weeks"), "{e}");
}

/// `2024-03-31T02` in Europe/Berlin: clocks skip that hour, so there is no such window; the
/// message says so (it called the hour ambiguous and sent the user to an interval form that
/// names no such hour either).
#[test]
fn an_hour_the_clocks_skip_is_said_not_to_exist() {
    let e = Window::parse("2024-03-31T02", Grain::Hour, &berlin()).unwrap_err();
    assert_eq!(e.kind(), crate::error::ErrorKind::Input);
    let m = e.message();
    assert!(
        m.contains("does not exist in time zone Europe/Berlin") && m.contains("clocks skip it"),
        "{e}"
    );
    assert!(!m.contains("ambiguous") && !m.contains("RFC 3339"), "{e}");
    // A repeated hour still names the labels that pick one of the two.
    let e = Window::parse("2026-10-25T02", Grain::Hour, &berlin()).unwrap_err();
    assert!(
        e.message().contains("2026-10-25T02+02:00") && e.message().contains("2026-10-25T02+01:00"),
        "{e}"
    );
}
