//! The command line contract: help with examples, JSON lines, explain, validate.

use crate::common::*;

#[test]
fn help_shows_examples_and_exit_codes() {
    let p = TestProject::new();
    let out = p.run(&["--help"]);
    assert_eq!(code(&out), 0);
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(s.contains("Examples:") && s.contains("Exit codes"), "{s}");
    let out = p.run(&["run", "--help"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("--window"));
    assert_eq!(code(&p.run(&["frobnicate"])), 2);
}

#[test]
fn json_output_has_the_contract_fields() {
    let p = TestProject::new();
    let out = p.run(&[
        "--output",
        "json",
        "run",
        "daily_revenue",
        "--window",
        "1995-06-01T00:00:00+00:00/1995-06-02T00:00:00+00:00",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 1);
    let j = &lines[0];
    for key in [
        "task",
        "window",
        "status",
        "rows_written",
        "table_version",
        "reconciliation",
        "duration_ms",
        "error",
    ] {
        assert!(j.get(key).is_some(), "missing {key} in {j}");
    }
    assert_eq!(j["window"]["start"], "1995-06-01T00:00:00+00:00");
    assert_eq!(j["window"]["end"], "1995-06-02T00:00:00+00:00");
    assert_eq!(j["status"], "ok");
    assert_eq!(j["table_version"], 1);
    for c in j["reconciliation"].as_array().unwrap() {
        for key in ["check", "source", "output", "ok"] {
            assert!(c.get(key).is_some(), "{c}");
        }
    }
    // Failures are JSON lines too.
    let out = p.run(&[
        "--output",
        "json",
        "run",
        "daily_revenue",
        "--window",
        "1995-06",
    ]);
    assert_eq!(code(&out), 2);
    assert_eq!(json_lines(&out)[0]["status"], "failed");
}

#[test]
fn explain_shows_bound_parameters_plan_and_predicate() {
    let p = TestProject::new();
    let out = p.run(&["explain", "lineitem_by_ship_day", "--window", "1995-06-01"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let s = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "replaceWhere:  \"ship_date\" >= DATE '1995-06-01' AND \"ship_date\" < DATE '1995-06-02'",
        "$window_start",
        "Date32(\"1995-06-01\")",
        "logical plan",
        "physical plan",
    ] {
        assert!(s.contains(needle), "missing {needle} in:\n{s}");
    }
    // explain writes nothing.
    assert!(log_version(&p.table_dir("lineitem_by_ship_day")).is_none());
}

#[test]
fn validate_accepts_the_sample_tasks() {
    let p = TestProject::new();
    let out = p.run(&["validate"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let s = String::from_utf8_lossy(&out.stdout);
    for t in ["daily_revenue", "lineitem_by_ship_day", "orders_by_day"] {
        assert!(s.contains(&format!("ok       {t}")), "{s}");
    }
}
