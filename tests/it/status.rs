//! `status`: exact run history per window from the snapshot (checkpoint + recent commits) and
//! the run log, on a table with 1,000+ commits whose old commit files are gone — so it cannot
//! have read them — plus failed attempts and merge-mode windows.

use std::path::Path;

use crate::common::*;

const TASK: &str = "lineitem_by_ship_day";

/// Append commitInfo-only commits (as other writers' maintenance commits would be) up to and
/// including `last`.
fn pad_history(table: &Path, from: u64, last: u64) {
    for v in from..=last {
        let line = serde_json::json!({"commitInfo": {
            "timestamp": 1_700_000_000_000u64 + v,
            "operation": "WRITE",
            "operationParameters": {"mode": "Append"},
            "clientVersion": "idemlake-test-padding",
        }});
        std::fs::write(
            table.join("_delta_log").join(format!("{v:020}.json")),
            format!("{line}\n"),
        )
        .unwrap();
    }
}

fn status_json(p: &TestProject, from: &str, to: &str) -> Vec<serde_json::Value> {
    let out = p.run(&[
        "--output", "json", "status", TASK, "--from", from, "--to", to,
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    json_lines(&out)
}

fn by_window<'a>(rows: &'a [serde_json::Value], w: &str) -> &'a serde_json::Value {
    rows.iter()
        .find(|r| r["window"]["label"] == w)
        .unwrap_or_else(|| panic!("no status line for {w}: {rows:?}"))
}

#[tokio::test]
#[cfg_attr(
    not(feature = "faults"),
    ignore = "needs the fault hooks: --features faults"
)]
async fn status_at_1000_commits_reads_only_the_checkpoint_and_later_commits() {
    let p = TestProject::new();
    let table = p.table_dir(TASK);
    let out = p.run(&[
        "backfill",
        TASK,
        "--from",
        "1995-06-01",
        "--to",
        "1995-06-05",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    // One commit per window at most (a backfill may publish staged windows together).
    let first = log_version(&table).unwrap();
    assert!((1..=5).contains(&first), "version {first}");
    let early = status_json(&p, "1995-06-01", "1995-06-05");

    // Commits by someone else up to 998, then idemlake commits version 999 (checkpoint) and 1000.
    pad_history(&table, first + 1, 998);
    p.run_ok(TASK, "1995-06-06");
    assert_eq!(log_version(&table), Some(999));
    assert!(
        table
            .join("_delta_log/00000000000000000999.checkpoint.parquet")
            .exists(),
        "delta-rs writes a checkpoint every 100 commits"
    );
    p.run_ok(TASK, "1995-06-07");
    assert_eq!(log_version(&table), Some(1000));

    // A failed attempt on a published window: publishes nothing, shows up as failed since.
    let out = p
        .cmd()
        .env("IDEMLAKE_TEST_FAULT", "before-commit")
        .args(["run", TASK, "--window", "1995-06-03"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 1, "{}", text(&out));
    assert_eq!(log_version(&table), Some(1000));

    // Remove every commit before the checkpoint: whatever status needs must come from the
    // checkpoint, the commit after it and the run log.
    for e in std::fs::read_dir(table.join("_delta_log")).unwrap() {
        let path = e.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let version = name.split('.').next().and_then(|v| v.parse::<u64>().ok());
        if version.is_some_and(|v| v < 999) {
            std::fs::remove_file(&path).unwrap();
        }
    }
    let left: Vec<String> = std::fs::read_dir(table.join("_delta_log"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| !n.starts_with('.'))
        .collect();
    assert!(
        left.len() <= 4,
        "the log holds only the checkpoint, _last_checkpoint and versions 999-1000: {left:?}"
    );

    let rows = status_json(&p, "1995-06-01", "1995-06-08");
    assert_eq!(rows.len(), 8);
    for day in (1..=5).map(|d| format!("1995-06-{d:02}")) {
        let s = by_window(&rows, &day);
        assert_eq!(s["state"], "published", "{s}");
        let e = by_window(&early, &day);
        assert_eq!(s["table_version"], e["table_version"], "{s}");
        assert!(
            (1..=first as i64).contains(&s["table_version"].as_i64().unwrap()),
            "{s}"
        );
        assert_eq!(
            s["run_id"], e["run_id"],
            "same run as before the history grew"
        );
        assert_eq!(s["rows"], e["rows"]);
        assert_eq!(
            s["rows"].as_u64().unwrap() as usize,
            expected_lineitem_day(&day).await.len()
        );
        assert!(s["sql_hash"].as_str().is_some_and(|h| h.len() >= 16), "{s}");
    }
    assert_eq!(by_window(&rows, "1995-06-06")["table_version"], 999);
    assert_eq!(by_window(&rows, "1995-06-07")["table_version"], 1000);
    let failed = by_window(&rows, "1995-06-03");
    assert_eq!(failed["failed_since"], 1, "{failed}");
    assert!(
        failed["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("injected")),
        "{failed}"
    );
    assert_eq!(by_window(&rows, "1995-06-02")["failed_since"], 0);
    let gap = by_window(&rows, "1995-06-08");
    assert_eq!(gap["state"], "missing");
    assert!(gap["table_version"].is_null() && gap["run_id"].is_null());

    // The text form names the failure too.
    let out = p.run(&["status", TASK, "--from", "1995-06-03", "--to", "1995-06-03"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("last error") && stdout.contains("injected"),
        "{stdout}"
    );

    // --missing runs only the gap, on the same truncated history.
    let out = p.run(&[
        "--output",
        "json",
        "backfill",
        TASK,
        "--from",
        "1995-06-01",
        "--to",
        "1995-06-08",
        "--missing",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let ran = json_lines(&out);
    assert_eq!(ran.len(), 1, "{ran:?}");
    assert_eq!(ran[0]["window"]["label"], "1995-06-08");
    assert_eq!(log_version(&table), Some(1001));
    assert_eq!(
        table_rows(&table, "ship_date = DATE '1995-06-08'").await,
        expected_lineitem_day("1995-06-08").await
    );
    // A successful re-run clears the failure.
    p.run_ok(TASK, "1995-06-03");
    let s = status_json(&p, "1995-06-03", "1995-06-03");
    assert_eq!(s[0]["failed_since"], 0);
    assert_eq!(s[0]["table_version"], 1002);
}

#[tokio::test]
async fn merge_windows_show_the_run_that_published_them() {
    let p = TestProject::new();
    let first = run_json(&p, "orders_by_day", "1995-06-01");
    let out = p.run(&[
        "--output",
        "json",
        "status",
        "orders_by_day",
        "--from",
        "1995-06-01",
        "--to",
        "1995-06-02",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let rows = json_lines(&out);
    assert_eq!(rows[0]["state"], "published", "{rows:?}");
    assert_eq!(rows[0]["table_version"], first["table_version"]);
    assert_eq!(rows[0]["run_id"], first["run_id"]);
    assert_eq!(rows[0]["rows"], first["rows_written"]);
    assert_eq!(rows[1]["state"], "missing");

    // The window's table version moves with a re-run.
    let again = run_json(&p, "orders_by_day", "1995-06-01");
    let out = p.run(&[
        "--output",
        "json",
        "status",
        "orders_by_day",
        "--from",
        "1995-06-01",
        "--to",
        "1995-06-01",
    ]);
    let rows = json_lines(&out);
    assert_eq!(rows[0]["table_version"], again["table_version"]);
    assert_eq!(rows[0]["run_id"], again["run_id"]);
    assert_ne!(again["run_id"], first["run_id"]);
}

/// Run one window with `--output json` and return its report.
fn run_json(p: &TestProject, task: &str, window: &str) -> serde_json::Value {
    let out = p.run(&["--output", "json", "run", task, "--window", window]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    json_lines(&out)
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no JSON report in output:\n{}", text(&out)))
}

#[test]
#[cfg_attr(
    not(feature = "faults"),
    ignore = "needs the fault hooks: --features faults"
)]
fn status_picture_is_plain_text_off_a_terminal_and_shows_stale_windows() {
    let p = TestProject::new();
    let out = p.run(&[
        "backfill",
        TASK,
        "--from",
        "1995-06-01",
        "--to",
        "1995-06-03",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let out = p
        .cmd()
        .env("IDEMLAKE_TEST_FAULT", "before-commit")
        .args(["run", TASK, "--window", "1995-06-05"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 1);
    p.run_ok(TASK, "1995-06-07");
    let picture = |p: &TestProject| {
        let out = p.run(&[
            "status",
            TASK,
            "--from",
            "1995-06-01",
            "--to",
            "1995-06-10",
            "--picture",
        ]);
        assert_eq!(code(&out), 0, "{}", text(&out));
        String::from_utf8(out.stdout).unwrap()
    };
    insta::assert_snapshot!("picture_before_sql_change", picture(&p));

    // Changing what the task computes makes its published windows stale.
    let file = p.path().join("tables").join(format!("{TASK}.toml"));
    let toml = std::fs::read_to_string(&file).unwrap();
    std::fs::write(
        &file,
        toml.replace("FROM lineitem\nWHERE", "FROM lineitem -- v2\nWHERE"),
    )
    .unwrap();
    insta::assert_snapshot!("picture_after_sql_change", picture(&p));
    let out = p.run(&[
        "--output",
        "json",
        "backfill",
        TASK,
        "--from",
        "1995-06-01",
        "--to",
        "1995-06-03",
        "--stale",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    // Reports stream as windows complete (not necessarily in window order).
    let mut ran: Vec<String> = json_lines(&out)
        .iter()
        .map(|r| r["window"]["label"].as_str().unwrap().to_string())
        .collect();
    ran.sort();
    assert_eq!(
        ran,
        ["1995-06-01", "1995-06-02", "1995-06-03"],
        "published but stale"
    );
    let out = p.run(&[
        "--output",
        "json",
        "backfill",
        TASK,
        "--from",
        "1995-06-01",
        "--to",
        "1995-06-03",
        "--stale",
    ]);
    assert_eq!(json_lines(&out).len(), 0, "no longer stale: {}", text(&out));

    // Without a task: one strip per task of the project.
    let out = p.run(&["status", "--from", "1995-06-01", "--to", "1995-06-07"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    insta::assert_snapshot!("picture_all_tasks", String::from_utf8(out.stdout).unwrap());
}

/// The run log's entries by outcome for `day` (`runs/<window>@<ms>-<status>-<run id>.json`).
fn run_log(table: &Path, day: &str) -> Vec<String> {
    let mut entries: Vec<String> = std::fs::read_dir(table.join("_idemlake").join("runs"))
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().to_string())
                .filter(|n| n.starts_with(&format!("{day}@")))
                .collect()
        })
        .unwrap_or_default();
    entries.sort();
    entries
        .iter()
        .map(|e| e.split('-').nth(3).unwrap_or_default().to_string())
        .collect()
}

/// A successful overwrite publish is recorded whole by the Delta log (commitInfo, and tags on
/// every file it adds), so it writes no run-log entry unless `IDEMLAKE_RUN_LOG=all`; a failed
/// attempt and an emptied window (no file to tag) do. `status` tells the same story either way.
#[test]
#[cfg_attr(
    not(feature = "faults"),
    ignore = "needs the fault hooks: --features faults"
)]
fn the_run_log_holds_only_what_the_delta_log_does_not() {
    let p = TestProject::new();
    let table = p.table_dir(TASK);
    let day = "1995-06-03";
    let out = p.run_env(
        "IDEMLAKE_TEST_FAULT",
        "before-commit",
        &["run", TASK, "--window", day],
    );
    assert_eq!(code(&out), 1, "{}", text(&out));
    assert_eq!(run_log(&table, day), ["failed"]);

    let out = p.run(&["--output", "json", "run", TASK, "--window", day]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let run_id = json_lines(&out)[0]["run_id"].clone();
    assert_eq!(
        run_log(&table, day),
        ["failed"],
        "the publish is in the Delta log"
    );
    let s = status_json(&p, day, day);
    assert_eq!(s[0]["state"], "published", "{}", s[0]);
    assert_eq!(s[0]["run_id"], run_id);
    assert_eq!(s[0]["run_status"], "ok");
    assert_eq!(
        s[0]["failed_since"], 0,
        "the publish came after the failure"
    );

    // A failure after the publish counts again.
    let out = p.run_env(
        "IDEMLAKE_TEST_FAULT",
        "before-commit",
        &["run", TASK, "--window", day],
    );
    assert_eq!(code(&out), 1, "{}", text(&out));
    let s = status_json(&p, day, day);
    assert_eq!(s[0]["failed_since"], 1, "{}", s[0]);
    assert_eq!(s[0]["run_id"], run_id, "still the first publish");

    // IDEMLAKE_RUN_LOG=all: every attempt gets its entry.
    let out = p.run_env("IDEMLAKE_RUN_LOG", "all", &["run", TASK, "--window", day]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert_eq!(run_log(&table, day), ["failed", "failed", "ok"]);
    assert_eq!(status_json(&p, day, day)[0]["failed_since"], 0);

    // An emptied window has no file to tag: its entry is what tells `empty` from `missing`.
    let empty = "1990-01-01";
    p.run_ok(TASK, empty);
    assert_eq!(run_log(&table, empty), ["ok"]);
    assert_eq!(status_json(&p, empty, empty)[0]["state"], "empty");

    // A value that is neither `all` nor `default` is refused before anything runs.
    let version = log_version(&table);
    let out = p.run_env(
        "IDEMLAKE_RUN_LOG",
        "everything",
        &["run", TASK, "--window", day],
    );
    assert_eq!(code(&out), 2, "{}", text(&out));
    assert!(text(&out).contains("IDEMLAKE_RUN_LOG"), "{}", text(&out));
    assert_eq!(log_version(&table), version, "nothing written");
}

/// Bug (status hides failures until the first publish): while a task's table did not exist
/// yet, `status` said "no table yet" and every window `missing` with `failed_since` 0, although
/// the run log held the failed attempts; they appeared once any window was published. And a
/// window with no data whose attempts failed said `missing` in its state column while the
/// picture drew it failed: its state is `failed`.
#[test]
fn failures_show_before_the_first_publish() {
    let p = TestProject::new();
    p.task(
        "bad",
        &lineitem_task(
            "SELECT l_shipdate AS ship_date, CAST(l_shipmode AS INT) AS mode FROM lineitem \
             WHERE l_shipdate >= $window_start AND l_shipdate < $window_end",
            "",
        ),
    );
    for _ in 0..2 {
        let out = p.run(&["run", "bad", "--window", "1995-06-02"]);
        assert_eq!(code(&out), 1, "{}", text(&out));
    }
    let status = |args: &[&str]| {
        let mut all = vec!["status", "bad"];
        all.extend_from_slice(args);
        let out = p.run(&all);
        assert_eq!(code(&out), 0, "{}", text(&out));
        String::from_utf8(out.stdout).unwrap()
    };
    let out = p.run(&[
        "--output",
        "json",
        "status",
        "bad",
        "--from",
        "1995-06-01",
        "--to",
        "1995-06-02",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let rows = json_lines(&out);
    let (clean, failed) = (
        by_window(&rows, "1995-06-01"),
        by_window(&rows, "1995-06-02"),
    );
    assert_eq!(clean["state"], "missing", "{clean}");
    assert_eq!(clean["failed_since"], 0, "{clean}");
    assert_eq!(failed["failed_since"], 2, "{failed}");
    assert_eq!(failed["state"], "failed", "{failed}");
    assert_eq!(failed["retryable"], true, "{failed}");
    assert!(
        failed["last_error"].as_str().is_some_and(|e| !e.is_empty()),
        "{failed}"
    );
    // The text: the window's state column and the picture agree.
    let shown = status(&["--from", "1995-06-01", "--to", "1995-06-02"]);
    let row = shown
        .lines()
        .find(|l| l.trim_start().starts_with("1995-06-02"))
        .unwrap_or_else(|| panic!("{shown}"));
    assert_eq!(row.split_whitespace().nth(1), Some("failed"), "{shown}");
    assert!(
        shown.contains("x failed 1") && shown.contains(". missing 1"),
        "{shown}"
    );
    // Without a range, the failed window is listed too.
    let out = p.run(&["--output", "json", "status", "bad"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let all = json_lines(&out);
    assert_eq!(by_window(&all, "1995-06-02")["failed_since"], 2, "{all:?}");
}

/// Finding: a merge window whose query returned no rows (the run skipped, nothing to upsert)
/// showed as `missing` while carrying a version and a run id, and `backfill --missing` did
/// not re-run it. An idemlake run completed for it and found no rows: it is `empty`, as an
/// overwrite window published empty is, not missing (and `--missing` leaves it, as it leaves
/// those); `on_empty = "skip"` alike.
#[test]
fn a_merge_window_with_no_rows_is_empty_in_status() {
    let p = TestProject::new();
    let sql = "SELECT l_orderkey, l_linenumber, l_quantity, l_shipdate AS ship_date \
               FROM lineitem WHERE l_shipdate >= $window_start AND l_shipdate < $window_end";
    let merge = "[write]\nmode = \"merge\"\nkey = [\"l_orderkey\", \"l_linenumber\"]\n";
    p.task("m", &lineitem_task(sql, merge));
    let skip = "[write]\non_empty = \"skip\"\n";
    p.task("s", &lineitem_task(sql, skip));
    // TPC-H ships nothing before 1992: 1991-06-02 has no rows.
    for t in ["m", "s"] {
        let out = p.run(&["backfill", t, "--from", "1991-06-01", "--to", "1991-06-02"]);
        assert_eq!(code(&out), 0, "{}", text(&out));
        p.run_ok(t, "1995-06-01");
        let out = p.run(&[
            "--output",
            "json",
            "status",
            t,
            "--from",
            "1991-06-02",
            "--to",
            "1991-06-03",
        ]);
        assert_eq!(code(&out), 0, "{}", text(&out));
        let s = json_lines(&out);
        assert_eq!(s[0]["state"], "empty", "{t}: {}", s[0]);
        assert_eq!(s[0]["rows"], 0, "{t}: {}", s[0]);
        assert!(s[0]["run_id"].is_string(), "{t}: {}", s[0]);
        assert_eq!(s[0]["retryable"], false, "{t}: {}", s[0]);
        assert_eq!(s[1]["state"], "missing", "{t}: never run: {}", s[1]);
        // --missing runs only the window never run.
        let out = p.run(&[
            "--output",
            "json",
            "backfill",
            t,
            "--from",
            "1991-06-02",
            "--to",
            "1991-06-03",
            "--missing",
        ]);
        assert_eq!(code(&out), 0, "{}", text(&out));
        let ran: Vec<_> = json_lines(&out)
            .iter()
            .map(|r| r["window"]["label"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(ran, ["1991-06-03"], "{t}");
    }
}

/// Regression (found by trying: after deltalake's `optimize.z_order` on an idemlake table —
/// `dataChange: false`, not a row changed — `status` called every window "published, not by
/// idemlake" and `backfill --missing` published every one again, which made every downstream
/// window stale): a window another tool only rewrote keeps the run that published it, and
/// `--missing` runs nothing; a window another tool appended to is still not idemlake's.
#[test]
fn another_tools_compaction_keeps_a_windows_publisher() {
    let p = TestProject::new();
    let task = "lineitem_by_ship_day";
    let (a, b) = ("1995-06-01", "1995-06-02");
    for w in [a, b] {
        p.run_ok(task, w);
        p.run_ok(task, w);
    }
    let before = status_json(&p, a, b);
    let table = p.table_dir(task);
    python_prints(&format!(
        "from deltalake import DeltaTable\n\
         m = DeltaTable('{}').optimize.z_order(['l_orderkey'])\n\
         print(m['numFilesAdded'])",
        table.display()
    ));
    let after = status_json(&p, a, b);
    for (x, y) in before.iter().zip(&after) {
        assert_eq!(y["state"], "published", "{y}");
        for k in ["run_id", "table_version", "sql_hash", "rows"] {
            assert_eq!(x[k], y[k], "{k}: {x} vs {y}");
        }
    }
    let out = p.run(&["backfill", task, "--from", a, "--to", b, "--missing"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert!(text(&out).contains(": 0 windows"), "{}", text(&out));
    // Another tool's rows appended to one window: that window is not only idemlake's.
    python_prints(&format!(
        "from deltalake import DeltaTable, write_deltalake\n\
         import polars as pl\n\
         t = pl.read_delta('{t}').filter(pl.col('ship_date') == pl.date(1995, 6, 2)).head(1)\n\
         write_deltalake('{t}', t.to_arrow(), mode='append')\n\
         print('ok')",
        t = table.display()
    ));
    let last = status_json(&p, a, b);
    assert_eq!(by_window(&last, a)["state"], "published", "{last:?}");
    assert_eq!(
        by_window(&last, b)["state"],
        "published-untracked",
        "{last:?}"
    );
}

/// A Delta source that is not another task's table: a commit adding rows to a published day
/// makes that day stale in `status` (its `source_rows` counted again over the source as it is
/// now, naming both versions), `backfill --stale` re-runs it, and a commit touching no published
/// day makes none stale.
#[test]
fn a_commit_to_a_delta_source_makes_the_days_it_changed_stale() {
    let p = TestProject::new();
    let source = p.path().join("src_lineitem");
    let write = |filter: &str, mode: &str| {
        python_prints(&format!(
            "import polars as pl; from deltalake import write_deltalake; \
             df = pl.read_parquet('{}').filter({filter}); \
             write_deltalake('{}', df.to_arrow(), mode='{mode}'); print(df.height)",
            tpch_dir().join("lineitem.parquet").display(),
            source.display()
        ))
    };
    write("pl.lit(True)", "overwrite");
    let task = lineitem_task(
        "SELECT l_orderkey, l_linenumber, l_quantity, l_shipdate AS ship_date FROM lineitem \
         WHERE l_shipdate >= $window_start AND l_shipdate < $window_end",
        "",
    )
    .replace(
        "uri = \"data/lineitem.parquet\"",
        &format!("uri = \"{}\"\nformat = \"delta\"", source.display()),
    );
    p.task("from_delta", &task);
    let (from, to) = ("1995-06-01", "1995-06-03");
    let out = p.run(&["backfill", "from_delta", "--from", from, "--to", to]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let stale = || -> Vec<(String, Vec<String>)> {
        let out = p.run(&[
            "--output",
            "json",
            "status",
            "from_delta",
            "--from",
            from,
            "--to",
            to,
        ]);
        assert_eq!(code(&out), 0, "{}", text(&out));
        json_lines(&out)
            .iter()
            .filter(|s| s["stale"] == true)
            .map(|s| {
                let inputs = s["stale_inputs"].as_array().unwrap();
                let inputs = inputs.iter().map(|i| i.as_str().unwrap().to_string());
                (
                    s["window"]["label"].as_str().unwrap().to_string(),
                    inputs.collect(),
                )
            })
            .collect()
    };
    assert!(stale().is_empty());
    // A day outside the range: no published day changed.
    let added = write("pl.col('l_shipdate') == pl.date(1995, 7, 15)", "append");
    assert_ne!(added, "0");
    assert!(stale().is_empty());
    // Rows added to 1995-06-02.
    write("pl.col('l_shipdate') == pl.date(1995, 6, 2)", "append");
    let now = stale();
    assert_eq!(now.len(), 1, "{now:?}");
    assert_eq!(now[0].0, "1995-06-02");
    assert!(
        now[0].1[0]
            .contains("lineitem: the window's rows in the table (version 0 then, 2 now) changed"),
        "{now:?}"
    );
    let out = p.run(&[
        "backfill",
        "from_delta",
        "--from",
        from,
        "--to",
        to,
        "--stale",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert!(stale().is_empty());
}
