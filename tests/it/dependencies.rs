//! A task reading another task's table (`[sources.x] task = "…"`).

use crate::common::*;

/// Month totals over `lineitem_by_ship_day`'s table.
fn monthly(grain: &str, upstream: &str) -> String {
    format!(
        r#"sql = """
SELECT CAST($window_start AS DATE) AS month, count(*) AS lines, sum(l_extendedprice) AS revenue
FROM days
WHERE ship_date >= $window_start AND ship_date < $window_end
"""
[target]
partition_by = "month"
[window]
grain = "{grain}"
[sources.days]
task = "{upstream}"
[reconcile]
source = "SELECT count(*) AS lines FROM days WHERE ship_date >= $window_start AND ship_date < $window_end"
output = "SELECT sum(lines) AS lines FROM output"
"#
    )
}

/// `status monthly` for June and July 1995, as JSON lines.
fn june_july_status(p: &TestProject) -> Vec<serde_json::Value> {
    let out = p.run(&[
        "--output", "json", "status", "monthly", "--from", "1995-06", "--to", "1995-07",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    json_lines(&out)
}

#[tokio::test]
async fn a_task_reads_the_table_another_task_publishes() {
    let p = TestProject::new();
    p.task("monthly", &monthly("month", "lineitem_by_ship_day"));
    // Before the upstream task has published anything, the downstream one says so.
    let out = p.run(&["run", "monthly", "--window", "1995-06"]);
    assert_eq!(code(&out), 1, "{}", text(&out));
    assert!(text(&out).contains("not published yet"), "{}", text(&out));
    assert!(
        text(&out).contains("lineitem_by_ship_day:1995-06-01"),
        "{}",
        text(&out)
    );
    let out = p.run(&[
        "backfill",
        "lineitem_by_ship_day",
        "--from",
        "1995-06-01",
        "--to",
        "1995-06-30",
        "--parallel",
        "2",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let out = p.run(&["validate", "monthly"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let out = p.run(&["--output", "json", "run", "monthly", "--window", "1995-06"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let r = &json_lines(&out)[0];
    assert_eq!(r["rows_written"], 1, "{r}");
    // The downstream row equals the month computed from the source files by plain DataFusion.
    let want = source_rows(
        "SELECT count(*) AS lines, sum(l_extendedprice) AS revenue FROM lineitem \
         WHERE l_shipdate >= DATE '1995-06-01' AND l_shipdate < DATE '1995-07-01'",
    )
    .await;
    let got = table_rows(&p.table_dir("monthly"), "").await;
    let got: Vec<String> = got
        .iter()
        .map(|r| {
            r.split('|')
                .filter(|c| !c.starts_with("month="))
                .collect::<Vec<_>>()
                .join("|")
        })
        .collect();
    assert_eq!(got, want);
}

#[test]
fn cycles_and_grains_that_do_not_nest_are_refused() {
    let p = TestProject::new();
    p.task("a", &monthly("month", "b"));
    p.task("b", &monthly("month", "a"));
    for t in ["a", "b"] {
        let out = p.run(&["validate", t]);
        assert_eq!(code(&out), 2, "{}", text(&out));
        assert!(text(&out).contains("dependency cycle"), "{}", text(&out));
    }
    // A day task cannot read month windows; weeks do not nest in months.
    p.task("m", &monthly("month", "lineitem_by_ship_day"));
    p.task("d", &monthly("day", "m"));
    let out = p.run(&["validate", "d"]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    assert!(text(&out).contains("do not fit whole"), "{}", text(&out));
    p.task("w", &monthly("week", "lineitem_by_ship_day"));
    p.task("wm", &monthly("month", "w"));
    let out = p.run(&["validate", "wm"]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    // Naming both a uri and a task is a task-file error.
    p.task(
        "both",
        &monthly("month", "lineitem_by_ship_day").replace(
            "[sources.days]\n",
            "[sources.days]\nuri = \"data/lineitem.parquet\"\n",
        ),
    );
    let out = p.run(&["validate", "both"]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    assert!(
        text(&out).contains("either `uri` or `task`"),
        "{}",
        text(&out)
    );
}

/// Issue 16 §3: staleness from recorded inputs. A downstream window is stale when an upstream
/// window it read was published again after it (not when the upstream table moved for other
/// windows); `backfill --stale` re-runs exactly those.
#[tokio::test]
async fn a_republished_upstream_window_makes_exactly_its_downstream_window_stale() {
    let p = TestProject::new();
    let up = "lineitem_by_ship_day";
    p.task("monthly", &monthly("month", up));
    let out = p.run(&[
        "backfill",
        up,
        "--from",
        "1995-06-01",
        "--to",
        "1995-07-31",
        "--parallel",
        "2",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    for m in ["1995-06", "1995-07"] {
        p.run_ok("monthly", m);
    }
    let status = || june_july_status(&p);
    assert!(
        status().iter().all(|s| s["stale"] == false),
        "{:?}",
        status()
    );
    // Another upstream day is published again: the table moves, no downstream input changes
    // (1995-08-01 is in no published month).
    p.run_ok(up, "1995-08-01");
    assert!(
        status().iter().all(|s| s["stale"] == false),
        "{:?}",
        status()
    );
    // A June day is published again: June is stale, July is not.
    let out = p.run(&["--output", "json", "run", up, "--window", "1995-06-17"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let v = json_lines(&out)[0]["table_version"].as_i64().unwrap();
    let s = status();
    assert_eq!(s[0]["window"]["label"], "1995-06");
    assert_stale_by(&s[0], format!("{up}:1995-06-17@{v}"));
    assert_eq!(s[0]["retryable"], true, "{}", s[0]);
    assert_eq!(s[1]["stale"], false, "{}", s[1]);
    // Regression (text status said only `published` for the window, and its strip's legend
    // "stale (other SQL)" though the SQL had not changed): the text names the input.
    let out = p.run(&["status", "monthly", "--from", "1995-06", "--to", "1995-07"]);
    let shown = text(&out);
    assert!(
        shown.contains(&format!(
            "stale: {up}:1995-06-17 changed at version {v}, after"
        )) && shown.contains("stale (other SQL or inputs)"),
        "{shown}"
    );
    // backfill --stale re-runs June only; then nothing is stale.
    let out = p.run(&[
        "--output", "json", "backfill", "monthly", "--from", "1995-06", "--to", "1995-07",
        "--stale",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let ran: Vec<String> = json_lines(&out)
        .iter()
        .map(|r| r["window"]["label"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ran, ["1995-06"]);
    assert!(
        status().iter().all(|s| s["stale"] == false),
        "{:?}",
        status()
    );
}

/// `backfill --downstream`: the range, then every window of the tasks below it that overlaps
/// the range, in dependency order (three levels).
#[tokio::test]
async fn backfill_downstream_runs_the_chain_in_order() {
    let p = TestProject::new();
    let up = "lineitem_by_ship_day";
    // June is only partly loaded upstream: the monthly task takes what there is.
    p.task(
        "monthly",
        &monthly("month", up).replace("[sources.days]\n", "[sources.days]\nrequire = \"any\"\n"),
    );
    p.task(
        "level3",
        r#"sql = """
SELECT month, sum(lines) AS lines FROM months
WHERE month >= $window_start AND month < $window_end
GROUP BY month
"""
[target]
partition_by = "month"
[window]
grain = "month"
[sources.months]
task = "monthly"
"#,
    );
    let out = p.run(&[
        "--output",
        "json",
        "backfill",
        up,
        "--from",
        "1995-06-20",
        "--to",
        "1995-07-10",
        "--parallel",
        "2",
        "--downstream",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let order: Vec<(String, String)> = json_lines(&out)
        .iter()
        .map(|r| {
            (
                r["task"].as_str().unwrap().to_string(),
                r["window"]["label"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(order.len(), 21 + 2 + 2, "{order:?}");
    let tasks: Vec<&str> = order.iter().map(|(t, _)| t.as_str()).collect();
    assert!(tasks[..21].iter().all(|t| *t == up), "{tasks:?}");
    assert_eq!(tasks[21..], ["monthly", "monthly", "level3", "level3"]);
    // Each level holds what the level above published (June only partly loaded upstream).
    let lines = |t: &str| {
        let p = &p;
        let t = t.to_string();
        async move {
            let (_, ctx) = table_session(&p.table_dir(&t)).await.unwrap();
            rows_of(
                &ctx.sql("SELECT month, lines FROM t ORDER BY month")
                    .await
                    .unwrap()
                    .collect()
                    .await
                    .unwrap(),
            )
        }
    };
    let monthly_rows = lines("monthly").await;
    assert_eq!(monthly_rows.len(), 2);
    assert_eq!(lines("level3").await, monthly_rows);
    let june = source_rows(
        "SELECT count(*) AS lines FROM lineitem \
         WHERE l_shipdate >= DATE '1995-06-20' AND l_shipdate < DATE '1995-07-01'",
    )
    .await;
    assert!(
        monthly_rows.contains(&format!("{}|month=1995-06-01", june[0])),
        "{monthly_rows:?} {june:?}"
    );
}

/// `require = "complete"` (the default): a window whose upstream windows are not all
/// published fails with exit 1 naming them, publishing nothing; `require` applies only to
/// task sources.
#[test]
fn a_window_waits_for_all_its_upstream_windows() {
    let p = TestProject::new();
    let up = "lineitem_by_ship_day";
    p.task("monthly", &monthly("month", up));
    let out = p.run(&["backfill", up, "--from", "1995-06-01", "--to", "1995-06-29"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let out = p.run(&["--output", "json", "run", "monthly", "--window", "1995-06"]);
    assert_eq!(code(&out), 1, "{}", text(&out));
    let r = &json_lines(&out)[0];
    assert_eq!(r["published"], false, "{r}");
    assert_eq!(r["retryable"], true, "{r}");
    let e = r["error"].as_str().unwrap();
    assert!(e.contains("1 upstream window(s)"), "{e}");
    assert!(e.contains("lineitem_by_ship_day:1995-06-30"), "{e}");
    // Nothing published: no Delta table (the run log beside it records the failed attempt).
    assert!(!p.table_dir("monthly").join("_delta_log").exists());
    // Once the last day is published, the month runs.
    p.run_ok(up, "1995-06-30");
    p.run_ok("monthly", "1995-06");
    // A backfill runs the complete months and fails the others, naming what they wait for.
    let out = p.run(&[
        "--output", "json", "backfill", "monthly", "--from", "1995-06", "--to", "1995-07",
    ]);
    assert_eq!(code(&out), 1, "{}", text(&out));
    let lines = json_lines(&out);
    let status = |m: &str| {
        lines
            .iter()
            .find(|r| r["window"]["label"] == m)
            .map(|r| r["status"].as_str().unwrap().to_string())
    };
    assert_eq!(status("1995-06").as_deref(), Some("ok"));
    assert_eq!(status("1995-07").as_deref(), Some("failed"));
    // `require` belongs to task sources.
    p.task(
        "bad",
        &lineitem_task(
            "SELECT l_orderkey, l_shipdate AS ship_date FROM lineitem WHERE l_shipdate >= $window_start AND l_shipdate < $window_end",
            "",
        )
        .replace("uri = \"data/lineitem.parquet\"", "uri = \"data/lineitem.parquet\"\nrequire = \"any\""),
    );
    let out = p.run(&["validate", "bad"]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    assert!(text(&out).contains("require"), "{}", text(&out));
}

/// Staleness of a merge-mode downstream task: MERGE writes files without idemlake's tags, so
/// the inputs come from the publishing run's record in its commit.
#[tokio::test]
async fn a_merge_downstream_window_goes_stale_too() {
    let p = TestProject::new();
    let up = "lineitem_by_ship_day";
    p.task(
        "monthly",
        &format!(
            "{}\n[write]\nmode = \"merge\"\nkey = [\"month\"]\n",
            monthly("month", up)
        ),
    );
    let out = p.run(&["backfill", up, "--from", "1995-06-01", "--to", "1995-07-31"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    for m in ["1995-06", "1995-07"] {
        p.run_ok("monthly", m);
    }
    let status = || june_july_status(&p);
    assert!(
        status().iter().all(|s| s["stale"] == false),
        "{:?}",
        status()
    );
    let out = p.run(&["--output", "json", "run", up, "--window", "1995-07-04"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let v = json_lines(&out)[0]["table_version"].as_i64().unwrap();
    let s = status();
    assert_eq!(s[0]["stale"], false, "{}", s[0]);
    assert_eq!(s[1]["stale"], true, "{}", s[1]);
    assert_eq!(
        s[1]["stale_inputs"],
        serde_json::json!([format!("{up}:1995-07-04@{v}")]),
        "{}",
        s[1]
    );
}

/// Bug (staleness ignores another writer's change upstream): a delta-rs `DELETE` removing
/// rows of an upstream window left the downstream window that read it `stale: false`, and
/// `backfill --stale` ran nothing (only idemlake's own publishes and restores counted). A
/// downstream window is stale when a commit after the version it read changes data in an
/// upstream window it read, whatever wrote the commit.
#[tokio::test]
async fn another_writers_delete_upstream_makes_the_downstream_window_stale() {
    let p = TestProject::new();
    let up = "lineitem_by_ship_day";
    p.task("monthly", &monthly("month", up));
    let out = p.run(&["backfill", up, "--from", "1995-06-01", "--to", "1995-08-01"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    for m in ["1995-06", "1995-07"] {
        p.run_ok("monthly", m);
    }
    let table = p.table_dir(up);
    let delete = |predicate: &'static str| {
        let table = table.clone();
        async move {
            let (t, _) = table_session(&table).await.unwrap();
            let (t, metrics) = t.delete().with_predicate(predicate).await.unwrap();
            assert!(metrics.num_removed_files > 0, "{predicate}");
            t.version().unwrap()
        }
    };
    let status = || june_july_status(&p);
    // Another writer's change to a day no published month read: nothing is stale.
    delete("ship_date = '1995-08-01' AND l_linenumber = 1").await;
    assert!(
        status().iter().all(|s| s["stale"] == false),
        "{:?}",
        status()
    );
    // Rows of a June day deleted (its file rewritten): June is stale, July is not.
    let v = delete("ship_date = '1995-06-10' AND l_linenumber = 1").await;
    let s = status();
    assert_stale_by(&s[0], format!("{up}:1995-06-10@{v}"));
    assert_eq!(s[1]["stale"], false, "{}", s[1]);
    let out = p.run(&[
        "--output", "json", "backfill", "monthly", "--from", "1995-06", "--to", "1995-07",
        "--stale",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let ran: Vec<String> = json_lines(&out)
        .iter()
        .map(|r| r["window"]["label"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ran, ["1995-06"]);
    assert!(
        status().iter().all(|s| s["stale"] == false),
        "{:?}",
        status()
    );
    // A whole July day deleted (its files removed, none added): July is stale.
    let v = delete("ship_date = '1995-07-05'").await;
    let s = status();
    assert_eq!(s[0]["stale"], false, "{}", s[0]);
    assert_stale_by(&s[1], format!("{up}:1995-07-05@{v}"));
}

/// Status line `w` says its window is stale because of the one upstream input `input`.
fn assert_stale_by(w: &serde_json::Value, input: String) {
    assert_eq!(w["stale"], true, "{w}");
    assert_eq!(w["stale_inputs"], serde_json::json!([input]), "{w}");
}

/// Bug (staleness missed changes whose commits were cleaned from the upstream's log): a
/// downstream window read an upstream window, another writer then deleted that window's rows,
/// and the commit files up to a checkpoint after it were cleaned up (as delta-rs does past
/// `logRetentionDuration`). `status` read the commits after the version the window read,
/// skipped the missing ones, and called the window fresh. What a cleaned commit changed is
/// unknown: every window that read a version before it is stale, saying why.
#[tokio::test]
async fn a_change_whose_commit_was_cleaned_from_the_upstream_log_still_makes_windows_stale() {
    let p = TestProject::new();
    let up = "lineitem_by_ship_day";
    p.task("monthly", &monthly("month", up));
    let out = p.run(&["backfill", up, "--from", "1995-06-01", "--to", "1995-07-31"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    for m in ["1995-06", "1995-07"] {
        p.run_ok("monthly", m);
    }
    let table = p.table_dir(up);
    let (t, _) = table_session(&table).await.unwrap();
    let (t, metrics) = t
        .delete()
        .with_predicate("ship_date = '1995-06-10'")
        .await
        .unwrap();
    assert!(metrics.num_removed_files > 0);
    let deleted_at = t.version().unwrap();
    // A checkpoint at the delete, and the commit files up to it cleaned up.
    checkpoint_and_clean_log(&t, &table, deleted_at + 1).await;
    for s in june_july_status(&p) {
        assert_eq!(s["stale"], true, "{s}");
        let inputs = s["stale_inputs"].as_array().unwrap();
        assert!(
            inputs.iter().any(|i| i
                .as_str()
                .unwrap()
                .contains("its log no longer holds the commits after version")),
            "{s}"
        );
    }
}

/// Finding: a window failing because its upstream windows are not published (exit 1,
/// retryable) left no trace: `status` said `missing`, failed_since 0. Like every other
/// failed attempt it is now in the run log, from `run` and from `backfill`.
#[test]
fn a_window_blocked_by_its_upstream_shows_failed_in_status() {
    let p = TestProject::new();
    p.task("monthly", &monthly("month", "lineitem_by_ship_day"));
    // The upstream table exists (without it a backfill fails before any window).
    p.run_ok("lineitem_by_ship_day", "1995-06-01");
    let out = p.run(&["run", "monthly", "--window", "1995-06"]);
    assert_eq!(code(&out), 1, "{}", text(&out));
    let out = p.run(&[
        "backfill", "monthly", "--from", "1995-07", "--to", "1995-07",
    ]);
    assert_eq!(code(&out), 1, "{}", text(&out));
    let out = p.run(&[
        "--output", "json", "status", "monthly", "--from", "1995-06", "--to", "1995-08",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let s = json_lines(&out);
    for m in &s[..2] {
        assert_eq!(m["state"], "failed", "{m}");
        assert_eq!(m["failed_since"], 1, "{m}");
        assert!(
            m["last_error"]
                .as_str()
                .is_some_and(|e| e.contains("not published yet")),
            "{m}"
        );
    }
    assert_eq!(s[2]["state"], "missing", "never attempted: {}", s[2]);
    let out = p.run(&["status", "monthly", "--from", "1995-06", "--to", "1995-06"]);
    assert!(text(&out).contains("not published yet"), "{}", text(&out));
}

/// Finding: the text `status` said "stale: read up:2024-01-01@2, published again since" of a
/// window that read version 1 (version 2 is the upstream's re-publish). It now says which
/// version changed the upstream window and which one this window read.
#[test]
fn stale_text_says_which_version_changed_and_which_was_read() {
    let p = TestProject::new();
    let up = "lineitem_by_ship_day";
    p.task(
        "daily",
        &format!(
            r#"sql = "SELECT ship_date, count(*) AS n FROM days WHERE ship_date >= $window_start AND ship_date < $window_end GROUP BY ship_date"
[target]
partition_by = "ship_date"
[window]
grain = "day"
[sources.days]
task = "{up}"
"#
        ),
    );
    p.run_ok(up, "1995-06-01");
    let read = log_version(&p.table_dir(up)).unwrap();
    p.run_ok("daily", "1995-06-01");
    p.run_ok(up, "1995-06-01");
    let changed = log_version(&p.table_dir(up)).unwrap();
    assert!(changed > read);
    let out = p.run(&[
        "status",
        "daily",
        "--from",
        "1995-06-01",
        "--to",
        "1995-06-01",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let shown = text(&out);
    assert!(
        shown.contains(&format!(
            "stale: {up}:1995-06-01 changed at version {changed}, after the version this window read ({read})"
        )),
        "{shown}"
    );
    // JSON keeps its entries: task:window@version of the change.
    let out = p.run(&[
        "--output",
        "json",
        "status",
        "daily",
        "--from",
        "1995-06-01",
        "--to",
        "1995-06-01",
    ]);
    let s = &json_lines(&out)[0];
    assert_eq!(
        s["stale_inputs"],
        serde_json::json!([format!("{up}:1995-06-01@{changed}")]),
        "{s}"
    );
}
