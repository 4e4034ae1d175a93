//! The checks read landing zones through DataFusion's listing table only (issue 51): the
//! defects that lived where the checks' own reader differed from the runner's, each with its
//! regression test, and what a report says of how each check was computed.

use std::path::Path;

use crate::common::*;
use crate::landing::{day, landing_project, write_file};

/// polars' count of the rows of the zone at `root` (Hive partitions, values percent-decoded
/// as pyarrow writes them) that `filter` (a polars expression over `pl`) keeps.
fn polars_rows(root: &Path, filter: &str) -> u64 {
    let script = format!(
        "import polars as pl; print(pl.scan_parquet('{}/**/*.parquet', hive_partitioning=True).filter({filter}).select(pl.len()).collect().item())",
        root.display()
    );
    python_prints(&script).parse().unwrap()
}

/// The `rows=` a `run` printed.
fn published_rows(out: &std::process::Output) -> u64 {
    let t = text(out);
    let at = t.find("rows=").unwrap_or_else(|| panic!("{t}"));
    t[at + 5..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap()
}

/// Regression (the checks' own reader percent-decoded no directory name: a task filtering
/// `city = 'New York'` on a `city=New%20York/` zone, as pyarrow writes it, failed every window
/// with exit 3, "source_rows: source 0 vs output 3", while `city = 'Paris'` worked): both
/// routes read the escaped value as polars does, accelerated and as the plain twin.
#[test]
fn a_percent_escaped_directory_is_read_alike_by_the_runner_and_the_checks() {
    let p = landing_project(0, 0);
    let root = p.path().join("events");
    for (d, n) in [(0, 0), (0, 1), (1, 2)] {
        let file = write_file(&root, day(d), n);
        let city = if n == 1 { "Paris" } else { "New%20York" };
        let dir = file.parent().unwrap().join(format!("city={city}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::rename(&file, dir.join(file.file_name().unwrap())).unwrap();
    }
    p.task(
        "events",
        &crate::landing::TASK.replace(
            "AND ts >= $window_start_ts",
            "AND city = 'New York' AND ts >= $window_start_ts",
        ),
    );
    let want = polars_rows(
        &root,
        &format!(
            "(pl.col('city') == 'New York') & (pl.col('dt').cast(pl.Utf8) == '{}')",
            day(0)
        ),
    );
    assert_eq!(want, 10);
    for accelerate in ["1", "0"] {
        let out = p
            .cmd()
            .env("IDEMLAKE_ACCELERATE", accelerate)
            .args(["run", "events", "--window", &day(0).to_string()])
            .output()
            .unwrap();
        assert_eq!(code(&out), 0, "accelerate={accelerate}: {}", text(&out));
        assert_eq!(published_rows(&out), want, "{}", text(&out));
    }
}

/// Regression (the checks' own reader enumerated every value between a BIGINT partition
/// filter's bounds, computing `hi - lo` on i64: a wide filter wrapped in a release build and
/// panicked in a debug one): a wide bound on a BIGINT level is pruned by DataFusion's listing.
#[test]
fn a_wide_bigint_partition_filter_is_checked_without_enumerating_its_values() {
    let p = landing_project(0, 0);
    let root = p.path().join("events");
    for n in 0..3 {
        let file = write_file(&root, day(0), n);
        let dir = root.join(format!("n={}", n + 1));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::rename(&file, dir.join(file.file_name().unwrap())).unwrap();
    }
    std::fs::remove_dir_all(root.join(format!("dt={}", day(0)))).unwrap();
    p.task(
        "events",
        &crate::landing::TASK.replace(
            "WHERE dt >= $window_start AND dt < $window_end",
            "WHERE n >= -9000000000000000000 AND n < 9000000000000000000",
        ),
    );
    let out = p.run_ok("events", &day(0).to_string());
    assert_eq!(published_rows(&out), 30, "{}", text(&out));
}

/// Every check a report lists was computed in that run, and says how: the route, the windows
/// its query computed together, and what each scan read (a day window of a landing zone
/// reads that day's directory, not the zone). A re-run over unchanged files says the same.
#[test]
fn every_check_says_how_it_was_computed_in_this_run() {
    let p = landing_project(3, 2);
    let w = day(1).to_string();
    for attempt in ["first run", "re-run"] {
        let out = p.run(&["--output", "json", "run", "events", "--window", &w]);
        assert_eq!(code(&out), 0, "{attempt}: {}", text(&out));
        let report = &json_lines(&out)[0];
        let checks = report["reconciliation"].as_array().unwrap();
        let rows = checks.iter().find(|c| c["check"] == "source_rows").unwrap();
        assert_eq!(rows["ok"], true, "{report}");
        let how = &rows["computed"];
        assert_eq!(how["route"], "independent", "{attempt}: {report}");
        assert_eq!(how["windows"], 1, "{attempt}: {report}");
        let scans = how["scans"].as_array().unwrap();
        assert_eq!(scans.len(), 1, "{attempt}: {report}");
        assert_eq!(scans[0]["files"], 2, "{attempt}: {report}");
        assert_eq!(scans[0]["rows"], 20, "{attempt}: {report}");
        let at = scans[0]["location"].as_str().unwrap();
        assert!(at.ends_with(&format!("/events/dt={w}/")), "{at}");
    }
    // A backfill's grouped check: one query for its windows, reading their directories.
    let out = crate::landing::backfill_json(&p, (0, 2), &[]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    for report in json_lines(&out) {
        let checks = report["reconciliation"].as_array().unwrap();
        let rows = checks.iter().find(|c| c["check"] == "source_rows").unwrap();
        assert_eq!(rows["computed"]["route"], "independent", "{report}");
        let (files, windows) = crate::landing::check_reads(&report);
        assert_eq!(files, 2 * windows, "{report}");
    }
}

/// Regression (`schema_from = "last"` opened the zone's newest file when the zone opened, so
/// today's half-written file failed a backfill of old days with exit 1, "Corrupt footer"): the
/// schema comes from the newest *complete* file (passing over a newest directory whose only
/// file is half-written too); the days that do not read a half-written file publish, and a
/// day that does still fails, retryable.
#[test]
fn schema_from_last_passes_over_a_half_written_newest_file() {
    let p = landing_project(3, 2);
    let root = p.path().join("events");
    let whole = std::fs::read(root.join(format!("dt={}/part-00001.parquet", day(2)))).unwrap();
    let half = root.join(format!("dt={}/part-00009.parquet", day(2)));
    std::fs::write(&half, &whole[..whole.len() / 2]).unwrap();
    // A newer directory whose only file is still being written.
    let newest = root.join(format!("dt={}", day(3)));
    std::fs::create_dir_all(&newest).unwrap();
    std::fs::write(newest.join("part-00000.parquet"), &whole[..whole.len() / 3]).unwrap();
    p.task(
        "events",
        &crate::landing::TASK.replace(
            "format = \"parquet\"",
            "format = \"parquet\"\nschema_from = \"last\"",
        ),
    );
    let out = crate::landing::backfill_json(&p, (0, 1), &[]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert_eq!(json_lines(&out).len(), 2, "{}", text(&out));
    let out = p.run(&[
        "--output",
        "json",
        "run",
        "events",
        "--window",
        &day(2).to_string(),
    ]);
    assert_eq!(code(&out), 1, "{}", text(&out));
    assert_eq!(json_lines(&out)[0]["retryable"], true, "{}", text(&out));
}
