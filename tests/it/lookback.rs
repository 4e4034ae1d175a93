//! `[window] lookback = N` (issue 16 §1): a `run` of W re-publishes W-1 … W-N with it, in one
//! commit; late rows land; a re-run adds nothing; a failure publishes none of them; `backfill`
//! runs each window once. Rows are checked with delta-rs's own reader against the source.

use crate::common::*;

/// A day task over `sales/sales.csv` with `lookback` and extra TOML.
fn task(lookback: u32, extra: &str) -> String {
    format!(
        r#"sql = """
SELECT sale_id, amount, CAST(day AS DATE) AS day FROM sales
WHERE CAST(day AS DATE) >= $window_start AND CAST(day AS DATE) < $window_end
"""
[target]
partition_by = "day"
[window]
grain = "day"
lookback = {lookback}
[sources.sales]
uri = "sales/sales.csv"
format = "csv"
{extra}"#
    )
}

fn write_sales(p: &TestProject, rows: &[(i64, &str, i64)]) {
    let dir = p.path().join("sales");
    std::fs::create_dir_all(&dir).unwrap();
    let mut csv = String::from("sale_id,day,amount\n");
    for (id, day, amount) in rows {
        csv.push_str(&format!("{id},{day},{amount}\n"));
    }
    std::fs::write(dir.join("sales.csv"), csv).unwrap();
}

/// The table's rows, read by delta-rs (not idemlake), as `id=amount@day` sorted.
async fn published(p: &TestProject) -> Vec<String> {
    let (_, ctx) = table_session(&p.table_dir("s")).await.expect("a table");
    let batches = ctx
        .sql("SELECT CAST(sale_id AS VARCHAR) || '=' || CAST(amount AS VARCHAR) || '@' || CAST(day AS VARCHAR) AS r FROM t")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let mut rows: Vec<String> = rows_of(&batches)
        .into_iter()
        .map(|r| r.trim_start_matches("r=").to_string())
        .collect();
    rows.sort();
    rows
}

fn expected(rows: &[(i64, &str, i64)], days: &[&str]) -> Vec<String> {
    let mut out: Vec<String> = rows
        .iter()
        .filter(|(_, d, _)| days.contains(d))
        .map(|(id, d, a)| format!("{id}={a}@{d}"))
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn a_late_row_for_the_day_before_lands_with_the_next_run_in_one_commit() {
    let p = TestProject::new();
    let mut rows = vec![
        (1, "2026-11-27", 10),
        (2, "2026-11-28", 20),
        (3, "2026-11-28", 30),
    ];
    write_sales(&p, &rows);
    p.task("s", &task(1, ""));
    let out = p.run(&["--output", "json", "run", "s", "--window", "2026-11-28"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let reports = json_lines(&out);
    let labels: Vec<&str> = reports
        .iter()
        .map(|r| r["window"]["label"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["2026-11-27", "2026-11-28"], "{}", text(&out));
    // One commit for both windows (version 0 is the table's creation).
    for r in &reports {
        assert_eq!(r["status"], "ok", "{r}");
        assert_eq!(r["table_version"], 1, "{r}");
    }
    assert_eq!(log_version(&p.table_dir("s")), Some(1));
    let days = ["2026-11-27", "2026-11-28"];
    assert_eq!(published(&p).await, expected(&rows, &days));

    // A late row for the day before arrives; the next day's run publishes it.
    rows.push((4, "2026-11-28", 40));
    rows.push((5, "2026-11-29", 50));
    write_sales(&p, &rows);
    let out = p.run(&["run", "s", "--window", "2026-11-29"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert_eq!(log_version(&p.table_dir("s")), Some(2));
    let all = ["2026-11-27", "2026-11-28", "2026-11-29"];
    assert_eq!(published(&p).await, expected(&rows, &all));

    // Re-running adds nothing.
    let out = p.run(&["run", "s", "--window", "2026-11-29"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert_eq!(published(&p).await, expected(&rows, &all));
}

#[tokio::test]
async fn a_failed_lookback_window_publishes_none_of_them() {
    let p = TestProject::new();
    // 2026-11-27 has no rows and empty results must fail.
    let rows = [(1, "2026-11-26", 10), (2, "2026-11-28", 20)];
    write_sales(&p, &rows);
    p.task("s", &task(0, ""));
    assert_eq!(code(&p.run(&["run", "s", "--window", "2026-11-26"])), 0);
    let before = published(&p).await;
    let v = log_version(&p.table_dir("s"));
    p.task("s", &task(1, "[write]\non_empty = \"fail\"\n"));
    let out = p.run(&["--output", "json", "run", "s", "--window", "2026-11-28"]);
    assert_eq!(code(&out), 1, "{}", text(&out));
    let reports = json_lines(&out);
    assert_eq!(reports.len(), 2, "{}", text(&out));
    assert!(
        reports
            .iter()
            .all(|r| r["status"] == "failed" && r["published"] == false)
    );
    assert!(
        reports[1]["error"]
            .as_str()
            .unwrap()
            .contains("window 2026-11-27 failed"),
        "{}",
        reports[1]
    );
    assert_eq!(
        log_version(&p.table_dir("s")),
        v,
        "nothing may be committed"
    );
    assert_eq!(published(&p).await, before);
    // No staged file of the window that passed is left in the table directory.
    let parquet = walk_parquet(&p.table_dir("s"));
    let (t, _) = table_session(&p.table_dir("s")).await.unwrap();
    let live: Vec<String> = t.get_file_uris().unwrap().collect();
    assert_eq!(
        parquet.len(),
        live.len(),
        "staged files left behind: {parquet:?}"
    );
}

#[tokio::test]
async fn backfill_runs_each_window_once_whatever_the_lookback() {
    let p = TestProject::new();
    let rows = [
        (1, "2026-11-27", 10),
        (2, "2026-11-28", 20),
        (3, "2026-11-29", 30),
    ];
    write_sales(&p, &rows);
    p.task("s", &task(2, ""));
    let out = p.run(&[
        "--output",
        "json",
        "backfill",
        "s",
        "--from",
        "2026-11-27",
        "--to",
        "2026-11-29",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert_eq!(json_lines(&out).len(), 3, "{}", text(&out));
    let days = ["2026-11-27", "2026-11-28", "2026-11-29"];
    assert_eq!(published(&p).await, expected(&rows, &days));
}

fn walk_parquet(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        if path.is_dir() {
            out.extend(walk_parquet(&path));
        } else if path.extension().is_some_and(|x| x == "parquet") {
            out.push(path);
        }
    }
    out
}
