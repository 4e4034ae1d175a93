//! PostgreSQL sources (issue 53), against a real server on loopback (`scripts/pg-server`).

use std::collections::HashMap;
use std::sync::OnceLock;

use crate::common::*;

/// `scripts/pg-server start`, once per test process; its `env` lines.
pub(crate) fn pg_env() -> &'static HashMap<String, String> {
    static ENV: OnceLock<HashMap<String, String>> = OnceLock::new();
    ENV.get_or_init(|| server_env("pg-server"))
}

/// Run SQL as the test role (`scripts/pg-server psql`).
fn psql(sql: &str) -> String {
    let out = std::process::Command::new(repo().join("scripts/pg-server"))
        .args(["psql", "-Atq", "-c", sql])
        .output()
        .unwrap();
    assert!(out.status.success(), "{sql}: {}", text(&out));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A fresh `orders` table of `rows` rows, one every 97 seconds from 2026-11-01 UTC, with an
/// index on `created_at`; its name.
fn orders(rows: i64) -> String {
    pg_env();
    let name = format!("orders_{}", uuid::Uuid::new_v4().simple());
    psql(&format!(
        "CREATE TABLE {name} (id bigint PRIMARY KEY, customer text, amount numeric(12,2), \
         created_at timestamptz NOT NULL, status text, ref uuid, extra jsonb, paid boolean, \
         due date); \
         CREATE INDEX ON {name} (created_at); \
         INSERT INTO {name} SELECT i, 'c' || (i % 97), round((i % 1000) * 1.37, 2), \
         timestamptz '2026-11-01 00:00:00+00' + i * interval '97 seconds', \
         CASE WHEN i % 3 = 0 THEN 'paid' ELSE 'open' END, \
         md5(i::text)::uuid, jsonb_build_object('n', i), i % 2 = 0, date '2026-12-01' + (i % 30) \
         FROM generate_series(1, {rows}) i"
    ));
    name
}

/// `--output json run orders_daily --window 2026-11-01`.
const RUN_DAY: [&str; 6] = [
    "--output",
    "json",
    "run",
    "orders_daily",
    "--window",
    "2026-11-01",
];

const TASK: &str = r#"
sql = """
SELECT id, customer, amount, created_at, CAST(created_at AS DATE) AS day, status, ref, extra, paid, due
FROM orders
WHERE created_at >= $window_start_ts AND created_at < $window_end_ts
"""

[target]
partition_by = "day"

[window]
grain = "day"
timezone = "UTC"

[sources.orders]
format = "postgres"
uri = "URI"
table = "public.TABLE"
"#;

fn project(table: &str) -> TestProject {
    let p = TestProject::new();
    let uri = pg_env()["IDEMLAKE_PG_URL"].clone();
    p.task(
        "orders_daily",
        &TASK.replace("URI", &uri).replace("TABLE", table),
    );
    p
}

/// The test database's URI with its password, for polars' `read_database_uri`.
fn db_uri() -> String {
    let e = pg_env();
    format!(
        "postgresql://{}:{}@{}:{}/{}",
        e["PGUSER"], e["PGPASSWORD"], e["PGHOST"], e["PGPORT"], e["PGDATABASE"]
    )
}

/// Per day of `first..=last`: (rows, sum of amount as text, sum of id) of the published table
/// (polars' Delta reader) and of the same query over the database (polars' `read_database_uri`).
fn oracle(p: &TestProject, table: &str, first: &str, last: &str) -> (String, String) {
    let uri = db_uri();
    let out = python_prints(&format!(
        r#"
import datetime as dt, polars as pl
lo, hi = dt.date.fromisoformat("{first}"), dt.date.fromisoformat("{last}")
src = pl.read_database_uri(
    "SELECT id, amount, created_at FROM public.{table} "
    "WHERE created_at >= '{first}T00:00:00Z' AND created_at < timestamptz '{last}T00:00:00Z' + interval '1 day'",
    "{uri}")
src = src.with_columns(pl.col("created_at").dt.date().alias("day"))
out = pl.read_delta("{dir}").filter((pl.col("day") >= lo) & (pl.col("day") <= hi))
def per_day(df):
    g = df.group_by("day").agg(pl.len().alias("n"), pl.col("amount").cast(pl.Float64).sum().round(2).alias("a"), pl.col("id").sum().alias("i")).sort("day")
    return ";".join(f"{{r[0]}}:{{r[1]}}:{{r[2]:.2f}}:{{r[3]}}" for r in g.iter_rows())
print(per_day(src))
print(per_day(out))
"#,
        dir = p.table_dir("orders_daily").display()
    ));
    let (a, b) = out.split_once('\n').unwrap();
    (a.to_string(), b.to_string())
}

fn run(p: &TestProject, args: &[&str]) -> std::process::Output {
    p.cmd()
        .env("PGPASSWORD", &pg_env()["PGPASSWORD"])
        .args(args)
        .output()
        .unwrap()
}

/// A day window and a backfill from a live table publish exactly the rows polars reads from
/// the database for the same windows, every column type mapped (numeric to decimal,
/// timestamptz to UTC, uuid and jsonb as text, bool, date).
#[test]
fn a_day_window_and_a_backfill_publish_the_rows_polars_reads() {
    let table = orders(20_000);
    let p = project(&table);
    let out = run(
        &p,
        &[
            "--output",
            "json",
            "run",
            "orders_daily",
            "--window",
            "2026-11-03",
        ],
    );
    assert_eq!(code(&out), 0, "{}", text(&out));
    let r = &json_lines(&out)[0];
    assert_eq!(r["rows_written"], 891, "{r}");
    // The check says how it was computed: by the database, the statement it sent.
    let checks = checks_of(r);
    let count = checks.iter().find(|c| c.0 == "source_rows").unwrap();
    assert_eq!(
        (count.1.as_str(), count.2.as_str()),
        ("891", "database"),
        "{checks:?}"
    );
    assert!(
        count.3.starts_with("PostgreSQL: SELECT count(*)"),
        "{checks:?}"
    );
    // The run record pins the snapshot read: its position as the server names it.
    let table_dir = p.table_dir("orders_daily");
    let version = r["table_version"].as_u64().unwrap();
    let record = commit_actions(&table_dir, version)
        .into_iter()
        .find_map(|a| a["commitInfo"]["idemlake"].as_object().cloned())
        .expect("a run record in the commit");
    let pinned = record["sources"][0]["snapshot"]
        .as_str()
        .unwrap_or_default();
    let (txids, lsn) = pinned
        .strip_prefix("snapshot=")
        .and_then(|p| p.split_once(" lsn="))
        .unwrap_or_else(|| panic!("snapshot {pinned:?} in {record:?}"));
    let xmin = txids.split(':').next().unwrap_or_default();
    assert!(xmin.parse::<u64>().is_ok() && lsn.contains('/'), "{pinned}");
    let out = run(
        &p,
        &[
            "--output",
            "json",
            "backfill",
            "orders_daily",
            "--from",
            "2026-11-01",
            "--to",
            "2026-11-10",
        ],
    );
    assert_eq!(code(&out), 0, "{}", text(&out));
    let (source, table_rows) = oracle(&p, &table, "2026-11-01", "2026-11-10");
    assert_eq!(source.split(';').count(), 10, "{source}");
    assert_eq!(source, table_rows);
}

/// The window's bounds are in the SQL sent to the server (`explain` shows it), so a day window
/// reads a day by the table's index.
#[test]
fn the_remote_sql_carries_the_window_filter() {
    let table = orders(100);
    let p = project(&table);
    let out = run(&p, &["explain", "orders_daily", "--window", "2026-11-01"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let plan = text(&out);
    let sql = plan
        .lines()
        .find(|l| l.contains("PostgresScan: sql="))
        .unwrap_or_else(|| panic!("{plan}"));
    assert!(sql.contains(&format!("FROM public.{table} WHERE")), "{sql}");
    assert!(
        sql.contains("created_at") && sql.contains("2026-11-01") && sql.contains("2026-11-02"),
        "{sql}"
    );
}

/// Regression (a backfill's windows each sent a `SELECT` with no `WHERE`, 7.8 s for a day of a
/// 10-million-row table): the runner's prepared plan is planned once with the window's bounds
/// as parameters, and a filter holding a parameter was not pushed to the server. Every query a
/// backfill sends now carries its window's bounds.
#[test]
fn every_query_of_a_prepared_backfill_sends_its_window_bounds() {
    let table = orders(2_000);
    let p = project(&table);
    let out = p
        .cmd()
        .env("PGPASSWORD", &pg_env()["PGPASSWORD"])
        .env(
            "IDEMLAKE_LOG",
            "warn,idemlake::pipeline::sources::postgres=debug",
        )
        .args([
            "--output",
            "json",
            "backfill",
            "orders_daily",
            "--from",
            "2026-11-01",
            "--to",
            "2026-11-04",
        ])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", text(&out));
    let log = String::from_utf8_lossy(&out.stderr);
    let sent: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("PostgreSQL query sent"))
        .collect();
    // The task's four windows and their checks.
    assert!(sent.len() >= 4, "{log}");
    for line in &sent {
        assert!(
            line.contains(" WHERE "),
            "a query without the window: {line}"
        );
    }
    for day in ["2026-11-01", "2026-11-02", "2026-11-03", "2026-11-04"] {
        assert!(
            sent.iter().any(|l| l.contains(&format!("'{day}"))),
            "no query for {day}: {log}"
        );
    }
    let (source, table_rows) = oracle(&p, &table, "2026-11-01", "2026-11-04");
    assert_eq!(source, table_rows);
}

/// Every failure gives its exit code and one sentence naming it, with nothing published: a
/// wrong password and a missing table exit 2; an unreachable server exits 1, retryable; a
/// password in the URI and an array column are refused by name (exit 2).
#[test]
fn failures_exit_with_their_code_and_name_the_problem() {
    let table = orders(10);
    let p = project(&table);
    let expect = |p: &TestProject, env: &[(&str, &str)], code_want: i32, says: &str| {
        let mut c = p.cmd();
        c.env("PGPASSWORD", &pg_env()["PGPASSWORD"]);
        for (k, v) in env {
            c.env(k, v);
        }
        let out = c.args(RUN_DAY).output().unwrap();
        assert_eq!(code(&out), code_want, "{says}: {}", text(&out));
        assert!(text(&out).contains(says), "{says}: {}", text(&out));
        assert!(
            !text(&out).contains(&pg_env()["PGPASSWORD"]),
            "{}",
            text(&out)
        );
        assert_eq!(log_version(&p.table_dir("orders_daily")), None);
    };
    expect(
        &p,
        &[("PGPASSWORD", "wrong")],
        2,
        "password authentication failed",
    );
    let uri = pg_env()["IDEMLAKE_PG_URL"].clone();
    let missing = TestProject::new();
    missing.task(
        "orders_daily",
        &TASK.replace("URI", &uri).replace("TABLE", "nope"),
    );
    expect(&missing, &[], 2, "public.nope\\\" does not exist");
    let down = TestProject::new();
    down.task(
        "orders_daily",
        &TASK
            .replace("URI", "postgres://idemlake@127.0.0.1:1/shop")
            .replace("TABLE", &table),
    );
    expect(&down, &[], 1, "PostgreSQL");
    let with_password = TestProject::new();
    let leaked = uri.replace("idemlake@", "idemlake:secret@");
    with_password.task(
        "orders_daily",
        &TASK.replace("URI", &leaked).replace("TABLE", &table),
    );
    expect(&with_password, &[], 2, "holds a password");
    psql(&format!("ALTER TABLE {table} ADD COLUMN tags text[]"));
    let arrays = TestProject::new();
    arrays.task(
        "orders_daily",
        &TASK
            .replace("URI", &uri)
            .replace("TABLE", &table)
            .replace("paid, due", "paid, due, tags"),
    );
    expect(&arrays, &[], 2, "column `tags`");
}

/// Regression (the extraction and its check each read the table as it was when they ran, so a
/// row committed between the two made them disagree, exit 3): every scan of a run reads one
/// exported snapshot. Here a row is inserted into the window right before each scan (the
/// task's and the check's); the window publishes the rows of the snapshot, and its check
/// agrees.
#[test]
fn a_row_inserted_while_a_window_runs_never_makes_the_check_and_the_table_disagree() {
    let table = orders(1_000);
    let p = project(&table);
    let day = "created_at >= '2026-11-01T00:00:00Z' AND created_at < '2026-11-02T00:00:00Z'";
    let before: u64 = psql(&format!("SELECT count(*) FROM {table} WHERE {day}"))
        .parse()
        .unwrap();
    let insert = format!(
        "INSERT INTO {table} (id, created_at, amount) \
         SELECT max(id) + 1, timestamptz '2026-11-01 12:00:00+00', 1 FROM {table}"
    );
    let out = p
        .cmd()
        .env("PGPASSWORD", &pg_env()["PGPASSWORD"])
        .env("IDEMLAKE_TEST_FAULT", "pg-insert-before-scan")
        .env("IDEMLAKE_TEST_PG_INSERT", &insert)
        .args(RUN_DAY)
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", text(&out));
    let r = &json_lines(&out)[0];
    assert_eq!(r["rows_written"], before, "{r}");
    let after: u64 = psql(&format!("SELECT count(*) FROM {table} WHERE {day}"))
        .parse()
        .unwrap();
    assert!(
        after >= before + 2,
        "{before} then {after}: the inserts did not happen"
    );
}

/// The checks of a day window as the report gives them: (check, source value, route, first
/// scan's location, its rows) for each.
fn checks_of(r: &serde_json::Value) -> Vec<(String, String, String, String, u64)> {
    r["reconciliation"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let how = &c["computed"];
            (
                c["check"].as_str().unwrap_or_default().to_string(),
                c["source"].to_string().trim_matches('"').to_string(),
                how["route"].as_str().unwrap_or_default().to_string(),
                how["scans"][0]["location"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                how["scans"][0]["rows"].as_u64().unwrap_or_default(),
            )
        })
        .collect()
}

/// The default check's count and a `[reconcile]` total are computed by PostgreSQL itself:
/// the task's query, and the reconcile source query, are sent whole with the window's bounds,
/// in the run's snapshot, and only their result comes back; the report names the route and
/// the statement. A backfill's windows are counted the same way, each by its own statement.
#[test]
fn the_checks_count_and_reconcile_totals_are_computed_by_the_database() {
    let table = orders(5_000);
    let p = project(&table);
    let task = std::fs::read_to_string(p.path().join("tables/orders_daily.toml")).unwrap();
    p.task(
        "orders_daily",
        &format!(
            "{task}\n[reconcile]\ndefault = \"rows\"\n\
             source = \"SELECT sum(amount) AS total FROM orders WHERE created_at >= $window_start_ts AND created_at < $window_end_ts\"\n\
             output = \"SELECT sum(amount) AS total FROM output\"\n"
        ),
    );
    let day = "created_at >= '2026-11-01T00:00:00Z' AND created_at < '2026-11-02T00:00:00Z'";
    let rows = psql(&format!("SELECT count(*) FROM {table} WHERE {day}"));
    let total = psql(&format!("SELECT sum(amount) FROM {table} WHERE {day}"));
    let out = run(&p, &RUN_DAY);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let checks = checks_of(&json_lines(&out)[0]);
    let count = checks.iter().find(|c| c.0 == "source_rows").unwrap();
    assert_eq!(count.1, rows, "{checks:?}");
    assert_eq!(count.2, "database", "{checks:?}");
    assert!(
        count
            .3
            .starts_with("PostgreSQL: SELECT count(*) FROM (SELECT")
            && count
                .3
                .contains(&format!("\"public\".\"{table}\" AS \"orders\""))
            && count.3.contains("2026-11-01")
            && count.3.contains("2026-11-02"),
        "{checks:?}"
    );
    assert_eq!(count.4, 1, "one row back: {checks:?}");
    let sum = checks.iter().find(|c| c.0 == "total").unwrap();
    assert_eq!(sum.2, "database", "{checks:?}");
    assert!(
        sum.3.starts_with("PostgreSQL: SELECT q.c0::text") && sum.3.contains("sum("),
        "{checks:?}"
    );
    assert_eq!(
        sum.1.parse::<f64>().unwrap(),
        total.parse::<f64>().unwrap(),
        "{checks:?}"
    );
    let out = run(
        &p,
        &[
            "--output",
            "json",
            "backfill",
            "orders_daily",
            "--from",
            "2026-11-02",
            "--to",
            "2026-11-04",
        ],
    );
    assert_eq!(code(&out), 0, "{}", text(&out));
    for r in json_lines(&out) {
        let checks = checks_of(&r);
        let source_side = checks
            .iter()
            .filter(|c| ["source_rows", "total"].contains(&c.0.as_str()));
        assert!(
            source_side.clone().count() == 2 && source_side.clone().all(|c| c.2 == "database"),
            "{checks:?}"
        );
    }
    let (source, table_rows) = oracle(&p, &table, "2026-11-01", "2026-11-04");
    assert_eq!(source, table_rows);
}

/// Filters of every kind the database is sent whole, written before or after the window's
/// bounds, over a column holding NULLs: each task's table equals polars' filter over the
/// window's rows (read by SQL written by hand), and its count was computed by the database.
/// Regression (a review found filters the database computes otherwise sent whole: text
/// ordered by collation in `BETWEEN`, arithmetic that overflows there, float literals read as
/// exact numerics, uuid columns compared as uuids): those stay on the DataFusion route.
#[test]
fn filters_sent_whole_to_the_database_give_the_rows_polars_filters() {
    let table = orders(3_000);
    psql(&format!("UPDATE {table} SET paid = NULL WHERE id % 7 = 0"));
    let shapes = [
        (
            "status IN ('paid', 'void')",
            "pl.col('status').is_in(['paid', 'void'])",
            "database",
        ),
        (
            "amount BETWEEN 100 AND 500",
            "(pl.col('amount') >= 100) & (pl.col('amount') <= 500)",
            "database",
        ),
        (
            "customer LIKE 'c1%'",
            "pl.col('customer').str.starts_with('c1')",
            "database",
        ),
        (
            "(NOT paid OR id > 750)",
            "(~pl.col('paid')) | (pl.col('id') > 750)",
            "database",
        ),
        (
            "due = CAST('2026-12-05' AS DATE)",
            "pl.col('due') == dt.date(2026, 12, 5)",
            "database",
        ),
        (
            "customer <> 'c3' AND paid IS NOT NULL",
            "(pl.col('customer') != 'c3') & pl.col('paid').is_not_null()",
            "database",
        ),
        // What the database may compute otherwise stays on the checks' DataFusion route:
        // text ordered by collation, arithmetic (an overflow is an error there), a float
        // literal (an exact numeric there), a uuid column (compared as a uuid there).
        (
            "customer < 'c5'",
            "pl.col('customer') < 'c5'",
            "independent",
        ),
        (
            "customer BETWEEN 'c1' AND 'c5'",
            "(pl.col('customer') >= 'c1') & (pl.col('customer') <= 'c5')",
            "independent",
        ),
        ("id * 2 > 1500", "pl.col('id') * 2 > 1500", "independent"),
        ("amount > 100.5", "pl.col('amount') > 100.5", "independent"),
        (
            "ref IS NOT NULL AND status = 'paid'",
            "pl.col('status') == 'paid'",
            "independent",
        ),
    ];
    let p = TestProject::new();
    let uri = pg_env()["IDEMLAKE_PG_URL"].clone();
    let bounds = "created_at >= $window_start_ts AND created_at < $window_end_ts";
    for (i, (filter, _, _)) in shapes.iter().enumerate() {
        let filter = match i % 2 {
            0 => format!("{filter} AND {bounds}"),
            _ => format!("{bounds} AND {filter}"),
        };
        let task = TASK.replace("URI", &uri).replace("TABLE", &table).replace(
            "created_at >= $window_start_ts AND created_at < $window_end_ts",
            &filter,
        );
        p.task(&format!("shape_{i}"), &task);
    }
    let db = db_uri();
    for (i, (filter, polars, route)) in shapes.iter().enumerate() {
        let name = format!("shape_{i}");
        let out = run(
            &p,
            &[
                "--output",
                "json",
                "backfill",
                &name,
                "--from",
                "2026-11-01",
                "--to",
                "2026-11-02",
            ],
        );
        assert_eq!(code(&out), 0, "{filter}: {}", text(&out));
        for r in json_lines(&out) {
            let checks = checks_of(&r);
            let count = checks.iter().find(|c| c.0 == "source_rows").unwrap();
            assert_eq!(count.2, *route, "{filter}: {checks:?}");
        }
        let got = python_prints(&format!(
            r#"
import datetime as dt, polars as pl
src = pl.read_database_uri(
    "SELECT id, customer, status, amount::float8 AS amount, paid, due FROM public.{table} "
    "WHERE created_at >= '2026-11-01T00:00:00Z' AND created_at < '2026-11-03T00:00:00Z'", "{db}")
want = sorted(src.filter({polars})["id"].to_list())
got = sorted(pl.read_delta("{dir}")["id"].to_list())
print(len(want), len(got), want == got)
"#,
            dir = p.table_dir(&name).display()
        ));
        let parts: Vec<&str> = got.split_whitespace().collect();
        assert_eq!(parts.get(2), Some(&"True"), "{filter}: polars {got}");
        assert_ne!(
            parts[0], "0",
            "{filter}: a shape that selects nothing proves little"
        );
    }
}

/// A task whose query holds what the two engines may compute differently (here a function)
/// is counted by the checks' own DataFusion route over the rows the server sends, and the
/// report says so.
#[test]
fn a_query_the_database_might_compute_otherwise_is_counted_by_the_checks_and_says_so() {
    let table = orders(1_000);
    let p = project(&table);
    let task = std::fs::read_to_string(p.path().join("tables/orders_daily.toml")).unwrap();
    p.task(
        "orders_daily",
        &task.replace(
            "WHERE created_at >=",
            "WHERE lower(status) <> 'void' AND created_at >=",
        ),
    );
    let out = run(&p, &RUN_DAY);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let checks = checks_of(&json_lines(&out)[0]);
    let count = checks.iter().find(|c| c.0 == "source_rows").unwrap();
    assert_eq!(count.2, "independent", "{checks:?}");
    assert!(
        count.3.starts_with("PostgresScan: sql=SELECT"),
        "{checks:?}"
    );
    assert_eq!(count.4.to_string(), count.1, "{checks:?}");
}

/// `status --output json` over `first..=last`: the stale windows' labels and what changed.
fn stale(p: &TestProject, first: &str, last: &str) -> Vec<(String, Vec<String>)> {
    let out = run(
        p,
        &[
            "--output",
            "json",
            "status",
            "orders_daily",
            "--from",
            first,
            "--to",
            last,
        ],
    );
    assert_eq!(code(&out), 0, "{}", text(&out));
    json_lines(&out)
        .iter()
        .filter(|s| s["stale"] == true)
        .map(|s| {
            let changed = s["stale_inputs"].as_array().unwrap();
            let changed = changed
                .iter()
                .map(|c| c.as_str().unwrap().to_string())
                .collect();
            (s["window"]["label"].as_str().unwrap().to_string(), changed)
        })
        .collect()
}

/// A row inserted into a published window afterwards makes `status` show that window stale,
/// naming the source and the counts; `backfill --stale` re-runs it alone, and every day then
/// equals polars over the database.
#[test]
fn a_row_inserted_into_a_published_window_makes_it_stale_and_stale_fixes_it() {
    let table = orders(3_000);
    let p = project(&table);
    let (first, last) = ("2026-11-01", "2026-11-03");
    let backfill = |extra: &[&str]| {
        let args = [
            &[
                "--output",
                "json",
                "backfill",
                "orders_daily",
                "--from",
                first,
                "--to",
                last,
            ][..],
            extra,
        ]
        .concat();
        let out = run(&p, &args);
        assert_eq!(code(&out), 0, "{}", text(&out));
        json_lines(&out)
    };
    backfill(&[]);
    assert!(stale(&p, first, last).is_empty());
    psql(&format!(
        "INSERT INTO {table} (id, created_at, amount) VALUES (100000, '2026-11-02 12:00:00+00', 5)"
    ));
    let now = stale(&p, first, last);
    assert_eq!(now.len(), 1, "{now:?}");
    assert_eq!(now[0].0, "2026-11-02");
    assert!(
        now[0].1[0].contains("orders: the window's rows in the database changed"),
        "{now:?}"
    );
    let rerun = backfill(&["--stale"]);
    assert_eq!(rerun.len(), 1);
    assert_eq!(rerun[0]["window"]["label"], "2026-11-02");
    assert!(stale(&p, first, last).is_empty());
    let (source, published) = oracle(&p, &table, first, last);
    assert_eq!(source, published);
}

/// TLS as the URI's `sslmode` says, against a role the server lets in only over TLS: `require`,
/// the default (`prefer`) and `verify-full` with the cluster's CA publish the rows polars reads;
/// `disable` is turned away by the server (exit 2); `verify-full` with a CA that signed
/// nothing is refused before a row is read (exit 2, naming the certificate), and so is
/// `verify-ca` (not supported); nothing is published by any of the failures.
#[test]
fn tls_connects_as_sslmode_says_and_a_refused_certificate_publishes_nothing() {
    let table = orders(2_000);
    psql(&format!("GRANT SELECT ON {table} TO idemlake_tls"));
    let e = pg_env();
    let with = |query: &str| {
        let p = TestProject::new();
        let uri = match query {
            "" => e["IDEMLAKE_PG_TLS_URL"].clone(),
            q => format!("{}?{q}", e["IDEMLAKE_PG_TLS_URL"]),
        };
        p.task(
            "orders_daily",
            &TASK.replace("URI", &uri).replace("TABLE", &table),
        );
        p
    };
    let ca = &e["IDEMLAKE_PG_CA"];
    for query in [
        "sslmode=require".to_string(),
        String::new(),
        format!("sslmode=verify-full&sslrootcert={ca}"),
    ] {
        let p = with(&query);
        let out = run(&p, &RUN_DAY);
        assert_eq!(code(&out), 0, "{query}: {}", text(&out));
        let (source, published) = oracle(&p, &table, "2026-11-01", "2026-11-01");
        assert!(!source.is_empty(), "{query}");
        assert_eq!(source, published, "{query}");
    }
    let other = &e["IDEMLAKE_PG_OTHER_CA"];
    for (query, says) in [
        ("sslmode=disable".to_string(), "no encryption"),
        (
            format!("sslmode=verify-full&sslrootcert={other}"),
            "certificate was refused",
        ),
        (format!("sslmode=verify-ca&sslrootcert={ca}"), "verify-ca"),
        (format!("sslmode=require&sslrootcert={ca}"), "sslrootcert"),
    ] {
        let p = with(&query);
        let out = run(&p, &RUN_DAY);
        assert_eq!(code(&out), 2, "{query}: {}", text(&out));
        assert!(text(&out).contains(says), "{query}: {}", text(&out));
        assert_eq!(log_version(&p.table_dir("orders_daily")), None, "{query}");
    }
}
