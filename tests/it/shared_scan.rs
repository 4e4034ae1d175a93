//! Shared window scans: a backfill reads each source once per chunk of windows; the published
//! rows must be exactly those of per-window scans — with sharing on, off, and over budget —
//! and a source the analysis cannot prove bounded must never be shared.

use crate::common::*;

const FROM: &str = "1995-06-01";
// 40 windows: a first chunk of 32 (read without filter pushdown: more than 16 windows) and
// a second, smaller one.
const TO: &str = "1995-07-10";
const RANGE: &str = "l_shipdate >= DATE '1995-06-01' AND l_shipdate < DATE '1995-07-11'";

/// lineitem (bounded by the window) joined to orders (read whole): lineitem is shared.
const JOINED: &str = r#"
sql = """
SELECT l.l_shipdate AS ship_date, o.o_orderpriority, count(*) AS lines, sum(l.l_extendedprice) AS revenue
FROM lineitem l JOIN orders o ON o.o_orderkey = l.l_orderkey
WHERE l.l_shipdate >= $window_start AND l.l_shipdate < $window_end
GROUP BY l.l_shipdate, o.o_orderpriority
"""
[target]
partition_by = "ship_date"
[window]
grain = "day"
[sources.lineitem]
uri = "data/lineitem.parquet"
[sources.orders]
uri = "data/orders.parquet"
[write]
key = ["ship_date", "o_orderpriority"]
[reconcile]
source = "SELECT count(*) AS lines FROM lineitem WHERE l_shipdate >= $window_start AND l_shipdate < $window_end"
output = "SELECT sum(lines) AS lines FROM output"
"#;

/// lineitem passed through by day, stamped with the window's start: the window's physical plans
/// are derived from the first window's (the stamp is a literal each window changes). The stamp
/// is a bare parameter, typed from the window before binding (else the unbound plan would not
/// validate, and the task would neither share scans nor prepare its plans).
const BY_DAY: &str = r#"
sql = """
SELECT l_orderkey, l_linenumber, l_extendedprice, l_shipmode, l_shipdate AS ship_date,
       $window_start AS loaded_for
FROM lineitem
WHERE l_shipdate >= $window_start AND l_shipdate < $window_end
"""
[target]
partition_by = "ship_date"
[window]
grain = "day"
[sources.lineitem]
uri = "data/lineitem.parquet"
[write]
key = ["l_orderkey", "l_linenumber"]
[reconcile]
source = "SELECT count(*) AS lines, sum(l_extendedprice) AS price FROM lineitem WHERE l_shipdate >= $window_start AND l_shipdate < $window_end"
output = "SELECT count(*) AS lines, sum(l_extendedprice) AS price FROM output"
"#;

/// The window's rows above the *global* average quantity: the subquery reads all of lineitem,
/// so sharing a window slice of lineitem would change the average (and the rows).
const ABOVE_AVG: &str = r#"
sql = """
SELECT l_orderkey, l_linenumber, l_quantity, l_shipdate AS ship_date
FROM lineitem
WHERE l_shipdate >= $window_start AND l_shipdate < $window_end
  AND l_quantity > (SELECT avg(l_quantity) FROM lineitem)
"""
[target]
partition_by = "ship_date"
[window]
grain = "day"
[sources.lineitem]
uri = "data/lineitem.parquet"
[write]
key = ["l_orderkey", "l_linenumber"]
"#;

/// Backfill both tasks with `IDEMLAKE_SCAN_CACHE_KB` set to `budget` (None: default);
/// returns the project and the debug log.
fn backfill(budget: Option<&str>) -> (TestProject, String) {
    let p = TestProject::new();
    p.task("joined", JOINED);
    p.task("above_avg", ABOVE_AVG);
    p.task("by_day", BY_DAY);
    let mut log = String::new();
    for task in ["joined", "above_avg", "by_day"] {
        let mut cmd = p.cmd();
        cmd.env("IDEMLAKE_LOG", "idemlake=debug");
        match budget {
            Some(b) => cmd.env("IDEMLAKE_SCAN_CACHE_KB", b),
            None => cmd.env_remove("IDEMLAKE_SCAN_CACHE_KB"),
        };
        let out = cmd
            .args([
                "backfill",
                task,
                "--from",
                FROM,
                "--to",
                TO,
                "--parallel",
                "3",
            ])
            .output()
            .unwrap();
        assert_eq!(code(&out), 0, "{task}: {}", text(&out));
        log.push_str(&format!(
            "== {task}\n{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    (p, log)
}

fn section<'a>(log: &'a str, task: &str) -> &'a str {
    let start = log.find(&format!("== {task}\n")).unwrap();
    let rest = &log[start + 1..];
    match rest.find("\n== ") {
        Some(end) => &rest[..end],
        None => rest,
    }
}

#[tokio::test]
async fn shared_scans_publish_exactly_what_per_window_scans_do() {
    let joined_expected = source_rows(&format!(
        "SELECT l.l_shipdate AS ship_date, o.o_orderpriority, count(*) AS lines, sum(l.l_extendedprice) AS revenue \
         FROM lineitem l JOIN orders o ON o.o_orderkey = l.l_orderkey WHERE l.{RANGE} \
         GROUP BY l.l_shipdate, o.o_orderpriority"
    ))
    .await;
    let above_expected = source_rows(&format!(
        "SELECT l_orderkey, l_linenumber, l_quantity, l_shipdate AS ship_date FROM lineitem \
         WHERE {RANGE} AND l_quantity > (SELECT avg(l_quantity) FROM lineitem)"
    ))
    .await;
    let by_day_expected = source_rows(&format!(
        "SELECT l_orderkey, l_linenumber, l_extendedprice, l_shipmode, l_shipdate AS ship_date, \
         l_shipdate AS loaded_for FROM lineitem WHERE {RANGE}"
    ))
    .await;
    assert!(joined_expected.len() > 30 && above_expected.len() > 100);

    for (budget, what) in [(None, "default"), (Some("0"), "off"), (Some("1"), "1 KiB")] {
        let (p, log) = backfill(budget);
        assert_eq!(
            table_rows(&p.table_dir("joined"), "").await,
            joined_expected,
            "joined, sharing {what}"
        );
        assert_eq!(
            table_rows(&p.table_dir("above_avg"), "").await,
            above_expected,
            "above_avg, sharing {what}"
        );
        assert_eq!(
            table_rows(&p.table_dir("by_day"), "").await,
            by_day_expected,
            "by_day, sharing {what}"
        );
        let joined = section(&log, "joined");
        let above = section(&log, "above_avg");
        let by_day = section(&log, "by_day");
        // The subquery's unbounded reference keeps lineitem un-shared whatever the budget.
        assert!(
            !above.contains("windows share source scans"),
            "above_avg must not share: {above}"
        );
        match what {
            "default" => {
                assert!(
                    joined.contains(r#"sources=[("lineitem", "l_shipdate")]"#),
                    "{joined}"
                );
                assert!(joined.contains(r#"shared=["lineitem"]"#), "{joined}");
                // 40 windows from one read of the source: chunks are cut in window order
                // (32, then the 8 left), whatever order the concurrent windows start in; the
                // first read counts every window's rows (the census the second chunk is cut
                // from) and, the whole run fitting half the budget, keeps them all: the
                // second chunk is a view of them.
                let loads = joined.matches("shared scan loaded").count();
                assert_eq!(loads, 1, "{joined}");
                let first = joined
                    .lines()
                    .find(|l| l.contains("shared scan loaded windows=32 "))
                    .unwrap_or_else(|| panic!("no load of 32 windows: {joined}"));
                assert!(first.contains("census=true whole_run=true"), "{joined}");
                assert!(
                    joined.contains("a view of the census's rows windows=8"),
                    "{joined}"
                );
                // Windows bind the queries prepared once (slices match the template's tables).
                assert!(joined.contains("bound the prepared plans"), "{joined}");
                assert!(above.contains("bound the prepared plans"), "{above}");
                // A query over one slice gets its physical plans from the first window's.
                assert!(by_day.contains("physical plans derived"), "{by_day}");
                assert!(!joined.contains("a derived plan differs"), "{joined}");
                assert!(!by_day.contains("a derived plan differs"), "{by_day}");
            }
            "off" => assert!(!joined.contains("windows share source scans"), "{joined}"),
            _ => {
                assert!(joined.contains("shared scan over budget"), "{joined}");
                assert!(!joined.contains(r#"shared=["lineitem"]"#), "{joined}");
                // lineitem read directly has more columns than the prepared slice: each
                // window plans on its own.
                assert!(!joined.contains("bound the prepared plans"), "{joined}");
                assert!(!by_day.contains("physical plans derived"), "{by_day}");
            }
        }
    }
}

/// Found while profiling the day window: its shared scan read `l_shipdate >= x AND l_shipdate
/// <= x + 1`, two days of rows for one (the window's upper bound is strict), as two row
/// filters applied in turn. A day of a DATE column is now scanned as one equality, a chunk of
/// days as a range without its excluded end; the published rows are the source's either way,
/// with the accelerations on and off.
#[tokio::test]
async fn a_day_window_scans_its_date_as_one_equality_and_publishes_the_same_rows() {
    for accelerate in ["1", "0"] {
        let p = TestProject::new();
        p.task("by_day", BY_DAY);
        let debug = |args: &[&str]| {
            let mut cmd = p.cmd();
            cmd.env("IDEMLAKE_LOG", "idemlake=debug")
                .env("IDEMLAKE_ACCELERATE", accelerate)
                .env_remove("IDEMLAKE_SCAN_CACHE_KB");
            let out = cmd.args(args).output().unwrap();
            assert_eq!(code(&out), 0, "{args:?}: {}", text(&out));
            String::from_utf8_lossy(&out.stderr).into_owned()
        };
        let one = debug(&["run", "by_day", "--window", "1995-06-17"]);
        let three = debug(&[
            "backfill",
            "by_day",
            "--from",
            "1995-06-20",
            "--to",
            "1995-06-22",
        ]);
        if accelerate == "1" {
            let filters = |log: &str| -> Vec<String> {
                log.lines()
                    .filter(|l| l.contains("shared scan filter"))
                    .map(|l| l[l.find("filter=").expect("a filter field")..].to_string())
                    .collect()
            };
            assert_eq!(
                filters(&one),
                [r#"filter=lineitem.l_shipdate = Date32("1995-06-17")"#],
                "{one}"
            );
            assert_eq!(
                filters(&three),
                [concat!(
                    r#"filter=lineitem.l_shipdate >= Date32("1995-06-20") "#,
                    r#"AND lineitem.l_shipdate < Date32("1995-06-23")"#
                )],
                "{three}"
            );
        } else {
            assert!(!one.contains("shared scan"), "{one}");
            assert!(!three.contains("shared scan"), "{three}");
        }
        for day in ["1995-06-17", "1995-06-20", "1995-06-21", "1995-06-22"] {
            let want = source_rows(&format!(
                "SELECT l_orderkey, l_linenumber, l_extendedprice, l_shipmode, \
                 l_shipdate AS ship_date, l_shipdate AS loaded_for FROM lineitem \
                 WHERE l_shipdate = DATE '{day}'"
            ))
            .await;
            assert!(!want.is_empty(), "{day}");
            let got =
                table_rows(&p.table_dir("by_day"), &format!("ship_date = DATE '{day}'")).await;
            assert_eq!(got, want, "{day}, accelerate={accelerate}");
        }
    }
}
