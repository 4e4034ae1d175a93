//! Regression tests for wrong answers found by trying everyday task shapes (issues 14 §3 and
//! 21). Each test is named after the bug it pins down and was written before its fix.

use crate::common::*;

/// One event per `minutes` from `from` for `count` events: `event_id,ts,amount` CSV text.
fn events_csv(from: &str, minutes: i64, count: i64) -> String {
    let start: jiff::Timestamp = from.parse().unwrap();
    let mut csv = String::from("event_id,ts,amount\n");
    for i in 0..count {
        let t = start
            .checked_add(jiff::SignedDuration::from_mins(i * minutes))
            .unwrap();
        csv.push_str(&format!("{},{t},{}\n", i + 1, (i % 7) + 1));
    }
    csv
}

/// An hour-grain task over `events.csv` in `tz`.
fn hour_task(tz: &str) -> String {
    format!(
        r#"sql = """
SELECT event_id, amount, CAST(ts AS TIMESTAMP) AS ts, date_trunc('hour', CAST(ts AS TIMESTAMP)) AS hour
FROM events
WHERE CAST(ts AS TIMESTAMP) >= $window_start_ts AND CAST(ts AS TIMESTAMP) < $window_end_ts
"""
[target]
partition_by = "hour"
[window]
grain = "hour"
timezone = "{tz}"
[sources.events]
uri = "events.csv"
[reconcile]
source = "SELECT count(*) AS n, sum(amount) AS total FROM events WHERE CAST(ts AS TIMESTAMP) >= $window_start_ts AND CAST(ts AS TIMESTAMP) < $window_end_ts"
output = "SELECT count(*) AS n, sum(amount) AS total FROM output"
"#
    )
}

/// Issue 14 §3: every hour window ended `exit 1` with "read-back: commit N adds 0 of the 1
/// file(s) this run staged" after the commit had landed (percent-encoded TIMESTAMP partition
/// directories compared in another encoding).
#[tokio::test]
async fn hour_grain_windows_publish_and_report_ok() {
    for tz in ["UTC", "Europe/Berlin"] {
        let p = TestProject::new();
        std::fs::write(
            p.path().join("events.csv"),
            events_csv("2026-11-20T00:05:00Z", 20, 12),
        )
        .unwrap();
        p.task("events_by_hour", &hour_task(tz));
        let window = if tz == "UTC" {
            "2026-11-20T01"
        } else {
            "2026-11-20T02" // 01:00Z in Berlin (CET)
        };
        for attempt in 0..2 {
            let out = p.run(&[
                "--output",
                "json",
                "run",
                "events_by_hour",
                "--window",
                window,
            ]);
            assert_eq!(code(&out), 0, "{tz} attempt {attempt}: {}", text(&out));
            let r = &json_lines(&out)[0];
            assert_eq!(r["status"], "ok", "{r}");
            assert_eq!(r["rows_written"], 3, "{r}");
            assert!(r["table_version"].as_i64().is_some(), "{r}");
            let rows = table_rows(&p.table_dir("events_by_hour"), "").await;
            assert_eq!(rows.len(), 3, "{tz}: a re-run replaces the hour: {rows:?}");
        }
        let out = p.run(&["status", "events_by_hour", "--from", window, "--to", window]);
        assert_eq!(code(&out), 0, "{}", text(&out));
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("published"),
            "{}",
            text(&out)
        );
    }
}

/// Issue 14 §3: both 02:00 local hours of 2026-10-25 in Europe/Berlin were labelled
/// `2026-10-25T02` and keyed by that label in the shared scan, so a backfill gave the second
/// one the first one's slice (1 of its 2 rows published, reconciliation agreeing).
#[tokio::test]
async fn dst_fall_back_hours_each_get_their_own_rows_in_a_backfill() {
    let p = TestProject::new();
    // 2026-10-25 Berlin: 00:00Z-01:00Z is 02:00 CEST, 01:00Z-02:00Z is 02:00 CET.
    // Events every 30 minutes from 22:10Z on the 24th: two per hour.
    std::fs::write(
        p.path().join("events.csv"),
        events_csv("2026-10-24T22:10:00Z", 30, 12),
    )
    .unwrap();
    p.task("events_by_hour", &hour_task("Europe/Berlin"));
    let out = p.run(&[
        "--output",
        "json",
        "backfill",
        "events_by_hour",
        "--from",
        "2026-10-25T00",
        "--to",
        "2026-10-25T04",
        "--parallel",
        "2",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let reports = json_lines(&out);
    let windows: Vec<(String, i64)> = reports
        .iter()
        .filter(|r| r.get("window").is_some())
        .map(|r| {
            (
                r["window"]["start"].as_str().unwrap().to_string(),
                r["rows_written"].as_i64().unwrap(),
            )
        })
        .collect();
    // 00, 01, 02 (CEST), 02 (CET), 03, 04: six hours, two events each.
    assert_eq!(windows.len(), 6, "{windows:?}");
    assert!(windows.iter().all(|(_, n)| *n == 2), "{windows:?}");
    let labels: std::collections::HashSet<&str> = reports
        .iter()
        .filter_map(|r| r["window"]["label"].as_str())
        .collect();
    assert_eq!(
        labels.len(),
        6,
        "labels of repeated hours differ: {labels:?}"
    );
    // The oracle: every source event of the range is in the table exactly once.
    let all = table_rows(&p.table_dir("events_by_hour"), "").await;
    assert_eq!(all.len(), 12, "{all:?}");
    // status keeps both hours apart.
    let out = p.run(&[
        "--output",
        "json",
        "status",
        "events_by_hour",
        "--from",
        "2026-10-25T00",
        "--to",
        "2026-10-25T04",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let st = json_lines(&out);
    assert_eq!(st.len(), 6, "{st:?}");
    for s in &st {
        assert_eq!(s["state"], "published", "{s}");
        assert_eq!(s["rows"], 2, "{s}");
    }
    // Without a range too: one line per window, no phantom line for the run log's spelling
    // of a repeated hour's label (review finding).
    let out = p.run(&["--output", "json", "status", "events_by_hour"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let st = json_lines(&out);
    assert_eq!(st.len(), 6, "{st:?}");
    assert!(st.iter().all(|s| s["state"] == "published"), "{st:?}");
}

/// Issue 21: America/New_York, 2026-11-01 01:00 happens twice. Publishing only the second one
/// made `status` show the first as published (with the second's rows) and the second missing,
/// and `backfill --missing` re-ran everything but the missing hour.
#[tokio::test]
async fn repeated_new_york_hour_is_its_own_window_in_status_and_missing() {
    let p = TestProject::new();
    // 04:00Z..08:00Z: 00:00 EDT, 01:00 EDT, 01:00 EST, 02:00 EST. Two events per hour.
    std::fs::write(
        p.path().join("events.csv"),
        events_csv("2026-11-01T04:10:00Z", 30, 8),
    )
    .unwrap();
    p.task("events_by_hour", &hour_task("America/New_York"));
    // Only the second 01:00 (EST).
    let out = p.run(&[
        "run",
        "events_by_hour",
        "--window",
        "2026-11-01T01:00:00-05:00/2026-11-01T02:00:00-05:00",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let range = ["--from", "2026-11-01T00", "--to", "2026-11-01T02"];
    let mut args = vec!["--output", "json", "status", "events_by_hour"];
    args.extend(range);
    let out = p.run(&args);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let st = json_lines(&out);
    let states: Vec<(String, String)> = st
        .iter()
        .map(|s| {
            (
                s["window"]["label"].as_str().unwrap().to_string(),
                s["state"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(states.len(), 4, "{states:?}");
    assert_eq!(states[0].1, "missing", "00:00 EDT: {states:?}");
    assert_eq!(states[1].1, "missing", "01:00 EDT: {states:?}");
    assert_eq!(states[2].1, "published", "01:00 EST: {states:?}");
    assert_eq!(states[3].1, "missing", "02:00 EST: {states:?}");
    assert_ne!(states[1].0, states[2].0, "labels differ: {states:?}");
    // --missing runs exactly the three missing hours, the first 01:00 among them.
    let mut args = vec![
        "--output",
        "json",
        "backfill",
        "events_by_hour",
        "--missing",
    ];
    args.extend(range);
    let out = p.run(&args);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let mut starts: Vec<String> = json_lines(&out)
        .iter()
        .filter_map(|r| r["window"]["start"].as_str().map(str::to_string))
        .collect();
    starts.sort();
    assert_eq!(
        starts,
        [
            "2026-11-01T00:00:00-04:00",
            "2026-11-01T01:00:00-04:00",
            "2026-11-01T02:00:00-05:00"
        ],
        "{}",
        text(&out)
    );
    assert_eq!(
        table_rows(&p.table_dir("events_by_hour"), "").await.len(),
        8
    );
    // The label of a repeated hour is accepted back as a window.
    let label = states[2].0.clone();
    let out = p.run(&["run", "events_by_hour", "--window", &label]);
    assert_eq!(code(&out), 0, "{label}: {}", text(&out));
    assert_eq!(
        table_rows(&p.table_dir("events_by_hour"), "").await.len(),
        8
    );
}

/// A merge task over `items.csv` keyed on `key`.
fn merge_task(key: &str) -> String {
    format!(
        r#"sql = """
SELECT order_id, line_no, amount, CAST(day AS DATE) AS day
FROM items
WHERE CAST(day AS DATE) >= $window_start AND CAST(day AS DATE) < $window_end
"""
[target]
partition_by = "day"
[window]
grain = "day"
[sources.items]
uri = "items.csv"
[write]
mode = "merge"
key = {key}
"#
    )
}

fn items_csv(null_line_no: bool) -> String {
    let mut csv = String::from("order_id,line_no,amount,day\n");
    for day in ["2026-11-01", "2026-11-02"] {
        for i in 1..=5 {
            let line = if null_line_no && i == 3 {
                String::new()
            } else {
                "1".to_string()
            };
            csv.push_str(&format!("{i},{line},{},{day}\n", i * 10));
        }
    }
    csv
}

/// Issue 14 §3 and issue 21: merge with a NULL key value inserted another copy on every
/// re-run (`t.k = s.k` never matches NULL), single and composite keys alike, exit 0 every time.
#[tokio::test]
async fn merge_with_a_null_key_never_adds_rows_on_rerun() {
    for key in [r#"["line_no"]"#, r#"["order_id", "line_no"]"#] {
        let p = TestProject::new();
        std::fs::write(p.path().join("items.csv"), items_csv(true)).unwrap();
        p.task("items", &merge_task(key));
        let dir = p.table_dir("items");
        let mut outcomes = Vec::new();
        for _ in 0..3 {
            let out = p.run(&["run", "items", "--window", "2026-11-01"]);
            outcomes.push(code(&out));
            let n = if dir.exists() {
                table_rows(&dir, "").await.len()
            } else {
                0
            };
            assert!(
                n <= 5,
                "key {key}: the window grew to {n} rows\n{}",
                text(&out)
            );
            if code(&out) != 0 {
                assert_eq!(code(&out), 1, "{}", text(&out));
                let err = String::from_utf8_lossy(&out.stderr);
                assert!(
                    err.contains("NULL") && err.contains("line_no"),
                    "names the column: {err}"
                );
            }
        }
        assert!(
            outcomes.iter().all(|c| *c == outcomes[0]),
            "{key}: {outcomes:?}"
        );
    }
}

/// Issue 14 §3: `audit` of `SELECT $window_start AS day, count(*) AS n …` failed with
/// "Schema contains qualified field name __idemlake_target.n and unqualified field name n".
/// It also bound the task's SQL once for the whole range, which cannot be right for a
/// window-stamped aggregate.
#[tokio::test]
async fn audit_of_a_window_stamped_count_task_is_clean() {
    let p = TestProject::new();
    p.task(
        "daily_counts",
        r#"sql = """
SELECT $window_start AS day, count(*) AS n, sum(l_quantity) AS k
FROM lineitem
WHERE l_shipdate >= $window_start AND l_shipdate < $window_end
"""
[target]
partition_by = "day"
[window]
grain = "day"
[sources.lineitem]
uri = "data/lineitem.parquet"
"#,
    );
    let out = p.run(&[
        "backfill",
        "daily_counts",
        "--from",
        "1995-06-01",
        "--to",
        "1995-06-05",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let out = p.run(&[
        "--output",
        "json",
        "audit",
        "daily_counts",
        "--from",
        "1995-06-01",
        "--to",
        "1995-06-05",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 5, "{}", text(&out));
    for l in &lines {
        assert_eq!(l["status"], "ok", "{l}");
        assert_eq!(l["rows"], 1, "{l}");
        assert_eq!(l["expected_rows"], 1, "{l}");
    }
}

/// Issue 21: audit flagged merge tables as damaged wherever upserted rows were kept (rows the
/// latest output no longer produces, as merge semantics promise), and repair could not clear it.
#[tokio::test]
async fn audit_of_a_merge_table_accepts_kept_rows() {
    let p = TestProject::new();
    std::fs::write(p.path().join("items.csv"), items_csv(false)).unwrap();
    p.task("items", &merge_task(r#"["order_id"]"#));
    p.run_ok("items", "2026-11-01");
    // The source loses order 5 of the day: the merged window keeps it (upsert semantics).
    let csv: String = items_csv(false)
        .lines()
        .filter(|l| *l != "5,1,50,2026-11-01")
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(p.path().join("items.csv"), csv).unwrap();
    p.run_ok("items", "2026-11-01");
    assert_eq!(table_rows(&p.table_dir("items"), "").await.len(), 5);
    let out = p.run(&[
        "--output",
        "json",
        "audit",
        "items",
        "--from",
        "2026-11-01",
        "--to",
        "2026-11-01",
    ]);
    assert_eq!(code(&out), 0, "kept rows are not damage: {}", text(&out));
    // A key published twice (another tool appended a copy) is damage.
    p.run_ok("items", "2026-11-02");
    append_again(
        &p.table_dir("items"),
        "order_id = 2 AND day = DATE '2026-11-02'",
    )
    .await;
    let out = p.run(&[
        "--output",
        "json",
        "audit",
        "items",
        "--from",
        "2026-11-01",
        "--to",
        "2026-11-02",
    ]);
    assert_eq!(code(&out), 4, "{}", text(&out));
    let lines = json_lines(&out);
    assert_eq!(lines[0]["status"], "ok", "{}", text(&out));
    assert_eq!(lines[1]["status"], "damaged", "{}", text(&out));
    assert_eq!(lines[1]["duplicate_keys"], 1, "{}", text(&out));
}

/// Issue 21: a merge run producing no rows leaves the window as it is, but `status` named that
/// run as the window's publisher.
#[tokio::test]
async fn empty_merge_run_is_not_named_the_windows_publisher() {
    let p = TestProject::new();
    std::fs::write(p.path().join("items.csv"), items_csv(false)).unwrap();
    p.task("items", &merge_task(r#"["order_id"]"#));
    let first = p.run(&["--output", "json", "run", "items", "--window", "2026-11-01"]);
    assert_eq!(code(&first), 0, "{}", text(&first));
    let publisher = json_lines(&first)[0]["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    // The source now has no rows for the day (only for another one).
    std::fs::write(
        p.path().join("items.csv"),
        "order_id,line_no,amount,day\n9,1,90,2026-11-05\n",
    )
    .unwrap();
    let empty = p.run(&["--output", "json", "run", "items", "--window", "2026-11-01"]);
    assert_eq!(code(&empty), 0, "{}", text(&empty));
    assert_eq!(
        json_lines(&empty)[0]["status"],
        "skipped",
        "{}",
        text(&empty)
    );
    assert_eq!(table_rows(&p.table_dir("items"), "").await.len(), 5);
    let out = p.run(&[
        "--output",
        "json",
        "status",
        "items",
        "--from",
        "2026-11-01",
        "--to",
        "2026-11-01",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let s = &json_lines(&out)[0];
    assert_eq!(s["state"], "published", "{s}");
    assert_eq!(s["rows"], 5, "{s}");
    assert_eq!(s["run_id"].as_str(), Some(publisher.as_str()), "{s}");
}

/// Issue 21: `backfill --missing` over a range where nothing is missing sometimes printed
/// `TokioMultiThreadExecutor has crashed: RecvError` on stderr while exiting 0.
#[test]
fn backfill_with_nothing_to_do_exits_cleanly_without_stray_panics() {
    let p = TestProject::new();
    let range = ["--from", "1995-06-01", "--to", "1995-06-03"];
    let mut args = vec!["backfill", "daily_revenue"];
    args.extend(range);
    let out = p.run(&args);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let mut args = vec![
        "--log-format",
        "json",
        "backfill",
        "daily_revenue",
        "--missing",
    ];
    args.extend(range);
    for i in 0..30 {
        let out = p.run(&args);
        assert_eq!(code(&out), 0, "loop {i}: {}", text(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !err.contains("panic") && !err.contains("crashed"),
            "loop {i}: {err}"
        );
        for line in err.lines().filter(|l| !l.trim().is_empty()) {
            assert!(
                serde_json::from_str::<serde_json::Value>(line).is_ok(),
                "loop {i}: stderr line is not JSON: {line}"
            );
        }
    }
}

/// Issue 14 §4: the README claimed "tested with 16 concurrent processes locally" without a
/// test. 16 processes at once on a local lake: 12 different windows and 4 more runs of two of
/// them. The table must equal a serial run.
#[tokio::test(flavor = "multi_thread")]
async fn sixteen_local_processes_lose_no_commit_and_duplicate_no_row() {
    let p = TestProject::new();
    p.run_ok("lineitem_by_ship_day", "1995-06-01");
    let days: Vec<String> = (1..=12).map(|d| format!("1995-06-{d:02}")).collect();
    let mut windows: Vec<&str> = days.iter().map(String::as_str).collect();
    windows.extend(["1995-06-02", "1995-06-02", "1995-06-07", "1995-06-01"]);
    let lake = p.path().join("lake");
    let children: Vec<_> = windows
        .iter()
        .map(|w| {
            p.spawn(
                &lake,
                &[
                    "--output",
                    "json",
                    "run",
                    "lineitem_by_ship_day",
                    "--window",
                    w,
                ],
            )
        })
        .collect();
    let mut ok = 0;
    for (child, w) in children.into_iter().zip(&windows) {
        let out = child.wait_with_output().unwrap();
        match code(&out) {
            0 => ok += 1,
            1 => {
                // A loser that gave up must say so and have published nothing.
                let r = &json_lines(&out)[0];
                assert_eq!(r["published"], false, "{w}: {r}");
            }
            other => panic!("{w}: unexpected exit {other}:\n{}", text(&out)),
        }
    }
    assert!(ok >= 12, "most runs commit: {ok}/16");
    let mut expected = Vec::new();
    for d in &days {
        expected.extend(expected_lineitem_day(d).await);
    }
    expected.sort();
    assert_eq!(
        table_rows(&p.table_dir("lineitem_by_ship_day"), "").await,
        expected,
        "equals a serial run: no lost commit, no duplicate row"
    );
}

/// Found by the torture suite (seed 14002): `CAST(e.ts AS TIMESTAMP) >= $window_start_ts` in a
/// join. DataFusion's SQL planner types the placeholder from the other side (nanoseconds, no
/// zone); the prepared plan was optimised with that type and then bound with the UTC
/// microsecond value, and every window failed with "Invalid comparison operation:
/// Timestamp(ns) >= Timestamp(µs, "UTC")" while the plain path published the right rows.
#[tokio::test]
async fn a_placeholder_typed_by_the_sql_binds_like_the_plain_path() {
    let p = TestProject::new();
    std::fs::write(
        p.path().join("events.csv"),
        "id,ts,cat,amount\n1,2026-10-25T00:10:00Z,a,5\n2,2026-10-25T01:20:00Z,b,8\n3,2026-10-25T00:50:00Z,b,3\n",
    )
    .unwrap();
    std::fs::write(p.path().join("dims.csv"), "cat,label\na,alpha\nb,beta\n").unwrap();
    p.task(
        "t",
        r#"sql = """
SELECT e.id, e.amount, CAST(e.ts AS TIMESTAMP) AS t, $window_start AS part, d.label
FROM events e JOIN dims d ON e.cat = d.cat
WHERE (CAST(e.ts AS TIMESTAMP) >= $window_start_ts AND CAST(e.ts AS TIMESTAMP) < $window_end_ts)
  AND e.amount IN (1, 2, 3, 5, 8)
"""
[target]
partition_by = "part"
[window]
grain = "hour"
[sources.events]
uri = "events.csv"
[sources.dims]
uri = "dims.csv"
"#,
    );
    for (plain, lake) in [(false, "lake_fast"), (true, "lake_plain")] {
        let mut c = p.cmd();
        if plain {
            c.env("IDEMLAKE_ACCELERATE", "0");
        }
        let lake_dir = p.path().join(lake);
        let out = c
            .arg("--lake")
            .arg(&lake_dir)
            .args([
                "backfill",
                "t",
                "--from",
                "2026-10-25T00",
                "--to",
                "2026-10-25T01",
            ])
            .output()
            .unwrap();
        assert_eq!(code(&out), 0, "plain={plain}: {}", text(&out));
        let rows = table_rows(&lake_dir.join("t"), "").await;
        assert_eq!(rows.len(), 3, "plain={plain}: {rows:?}");
    }
}

/// Issue 15: every DataFusion error became a runtime error (exit 1), so a mistake in the
/// task's SQL that DataFusion reports only when the window's plan is executed (here an
/// aggregate's argument out of range) exited 1, as if storage had failed. It is the user's
/// mistake: exit 2, and the table is not created.
#[test]
fn a_sql_mistake_found_when_the_window_runs_exits_2() {
    let p = TestProject::new();
    p.task(
        "t",
        &lineitem_task(
            "SELECT approx_percentile_cont(l_quantity, 2.0) AS q, l_shipdate AS ship_date \
             FROM lineitem WHERE l_shipdate >= $window_start AND l_shipdate < $window_end \
             GROUP BY l_shipdate",
            "",
        ),
    );
    let out = p.run(&["run", "t", "--window", "1995-06-01"]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    assert!(text(&out).contains("Percentile value"), "{}", text(&out));
    assert_eq!(
        log_version(&p.table_dir("t")),
        None,
        "no table may be created"
    );
}

/// Bug (found by trying: another tool set `delta.appendOnly = true` on a target; re-running a
/// published window failed with exit 1, `retryable: true`, on every retry, since the table
/// refuses the `remove` actions a replacement commits): exit 2, not retryable, the sentence
/// naming the property; nothing published.
#[test]
fn an_append_only_target_is_a_configuration_error_not_a_retryable_failure() {
    let p = TestProject::new();
    let task = "lineitem_by_ship_day";
    p.run_ok(task, "1995-06-09");
    let table = p.table_dir(task);
    let script = format!(
        "from deltalake import DeltaTable\nDeltaTable('{}').alter.set_table_properties({{'delta.appendOnly': 'true'}})",
        table.display()
    );
    python_prints(&script);
    let before = log_version(&table);
    let out = p.run(&["--output", "json", "run", task, "--window", "1995-06-09"]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    let report = &json_lines(&out)[0];
    assert_eq!(report["retryable"], false, "{report}");
    assert_eq!(report["published"], false, "{report}");
    assert!(
        report["error"]
            .as_str()
            .unwrap()
            .contains("delta.appendOnly"),
        "{report}"
    );
    assert_eq!(log_version(&table), before, "nothing committed");
}
