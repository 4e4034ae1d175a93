//! `[checks]`: data checks on each window's rows before its commit (issue 20), and `check`
//! over what is already published. Rows are read back with delta-rs, not idemlake.

use crate::common::*;

/// Orders per day; each day from the 2nd on breaks exactly one check.
const ORDERS: &str = "order_id,customer_id,status,amount,day
1,10,paid,20,2026-11-01
2,11,paid,30,2026-11-01
3,,paid,20,2026-11-02
4,10,paid,25,2026-11-02
5,10,paid,20,2026-11-03
5,11,paid,21,2026-11-03
6,10,lost,20,2026-11-04
7,11,paid,500,2026-11-05
8,99,paid,20,2026-11-07
9,10,cancelled,40,2026-11-08
";

/// The check each day breaks (2026-11-06 has no rows: `row_count`).
const BROKEN: [(&str, &str); 7] = [
    ("2026-11-02", "not_null(customer_id)"),
    ("2026-11-03", "unique(order_id)"),
    ("2026-11-04", "accepted_values(status)"),
    ("2026-11-05", "range(amount)"),
    ("2026-11-06", "row_count"),
    ("2026-11-07", "relationships(customer_id)"),
    ("2026-11-08", "cancelled_orders_are_free"),
];

const CHECKS: &str = r#"
[checks]
not_null = ["customer_id"]
unique = [["order_id"]]
accepted_values = { status = ["paid", "cancelled"] }
range = { amount = { min = 0, max = 100 } }
row_count = { min = 1 }
relationships = { customer_id = "customers.customer_id" }
WARN

[[checks.sql]]
name = "cancelled_orders_are_free"
sql = "SELECT * FROM output WHERE status = 'cancelled' AND amount > 0"

[[checks.sql]]
name = "as_many_rows_as_the_source"
sql = """
SELECT count(*) AS source_rows FROM orders
WHERE CAST(day AS DATE) >= $window_start AND CAST(day AS DATE) < $window_end
HAVING count(*) <> (SELECT count(*) FROM output)
"""
"#;

fn orders_task(mode: &str, checks: &str) -> String {
    format!(
        r#"sql = """
SELECT order_id, CAST(customer_id AS BIGINT) AS customer_id, status,
       CAST(amount AS BIGINT) AS amount, CAST(day AS DATE) AS day
FROM orders
WHERE CAST(day AS DATE) >= $window_start AND CAST(day AS DATE) < $window_end
"""
[target]
partition_by = "day"
[window]
grain = "day"
[sources.orders]
uri = "orders.csv"
[write]
mode = "{mode}"
key = ["order_id"]
{checks}
"#
    )
}

/// A project with the orders and a published `customers` table (ids 10 and 11).
fn project(warn: &str) -> TestProject {
    let p = TestProject::new();
    std::fs::write(p.path().join("orders.csv"), ORDERS).unwrap();
    std::fs::write(
        p.path().join("customers.csv"),
        "customer_id,name,since\n10,Ada,2026-01-01\n11,Bo,2026-01-01\n",
    )
    .unwrap();
    p.task(
        "customers",
        r#"sql = """
SELECT CAST(customer_id AS BIGINT) AS customer_id, name, CAST(since AS DATE) AS since
FROM customers
WHERE CAST(since AS DATE) >= $window_start AND CAST(since AS DATE) < $window_end
"""
[target]
partition_by = "since"
[window]
grain = "day"
[sources.customers]
uri = "customers.csv"
"#,
    );
    p.run_ok("customers", "2026-01-01");
    p.task(
        "orders",
        &orders_task("overwrite", &CHECKS.replace("WARN", warn)),
    );
    p
}

/// `run TASK --window W` with JSON output.
fn run_json(p: &TestProject, task: &str, window: &str) -> std::process::Output {
    p.run(&["--output", "json", "run", task, "--window", window])
}

/// The result of check `name` in a report.
fn check_result<'a>(report: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    report["data_checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == name)
        .unwrap_or_else(|| panic!("no check {name} in {report}"))
}

fn failed_checks(report: &serde_json::Value) -> Vec<String> {
    report["data_checks"]
        .as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .filter(|c| c["ok"] == false)
        .map(|c| c["check"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn each_builtin_and_custom_check_fails_its_window_and_publishes_nothing() {
    let p = project("");
    let table = p.table_dir("orders");
    let out = run_json(&p, "orders", "2026-11-01");
    assert_eq!(code(&out), 0, "{}", text(&out));
    let ok = &json_lines(&out)[0];
    assert_eq!(ok["data_checks"].as_array().unwrap().len(), 8, "{ok}");
    assert!(failed_checks(ok).is_empty(), "{ok}");
    assert_eq!(
        table_rows(&table, "day = DATE '2026-11-01'").await,
        vec![
            "amount=20|customer_id=10|day=2026-11-01|order_id=1|status=paid",
            "amount=30|customer_id=11|day=2026-11-01|order_id=2|status=paid"
        ]
    );
    let version = log_version(&table);
    for (day, check) in BROKEN {
        let out = run_json(&p, "orders", day);
        assert_eq!(code(&out), 6, "{day}: {}", text(&out));
        let r = &json_lines(&out)[0];
        assert_eq!(failed_checks(r), vec![check.to_string()], "{day}: {r}");
        assert_eq!(r["published"], false, "{r}");
        assert_eq!(r["retryable"], false, "{r}");
        let failed = check_result(r, check);
        assert!(failed["failing_rows"].as_u64().unwrap() >= 1, "{failed}");
        assert!(!failed["sample"].as_array().unwrap().is_empty(), "{failed}");
        assert_eq!(log_version(&table), version, "{day} committed");
        assert!(
            table_rows(&table, &format!("day = DATE '{day}'"))
                .await
                .is_empty(),
            "{day} holds rows"
        );
    }
    // The sample shows the offending row itself.
    let out = run_json(&p, "orders", "2026-11-05");
    let r = &json_lines(&out)[0];
    let range = &r["data_checks"].as_array().unwrap()[3];
    assert_eq!(range["check"], "range(amount)");
    assert_eq!(range["sample"][0]["order_id"], "7", "{range}");
    assert_eq!(range["sample"][0]["amount"], "500", "{range}");
    // Staged files of the rejected windows are gone: only the first day's file is on disk.
    let files = walk_parquet(&table);
    assert_eq!(files.len(), 1, "{files:?}");
}

fn walk_parquet(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk_parquet(&p));
        } else if p.extension().is_some_and(|x| x == "parquet") {
            out.push(p);
        }
    }
    out
}

#[tokio::test]
async fn a_warn_check_publishes_records_and_shows_in_status() {
    let p = project(r#"warn = ["range"]"#);
    let table = p.table_dir("orders");
    let out = run_json(&p, "orders", "2026-11-05");
    assert_eq!(code(&out), 0, "{}", text(&out));
    let r = &json_lines(&out)[0];
    assert_eq!(r["status"], "warned", "{r}");
    assert_eq!(r["published"], true, "{r}");
    assert_eq!(failed_checks(r), vec!["range(amount)"]);
    assert_eq!(
        table_rows(&table, "day = DATE '2026-11-05'").await,
        vec!["amount=500|customer_id=11|day=2026-11-05|order_id=7|status=paid"]
    );
    // The commit records the checks next to the reconciliation.
    let v = log_version(&table).unwrap();
    let info = commit_actions(&table, v)
        .into_iter()
        .find_map(|a| a.get("commitInfo").cloned())
        .unwrap();
    assert!(
        info.to_string().contains("range(amount)"),
        "commitInfo has no data checks: {info}"
    );
    // Offending rows are in the report (and run log), never in the Delta log.
    assert!(
        !r["data_checks"][3]["sample"].as_array().unwrap().is_empty(),
        "{r}"
    );
    assert!(!info.to_string().contains("sample"), "{info}");
    let out = p.run(&[
        "--output",
        "json",
        "status",
        "orders",
        "--from",
        "2026-11-05",
        "--to",
        "2026-11-05",
    ]);
    let s = &json_lines(&out)[0];
    assert_eq!(s["state"], "published", "{s}");
    assert_eq!(s["run_status"], "warned", "{s}");
}

#[tokio::test]
async fn check_reports_exactly_the_windows_that_violate() {
    let p = project("");
    // Publish every day without checks, then give the task its checks.
    p.task("orders", &orders_task("overwrite", ""));
    let out = p.run(&[
        "backfill",
        "orders",
        "--from",
        "2026-11-01",
        "--to",
        "2026-11-08",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let version = log_version(&p.table_dir("orders"));
    p.task(
        "orders",
        &orders_task("overwrite", &CHECKS.replace("WARN", "")),
    );
    let out = p.run(&[
        "--output",
        "json",
        "check",
        "orders",
        "--from",
        "2026-11-01",
        "--to",
        "2026-11-09",
    ]);
    assert_eq!(code(&out), 6, "{}", text(&out));
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 9, "{}", text(&out));
    let by_day = |d: &str| {
        lines
            .iter()
            .find(|l| l["window"]["label"] == d)
            .unwrap_or_else(|| panic!("no line for {d}"))
    };
    assert_eq!(by_day("2026-11-01")["status"], "ok");
    assert_eq!(by_day("2026-11-09")["status"], "unpublished");
    for (day, check) in BROKEN {
        let l = by_day(day);
        assert_eq!(l["status"], "failed", "{l}");
        assert_eq!(failed_checks(l), vec![check.to_string()], "{day}: {l}");
    }
    assert_eq!(log_version(&p.table_dir("orders")), version, "check wrote");
    // A check that only warns does not fail the command.
    p.task(
        "orders",
        &orders_task(
            "overwrite",
            "[checks]\nrange = { amount = { max = 100 } }\nwarn = [\"range\"]",
        ),
    );
    let out = p.run(&[
        "check",
        "orders",
        "--from",
        "2026-11-01",
        "--to",
        "2026-11-08",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert!(text(&out).contains("1 warned"), "{}", text(&out));
    // A check the query cannot satisfy is invalid input for `check` too.
    p.task(
        "orders",
        &orders_task("overwrite", "[checks]\nnot_null = [\"nope\"]"),
    );
    let out = p.run(&[
        "check",
        "orders",
        "--from",
        "2026-11-01",
        "--to",
        "2026-11-08",
    ]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    assert!(text(&out).contains("no column `nope`"), "{}", text(&out));
}

#[tokio::test]
async fn merge_checks_run_on_the_merged_window() {
    let p = project("");
    let csv = "order_id,customer_id,status,amount,day\n1,10,paid,20,2026-11-01\n2,10,paid,20,2026-11-01\n3,10,paid,20,2026-11-01\n";
    std::fs::write(p.path().join("orders.csv"), csv).unwrap();
    p.task("orders", &orders_task("merge", ""));
    p.run_ok("orders", "2026-11-01");
    // The source now has order 3 changed and order 4 new: the merge leaves 4 rows.
    let csv = "order_id,customer_id,status,amount,day\n3,11,paid,25,2026-11-01\n4,10,paid,20,2026-11-01\n";
    std::fs::write(p.path().join("orders.csv"), csv).unwrap();
    // The staged rows alone are 2; the window readers will see holds 4.
    p.task(
        "orders",
        &orders_task(
            "merge",
            "[checks]\nrow_count = { min = 4, max = 4 }\nunique = [[\"order_id\"]]",
        ),
    );
    let out = run_json(&p, "orders", "2026-11-01");
    assert_eq!(code(&out), 0, "{}", text(&out));
    let table = p.table_dir("orders");
    assert_eq!(table_rows(&table, "true").await.len(), 4);
    // A check that the merged window breaks fails it and changes nothing.
    let version = log_version(&table);
    std::fs::write(
        p.path().join("orders.csv"),
        "order_id,customer_id,status,amount,day\n5,10,paid,20,2026-11-01\n",
    )
    .unwrap();
    p.task(
        "orders",
        &orders_task("merge", "[checks]\nrow_count = { max = 4 }"),
    );
    let out = run_json(&p, "orders", "2026-11-01");
    assert_eq!(code(&out), 6, "{}", text(&out));
    assert_eq!(
        json_lines(&out)[0]["data_checks"][0]["sample"][0]["row_count"],
        "5"
    );
    assert_eq!(log_version(&table), version);
    assert_eq!(table_rows(&table, "true").await.len(), 4);
}

#[tokio::test]
async fn a_check_on_a_column_the_query_lacks_is_invalid_input() {
    let p = project("");
    p.task(
        "orders",
        &orders_task("overwrite", "[checks]\nnot_null = [\"customer\"]"),
    );
    for args in [
        vec!["validate", "orders"],
        vec!["run", "orders", "--window", "2026-11-01"],
    ] {
        let out = p.run(&args);
        assert_eq!(code(&out), 2, "{args:?}: {}", text(&out));
        assert!(
            text(&out).contains("[checks] not_null(customer): the query has no column `customer`"),
            "{}",
            text(&out)
        );
    }
    assert!(log_version(&p.table_dir("orders")).is_none());
    p.task(
        "orders",
        &orders_task(
            "overwrite",
            "[[checks.sql]]\nname = \"bad\"\nsql = \"SELECT * FROM output WHERE nope > 1\"",
        ),
    );
    let out = p.run(&["run", "orders", "--window", "2026-11-01"]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    assert!(log_version(&p.table_dir("orders")).is_none());
}

/// Hour partitions are TIMESTAMP values whose directory names hold `%` (percent-encoded on
/// disk): the checks read the staged files by the paths the writer recorded, and see the
/// partition column with its value.
#[tokio::test]
async fn checks_read_hour_partitions_back_from_their_staged_files() {
    let p = TestProject::new();
    std::fs::write(
        p.path().join("events.csv"),
        "event_id,ts,amount\n1,2026-10-25T00:10:00Z,5\n2,2026-10-25T00:20:00Z,8\n3,2026-10-25T01:50:00Z,3\n",
    )
    .unwrap();
    let task = |checks: &str| {
        format!(
            r#"sql = """
SELECT event_id, amount, date_trunc('hour', CAST(ts AS TIMESTAMP)) AS hour
FROM events
WHERE CAST(ts AS TIMESTAMP) >= $window_start_ts AND CAST(ts AS TIMESTAMP) < $window_end_ts
"""
[target]
partition_by = "hour"
[window]
grain = "hour"
[sources.events]
uri = "events.csv"
{checks}
"#
        )
    };
    p.task(
        "events",
        &task("[checks]\nnot_null = [\"hour\"]\nrow_count = { min = 2, max = 2 }"),
    );
    let out = run_json(&p, "events", "2026-10-25T00");
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert!(failed_checks(&json_lines(&out)[0]).is_empty());
    // The partition value is the window's hour, as the check sees it.
    p.task(
        "events",
        &task("[[checks.sql]]\nname = \"hour_is_the_window\"\nsql = \"SELECT * FROM output WHERE hour IS DISTINCT FROM CAST($window_start_ts AS TIMESTAMP)\""),
    );
    let out = run_json(&p, "events", "2026-10-25T01");
    assert_eq!(code(&out), 0, "{}", text(&out));
    let r = &json_lines(&out)[0];
    assert!(failed_checks(r).is_empty(), "{r}");
    assert_eq!(r["rows_written"], 1);
}

/// Review finding: relationship tables were registered under names made from the check's
/// name with every non-alphanumeric character replaced, so `relationships("cust-id")` and
/// `relationships(cust_id)` shared one table and the first compared against the second's.
#[tokio::test]
async fn two_relationships_whose_names_look_alike_each_check_their_own_table() {
    let p = project("");
    std::fs::write(
        p.path().join("vips.csv"),
        "customer_id,name,since\n20,Cy,2026-01-01\n21,Di,2026-01-01\n",
    )
    .unwrap();
    let customers = std::fs::read_to_string(p.path().join("tables/customers.toml")).unwrap();
    p.task("vips", &customers.replace("customers", "vips"));
    p.run_ok("vips", "2026-01-01");
    p.task(
        "pairs",
        r#"sql = """
SELECT order_id, CAST(customer_id AS BIGINT) AS "cust-id", CAST(customer_id AS BIGINT) + 10 AS cust_id,
       CAST(day AS DATE) AS day
FROM orders
WHERE CAST(day AS DATE) >= $window_start AND CAST(day AS DATE) < $window_end
"""
[target]
partition_by = "day"
[window]
grain = "day"
[sources.orders]
uri = "orders.csv"
[checks]
relationships = { "cust-id" = "customers.customer_id", cust_id = "vips.customer_id" }
"#,
    );
    // 2026-11-01: customers 10 and 11, i.e. vips 20 and 21: both checks pass.
    let out = run_json(&p, "pairs", "2026-11-01");
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert!(
        failed_checks(&json_lines(&out)[0]).is_empty(),
        "{}",
        text(&out)
    );
}

/// Review finding: `unique` counted rows with a NULL key as duplicates of each other; as in
/// dbt, a NULL key is not compared (`not_null` is the check for it).
#[tokio::test]
async fn unique_does_not_compare_null_keys() {
    let p = project("");
    std::fs::write(
        p.path().join("orders.csv"),
        "order_id,customer_id,status,amount,day\n1,,paid,20,2026-11-01\n2,,paid,30,2026-11-01\n",
    )
    .unwrap();
    p.task(
        "orders",
        &orders_task("overwrite", "[checks]\nunique = [[\"customer_id\"]]"),
    );
    let out = run_json(&p, "orders", "2026-11-01");
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert_eq!(
        check_result(&json_lines(&out)[0], "unique(customer_id)")["ok"],
        true
    );
}

/// Review finding: `validate` did not plan relationship checks, so a relationship to a column
/// the other table lacks was found only after the window had been staged.
#[tokio::test]
async fn validate_plans_relationships_against_the_other_table() {
    let p = project("");
    p.task(
        "orders",
        &orders_task(
            "overwrite",
            "[checks]\nrelationships = { customer_id = \"customers.no_such_column\" }",
        ),
    );
    let out = p.run(&["validate", "orders"]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    assert!(
        text(&out).contains("relationships(customer_id)"),
        "{}",
        text(&out)
    );
    let out = p.run(&["run", "orders", "--window", "2026-11-01"]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    assert!(log_version(&p.table_dir("orders")).is_none());
}

/// A `range` bound the column's type cannot hold (a string for a BIGINT or a DATE) is the
/// user's mistake: `validate` and `run` refuse it before any data is read (exit 2, not
/// retryable), in one sentence naming the check, the column and the bound.
#[tokio::test]
async fn a_range_bound_of_the_wrong_type_is_invalid_input() {
    let p = project("");
    for (checks, named) in [
        (
            "[checks]\nrange = { amount = { max = \"abc\" } }",
            "[checks] range(amount): max 'abc' is not a value of column `amount`",
        ),
        (
            "[checks]\nrange = { day = { min = \"notadate\" } }",
            "[checks] range(day): min 'notadate' is not a value of column `day`",
        ),
        (
            "[checks]\naccepted_values = { amount = [1, \"x\"] }",
            "[checks] accepted_values(amount): 'x' is not a value of column `amount`",
        ),
        (
            "[checks]\nrange = { status = { max = 5 } }",
            "[checks] range(status): max 5 is not a value of column `status`",
        ),
    ] {
        p.task("orders", &orders_task("overwrite", checks));
        let out = p.run(&["validate", "orders"]);
        assert_eq!(code(&out), 2, "validate {checks}: {}", text(&out));
        assert!(text(&out).contains(named), "{}", text(&out));
        let out = run_json(&p, "orders", "2026-11-01");
        assert_eq!(code(&out), 2, "run {checks}: {}", text(&out));
        assert!(text(&out).contains(named), "{}", text(&out));
        assert_eq!(json_lines(&out)[0]["retryable"], false, "{}", text(&out));
    }
    assert!(log_version(&p.table_dir("orders")).is_none());
}

/// A failed check's sample prints TIMESTAMP values as RFC 3339 text, in the column's time zone
/// when it has one (they were microseconds since 1970, `"801878400000000"`), as it prints
/// DATE values as dates.
#[tokio::test]
async fn timestamps_in_a_checks_sample_are_rfc3339_text() {
    let p = project("");
    let sql = r#"
[[checks.sql]]
name = "late"
sql = "SELECT order_id, CAST(day AS TIMESTAMP) AS at, CAST(day AS TIMESTAMP) AT TIME ZONE 'Europe/Berlin' AS berlin, day FROM output WHERE order_id = 1"
"#;
    p.task("orders", &orders_task("overwrite", sql));
    let out = run_json(&p, "orders", "2026-11-01");
    assert_eq!(code(&out), 6, "{}", text(&out));
    let report = json_lines(&out).remove(0);
    let sample = &check_result(&report, "late")["sample"][0];
    assert_eq!(sample["day"], "2026-11-01", "{sample}");
    assert_eq!(sample["at"], "2026-11-01T00:00:00+00:00", "{sample}");
    assert_eq!(sample["berlin"], "2026-11-01T00:00:00+01:00", "{sample}");
}
