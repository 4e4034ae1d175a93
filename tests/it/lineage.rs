//! Issue 36: staleness from what a downstream window read, whatever changed it — a restore or
//! a merge upstream makes the windows that read it stale, a restored merge window keeps its
//! SQL hash, and hours of a half-hour zone feed (and make stale) every day they overlap.
//! Each table is compared with polars over its input (scripts/lineage_oracle.py).

use std::path::Path;

use crate::common::*;

/// Run scripts/lineage_oracle.py with `args`; its JSON answer.
fn oracle(args: &[&str]) -> serde_json::Value {
    let out = std::process::Command::new(python())
        .arg(repo().join("scripts/lineage_oracle.py"))
        .args(args)
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", text(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// What polars makes of `input` (rows with `ts` and `amount`) per window of `grain` in `tz`,
/// and of the downstream table `table` (`col`, `n`, `total`), windows `first..=last`.
struct Windows<'a> {
    input: &'a Path,
    table: &'a Path,
    col: &'a str,
    tz: &'a str,
    grain: &'a str,
}

impl Windows<'_> {
    fn get(&self, first: &str, last: &str) -> serde_json::Value {
        let (i, t) = (self.input.to_str().unwrap(), self.table.to_str().unwrap());
        oracle(&[
            "windows", i, "ts", "amount", t, self.col, self.tz, self.grain, first, last,
        ])
    }

    /// Whether the table holds, window by window, what polars computes from the input.
    fn agree(&self, first: &str, last: &str) -> bool {
        let got = self.get(first, last);
        assert!(
            !got["input"].as_object().unwrap().is_empty(),
            "no input rows: {got}"
        );
        got["input"] == got["table"]
    }
}

/// `status TASK` for one window, as JSON.
fn status(p: &TestProject, task: &str, label: &str) -> serde_json::Value {
    let out = p.run(&[
        "--output", "json", "status", task, "--from", label, "--to", label,
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    json_lines(&out).remove(0)
}

/// `backfill TASK --from --to --stale`: the windows it ran, sorted.
fn backfill_stale(p: &TestProject, task: &str, from: &str, to: &str) -> Vec<String> {
    let out = p.run(&[
        "--output", "json", "backfill", task, "--from", from, "--to", to, "--stale",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let mut ran: Vec<String> = json_lines(&out)
        .iter()
        .map(|r| r["window"]["label"].as_str().unwrap().to_string())
        .collect();
    ran.sort();
    ran
}

fn run_json(p: &TestProject, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["--output", "json"];
    all.extend_from_slice(args);
    let out = p.run(&all);
    assert_eq!(code(&out), 0, "{}", text(&out));
    json_lines(&out).remove(0)
}

/// `event_id,ts,amount` CSV text: one event every 20 minutes from `from`, `count` of them,
/// amounts `(i % 7 + 1) * m`, then `extra` lines.
fn events_csv(from: &str, count: i64, m: i64, extra: &str) -> String {
    let start: jiff::Timestamp = from.parse().unwrap();
    let mut csv = String::from("event_id,ts,amount\n");
    for i in 0..count {
        let t = start + jiff::SignedDuration::from_mins(i * 20);
        csv.push_str(&format!("{},{t},{}\n", i + 1, (i % 7 + 1) * m));
    }
    csv + extra
}

/// An hour task over `events.csv` in `tz`, partitioned by the window's start instant.
fn hour_task(tz: &str) -> String {
    format!(
        r#"sql = """
SELECT event_id, amount, CAST(ts AS TIMESTAMP) AS ts, $window_start_ts AS hour
FROM events
WHERE CAST(ts AS TIMESTAMP) >= $window_start_ts AND CAST(ts AS TIMESTAMP) < $window_end_ts
"""
[target]
partition_by = "hour"
[window]
grain = "hour"
timezone = "{tz}"
[sources.events]
uri = "events.csv"
"#
    )
}

/// A task of `grain` in `tz` counting and summing the rows of task `up` whose `ts` is in its
/// window: one row per window, `{col}` its first local date.
fn totals_task(grain: &str, tz: &str, up: &str, col: &str, filter: &str, extra: &str) -> String {
    format!(
        r#"sql = """
SELECT CAST($window_start AS DATE) AS {col}, count(*) AS n, sum(amount) AS total
FROM up
WHERE {filter}
"""
[target]
partition_by = "{col}"
[window]
grain = "{grain}"
timezone = "{tz}"
[sources.up]
task = "{up}"
{extra}
"#
    )
}

const BY_TS: &str = "ts >= $window_start_ts AND ts < $window_end_ts";

/// Issue 36 §1: New York hours feeding Berlin days. Restoring an hour to its older rows left
/// the day it fed `stale: false` (the restored files keep their original `idemlake.version`
/// tag, older than what the day read), and `backfill --stale` ran nothing: the day kept sums
/// of rows the hour no longer held.
#[tokio::test]
async fn a_restored_upstream_window_makes_its_downstream_window_stale() {
    let p = TestProject::new();
    p.task("hourly", &hour_task("America/New_York"));
    p.task(
        "daily",
        &totals_task("day", "Europe/Berlin", "hourly", "day", BY_TS, ""),
    );
    let csv = p.path().join("events.csv");
    // Berlin's 2026-10-25 (25 hours, 22:00Z to 23:00Z) holds New York's hours 2026-10-24T18
    // to 2026-10-25T18.
    std::fs::write(&csv, events_csv("2026-10-24T21:05:00Z", 81, 1, "")).unwrap();
    let out = p.run(&[
        "backfill",
        "hourly",
        "--from",
        "2026-10-24T18",
        "--to",
        "2026-10-25T18",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    // The first hour of the day is published again from changed rows (one more event).
    let extra = "1000,2026-10-24T22:30:00Z,5000\n";
    std::fs::write(&csv, events_csv("2026-10-24T21:05:00Z", 81, 3, extra)).unwrap();
    let second = run_json(&p, &["run", "hourly", "--window", "2026-10-24T18"]);
    p.run_ok("daily", "2026-10-25");
    let check = Windows {
        input: &p.table_dir("hourly"),
        table: &p.table_dir("daily"),
        col: "day",
        tz: "Europe/Berlin",
        grain: "day",
    };
    assert!(check.agree("2026-10-25", "2026-10-25"));
    assert_eq!(status(&p, "daily", "2026-10-25")["stale"], false);
    // The hour goes back to its first rows: the day no longer matches what it read.
    let run = second["run_id"].as_str().unwrap();
    let r = run_json(
        &p,
        &[
            "restore",
            "hourly",
            "--window",
            "2026-10-24T18",
            "--before-run",
            run,
        ],
    );
    assert_eq!(r["status"], "restored", "{r}");
    let restored = r["table_version"].as_i64().unwrap();
    assert!(!check.agree("2026-10-25", "2026-10-25"));
    let s = status(&p, "daily", "2026-10-25");
    assert_eq!(s["stale"], true, "{s}");
    assert_eq!(s["retryable"], true, "{s}");
    assert_eq!(
        s["stale_inputs"],
        serde_json::json!([format!("hourly:2026-10-24T18@{restored}")]),
        "{s}"
    );
    assert_eq!(
        backfill_stale(&p, "daily", "2026-10-25", "2026-10-25"),
        ["2026-10-25"]
    );
    assert!(check.agree("2026-10-25", "2026-10-25"));
    assert_eq!(status(&p, "daily", "2026-10-25")["stale"], false);
    assert!(backfill_stale(&p, "daily", "2026-10-25", "2026-10-25").is_empty());
}

/// A merge task over `orders.csv`: Kolkata days, keyed on `order_id`, with `sql_status` the
/// expression for its `status` column.
fn merge_task(sql_status: &str) -> String {
    format!(
        r#"sql = """
SELECT order_id, amount, {sql_status} AS status, CAST(ts AS TIMESTAMP) AS ts,
       CAST($window_start AS DATE) AS day
FROM orders
WHERE CAST(ts AS TIMESTAMP) >= $window_start_ts AND CAST(ts AS TIMESTAMP) < $window_end_ts
"""
[target]
partition_by = "day"
[window]
grain = "day"
timezone = "Asia/Kolkata"
[sources.orders]
uri = "orders.csv"
[write]
mode = "merge"
key = ["order_id"]
"#
    )
}

/// `order_id,ts,amount,status` CSV text: per `(first id, Kolkata day, count, amount)`, that
/// many orders at 10:00, 10:20, … local time.
fn orders_csv(groups: &[(i64, &str, i64, i64)]) -> String {
    let mut csv = String::from("order_id,ts,amount,status\n");
    for &(first, day, count, amount) in groups {
        let start: jiff::Timestamp = format!("{day}T04:30:00Z").parse().unwrap();
        for i in 0..count {
            let t = start + jiff::SignedDuration::from_mins(i * 20);
            csv.push_str(&format!("{},{t},{},placed\n", first + i, amount + i));
        }
    }
    csv
}

/// Issue 36 §2: a merge-mode upstream (Kolkata days) feeding a weekly task. Merge-written
/// files carry no idemlake tags, so after the upstream re-published a day and added two more,
/// the week stayed `stale: false` and `backfill --stale` ran nothing.
#[tokio::test]
async fn a_merge_upstream_makes_its_downstream_window_stale() {
    let p = TestProject::new();
    // As in the issue: a run of a day merges the day before it again too (lookback 1).
    let upstream = merge_task("status").replace("[window]\n", "[window]\nlookback = 1\n");
    p.task("orders", &upstream);
    let day = "day >= $window_start AND day < $window_end";
    p.task(
        "weekly",
        &totals_task(
            "week",
            "Asia/Kolkata",
            "orders",
            "week",
            day,
            "require = \"any\"",
        ),
    );
    let csv = p.path().join("orders.csv");
    std::fs::write(
        &csv,
        orders_csv(&[(1, "2026-08-03", 4, 10), (5, "2026-08-04", 4, 20)]),
    )
    .unwrap();
    for d in ["2026-08-03", "2026-08-04"] {
        p.run_ok("orders", d);
    }
    // Week 32 (Monday 2026-08-03) reads the two days.
    p.run_ok("weekly", "2026-W32");
    let check = Windows {
        input: &p.table_dir("orders"),
        table: &p.table_dir("weekly"),
        col: "week",
        tz: "Asia/Kolkata",
        grain: "week",
    };
    assert!(check.agree("2026-08-03", "2026-08-03"));
    assert_eq!(status(&p, "weekly", "2026-W32")["stale"], false);
    // 08-04 is merged again (amounts changed, one more order); 08-05 and 08-06 arrive.
    std::fs::write(
        &csv,
        orders_csv(&[
            (1, "2026-08-03", 4, 10),
            (5, "2026-08-04", 5, 700),
            (10, "2026-08-05", 3, 30),
            (13, "2026-08-06", 2, 40),
        ]),
    )
    .unwrap();
    for d in ["2026-08-04", "2026-08-05", "2026-08-06"] {
        p.run_ok("orders", d);
    }
    // The upstream's merged windows name their publishing run and version.
    let up = status(&p, "orders", "2026-08-05");
    assert_eq!(up["state"], "published", "{up}");
    assert!(up["table_version"].as_i64().is_some(), "{up}");
    assert!(!check.agree("2026-08-03", "2026-08-03"));
    let s = status(&p, "weekly", "2026-W32");
    assert_eq!(s["stale"], true, "{s}");
    let named: Vec<&str> = s["stale_inputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().split('@').next().unwrap())
        .collect();
    // 08-03 too: the second run of 08-04 merged it again (lookback 1). A merge counts as a
    // change whether or not the rows it rewrote differ.
    assert_eq!(
        named,
        [
            "orders:2026-08-03",
            "orders:2026-08-04",
            "orders:2026-08-05",
            "orders:2026-08-06"
        ],
        "{s}"
    );
    assert_eq!(
        backfill_stale(&p, "weekly", "2026-W32", "2026-W32"),
        ["2026-W32"]
    );
    assert!(check.agree("2026-08-03", "2026-08-03"));
    assert_eq!(status(&p, "weekly", "2026-W32")["stale"], false);
    // One more order on 08-06, merged alone: a second file in the day (the week re-runs).
    std::fs::write(&csv, orders_csv(&[(20, "2026-08-06", 1, 50)])).unwrap();
    p.run_ok("orders", "2026-08-06");
    assert_eq!(
        backfill_stale(&p, "weekly", "2026-W32", "2026-W32"),
        ["2026-W32"]
    );
    // An optimize rewrites that day's files and changes no row: nothing becomes stale.
    let out = p.run(&["--output", "json", "optimize", "orders"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let compacted: Vec<String> = json_lines(&out)
        .iter()
        .filter(|l| l["status"] == "compacted")
        .map(|l| l["window"]["label"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(compacted, ["2026-08-06"]);
    assert!(check.agree("2026-08-03", "2026-08-03"));
    assert_eq!(status(&p, "weekly", "2026-W32")["stale"], false);
    assert!(backfill_stale(&p, "weekly", "2026-W32", "2026-W32").is_empty());
}

/// Issue 36 §3: restoring a merge window lost its SQL hash (`status` showed `sql_hash: null`),
/// so after an SQL change `backfill --stale` re-ran every window but the restored one, which
/// kept rows of the old SQL.
#[tokio::test]
async fn a_restored_merge_window_keeps_its_sql_hash() {
    let p = TestProject::new();
    p.task("orders", &merge_task("status"));
    let csv = p.path().join("orders.csv");
    let days = [(1, "2026-08-03", 3, 10), (4, "2026-08-04", 3, 20)];
    let groups = |amount: i64| [days[0], days[1], (7, "2026-08-05", 3, amount)];
    std::fs::write(&csv, orders_csv(&groups(30))).unwrap();
    let out = p.run(&[
        "backfill",
        "orders",
        "--from",
        "2026-08-03",
        "--to",
        "2026-08-05",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    std::fs::write(&csv, orders_csv(&groups(900))).unwrap();
    let bad = run_json(&p, &["run", "orders", "--window", "2026-08-05"]);
    let run = bad["run_id"].as_str().unwrap();
    let r = run_json(
        &p,
        &[
            "restore",
            "orders",
            "--window",
            "2026-08-05",
            "--before-run",
            run,
        ],
    );
    assert_eq!(r["status"], "restored", "{r}");
    let hash = status(&p, "orders", "2026-08-04")["sql_hash"].clone();
    assert!(hash.is_string(), "{hash}");
    assert_eq!(r["sql_hash"], hash, "{r}");
    let s = status(&p, "orders", "2026-08-05");
    assert_eq!(s["run_status"], "restored", "{s}");
    assert_eq!(s["sql_hash"], hash, "{s}");
    assert_eq!(s["stale"], false, "{s}");
    // The SQL changes: every window, the restored one too, is published by other SQL.
    p.task(
        "orders",
        &merge_task("CASE WHEN status = 'placed' THEN 'corrected' ELSE status END"),
    );
    let s = status(&p, "orders", "2026-08-05");
    assert_eq!(s["stale"], true, "{s}");
    assert_eq!(
        backfill_stale(&p, "orders", "2026-08-03", "2026-08-05"),
        ["2026-08-03", "2026-08-04", "2026-08-05"]
    );
    // The table holds the source's rows through the new SQL (as polars reads both).
    let got = oracle(&["rows", p.table_dir("orders").to_str().unwrap(), "order_id"]);
    let mut want = Vec::new();
    for line in orders_csv(&groups(900)).lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        want.push((f[0].to_string(), f[2].to_string(), "corrected".to_string()));
    }
    let got: Vec<(String, String, String)> = got
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let s = |k: &str| r[k].as_str().unwrap().to_string();
            (s("order_id"), s("amount"), s("status"))
        })
        .collect();
    assert_eq!(got, want);
}

/// Issue 36 §4: Asia/Kolkata hours (+05:30) feeding UTC days. The hour 23:30Z–00:30Z belongs
/// to two days, but waiting (`require = "complete"`) and staleness looked only at the hours
/// inside the day: the day ran without its last hour (exit 0), and never went stale when its
/// first hour was published again. Windows relate by overlap everywhere.
#[tokio::test]
async fn half_hour_zone_hours_feed_every_day_they_overlap() {
    let p = TestProject::new();
    p.task("hourly", &hour_task("Asia/Kolkata"));
    p.task(
        "daily",
        &totals_task("day", "UTC", "hourly", "day", BY_TS, ""),
    );
    let csv = p.path().join("events.csv");
    std::fs::write(&csv, events_csv("2026-08-04T22:05:00Z", 90, 1, "")).unwrap();
    // UTC 2026-08-05 overlaps Kolkata's hours 2026-08-05T05 (23:30Z the day before) to
    // 2026-08-06T05 (23:30Z to 00:30Z): all but that last one are published.
    let out = p.run(&[
        "backfill",
        "hourly",
        "--from",
        "2026-08-05T05",
        "--to",
        "2026-08-06T04",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let out = p.run(&["validate", "daily"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let out = p.run(&["--output", "json", "run", "daily", "--window", "2026-08-05"]);
    assert_eq!(code(&out), 1, "{}", text(&out));
    let e = json_lines(&out)[0]["error"].as_str().unwrap().to_string();
    assert!(e.contains("hourly:2026-08-06T05"), "{e}");
    // Nothing published (`validate` may have made the table's empty directory).
    assert!(!p.table_dir("daily").join("_delta_log").exists());
    p.run_ok("hourly", "2026-08-06T05");
    p.run_ok("daily", "2026-08-05");
    let check = Windows {
        input: &p.table_dir("hourly"),
        table: &p.table_dir("daily"),
        col: "day",
        tz: "UTC",
        grain: "day",
    };
    assert!(check.agree("2026-08-05", "2026-08-05"));
    // An event at 00:10Z lands in the first hour, which straddles 2026-08-04 and 2026-08-05.
    let extra = "1000,2026-08-05T00:10:00Z,5000\n";
    std::fs::write(&csv, events_csv("2026-08-04T22:05:00Z", 90, 1, extra)).unwrap();
    let again = run_json(&p, &["run", "hourly", "--window", "2026-08-05T05"]);
    let v = again["table_version"].as_i64().unwrap();
    assert!(!check.agree("2026-08-05", "2026-08-05"));
    let s = status(&p, "daily", "2026-08-05");
    assert_eq!(s["stale"], true, "{s}");
    assert_eq!(
        s["stale_inputs"],
        serde_json::json!([format!("hourly:2026-08-05T05@{v}")]),
        "{s}"
    );
    assert_eq!(
        backfill_stale(&p, "daily", "2026-08-05", "2026-08-05"),
        ["2026-08-05"]
    );
    assert!(check.agree("2026-08-05", "2026-08-05"));
    assert_eq!(status(&p, "daily", "2026-08-05")["stale"], false);
    // --downstream takes the days the hour overlaps, by the same rule: 2026-08-05 runs again,
    // 2026-08-06 waits for its other hours (exit 1, nothing published for it).
    let out = p.run(&[
        "--output",
        "json",
        "backfill",
        "hourly",
        "--from",
        "2026-08-06T05",
        "--to",
        "2026-08-06T05",
        "--downstream",
    ]);
    assert_eq!(code(&out), 1, "{}", text(&out));
    let mut days: Vec<(String, bool, String)> = json_lines(&out)
        .iter()
        .filter(|r| r["task"] == "daily")
        .map(|r| {
            (
                r["window"]["label"].as_str().unwrap().to_string(),
                r["published"].as_bool().unwrap(),
                r["error"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    days.sort();
    assert_eq!(days.len(), 2, "{days:?}");
    assert_eq!((days[0].0.as_str(), days[0].1), ("2026-08-05", true));
    assert_eq!((days[1].0.as_str(), days[1].1), ("2026-08-06", false));
    assert!(days[1].2.contains("hourly:2026-08-06T06"), "{days:?}");
    assert!(check.agree("2026-08-05", "2026-08-05"));
}

/// Found while fixing issue 36: a restored merge window read no inputs as far as `status` could
/// tell (merge files carry no tags, and the restore's record named no sources), so a merge
/// task's window restored to rows computed from older upstream rows never went stale.
#[tokio::test]
async fn a_restored_merge_downstream_window_is_stale_against_what_it_read() {
    let p = TestProject::new();
    p.task("hourly", &hour_task("UTC"));
    let merge = "[write]\nmode = \"merge\"\nkey = [\"day\"]";
    p.task(
        "daily",
        &totals_task("day", "UTC", "hourly", "day", BY_TS, "")
            .replace("[sources.up]", &format!("{merge}\n[sources.up]")),
    );
    let csv = p.path().join("events.csv");
    let hours = |p: &TestProject| {
        let out = p.run(&[
            "backfill",
            "hourly",
            "--from",
            "2026-09-01T00",
            "--to",
            "2026-09-01T23",
        ]);
        assert_eq!(code(&out), 0, "{}", text(&out));
    };
    std::fs::write(&csv, events_csv("2026-09-01T00:05:00Z", 72, 1, "")).unwrap();
    hours(&p);
    p.run_ok("daily", "2026-09-01");
    // Every hour is published again from changed rows, and the day with them.
    std::fs::write(&csv, events_csv("2026-09-01T00:05:00Z", 72, 3, "")).unwrap();
    hours(&p);
    let second = run_json(&p, &["run", "daily", "--window", "2026-09-01"]);
    let check = Windows {
        input: &p.table_dir("hourly"),
        table: &p.table_dir("daily"),
        col: "day",
        tz: "UTC",
        grain: "day",
    };
    assert!(check.agree("2026-09-01", "2026-09-01"));
    assert_eq!(status(&p, "daily", "2026-09-01")["stale"], false);
    // The day goes back to what it computed from the first rows.
    let run = second["run_id"].as_str().unwrap();
    let r = run_json(
        &p,
        &[
            "restore",
            "daily",
            "--window",
            "2026-09-01",
            "--before-run",
            run,
        ],
    );
    assert_eq!(r["status"], "restored", "{r}");
    assert!(!check.agree("2026-09-01", "2026-09-01"));
    let s = status(&p, "daily", "2026-09-01");
    assert_eq!(s["stale"], true, "{s}");
    assert_eq!(s["stale_inputs"].as_array().unwrap().len(), 24, "{s}");
    assert_eq!(
        backfill_stale(&p, "daily", "2026-09-01", "2026-09-01"),
        ["2026-09-01"]
    );
    assert!(check.agree("2026-09-01", "2026-09-01"));
    assert_eq!(status(&p, "daily", "2026-09-01")["stale"], false);
}
