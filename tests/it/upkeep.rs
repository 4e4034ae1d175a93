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
    // Every attempt logged (successful publishes are not by default): a run log to keep.
    let run = |d: &str| {
        let out = p.run_env("IDEMLAKE_RUN_LOG", "all", &["run", TASK, "--window", d]);
        assert_eq!(code(&out), 0, "{}", text(&out));
    };
    for d in days {
        run(d);
    }
    // Re-running a day replaces its files: the first run's files are now removed in the log.
    run(days[0]);
    let before = data_files(&table);
    let runlog: Vec<PathBuf> = files_under(&table)
        .into_iter()
        .filter(|p| p.starts_with("_idemlake"))
        .collect();
    assert!(!runlog.is_empty());
    // No check result is kept for a later run: nothing is written under `_idemlake/checks/`.
    assert!(
        !files_under(&table)
            .iter()
            .any(|p| p.starts_with("_idemlake/checks")),
        "no checks' memo"
    );
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
    assert!(r.get("memo_entries").is_none(), "{r}");
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
    assert_eq!(
        data_files(&table).len(),
        before.len() + 1,
        "a dry run deletes nothing"
    );

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

/// An overwrite task over `items.csv`, one partition per day.
const DAY_TASK: &str = r#"sql = """
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
"#;

/// Five orders on each of two days, amounts multiplied by `m`.
fn two_days(m: i64) -> String {
    let mut csv = String::from("order_id,amount,day\n");
    for day in ["2026-11-01", "2026-11-02"] {
        for i in 1..=5 {
            csv.push_str(&format!("{i},{},{day}\n", i * m));
        }
    }
    csv
}

fn run_json(p: &TestProject, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["--output", "json"];
    all.extend_from_slice(args);
    let out = p.run(&all);
    assert_eq!(code(&out), 0, "{}", text(&out));
    json_lines(&out).remove(0)
}

/// `restore` brings one window back to an earlier version in one commit, other windows
/// untouched; `status` says so; `--before-run` finds the version itself; files deleted by a
/// vacuum make it refuse, naming them, with nothing changed.
#[tokio::test]
async fn restore_brings_one_window_back_and_leaves_the_others() {
    let p = TestProject::new();
    p.task("items", DAY_TASK);
    let table = p.table_dir("items");
    let (d1, d2) = ("day = DATE '2026-11-01'", "day = DATE '2026-11-02'");
    std::fs::write(p.path().join("items.csv"), two_days(10)).unwrap();
    let first = run_json(&p, &["run", "items", "--window", "2026-11-01"]);
    run_json(&p, &["run", "items", "--window", "2026-11-02"]);
    let v1 = first["table_version"].as_i64().unwrap();
    let day1_then = table_rows(&table, d1).await;
    // The source changes; both days are re-run.
    std::fs::write(p.path().join("items.csv"), two_days(7)).unwrap();
    run_json(&p, &["run", "items", "--window", "2026-11-01"]);
    run_json(&p, &["run", "items", "--window", "2026-11-02"]);
    let day2_now = table_rows(&table, d2).await;
    assert_ne!(table_rows(&table, d1).await, day1_then);
    let before = log_version(&table).unwrap();

    let v = v1.to_string();
    let r = run_json(
        &p,
        &[
            "restore",
            "items",
            "--window",
            "2026-11-01",
            "--to-version",
            &v,
        ],
    );
    assert_eq!(r["status"], "restored", "{r}");
    assert_eq!(r["published"], true);
    assert_eq!(r["table_version"], before as i64 + 1);
    assert_eq!(log_version(&table).unwrap(), before + 1);
    assert_eq!(table_rows(&table, d1).await, day1_then);
    assert_eq!(table_rows(&table, d2).await, day2_now);
    let s = run_json(
        &p,
        &[
            "status",
            "items",
            "--from",
            "2026-11-01",
            "--to",
            "2026-11-01",
        ],
    );
    assert_eq!(s["state"], "published", "{s}");
    assert_eq!(s["run_status"], "restored", "{s}");
    assert_eq!(s["restored_from"], v1, "{s}");
    assert_eq!(s["run_id"], first["run_id"], "{s}");
    // Restoring to what the window already holds changes nothing.
    run_json(
        &p,
        &[
            "restore",
            "items",
            "--window",
            "2026-11-01",
            "--to-version",
            &v,
        ],
    );
    assert_eq!(log_version(&table).unwrap(), before + 1);

    // --before-run: undo one run.
    std::fs::write(p.path().join("items.csv"), two_days(3)).unwrap();
    let bad = run_json(&p, &["run", "items", "--window", "2026-11-01"]);
    assert_ne!(table_rows(&table, d1).await, day1_then);
    let run = bad["run_id"].as_str().unwrap();
    let r = run_json(
        &p,
        &[
            "restore",
            "items",
            "--window",
            "2026-11-01",
            "--before-run",
            run,
        ],
    );
    assert_eq!(r["status"], "restored", "{r}");
    assert_eq!(table_rows(&table, d1).await, day1_then);

    // A version outside the table, or a run that never committed: exit 2, nothing written.
    let now = log_version(&table).unwrap();
    for args in [
        ["--to-version", "999"],
        ["--before-run", "00000000-0000-0000-0000-000000000000"],
    ] {
        let out = p.run(&[&["restore", "items", "--window", "2026-11-01"], &args[..]].concat());
        assert_eq!(code(&out), 2, "{}", text(&out));
        assert_eq!(log_version(&table).unwrap(), now);
    }
    // The second run's files were removed by the restore; once vacuumed, restoring to the
    // version that held them is refused, naming them.
    let out = p.run(&["vacuum", "items", "--retain-hours", "0", "--force"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    // (The vacuum commits its start and end.)
    let now = log_version(&table).unwrap();
    let held = (before).to_string();
    let out = p.run(&[
        "restore",
        "items",
        "--window",
        "2026-11-01",
        "--to-version",
        &held,
    ]);
    assert_eq!(code(&out), 1, "{}", text(&out));
    assert!(
        text(&out).contains("no longer in storage"),
        "{}",
        text(&out)
    );
    assert!(text(&out).contains(".parquet"), "{}", text(&out));
    assert_eq!(log_version(&table).unwrap(), now);
    assert_eq!(table_rows(&table, d1).await, day1_then);
}

/// A weekly merge task over `items.csv` whose partition column holds days.
const WEEK_MERGE_TASK: &str = r#"sql = """
SELECT order_id, amount, CAST(day AS DATE) AS day
FROM items
WHERE CAST(day AS DATE) >= $window_start AND CAST(day AS DATE) < $window_end
"""
[target]
partition_by = "day"
[window]
grain = "week"
[sources.items]
uri = "items.csv"
[write]
mode = "merge"
key = ["order_id"]
"#;

/// Issue 36 §5: `optimize` never settled on week windows over day partitions: a week always
/// spans several partition values, so "≥ 2 files" was always true and every optimize
/// compacted again (`files_before: 4, files_after: 4`) and committed a new version.
#[tokio::test]
async fn second_optimize_of_week_windows_over_day_partitions_commits_nothing() {
    let p = TestProject::new();
    p.task("weekly", WEEK_MERGE_TASK);
    let table = p.table_dir("weekly");
    // Two merges into week 2026-W45 (Mon 11-02 … Sun 11-08): two files on each of four days.
    let days = ["2026-11-02", "2026-11-03", "2026-11-04", "2026-11-05"];
    for round in 0..2 {
        // Only new keys: the merge inserts them into new files beside the first ones.
        let mut csv = String::from("order_id,amount,day\n");
        for (d, day) in days.iter().enumerate() {
            for i in 0..3 {
                let id = round * 100 + d as i64 * 10 + i;
                csv.push_str(&format!("{id},{},{day}\n", id * 7));
            }
        }
        std::fs::write(p.path().join("items.csv"), &csv).unwrap();
        p.run_ok("weekly", "2026-W45");
    }
    let rows_before = table_rows(&table, "").await;
    assert_eq!(rows_before.len(), 24);
    let out = p.run(&["--output", "json", "optimize", "weekly"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let first = json_lines(&out).remove(0);
    assert_eq!(first["status"], "compacted", "{first}");
    assert_eq!(first["files_after"], 4, "{first}");
    assert_eq!(table_rows(&table, "").await, rows_before);
    let version = log_version(&table).unwrap();
    // One file per day now: nothing to compact, no commit, however often it is asked.
    for _ in 0..2 {
        let out = p.run(&["--output", "json", "optimize", "weekly"]);
        assert_eq!(code(&out), 0, "{}", text(&out));
        let again = json_lines(&out).remove(0);
        assert_eq!(again["status"], "skipped", "{again}");
        assert_eq!(again["files_before"], 4, "{again}");
        assert_eq!(log_version(&table).unwrap(), version);
    }
    assert_eq!(table_rows(&table, "").await, rows_before);
}

/// Defect (issue 37): `vacuum --retain-hours 9999999999999999` panicked (exit 101) converting
/// the hours to a duration. A retention no duration can hold is a usage error: exit 2, the
/// flag named, nothing deleted.
#[test]
fn vacuum_retain_hours_overflow_is_a_usage_error_not_a_panic() {
    let p = TestProject::new();
    p.run_ok(TASK, "1995-06-01");
    let table = p.table_dir(TASK);
    let before = data_files(&table);
    for args in [
        vec!["vacuum", TASK, "--retain-hours", "9999999999999999"],
        vec![
            "vacuum",
            TASK,
            "--retain-hours",
            "9999999999999999",
            "--force",
        ],
        vec![
            "vacuum",
            TASK,
            "--retain-hours",
            "18446744073709551615",
            "--dry-run",
        ],
    ] {
        let out = p.run(&args);
        assert_eq!(code(&out), 2, "{args:?}: {}", text(&out));
        let t = text(&out);
        assert!(t.contains("--retain-hours"), "{t}");
        assert!(!t.contains("panicked"), "{t}");
    }
    let out = p.run(&[
        "--output",
        "json",
        "vacuum",
        TASK,
        "--retain-hours",
        "9999999999999999",
    ]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    assert_eq!(json_lines(&out)[0]["retryable"], false, "{}", text(&out));
    assert_eq!(data_files(&table), before);
}

/// Rows `ids` of both 2026-11-01 and 2026-11-02 (ids + 1000 on the second day).
fn items_two_days(ids: std::ops::Range<i64>) -> String {
    let mut csv = String::from("order_id,amount,day\n");
    for i in ids {
        csv.push_str(&format!("{i},{},2026-11-01\n", i * 10));
        csv.push_str(&format!("{},{},2026-11-02\n", i + 1000, i * 10));
    }
    csv
}

/// Bug (found by trying: `optimize` racing a backfill doubled rows): `optimize` listed every
/// window's files once, then compacted window by window on the snapshot its last commit left,
/// which includes other writers' commits since the listing. A window another writer had
/// replaced meanwhile was compacted from its new rows while removing its old files: its new
/// file and a compacted copy of it both stayed live, and the conflict check saw nothing (the
/// commits were older than the snapshot the commit was built on). Each window's files are now
/// those of the snapshot it is read from and committed on: no row is doubled.
#[tokio::test]
#[cfg_attr(
    not(feature = "faults"),
    ignore = "needs the fault hooks: --features faults"
)]
async fn optimize_never_doubles_a_window_another_writer_replaced_after_the_listing() {
    use std::io::{BufRead, BufReader};
    let p = TestProject::new();
    p.task("items", MERGE_TASK);
    let table = p.table_dir("items");
    for ids in [1..6, 6..11, 11..16] {
        std::fs::write(p.path().join("items.csv"), items_two_days(ids)).unwrap();
        p.run_ok("items", "2026-11-01");
        p.run_ok("items", "2026-11-02");
    }
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin!("idemlake"))
        .arg("--project")
        .arg(p.path())
        .args(["--output", "json", "optimize", "items"])
        .env_remove("IDEMLAKE_LAKE")
        .env_remove("IDEMLAKE_PROJECT")
        .env("IDEMLAKE_TEST_FAULT", "pause-optimize-listed:3000")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    loop {
        let line = lines
            .next()
            .expect("optimize ended before it paused")
            .unwrap();
        if line.contains("paused at optimize-listed") {
            break;
        }
    }
    // Another writer replaces part of the second day while optimize waits (a merge rewrites
    // the file holding keys 1014 and 1015 and adds 1016, 1017).
    std::fs::write(p.path().join("items.csv"), items_two_days(14..18)).unwrap();
    p.run_ok("items", "2026-11-02");
    let out = child.wait_with_output().unwrap();
    assert!(
        [0, 1].contains(&code(&out)),
        "optimize: conflict at worst: {}",
        text(&out)
    );
    for (day, first) in [("2026-11-01", 1), ("2026-11-02", 1001)] {
        let rows = table_rows(&table, &format!("day = DATE '{day}'")).await;
        let want = if first == 1 { 15 } else { 17 };
        assert_eq!(rows.len(), want, "{day}: {rows:?}\n{}", text(&out));
    }
}

/// Found by trying: after another tool's checkpoint and log cleanup, `restore --to-version`
/// of a cleaned version failed with a raw "Not a Delta table: … No files in log segment", and
/// `--before-run` of a run whose commit was cleaned said a failed run commits nothing. Both
/// now say the log no longer holds those versions and which ones it can restore (exit 2).
#[tokio::test]
async fn restore_of_a_version_cleaned_from_the_log_says_which_versions_remain() {
    let p = TestProject::new();
    p.run_ok(TASK, "1995-06-01");
    p.run_ok(TASK, "1995-06-02");
    let run_id = json_lines(&p.run(&["--output", "json", "run", TASK, "--window", "1995-06-02"]))
        [0]["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    p.run_ok(TASK, "1995-06-03");
    let table = p.table_dir(TASK);
    let (t, _) = table_session(&table).await.unwrap();
    let newest = t.version().unwrap();
    checkpoint_and_clean_log(&t, &table, newest).await;
    let restore = |how: &[&str]| {
        let mut args = vec!["restore", TASK, "--window", "1995-06-02"];
        args.extend_from_slice(how);
        p.run(&args)
    };
    let out = restore(&["--to-version", "1"]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    let said = format!("the versions it can restore are {newest} to {newest}");
    assert!(text(&out).contains(&said), "{}", text(&out));
    let out = restore(&["--before-run", &run_id]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    assert!(
        text(&out).contains("cleaned up after a checkpoint"),
        "{}",
        text(&out)
    );
}
