//! Unit tests of the lints: each rule's positive and negative cases.
use super::*;
use datafusion::prelude::SessionContext;

pub(super) async fn plan(sql: &str) -> LogicalPlan {
    let ctx = SessionContext::new();
    ctx.sql("CREATE TABLE t (d DATE, x INT) AS VALUES (DATE '2026-01-01', 1)")
        .await
        .unwrap();
    ctx.sql(sql).await.unwrap().logical_plan().clone()
}

fn origin() -> SqlOrigin {
    SqlOrigin {
        file: "tables/t.toml".into(),
        first_line: 10,
        what: "sql".into(),
    }
}

#[tokio::test]
async fn volatile_functions_are_rejected_with_name_and_line() {
    for (sql, name, line) in [
        ("SELECT now() AS n FROM t", "now()", 10),
        (
            "SELECT x\nFROM t\nWHERE d = current_date",
            "current_date()",
            12,
        ),
        ("SELECT x FROM t WHERE x > random()", "random()", 10),
        ("SELECT uuid() AS u FROM t", "uuid()", 10),
        (
            "SELECT x FROM t WHERE d IN (SELECT d FROM t WHERE x < random())",
            "random()",
            10,
        ),
        (
            "-- now() in a comment does not count\nSELECT current_timestamp AS n FROM t",
            "now()",
            11,
        ),
    ] {
        let p = plan(sql).await;
        let e = check_determinism(&p, &[], sql, &origin()).unwrap_err();
        assert_eq!(e.kind(), crate::error::ErrorKind::Input);
        assert!(e.message().contains(name), "{sql}: {e}");
        assert!(e.message().contains(&format!("line {line}")), "{sql}: {e}");
    }
}

#[tokio::test]
async fn deterministic_sql_and_allowed_functions_pass() {
    let p = plan("SELECT date_trunc('month', d) AS m, abs(x) AS a FROM t").await;
    check_determinism(&p, &[], "", &origin()).unwrap();
    let p = plan("SELECT random() AS r FROM t").await;
    check_determinism(&p, &["random".to_string()], "", &origin()).unwrap();
}

#[tokio::test]
async fn limit_needs_a_total_order_and_window_functions_an_order() {
    let rules = |sql: &'static str| async move {
        order_dependence(&plan(sql).await)
            .unwrap()
            .into_iter()
            .map(|f| f.rule)
            .collect::<Vec<_>>()
    };
    // Positive cases: flagged.
    assert_eq!(rules("SELECT x FROM t LIMIT 5").await, ["limit"]);
    assert_eq!(
        rules("SELECT x, d FROM t ORDER BY d LIMIT 5").await,
        ["limit"]
    );
    assert_eq!(rules("SELECT x FROM t OFFSET 1").await, ["limit"]);
    assert_eq!(
        rules("SELECT row_number() OVER () AS n, x FROM t").await,
        ["window_order"]
    );
    assert_eq!(
        rules("SELECT ntile(2) OVER (PARTITION BY d) AS r FROM t").await,
        ["window_order"]
    );
    // Negative cases: deterministic. Ranks give peers the same value (regression: a
    // `rank()` over a non-total ORDER BY was refused).
    for sql in [
        "SELECT rank() OVER (PARTITION BY d) AS r FROM t",
        "SELECT x, rank() OVER (ORDER BY d) AS r FROM t",
        "SELECT x, dense_rank() OVER (PARTITION BY x ORDER BY d DESC) AS r FROM t",
        "SELECT x, percent_rank() OVER (ORDER BY d) AS p, cume_dist() OVER (ORDER BY d) AS c FROM t",
    ] {
        assert!(rules(sql).await.is_empty(), "{sql}");
    }
    assert!(
        rules("SELECT x, d FROM t ORDER BY d, x LIMIT 5")
            .await
            .is_empty()
    );
    assert!(rules("SELECT x FROM t ORDER BY x LIMIT 5").await.is_empty());
    assert!(
        rules("SELECT row_number() OVER (ORDER BY x, d) AS n, x FROM t")
            .await
            .is_empty()
    );
    assert!(
        rules("SELECT sum(x) OVER (PARTITION BY d) AS s FROM t")
            .await
            .is_empty()
    );
    // The escape hatch.
    let p = plan("SELECT x FROM t LIMIT 5").await;
    assert!(
        check_order_dependence(&p, &[], "", &origin())
            .unwrap_err()
            .message()
            .contains("[lint] allow")
    );
    check_order_dependence(&p, &["limit".to_string()], "", &origin()).unwrap();
}

pub(super) async fn rules_of(sql: &str) -> Vec<(&'static str, String)> {
    order_dependence(&plan(sql).await)
        .unwrap()
        .into_iter()
        .map(|f| (f.rule, f.word))
        .collect()
}

/// Defect (issue 37): order-sensitive aggregates without ORDER BY passed the lint.
#[tokio::test]
async fn order_sensitive_aggregates_without_a_covering_order_are_refused() {
    let agg = |w: &str| vec![("aggregate_order", w.to_string())];
    for (sql, want) in [
        (
            "SELECT d, string_agg(CAST(x AS VARCHAR), ',') AS s FROM t GROUP BY d",
            agg("string_agg"),
        ),
        (
            "SELECT d, array_agg(x) AS a FROM t GROUP BY d",
            agg("array_agg"),
        ),
        (
            "SELECT d, array_agg(DISTINCT x) AS a FROM t GROUP BY d",
            agg("array_agg"),
        ),
        (
            "SELECT d, first_value(x) AS f FROM t GROUP BY d",
            agg("first_value"),
        ),
        (
            "SELECT d, last_value(x ORDER BY d) AS f FROM t GROUP BY d",
            agg("last_value"),
        ),
        (
            "SELECT d, any_value(x) AS f FROM t GROUP BY d",
            agg("any_value"),
        ),
        (
            "SELECT x FROM t WHERE d IN (SELECT first_value(d) FROM t)",
            agg("first_value"),
        ),
        (
            "SELECT d, array_agg(x ORDER BY x) AS a FROM t GROUP BY d",
            vec![],
        ),
        (
            "SELECT d, min(x) AS m, count(DISTINCT x) AS c FROM t GROUP BY d",
            vec![],
        ),
    ] {
        assert_eq!(rules_of(sql).await, want, "{sql}");
    }
    // The finding names the function and its line; [lint] allow accepts it.
    let sql = "SELECT d,\n  array_agg(x) AS a\nFROM t GROUP BY d";
    let p = plan(sql).await;
    let e = check_order_dependence(&p, &[], sql, &origin()).unwrap_err();
    for needle in ["array_agg", "line 11", "aggregate_order", "[lint] allow"] {
        assert!(e.message().contains(needle), "{needle}: {e}");
    }
    check_order_dependence(&p, &["aggregate_order".to_string()], sql, &origin()).unwrap();
}

/// Defect (issue 37): a window function needed only some ORDER BY, not a total one.
#[tokio::test]
async fn window_functions_whose_order_is_not_total_are_refused() {
    let win = |w: &str| vec![("window_order", w.to_string())];
    for (sql, want) in [
        (
            "SELECT x, d, row_number() OVER (ORDER BY x) AS n FROM t",
            win("row_number"),
        ),
        (
            "SELECT x, lag(x) OVER (PARTITION BY x ORDER BY d) AS p, d FROM t",
            vec![],
        ),
        ("SELECT d, lag(x) OVER (ORDER BY d) AS p FROM t", win("lag")),
        (
            "SELECT d, array_agg(x) OVER (PARTITION BY d) AS a FROM t",
            win("array_agg"),
        ),
        (
            "SELECT d, x, sum(x) OVER (PARTITION BY d ORDER BY x ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS s FROM t",
            vec![],
        ),
        (
            "SELECT d, x, sum(x) OVER (ORDER BY d ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS s FROM t",
            win("sum"),
        ),
        // A window in a subquery filtered afterwards (keep one row of each day).
        (
            "SELECT * FROM (SELECT d, x, row_number() OVER (PARTITION BY d ORDER BY d) AS n FROM t) WHERE n = 1",
            win("row_number"),
        ),
        ("SELECT d, sum(x) OVER (ORDER BY d) AS s FROM t", vec![]),
        // DISTINCT ON keeps the first row of each group in its ORDER BY.
        (
            "SELECT DISTINCT ON (d) d, x FROM t ORDER BY d",
            vec![("distinct_on", "distinct".to_string())],
        ),
        ("SELECT DISTINCT ON (d) d, x FROM t ORDER BY d, x", vec![]),
        (
            "SELECT d, count(*) OVER (PARTITION BY d) AS c FROM t",
            vec![],
        ),
    ] {
        assert_eq!(rules_of(sql).await, want, "{sql}");
    }
}

/// Issue 37: window bounds used jiff's bundled time zone database (2026f), DataFusion's
/// time zone functions chrono-tz's (2025b): `AT TIME ZONE 'EET'` disagreed with the task's
/// own window from 1977, and the lint refused it (and 103 more names). Windows now use the
/// release chrono-tz bundles (`task::tzdb`): those zones pass, early windows too.
#[tokio::test]
async fn sql_time_zones_agree_with_the_windows_database() {
    for zone in [
        "EET",
        "WET",
        "CET",
        "Europe/Amsterdam",
        "Europe/Berlin",
        "Asia/Kolkata",
    ] {
        let sql = format!("SELECT CAST(d AS TIMESTAMP) AT TIME ZONE '{zone}' AS l FROM t");
        let p = plan(&sql).await;
        for since in [None, Some(-1_672_531_200), Some(1_700_000_000)] {
            check_time_zones(&p, &[], &sql, &origin(), since).unwrap();
        }
    }
}

/// The lint's comparison finds where two databases differ: jiff's bundled one (2026f) and
/// chrono-tz's (2025b) on `EET` from 1977, on `Europe/Amsterdam` only before 1970 (1916).
#[test]
fn the_time_zone_comparison_finds_where_two_databases_differ() {
    let bundled = |z: &str| jiff::tz::TimeZone::get(z).unwrap();
    let chrono = |z: &str| z.parse::<chrono_tz::Tz>().unwrap();
    let (at, _, _) = super::tz::first_difference(&bundled("EET"), chrono("EET"), 0).unwrap();
    assert!(at.to_string().starts_with("1977"), "{at}");
    let amsterdam = (bundled("Europe/Amsterdam"), chrono("Europe/Amsterdam"));
    assert!(super::tz::first_difference(&amsterdam.0, amsterdam.1, 0).is_none());
    let (at, _, _) =
        super::tz::first_difference(&amsterdam.0, amsterdam.1, -2_208_988_800).unwrap();
    assert!(at.to_string().starts_with("1916"), "{at}");
    let berlin = crate::task::tzdb::get("Europe/Berlin").unwrap();
    assert!(
        super::tz::first_difference(&berlin, chrono("Europe/Berlin"), -2_208_988_800).is_none()
    );
}

#[tokio::test]
async fn parameters_must_be_known_and_window_referenced() {
    let p = plan("SELECT x FROM t WHERE d >= $window_start AND d < $window_end").await;
    let used = check_parameters(&p, &origin(), true).unwrap();
    assert_eq!(used.len(), 2);
    let p = plan("SELECT x FROM t").await;
    assert!(
        check_parameters(&p, &origin(), true)
            .unwrap_err()
            .message()
            .contains("never references")
    );
    let p = plan("SELECT x FROM t WHERE d >= $window_begin").await;
    assert!(
        check_parameters(&p, &origin(), true)
            .unwrap_err()
            .message()
            .contains("$window_begin")
    );
}
