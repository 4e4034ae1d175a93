//! Landing zones laid out as `YYYY/MM/DD/HH/` trees (issue 52): directory levels without
//! names (`partitioning = "directories"`, as Firehose and many exporters write them), and the
//! same tree as `year=/month=/day=/hour=` directories, read by their arrival days.

use std::collections::BTreeSet;
use std::path::Path;

use crate::common::*;
use crate::landing::{assert_matches_polars_in, check_reads, day, write_rows};

/// A day task over an hour tree whose arrival days are its year, month and day levels.
const TREE_TASK: &str = r#"
sql = """
SELECT CAST(ts AT TIME ZONE 'TZ' AS DATE) AS day, ts, id, v
FROM events
WHERE ts >= $window_start_ts AND ts < $window_end_ts
"""

[target]
partition_by = "day"

[window]
grain = "day"
timezone = "TZ"

[sources.events]
uri = "URI"
format = "parquet"
LAYOUT
arrival = ["year", "month", "day"]
lateness = "LATENESS"

[write]
mode = "overwrite"
"#;

/// The two ways of writing an hour tree.
#[derive(Debug, Clone, Copy)]
enum Layout {
    /// `2026/11/01/07/`.
    Unnamed,
    /// `year=2026/month=11/day=01/hour=07/`.
    Named,
}

impl Layout {
    /// The directory of hour `h` of date `d`, below the zone's root.
    fn dir(self, d: jiff::civil::Date, h: i8) -> String {
        let (y, m, dd) = (d.year(), d.month(), d.day());
        match self {
            Layout::Unnamed => format!("{y:04}/{m:02}/{dd:02}/{h:02}"),
            Layout::Named => format!("year={y:04}/month={m:02}/day={dd:02}/hour={h:02}"),
        }
    }

    /// The source options declaring the layout.
    fn options(self) -> &'static str {
        match self {
            Layout::Unnamed => {
                "partitioning = \"directories\"\npartition_columns = [\"year INT\", \"month INT\", \"day INT\", \"hour INT\"]"
            }
            Layout::Named => "",
        }
    }
}

fn tree_task(layout: Layout, uri: &str, tz: &str, lateness: &str) -> String {
    TREE_TASK
        .replace("TZ", tz)
        .replace("URI", uri)
        .replace("LAYOUT", layout.options())
        .replace("LATENESS", lateness)
}

/// Days `days` of an hour tree under `root`: one file per hour holding six events of that
/// hour and two of the hour before (late by minutes: the previous day's last events land in
/// the next day's hour 00). Returns each file's path below `root`.
fn write_tree(root: &Path, layout: Layout, days: std::ops::RangeInclusive<i64>) -> Vec<String> {
    let mut out = Vec::new();
    for n in days {
        let d = day(n);
        let start = d
            .to_zoned(jiff::tz::TimeZone::UTC)
            .unwrap()
            .timestamp()
            .as_microsecond();
        for h in 0..24i8 {
            let hour = start + i64::from(h) * 3_600_000_000;
            let minute = 60_000_000i64;
            let mut ts: Vec<i64> = (0..6).map(|i| hour + i * 10 * minute).collect();
            ts.extend((0..2).map(|i| hour - (10 - i) * minute));
            let base = (n + 10) * 10_000 + i64::from(h) * 100;
            let id: Vec<i64> = (0..8).map(|i| base + i).collect();
            let v = id.clone();
            let rel = format!("{}/part-0.parquet", layout.dir(d, h));
            write_rows(&root.join(&rel), ts, id, v);
            out.push(rel);
        }
    }
    out
}

/// How many files the check of a run of day 1 read (the run must succeed).
fn day_1_checked_from(p: &TestProject) -> u64 {
    let w = day(1).to_string();
    let out = p.run(&["--output", "json", "run", "events", "--window", &w]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let r = &json_lines(&out)[0];
    let (files, windows) = check_reads(r);
    assert_eq!(windows, 1, "{r}");
    files
}

/// Days 1 and 2 backfilled accelerated and as the plain twin, each time equal to polars over
/// the files (days of `tz`).
fn backfill_both_routes_as_polars(p: &TestProject, tz: &str) {
    for accelerate in ["1", "0"] {
        let out = p
            .cmd()
            .env("IDEMLAKE_ACCELERATE", accelerate)
            .args(["backfill", "events"])
            .args(["--from", &day(1).to_string(), "--to", &day(2).to_string()])
            .output()
            .unwrap();
        assert_eq!(
            code(&out),
            0,
            "accelerate={accelerate} {tz}: {}",
            text(&out)
        );
        assert_matches_polars_in(p, &p.table_dir("events"), (1, 2), tz);
    }
}

/// A `YYYY/MM/DD/HH` tree read as columns by its levels: a UTC day with an hour of lateness
/// reads its own day's 24 hour directories and the next day's (its arrival days, on both
/// routes), a Kolkata day the two UTC days it spans, and every day equals polars over the
/// files, accelerated and as the plain twin.
#[test]
fn a_yyyy_mm_dd_hh_tree_is_read_by_its_levels_and_matches_polars() {
    for layout in [Layout::Unnamed, Layout::Named] {
        let p = TestProject::new();
        let root = p.path().join("events");
        write_tree(&root, layout, 0..=3);
        for (tz, files) in [("UTC", 48), ("Asia/Kolkata", 48)] {
            p.task("events", &tree_task(layout, "events", tz, "1 hour"));
            assert_eq!(day_1_checked_from(&p), files, "{layout:?} {tz}");
            backfill_both_routes_as_polars(&p, tz);
        }
    }
}

/// `arrival = ["year", "month", "day", "hour"]`: a window reads exactly the arrival hours in
/// its reach — a UTC day with an hour of lateness its 24 hours and the next day's hour 00 (25
/// directories), a Kolkata day over UTC hours the 25 it spans, on both routes — and matches
/// polars. With `event_time`, the events that landed in an hour no window reaches are counted,
/// by arrival hour.
#[test]
fn an_hourly_arrival_reads_exactly_the_hours_in_reach() {
    let p = TestProject::new();
    let root = p.path().join("events");
    write_tree(&root, Layout::Unnamed, 0..=3);
    let hourly = |tz: &str, lateness: &str| {
        tree_task(Layout::Unnamed, "events", tz, lateness).replace(
            "arrival = [\"year\", \"month\", \"day\"]",
            "arrival = [\"year\", \"month\", \"day\", \"hour\"]",
        )
    };
    for (tz, lateness) in [("UTC", "1 hour"), ("Asia/Kolkata", "0")] {
        p.task("events", &hourly(tz, lateness));
        assert_eq!(day_1_checked_from(&p), 25, "{tz}");
        backfill_both_routes_as_polars(&p, tz);
    }
    // No lateness: the last ten minutes of day 0 landed in day 1's hour 00, which day 0 does
    // not reach.
    p.task(
        "events",
        &hourly("UTC", "0").replace("lateness = \"0\"", "lateness = \"0\"\nevent_time = \"ts\""),
    );
    let out = p.run(&[
        "--output",
        "json",
        "run",
        "events",
        "--window",
        &day(1).to_string(),
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let r = &json_lines(&out)[0];
    let check = r["data_checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "late_rows(events)")
        .cloned()
        .unwrap_or_else(|| panic!("{r}"));
    assert_eq!(check["failing_rows"], 2, "{r}");
    let sample = &check["sample"][0];
    assert_eq!(sample["arrival_hour"], format!("{}T00", day(1)), "{r}");
}

/// A late file landing in an hour of a published `YYYY/MM/DD/HH` tree makes the days whose
/// reach holds it stale in `status`, naming it, and `backfill --stale` re-runs them: by the
/// day, the day before too (its reach holds the whole next day); by the hour, only its own
/// day (the day before reaches the next day's hour 00 alone).
#[test]
fn a_late_file_in_an_hour_tree_makes_the_days_reaching_it_stale() {
    for hourly in [false, true] {
        late_file_in_an_hour_tree(hourly);
    }
}

fn late_file_in_an_hour_tree(hourly: bool) {
    let p = TestProject::new();
    let root = p.path().join("events");
    write_tree(&root, Layout::Unnamed, 0..=3);
    let task = tree_task(Layout::Unnamed, "events", "UTC", "1 hour");
    let task = match hourly {
        false => task,
        true => task.replace(
            "arrival = [\"year\", \"month\", \"day\"]",
            "arrival = [\"year\", \"month\", \"day\", \"hour\"]",
        ),
    };
    p.task("events", &task);
    let (from, to) = (day(0).to_string(), day(2).to_string());
    let out = p.run(&["backfill", "events", "--from", &from, "--to", &to]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let stale = || -> Vec<String> {
        let out = p.run(&[
            "--output", "json", "status", "events", "--from", &from, "--to", &to,
        ]);
        assert_eq!(code(&out), 0, "{}", text(&out));
        json_lines(&out)
            .iter()
            .filter(|s| s["stale"] == true)
            .map(|s| s["window"]["label"].as_str().unwrap().to_string())
            .collect()
    };
    assert!(stale().is_empty());
    // An event of day 2 at 04:00 that landed in its hour 05.
    let late = format!("{}/late-1.parquet", Layout::Unnamed.dir(day(2), 5));
    let midnight = day(2)
        .to_zoned(jiff::tz::TimeZone::UTC)
        .unwrap()
        .timestamp()
        .as_microsecond();
    write_rows(
        &root.join(&late),
        vec![midnight + 4 * 3_600_000_000],
        vec![-1],
        vec![-1],
    );
    let want = match hourly {
        false => vec![day(1).to_string(), day(2).to_string()],
        true => vec![day(2).to_string()],
    };
    assert_eq!(stale(), want, "hourly={hourly}");
    let out = p.run(&[
        "backfill", "events", "--stale", "--from", &from, "--to", &to,
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert!(stale().is_empty());
    assert_matches_polars_in(&p, &p.table_dir("events"), (0, 2), "UTC");
}

/// `partitioning = "directories"` is refused by name where it cannot apply: without its
/// columns, with a level count other than the tree's, and a directory that is not a value of
/// its level's type fails the windows reaching it.
#[test]
fn a_directory_tree_declared_wrong_is_refused_by_name() {
    let p = TestProject::new();
    let root = p.path().join("events");
    write_tree(&root, Layout::Unnamed, 0..=1);
    let task = tree_task(Layout::Unnamed, "events", "UTC", "0");
    let w = day(0).to_string();
    for (from, to, says) in [
        (
            "partition_columns = [\"year INT\", \"month INT\", \"day INT\", \"hour INT\"]",
            "",
            "partition_columns",
        ),
        (
            "\"day INT\", \"hour INT\"]",
            "\"day INT\"]",
            "declares 3 levels",
        ),
    ] {
        p.task("events", &task.replace(from, to));
        let out = p.run(&["run", "events", "--window", &w]);
        assert_eq!(code(&out), 2, "{says}: {}", text(&out));
        assert!(text(&out).contains(says), "{says}: {}", text(&out));
    }
    p.task("events", &task);
    std::fs::create_dir_all(root.join("2026/11/01/late")).unwrap();
    std::fs::copy(
        root.join("2026/11/01/00/part-0.parquet"),
        root.join("2026/11/01/late/part-0.parquet"),
    )
    .unwrap();
    let out = p.run(&["run", "events", "--window", &w]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    assert!(text(&out).contains("2026/11/01/late"), "{}", text(&out));
    assert_eq!(log_version(&p.table_dir("events")), None);
    p.run_ok("events", &day(1).to_string());
}

/// On S3, a day of an hour tree lists its root, the year, the month and the day in reach
/// (no other month), and the day's 24 hours, in both layouts: the runner, the check and the
/// pins' check before the commit alike; by the hour with an hour of lateness, the next day
/// and its hour 00 too, no other of its hours. The zone's opening lists down to its first
/// file.
#[tokio::test(flavor = "multi_thread")]
async fn s3_a_day_of_an_hour_tree_lists_only_the_directories_in_its_reach() {
    use object_store::{ObjectStoreExt, PutPayload, path::Path as ObjPath};
    for (layout, hourly) in [
        (Layout::Unnamed, false),
        (Layout::Named, false),
        (Layout::Unnamed, true),
    ] {
        let p = TestProject::new();
        let root = p.path().join("events");
        // 2026-10-30 to 2026-11-03: two months.
        let files = write_tree(&root, layout, -2..=2);
        let prefix = format!("it-{}", uuid::Uuid::new_v4().simple());
        let store = crate::s3::store();
        for rel in &files {
            let bytes = std::fs::read(root.join(rel)).unwrap();
            let key = ObjPath::from(format!("{prefix}/events/{rel}"));
            store.put(&key, PutPayload::from(bytes)).await.unwrap();
        }
        let bucket = crate::s3::bucket();
        let uri = format!("s3://{bucket}/{prefix}/events/");
        // By the hour, an hour of lateness reaches the next day's hour 00 and no other.
        let task = match hourly {
            false => tree_task(layout, &uri, "UTC", "0"),
            true => tree_task(layout, &uri, "UTC", "1 hour").replace(
                "arrival = [\"year\", \"month\", \"day\"]",
                "arrival = [\"year\", \"month\", \"day\", \"hour\"]",
            ),
        };
        p.task("events", &task);
        let out = p
            .cmd()
            .envs(crate::s3::s3_env())
            .env("IDEMLAKE_LAKE", format!("s3://{bucket}/{prefix}/lake"))
            .env(
                "IDEMLAKE_LOG",
                "idemlake::storage::count=trace,idemlake=info",
            )
            .args(["--output", "json", "run", "events", "--window"])
            .arg(day(1).to_string())
            .output()
            .unwrap();
        assert_eq!(code(&out), 0, "{layout:?}: {}", text(&out));
        // 24 hours of 8 events, two of which land in the next hour: without lateness the
        // day's last two land where it does not read.
        let rows = if hourly { 24 * 8 } else { 24 * 8 - 2 };
        assert_eq!(json_lines(&out)[0]["rows_written"], rows, "{layout:?}");
        let w = &json_lines(&out)[0];
        assert_eq!(check_reads(w).0, if hourly { 25 } else { 24 }, "{w}");
        let listed: BTreeSet<String> =
            crate::s3::traced_requests(&String::from_utf8_lossy(&out.stderr))
                .into_iter()
                .filter(|(k, l)| k == "LIST" && l.starts_with(&format!("{prefix}/events")))
                .map(|(_, l)| l.trim_end_matches('/').to_string())
                .collect();
        let at = |rel: &str| format!("{prefix}/events/{rel}");
        let d = day(1);
        let hour0 = layout.dir(d, 0);
        let (year, month, the_day) = {
            let parts: Vec<&str> = hour0.split('/').collect();
            (parts[0], parts[1], parts[2])
        };
        let mut want: BTreeSet<String> = BTreeSet::from([
            format!("{prefix}/events"),
            at(year),
            at(&format!("{year}/{month}")),
            at(&format!("{year}/{month}/{the_day}")),
        ]);
        want.extend((0..24).map(|h| at(&layout.dir(d, h))));
        if hourly {
            let next = layout.dir(day(2), 0);
            want.insert(at(next.rsplit_once('/').unwrap().0));
            want.insert(at(&next));
        }
        // The zone's opening: down the first directories to the first file.
        let first = layout.dir(day(-2), 0);
        let mut up = String::new();
        for part in first.split('/') {
            up = if up.is_empty() {
                part.to_string()
            } else {
                format!("{up}/{part}")
            };
            want.insert(at(&up));
        }
        assert_eq!(listed, want, "{layout:?} hourly={hourly}");
    }
}

/// `idemlake new --source DIR` over an hour tree writes a task declaring its levels and its
/// arrival by the hour, which validates and publishes its day as polars reads it.
#[test]
fn new_over_an_hour_tree_writes_a_task_that_validates_and_runs() {
    let p = TestProject::new();
    write_tree(&p.path().join("events"), Layout::Unnamed, 0..=2);
    let out = p.run(&[
        "new",
        "events_daily",
        "--source",
        "events",
        "--column",
        "ts",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let toml = std::fs::read_to_string(p.path().join("tables/events_daily.toml")).unwrap();
    for line in [
        "partitioning = \"directories\"",
        "arrival = [\"year\", \"month\", \"day\", \"hour\"]",
    ] {
        assert!(toml.contains(line), "{line}: {toml}");
    }
    let out = p.run(&["validate", "events_daily"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let out = p.run(&[
        "--output",
        "json",
        "run",
        "events_daily",
        "--window",
        &day(1).to_string(),
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    // 24 hours of 8 events, the last two landing in the next day's hour 00 (read: a day of
    // lateness).
    assert_eq!(
        json_lines(&out)[0]["rows_written"],
        24 * 8,
        "{}",
        text(&out)
    );
}
