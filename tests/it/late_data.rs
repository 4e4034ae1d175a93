//! Late data (issue 52): not landed is not empty; a zone's arrival days and lateness.

use crate::common::*;
use crate::landing::{
    TASK, assert_matches_polars_in, backfill_json, check_reads, day, landing_project, write_file,
};

/// The landing-zone task with the zone's arrival days declared: it filters only on its event
/// time.
const ARRIVAL_TASK: &str = r#"
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
uri = "events"
format = "parquet"
arrival = "dt"
lateness = "LATENESS"

[write]
mode = "overwrite"
"#;

fn arrival_task(tz: &str, lateness: &str) -> String {
    ARRIVAL_TASK.replace("TZ", tz).replace("LATENESS", lateness)
}

/// `--output json run events --window <day n>`.
fn run_day(p: &TestProject, n: i64) -> std::process::Output {
    p.run(&[
        "--output",
        "json",
        "run",
        "events",
        "--window",
        &day(n).to_string(),
    ])
}

/// The run record in the commit of `version` of the events table.
fn record_at(p: &TestProject, version: u64) -> serde_json::Value {
    let record = commit_actions(&p.table_dir("events"), version)
        .into_iter()
        .find_map(|a| a["commitInfo"].get("idemlake").cloned())
        .unwrap();
    record
        .get("runs")
        .map_or(record.clone(), |runs| runs[0].clone())
}

/// File `n` of event day `d` written into the next day's directory, as a late file.
fn write_late_file(root: &std::path::Path, d: i64, n: usize) {
    let file = write_file(root, day(d), n);
    let dir = root.join(format!("dt={}", day(d + 1)));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::rename(&file, dir.join(format!("late-{n:05}.parquet"))).unwrap();
}

/// Regression (events of day D arriving in `dt=D+1` were dropped with every check green: the
/// guide's task bounded `dt` by the window, and each check recomputed the same SQL): with the
/// zone's arrival days and lateness declared, the task filters only on its event time, and
/// every event is published once, in its event day, on both routes.
#[test]
fn events_arriving_the_next_day_are_published_in_their_event_day() {
    let p = landing_project(5, 2);
    let root = p.path().join("events");
    for d in 0..5 {
        write_late_file(&root, d, 2);
    }
    p.task("events", &arrival_task("UTC", "1 day"));
    for accelerate in ["1", "0"] {
        let out = p
            .cmd()
            .env("IDEMLAKE_ACCELERATE", accelerate)
            .args(["--output", "json", "backfill", "events"])
            .args(["--from", &day(0).to_string(), "--to", &day(4).to_string()])
            .output()
            .unwrap();
        assert_eq!(code(&out), 0, "{}", text(&out));
        for r in json_lines(&out) {
            assert_eq!(r["rows_written"], 30, "{r}");
        }
        assert_matches_polars_in(&p, &p.table_dir("events"), (0, 4), "UTC");
    }
}

/// A Kolkata day over UTC `dt=` directories reads the two UTC days it spans (and with a day of
/// lateness, the one after), and every day equals polars over the files.
#[test]
fn a_kolkata_day_over_utc_directories_reads_the_utc_days_it_spans() {
    let p = landing_project(7, 2);
    for (lateness, files) in [("0", 4), ("1 day", 6)] {
        p.task("events", &arrival_task("Asia/Kolkata", lateness));
        let out = run_day(&p, 3);
        assert_eq!(code(&out), 0, "{}", text(&out));
        let r = &json_lines(&out)[0];
        assert_eq!(check_reads(r), (files, 1), "lateness {lateness}: {r}");
        // The runner read (and pinned) the same files: its run record in the commit says so.
        let record = record_at(&p, r["table_version"].as_u64().unwrap());
        assert_eq!(
            record["sources"][0]["files"], files,
            "lateness {lateness}: {record}"
        );
    }
    let out = backfill_json(&p, (1, 5), &[]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert_matches_polars_in(&p, &p.table_dir("events"), (1, 5), "Asia/Kolkata");
}

/// `arrival` is refused by name where it cannot apply, and a `lateness` it cannot read.
#[test]
fn arrival_and_lateness_are_refused_by_name_when_wrong() {
    let p = landing_project(1, 1);
    for (from, to, says) in [
        ("lateness = \"1 day\"", "lateness = \"soon\"", "lateness"),
        (
            "arrival = \"dt\"",
            "arrival = \"nope\"",
            "arrival column `nope`",
        ),
        (
            "lateness = \"1 day\"",
            "arrival_timezone = \"Mars/Base\"",
            "arrival_timezone",
        ),
    ] {
        p.task("events", &arrival_task("UTC", "1 day").replace(from, to));
        let out = p.run(&["validate", "events"]);
        assert_eq!(code(&out), 2, "{}", text(&out));
        assert!(text(&out).contains(says), "{says}: {}", text(&out));
    }
}

/// Regression (a day run before its directory landed was published empty, exit 0 `rows=0`,
/// and `backfill --missing` then ran nothing for it once the files landed): such a window
/// fails, exit 1, retryable, saying nothing has landed, and publishes nothing; once its files
/// land, `backfill --missing` publishes it.
#[test]
fn a_day_run_before_its_directory_lands_is_not_published_empty() {
    let p = landing_project(3, 2);
    let late = day(3).to_string();
    for accelerate in ["1", "0"] {
        let out = p
            .cmd()
            .env("IDEMLAKE_ACCELERATE", accelerate)
            .args(["--output", "json", "run", "events", "--window", &late])
            .output()
            .unwrap();
        assert_eq!(code(&out), 1, "{}", text(&out));
        let r = &json_lines(&out)[0];
        assert_eq!(r["retryable"], true, "{r}");
        assert_eq!(r["published"], false, "{r}");
        assert!(
            r["error"].as_str().unwrap().contains("nothing has landed"),
            "{r}"
        );
    }
    assert_eq!(log_version(&p.table_dir("events")), None);
    // The days that have landed publish; the late one is still missing.
    let out = backfill_json(&p, (0, 2), &[]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    for n in 0..2 {
        write_file(&p.path().join("events"), day(3), n);
    }
    let out = backfill_json(&p, (0, 3), &["--missing"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let reports = json_lines(&out);
    assert_eq!(reports.len(), 1, "{}", text(&out));
    assert_eq!(reports[0]["window"]["label"], late.as_str());
    assert_eq!(reports[0]["rows_written"], 20);
}

/// Regression (with `lateness` declared, a day whose own directory a retention policy had
/// deleted was re-published from the next day's late files alone: 30 rows became 10): a
/// window's own arrival days must all have landed, whatever its lateness reaches.
#[test]
fn a_day_whose_own_directory_expired_is_not_republished_from_late_files() {
    let p = landing_project(3, 2);
    let root = p.path().join("events");
    for d in 0..3 {
        write_late_file(&root, d, 2);
    }
    p.task("events", &arrival_task("UTC", "1 day"));
    let out = backfill_json(&p, (0, 1), &[]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let version = log_version(&p.table_dir("events"));
    // Retention removes day 1's directory; day 2's still holds day 1's late events.
    std::fs::remove_dir_all(root.join(format!("dt={}", day(1)))).unwrap();
    for accelerate in ["1", "0"] {
        let out = p
            .cmd()
            .env("IDEMLAKE_ACCELERATE", accelerate)
            .args([
                "--output",
                "json",
                "run",
                "events",
                "--window",
                &day(1).to_string(),
            ])
            .output()
            .unwrap();
        assert_eq!(code(&out), 1, "{}", text(&out));
        let r = &json_lines(&out)[0];
        assert_eq!(r["published"], false, "{r}");
        assert!(
            r["error"].as_str().unwrap().contains("nothing has landed"),
            "{r}"
        );
    }
    assert_eq!(log_version(&p.table_dir("events")), version);
}

/// A directory that exists but holds no file is a window with no rows (`[write].on_empty`),
/// and `on_missing = "empty"` makes a window whose directory is absent one too.
#[test]
fn an_empty_directory_or_on_missing_empty_is_a_window_with_no_rows() {
    let p = landing_project(2, 1);
    std::fs::create_dir_all(p.path().join(format!("events/dt={}", day(2)))).unwrap();
    let out = p.run_ok("events", &day(2).to_string());
    assert!(text(&out).contains("rows=0"), "{}", text(&out));
    let out = p.run(&["run", "events", "--window", &day(3).to_string()]);
    assert_eq!(code(&out), 1, "{}", text(&out));
    p.task(
        "events",
        &TASK.replace(
            "format = \"parquet\"",
            "format = \"parquet\"\non_missing = \"empty\"",
        ),
    );
    let out = p.run_ok("events", &day(3).to_string());
    assert!(text(&out).contains("rows=0"), "{}", text(&out));
    // A misspelt value is refused by name.
    p.task(
        "events",
        &TASK.replace(
            "format = \"parquet\"",
            "format = \"parquet\"\non_missing = \"skip\"",
        ),
    );
    let out = p.run(&["validate", "events"]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    assert!(text(&out).contains("on_missing"), "{}", text(&out));
}

/// Review finding (a window whose filter names another partition level, `city = 'Paris'`,
/// failed as "not landed" on every run of a day without Paris events): only the levels the
/// window's own bounds name decide whether it has landed; a day whose `dt` directory exists
/// publishes no rows for Paris.
#[test]
fn a_filter_on_another_level_does_not_make_a_landed_day_missing() {
    let p = landing_project(0, 0);
    let root = p.path().join("events");
    for (d, city) in [(0, "Paris"), (1, "Lyon")] {
        let file = write_file(&root, day(d), 0);
        let dir = file.parent().unwrap().join(format!("city={city}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::rename(&file, dir.join(file.file_name().unwrap())).unwrap();
    }
    p.task(
        "events",
        &TASK.replace(
            "AND ts >= $window_start_ts",
            "AND city = 'Paris' AND ts >= $window_start_ts",
        ),
    );
    let out = p.run_ok("events", &day(0).to_string());
    assert!(text(&out).contains("rows=10"), "{}", text(&out));
    let out = p.run_ok("events", &day(1).to_string());
    assert!(text(&out).contains("rows=0"), "{}", text(&out));
    let out = p.run(&["run", "events", "--window", &day(2).to_string()]);
    assert_eq!(code(&out), 1, "{}", text(&out));
}

/// `status --output json` of the events task over days `from..=to`: per window, its label,
/// whether it is stale, and what changed.
fn staleness(p: &TestProject, from: i64, to: i64) -> Vec<(String, bool, Vec<String>)> {
    let out = p.run(&[
        "--output",
        "json",
        "status",
        "events",
        "--from",
        &day(from).to_string(),
        "--to",
        &day(to).to_string(),
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    json_lines(&out)
        .iter()
        .map(|s| {
            let changed = s["stale_inputs"]
                .as_array()
                .map(|a| a.iter().map(|v| v.as_str().unwrap().to_string()).collect())
                .unwrap_or_default();
            (
                s["window"]["label"].as_str().unwrap().to_string(),
                s["stale"].as_bool().unwrap(),
                changed,
            )
        })
        .collect()
}

/// Regression (`status` never showed that a published window's source changed): a late file
/// landing in `dt=D+1` after days D and D+1 were published makes exactly the days whose reach
/// holds that directory stale (D, and D+1 itself), naming the file; `backfill --stale` re-runs
/// those two, and day D then holds its late events. The same with the zone given as a glob
/// (staleness skipped glob zones).
#[test]
fn a_late_file_after_its_day_was_published_makes_the_days_whose_reach_holds_it_stale() {
    for uri in ["events", "events/dt=*/*.parquet"] {
        late_file_makes_days_stale(uri);
    }
}

fn late_file_makes_days_stale(uri: &str) {
    let p = landing_project(4, 2);
    let task =
        arrival_task("UTC", "1 day").replace("uri = \"events\"", &format!("uri = \"{uri}\""));
    p.task("events", &task);
    let out = backfill_json(&p, (0, 2), &[]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert!(staleness(&p, 0, 2).iter().all(|(_, stale, _)| !stale));
    write_late_file(&p.path().join("events"), 1, 5);
    let now = staleness(&p, 0, 2);
    let stale: Vec<&str> = now
        .iter()
        .filter(|(_, s, _)| *s)
        .map(|(l, _, _)| l.as_str())
        .collect();
    assert_eq!(stale, [day(1).to_string(), day(2).to_string()], "{now:?}");
    for (_, _, changed) in now.iter().filter(|(_, s, _)| *s) {
        assert_eq!(changed.len(), 1, "{changed:?}");
        assert!(
            changed[0].ends_with(&format!("dt={}/late-00005.parquet (added)", day(2))),
            "{changed:?}"
        );
    }
    let out = backfill_json(&p, (0, 2), &["--stale"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let mut rerun: Vec<String> = json_lines(&out)
        .iter()
        .map(|r| r["window"]["label"].as_str().unwrap().to_string())
        .collect();
    rerun.sort();
    assert_eq!(rerun, [day(1).to_string(), day(2).to_string()]);
    assert!(staleness(&p, 0, 2).iter().all(|(_, stale, _)| !stale));
    assert_matches_polars_in(&p, &p.table_dir("events"), (0, 2), "UTC");
}

/// The same with `year=/month=/day=` directories (`arrival = ["year", "month", "day"]`): a late
/// file in day 2's directory makes days 1 and 2 stale, named, and `--stale` re-runs them.
#[test]
fn a_late_file_in_a_year_month_day_zone_makes_the_days_reaching_it_stale() {
    let p = landing_project(4, 2);
    let root = p.path().join("events");
    crate::scan_filters::relayout(&root, "ymd");
    p.task(
        "events",
        &arrival_task("UTC", "1 day").replace(
            "arrival = \"dt\"",
            "arrival = [\"year\", \"month\", \"day\"]",
        ),
    );
    let out = backfill_json(&p, (0, 2), &[]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert!(staleness(&p, 0, 2).iter().all(|(_, stale, _)| !stale));
    let late = write_file(&root, day(1), 5);
    let d = day(2);
    let dir = root.join(format!(
        "year={}/month={}/day={}",
        d.year(),
        d.month(),
        d.day()
    ));
    std::fs::rename(&late, dir.join("late-00005.parquet")).unwrap();
    std::fs::remove_dir_all(late.parent().unwrap()).unwrap();
    let now = staleness(&p, 0, 2);
    let stale: Vec<&str> = now
        .iter()
        .filter(|(_, s, _)| *s)
        .map(|(l, _, _)| l.as_str())
        .collect();
    assert_eq!(stale, [day(1).to_string(), day(2).to_string()], "{now:?}");
    for (_, _, changed) in now.iter().filter(|(_, s, _)| *s) {
        assert_eq!(changed.len(), 1, "{changed:?}");
        assert!(
            changed[0].ends_with("/late-00005.parquet (added)"),
            "{changed:?}"
        );
    }
    let out = backfill_json(&p, (0, 2), &["--stale"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert_eq!(json_lines(&out).len(), 2, "{}", text(&out));
    assert!(staleness(&p, 0, 2).iter().all(|(_, stale, _)| !stale));
}

/// Regression (rows that arrived later than any window reads were lost with every check
/// green): with `event_time` declared, the rows of a window's arrival days that no window
/// reaches (here events of day 1 that landed in `dt=day 3`, two days late for a day of
/// lateness) are counted as `late_rows(events)`, in the report and the run record; a file one
/// day late is not; `on_late = "fail"` publishes nothing (exit 6).
#[test]
fn an_event_later_than_the_lateness_is_counted_in_the_report_and_run_record() {
    let p = landing_project(5, 2);
    let root = p.path().join("events");
    write_late_file(&root, 0, 2);
    let file = write_file(&root, day(1), 7);
    std::fs::rename(
        &file,
        root.join(format!("dt={}/late-00007.parquet", day(3))),
    )
    .unwrap();
    let task = arrival_task("UTC", "1 day").replace(
        "lateness = \"1 day\"",
        "lateness = \"1 day\"\nevent_time = \"ts\"",
    );
    p.task("events", &task);
    let late = |label: i64| {
        let out = run_day(&p, label);
        assert_eq!(code(&out), 0, "{}", text(&out));
        let r = json_lines(&out)[0].clone();
        let check = r["data_checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["check"] == "late_rows(events)")
            .cloned()
            .unwrap_or_else(|| panic!("{r}"));
        (check["failing_rows"].as_u64().unwrap(), r)
    };
    assert_eq!(late(1).0, 0);
    let (n, r) = late(2);
    assert_eq!(n, 10, "{r}");
    // The run record in the commit says the same.
    let record = record_at(&p, r["table_version"].as_u64().unwrap());
    let recorded = record["data_checks"].as_array().unwrap();
    assert!(
        recorded
            .iter()
            .any(|c| c["check"] == "late_rows(events)" && c["failing_rows"] == 10),
        "{record}"
    );
    p.task(
        "events",
        &task.replace(
            "event_time = \"ts\"",
            "event_time = \"ts\"\non_late = \"fail\"",
        ),
    );
    let out = run_day(&p, 3);
    assert_eq!(code(&out), 6, "{}", text(&out));
    assert_eq!(json_lines(&out)[0]["published"], false);
}

/// On S3: a zone that declares its arrival days is not stale after its backfill (the files
/// `status` lists are named as the run recorded them); a late file landing in `dt=day 2`
/// makes days 1 and 2 stale; `status` lists the zone's top level once and each directory in
/// reach once (LISTs counted), and `backfill --stale` re-runs those two days.
#[tokio::test(flavor = "multi_thread")]
async fn s3_a_late_file_makes_the_days_reaching_it_stale_with_one_listing_per_directory() {
    use object_store::{ObjectStoreExt, PutPayload, path::Path as ObjPath};
    let p = landing_project(4, 2);
    let root = p.path().join("events");
    let prefix = format!("it-{}", uuid::Uuid::new_v4().simple());
    let store = crate::s3::store();
    let put = |rel: String| {
        let bytes = std::fs::read(root.join(&rel)).unwrap();
        let key = ObjPath::from(format!("{prefix}/events/{rel}"));
        let store = store.clone();
        async move { store.put(&key, PutPayload::from(bytes)).await.unwrap() }
    };
    for d in 0..4 {
        for n in 0..2 {
            put(format!("dt={}/part-{n:05}.parquet", day(d))).await;
        }
    }
    let bucket = crate::s3::bucket();
    let uri = format!("s3://{bucket}/{prefix}/events");
    p.task(
        "events",
        &arrival_task("UTC", "1 day").replace("uri = \"events\"", &format!("uri = \"{uri}\"")),
    );
    let idem = |args: &[&str]| {
        p.cmd()
            .envs(crate::s3::s3_env())
            .env("IDEMLAKE_LAKE", format!("s3://{bucket}/{prefix}/lake"))
            .env(
                "IDEMLAKE_LOG",
                "idemlake::storage::count=trace,idemlake=info",
            )
            .args(args)
            .output()
            .unwrap()
    };
    let (from, to) = (day(0).to_string(), day(2).to_string());
    let out = idem(&[
        "--output", "json", "backfill", "events", "--from", &from, "--to", &to,
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let stale = |out: &std::process::Output| -> Vec<String> {
        assert_eq!(code(out), 0, "{}", text(out));
        json_lines(out)
            .iter()
            .filter(|s| s["stale"] == true)
            .map(|s| s["window"]["label"].as_str().unwrap().to_string())
            .collect()
    };
    let status = [
        "-v", "--output", "json", "status", "events", "--from", &from, "--to", &to,
    ];
    assert!(stale(&idem(&status)).is_empty());
    write_late_file(&root, 1, 5);
    put(format!("dt={}/late-00005.parquet", day(2))).await;
    let out = idem(&status);
    assert_eq!(stale(&out), [day(1).to_string(), day(2).to_string()]);
    let lists: Vec<String> = crate::s3::traced_requests(&String::from_utf8_lossy(&out.stderr))
        .into_iter()
        .filter(|(k, l)| k == "LIST" && l.starts_with(&format!("{prefix}/events")))
        .map(|(_, l)| l)
        .collect();
    // The top level once, and days 0 to 3 once each (the reaches of days 0, 1 and 2).
    assert_eq!(lists.len(), 5, "{lists:?}");
    let out = idem(&[
        "--output", "json", "backfill", "events", "--from", &from, "--to", &to, "--stale",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert_eq!(json_lines(&out).len(), 2, "{}", text(&out));
    assert!(stale(&idem(&status)).is_empty());
}

/// Regression (`idemlake new events_daily --source events --column ts` wrote a task that failed
/// `validate`: no format for a directory, the window column `ts` for a day grain, no directory
/// filter): over a landing zone it writes a task with the zone's format and arrival days
/// declared, which validates and publishes its day.
#[test]
fn new_over_a_landing_zone_writes_a_task_that_validates_and_runs() {
    let p = landing_project(3, 2);
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
        "format = \"parquet\"",
        "arrival = \"dt\"",
        "event_time = \"ts\"",
    ] {
        assert!(toml.contains(line), "{line}: {toml}");
    }
    let out = p.run(&["validate", "events_daily"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let out = p.run_ok("events_daily", &day(1).to_string());
    assert!(text(&out).contains("rows=20"), "{}", text(&out));
}

/// Regression (forgetting the directory filter silently scanned the whole zone; only
/// `explain` showed it): `validate` warns, naming the source and its partition column, when
/// no filter bounds a partitioned zone by the window, and not once its arrival days are
/// declared.
#[test]
fn validate_warns_when_a_partitioned_zone_is_read_without_pruning() {
    let p = landing_project(2, 1);
    let warnings = |task: &str| {
        p.task("events", task);
        let out = p.run(&["--output", "json", "validate", "events"]);
        assert_eq!(code(&out), 0, "{}", text(&out));
        json_lines(&out)[0]["warnings"].as_array().unwrap().clone()
    };
    let unpruned = TASK.replace(
        "WHERE dt >= $window_start AND dt < $window_end\n  AND ",
        "WHERE ",
    );
    let w = warnings(&unpruned);
    assert_eq!(w.len(), 1, "{w:?}");
    let w = w[0].as_str().unwrap();
    assert!(
        w.contains("`events`") && w.contains("`dt`") && w.contains("arrival"),
        "{w}"
    );
    assert!(warnings(TASK).is_empty());
    assert!(warnings(&arrival_task("UTC", "1 day")).is_empty());
    let out = p.run(&["validate", "events"]);
    assert!(!text(&out).contains("warning:"), "{}", text(&out));
    p.task("events", &unpruned);
    let out = p.run(&["validate", "events"]);
    assert!(text(&out).contains("partitioned by `dt`"), "{}", text(&out));
}
