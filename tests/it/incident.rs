//! The seed incident, reproduced: an append job that fails halfway and is retried leaves
//! duplicates; idemlake, with failures injected at every stage before a retry, holds exactly
//! the source's rows (and repairs the damaged window by overwriting it).

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::compute::cast;
use datafusion::prelude::SessionContext;
use deltalake::DeltaTableBuilder;
use deltalake::protocol::SaveMode;

use crate::common::*;

const DAY: &str = "1995-06-01";

/// The legacy job: append the window's rows to the table, in `chunks` commits.
pub async fn legacy_append(table: &std::path::Path, day: &str, fail_after: Option<usize>) {
    let url = url::Url::from_directory_path(table).unwrap();
    let mut t = DeltaTableBuilder::from_url(url).unwrap().build().unwrap();
    t.load().await.unwrap();
    let schema = t.snapshot().unwrap().snapshot().arrow_schema();
    let ctx = SessionContext::new();
    ctx.register_parquet(
        "lineitem",
        tpch_dir().join("lineitem.parquet").to_str().unwrap(),
        Default::default(),
    )
    .await
    .unwrap();
    let names: Vec<String> = schema
        .fields()
        .iter()
        .map(|f| {
            if f.name() == "ship_date" {
                "l_shipdate AS ship_date".to_string()
            } else {
                f.name().clone()
            }
        })
        .collect();
    let batches = ctx
        .sql(&format!("SELECT {} FROM lineitem WHERE l_shipdate = DATE '{day}' ORDER BY l_orderkey, l_linenumber", names.join(", ")))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    // One row per batch, so "halfway" is meaningful.
    let mut rows: Vec<RecordBatch> = Vec::new();
    for b in &batches {
        for i in 0..b.num_rows() {
            let cols = b
                .columns()
                .iter()
                .zip(schema.fields())
                .map(|(c, f)| cast(&c.slice(i, 1), f.data_type()).unwrap())
                .collect();
            rows.push(RecordBatch::try_new(Arc::new(schema.as_ref().clone()), cols).unwrap());
        }
    }
    let take = fail_after.unwrap_or(rows.len());
    // The job commits in chunks of 5 rows, as a streaming appender would.
    for chunk in rows[..take].chunks(5) {
        t = t
            .write(chunk.to_vec())
            .with_save_mode(SaveMode::Append)
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn append_job_retry_duplicates_rows_and_idemlake_repairs_the_window() {
    let p = TestProject::new();
    // idemlake creates the table with another window; the legacy job then owns DAY.
    p.run_ok("lineitem_by_ship_day", "1995-06-02");
    let table = p.table_dir("lineitem_by_ship_day");
    let expected = expected_lineitem_day(DAY).await;
    assert!(
        expected.len() > 10,
        "need a non-trivial window, got {}",
        expected.len()
    );

    // First attempt fails halfway; the retry appends the whole window again.
    legacy_append(&table, DAY, Some(expected.len() / 2)).await;
    legacy_append(&table, DAY, None).await;
    let damaged = table_rows(&table, &format!("ship_date = DATE '{DAY}'")).await;
    assert_eq!(
        damaged.len(),
        expected.len() + expected.len() / 2,
        "the incident: duplicates that look like real rows"
    );
    assert_ne!(damaged, expected);

    // idemlake re-runs the window: exactly the source's rows, one commit.
    let before = log_version(&table).unwrap();
    p.run_ok("lineitem_by_ship_day", DAY);
    assert_eq!(log_version(&table), Some(before + 1));
    assert_eq!(
        table_rows(&table, &format!("ship_date = DATE '{DAY}'")).await,
        expected
    );
    // The neighbouring window idemlake wrote is untouched.
    assert_eq!(
        table_rows(&table, "ship_date = DATE '1995-06-02'").await,
        expected_lineitem_day("1995-06-02").await
    );
}

#[tokio::test]
#[cfg_attr(
    not(feature = "faults"),
    ignore = "needs the fault hooks: --features faults"
)]
async fn failures_injected_mid_write_then_retry_hold_exactly_the_source_rows() {
    let p = TestProject::new();
    let table = p.table_dir("lineitem_by_ship_day");
    p.run_ok("lineitem_by_ship_day", "1995-06-02");
    let expected = expected_lineitem_day(DAY).await;
    let v0 = log_version(&table).unwrap();

    // Fail after the first batch, fail with every file written but before the commit, and
    // abort the process there (as kill -9 would): nothing is published each time.
    for fault in ["batch:1", "before-commit", "abort-before-commit"] {
        let out = p
            .cmd()
            .args(["run", "lineitem_by_ship_day", "--window", DAY])
            .env("IDEMLAKE_TEST_FAULT", fault)
            .output()
            .unwrap();
        assert_ne!(code(&out), 0, "{fault} should fail:\n{}", text(&out));
        if fault.starts_with("abort") {
            assert_eq!(
                out.status.code(),
                None,
                "aborted by a signal: {}",
                text(&out)
            );
        } else {
            assert_eq!(code(&out), 1, "{}", text(&out));
        }
        assert_eq!(
            log_version(&table),
            Some(v0),
            "{fault}: the table version must not move"
        );
        assert!(
            table_rows(&table, &format!("ship_date = DATE '{DAY}'"))
                .await
                .is_empty(),
            "{fault}: nothing visible"
        );
    }

    // The retry, and any number of re-runs, hold exactly the source's rows.
    for i in 1..=3 {
        p.run_ok("lineitem_by_ship_day", DAY);
        assert_eq!(log_version(&table), Some(v0 + i));
        assert_eq!(
            table_rows(&table, &format!("ship_date = DATE '{DAY}'")).await,
            expected,
            "after run {i}"
        );
    }
}

#[tokio::test]
#[cfg_attr(
    not(feature = "faults"),
    ignore = "needs the fault hooks: --features faults"
)]
async fn a_commit_whose_response_is_lost_is_not_applied_twice() {
    let p = TestProject::new();
    let table = p.table_dir("lineitem_by_ship_day");
    p.run_ok("lineitem_by_ship_day", "1995-06-02");
    let v0 = log_version(&table).unwrap();
    // The commit file is stored, but the writer is told the PUT failed.
    let out = p
        .cmd()
        .args(["-v", "run", "lineitem_by_ship_day", "--window", DAY])
        .env("IDEMLAKE_TEST_FAULT", "lose-commit-response")
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert!(
        text(&out).contains("not applying it twice"),
        "{}",
        text(&out)
    );
    assert_eq!(log_version(&table), Some(v0 + 1), "exactly one commit");
    assert_eq!(
        table_rows(&table, &format!("ship_date = DATE '{DAY}'")).await,
        expected_lineitem_day(DAY).await
    );
}
