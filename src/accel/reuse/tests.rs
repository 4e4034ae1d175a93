use super::*;
use arrow::array::{Date32Array, Int64Array};
use arrow::datatypes::{DataType, Field};
use datafusion::datasource::MemTable;
use datafusion::physical_plan::collect;
use datafusion::prelude::{SessionConfig, SessionContext};

/// A session over window `day`'s slice (three rows dated `day`), and the slice.
fn window(day: i32) -> (SessionContext, Vec<Vec<RecordBatch>>) {
    let schema = Arc::new(Schema::new(vec![
        Field::new("d", DataType::Date32, false),
        Field::new("x", DataType::Int64, false),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Date32Array::from(vec![day; 3])),
            Arc::new(Int64Array::from(vec![day as i64, 10, 100])),
        ],
    )
    .unwrap();
    let parts = vec![vec![batch]];
    let config = SessionConfig::new().with_target_partitions(1);
    let ctx = SessionContext::new_with_config(config);
    let table = MemTable::try_new(schema, parts.clone()).unwrap();
    ctx.register_table("t", Arc::new(table)).unwrap();
    (ctx, parts)
}

/// Plans `sql` (with `{lo}`/`{hi}` the window's bounds as dates) for days 1..=5 through
/// one `Reuse`; checks each plan's rows against the window planned on its own, and
/// returns whether plans were being derived at the end.
async fn run(sql: &str) -> bool {
    let reuse = Reuse::default();
    for day in 1..=5 {
        let (ctx, parts) = window(19_000 + day);
        let date = |d: i32| {
            let v = ScalarValue::Date32(Some(19_000 + d)).to_string();
            format!("DATE '{v}'")
        };
        let q = sql
            .replace("{lo}", &date(day))
            .replace("{hi}", &date(day + 1));
        let logical = ctx.sql(&q).await.unwrap().into_optimized_plan().unwrap();
        let state = ctx.state();
        let slices = |t: &TableReference| (t.table() == "t").then(|| parts.clone());
        let plan = reuse.physical(&logical, &state, &slices).await.unwrap();
        let own = ctx
            .sql(&q)
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        assert_eq!(show(&plan), show(&own), "day {day}: {q}");
        let got = collect(plan, ctx.task_ctx()).await.unwrap();
        let want = collect(own, ctx.task_ctx()).await.unwrap();
        assert_eq!(got, want, "day {day}: {q}");
    }
    reuse.active()
}

#[tokio::test]
async fn a_window_query_over_a_slice_is_planned_once() {
    let sql = "SELECT x * 2 AS y, d FROM t WHERE d >= {lo} AND d < {hi}";
    assert!(run(sql).await);
    let sql = "SELECT count(*) AS n, sum(x) AS s FROM t WHERE d >= {lo} AND d < {hi}";
    assert!(run(sql).await);
    // A value computed from the window's bounds is a literal that changes with them.
    let sql = "SELECT x, {lo} + INTERVAL '7' DAY AS week_end FROM t WHERE d >= {lo}";
    assert!(run(sql).await);
}

#[tokio::test]
async fn ambiguous_literals_make_each_window_plan_itself() {
    // The first window's start is also a constant of the query: which literal to change
    // cannot be told, so every window is planned on its own (and still right).
    let first = format!("DATE '{}'", ScalarValue::Date32(Some(19_001)));
    let sql = format!("SELECT x, d > {first} AS later FROM t WHERE d >= {{lo}} AND d < {{hi}}");
    assert!(!run(&sql).await);
}

#[test]
fn literals_map_one_to_one() {
    let v = |i: i64| ScalarValue::Int64(Some(i));
    assert!(Mapping::new(&[v(1), v(2)], &[v(3), v(4)]).is_some());
    assert!(Mapping::new(&[v(1), v(1)], &[v(3), v(4)]).is_none());
    assert!(Mapping::new(&[v(1), v(1)], &[v(3), v(1)]).is_none());
    let m = Mapping::new(&[v(1), v(5)], &[v(2), v(5)]).unwrap();
    assert_eq!(m.get(&v(1)), Some(v(2)));
    assert_eq!(m.get(&v(5)), Some(v(5)));
    assert_eq!(m.get(&v(9)), None);
}
