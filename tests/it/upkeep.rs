//! Table upkeep: `vacuum` deletes only what no reader may need, never the run log.

use std::path::{Path, PathBuf};

use crate::common::*;

const TASK: &str = "lineitem_by_ship_day";

/// Every file under `dir` (relative paths, sorted).
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(dir).unwrap().to_path_buf());
            }
        }
    }
    out.sort();
    out
}

fn data_files(table: &Path) -> Vec<PathBuf> {
    files_under(table)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "parquet") && !p.starts_with("_idemlake"))
        .collect()
}

#[tokio::test]
async fn vacuum_keeps_what_readers_may_need_and_never_the_run_log() {
    let p = TestProject::new();
    let table = p.table_dir(TASK);
    let days = ["1995-06-01", "1995-06-02"];
    for d in days {
        p.run_ok(TASK, d);
    }
    // Re-running a day replaces its files: the first run's files are now removed in the log.
    p.run_ok(TASK, days[0]);
    let before = data_files(&table);
    let runlog: Vec<PathBuf> = files_under(&table)
        .into_iter()
        .filter(|p| p.starts_with("_idemlake"))
        .collect();
    assert!(!runlog.is_empty());
    // A file no commit mentions, as a run killed before its commit leaves behind.
    let orphan = table.join("ship_date=1995-06-02/part-orphan-of-a-killed-run.parquet");
    std::fs::copy(table.join(&before[0]), &orphan).unwrap();

    // Below the table's retention without --force: refused, nothing deleted.
    let out = p.run(&["vacuum", TASK, "--retain-hours", "0"]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    assert!(
        text(&out).contains("deletedFileRetentionDuration"),
        "{}",
        text(&out)
    );
    assert_eq!(data_files(&table).len(), before.len() + 1);

    // The default retention (7 days) keeps the files removed a moment ago.
    let out = p.run(&["--output", "json", "vacuum", TASK]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let r = &json_lines(&out)[0];
    assert_eq!(r["files"].as_array().unwrap().len(), 0, "{r}");
    assert_eq!(r["retention_hours"], 168);

    // A dry run lists the removed files and deletes nothing.
    let live = table_files_live(&table).await;
    let removed: Vec<&PathBuf> = before.iter().filter(|f| !live.contains(f)).collect();
    assert!(!removed.is_empty());
    let out = p.run(&[
        "--output",
        "json",
        "vacuum",
        TASK,
        "--retain-hours",
        "0",
        "--force",
        "--dry-run",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let listed: Vec<String> = json_lines(&out)[0]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().to_string())
        .collect();
    let want: Vec<String> = removed
        .iter()
        .map(|f| f.to_string_lossy().into_owned())
        .collect();
    assert_eq!(listed, want);
    assert_eq!(data_files(&table).len(), before.len() + 1);

    // Lite mode deletes the removed files only: the orphan stays, the live files and the run
    // log are untouched, and the table reads the same rows.
    let out = p.run(&["vacuum", TASK, "--retain-hours", "0", "--force"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let after = data_files(&table);
    for f in &removed {
        assert!(!after.contains(f), "{} survived", f.display());
    }
    assert!(orphan.exists());
    for f in &live {
        assert!(after.contains(f), "live file {} deleted", f.display());
    }
    // --full also deletes files no commit mentions.
    let out = p.run(&["vacuum", TASK, "--retain-hours", "0", "--force", "--full"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert!(!orphan.exists());
    assert_eq!(data_files(&table), live);
    for f in &runlog {
        assert!(
            table.join(f).exists(),
            "run log file {} deleted",
            f.display()
        );
    }
    for d in days {
        let got = table_rows(&table, &format!("ship_date = DATE '{d}'")).await;
        assert_eq!(got, expected_lineitem_day(d).await, "{d}");
    }
    // status still knows which run published each window.
    let out = p.run(&["--output", "json", "status", TASK]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    for s in json_lines(&out) {
        assert_eq!(s["state"], "published", "{s}");
    }
}

/// A merge task over `items.csv`, one partition per day.
const MERGE_TASK: &str = r#"sql = """
SELECT order_id, amount, CAST(day AS DATE) AS day
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
key = ["order_id"]
"#;

/// Rows `ids` of 2026-11-01 and one of 2026-11-02 (which stays the same).
fn items(ids: std::ops::Range<i64>) -> String {
    let mut csv = String::from("order_id,amount,day\n");
    for i in ids {
        csv.push_str(&format!("{i},{},2026-11-01\n", i * 10));
    }
    csv.push_str("999,1,2026-11-02\n");
    csv
}

/// Incremental merges leave a window in several files; `optimize` compacts them in one commit
/// per window without changing a row (read back by delta-rs), leaves one-file windows alone,
/// and a second run has nothing to do.
#[tokio::test]
async fn optimize_compacts_a_window_without_changing_its_rows() {
    let p = TestProject::new();
    p.task("items", MERGE_TASK);
    let table = p.table_dir("items");
    for (i, ids) in [1..6, 6..11, 11..16].into_iter().enumerate() {
        std::fs::write(p.path().join("items.csv"), items(ids)).unwrap();
        p.run_ok("items", "2026-11-01");
        if i == 0 {
            p.run_ok("items", "2026-11-02");
        }
    }
    let day1 = "day = DATE '2026-11-01'";
    let rows_before = table_rows(&table, day1).await;
    let other_before = table_rows(&table, "day = DATE '2026-11-02'").await;
    assert_eq!(rows_before.len(), 15);
    let files_before = data_files(&table).len();
    let live_before = table_files_live(&table).await;
    let in_day1 = |files: &[PathBuf]| {
        files
            .iter()
            .filter(|f| f.starts_with("day=2026-11-01"))
            .count()
    };
    assert!(in_day1(&live_before) >= 3, "{live_before:?}");
    let version_before = log_version(&table).unwrap();

    let out = p.run(&["--output", "json", "optimize", "items"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let lines = json_lines(&out);
    let day = |label: &str| {
        lines
            .iter()
            .find(|l| l["window"]["label"] == label)
            .unwrap()
            .clone()
    };
    let d1 = day("2026-11-01");
    assert_eq!(d1["status"], "compacted", "{d1}");
    assert_eq!(d1["files_before"], in_day1(&live_before));
    assert_eq!(d1["files_after"], 1);
    assert_eq!(d1["rows"], 15);
    assert_eq!(d1["table_version"], version_before + 1);
    assert_eq!(day("2026-11-02")["status"], "skipped");
    // One commit, marked as a rearrangement (no data change).
    assert_eq!(log_version(&table).unwrap(), version_before + 1);
    let actions = commit_actions(&table, version_before + 1);
    for a in &actions {
        for kind in ["add", "remove"] {
            if let Some(x) = a.get(kind) {
                assert_eq!(x["dataChange"], false, "{a}");
            }
        }
    }
    let live_after = table_files_live(&table).await;
    assert_eq!(in_day1(&live_after), 1, "{live_after:?}");
    assert_eq!(table_rows(&table, day1).await, rows_before);
    assert_eq!(
        table_rows(&table, "day = DATE '2026-11-02'").await,
        other_before
    );
    // The old files stay on disk for readers of older versions (vacuum deletes them).
    assert_eq!(data_files(&table).len(), files_before + 1);
    // Nothing left to do.
    let out = p.run(&["--output", "json", "optimize", "items"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert!(json_lines(&out).iter().all(|l| l["status"] == "skipped"));
    assert_eq!(log_version(&table).unwrap(), version_before + 1);
    // And the merge still upserts into the compacted window.
    std::fs::write(p.path().join("items.csv"), items(14..18)).unwrap();
    p.run_ok("items", "2026-11-01");
    assert_eq!(table_rows(&table, day1).await.len(), 17);
}

/// The live data files of the table's latest version, relative to its root.
async fn table_files_live(table: &Path) -> Vec<PathBuf> {
    let (t, _) = table_session(table).await.unwrap();
    let mut files: Vec<PathBuf> = t
        .get_file_uris()
        .unwrap()
        .map(|u| {
            let path = u.strip_prefix("file://").unwrap_or(&u).to_string();
            Path::new(&path)
                .strip_prefix(table.canonicalize().unwrap())
                .or_else(|_| Path::new(&path).strip_prefix(table))
                .unwrap()
                .to_path_buf()
        })
        .collect();
    files.sort();
    files
}
