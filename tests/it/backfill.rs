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

/// Issue 17 §1: `backfill --shard I/N` fans a range out over N worker processes publishing
/// into one table. Four workers start at once on a table that does not exist yet (they race
/// to create it); each runs exactly its contiguous block and the table equals a serial run.
/// Then the range grows and every worker runs again with `--missing`: the blocks are cut from
/// the whole new range, and each worker runs only the unpublished windows of its block.
#[tokio::test(flavor = "multi_thread")]
async fn shards_run_concurrently_each_take_their_block_and_publish_every_window_once() {
    let p = TestProject::new();
    let lake = p.path().join("lake");
    let table = p.table_dir("lineitem_by_ship_day");
    let days =
        |a: u32, b: u32| -> Vec<String> { (a..=b).map(|d| format!("1995-06-{d:02}")).collect() };
    // All four workers of `to`'s range at once, --missing, two windows at a time each.
    let fan_out = |to: &str| -> Vec<std::process::Output> {
        let children: Vec<_> = (0..4)
            .map(|i| {
                let shard = format!("{i}/4");
                p.spawn(
                    &lake,
                    &[
                        "--output",
                        "json",
                        "backfill",
                        "lineitem_by_ship_day",
                        "--from",
                        "1995-06-01",
                        "--to",
                        to,
                        "--parallel",
                        "2",
                        "--missing",
                        "--shard",
                        &shard,
                    ],
                )
            })
            .collect();
        let outs: Vec<_> = children
            .into_iter()
            .map(|c| c.wait_with_output().unwrap())
            .collect();
        for (i, out) in outs.iter().enumerate() {
            assert_eq!(code(out), 0, "shard {i}/4:\n{}", text(out));
            assert!(
                String::from_utf8_lossy(&out.stderr).contains(&format!("(shard {i}/4)")),
                "the summary names the shard: {}",
                text(out)
            );
        }
        outs
    };
    let windows_of = |out: &std::process::Output| -> Vec<String> {
        let mut w: Vec<String> = json_lines(out)
            .iter()
            .filter_map(|r| r["window"]["label"].as_str().map(str::to_string))
            .collect();
        w.sort();
        w
    };
    let expected = |to: u32| async move {
        let mut all = Vec::new();
        for d in 1..=to {
            all.extend(expected_lineitem_day(&format!("1995-06-{d:02}")).await);
        }
        all.sort();
        all
    };

    // 14 windows in blocks of 3, 4, 3, 4 (worker I from ⌊I·14/4⌋).
    let outs = fan_out("1995-06-14");
    assert_eq!(windows_of(&outs[0]), days(1, 3));
    assert_eq!(windows_of(&outs[1]), days(4, 7));
    assert_eq!(windows_of(&outs[2]), days(8, 10));
    assert_eq!(windows_of(&outs[3]), days(11, 14));
    assert_eq!(
        table_rows(&table, "").await,
        expected(14).await,
        "equals a serial run: every window once, no row lost or doubled"
    );

    // 21 windows: blocks of 5, 5, 5, 6. Blocks 0 and 1 are published, block 2 has one new
    // window (06-15), block 3 six.
    let version = log_version(&table).unwrap();
    let outs = fan_out("1995-06-21");
    assert_eq!(windows_of(&outs[0]), Vec::<String>::new());
    assert_eq!(windows_of(&outs[1]), Vec::<String>::new());
    assert_eq!(windows_of(&outs[2]), days(15, 15));
    assert_eq!(windows_of(&outs[3]), days(16, 21));
    assert_eq!(table_rows(&table, "").await, expected(21).await);
    assert!(log_version(&table).unwrap() > version);

    // The whole fan-out retried: nothing left to do, no commit.
    let version = log_version(&table);
    let outs = fan_out("1995-06-21");
    assert!(outs.iter().all(|o| windows_of(o).is_empty()));
    assert_eq!(log_version(&table), version, "no commit by the re-runs");
}

/// A shard that does not exist, or a shard with `--downstream` (which every worker would
/// repeat over the whole range), is refused with exit 2 before anything is written.
#[test]
fn a_bad_shard_is_refused_and_nothing_is_written() {
    let p = TestProject::new();
    for (args, says) in [
        (vec!["--shard", "4/4"], "counted from 0"),
        (vec!["--shard", "1/0"], "at least 1"),
        (vec!["--shard", "two"], "not a shard"),
        (vec!["--shard", "0/2", "--downstream"], "--downstream"),
    ] {
        let mut all = vec![
            "backfill",
            "lineitem_by_ship_day",
            "--from",
            "1995-06-01",
            "--to",
            "1995-06-03",
        ];
        all.extend(args.iter().copied());
        let out = p.run(&all);
        assert_eq!(code(&out), 2, "{args:?}: {}", text(&out));
        assert!(text(&out).contains(says), "{args:?}: {}", text(&out));
    }
    assert!(!p.path().join("lake").exists(), "nothing written");
}
