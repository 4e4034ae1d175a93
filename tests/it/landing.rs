//! Landing zones: a directory per day (`events/dt=YYYY-MM-DD/part-N.parquet`), many small files,
//! more arriving all the time. Windows read only their own directories, record the files they
//! read, and fail only when a file changes inside their own reach. Tables are compared with
//! polars over the source (scripts/landing_oracle.py).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use datafusion::arrow::array::{Int64Array, TimestampMicrosecondArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use datafusion::arrow::record_batch::RecordBatch;

use crate::common::*;

pub(crate) const TASK: &str = r#"
sql = """
SELECT CAST(ts AS DATE) AS day, ts, id, v
FROM events
WHERE dt >= $window_start AND dt < $window_end
  AND ts >= $window_start_ts AND ts < $window_end_ts
"""

[target]
partition_by = "day"

[window]
grain = "day"
timezone = "UTC"

[sources.events]
uri = "events"
format = "parquet"

[write]
mode = "overwrite"
"#;

pub(crate) fn day(n: i64) -> jiff::civil::Date {
    jiff::civil::date(2026, 11, 1)
        .checked_add(jiff::Span::new().days(n))
        .unwrap()
}

/// Write file `n` of day `d` (10 rows inside the day), atomically (a hidden temporary file
/// renamed into place, as landing-zone writers do).
pub(crate) fn write_file(root: &Path, d: jiff::civil::Date, n: usize) -> PathBuf {
    let dir = root.join(format!("dt={d}"));
    std::fs::create_dir_all(&dir).unwrap();
    let start = d
        .to_zoned(jiff::tz::TimeZone::UTC)
        .unwrap()
        .timestamp()
        .as_microsecond();
    let rows = 10i64;
    let ts: Vec<i64> = (0..rows)
        .map(|i| start + ((n as i64 * rows + i) * 977_000_000) % 86_400_000_000)
        .collect();
    let id: Vec<i64> = (0..rows).map(|i| n as i64 * 1000 + i).collect();
    let v: Vec<i64> = (0..rows)
        .map(|i| (d.day() as i64) * 100 + n as i64 * 10 + i)
        .collect();
    let path = dir.join(format!("part-{n:05}.parquet"));
    write_rows(&path, ts, id, v);
    path
}

/// A Parquet file of columns `ts` (UTC microseconds), `id` and `v` at `path`, written
/// atomically (a hidden temporary file renamed into place).
pub(crate) fn write_rows(path: &Path, ts: Vec<i64>, id: Vec<i64>, v: Vec<i64>) {
    let schema = Arc::new(Schema::new(vec![
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            false,
        ),
        Field::new("id", DataType::Int64, false),
        Field::new("v", DataType::Int64, false),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(TimestampMicrosecondArray::from(ts).with_timezone("UTC")),
            Arc::new(Int64Array::from(id)),
            Arc::new(Int64Array::from(v)),
        ],
    )
    .unwrap();
    let dir = path.parent().unwrap();
    std::fs::create_dir_all(dir).unwrap();
    let name = path.file_name().unwrap().to_string_lossy();
    let tmp = dir.join(format!(".{name}.tmp"));
    let file = std::fs::File::create(&tmp).unwrap();
    let mut w = parquet::arrow::ArrowWriter::try_new(file, schema, None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// A project with the `events` task over a landing zone of `days` days × `files` files.
pub(crate) fn landing_project(days: i64, files: usize) -> TestProject {
    let p = TestProject::new();
    let root = p.path().join("events");
    for d in 0..days {
        for n in 0..files {
            write_file(&root, day(d), n);
        }
    }
    p.task("events", TASK);
    p
}

/// `idemlake --output json backfill events --from <day from> --to <day to>` and `extra`.
pub(crate) fn backfill_json(
    p: &TestProject,
    (from, to): (i64, i64),
    extra: &[&str],
) -> std::process::Output {
    let (from, to) = (day(from).to_string(), day(to).to_string());
    p.run(
        &[
            &[
                "--output", "json", "backfill", "events", "--from", &from, "--to", &to,
            ],
            extra,
        ]
        .concat(),
    )
}

/// The files a report's `source_rows` check read, and the windows its query computed.
pub(crate) fn check_reads(report: &serde_json::Value) -> (u64, u64) {
    let checks = report["reconciliation"].as_array().unwrap();
    let how = &checks.iter().find(|c| c["check"] == "source_rows").unwrap()["computed"];
    let files = how["scans"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["files"].as_u64().unwrap())
        .sum();
    (files, how["windows"].as_u64().unwrap())
}

/// polars' per-day rows and sums of the source and of table `table` (see landing_oracle.py).
fn oracle(p: &TestProject, table: &Path, (first, last): (i64, i64), tz: &str) -> serde_json::Value {
    let out = std::process::Command::new(python())
        .arg(repo().join("scripts/landing_oracle.py"))
        .arg(p.path().join("events"))
        .arg(table)
        .arg(day(first).to_string())
        .arg(day(last).to_string())
        .arg(tz)
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", text(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

pub(crate) fn assert_matches_polars(p: &TestProject, table: &Path, first: i64, last: i64) {
    assert_matches_polars_in(p, table, (first, last), "UTC");
}

/// Every day `first..=last` of the table holds the rows whose `ts` falls on it in `tz`, per
/// polars over the zone's files.
pub(crate) fn assert_matches_polars_in(p: &TestProject, table: &Path, days: (i64, i64), tz: &str) {
    let (first, last) = days;
    let got = oracle(p, table, days, tz);
    assert_eq!(
        got["source"].as_object().unwrap().len() as i64,
        last - first + 1,
        "{got}"
    );
    assert_eq!(got["source"], got["table"], "source vs table per polars");
}

#[test]
fn a_landing_zone_backfill_reads_its_days_records_their_files_and_matches_polars() {
    let p = landing_project(10, 4);
    let out = p.run(&[
        "--output",
        "json",
        "backfill",
        "events",
        "--from",
        &day(2).to_string(),
        "--to",
        &day(7).to_string(),
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let reports = json_lines(&out);
    assert_eq!(reports.len(), 6, "{}", text(&out));
    for r in &reports {
        assert_eq!(r["rows_written"], 40, "{r}");
        let checks: Vec<&str> = r["reconciliation"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["check"].as_str().unwrap())
            .collect();
        assert!(checks.contains(&"source_rows"), "{r}");
    }
    assert_matches_polars(&p, &p.table_dir("events"), 2, 7);

    // The run record of day 4 names exactly the four files of dt=<day 4>.
    let table = p.table_dir("events");
    let last = log_version(&table).unwrap();
    let mut records = Vec::new();
    for v in 0..=last {
        for a in commit_actions(&table, v) {
            let Some(info) = a["commitInfo"]["idemlake"].as_object() else {
                continue;
            };
            match info.get("runs").and_then(|r| r.as_array()) {
                Some(runs) => records.extend(runs.iter().cloned()),
                None => records.push(serde_json::Value::Object(info.clone())),
            }
        }
    }
    let label = day(4).to_string();
    let record = records
        .iter()
        .find(|r| r["window"]["label"] == label.as_str())
        .unwrap_or_else(|| panic!("no run record of {label} in {records:?}"));
    let read: Vec<&str> = record["sources"][0]["read"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(read.len(), 4, "{record}");
    assert_eq!(record["sources"][0]["files"], 4, "{record}");
    for (n, path) in read.iter().enumerate() {
        assert!(
            path.ends_with(&format!("events/dt={label}/part-{n:05}.parquet")),
            "{record}"
        );
    }

    // The plain twin (DataFusion's listing table) publishes the same rows.
    let lake = p.path().join("lake-plain");
    let out = p
        .cmd()
        .env("IDEMLAKE_ACCELERATE", "0")
        .args(["--lake"])
        .arg(&lake)
        .args(["backfill", "events", "--from"])
        .arg(day(2).to_string())
        .arg("--to")
        .arg(day(7).to_string())
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert_matches_polars(&p, &lake.join("events"), 2, 7);
}

#[test]
fn a_backfill_completes_while_files_land_in_other_days() {
    let p = landing_project(12, 3);
    let root = p.path().join("events");
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (root, stop) = (root.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0usize;
            while !stop.load(Ordering::SeqCst) {
                // Today's and tomorrow's directories keep receiving files, new ones appear.
                write_file(&root, day(20 + (n % 7) as i64), 100 + n);
                write_file(&root, day(9 + (n % 3) as i64), 100 + n);
                n += 1;
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            n
        })
    };
    let out = p.run(&[
        "backfill",
        "events",
        "--from",
        &day(0).to_string(),
        "--to",
        &day(7).to_string(),
    ]);
    stop.store(true, Ordering::SeqCst);
    let written = writer.join().unwrap();
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert!(written > 0);
    assert_matches_polars(&p, &p.table_dir("events"), 0, 7);
}

/// Start `run events --window <day d>` paused before its inputs check; returns the child once
/// it says it paused.
fn paused_run(p: &TestProject, d: i64, extra_env: &[(&str, &str)]) -> std::process::Child {
    paused_at(p, d, "before-inputs-check", extra_env)
}

/// Start `run events --window <day d>` paused at `point` (see `fault::pause`); returns the
/// child once it says it paused.
fn paused_at(
    p: &TestProject,
    d: i64,
    point: &str,
    extra_env: &[(&str, &str)],
) -> std::process::Child {
    paused_logged(p, d, point, extra_env).0
}

/// The stderr lines of a paused run, collected as they come.
type Logged = std::sync::Arc<std::sync::Mutex<Vec<String>>>;

/// [`paused_at`], also returning the run's stderr lines (collected until it ends; the thread
/// collecting them ends with it).
fn paused_logged(
    p: &TestProject,
    d: i64,
    point: &str,
    extra_env: &[(&str, &str)],
) -> (std::process::Child, Logged, std::thread::JoinHandle<()>) {
    use std::io::{BufRead, BufReader};
    let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin!("idemlake"));
    cmd.arg("--project")
        .arg(p.path())
        .args(["--output", "json", "run", "events", "--window"])
        .arg(day(d).to_string())
        .env_remove("IDEMLAKE_LAKE")
        .env_remove("IDEMLAKE_PROJECT")
        .env("IDEMLAKE_TEST_FAULT", format!("pause-{point}:4000"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let logged: Logged = Default::default();
    loop {
        let line = lines
            .next()
            .expect("the run ended before it paused")
            .unwrap();
        let paused = line.contains(&format!("paused at {point}"));
        logged.lock().unwrap().push(line);
        if paused {
            break;
        }
    }
    // Keep draining stderr so the child never blocks on a full pipe.
    let sink = logged.clone();
    let drain = std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            sink.lock().unwrap().push(line);
        }
    });
    (child, logged, drain)
}

/// Wait (at most 3 s, within a paused run's 4 s pause) until a line of `logged` contains `what`.
fn wait_logged(logged: &Logged, what: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    while !logged.lock().unwrap().iter().any(|x| x.contains(what)) {
        assert!(
            std::time::Instant::now() < deadline,
            "no line with {what:?}: {:?}",
            logged.lock().unwrap()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The run `out` failed because file `part-00077` landed inside its window's reach: exit 1,
/// retryable, the file named, nothing published (`case` says which run).
fn assert_refused_for_part_77(p: &TestProject, out: &std::process::Output, case: &str) {
    assert_eq!(code(out), 1, "{case}: {}", text(out));
    let report = &json_lines(out)[0];
    assert_eq!(report["published"], false, "{case}: {report}");
    assert_eq!(report["retryable"], true, "{case}: {report}");
    let error = report["error"].as_str().unwrap();
    assert!(
        error.contains("changed inside this window's reach") && error.contains("part-00077"),
        "{case}: {error}"
    );
    assert_eq!(
        log_version(&p.table_dir("events")),
        None,
        "{case}: nothing published"
    );
}

#[test]
#[cfg_attr(
    not(feature = "faults"),
    ignore = "needs the fault hooks: --features faults"
)]
fn a_file_added_to_a_running_windows_own_directory_fails_it_and_publishes_nothing() {
    for accelerate in ["1", "0"] {
        let p = landing_project(5, 2);
        let child = paused_run(&p, 2, &[("IDEMLAKE_ACCELERATE", accelerate)]);
        write_file(&p.path().join("events"), day(2), 77);
        let out = child.wait_with_output().unwrap();
        assert_refused_for_part_77(&p, &out, &format!("accelerate={accelerate}"));

        // Re-run once the directory is quiet: the window holds every file, as polars reads it.
        p.run_ok("events", &day(2).to_string());
        assert_matches_polars(&p, &p.table_dir("events"), 2, 2);
    }
}

/// Regression (a file landing in a running window's own directory after the window listed it
/// but before the checks did was reported as a mismatch, exit 3, never retried): the window's
/// files are checked again before a mismatch is reported, and a change there is exit 1,
/// retryable, nothing published.
#[test]
#[cfg_attr(
    not(feature = "faults"),
    ignore = "needs the fault hooks: --features faults"
)]
fn a_file_landing_after_the_window_listed_it_and_before_the_checks_did_is_retryable() {
    let p = landing_project(5, 2);
    // Window by window, the checks list the window's directory when they start.
    let env = [("IDEMLAKE_CHECK_BATCH", "1")];
    let child = paused_at(&p, 2, "before-source-checks", &env);
    write_file(&p.path().join("events"), day(2), 77);
    let out = child.wait_with_output().unwrap();
    assert_refused_for_part_77(&p, &out, "checks listed last");
}

/// Regression (the same race the other way round: a backfill's grouped check lists every
/// window's directories first, and a file landing before a window lists its own made the
/// window's output larger than the checks' source side, exit 3): with the window's files
/// unchanged since it listed them, the checks compute its source side again, by their own
/// route, and the window publishes what it read.
#[test]
#[cfg_attr(
    not(feature = "faults"),
    ignore = "needs the fault hooks: --features faults"
)]
fn a_file_landing_after_the_checks_listed_it_and_before_the_window_did_is_read() {
    let p = landing_project(5, 2);
    let env = [("IDEMLAKE_LOG", "idemlake=debug")];
    let (child, logged, drain) = paused_logged(&p, 2, "before-pins", &env);
    // The checks' grouped query started beside the pause: wait until it has its answer.
    let listed = |l: &Logged, what: &str| l.lock().unwrap().iter().any(|x| x.contains(what));
    wait_logged(&logged, "came from one grouped query");
    write_file(&p.path().join("events"), day(2), 77);
    let out = child.wait_with_output().unwrap();
    drain.join().unwrap();
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert!(
        listed(&logged, "the checks compute the source side again"),
        "{:?}",
        logged.lock().unwrap()
    );
    assert_matches_polars(&p, &p.table_dir("events"), 2, 2);
}

#[test]
#[cfg_attr(
    not(feature = "faults"),
    ignore = "needs the fault hooks: --features faults"
)]
fn files_landing_outside_a_running_window_do_not_fail_it() {
    let p = landing_project(5, 2);
    let child = paused_run(&p, 2, &[]);
    let root = p.path().join("events");
    write_file(&root, day(3), 77);
    write_file(&root, day(30), 0);
    let out = child.wait_with_output().unwrap();
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert_matches_polars(&p, &p.table_dir("events"), 2, 2);
}

#[test]
fn partition_columns_are_validated() {
    let p = landing_project(2, 1);
    let cases = [
        (
            "partition_columns = [\"dt TIMESTAMPTZ\"]",
            "is not a partition type",
        ),
        (
            "partition_columns = [\"dt\"]",
            "must be a column name and a type",
        ),
        (
            "partitioning = \"none\"\npartition_columns = [\"dt DATE\"]",
            "set partitioning = \"hive\"",
        ),
        (
            "partitioning = \"sometimes\"",
            "must be auto, hive, directories or none",
        ),
        (
            "partitioning = \"directories\"",
            "partition_columns = [\"year INT\"",
        ),
    ];
    for (extra, message) in cases {
        let toml = TASK.replace(
            "format = \"parquet\"",
            &format!("format = \"parquet\"\n{extra}"),
        );
        p.task("events", &toml);
        let out = p.run(&["validate", "events"]);
        assert_eq!(code(&out), 2, "{extra}: {}", text(&out));
        assert!(text(&out).contains(message), "{extra}: {}", text(&out));
    }
    // Declared levels must be the directories': a misnamed one is refused before any read.
    let toml = TASK.replace(
        "format = \"parquet\"",
        "format = \"parquet\"\npartition_columns = [\"day DATE\"]",
    );
    p.task("events", &toml);
    let out = p.run(&["run", "events", "--window", &day(0).to_string()]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    assert!(
        text(&out).contains("partition_columns names [day]"),
        "{}",
        text(&out)
    );
    assert_eq!(log_version(&p.table_dir("events")), None);
}

#[test]
fn a_glob_location_reads_only_the_files_it_names_in_both_routes() {
    let p = landing_project(4, 3);
    for d in 0..4 {
        let dir = p.path().join("events").join(format!("dt={}", day(d)));
        std::fs::copy(
            dir.join("part-00000.parquet"),
            dir.join("other-00000.parquet"),
        )
        .unwrap();
    }
    let glob = p.path().join("events/*/part-*.parquet");
    p.task(
        "events",
        &TASK.replace("uri = \"events\"", &format!("uri = \"{}\"", glob.display())),
    );
    for accelerate in ["1", "0"] {
        let lake = p.path().join(format!("lake-{accelerate}"));
        let out = p
            .cmd()
            .env("IDEMLAKE_ACCELERATE", accelerate)
            .args(["--output", "json", "--lake"])
            .arg(&lake)
            .args(["backfill", "events", "--from"])
            .arg(day(1).to_string())
            .arg("--to")
            .arg(day(2).to_string())
            .output()
            .unwrap();
        assert_eq!(code(&out), 0, "{}", text(&out));
        let reports = json_lines(&out);
        assert_eq!(reports.len(), 2, "{}", text(&out));
        for r in &reports {
            assert_eq!(r["rows_written"], 30, "accelerate={accelerate}: {r}");
        }
    }
    // Directory segments other than `*` / `key=*` are refused before anything is read.
    let bad = p.path().join("events/dt=2026-*/part-*.parquet");
    p.task(
        "events",
        &TASK.replace("uri = \"events\"", &format!("uri = \"{}\"", bad.display())),
    );
    let out = p.run(&["run", "events", "--window", &day(1).to_string()]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    assert!(
        text(&out).contains("may only be `*` or `key=*`"),
        "{}",
        text(&out)
    );
}

/// A landing zone on S3 named as users write it, without a trailing slash
/// (`s3://bucket/…/events`): it was "no files found" (one HEAD of an object that does not
/// exist, then nothing). Now it reads as the prefix it names, and a day window reads only its
/// own directory's files, besides the one file each route takes the schema from.
#[tokio::test(flavor = "multi_thread")]
async fn s3_a_landing_zone_named_without_a_trailing_slash_reads_only_its_day() {
    use object_store::{ObjectStoreExt, PutPayload, path::Path as ObjPath};
    let (days, files) = (6, 3);
    let p = landing_project(days, files);
    let prefix = format!("it-{}", uuid::Uuid::new_v4().simple());
    let store = crate::s3::store();
    for d in 0..days {
        for n in 0..files {
            let rel = format!("dt={}/part-{n:05}.parquet", day(d));
            let bytes = std::fs::read(p.path().join("events").join(&rel)).unwrap();
            let key = ObjPath::from(format!("{prefix}/events/{rel}"));
            store.put(&key, PutPayload::from(bytes)).await.unwrap();
        }
    }
    let bucket = crate::s3::bucket();
    let uri = format!("s3://{bucket}/{prefix}/events");
    p.task(
        "events",
        &TASK.replace("uri = \"events\"", &format!("uri = \"{uri}\"")),
    );
    let window = day(3);
    let out = p
        .cmd()
        .envs(crate::s3::s3_env())
        .env("IDEMLAKE_LAKE", format!("s3://{bucket}/{prefix}/lake"))
        .env(
            "IDEMLAKE_LOG",
            "idemlake::storage::count=trace,idemlake=info",
        )
        .args(["-v", "run", "events", "--window", &window.to_string()])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert!(text(&out).contains("rows=30"), "{}", text(&out));
    let requests = crate::s3::traced_requests(&String::from_utf8_lossy(&out.stderr));
    let zone_gets: Vec<&String> = requests
        .iter()
        .filter(|(k, l)| k == "GET" && l.contains("/events/dt="))
        .map(|(_, l)| l)
        .collect();
    let own = format!("/events/dt={window}/");
    let elsewhere: Vec<_> = zone_gets.iter().filter(|l| !l.contains(&own)).collect();
    assert!(
        elsewhere.len() <= 2 && zone_gets.len() > elsewhere.len(),
        "GETs outside the window's directory: {elsewhere:?} (all: {requests:?})"
    );
    // No listing of the whole history from the accelerated route: each LIST names the root
    // or one directory, and no other day's directory is listed but the first (schema).
    let listed_days: std::collections::BTreeSet<_> = requests
        .iter()
        .filter(|(k, l)| k == "LIST" && l.contains("/events/dt="))
        .map(|(_, l)| l.clone())
        .collect();
    assert!(listed_days.len() <= 2, "{listed_days:?}");
    // The root: listed by the prefix check (which the zone keeps as its root's listing),
    // afresh right before the commit, and once by the checks' own route (DataFusion's listing
    // table lists a zone whole under a range filter: one listing for the run, 1,000 keys a
    // request); not a fourth time.
    let root = format!("{prefix}/events");
    let root_lists = requests
        .iter()
        .filter(|(k, l)| k == "LIST" && l.ends_with(&root))
        .count();
    assert!(
        root_lists <= 3,
        "{root_lists} LISTs of {root}: {requests:?}"
    );
}

/// A glob location on S3, `…/events/*/part-*.parquet`: the window's rows are right on both
/// routes, the runner reads each of the window's files with one GET, and the checks, through
/// DataFusion's Parquet reader, with two (the footer, then the pages): 3 GETs a file in all.
/// (Issue 51: the checks' own reader, one GET a file, is gone; its cost on S3 is these GETs.)
#[tokio::test(flavor = "multi_thread")]
async fn s3_a_glob_zones_day_window_reads_only_the_windows_files() {
    use object_store::{ObjectStoreExt, PutPayload, path::Path as ObjPath};
    let (days, files) = (4, 3);
    let p = landing_project(days, files);
    let prefix = format!("it-{}", uuid::Uuid::new_v4().simple());
    let store = crate::s3::store();
    for d in 0..days {
        for n in 0..files {
            let rel = format!("dt={}/part-{n:05}.parquet", day(d));
            let bytes = std::fs::read(p.path().join("events").join(&rel)).unwrap();
            let key = ObjPath::from(format!("{prefix}/events/{rel}"));
            store
                .put(&key, PutPayload::from(bytes.clone()))
                .await
                .unwrap();
            // A file the glob does not name, in every directory.
            let other = ObjPath::from(format!("{prefix}/events/dt={}/other-{n}.parquet", day(d)));
            store.put(&other, PutPayload::from(bytes)).await.unwrap();
        }
    }
    let bucket = crate::s3::bucket();
    let uri = format!("s3://{bucket}/{prefix}/events/*/part-*.parquet");
    p.task(
        "events",
        &TASK.replace("uri = \"events\"", &format!("uri = \"{uri}\"")),
    );
    let window = day(2);
    for accelerate in ["1", "0"] {
        let out = p
            .cmd()
            .envs(crate::s3::s3_env())
            .env("IDEMLAKE_ACCELERATE", accelerate)
            .env(
                "IDEMLAKE_LAKE",
                format!("s3://{bucket}/{prefix}/lake-{accelerate}"),
            )
            .env(
                "IDEMLAKE_LOG",
                "idemlake::storage::count=trace,idemlake=info",
            )
            .args(["-v", "run", "events", "--window", &window.to_string()])
            .output()
            .unwrap();
        assert_eq!(code(&out), 0, "{}", text(&out));
        assert!(text(&out).contains("rows=30"), "{}", text(&out));
        if accelerate == "0" {
            continue;
        }
        let requests = crate::s3::traced_requests(&String::from_utf8_lossy(&out.stderr));
        let own = format!("/events/dt={window}/");
        let gets = requests
            .iter()
            .filter(|(k, l)| k == "GET" && l.contains(&own))
            .count();
        assert!(
            gets <= 3 * files,
            "{gets} GETs of the window's {files} files: {requests:?}"
        );
    }
}

/// A long landing-zone backfill (70 days) is checked through DataFusion's listing table, one
/// grouped query for its windows: the table matches polars over the source, each report says
/// what the check read (every window's files), and a row dropped on the published path fails
/// the check (nothing published).
#[test]
fn a_long_landing_zone_backfill_is_checked_through_the_listing_table() {
    let days = 70;
    let p = landing_project(days, 2);
    let (first, last) = (day(0).to_string(), day(days - 1).to_string());
    let backfill = |lake: &Path, fault: Option<&str>| {
        let mut cmd = p.cmd();
        if let Some(f) = fault {
            cmd.env("IDEMLAKE_TEST_FAULT", f);
        }
        cmd.env("IDEMLAKE_LOG", "idemlake::pipeline::checks=debug")
            .arg("--lake")
            .arg(lake)
            .args(["--output", "json", "backfill", "events", "--from", &first])
            .args(["--to", &last])
            .output()
            .unwrap()
    };
    let lake = p.path().join("lake-long");
    let out = backfill(&lake, None);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let reports = json_lines(&out);
    assert_eq!(reports.len(), days as usize);
    for r in &reports {
        let (files, windows) = check_reads(r);
        assert_eq!(files, 2 * windows, "{r}");
    }
    assert_matches_polars(&p, &lake.join("events"), 0, days - 1);

    let lake = p.path().join("lake-dropped");
    let out = backfill(&lake, Some("output-drop-row"));
    assert_ne!(code(&out), 0, "{}", text(&out));
    let reports = json_lines(&out);
    let failed: Vec<_> = reports.iter().filter(|r| r["published"] == false).collect();
    assert!(!failed.is_empty(), "{}", text(&out));
    for r in failed {
        let checks = r["reconciliation"].as_array().unwrap();
        let rows = checks.iter().find(|c| c["check"] == "source_rows").unwrap();
        assert_eq!(rows["ok"], false, "{r}");
    }
}

/// The read-back's first replay is opened when the window starts, beside its scans
/// (`target::prefetch`). Commits other writers land meanwhile — the same window and another —
/// are read past by the read-back's own route: the paused run publishes, its read-back
/// confirms the window's files, and the table matches polars over the source. Also the plain
/// twin (the replay opened by the read-back itself).
#[test]
#[cfg_attr(
    not(feature = "faults"),
    ignore = "needs the fault hooks: --features faults"
)]
fn a_read_back_opened_before_other_writers_commits_reads_past_them() {
    for accelerate in ["1", "0"] {
        let p = landing_project(5, 2);
        p.run_ok("events", &day(1).to_string());
        let child = paused_run(&p, 2, &[("IDEMLAKE_ACCELERATE", accelerate)]);
        p.run_ok("events", &day(2).to_string());
        p.run_ok("events", &day(3).to_string());
        let out = child.wait_with_output().unwrap();
        assert_eq!(code(&out), 0, "accelerate={accelerate}: {}", text(&out));
        let report = &json_lines(&out)[0];
        assert_eq!(report["published"], true, "{report}");
        assert!(report["table_version"].as_i64().unwrap() >= 3, "{report}");
        assert!(text(&out).contains("rows_committed"), "{}", text(&out));
        assert_matches_polars(&p, &p.table_dir("events"), 1, 3);
    }
}

/// Regression (the read-back's prefetched replay waited for the window's scans: it was started
/// once the window was reconciled, and woken on the runtime the scans keep busy, so a first
/// run still opened the log for its read-back after the scans, on the commit's path): the
/// replay is open while the first window is still paused before it lists its files, and the
/// run publishes, read back.
#[test]
#[cfg_attr(
    not(feature = "faults"),
    ignore = "needs the fault hooks: --features faults"
)]
fn the_read_backs_replay_is_open_before_the_first_window_lists_its_files() {
    let p = landing_project(3, 2);
    p.run_ok("events", &day(0).to_string());
    let env = [(
        "IDEMLAKE_LOG",
        "warn,idemlake::pipeline::target::prefetch=debug",
    )];
    let (child, logged, drain) = paused_logged(&p, 1, "before-pins", &env);
    // The pause lasts 4 s; the replay opens within it.
    wait_logged(&logged, "replay is open");
    let out = child.wait_with_output().unwrap();
    drain.join().unwrap();
    assert_eq!(code(&out), 0, "{:?}", logged.lock().unwrap());
    let report = &json_lines(&out)[0];
    assert_eq!(report["published"], true, "{report}");
    assert_matches_polars(&p, &p.table_dir("events"), 0, 1);
}

/// Move the files of day `d` into a subdirectory `hour=01` of their directory.
fn nest_day(root: &Path, d: jiff::civil::Date) {
    let dir = root.join(format!("dt={d}"));
    let nested = dir.join("hour=01");
    std::fs::create_dir_all(&nested).unwrap();
    for e in std::fs::read_dir(&dir).unwrap() {
        let path = e.unwrap().path();
        if path.is_file() {
            std::fs::rename(&path, nested.join(path.file_name().unwrap())).unwrap();
        }
    }
}

/// Regression (a zone whose directory depth changed over time lost rows silently: with the
/// layout `dt=/hour=/` taken from its first file, a later day's files directly under `dt=`
/// were read by neither route, and the window published 0 rows with every check passing):
/// a window that reaches files or `key=value` directories at another depth than the zone's
/// layout fails with exit 2 naming them, and nothing is published; either way round.
#[test]
fn a_window_reaching_files_at_another_depth_than_the_zones_layout_fails() {
    for nested_first in [true, false] {
        let p = landing_project(3, 2);
        let root = p.path().join("events");
        let (nested, window) = if nested_first {
            (day(0), day(1))
        } else {
            (day(1), day(1))
        };
        nest_day(&root, nested);
        let out = p.run(&[
            "--output",
            "json",
            "run",
            "events",
            "--window",
            &window.to_string(),
        ]);
        assert_eq!(code(&out), 2, "nested_first={nested_first}: {}", text(&out));
        let report = &json_lines(&out)[0];
        let error = report["error"].as_str().unwrap();
        let named = if nested_first {
            format!("dt={window}/part-")
        } else {
            format!("dt={window}/hour=01")
        };
        assert!(
            error.contains(&named) && error.contains("layout"),
            "{error}"
        );
        assert_eq!(
            log_version(&p.table_dir("events")),
            None,
            "nothing published"
        );
    }
}

/// Regression (a data file directly in the root of a partitioned zone was skipped by both
/// routes without a word: its rows belong to no window): with the partition columns declared
/// or inferred, a window fails with exit 2 naming the file, and nothing is published.
#[test]
fn a_data_file_in_the_root_of_a_partitioned_zone_fails_the_window() {
    for declared in [true, false] {
        let p = landing_project(3, 2);
        let root = p.path().join("events");
        std::fs::copy(
            root.join(format!("dt={}/part-00000.parquet", day(1))),
            root.join("zz-root.parquet"),
        )
        .unwrap();
        if declared {
            let toml = TASK.replace(
                "format = \"parquet\"",
                "format = \"parquet\"\npartition_columns = [\"dt DATE\"]",
            );
            p.task("events", &toml);
        }
        let out = p.run(&[
            "--output",
            "json",
            "run",
            "events",
            "--window",
            &day(1).to_string(),
        ]);
        assert_eq!(code(&out), 2, "declared={declared}: {}", text(&out));
        let error = json_lines(&out)[0]["error"].as_str().unwrap().to_string();
        assert!(
            error.contains("zz-root.parquet"),
            "declared={declared}: {error}"
        );
        assert_eq!(
            log_version(&p.table_dir("events")),
            None,
            "nothing published"
        );
    }
}

/// Rewrite file `path` with its column `v` as `v` (same `ts`, `id`).
fn retype_v(path: &Path, v: Arc<dyn datafusion::arrow::array::Array>) {
    let file = std::fs::File::open(path).unwrap();
    let mut reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .unwrap()
        .build()
        .unwrap();
    let batch = reader.next().unwrap().unwrap();
    let schema = Arc::new(Schema::new(vec![
        batch.schema().field(0).clone(),
        batch.schema().field(1).clone(),
        Field::new("v", v.data_type().clone(), false),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![batch.column(0).clone(), batch.column(1).clone(), v],
    )
    .unwrap();
    let mut w =
        parquet::arrow::ArrowWriter::try_new(std::fs::File::create(path).unwrap(), schema, None)
            .unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

/// Regression (a file whose column had a wider type than the zone's was converted silently:
/// `DOUBLE` 1.5 published as `BIGINT` 1, every check passing, since both routes converted
/// alike): a conversion that could change values fails the window with exit 2 naming the
/// column and both types, nothing published, on the runner's route and its plain twin; one
/// that keeps every value (`INT` into `BIGINT`) is read.
#[test]
fn a_file_whose_column_cannot_be_converted_without_loss_fails_its_window() {
    use datafusion::arrow::array::{Float64Array, Int32Array};
    for accelerate in ["1", "0"] {
        let p = landing_project(3, 2);
        let root = p.path().join("events");
        let lossy: Vec<f64> = (0..10).map(|i| i as f64 + 0.5).collect();
        retype_v(
            &root.join(format!("dt={}/part-00001.parquet", day(1))),
            Arc::new(Float64Array::from(lossy)),
        );
        retype_v(
            &root.join(format!("dt={}/part-00001.parquet", day(2))),
            Arc::new(Int32Array::from((0..10).collect::<Vec<i32>>())),
        );
        let env = ("IDEMLAKE_ACCELERATE", accelerate);
        let out = p.run_env(
            env.0,
            env.1,
            &[
                "--output",
                "json",
                "run",
                "events",
                "--window",
                &day(1).to_string(),
            ],
        );
        assert_eq!(code(&out), 2, "accelerate={accelerate}: {}", text(&out));
        let error = json_lines(&out)[0]["error"].as_str().unwrap().to_string();
        assert!(
            error.contains("column `v` is Float64") && error.contains("Int64"),
            "{error}"
        );
        assert_eq!(
            log_version(&p.table_dir("events")),
            None,
            "nothing published"
        );
        // A task that does not read `v` reads that file.
        p.task(
            "ids",
            &TASK.replace(
                "SELECT CAST(ts AS DATE) AS day, ts, id, v",
                "SELECT CAST(ts AS DATE) AS day, ts, id",
            ),
        );
        let out = p.run_env(
            env.0,
            env.1,
            &["run", "ids", "--window", &day(1).to_string()],
        );
        assert_eq!(code(&out), 0, "accelerate={accelerate}: {}", text(&out));
        let out = p.run_env(
            env.0,
            env.1,
            &["run", "events", "--window", &day(2).to_string()],
        );
        assert_eq!(code(&out), 0, "accelerate={accelerate}: {}", text(&out));
        // polars reads the day's two files (one INT, one BIGINT) and the table apart.
        let script = format!(
            "import polars as pl\n\
             s = pl.concat([pl.read_parquet(f).select(pl.col('v').cast(pl.Int64)) \
               for f in ['{d}/part-00000.parquet', '{d}/part-00001.parquet']])\n\
             t = pl.read_delta('{t}')\n\
             print(s.height, s['v'].sum(), t.height, t['v'].sum(), t.schema['v'])",
            d = root.join(format!("dt={}", day(2))).display(),
            t = p.table_dir("events").display()
        );
        let out = std::process::Command::new(python())
            .args(["-c", &script])
            .output()
            .unwrap();
        assert_eq!(code(&out), 0, "{}", text(&out));
        let got = String::from_utf8_lossy(&out.stdout);
        let f: Vec<&str> = got.split_whitespace().collect();
        assert_eq!((f[0], f[1], f[4]), (f[2], f[3], "Int64"), "{got}");
    }
}

/// Regression (a top-level BIGINT directory spelled with leading zeros, `d=01`, was read by the
/// runner but not by the checks, which found a top-level directory by its value's spelling
/// `d=1` through DataFusion's listing: the window failed its check, exit 3, and `audit` then
/// called the never-published window clean, 0 rows on both sides; it was then refused, exit
/// 2): both routes read it by its value, as polars does, accelerated and as the plain twin,
/// and `audit` finds the window clean.
#[test]
fn a_top_level_directory_spelled_otherwise_than_its_value_is_read_by_both_routes() {
    let p = landing_project(2, 1);
    let root = p.path().join("events");
    // Day 1 spelled `n=01`, day 2 as its value prints, `n=2`.
    for (d, spelled) in [(0, "n=01"), (1, "n=2")] {
        let from = root.join(format!("dt={}", day(d)));
        std::fs::rename(&from, root.join(spelled)).unwrap();
    }
    p.task(
        "events",
        &TASK.replace(
            "WHERE dt >= $window_start AND dt < $window_end",
            "WHERE n >= date_part('day', $window_start) AND n < date_part('day', $window_start) + 1",
        ),
    );
    let script = format!(
        "import polars as pl; print(pl.scan_parquet('{}/**/*.parquet', hive_partitioning=True).filter(pl.col('n') == 1).select(pl.len()).collect().item())",
        root.display()
    );
    let want: u64 = python_prints(&script).parse().unwrap();
    assert!(want > 0);
    let w = day(0).to_string();
    for accelerate in ["1", "0"] {
        let out = p
            .cmd()
            .env("IDEMLAKE_ACCELERATE", accelerate)
            .args(["run", "events", "--window", &w])
            .output()
            .unwrap();
        assert_eq!(code(&out), 0, "accelerate={accelerate}: {}", text(&out));
        assert!(
            text(&out).contains(&format!("rows={want}")),
            "accelerate={accelerate}, want rows={want}: {}",
            text(&out)
        );
    }
    let out = p.run(&["audit", "events", "--from", &w, "--to", &w]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    p.run_ok("events", &day(1).to_string());
}

/// Regression (a directory without `=` sorting before the partitions, `aaa/` or `_temporary/`,
/// gave the zone its first file: the zone was read as unpartitioned and the task's filter on
/// `dt` failed as invalid SQL): the layout is taken from a `key=value` directory, and the
/// stray directories are not part of the zone.
#[test]
fn a_stray_directory_sorting_before_the_partitions_does_not_hide_them() {
    let p = landing_project(3, 2);
    let root = p.path().join("events");
    for stray in ["aaa", "_temporary"] {
        let from = write_file(&root, day(1), 9);
        std::fs::create_dir_all(root.join(stray)).unwrap();
        std::fs::rename(&from, root.join(stray).join("part-00009.parquet")).unwrap();
    }
    p.run_ok("events", &day(1).to_string());
    let table = p.table_dir("events");
    let rows = |t: &Path| {
        let script = format!(
            "import polars as pl; print(pl.read_delta('{}').height)",
            t.display()
        );
        let out = std::process::Command::new(python())
            .args(["-c", &script])
            .output()
            .unwrap();
        assert_eq!(code(&out), 0, "{}", text(&out));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(
        rows(&table),
        "20",
        "the day's two files, not the stray ones"
    );
}

/// Regression (`dt=__HIVE_DEFAULT_PARTITION__`, Hive's spelling of a NULL partition value,
/// failed with a hint to declare the type already declared, and `verify` with a raw cast
/// error, exit 1): run and verify both refuse it with exit 2 naming the directory and what
/// it is.
#[test]
fn a_null_partition_directory_is_refused_by_name() {
    let p = landing_project(3, 2);
    let root = p.path().join("events");
    let from = write_file(&root, day(30), 0);
    let null_dir = root.join("dt=__HIVE_DEFAULT_PARTITION__");
    std::fs::create_dir_all(&null_dir).unwrap();
    std::fs::rename(&from, null_dir.join("part-00000.parquet")).unwrap();
    let w = day(1).to_string();
    for args in [
        vec!["run", "events", "--window", &w],
        vec!["verify", "events", "--window", &w],
    ] {
        let out = p.run(&args);
        assert_eq!(code(&out), 2, "{args:?}: {}", text(&out));
        let t = text(&out);
        assert!(
            t.contains("__HIVE_DEFAULT_PARTITION__") && t.contains("is NULL"),
            "{t}"
        );
        assert!(!t.contains("declare it"), "{t}");
    }
}

/// Regression (an impossible date directory, `dt=2026-02-30`, sorting first in the zone made
/// `dt` text, and every window then failed on casting it to the window's dates: exit 1,
/// retryable, an Arrow cast error naming no directory — an orchestrator retrying for ever):
/// the window that reaches it fails with exit 2, not retryable, naming the directory, as a
/// declared `DATE` column does.
#[test]
fn an_impossible_date_directory_sorting_first_is_refused_by_name_not_retried() {
    let p = landing_project(3, 1);
    let root = p.path().join("events");
    let from = write_file(&root, day(30), 0);
    let bad = root.join("dt=2026-02-30");
    std::fs::create_dir_all(&bad).unwrap();
    std::fs::rename(&from, bad.join("part-00000.parquet")).unwrap();
    let w = day(1).to_string();
    let out = p.run(&["--output", "json", "run", "events", "--window", &w]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    let r = &json_lines(&out)[0];
    assert_eq!(r["retryable"], false, "{r}");
    let error = r["error"].as_str().unwrap();
    assert!(error.contains("dt=2026-02-30"), "{error}");
    assert_eq!(log_version(&p.table_dir("events")), None);
}

/// An S3 landing zone that exists but holds no data files yet — only a folder marker
/// (`raw/zone/`, as consoles create) or only `_SUCCESS` — fails the run with exit 1,
/// `retryable: true` (it was exit 2, "no .parquet files under …").
#[tokio::test(flavor = "multi_thread")]
async fn s3_a_landing_zone_holding_only_a_marker_or_success_is_retryable() {
    use object_store::{ObjectStoreExt, PutPayload, path::Path as ObjPath};
    let p = landing_project(1, 1);
    let prefix = format!("it-{}", uuid::Uuid::new_v4().simple());
    let store = crate::s3::store();
    store
        .put(
            &ObjPath::from(format!("{prefix}/success/_SUCCESS")),
            PutPayload::from_static(b""),
        )
        .await
        .unwrap();
    let e = crate::s3::s3_env();
    let marker = std::process::Command::new("curl")
        .args(["-sf", "-X", "PUT", "--data-binary", ""])
        .args(["--aws-sigv4", "aws:amz:us-east-1:s3", "--user"])
        .arg(format!(
            "{}:{}",
            e["AWS_ACCESS_KEY_ID"], e["AWS_SECRET_ACCESS_KEY"]
        ))
        .arg(format!(
            "{}/{}/{prefix}/marker/",
            e["AWS_ENDPOINT_URL"],
            crate::s3::bucket()
        ))
        .output()
        .unwrap();
    assert!(marker.status.success(), "{}", text(&marker));
    let bucket = crate::s3::bucket();
    for zone in ["marker", "success"] {
        let uri = format!("s3://{bucket}/{prefix}/{zone}/");
        p.task(
            "events",
            &TASK.replace("uri = \"events\"", &format!("uri = \"{uri}\"")),
        );
        let out = p
            .cmd()
            .envs(crate::s3::s3_env())
            .env("IDEMLAKE_LAKE", format!("s3://{bucket}/{prefix}/lake"))
            .args(["--output", "json", "run", "events", "--window"])
            .arg(day(0).to_string())
            .output()
            .unwrap();
        assert_eq!(code(&out), 1, "{zone}: {}", text(&out));
        let r = &json_lines(&out)[0];
        assert_eq!(r["retryable"], true, "{r}");
    }
}

/// Regression (the zone's first file was looked for down the smallest directory only: an
/// empty first day directory made a zone with files look empty, exit 1 for ever): the next
/// directory is tried.
#[test]
fn an_empty_first_directory_does_not_make_the_zone_look_empty() {
    let p = landing_project(3, 2);
    std::fs::create_dir_all(p.path().join("events/dt=2026-10-31")).unwrap();
    p.run_ok("events", &day(1).to_string());
    assert_matches_polars(&p, &p.table_dir("events"), 1, 1);
}

/// Reviewer's finding: files in a subdirectory without `=` below the last level
/// (`dt=…/batch1/part.parquet`) were skipped by both routes; the window fails naming it.
#[test]
fn a_plain_subdirectory_below_the_last_level_fails_the_window() {
    let p = landing_project(2, 1);
    let dir = p.path().join(format!("events/dt={}", day(1)));
    std::fs::create_dir_all(dir.join("batch1")).unwrap();
    std::fs::rename(
        dir.join("part-00000.parquet"),
        dir.join("batch1/part-00000.parquet"),
    )
    .unwrap();
    let out = p.run(&["run", "events", "--window", &day(1).to_string()]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    assert!(text(&out).contains("batch1"), "{}", text(&out));
    p.run_ok("events", &day(0).to_string());
}

/// Found by trying: one window of an audited range reaching a directory off the zone's layout
/// aborted the whole `audit` (exit 2, no window reported). That window is reported as
/// `failed`, saying why; the others are audited; the exit code is 2 (its input is invalid).
#[test]
fn audit_reports_a_window_off_the_zones_layout_and_audits_the_others() {
    let p = landing_project(3, 2);
    let (first, last) = (day(0).to_string(), day(2).to_string());
    let out = p.run(&["backfill", "events", "--from", &first, "--to", &last]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    nest_day(&p.path().join("events"), day(1));
    let out = p.run(&[
        "--output", "json", "audit", "events", "--from", &first, "--to", &last,
    ]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    let audits = json_lines(&out);
    let states: Vec<&str> = audits
        .iter()
        .map(|a| a["status"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["ok", "failed", "ok"], "{}", text(&out));
    let why = audits[1]["problems"][0].as_str().unwrap();
    assert!(why.contains("hour=01") && why.contains("layout"), "{why}");
    assert_eq!(audits[1]["retryable"], false);
    // `repair` does not re-run it (a run would fail alike): its report says why, exit 2.
    let out = p.run(&[
        "--output", "json", "repair", "events", "--from", &first, "--to", &last,
    ]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    let report = json_lines(&out)
        .into_iter()
        .find(|l| l.get("published").is_some())
        .unwrap();
    assert!(
        report["error"].as_str().unwrap().contains("hour=01"),
        "{report}"
    );
}
