//! audit/repair on a table damaged the way the incident did, across a 10-day range.

use std::collections::BTreeSet;
use std::process::Command;

use crate::common::*;
use crate::incident::legacy_append;

fn day(d: u32) -> String {
    format!("1995-06-{d:02}")
}

#[tokio::test]
async fn audit_names_exactly_the_damaged_windows_and_repair_fixes_them() {
    let p = TestProject::new();
    let table = p.table_dir("lineitem_by_ship_day");
    p.run_ok("lineitem_by_ship_day", &day(10));
    for d in 1..=9 {
        let expected = expected_lineitem_day(&day(d)).await.len();
        match d {
            // Failed halfway, retried: duplicates.
            2 | 5 => {
                legacy_append(&table, &day(d), Some(expected / 2)).await;
                legacy_append(&table, &day(d), None).await;
            }
            // Failed halfway, never retried: a partial window.
            7 => legacy_append(&table, &day(d), Some(expected / 2)).await,
            // Never ran: a missing window.
            8 => {}
            _ => legacy_append(&table, &day(d), None).await,
        }
    }

    let out = p.run(&[
        "--output",
        "json",
        "audit",
        "lineitem_by_ship_day",
        "--from",
        &day(1),
        "--to",
        &day(10),
    ]);
    assert_eq!(code(&out), 4, "{}", text(&out));
    let audits = json_lines(&out);
    assert_eq!(audits.len(), 10);
    let damaged: BTreeSet<String> = audits
        .iter()
        .filter(|a| a["status"] == "damaged")
        .map(|a| a["window"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        damaged,
        [day(2), day(5), day(7), day(8)].into_iter().collect()
    );
    assert!(audits[1]["duplicate_keys"].as_u64().unwrap() > 0);
    assert_eq!(audits[7]["rows"], 0);

    let out = p.run(&[
        "repair",
        "lineitem_by_ship_day",
        "--from",
        &day(1),
        "--to",
        &day(10),
        "--parallel",
        "2",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(
        s.contains("before: 4 of 10 windows damaged")
            && s.contains("after: 0 of 10 windows damaged"),
        "{s}"
    );
    let out = p.run(&[
        "audit",
        "lineitem_by_ship_day",
        "--from",
        &day(1),
        "--to",
        &day(10),
        "--reconcile",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));

    // An independent reader agrees with the source, day by day.
    let py = std::env::var("IDEMLAKE_PYTHON").unwrap_or_else(|_| {
        repo()
            .join(".venv-py/bin/python")
            .to_string_lossy()
            .into_owned()
    });
    let out = Command::new(py)
        .arg(repo().join("scripts/read_delta.py"))
        .arg(&table)
        .arg("ship_date")
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", text(&out));
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for d in 1..=10 {
        let n = expected_lineitem_day(&day(d)).await.len();
        assert_eq!(got["partitions"][day(d)], n, "{}: {got}", day(d));
    }
}
