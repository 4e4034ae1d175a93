//! A day in Europe/Berlin is 23 or 25 hours across DST; the window bounds follow the zone.

use crate::common::*;

#[tokio::test]
async fn berlin_days_over_hourly_utc_data_get_23_and_25_hours() {
    let p = TestProject::new();
    // One event per UTC hour, at half past, around both 2026 transitions.
    let mut csv = String::from("event_id,ts\n");
    let mut id = 0;
    for (from, hours) in [("2026-03-27T00:30:00Z", 96), ("2026-10-23T00:30:00Z", 96)] {
        let start: jiff::Timestamp = from.parse().unwrap();
        for h in 0..hours {
            id += 1;
            let t = start
                .checked_add(jiff::SignedDuration::from_hours(h))
                .unwrap();
            csv.push_str(&format!("{id},{t}\n"));
        }
    }
    std::fs::write(p.path().join("events.csv"), csv).unwrap();
    p.task(
        "events_by_day",
        r#"sql = """
SELECT event_id, CAST(ts AS TIMESTAMP) AS ts, CAST($window_start AS DATE) AS day
FROM events
WHERE CAST(ts AS TIMESTAMP) >= $window_start_ts AND CAST(ts AS TIMESTAMP) < $window_end_ts
"""
[target]
partition_by = "day"
[window]
grain = "day"
timezone = "Europe/Berlin"
[sources.events]
uri = "events.csv"
"#,
    );
    for (day, hours) in [
        ("2026-03-28", 24),
        ("2026-03-29", 23),
        ("2026-03-30", 24),
        ("2026-10-24", 24),
        ("2026-10-25", 25),
        ("2026-10-26", 24),
    ] {
        let out = p.run(&["--output", "json", "run", "events_by_day", "--window", day]);
        assert_eq!(code(&out), 0, "{}", text(&out));
        assert_eq!(json_lines(&out)[0]["rows_written"], hours, "{day}");
        let rows = table_rows(
            &p.table_dir("events_by_day"),
            &format!("day = DATE '{day}'"),
        )
        .await;
        assert_eq!(rows.len(), hours as usize, "{day}");
    }
    // Every UTC hour between the first and last window lands in exactly one Berlin day.
    let all = table_rows(&p.table_dir("events_by_day"), "").await;
    assert_eq!(all.len(), 24 + 23 + 24 + 24 + 25 + 24);
    let mut ids: Vec<&str> = all
        .iter()
        .map(|r| r.split('|').find(|c| c.starts_with("event_id=")).unwrap())
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), all.len(), "no hour in two days");
    // The explicit interval an orchestrator passes for the short spring day is accepted.
    let out = p.run(&[
        "run",
        "events_by_day",
        "--window",
        "2026-03-28T23:00:00Z/2026-03-29T22:00:00Z",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
}
