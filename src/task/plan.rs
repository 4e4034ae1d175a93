//! SQL plan stage: task SQL → bound, linted, type-normalised DataFusion plan.
//!
//! Invariants:
//! - The window bounds enter the plan only through DataFusion parameter binding
//!   (`$window_start`, `$window_end`, `$window_start_ts`, `$window_end_ts`), never by text.
//! - The lint runs on the unbound, unoptimised plan; DDL/DML/statements are refused.
//! - The output schema is what Delta stores: every column nullable, view/dictionary/unsigned/
//!   nanosecond types mapped to their Delta equivalents, the window column a DATE (day, week,
//!   month) or a UTC TIMESTAMP (hour).
//! - Everything here is an `Input` error: no data has been read yet.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, SchemaRef, TimeUnit};
use datafusion::common::ScalarValue;
use datafusion::datasource::MemTable;
use datafusion::execution::context::SQLOptions;
use datafusion::prelude::{DataFrame, SessionContext};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::task::Task;
use crate::task::lint::{self, SqlOrigin};
use crate::task::range::WindowRange;
use crate::task::window::{Grain, Window};

mod output;

pub use output::names;
use output::normalize_output;

/// The alias the `[reconcile].output` query reads the run's result under.
pub const OUTPUT_TABLE: &str = "output";

/// A planned task run.
pub struct Planned {
    /// The task's query with the window bound (if one was given), cast to `schema`.
    pub df: DataFrame,
    /// The Delta table schema the output is written with.
    pub schema: SchemaRef,
    /// The window's range (`None`: planned without a window): its parameters are bound.
    pub range: Option<WindowRange>,
    /// Hash of everything that defines the rows: SQL, reconciliation SQL, window column.
    pub sql_hash: String,
    /// `[reconcile].source` planned and bound, if the task has a `[reconcile]` section.
    pub reconcile_source: Option<DataFrame>,
}

impl Planned {
    /// The bound parameter values (none without a window), for `explain` and the run record.
    pub fn params(&self) -> Vec<(String, ScalarValue)> {
        self.range
            .as_ref()
            .map(WindowRange::params)
            .unwrap_or_default()
    }

    /// The window's range; an error for a plan made without a window.
    pub fn window_range(&self) -> Result<&WindowRange> {
        self.range
            .as_ref()
            .ok_or_else(|| Error::runtime("the task was planned without a window"))
    }
}

fn sql_options() -> SQLOptions {
    SQLOptions::new()
        .with_allow_ddl(false)
        .with_allow_dml(false)
        .with_allow_statements(false)
}

/// The type each window parameter is bound with ([`WindowRange::params`]), for planning before a
/// window is known.
pub fn param_types(grain: Grain) -> Vec<(String, DataType)> {
    let ts = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
    let bound = if grain.uses_dates() {
        DataType::Date32
    } else {
        ts.clone()
    };
    vec![
        ("window_start".into(), bound.clone()),
        ("window_end".into(), bound),
        ("window_start_ts".into(), ts.clone()),
        ("window_end_ts".into(), ts),
    ]
}

/// `df` with each window parameter its SQL leaves untyped (`$window_start AS day`: nothing
/// to infer a type from) given the type it will be bound with, so the unbound plan has the
/// output columns every bound one has.
fn type_params(df: DataFrame, grain: Grain) -> Result<DataFrame> {
    use datafusion::common::tree_node::{Transformed, TreeNode};
    use datafusion::logical_expr::{Expr, expr::Placeholder};
    let types: HashMap<String, DataType> = param_types(grain).into_iter().collect();
    let mut typed = false;
    let (state, plan) = df.into_parts();
    let plan = plan
        .transform_up_with_subqueries(|node| {
            let node = node.map_expressions(|e| {
                e.transform_up(|e| match e {
                    Expr::Placeholder(Placeholder { id, field: None }) => {
                        match types.get(id.trim_start_matches('$')) {
                            Some(dt) => {
                                typed = true;
                                let field = Arc::new(Field::new(&id, dt.clone(), true));
                                let p = Placeholder::new_with_field(id, Some(field));
                                Ok(Transformed::yes(Expr::Placeholder(p)))
                            }
                            None => Ok(Transformed::no(Expr::Placeholder(Placeholder {
                                id,
                                field: None,
                            }))),
                        }
                    }
                    other => Ok(Transformed::no(other)),
                })
            })?;
            // Columns computed below change type: every node's schema is derived again.
            if typed {
                node.map_data(|n| n.recompute_schema())
            } else {
                Ok(node)
            }
        })?
        .data;
    Ok(DataFrame::new(state, plan))
}

/// For an unknown column of a task reading file sources: where a column added in a landing
/// zone's later files went (a zone's columns are its first file's).
fn later_column_hint(task: &Task, e: &datafusion::error::DataFusionError) -> &'static str {
    let files = task.sources.iter().any(|s| {
        s.upstream.is_none() && s.format != crate::task::Format::Delta && !one_file(&s.uri)
    });
    match files && e.to_string().contains("No field named") {
        true => {
            " (if that column is only in a landing zone's later files: a zone's columns are those of its first file in path order, so a column added since is not one of them, unless the source sets schema_from = \"last\"; see the landing-zone guide)"
        }
        false => "",
    }
}

/// Whether a source location names one file (`events.csv`, `s3://b/day.json.gz`), never a
/// landing zone: its last segment has an extension and no glob.
fn one_file(uri: &str) -> bool {
    let last = uri.rsplit('/').next().unwrap_or(uri);
    !last.contains(['*', '?', '['])
        && last
            .rsplit_once('.')
            .is_some_and(|(a, b)| !a.is_empty() && !b.is_empty())
}

/// Plan one SQL text: refuse statements, lint, check parameters, bind.
async fn plan_sql(
    ctx: &SessionContext,
    task: &Task,
    sql: &str,
    what: &str,
    params: Option<&[(String, ScalarValue)]>,
    require_window: bool,
) -> Result<DataFrame> {
    let file_text = std::fs::read_to_string(&task.sql_file).unwrap_or_default();
    let file = if what == "sql" {
        &task.sql_file
    } else {
        &task.file
    };
    let origin = SqlOrigin::find(file, &file_text, sql, what);
    let df = ctx
        .sql_with_options(sql, sql_options())
        .await
        .map_err(|e| {
            Error::input(format!(
                "{} ({what}): invalid SQL: {e}{}",
                file.display(),
                later_column_hint(task, &e)
            ))
        })?;
    lint::check_determinism(df.logical_plan(), &task.lint_allow, sql, &origin)?;
    // Float sums matter where rows are published; `[reconcile]` and `[checks]` queries are
    // compared (with a tolerance) and never published.
    let mut allow = task.lint_allow.clone();
    if what != "sql" {
        allow.push("float_aggregate".to_string());
    }
    lint::check_order_dependence(df.logical_plan(), &allow, sql, &origin)?;
    lint::check_zone_names(df.logical_plan(), sql, &origin)?;
    let since = params.and_then(|p| {
        p.iter().find_map(|(name, v)| match (name.as_str(), v) {
            ("window_start_ts", ScalarValue::TimestampMicrosecond(Some(us), _)) => {
                Some(us.div_euclid(1_000_000))
            }
            _ => None,
        })
    });
    lint::check_time_zones(df.logical_plan(), &task.lint_allow, sql, &origin, since)?;
    lint::check_parameters(df.logical_plan(), &origin, require_window)?;
    let df = if require_window {
        with_arrival_reach(df, task)?
    } else {
        df
    };
    match params {
        None => type_params(df, task.grain),
        Some(p) => {
            let map: HashMap<String, ScalarValue> = p.iter().cloned().collect();
            df.with_param_values(map).map_err(|e| {
                Error::input(format!(
                    "{} ({what}): cannot bind the window parameters: {e}",
                    file.display()
                ))
            })
        }
    }
}

/// `df` with each scan of a landing zone that declares its arrival days (`arrival`) under the
/// filter keeping the days the window reaches (see `task::arrival`).
fn with_arrival_reach(df: DataFrame, task: &Task) -> Result<DataFrame> {
    use datafusion::common::tree_node::Transformed;
    use datafusion::logical_expr::{Filter, LogicalPlan};
    if task.sources.iter().all(|s| s.arrival.is_none()) {
        return Ok(df);
    }
    let (state, plan) = df.into_parts();
    let mut failed = None;
    let plan = plan
        .transform_up_with_subqueries(|node| {
            let LogicalPlan::TableScan(scan) = &node else {
                return Ok(Transformed::no(node));
            };
            let declared = task
                .sources
                .iter()
                .find(|s| scan.table_name.table().eq_ignore_ascii_case(&s.alias))
                .and_then(|s| s.arrival.as_ref());
            let Some(arrival) = declared else {
                return Ok(Transformed::no(node));
            };
            match crate::task::arrival::reach(arrival, &scan.table_name, &node) {
                Ok(predicate) => {
                    let filter = Filter::try_new(predicate, Arc::new(node))?;
                    Ok(Transformed::yes(LogicalPlan::Filter(filter)))
                }
                Err(e) => {
                    failed = Some(e);
                    Ok(Transformed::no(node))
                }
            }
        })?
        .data;
    match failed {
        Some(e) => Err(e),
        None => Ok(DataFrame::new(state, plan)),
    }
}

/// Plan a task; with `window = None` (validate) parameters stay unbound.
pub async fn plan(ctx: &SessionContext, task: &Task, window: Option<&Window>) -> Result<Planned> {
    plan_with(ctx, task, window, true, true).await
}

/// Plan a task for `window`; `check_reconcile = false` skips planning `[reconcile].output`
/// against an empty table to compare its columns with `[reconcile].source` — a check that
/// does not depend on the window, for callers that made it once already.
pub async fn plan_window(
    ctx: &SessionContext,
    task: &Task,
    window: &Window,
    check_reconcile: bool,
) -> Result<Planned> {
    plan_with(ctx, task, Some(window), check_reconcile, true).await
}

/// The task's query alone for `window` (`reconcile_source` is `None`): for callers that
/// compute the reconciliation elsewhere (the runner's accelerated path, audit's row counts).
pub async fn plan_query_window(
    ctx: &SessionContext,
    task: &Task,
    window: &Window,
) -> Result<Planned> {
    plan_with(ctx, task, Some(window), false, false).await
}

/// `[reconcile].source` alone for `window` (`None` without `[reconcile]`): for the
/// independent checks, whose session may hold only the columns that query reads.
pub async fn plan_reconcile_source(
    ctx: &SessionContext,
    task: &Task,
    window: &Window,
) -> Result<Option<DataFrame>> {
    let Some(r) = &task.reconcile else {
        return Ok(None);
    };
    let params = WindowRange::of(task, window).params();
    let src = plan_sql(
        ctx,
        task,
        &r.source_sql,
        "[reconcile].source",
        Some(&params),
        true,
    )
    .await?;
    Ok(Some(src))
}

/// `[reconcile].source` with its parameters unbound but typed (`None` without `[reconcile]`):
/// for the checks that evaluate it for many windows at once.
pub async fn plan_reconcile_source_unbound(
    ctx: &SessionContext,
    task: &Task,
) -> Result<Option<DataFrame>> {
    let Some(r) = &task.reconcile else {
        return Ok(None);
    };
    let src = plan_sql(ctx, task, &r.source_sql, "[reconcile].source", None, true).await?;
    Ok(Some(src))
}

/// The task's query alone with its parameters unbound but typed.
pub async fn plan_query_unbound(ctx: &SessionContext, task: &Task) -> Result<DataFrame> {
    Ok(plan_with(ctx, task, None, false, false).await?.df)
}

async fn plan_with(
    ctx: &SessionContext,
    task: &Task,
    window: Option<&Window>,
    check_reconcile: bool,
    with_source: bool,
) -> Result<Planned> {
    let range = window.map(|w| WindowRange::of(task, w));
    let params = range.as_ref().map(WindowRange::params);
    let df = plan_sql(ctx, task, &task.sql, "sql", params.as_deref(), true).await?;
    let (df, schema) = normalize_output(df, task)?;

    let reconcile_source = match &task.reconcile {
        Some(_) if !with_source && !check_reconcile => None,
        None => None,
        Some(r) => {
            let src = plan_sql(
                ctx,
                task,
                &r.source_sql,
                "[reconcile].source",
                params.as_deref(),
                true,
            )
            .await?;
            if check_reconcile {
                // Plan the output side against an empty table of the output schema, to check
                // it now.
                let out = plan_output_query(
                    ctx,
                    task,
                    Arc::new(MemTable::try_new(schema.clone(), vec![vec![]])?),
                    params.as_deref(),
                )
                .await?;
                check_reconcile_columns(task, &src, &out)?;
            }
            Some(src)
        }
    };

    let sql_hash = sql_hash(task);

    Ok(Planned {
        df,
        schema,
        range,
        sql_hash,
        reconcile_source,
    })
}

/// The hash identifying what a task computes: its SQL, window column and reconciliation
/// queries (whitespace at the ends ignored). `--stale` and `status` compare it.
pub fn sql_hash(task: &Task) -> String {
    let mut h = Sha256::new();
    h.update(task.sql.trim().as_bytes());
    h.update([0]);
    h.update(task.partition_by.as_bytes());
    if let Some(r) = &task.reconcile {
        h.update([0]);
        h.update(r.source_sql.trim().as_bytes());
        h.update([0]);
        h.update(r.output_sql.trim().as_bytes());
    }
    format!("sha256:{}", hex::encode(&h.finalize()[..8]))
}

/// A custom `[[checks.sql]]` query in `ctx` (where `output` and the sources are registered),
/// with the window parameters bound; linted like the task's SQL.
pub async fn plan_data_check(
    ctx: &SessionContext,
    task: &Task,
    sql: &str,
    name: &str,
    params: &[(String, ScalarValue)],
) -> Result<DataFrame> {
    let what = format!("[checks] {name}");
    plan_sql(ctx, task, sql, &what, Some(params), false).await
}

/// A custom `[[checks.sql]]` query with the window parameters typed but unbound (validation).
pub async fn plan_data_check_unbound(
    ctx: &SessionContext,
    task: &Task,
    sql: &str,
    name: &str,
) -> Result<DataFrame> {
    let what = format!("[checks] {name}");
    plan_sql(ctx, task, sql, &what, None, false).await
}

/// Plan `[reconcile].output` with `provider` registered as the `output` table, in a session
/// of its own (same configuration) so concurrent windows never see each other's output.
pub async fn plan_output_query(
    ctx: &SessionContext,
    task: &Task,
    provider: Arc<dyn datafusion::catalog::TableProvider>,
    params: Option<&[(String, ScalarValue)]>,
) -> Result<DataFrame> {
    let r = task.reconcile.as_ref().expect("caller checks [reconcile]");
    let own = SessionContext::new_with_config_rt(ctx.copied_config(), ctx.runtime_env());
    own.register_table(OUTPUT_TABLE, provider)?;
    plan_sql(
        &own,
        task,
        &r.output_sql,
        "[reconcile].output",
        params,
        false,
    )
    .await
}

fn check_reconcile_columns(task: &Task, src: &DataFrame, out: &DataFrame) -> Result<()> {
    let r = task.reconcile.as_ref().expect("caller checks [reconcile]");
    let names = |df: &DataFrame| -> Vec<String> {
        let mut v: Vec<String> = df
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        v.sort();
        v
    };
    let (s, o) = (names(src), names(out));
    if s != o {
        return Err(Error::input(format!(
            "{}: [reconcile].source and [reconcile].output must return the same columns (compared by name): source has {}, output has {}",
            task.file.display(),
            s.join(", "),
            o.join(", ")
        )));
    }
    for col in r.tolerance.keys() {
        if !s.contains(col) {
            return Err(Error::input(format!(
                "{}: [reconcile].tolerance.{col}: no such column in the reconciliation queries (they return {})",
                task.file.display(),
                s.join(", ")
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
