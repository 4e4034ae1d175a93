//! audit/repair on a table damaged the way the incident did, across a 10-day range.

use std::collections::BTreeSet;
use std::process::Command;

use crate::common::*;
use crate::incident::legacy_append;

fn day(d: u32) -> String {
    format!("1995-06-{d:02}")
}

#[tokio::test]
async fn audit_names_exactly_the_damaged_windows_and_repair_fixes_them() {
    let p = TestProject::new();
    let table = p.table_dir("lineitem_by_ship_day");
    p.run_ok("lineitem_by_ship_day", &day(10));
    for d in 1..=9 {
        let expected = expected_lineitem_day(&day(d)).await.len();
        match d {
            // Failed halfway, retried: duplicates.
            2 | 5 => {
                legacy_append(&table, &day(d), Some(expected / 2)).await;
                legacy_append(&table, &day(d), None).await;
            }
            // Failed halfway, never retried: a partial window.
            7 => legacy_append(&table, &day(d), Some(expected / 2)).await,
            // Never ran: a missing window.
            8 => {}
            _ => legacy_append(&table, &day(d), None).await,
        }
    }

    let out = p.run(&[
        "--output",
        "json",
        "audit",
        "lineitem_by_ship_day",
        "--from",
        &day(1),
        "--to",
        &day(10),
    ]);
    assert_eq!(code(&out), 4, "{}", text(&out));
    let audits = json_lines(&out);
    assert_eq!(audits.len(), 10);
    let damaged: BTreeSet<String> = audits
        .iter()
        .filter(|a| a["status"] == "damaged")
        .map(|a| a["window"]["label"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        damaged,
        [day(2), day(5), day(7), day(8)].into_iter().collect()
    );
    assert!(audits[1]["duplicate_keys"].as_u64().unwrap() > 0);
    assert_eq!(audits[7]["rows"], 0);

    let out = p.run(&[
        "repair",
        "lineitem_by_ship_day",
        "--from",
        &day(1),
        "--to",
        &day(10),
        "--parallel",
        "2",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(
        s.contains("before: 4 of 10 windows damaged")
            && s.contains("after: 0 of 10 windows damaged"),
        "{s}"
    );
    let out = p.run(&[
        "audit",
        "lineitem_by_ship_day",
        "--from",
        &day(1),
        "--to",
        &day(10),
        "--reconcile",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));

    // An independent reader agrees with the source, day by day.
    let py = std::env::var("IDEMLAKE_PYTHON").unwrap_or_else(|_| {
        repo()
            .join(".venv-py/bin/python")
            .to_string_lossy()
            .into_owned()
    });
    let out = Command::new(py)
        .arg(repo().join("scripts/read_delta.py"))
        .arg(&table)
        .arg("ship_date")
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", text(&out));
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for d in 1..=10 {
        let n = expected_lineitem_day(&day(d)).await.len();
        assert_eq!(got["partitions"][day(d)], n, "{}: {got}", day(d));
    }
}

/// A week task over daily partitions: a key repeated on two days of one week is a duplicate
/// of the window even though each day's partition alone has unique keys.
#[tokio::test]
async fn week_windows_count_duplicates_across_their_days() {
    use datafusion::prelude::SessionContext;
    use deltalake::DeltaTableBuilder;
    use deltalake::protocol::SaveMode;

    let p = TestProject::new();
    let toml = std::fs::read_to_string(repo().join("tables/lineitem_by_ship_day.toml"))
        .unwrap()
        .replace("grain = \"day\"", "grain = \"week\"");
    p.task("lineitem_by_ship_week", &toml);
    p.run_ok("lineitem_by_ship_week", "1995-W23");
    let audit = |p: &TestProject| {
        let out = p.run(&[
            "--output",
            "json",
            "audit",
            "lineitem_by_ship_week",
            "--from",
            "1995-W22",
            "--to",
            "1995-W23",
        ]);
        (code(&out), json_lines(&out))
    };
    let (c, before) = audit(&p);
    assert_eq!(c, 4, "W22 was never published: {before:?}");
    assert_eq!(before[1]["status"], "ok", "{before:?}");

    // A legacy job re-appends Monday's rows stamped with Tuesday's date.
    let table = p.table_dir("lineitem_by_ship_week");
    let url = url::Url::from_directory_path(&table).unwrap();
    let mut t = DeltaTableBuilder::from_url(url).unwrap().build().unwrap();
    t.load().await.unwrap();
    let ctx = SessionContext::new();
    t.update_datafusion_session(&ctx.state()).unwrap();
    ctx.register_table("t", t.table_provider().await.unwrap())
        .unwrap();
    let schema = t.snapshot().unwrap().snapshot().arrow_schema();
    let cols: Vec<String> = schema
        .fields()
        .iter()
        .map(|f| match f.name().as_str() {
            "ship_date" => "DATE '1995-06-06' AS ship_date".to_string(),
            n => n.to_string(),
        })
        .collect();
    let monday = ctx
        .sql(&format!(
            "SELECT {} FROM t WHERE ship_date = DATE '1995-06-05'",
            cols.join(", ")
        ))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let moved: usize = monday.iter().map(|b| b.num_rows()).sum();
    assert!(moved > 0);
    t.write(monday)
        .with_save_mode(SaveMode::Append)
        .await
        .unwrap();

    let (c, after) = audit(&p);
    assert_eq!(c, 4);
    let w = &after[1];
    assert_eq!(w["window"]["label"], "1995-W23");
    assert_eq!(w["retryable"], true, "{w}");
    assert!(w["table_version"].is_i64(), "{w}");
    assert_eq!(w["status"], "damaged", "{w}");
    assert_eq!(w["duplicate_keys"], moved as u64, "{w}");
    assert_eq!(w["duplicate_rows"], moved as u64, "{w}");
}

/// Defect (issue 37): a task without a key whose rows legitimately repeat
/// (`SELECT l_shipdate AS ship_date, l_shipmode …`), published once and audited at once,
/// was called damaged ("duplicate key(s), extra row(s)", exit 4), and `repair` could never
/// make it clean. Without a key, the table's row multiplicities are compared with the
/// source's: a row the source gives twice may appear twice; only copies beyond the source's
/// are damage — which a re-appended window has, and `repair` removes.
#[tokio::test]
async fn audit_without_a_key_counts_only_copies_beyond_the_sources() {
    let p = TestProject::new();
    p.task(
        "modes",
        &lineitem_task(
            "SELECT l_shipdate AS ship_date, l_shipmode FROM lineitem \
             WHERE l_shipdate >= $window_start AND l_shipdate < $window_end",
            "",
        ),
    );
    for d in 1..=3 {
        p.run_ok("modes", &day(d));
    }
    // The rows do repeat: fewer distinct (day, mode) pairs than rows.
    let rows = table_rows(&p.table_dir("modes"), "ship_date = DATE '1995-06-01'").await;
    let distinct: BTreeSet<&String> = rows.iter().collect();
    assert!(distinct.len() < rows.len(), "{rows:?}");
    let audit = |p: &TestProject| {
        p.run(&[
            "--output",
            "json",
            "audit",
            "modes",
            "--from",
            &day(1),
            "--to",
            &day(3),
        ])
    };
    let out = audit(&p);
    assert_eq!(code(&out), 0, "{}", text(&out));
    for a in json_lines(&out) {
        assert_eq!(a["status"], "ok", "{a}");
        assert_eq!(a["duplicate_keys"], 0, "{a}");
    }
    // Damage: day 2 appended once more, as an append-style job would.
    let appended = append_again(&p.table_dir("modes"), "ship_date = DATE '1995-06-02'").await;
    assert!(appended > 0);
    let out = audit(&p);
    assert_eq!(code(&out), 4, "{}", text(&out));
    let audits = json_lines(&out);
    let damaged: Vec<&str> = audits
        .iter()
        .filter(|a| a["status"] == "damaged")
        .map(|a| a["window"]["label"].as_str().unwrap())
        .collect();
    assert_eq!(damaged, [day(2)], "{audits:?}");
    assert_eq!(audits[1]["duplicate_rows"].as_u64(), Some(appended as u64));
    // Repair re-runs day 2; the window is clean again.
    let out = p.run(&["repair", "modes", "--from", &day(1), "--to", &day(3)]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let out = audit(&p);
    assert_eq!(code(&out), 0, "{}", text(&out));
}

/// Bug (audit without a key misses changed rows): without a `[write].key`, audit allowed every
/// distinct row of the table once whether or not the source gives it, and never counted the
/// source's rows the table lacks. Rows another writer changed to a value the source never has
/// (row count unchanged) were called "ok" (exit 0). The window's rows are compared with the
/// source's as multisets: copies beyond the source's are extra, copies the source gives that
/// the table lacks are missing; either is damage.
#[tokio::test]
async fn audit_without_a_key_reports_rows_changed_by_another_writer() {
    let p = TestProject::new();
    p.task(
        "flags",
        &lineitem_task(
            "SELECT l_returnflag, l_linestatus, l_quantity, l_shipdate AS ship_date \
             FROM lineitem WHERE l_shipdate >= $window_start AND l_shipdate < $window_end",
            "",
        ),
    );
    for d in 1..=3 {
        p.run_ok("flags", &day(d));
    }
    let table = p.table_dir("flags");
    // Another writer changes the day-1 rows with the smallest quantity, and the day-2 rows
    // with a quantity below 10, to quantities the source never has.
    let min = table_rows(&table, "ship_date = DATE '1995-06-01'")
        .await
        .iter()
        .filter_map(|r| r.split('|').find_map(|c| c.strip_prefix("l_quantity=")))
        .map(|q| q.parse::<f64>().unwrap())
        .fold(f64::INFINITY, f64::min);
    let changes = [
        (
            format!("ship_date = DATE '1995-06-01' AND l_quantity = {min}"),
            "999",
        ),
        (
            "ship_date = DATE '1995-06-02' AND l_quantity < 10".to_string(),
            "777",
        ),
    ];
    let mut changed = Vec::new();
    for (filter, value) in changes {
        let n = table_rows(&table, &filter).await.len();
        assert!(n > 0, "{filter}");
        let (t, _) = table_session(&table).await.unwrap();
        t.update()
            .with_predicate(filter.as_str())
            .with_update("l_quantity", value)
            .await
            .unwrap();
        changed.push(n as u64);
    }
    let out = p.run(&[
        "--output",
        "json",
        "audit",
        "flags",
        "--from",
        &day(1),
        "--to",
        &day(3),
    ]);
    assert_eq!(code(&out), 4, "{}", text(&out));
    let audits = json_lines(&out);
    for (a, n) in audits.iter().zip(&changed) {
        assert_eq!(a["status"], "damaged", "{a}");
        assert_eq!(a["rows"], a["expected_rows"], "{a}");
        assert_eq!(a["duplicate_rows"].as_u64(), Some(*n), "{a}");
        assert_eq!(a["missing_rows"].as_u64(), Some(*n), "{a}");
    }
    assert_eq!(audits[2]["status"], "ok", "{}", audits[2]);
    assert_eq!(audits[2]["missing_rows"], 0, "{}", audits[2]);
    // The text says what changed, not "duplicate_keys=N" of a table that has no key (found by
    // trying: a changed row read as duplicates).
    let out = p.run(&["audit", "flags", "--from", &day(1), "--to", &day(1)]);
    let n = changed[0];
    let said = format!("rows_beyond_source={n} rows_missing={n}");
    assert!(text(&out).contains(&said), "{}", text(&out));
    assert!(!text(&out).contains("duplicate_keys"), "{}", text(&out));
}

/// Finding: `audit --reconcile` ignored `[reconcile] default = "content"`: another writer
/// changing every quantity of a day (row count unchanged) was "0 damaged", exit 0. The
/// content fingerprint of the task's rows on the independent path is now compared with the
/// published window's, for overwrite and merge tables.
#[tokio::test]
async fn audit_reconcile_runs_the_default_content_check() {
    let p = TestProject::new();
    let sql = "SELECT l_orderkey, l_linenumber, l_quantity, l_shipdate AS ship_date \
               FROM lineitem WHERE l_shipdate >= $window_start AND l_shipdate < $window_end";
    let content =
        "[write]\nkey = [\"l_orderkey\", \"l_linenumber\"]\n[reconcile]\ndefault = \"content\"\n";
    p.task("li", &lineitem_task(sql, content));
    let merge = content.replace("[write]\n", "[write]\nmode = \"merge\"\n");
    p.task("li_merge", &lineitem_task(sql, &merge));
    for t in ["li", "li_merge"] {
        for d in 1..=3 {
            p.run_ok(t, &day(d));
        }
        let table = p.table_dir(t);
        let (dt, _) = table_session(&table).await.unwrap();
        dt.update()
            .with_predicate("ship_date = DATE '1995-06-02'")
            .with_update("l_quantity", "l_quantity + 1")
            .await
            .unwrap();
        let audit = |reconcile: bool| {
            let mut args = vec!["--output", "json", "audit", t, "--from", "1995-06-01"];
            args.extend(["--to", "1995-06-03"]);
            if reconcile {
                args.push("--reconcile");
            }
            let out = p.run(&args);
            (code(&out), json_lines(&out), text(&out))
        };
        // Without --reconcile the row and key comparison sees nothing wrong: same rows, same keys.
        let (c, _, out) = audit(false);
        assert_eq!(c, 0, "{t}: {out}");
        let (c, audits, out) = audit(true);
        assert_eq!(c, 4, "{t}: {out}");
        let status: Vec<&str> = audits
            .iter()
            .map(|a| a["status"].as_str().unwrap())
            .collect();
        assert_eq!(status, ["ok", "damaged", "ok"], "{t}: {out}");
        let check = &audits[1]["reconciliation"][0];
        assert_eq!(check["check"], "source_content", "{t}: {out}");
        assert_eq!(check["ok"], false, "{t}: {out}");
        assert_eq!(audits[0]["reconciliation"][0]["ok"], true, "{t}: {out}");
        // The independent reader agrees the published day 2 differs from the source.
        let published = table_rows(&table, "ship_date = DATE '1995-06-02'").await;
        let source = source_rows(
            "SELECT l_orderkey, l_linenumber, l_quantity, l_shipdate AS ship_date \
             FROM lineitem WHERE l_shipdate = DATE '1995-06-02'",
        )
        .await;
        assert_eq!(published.len(), source.len());
        assert_ne!(published, source);
    }
}

/// Finding: with no `[reconcile]` section `audit --reconcile` did nothing more, silently.
/// It now says which check ran: the default `source_rows`, which audit always compares.
#[test]
fn audit_reconcile_without_a_reconcile_section_says_what_it_checked() {
    let p = TestProject::new();
    let sql = "SELECT l_orderkey, l_linenumber, l_quantity, l_shipdate AS ship_date \
               FROM lineitem WHERE l_shipdate >= $window_start AND l_shipdate < $window_end";
    p.task("plain", &lineitem_task(sql, ""));
    p.run_ok("plain", &day(1));
    let out = p.run(&[
        "audit",
        "plain",
        "--from",
        &day(1),
        "--to",
        &day(1),
        "--reconcile",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(
        s.contains("--reconcile: plain has no [reconcile] queries") && s.contains("source_rows"),
        "{s}"
    );
}

/// Finding: in merge mode a row whose event day changed ended up in two windows (the MERGE is
/// pruned to the window: inserted into the new day, kept in the old one), and `audit` said
/// duplicate_keys=0, exit 0, looking only within each window, with no word of it. Keys held by
/// more than one window of the range are now counted per window and named with the windows
/// (not damage: a key is unique within a window by design, and a daily snapshot repeats its
/// keys). Week windows: the key is compared across windows, not across one window's days.
#[tokio::test]
async fn audit_reports_a_key_in_two_windows() {
    let p = TestProject::new();
    let task = |grain: &str| {
        format!(
            r#"sql = """
SELECT id, val, CAST(d AS DATE) AS day FROM ev
WHERE CAST(d AS DATE) >= $window_start AND CAST(d AS DATE) < $window_end
"""
[target]
partition_by = "day"
[window]
grain = "{grain}"
[sources.ev]
uri = "ev.csv"
[write]
mode = "merge"
key = ["id"]
"#
        )
    };
    p.task("ev", &task("day"));
    p.task("ev_week", &task("week"));
    let csv =
        |rows: &str| std::fs::write(p.path().join("ev.csv"), format!("id,val,d\n{rows}")).unwrap();
    csv("1,10,2024-01-01\n2,20,2024-01-01\n3,30,2024-01-02\n");
    for d in ["2024-01-01", "2024-01-02"] {
        p.run_ok("ev", d);
    }
    p.run_ok("ev_week", "2024-W01");
    // A late correction: id 1 belongs to 2024-01-02 (and to the next week's Monday).
    csv("1,11,2024-01-02\n2,20,2024-01-01\n3,30,2024-01-02\n1,11,2024-01-08\n");
    for d in ["2024-01-01", "2024-01-02"] {
        p.run_ok("ev", d);
    }
    p.run_ok("ev_week", "2024-W02");
    // An independent reader sees id 1 twice in the day table.
    let rows = table_rows(&p.table_dir("ev"), "id = 1").await;
    assert_eq!(rows.len(), 2, "{rows:?}");
    let audit = |t: &str, from: &str, to: &str| {
        let out = p.run(&["--output", "json", "audit", t, "--from", from, "--to", to]);
        (code(&out), json_lines(&out), text(&out))
    };
    let (c, a, out) = audit("ev", "2024-01-01", "2024-01-02");
    assert_eq!(c, 0, "{out}");
    for w in &a {
        assert_eq!(w["status"], "ok", "{w}");
        assert_eq!(w["duplicate_keys"], 0, "{w}");
        assert_eq!(w["keys_in_other_windows"], 1, "{w}");
        assert_eq!(
            w["key_in_other_windows"], "id=1 in 2024-01-01, 2024-01-02",
            "{w}"
        );
    }
    let out = p.run(&["audit", "ev", "--from", "2024-01-01", "--to", "2024-01-02"]);
    let shown = text(&out);
    assert!(
        shown.contains("keys_in_other_windows=1")
            && shown.contains(
                "2 window(s) hold keys other windows of the range hold too (e.g. id=1 in 2024-01-01, 2024-01-02)"
            ),
        "{shown}"
    );
    // One window alone holds each key once.
    let (c, a, out) = audit("ev", "2024-01-02", "2024-01-02");
    assert_eq!(c, 0, "{out}");
    assert_eq!(a[0]["keys_in_other_windows"], 0, "{}", a[0]);
    assert!(a[0].get("key_in_other_windows").is_none(), "{}", a[0]);
    // Weeks: id 1 in W01 and W02 is a key in two windows.
    let (c, a, out) = audit("ev_week", "2024-W01", "2024-W02");
    assert_eq!(c, 0, "{out}");
    assert_eq!(
        a[1]["key_in_other_windows"], "id=1 in 2024-W01, 2024-W02",
        "{}",
        a[1]
    );
}

/// Bug (found by trying: another writer appended copies of existing keys into a merge-mode
/// window; every `repair` re-ran its MERGE, which updated every copy, committed a new version,
/// failed its own count check with exit 5 and said `retryable: true`, the window staying
/// damaged however often it was retried): `repair` does not re-run such a window. Its report
/// says a merge cannot remove the copies and what to do (exit 4, not retryable), nothing is
/// committed, and `audit` marks the window not retryable.
#[test]
fn repair_of_a_merge_window_with_duplicate_keys_commits_nothing_and_says_why() {
    let p = TestProject::new();
    let task = "orders_by_day";
    let out = p.run(&[
        "backfill",
        task,
        "--from",
        "1995-06-01",
        "--to",
        "1995-06-03",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let table = p.table_dir(task);
    let script = format!(
        "import polars as pl\nfrom deltalake import DeltaTable, write_deltalake\nimport datetime as d\n\
         t = DeltaTable('{0}')\n\
         df = pl.from_arrow(t.to_pyarrow_table()).filter(pl.col('order_date') == d.date(1995, 6, 2)).head(2)\n\
         write_deltalake('{0}', df.to_arrow(), mode='append')",
        table.display()
    );
    python_prints(&script);
    let before = log_version(&table);
    let day = |command: &str| {
        p.run(&[
            "--output",
            "json",
            command,
            task,
            "--from",
            "1995-06-02",
            "--to",
            "1995-06-02",
        ])
    };
    let out = day("audit");
    assert_eq!(code(&out), 4, "{}", text(&out));
    let audit = &json_lines(&out)[0];
    assert_eq!(audit["duplicate_keys"], 2, "{audit}");
    assert_eq!(audit["retryable"], false, "{audit}");
    for _ in 0..2 {
        let out = day("repair");
        assert_eq!(code(&out), 4, "{}", text(&out));
        let lines = json_lines(&out);
        let report = lines.iter().find(|l| l.get("published").is_some()).unwrap();
        assert_eq!(report["published"], false, "{report}");
        assert_eq!(report["retryable"], false, "{report}");
        let error = report["error"].as_str().unwrap();
        assert!(error.contains("which a merge cannot repair"), "{error}");
        assert_eq!(log_version(&table), before, "nothing committed");
    }
}
