//! Late data (issue 52): not landed is not empty.

use crate::common::*;
use crate::landing::{TASK, backfill_json, day, landing_project, write_file};

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
