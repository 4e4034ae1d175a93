//! Taking over a table another job wrote: an unpartitioned Delta table that a nightly job
//! appended to with `write_deltalake(mode="append")`, one day appended twice by a retry, is
//! found, adopted (rewritten partitioned by the window column, every row kept, one commit),
//! repaired, and stays readable by deltalake, polars and DuckDB; the other days' rows are
//! untouched (compared with polars).

use std::process::Command;

use crate::common::*;

const TASK: &str = "lineitem_by_ship_day";
const DAYS: [&str; 4] = ["1995-06-01", "1995-06-02", "1995-06-03", "1995-06-04"];
const RETRIED: &str = "1995-06-03";

/// Each day's rows as polars reads them from `table`: day, rows, and a digest of the sorted
/// rows (so "untouched" means the same rows, not only as many).
fn per_day(table: &std::path::Path) -> Vec<String> {
    python_prints(&format!(
        r#"
import hashlib, polars as pl
df = pl.read_delta("{t}")
for day in sorted(df["ship_date"].unique().to_list()):
    d = df.filter(pl.col("ship_date") == day).sort(df.columns)
    print(day, d.height, hashlib.md5(d.write_csv().encode()).hexdigest())
"#,
        t = table.display()
    ))
    .lines()
    .map(str::to_string)
    .collect()
}

/// The legacy job's table: the days of `source` appended one commit each, unpartitioned, and
/// `RETRIED` appended a second time.
fn legacy_table(source: &std::path::Path, table: &std::path::Path) {
    let days: Vec<String> = DAYS.iter().map(|d| format!("'{d}'")).collect();
    python_prints(&format!(
        r#"
import datetime, polars as pl
from deltalake import write_deltalake
src = pl.read_delta("{src}")
for day in [{days}] + ['{retried}']:
    d = src.filter(pl.col("ship_date") == datetime.date.fromisoformat(day))
    write_deltalake("{t}", d.to_arrow(), mode="append")
"#,
        src = source.display(),
        t = table.display(),
        days = days.join(", "),
        retried = RETRIED
    ));
}

fn readers(table: &std::path::Path) -> serde_json::Value {
    let out = Command::new(python())
        .arg(repo().join("scripts/read_delta.py"))
        .arg(table)
        .arg("ship_date")
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", text(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn an_unpartitioned_appended_table_is_adopted_and_repaired_other_rows_untouched() {
    // What the job should have written: idemlake's own windows, in another project.
    let clean = TestProject::new();
    let out = clean.run(&["backfill", TASK, "--from", DAYS[0], "--to", DAYS[3]]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let expected = per_day(&clean.table_dir(TASK));

    let p = TestProject::new();
    let table = p.table_dir(TASK);
    legacy_table(&clean.table_dir(TASK), &table);
    let legacy = per_day(&table);
    assert_eq!(legacy.len(), 4);
    assert_ne!(legacy, expected, "the retried day holds its rows twice");
    let version = log_version(&table);

    // `status` reads windows from partitions: it says so rather than show every day missing.
    let out = p.run(&["status", TASK, "--from", DAYS[0], "--to", DAYS[3]]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    assert!(text(&out).contains("idemlake adopt"), "{}", text(&out));
    // Regression (`status` of every task stopped at the first table not yet adopted): that
    // task is named with why, and the project's other tasks are shown.
    let out = p.run(&["status", "--from", DAYS[0], "--to", DAYS[3]]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    let said = text(&out);
    assert!(
        said.contains(&format!("{TASK}: ")) && said.contains("idemlake adopt"),
        "{said}"
    );
    assert!(said.contains("orders_by_day"), "{said}");

    // Adopt: one commit, every row kept, partitioned by the window column.
    let out = p.run(&["--output", "json", "adopt", TASK]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let a = &json_lines(&out)[0];
    assert_eq!(a["status"], "adopted", "{a}");
    assert_eq!(a["partitioned_by"], serde_json::json!(["ship_date"]), "{a}");
    assert_eq!(a["partitioned_by_before"], serde_json::json!([]), "{a}");
    assert_eq!(a["first_window"], DAYS[0], "{a}");
    assert_eq!(a["last_window"], DAYS[3], "{a}");
    assert_eq!(log_version(&table), version.map(|v| v + 1));
    assert_eq!(per_day(&table), legacy, "adopt changed a row");
    // Regression (`backfill --missing` re-ran every window another tool had published, and a
    // window whose source was gone would have been cleared): they hold rows, not missing.
    let out = p.run(&[
        "backfill",
        TASK,
        "--from",
        DAYS[0],
        "--to",
        DAYS[3],
        "--missing",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert!(text(&out).contains(": 0 windows"), "{}", text(&out));
    assert_eq!(log_version(&table), version.map(|v| v + 1));
    // Adopting again writes nothing.
    let out = p.run(&["--output", "json", "adopt", TASK]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert_eq!(json_lines(&out)[0]["status"], "already");
    assert_eq!(log_version(&table), version.map(|v| v + 1));

    // Found: the retried day, and only it.
    let out = p.run(&[
        "--output", "json", "audit", TASK, "--from", DAYS[0], "--to", DAYS[3],
    ]);
    assert_eq!(code(&out), 4, "{}", text(&out));
    let damaged: Vec<String> = json_lines(&out)
        .iter()
        .filter(|w| w["status"] == "damaged")
        .map(|w| w["window"]["label"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(damaged, [RETRIED]);

    // Repaired: the retried day as the source says, the others untouched.
    let out = p.run(&["repair", TASK, "--from", DAYS[0], "--to", DAYS[3]]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let after = per_day(&table);
    assert_eq!(after, expected);
    for (before, now) in legacy.iter().zip(&after) {
        if !before.starts_with(RETRIED) {
            assert_eq!(before, now, "a day repair should not have touched");
        }
    }
    // Readable by the other tools, which agree.
    let r = readers(&table);
    let rows: u64 = expected
        .iter()
        .map(|l| l.split(' ').nth(1).unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(r["rows"], rows, "{r}");
}

/// `repair` of a table that another job appended to, not partitioned by the window column:
/// the retried day found by `audit` is replaced in place by its data (one delta-rs commit, a
/// `replaceWhere` on the window column), the other days untouched, the table still
/// unpartitioned and readable by deltalake, polars and DuckDB alike.
#[test]
fn an_unpartitioned_appended_table_is_repaired_in_place_other_rows_untouched() {
    let clean = TestProject::new();
    let out = clean.run(&["backfill", TASK, "--from", DAYS[0], "--to", DAYS[3]]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let expected = per_day(&clean.table_dir(TASK));
    let p = TestProject::new();
    let table = p.table_dir(TASK);
    legacy_table(&clean.table_dir(TASK), &table);
    let legacy = per_day(&table);
    assert_ne!(legacy, expected, "the retried day holds its rows twice");
    let version = log_version(&table);

    let out = p.run(&[
        "--output", "json", "repair", TASK, "--from", DAYS[0], "--to", DAYS[3],
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let lines = json_lines(&out);
    let repaired: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|r| r.get("rows_written").is_some())
        .collect();
    assert_eq!(repaired.len(), 1, "{}", text(&out));
    let r = repaired[0];
    assert_eq!(r["window"]["label"], RETRIED, "{r}");
    assert_eq!(r["status"], "ok", "{r}");
    let checks: Vec<&str> = r["reconciliation"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["check"].as_str().unwrap())
        .collect();
    assert_eq!(
        checks,
        ["source_rows", "rows_committed", "rows_outside_kept"],
        "{r}"
    );
    // One commit; the days as the source says; the others untouched.
    assert_eq!(log_version(&table), version.map(|v| v + 1));
    let after = per_day(&table);
    assert_eq!(after, expected);
    for (before, now) in legacy.iter().zip(&after) {
        if !before.starts_with(RETRIED) {
            assert_eq!(before, now, "a day repair should not have touched");
        }
    }
    // Still as the other job wrote it (unpartitioned), and readable by the other tools.
    let partitioned = python_prints(&format!(
        "import deltalake; print(deltalake.DeltaTable('{}').metadata().partition_columns)",
        table.display()
    ));
    assert_eq!(partitioned, "[]");
    let rows: u64 = expected
        .iter()
        .map(|l| l.split(' ').nth(1).unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(readers(&table)["rows"], rows);
    // Audited again: clean.
    let out = p.run(&["audit", TASK, "--from", DAYS[0], "--to", DAYS[3]]);
    assert_eq!(code(&out), 0, "{}", text(&out));
}

/// A table without the window column, or with one of another type (a timestamp for a day
/// task: a partition per row), is refused by name (exit 2), nothing written.
#[test]
fn adopting_a_table_without_the_window_column_is_refused_by_name() {
    let p = TestProject::new();
    let table = p.table_dir(TASK);
    python_prints(&format!(
        r#"
import polars as pl
from deltalake import write_deltalake
write_deltalake("{t}", pl.DataFrame({{"id": [1, 2]}}).to_arrow(), mode="append")
"#,
        t = table.display()
    ));
    let out = p.run(&["adopt", TASK]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    assert!(
        text(&out).contains("no column `ship_date`"),
        "{}",
        text(&out)
    );
    assert_eq!(log_version(&table), Some(0));

    let p = TestProject::new();
    let table = p.table_dir(TASK);
    python_prints(&format!(
        r#"
import datetime, polars as pl
from deltalake import write_deltalake
utc = datetime.timezone.utc
df = pl.DataFrame({{"ship_date": [datetime.datetime(1995, 6, 1, 10, tzinfo=utc), datetime.datetime(1995, 6, 1, 11, tzinfo=utc)]}})
write_deltalake("{t}", df.to_arrow(), mode="append")
"#,
        t = table.display()
    ));
    let out = p.run(&["adopt", TASK]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    assert!(
        text(&out).contains("must be a DATE for day windows"),
        "{}",
        text(&out)
    );
    assert_eq!(log_version(&table), Some(0));
}
