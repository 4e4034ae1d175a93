//! Backfill: parallel equals serial; kill -9 at random moments never leaves a window missing
//! half its rows or doubled, and `--missing` completes the range.

use std::time::Duration;

use crate::common::*;

const FROM: &str = "1995-06-01";
const TO: &str = "1995-06-10";

async fn expected_range(days: u32) -> Vec<String> {
    let mut all = Vec::new();
    for d in 1..=days {
        all.extend(expected_lineitem_day(&format!("1995-06-{d:02}")).await);
    }
    all.sort();
    all
}

#[tokio::test]
async fn parallel_backfill_equals_serial() {
    let serial = TestProject::new();
    let out = serial.run(&[
        "backfill",
        "lineitem_by_ship_day",
        "--from",
        FROM,
        "--to",
        TO,
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let parallel = TestProject::new();
    let out = parallel.run(&[
        "--output",
        "json",
        "backfill",
        "lineitem_by_ship_day",
        "--from",
        FROM,
        "--to",
        TO,
        "--parallel",
        "4",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert_eq!(json_lines(&out).len(), 10, "one JSON line per window");
    let expected = expected_range(10).await;
    assert_eq!(
        table_rows(&serial.table_dir("lineitem_by_ship_day"), "").await,
        expected
    );
    assert_eq!(
        table_rows(&parallel.table_dir("lineitem_by_ship_day"), "").await,
        expected
    );
    // Table created at version 0, then at most one commit per window (windows staged while
    // a commit is being written are published together by the next one).
    let published = log_version(&parallel.table_dir("lineitem_by_ship_day")).unwrap();
    assert!((1..=10).contains(&published), "version {published}");

    // --missing after a complete run does nothing; --stale re-runs nothing either.
    let out = parallel.run(&[
        "backfill",
        "lineitem_by_ship_day",
        "--from",
        FROM,
        "--to",
        TO,
        "--missing",
        "--stale",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("0 windows"),
        "{}",
        text(&out)
    );
    assert_eq!(
        log_version(&parallel.table_dir("lineitem_by_ship_day")),
        Some(published)
    );
}

#[tokio::test]
async fn a_failed_window_does_not_stop_the_others() {
    let p = TestProject::new();
    // A task whose SQL fails at run time for one day only (division by zero on 1995-06-03).
    p.task(
        "t",
        &lineitem_task(
            "SELECT l_orderkey, l_linenumber, \
             1 / (CASE WHEN l_shipdate = DATE '1995-06-03' THEN 0 ELSE 1 END) AS x, \
             l_shipdate AS ship_date \
             FROM lineitem WHERE l_shipdate >= $window_start AND l_shipdate < $window_end",
            "",
        ),
    );
    let out = p.run(&[
        "backfill",
        "t",
        "--from",
        "1995-06-01",
        "--to",
        "1995-06-05",
        "--parallel",
        "2",
    ]);
    assert_eq!(code(&out), 1, "{}", text(&out));
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(
        s.contains("4 ok") && s.contains("1 failed") && s.contains("failed 1995-06-03"),
        "{s}"
    );
}

/// A tiny deterministic generator for the kill delays (fixed seed, no dependency).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

#[tokio::test]
async fn kill_9_at_random_moments_never_leaves_a_partial_or_doubled_window() {
    let p = TestProject::new();
    let table = p.table_dir("lineitem_by_ship_day");
    let mut per_day = Vec::new();
    for d in 1..=10 {
        per_day.push(expected_lineitem_day(&format!("1995-06-{d:02}")).await);
    }
    let mut rng = Lcg(20261129);
    let bin = assert_cmd::cargo::cargo_bin!("idemlake");
    let mut killed = 0;
    // Kill moments are drawn within the time a run of the same kind (full backfill, or
    // `--missing` resume) takes here, measured on every round of that kind that completes, so
    // the test keeps killing runs as the engine gets faster (a resume with little left to do
    // takes a fraction of a full backfill). A run that ends first is timed to within a few ms.
    let mut span_ms = [1500u64; 2];
    for round in 0..8 {
        // Alternate a full backfill and a --missing resume, killed at a random moment.
        let mut c = std::process::Command::new(bin);
        c.arg("--project").arg(p.path()).args([
            "backfill",
            "lineitem_by_ship_day",
            "--from",
            FROM,
            "--to",
            TO,
            "--parallel",
            "2",
        ]);
        if round % 2 == 1 {
            c.arg("--missing");
        }
        let started = std::time::Instant::now();
        let mut child = c
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Wait until the kill moment, watching for an earlier end (whose time is the run's).
        let kill_at = Duration::from_millis(rng.next() % span_ms[round % 2]);
        let mut ended = child.try_wait().unwrap().is_some();
        while !ended && started.elapsed() < kill_at {
            std::thread::sleep(Duration::from_millis(2));
            ended = child.try_wait().unwrap().is_some();
        }
        if !ended {
            child.kill().unwrap(); // SIGKILL
            killed += 1;
        } else {
            span_ms[round % 2] = (started.elapsed().as_millis() as u64).max(20);
        }
        child.wait().unwrap();
        if log_version(&table).is_none() {
            continue; // killed before the table existed
        }
        for (i, expected) in per_day.iter().enumerate() {
            let day = format!("1995-06-{:02}", i + 1);
            let got = table_rows(&table, &format!("ship_date = DATE '{day}'")).await;
            assert!(
                got.is_empty() || &got == expected,
                "round {round}: {day} holds {} rows, expected 0 or {}",
                got.len(),
                expected.len()
            );
        }
    }
    assert!(killed >= 3, "the loop must actually kill runs: {killed}");
    let out = p.run(&[
        "backfill",
        "lineitem_by_ship_day",
        "--from",
        FROM,
        "--to",
        TO,
        "--missing",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert_eq!(
        table_rows(&table, "").await,
        expected_range(10).await,
        "--missing completes the range"
    );
}
