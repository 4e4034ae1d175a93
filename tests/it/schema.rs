//! `[target] on_schema_change`: what a run does when its columns differ from the table's.

use crate::common::*;

/// A day task over `items.csv` selecting `cols`, with `policy` (and `mode`).
fn task(cols: &str, policy: &str, mode: &str) -> String {
    format!(
        r#"sql = """
SELECT {cols}
FROM items
WHERE CAST(day AS DATE) >= $window_start AND CAST(day AS DATE) < $window_end
"""
[target]
partition_by = "day"
on_schema_change = "{policy}"
[window]
grain = "day"
[sources.items]
uri = "items.csv"
[write]
mode = "{mode}"
key = ["order_id"]
"#
    )
}

const V1: &str = "order_id, amount, CAST(day AS DATE) AS day";

fn project() -> TestProject {
    let p = TestProject::new();
    let mut csv = String::from("order_id,amount,day\n");
    for day in ["2026-11-01", "2026-11-02"] {
        for i in 1..=4 {
            csv.push_str(&format!("{i},{},{day}\n", i * 10));
        }
    }
    std::fs::write(p.path().join("items.csv"), csv).unwrap();
    p
}

/// One value of a query over the table, read by delta-rs.
async fn scalar(p: &TestProject, sql: &str) -> String {
    let (_, ctx) = table_session(&p.table_dir("items")).await.unwrap();
    let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
    let mut rows = Vec::new();
    for b in &batches {
        for r in 0..b.num_rows() {
            let values: Vec<String> = (0..b.num_columns())
                .map(|c| arrow::util::display::array_value_to_string(b.column(c), r).unwrap())
                .collect();
            rows.push(values.join(" | "));
        }
    }
    rows.join(";")
}

#[tokio::test]
async fn by_default_any_column_difference_fails_with_a_readable_diff_and_writes_nothing() {
    let p = project();
    p.task("items", &task(V1, "fail", "overwrite"));
    p.run_ok("items", "2026-11-01");
    let table = p.table_dir("items");
    let version = log_version(&table).unwrap();
    for (cols, want) in [
        (
            "order_id, amount, amount * 2 AS doubled, CAST(day AS DATE) AS day",
            vec!["+ doubled", "new in the query"],
        ),
        (
            "CAST(order_id AS STRING) AS order_id, CAST(day AS DATE) AS day",
            vec!["- amount", "~ order_id: table long, query string"],
        ),
        (
            "amount, order_id, CAST(day AS DATE) AS day",
            vec!["column order: table order_id, amount, day; query amount, order_id, day"],
        ),
    ] {
        p.task("items", &task(cols, "fail", "overwrite"));
        for args in [
            vec!["run", "items", "--window", "2026-11-02"],
            vec!["validate", "items"],
        ] {
            let out = p.run(&args);
            assert_eq!(code(&out), 2, "{cols}: {}", text(&out));
            for w in &want {
                assert!(
                    text(&out).contains(w),
                    "{cols}: no `{w}` in\n{}",
                    text(&out)
                );
            }
            assert!(text(&out).contains("on_schema_change"), "{}", text(&out));
        }
        assert_eq!(log_version(&table).unwrap(), version, "{cols}");
    }
}

#[tokio::test]
async fn add_columns_adds_them_in_the_windows_own_commit_and_older_windows_read_null() {
    let p = project();
    p.task("items", &task(V1, "add_columns", "overwrite"));
    p.run_ok("items", "2026-11-01");
    let table = p.table_dir("items");
    let before = log_version(&table).unwrap();
    // A new column, listed first: written in the table's order, appended to its schema.
    let v2 = "amount * 2 AS doubled, order_id, amount, CAST(day AS DATE) AS day";
    p.task("items", &task(v2, "add_columns", "overwrite"));
    let out = p.run(&["validate", "items"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    p.run_ok("items", "2026-11-02");
    assert_eq!(log_version(&table).unwrap(), before + 1);
    let actions = commit_actions(&table, before + 1);
    let schema = actions
        .iter()
        .find_map(|a| a.get("metaData"))
        .expect("the schema change is in the window's commit")["schemaString"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(schema.contains("\"doubled\""), "{schema}");
    assert!(actions.iter().any(|a| a.get("add").is_some()));
    // Read by delta-rs: the older window reads NULL, the new one has the values.
    assert_eq!(
        scalar(
            &p,
            "SELECT count(*) FROM t WHERE day = DATE '2026-11-01' AND doubled IS NULL"
        )
        .await,
        "4"
    );
    assert_eq!(
        scalar(
            &p,
            "SELECT sum(doubled) FROM t WHERE day = DATE '2026-11-02'"
        )
        .await,
        "200"
    );
    // Re-running the older window fills it in; the schema is not changed again.
    p.run_ok("items", "2026-11-01");
    let actions = commit_actions(&table, before + 2);
    assert!(actions.iter().all(|a| a.get("metaData").is_none()));
    assert_eq!(
        scalar(&p, "SELECT count(*) FROM t WHERE doubled IS NULL").await,
        "0"
    );
    // A writer still on the old SQL after the change: refused clearly, nothing written.
    p.task("items", &task(V1, "add_columns", "overwrite"));
    let out = p.run(&["run", "items", "--window", "2026-11-01"]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    assert!(text(&out).contains("- doubled"), "{}", text(&out));
    assert_eq!(log_version(&table).unwrap(), before + 2);
    assert_eq!(
        scalar(&p, "SELECT count(*), sum(doubled) FROM t").await,
        "8 | 400"
    );
}

#[tokio::test]
async fn evolve_casts_a_narrower_type_up_and_refuses_a_wider_one() {
    let p = project();
    p.task("items", &task(V1, "evolve", "overwrite"));
    p.run_ok("items", "2026-11-01");
    let table = p.table_dir("items");
    let narrower = "order_id, CAST(amount AS INT) AS amount, CAST(day AS DATE) AS day";
    // add_columns does not cast.
    p.task("items", &task(narrower, "add_columns", "overwrite"));
    let out = p.run(&["run", "items", "--window", "2026-11-02"]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    assert!(
        text(&out).contains("~ amount: table long, query integer"),
        "{}",
        text(&out)
    );
    // evolve does, and the table keeps its type.
    p.task("items", &task(narrower, "evolve", "overwrite"));
    p.run_ok("items", "2026-11-02");
    let v = log_version(&table).unwrap();
    assert!(
        commit_actions(&table, v)
            .iter()
            .all(|a| a.get("metaData").is_none())
    );
    assert_eq!(scalar(&p, "SELECT sum(amount) FROM t").await, "200");
    // A wider (or different) type than the table's is refused.
    let wider = "order_id, CAST(amount AS DOUBLE) AS amount, CAST(day AS DATE) AS day";
    p.task("items", &task(wider, "evolve", "overwrite"));
    let out = p.run(&["run", "items", "--window", "2026-11-02"]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    assert!(text(&out).contains("typeWidening"), "{}", text(&out));
    assert_eq!(log_version(&table).unwrap(), v);
}

#[tokio::test]
async fn a_merge_task_adds_columns_too() {
    let p = project();
    p.task("items", &task(V1, "add_columns", "merge"));
    p.run_ok("items", "2026-11-01");
    let v2 = "order_id, amount, amount + 1 AS next, CAST(day AS DATE) AS day";
    p.task("items", &task(v2, "add_columns", "merge"));
    p.run_ok("items", "2026-11-02");
    assert_eq!(
        scalar(
            &p,
            "SELECT count(*), sum(next) FROM t WHERE day = DATE '2026-11-02'"
        )
        .await,
        "4 | 104"
    );
    assert_eq!(
        scalar(
            &p,
            "SELECT count(*) FROM t WHERE day = DATE '2026-11-01' AND next IS NULL"
        )
        .await,
        "4"
    );
}
