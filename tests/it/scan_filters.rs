//! Shared scans honour every filter a task puts on a source's own columns, in any conjunct
//! order, and fail one window at a time (issue 51). Tables are compared with polars over the
//! source (scripts/landing_oracle.py).

use crate::common::*;
use crate::landing::{TASK, day, landing_project};

/// The landing task with its conjuncts written `ts` first and `dt` second.
fn ts_first() -> String {
    TASK.replace(
        "WHERE dt >= $window_start AND dt < $window_end\n  AND ts >= $window_start_ts AND ts < $window_end_ts",
        "WHERE ts >= $window_start_ts AND ts < $window_end_ts\n  AND dt >= $window_start AND dt < $window_end",
    )
}

/// A backfill of `from..=to` (day numbers), JSON reports, shared-scan debug logging.
fn backfill(p: &TestProject, from: i64, to: i64) -> std::process::Output {
    p.cmd()
        .env("IDEMLAKE_LOG", "idemlake::accel=debug")
        .args(["--output", "json", "backfill", "events", "--from"])
        .arg(day(from).to_string())
        .args(["--to", &day(to).to_string()])
        .output()
        .unwrap()
}

/// Regression (shared scans kept one bound column per source and dropped every other filter
/// on it: the landing guide's task written `ts` first read every file of the zone for a day
/// window): the chunk's scan keeps the `dt` bounds too, whatever the conjuncts' order, and
/// the table equals polars over the source.
#[test]
fn a_ts_first_task_keeps_its_directory_filter_in_the_shared_scan() {
    let p = landing_project(6, 2);
    assert!(
        ts_first().contains("WHERE ts >="),
        "the replacement applied"
    );
    p.task("events", &ts_first());
    let out = backfill(&p, 1, 4);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let log = String::from_utf8_lossy(&out.stderr);
    let filters: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("shared scan filter"))
        .collect();
    assert!(!filters.is_empty(), "{log}");
    for f in &filters {
        assert!(f.contains("events.dt >="), "{f}");
        assert!(f.contains("events.dt <="), "{f}");
    }
    crate::landing::assert_matches_polars(&p, &p.table_dir("events"), 1, 4);
}

/// Regression (one unreadable file anywhere in a backfill's shared chunk failed every window
/// of the backfill: a half-written file in one day made the days that never read it fail
/// too): the day holding it fails, retryable, and every other day publishes.
#[test]
fn one_unreadable_file_fails_only_the_windows_that_read_it() {
    let p = landing_project(5, 2);
    let root = p.path().join("events");
    let whole = std::fs::read(root.join(format!("dt={}/part-00001.parquet", day(2)))).unwrap();
    let half = root.join(format!("dt={}/part-00009.parquet", day(2)));
    for task in [TASK.to_string(), ts_first()] {
        std::fs::write(&half, &whole[..whole.len() / 2]).unwrap();
        p.task("events", &task);
        let _ = std::fs::remove_dir_all(p.table_dir("events"));
        let out = backfill(&p, 0, 4);
        assert_eq!(code(&out), 1, "{}", text(&out));
        let reports = json_lines(&out);
        let failed: Vec<_> = reports.iter().filter(|r| r["published"] != true).collect();
        assert_eq!(failed.len(), 1, "{}", text(&out));
        assert_eq!(
            failed[0]["window"]["start"].as_str().unwrap()[..10],
            day(2).to_string()
        );
        assert_eq!(failed[0]["retryable"], true, "{}", failed[0]);
        let published = reports.iter().filter(|r| r["published"] == true).count();
        assert_eq!(published, 4, "{}", text(&out));
        // polars reads every file of the zone: the half-written one goes first.
        std::fs::remove_file(&half).unwrap();
        crate::landing::assert_matches_polars(&p, &p.table_dir("events"), 0, 1);
        crate::landing::assert_matches_polars(&p, &p.table_dir("events"), 3, 4);
    }
}

/// Move the files of `dt=D/` directories of the zone at `root` into the layout `layout`:
/// `dt` (as written), `ymd` (`year=/month=/day=`) or `hour` (`dt=/hour=`).
pub(crate) fn relayout(root: &std::path::Path, layout: &str) {
    if layout == "dt" {
        return;
    }
    for entry in std::fs::read_dir(root).unwrap() {
        let dir = entry.unwrap().path();
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let Some(d) = name.strip_prefix("dt=") else {
            continue;
        };
        let date: jiff::civil::Date = d.parse().unwrap();
        for (i, f) in std::fs::read_dir(&dir).unwrap().enumerate() {
            let f = f.unwrap().path();
            let to = match layout {
                "ymd" => root.join(format!(
                    "year={}/month={}/day={}",
                    date.year(),
                    date.month(),
                    date.day()
                )),
                _ => root.join(format!("dt={d}/hour={i}")),
            };
            std::fs::create_dir_all(&to).unwrap();
            std::fs::rename(&f, to.join(f.file_name().unwrap())).unwrap();
        }
        if layout == "ymd" {
            std::fs::remove_dir_all(&dir).unwrap();
        }
        // Files no reader takes for data, beside the data.
        let junk = if layout == "ymd" {
            root.join(format!(
                "year={}/month={}/day={}",
                date.year(),
                date.month(),
                date.day()
            ))
        } else {
            dir.clone()
        };
        std::fs::write(junk.join("_SUCCESS"), b"").unwrap();
        std::fs::write(junk.join("part-0.parquet.crc"), b"crc").unwrap();
    }
}

/// Every layout (one `dt` level, `year/month/day`, `dt/hour`) × both conjunct orders (the
/// directory bounds first or the timestamp's), with junk files in every directory: a backfill
/// through the shared scans and one through the plain twin publish what polars reads from the
/// source, and the shared scan keeps the directory bounds whatever the order.
#[test]
fn shared_scans_prune_every_layout_in_either_conjunct_order_as_the_plain_twin_reads() {
    for layout in ["dt", "ymd", "hour"] {
        let p = landing_project(6, 2);
        relayout(&p.path().join("events"), layout);
        let (dir_filter, dir_col) = match layout {
            "ymd" => (
                "make_date(year, month, day) >= $window_start AND make_date(year, month, day) < $window_end",
                "make_date(events.year, events.month, events.day)",
            ),
            _ => ("dt >= $window_start AND dt < $window_end", "events.dt"),
        };
        let ts_filter = "ts >= $window_start_ts AND ts < $window_end_ts";
        for dir_first in [true, false] {
            let filters = if dir_first {
                format!("{dir_filter}\n  AND {ts_filter}")
            } else {
                format!("{ts_filter}\n  AND {dir_filter}")
            };
            let task = TASK.replace(
                "WHERE dt >= $window_start AND dt < $window_end\n  AND ts >= $window_start_ts AND ts < $window_end_ts",
                &format!("WHERE {filters}"),
            );
            assert!(task.contains(&filters), "{task}");
            p.task("events", &task);
            let case = format!("{layout}, directory bounds first: {dir_first}");
            for accelerate in ["1", "0"] {
                let _ = std::fs::remove_dir_all(p.table_dir("events"));
                let out = p
                    .cmd()
                    .env("IDEMLAKE_ACCELERATE", accelerate)
                    .env("IDEMLAKE_LOG", "idemlake::accel=debug")
                    .args(["backfill", "events", "--from"])
                    .arg(day(1).to_string())
                    .args(["--to", &day(4).to_string()])
                    .output()
                    .unwrap();
                assert_eq!(code(&out), 0, "{case}: {}", text(&out));
                if accelerate == "1" {
                    let log = String::from_utf8_lossy(&out.stderr);
                    let shared: Vec<&str> = log
                        .lines()
                        .filter(|l| l.contains("shared scan filter"))
                        .collect();
                    assert!(!shared.is_empty(), "{case}: {log}");
                    for l in shared {
                        assert!(l.contains(&format!("{dir_col} >=")), "{case}: {l}");
                    }
                }
                crate::landing::assert_matches_polars(&p, &p.table_dir("events"), 1, 4);
            }
        }
    }
}

/// A landing-zone task aggregated by day, checked by content (`default = "content"`).
fn aggregate_task() -> String {
    TASK.replace(
        "SELECT CAST(ts AS DATE) AS day, ts, id, v\nFROM events",
        "SELECT CAST(ts AS DATE) AS day, count(*) AS n, sum(v) AS v\nFROM events",
    )
    .replace(
        "AND ts >= $window_start_ts AND ts < $window_end_ts\n",
        "AND ts >= $window_start_ts AND ts < $window_end_ts\nGROUP BY CAST(ts AS DATE)\n",
    )
    .replace(
        "[write]\nmode = \"overwrite\"",
        "[write]\nmode = \"overwrite\"\n\n[reconcile]\ndefault = \"content\"",
    )
}

/// Mutation proof on landing-zone tasks (issue 51): each acceleration of the runner's route
/// corrupted on purpose — a shared slice missing a row or handing one to its neighbour, a
/// derived plan keeping its template's literals, the zone reader missing a file its listing
/// found, a staged batch losing a row (pass-through only: a day's aggregate is one row) — is
/// caught before the commit on a pass-through and on an aggregated task (checked by content):
/// exit 3, and what was published is right.
#[test]
#[cfg_attr(
    not(feature = "faults"),
    ignore = "needs the fault hooks: --features faults"
)]
fn every_acceleration_corrupted_on_a_landing_zone_task_is_caught_before_the_commit() {
    let p = landing_project(5, 2);
    let aggregate = aggregate_task();
    assert!(aggregate.contains("GROUP BY") && aggregate.contains("content"));
    for (shape, task) in [("pass-through", TASK.to_string()), ("aggregate", aggregate)] {
        p.task("events", &task);
        for fault in [
            "slice-drop-row",
            "slice-move-row",
            "derived-keep-literal",
            "zone-drop-file",
            "output-drop-row",
        ] {
            if fault == "output-drop-row" && shape == "aggregate" {
                // It drops a row of a staged batch of two or more: a day's aggregate is one.
                continue;
            }
            let _ = std::fs::remove_dir_all(p.table_dir("events"));
            let out = p
                .cmd()
                .env("IDEMLAKE_TEST_FAULT", fault)
                .args(["--output", "json", "backfill", "events", "--parallel", "1"])
                .args(["--from", &day(0).to_string(), "--to", &day(4).to_string()])
                .output()
                .unwrap();
            let case = format!("{shape}, {fault}");
            assert_eq!(code(&out), 3, "{case}: {}", text(&out));
            let reports = json_lines(&out);
            let refused = reports
                .iter()
                .filter(|r| r["status"] == "mismatch" && r["published"] == false)
                .count();
            assert!(refused >= 1, "{case}: {}", text(&out));
            // What was published equals the same task run without the mutation.
            let published: Vec<String> = reports
                .iter()
                .filter(|r| r["published"] == true)
                .map(|r| r["window"]["start"].as_str().unwrap()[..10].to_string())
                .collect();
            let lake = p.path().join("lake-right");
            let _ = std::fs::remove_dir_all(&lake);
            let right = p
                .cmd()
                .arg("--lake")
                .arg(&lake)
                .args(["backfill", "events", "--from", &day(0).to_string()])
                .args(["--to", &day(4).to_string()])
                .output()
                .unwrap();
            assert_eq!(code(&right), 0, "{case}: {}", text(&right));
            for d in &published {
                let rows = |table: &std::path::Path| {
                    python_prints(&format!(
                        "import polars as pl; print(pl.read_delta('{}').filter(pl.col('day').cast(pl.Utf8) == '{d}').sort(pl.all()).to_dicts())",
                        table.display()
                    ))
                };
                assert_eq!(
                    rows(&p.table_dir("events")),
                    rows(&lake.join("events")),
                    "{case}: {d}"
                );
            }
        }
    }
}
