//! Every rejection path exits with its documented code and leaves the table version unchanged.

use crate::common::*;

const DAY: &str = "1995-06-01";

/// A lineitem task with `sql` and extra TOML appended.
fn task(sql: &str, extra: &str) -> String {
    lineitem_task(sql, extra)
}

const GOOD_SQL: &str = "SELECT l_orderkey, l_linenumber, l_quantity, l_shipdate AS ship_date FROM lineitem\nWHERE l_shipdate >= $window_start AND l_shipdate < $window_end";

/// A project where task `t` has published DAY once; returns it and the table version.
fn published() -> (TestProject, u64) {
    let p = TestProject::new();
    p.task("t", &task(GOOD_SQL, ""));
    p.run_ok("t", DAY);
    let v = log_version(&p.table_dir("t")).unwrap();
    (p, v)
}

fn assert_rejected(p: &TestProject, v: u64, args: &[&str], exit: i32, needles: &[&str]) {
    let out = p.run(args);
    assert_eq!(code(&out), exit, "{args:?}:\n{}", text(&out));
    let all = text(&out);
    for n in needles {
        assert!(all.contains(n), "expected `{n}` in:\n{all}");
    }
    assert_eq!(
        log_version(&p.table_dir("t")),
        Some(v),
        "{args:?} must not move the table version"
    );
}

#[test]
fn bad_task_file_exits_2_naming_file_and_field() {
    let (p, v) = published();
    p.task(
        "t",
        &task(GOOD_SQL, "[write]\nmode = \"overwrite\"\nkeys = [\"x\"]\n"),
    );
    assert_rejected(
        &p,
        v,
        &["run", "t", "--window", DAY],
        2,
        &["t.toml", "keys"],
    );
    assert_rejected(&p, v, &["validate", "t"], 2, &["keys"]);
    p.task("t", &task(GOOD_SQL, "[write]\nmode = \"merge\"\n"));
    assert_rejected(&p, v, &["run", "t", "--window", DAY], 2, &["[write].key"]);
}

#[test]
fn bad_windows_exit_2() {
    let (p, v) = published();
    for w in [
        "1995-6-1",
        "1995-06",
        "1995-06-01T00:00:00Z/1995-06-03T00:00:00Z",
        "1995-06-01T05:00:00Z/1995-06-02T05:00:00Z",
        "tomorrow",
    ] {
        assert_rejected(&p, v, &["run", "t", "--window", w], 2, &[w]);
    }
    // No default window: --window is required.
    assert_rejected(&p, v, &["run", "t"], 2, &["--window"]);
}

#[test]
fn non_deterministic_sql_exits_2_naming_function_and_line() {
    let (p, v) = published();
    let sql = "SELECT l_orderkey, l_linenumber,\n  random() AS r, l_shipdate AS ship_date\nFROM lineitem WHERE l_shipdate >= $window_start AND l_shipdate < $window_end";
    p.task("t", &task(sql, ""));
    // The SQL starts on line 2 of the file; random() is on its second line.
    assert_rejected(
        &p,
        v,
        &["run", "t", "--window", DAY],
        2,
        &["random()", "line 3"],
    );
    assert_rejected(&p, v, &["validate", "t"], 2, &["random()"]);
    let sql = "SELECT l_orderkey, l_shipdate AS ship_date FROM lineitem WHERE l_shipdate >= $window_start AND l_shipdate < current_date";
    p.task("t", &task(sql, ""));
    assert_rejected(&p, v, &["run", "t", "--window", DAY], 2, &["current_date"]);
    // SQL that ignores the window.
    p.task(
        "t",
        &task(
            "SELECT l_orderkey, l_shipdate AS ship_date FROM lineitem",
            "",
        ),
    );
    assert_rejected(
        &p,
        v,
        &["validate", "t"],
        2,
        &["never references the window"],
    );
}

#[test]
fn rows_outside_the_window_fail_the_run_and_publish_nothing() {
    let (p, v) = published();
    let sql = "SELECT l_orderkey, l_linenumber, l_quantity, l_shipdate + INTERVAL '1 day' AS ship_date FROM lineitem\nWHERE l_shipdate >= $window_start AND l_shipdate < $window_end";
    p.task("t", &task(sql, ""));
    assert_rejected(
        &p,
        v,
        &["run", "t", "--window", DAY],
        1,
        &["outside the window", "1995-06-02"],
    );
}

#[test]
fn reconciliation_mismatch_exits_3_and_warn_publishes() {
    let (p, v) = published();
    let recon = "[reconcile]\nsource = \"SELECT count(*) AS rows FROM lineitem WHERE l_shipdate >= $window_start AND l_shipdate < $window_end AND l_quantity > 10\"\noutput = \"SELECT count(*) AS rows FROM output\"\n";
    p.task("t", &task(GOOD_SQL, recon));
    assert_rejected(
        &p,
        v,
        &["run", "t", "--window", DAY],
        3,
        &["reconciliation failed", "rows"],
    );
    let out = p.run(&["--output", "json", "run", "t", "--window", DAY]);
    assert_eq!(code(&out), 3);
    let j = &json_lines(&out)[0];
    assert_eq!(j["status"], "mismatch");
    assert!(
        j["reconciliation"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["check"] == "rows" && c["ok"] == false)
    );
    assert_eq!(log_version(&p.table_dir("t")), Some(v));

    // on_mismatch = "warn": published, recorded, exit 0.
    p.task(
        "t",
        &task(GOOD_SQL, &format!("{recon}on_mismatch = \"warn\"\n")),
    );
    let out = p.run(&["--output", "json", "run", "t", "--window", DAY]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert_eq!(json_lines(&out)[0]["status"], "mismatch");
    let v2 = log_version(&p.table_dir("t")).unwrap();
    assert_eq!(v2, v + 1);
    let info = commit_actions(&p.table_dir("t"), v2)
        .into_iter()
        .find_map(|a| a.get("commitInfo").cloned())
        .unwrap();
    assert!(
        info["idemlake"]["reconciliation"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["ok"] == false)
    );
}

#[test]
fn schema_change_and_unknown_parameter_exit_2() {
    let (p, v) = published();
    let sql = "SELECT l_orderkey, l_shipdate AS ship_date FROM lineitem WHERE l_shipdate >= $window_start AND l_shipdate < $window_end";
    p.task("t", &task(sql, ""));
    assert_rejected(
        &p,
        v,
        &["run", "t", "--window", DAY],
        2,
        &["differ from the target table"],
    );
    let sql = "SELECT l_orderkey, l_linenumber, l_quantity, l_shipdate AS ship_date FROM lineitem WHERE l_shipdate >= $window_begin";
    p.task("t", &task(sql, ""));
    assert_rejected(&p, v, &["run", "t", "--window", DAY], 2, &["$window_begin"]);
    p.task("t", &task("DROP TABLE lineitem", ""));
    assert_rejected(&p, v, &["run", "t", "--window", DAY], 2, &["invalid SQL"]);
}

#[test]
fn merge_with_a_repeated_key_publishes_nothing() {
    let p = TestProject::new();
    // l_orderkey alone repeats within a day (several lines per order).
    let sql = "SELECT l_orderkey, l_linenumber, l_shipdate AS ship_date FROM lineitem WHERE l_shipdate >= $window_start AND l_shipdate < $window_end";
    p.task(
        "t",
        &task(
            sql,
            "[write]\nmode = \"merge\"\nkey = [\"l_orderkey\", \"l_linenumber\"]\n",
        ),
    );
    p.run_ok("t", "1995-06-02");
    let v = log_version(&p.table_dir("t")).unwrap();
    let sql = "SELECT l_orderkey, l_linenumber, l_shipdate AS ship_date FROM lineitem WHERE l_shipdate >= $window_start AND l_shipdate < $window_end UNION ALL SELECT l_orderkey, l_linenumber, l_shipdate AS ship_date FROM lineitem WHERE l_shipdate >= $window_start AND l_shipdate < $window_end";
    p.task(
        "t",
        &task(
            sql,
            "[write]\nmode = \"merge\"\nkey = [\"l_orderkey\", \"l_linenumber\"]\n",
        ),
    );
    assert_rejected(&p, v, &["run", "t", "--window", DAY], 1, &["not unique"]);
}

/// A CSV source we can change between runs, to exercise on_empty.
fn csv_project(on_empty: &str) -> TestProject {
    let p = TestProject::new();
    std::fs::write(
        p.path().join("events.csv"),
        "id,day\n1,2026-01-01\n2,2026-01-01\n3,2026-01-02\n",
    )
    .unwrap();
    p.task(
        "t",
        &format!(
            "sql = \"SELECT id, CAST(day AS DATE) AS day FROM events WHERE CAST(day AS DATE) >= $window_start AND CAST(day AS DATE) < $window_end\"\n\
             [target]\npartition_by = \"day\"\n[window]\ngrain = \"day\"\n[sources.events]\nuri = \"events.csv\"\n[write]\non_empty = \"{on_empty}\"\n"
        ),
    );
    p.run_ok("t", "2026-01-01");
    p.run_ok("t", "2026-01-02");
    // Upstream now has nothing for 2026-01-01.
    std::fs::write(p.path().join("events.csv"), "id,day\n3,2026-01-02\n").unwrap();
    p
}

#[tokio::test]
async fn empty_results_follow_on_empty() {
    // clear: the window is published empty, one commit.
    let p = csv_project("clear");
    let v = log_version(&p.table_dir("t")).unwrap();
    p.run_ok("t", "2026-01-01");
    assert_eq!(log_version(&p.table_dir("t")), Some(v + 1));
    assert_eq!(
        table_rows(&p.table_dir("t"), "").await,
        vec!["day=2026-01-02|id=3".to_string()]
    );

    // skip: nothing committed, reported as skipped, exit 0.
    let p = csv_project("skip");
    let v = log_version(&p.table_dir("t")).unwrap();
    let out = p.run(&["--output", "json", "run", "t", "--window", "2026-01-01"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert_eq!(json_lines(&out)[0]["status"], "skipped");
    assert_eq!(log_version(&p.table_dir("t")), Some(v));
    assert_eq!(table_rows(&p.table_dir("t"), "").await.len(), 3);

    // fail: exit 1, nothing committed.
    let p = csv_project("fail");
    let v = log_version(&p.table_dir("t")).unwrap();
    let out = p.run(&["run", "t", "--window", "2026-01-01"]);
    assert_eq!(code(&out), 1, "{}", text(&out));
    assert!(text(&out).contains("on_empty"));
    assert_eq!(log_version(&p.table_dir("t")), Some(v));
}

/// Finding: a FAILED run printed "checks ok: rows_staged, source_rows" under its FAILED line
/// (here `on_empty = "fail"`). The checks that passed are named as passed before the failure.
#[test]
fn a_failed_run_does_not_print_checks_ok() {
    let p = csv_project("fail");
    let out = p.run(&["run", "t", "--window", "2026-01-01"]);
    assert_eq!(code(&out), 1, "{}", text(&out));
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.starts_with("FAILED"), "{shown}");
    assert!(!shown.contains("checks ok"), "{shown}");
    assert!(
        shown.contains("checks passed before the failure: rows_staged"),
        "{shown}"
    );
}

/// Issue 15 review: the report of a run failing at the schema check (after planning) lost its
/// `sql_hash` when planning and the table checks became one stage; the run log and status
/// need it to say which SQL failed.
#[test]
fn a_run_failing_at_the_schema_check_reports_its_sql_hash() {
    let (p, _) = published();
    let sql = "SELECT l_orderkey, l_shipdate AS ship_date FROM lineitem WHERE l_shipdate >= $window_start AND l_shipdate < $window_end";
    p.task("t", &task(sql, ""));
    let out = p.run(&["--output", "json", "run", "t", "--window", DAY]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    let report = &json_lines(&out)[0];
    assert!(
        report["sql_hash"].as_str().is_some_and(|h| !h.is_empty()),
        "{report}"
    );
}

/// `t` reading `lineitem` from `uri` (format `format`), the rest as GOOD_SQL's task.
fn task_reading(uri: &str, format: &str) -> String {
    format!(
        r#"sql = """
{GOOD_SQL}
"""
[target]
partition_by = "ship_date"
[window]
grain = "day"
[sources.lineitem]
uri = "{uri}"
format = "{format}"
"#
    )
}

/// Defect (issue 37): a misspelt source path (a location that does not exist) failed with
/// exit 1 — retryable — while `validate` called the task invalid. It is the task's mistake:
/// exit 2 from `validate` and `run`, naming the path, `retryable: false`, nothing published.
#[test]
fn a_misspelled_source_path_is_a_config_error_naming_the_path() {
    let (p, v) = published();
    // (A directory location, with or without a glob, is a landing zone: one with no files in
    // it was already refused with exit 2, and still is.)
    for (uri, format, shown, why) in [
        (
            "data/lineitm.parquet",
            "parquet",
            "data/lineitm.parquet",
            "does not exist",
        ),
        (
            "data/no-such-dir/",
            "parquet",
            "data/no-such-dir",
            "no .parquet files",
        ),
        (
            "data/no-such-dir/*/part-*.parquet",
            "parquet",
            "data/no-such-dir",
            "files",
        ),
        (
            "data/no-such-table",
            "delta",
            "data/no-such-table",
            "does not exist",
        ),
    ] {
        p.task("t", &task_reading(uri, format));
        assert_rejected(&p, v, &["validate", "t"], 2, &[shown, why]);
        assert_rejected(&p, v, &["run", "t", "--window", DAY], 2, &[shown, why]);
        let out = p.run(&["--output", "json", "run", "t", "--window", DAY]);
        assert_eq!(code(&out), 2, "{}", text(&out));
        let r = &json_lines(&out)[0];
        assert_eq!(r["retryable"], false, "{r}");
        assert!(r["error"].as_str().unwrap().contains(shown), "{r}");
    }
}

/// Defect (issue 37): the determinism lint missed order-sensitive aggregates —
/// `string_agg(x, ',')`, `array_agg(x)`, `first_value(x)` without `ORDER BY` passed
/// `validate` — and window functions needed only *some* `ORDER BY`, not a total one. Both are
/// refused now (exit 2, naming the function and its line), `[lint] allow` accepts them, and a
/// total order passes.
#[test]
fn order_sensitive_aggregates_and_partial_window_orders_exit_2_naming_function_and_line() {
    let (p, v) = published();
    let window = "FROM lineitem WHERE l_shipdate >= $window_start AND l_shipdate < $window_end";
    let refused = [
        (
            format!(
                "SELECT l_shipdate AS ship_date,\n  string_agg(l_shipmode, ',') AS modes\n{window}\nGROUP BY l_shipdate"
            ),
            "string_agg",
            "aggregate_order",
        ),
        (
            format!(
                "SELECT l_shipdate AS ship_date,\n  array_agg(l_orderkey) AS keys\n{window}\nGROUP BY l_shipdate"
            ),
            "array_agg",
            "aggregate_order",
        ),
        (
            format!(
                "SELECT l_shipdate AS ship_date,\n  first_value(l_quantity) AS q\n{window}\nGROUP BY l_shipdate"
            ),
            "first_value",
            "aggregate_order",
        ),
        // An ORDER BY with ties: rows of one order key in an arbitrary order.
        (
            format!(
                "SELECT l_shipdate AS ship_date,\n  array_agg(l_quantity ORDER BY l_orderkey) AS q\n{window}\nGROUP BY l_shipdate"
            ),
            "array_agg",
            "aggregate_order",
        ),
        // Some ORDER BY, not a total one: lines of one order are numbered arbitrarily.
        (
            format!(
                "SELECT l_orderkey, l_linenumber, l_shipdate AS ship_date,\n  row_number() OVER (ORDER BY l_orderkey) AS n\n{window}"
            ),
            "row_number",
            "window_order",
        ),
        (
            format!(
                "SELECT l_orderkey, l_quantity, l_shipdate AS ship_date,\n  lag(l_quantity) OVER (PARTITION BY l_orderkey ORDER BY l_shipdate) AS prev\n{window}"
            ),
            "lag",
            "window_order",
        ),
    ];
    for (sql, function, rule) in &refused {
        p.task("u", &task(sql, ""));
        // The SQL starts on line 2 of the file; the function is on its second line.
        assert_rejected(&p, v, &["validate", "u"], 2, &[function, "line 3", rule]);
        assert_rejected(&p, v, &["run", "u", "--window", DAY], 2, &[function]);
        p.task("u", &task(sql, &format!("[lint]\nallow = [\"{rule}\"]\n")));
        let out = p.run(&["validate", "u"]);
        assert_eq!(code(&out), 0, "{sql}: {}", text(&out));
    }
    let accepted = [
        format!(
            "SELECT l_shipdate AS ship_date,\n  string_agg(l_shipmode, ',' ORDER BY l_shipmode) AS modes\n{window}\nGROUP BY l_shipdate"
        ),
        format!(
            "SELECT l_shipdate AS ship_date,\n  first_value(l_quantity ORDER BY l_quantity) AS q\n{window}\nGROUP BY l_shipdate"
        ),
        format!(
            "SELECT l_orderkey, l_linenumber, l_shipdate AS ship_date,\n  row_number() OVER (ORDER BY l_orderkey, l_linenumber, l_shipdate) AS n\n{window}"
        ),
        format!(
            "SELECT l_orderkey, l_shipdate AS ship_date,\n  rank() OVER (PARTITION BY l_shipdate ORDER BY l_orderkey) AS r\n{window}"
        ),
        format!(
            "SELECT l_orderkey, l_shipdate AS ship_date,\n  sum(l_quantity) OVER (PARTITION BY l_orderkey) AS total\n{window}"
        ),
    ];
    for sql in &accepted {
        p.task("u", &task(sql, ""));
        let out = p.run(&["validate", "u"]);
        assert_eq!(code(&out), 0, "{sql}: {}", text(&out));
    }
}

/// A time zone name DataFusion does not know (`asia/kolkata`: names are case-sensitive) in
/// the task's SQL is refused by `validate` and by `run` before any data is read (exit 2),
/// naming the zone and its line, however the SQL spells it.
#[test]
fn an_unknown_time_zone_in_the_sql_exits_2_naming_the_zone() {
    let (p, v) = published();
    for (expr, zone) in [
        (
            "CAST(l_shipdate AS TIMESTAMP) AT TIME ZONE 'asia/kolkata'",
            "asia/kolkata",
        ),
        (
            "CAST(CAST(l_shipdate AS TIMESTAMP) AT TIME ZONE 'Mars/Olympus' AS VARCHAR)",
            "Mars/Olympus",
        ),
        (
            "CAST(arrow_cast(CAST(l_shipdate AS TIMESTAMP), 'Timestamp(Nanosecond, Some(\"Europe/Nowhere\"))') AS VARCHAR)",
            "Europe/Nowhere",
        ),
    ] {
        let sql = format!(
            "SELECT l_orderkey, l_linenumber, l_quantity, l_shipdate AS ship_date FROM lineitem\nWHERE {expr} IS NOT NULL\n  AND l_shipdate >= $window_start AND l_shipdate < $window_end"
        );
        p.task("t", &task(&sql, ""));
        let needles = [&format!("time zone `{zone}`") as &str, "t.toml", "line 3"];
        assert_rejected(&p, v, &["validate", "t"], 2, &needles);
        assert_rejected(&p, v, &["run", "t", "--window", DAY], 2, &needles);
    }
    // The right spelling plans, and the message says which it is.
    p.task(
        "t",
        &task(
            "SELECT l_orderkey, l_linenumber, l_quantity, l_shipdate AS ship_date FROM lineitem WHERE CAST(l_shipdate AS TIMESTAMP) AT TIME ZONE 'asia/kolkata' IS NOT NULL AND l_shipdate >= $window_start AND l_shipdate < $window_end",
            "",
        ),
    );
    assert_rejected(&p, v, &["validate", "t"], 2, &["Asia/Kolkata"]);
}

/// Two source aliases that differ only in case name one SQL table: the task file is refused
/// (exit 2) naming both, by `validate` and `run`.
#[test]
fn source_aliases_differing_only_in_case_exit_2_naming_both() {
    let (p, v) = published();
    p.task(
        "t",
        &task(
            GOOD_SQL,
            "[sources.LineItem]\nuri = \"data/orders.parquet\"\n",
        ),
    );
    let needles = ["t.toml", "`lineitem`", "`LineItem`"];
    assert_rejected(&p, v, &["validate", "t"], 2, &needles);
    assert_rejected(&p, v, &["run", "t", "--window", DAY], 2, &needles);
}

/// An empty landing zone at the start of the day is normal: a location that exists but holds
/// no data files yet (nothing, or only `_SUCCESS` and other hidden files) fails the run with
/// exit 1, `retryable: true` (it was exit 2, "no .parquet files under …", for a directory
/// holding anything); one that does not exist stays exit 2, and so does one holding files of
/// another format (the source's format is wrong).
#[test]
fn an_existing_location_with_no_data_files_yet_is_retryable() {
    let (p, v) = published();
    // In the project, not under data/ (shared by every test project).
    let zone = p.path().join("zone");
    std::fs::create_dir_all(&zone).unwrap();
    p.task("t", &task_reading("zone/", "parquet"));
    let run = ["--output", "json", "run", "t", "--window", DAY];
    for hidden in ["", "_SUCCESS", ".keep"] {
        if !hidden.is_empty() {
            std::fs::write(zone.join(hidden), "").unwrap();
        }
        let out = p.run(&run);
        assert_eq!(code(&out), 1, "{hidden}: {}", text(&out));
        let r = &json_lines(&out)[0];
        assert_eq!(r["retryable"], true, "{r}");
        assert!(r["error"].as_str().unwrap().contains("/zone/"), "{r}");
    }
    std::fs::write(zone.join("part-0.csv"), "a\n1\n").unwrap();
    assert_rejected(&p, v, &run, 2, &["part-0.csv", "format"]);
    assert_eq!(log_version(&p.table_dir("t")), Some(v));
}

/// Regression (a `format = "delta"` source naming a directory of Parquet files without a
/// `_delta_log/` failed with exit 1, `retryable: true`: an orchestrator retried for ever):
/// exit 2, not retryable, saying it is not a Delta table, in `validate` and `run`; an empty
/// directory stays a runtime failure (a table may still be created there).
#[test]
fn a_delta_source_holding_files_but_no_log_is_not_retried() {
    let p = TestProject::new();
    let dir = p.path().join("notdelta");
    std::fs::create_dir_all(&dir).unwrap();
    p.task(
        "x",
        r#"
sql = "SELECT l_orderkey, l_shipdate AS ship_date FROM src WHERE l_shipdate >= $window_start AND l_shipdate < $window_end"
[target]
partition_by = "ship_date"
[window]
grain = "day"
[sources.src]
uri = "notdelta"
format = "delta"
"#,
    );
    let out = p.run(&["--output", "json", "run", "x", "--window", DAY]);
    assert_eq!(code(&out), 1, "empty: {}", text(&out));
    std::fs::copy(
        p.path().join("data/lineitem.parquet"),
        dir.join("part-0.parquet"),
    )
    .unwrap();
    let out = p.run(&["validate", "x"]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    assert!(text(&out).contains("not a Delta table"), "{}", text(&out));
    let out = p.run(&["--output", "json", "run", "x", "--window", DAY]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    assert_eq!(json_lines(&out)[0]["retryable"], false);
    assert_eq!(log_version(&p.table_dir("x")), None);
}

/// Regression (a target table another tool gave a CHECK constraint was published into with
/// rows breaking it, as deltalake refuses to; a column-mapped one was written with logical
/// names, after which deltalake and polars could not open it): a target whose properties ask
/// writers for what idemlake does not do — CHECK constraints, column mapping, append-only —
/// is refused by `validate` and `run` with exit 2 naming the property, nothing written.
#[test]
fn a_target_with_constraints_column_mapping_or_append_only_is_refused() {
    for (what, alter, needle) in [
        (
            "constraint",
            "t.alter.add_constraint({'q_small': 'l_quantity < 1000'})",
            "CHECK constraints (q_small",
        ),
        (
            "append-only",
            "t.alter.set_table_properties({'delta.appendOnly': 'true'})",
            "append-only",
        ),
    ] {
        let (p, v) = published();
        python_prints(&format!(
            "from deltalake import DeltaTable\nt = DeltaTable('{}')\n{alter}\nprint('ok')",
            p.table_dir("t").display()
        ));
        let v = log_version(&p.table_dir("t")).unwrap().max(v);
        assert_rejected(&p, v, &["validate", "t"], 2, &[needle]);
        assert_rejected(&p, v, &["run", "t", "--window", DAY], 2, &[needle]);
        assert_rejected(
            &p,
            v,
            &["run", "t", "--window", "1995-06-02"],
            2,
            &[needle, "nothing was written"],
        );
        assert!(!what.is_empty());
    }
    // A column-mapped target created by deltalake, as in the report.
    let p = TestProject::new();
    python_prints(&format!(
        "import pyarrow as pa, datetime as dt\n\
         from deltalake import write_deltalake, DeltaTable\n\
         D = dt.date\n\
         write_deltalake('{src}', pa.table({{'id': pa.array([1, 2], pa.int64()), 'day': [D(2024, 1, 1)] * 2, 'v': [1.0, 2.0]}}))\n\
         f = pa.table({{'id': pa.array([7], pa.int64()), 'day': [D(2024, 1, 2)], 'v': [7.0]}})\n\
         DeltaTable.create('{t}', schema=f.schema, partition_by=['day'], configuration={{'delta.columnMapping.mode': 'name', 'delta.minReaderVersion': '2', 'delta.minWriterVersion': '5'}})\n\
         write_deltalake('{t}', f, mode='append')\n\
         print('ok')",
        src = p.path().join("src").display(),
        t = p.table_dir("t").display()
    ));
    p.task(
        "t",
        r#"
sql = "SELECT id, day, v FROM src WHERE day >= $window_start AND day < $window_end"
[target]
partition_by = "day"
[window]
grain = "day"
[sources.src]
uri = "src"
format = "delta"
"#,
    );
    let v = log_version(&p.table_dir("t")).unwrap();
    let needle = "delta.columnMapping.mode = name";
    assert_rejected(&p, v, &["validate", "t"], 2, &[needle]);
    assert_rejected(&p, v, &["run", "t", "--window", "2024-01-01"], 2, &[needle]);
    // A target with a timestamp_ntz column (idemlake stores timestamps as UTC `timestamp`):
    // refused by name, not as a schema change no cast could fix.
    python_prints(&format!(
        "import pyarrow as pa, datetime as dt, shutil\n\
         from deltalake import write_deltalake\n\
         shutil.rmtree('{t}')\n\
         write_deltalake('{t}', pa.table({{'id': pa.array([9], pa.int64()), 'day': [dt.date(2024, 1, 5)], 'v': pa.array([dt.datetime(2024, 1, 5, 3)], pa.timestamp('us'))}}), partition_by=['day'])\n\
         print('ok')",
        t = p.table_dir("t").display()
    ));
    let v = log_version(&p.table_dir("t")).unwrap();
    let needle = "stores column `v` as timestamp_ntz";
    assert_rejected(&p, v, &["validate", "t"], 2, &[needle]);
    assert_rejected(&p, v, &["run", "t", "--window", "2024-01-01"], 2, &[needle]);
}

/// Regression (found by trying: a query returning rows outside its window, and one casting
/// `l_shipmode` to INT, failed with exit 1 and `retryable: true` on every attempt, so an
/// orchestrator spent its retries on them): still exit 1, nothing published, but
/// `retryable: false`, as SPEC defines it (re-running the same command cannot succeed).
#[test]
fn failures_the_same_inputs_repeat_are_not_retryable() {
    for (what, sql) in [
        (
            "rows outside the window",
            "SELECT l_orderkey, l_linenumber, l_quantity, l_shipdate AS ship_date FROM lineitem\nWHERE l_shipdate >= $window_start AND l_shipdate < $window_end + INTERVAL '1' DAY",
        ),
        (
            "a value that does not cast",
            "SELECT l_orderkey, l_linenumber, CAST(l_shipmode AS INT) AS mode, l_shipdate AS ship_date FROM lineitem\nWHERE l_shipdate >= $window_start AND l_shipdate < $window_end",
        ),
    ] {
        let p = TestProject::new();
        p.task("t", &task(sql, ""));
        for _ in 0..2 {
            let out = p.run(&["--output", "json", "run", "t", "--window", DAY]);
            assert_eq!(code(&out), 1, "{what}: {}", text(&out));
            let r = &json_lines(&out)[0];
            assert_eq!(r["retryable"], false, "{what}: {r}");
            assert_eq!(r["published"], false, "{what}: {r}");
        }
        assert_eq!(log_version(&p.table_dir("t")), None, "{what}");
    }
}
