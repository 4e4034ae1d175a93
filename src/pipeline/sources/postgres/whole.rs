//! A query computed by PostgreSQL itself: the independent checks' count of a window's rows
//! and their `[reconcile]` totals, for a task whose tables are all tables of one database.
//!
//! The checks' plan of the query (the task's SQL planned in the checks' own session, the
//! window's bounds bound) is written back as SQL by DataFusion's unparser in PostgreSQL's
//! dialect, each table under its name in the database and aliased as the task names it, and
//! sent whole, wrapped in `SELECT count(*) FROM (…) AS q` for a count. It runs in the run's
//! exported snapshot (see `snapshot`), on a connection of its own: the database counts the
//! very rows the extraction read.
//!
//! Only plans both engines compute alike are sent: projections, filters, aggregates with
//! `count`/`sum`/`min`/`max`, joins, unions, `DISTINCT` and aliases over columns, literals,
//! casts, comparisons (of text: equality only, text being ordered by the database's
//! collation), `AND`/`OR`/`NOT`, `+ - *`, `IS [NOT] NULL`, `BETWEEN`, `IN (…)` and
//! `LIKE`. Anything else (a function, a division, a subquery, a `LIMIT`, a table that is not
//! one of the database's) leaves the check on the checks' DataFusion route, and the report
//! says which route computed it.

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{ScalarValue, TableReference};
use datafusion::datasource::source_as_provider;
use datafusion::logical_expr::{Expr, LogicalPlan, Operator, SubqueryAlias, TableScanBuilder};

use super::snapshot::{in_snapshot, key};
use super::{PgTable, Settings, failure};
use crate::error::Result;

/// A plan as one statement for its database.
pub struct Whole {
    config: Settings,
    /// The plan in PostgreSQL's SQL.
    sql: String,
}

/// `plan` as one statement for the database all its tables are in; `None` when it reads
/// anything else or holds anything outside the list above.
pub fn whole(plan: &LogicalPlan) -> Option<Whole> {
    let mut config: Option<Settings> = None;
    let mut alike = true;
    let _ = plan.apply_with_subqueries(|node| {
        alike &= node_alike(node, &mut config);
        if !alike {
            tracing::debug!(node = %node.display(), "the check's query is not sent whole");
        }
        Ok(match alike {
            true => TreeNodeRecursion::Continue,
            false => TreeNodeRecursion::Stop,
        })
    });
    let Some(config) = config.filter(|_| alike) else {
        tracing::debug!("the check's query is not sent whole: it reads no PostgreSQL table");
        return None;
    };
    let remote = plan
        .clone()
        .transform_up(|node| match node {
            LogicalPlan::TableScan(scan) => {
                let provider = source_as_provider(&scan.source)?;
                let Some(pg) = provider.downcast_ref::<PgTable>() else {
                    return Ok(Transformed::no(LogicalPlan::TableScan(scan)));
                };
                let named = TableScanBuilder::new(pg.remote.clone(), scan.source).build()?;
                let aliased = SubqueryAlias::try_new(
                    std::sync::Arc::new(LogicalPlan::TableScan(named)),
                    scan.table_name,
                )?;
                Ok(Transformed::yes(LogicalPlan::SubqueryAlias(aliased)))
            }
            other => Ok(Transformed::no(other)),
        })
        .ok()?
        .data;
    let dialect = datafusion::sql::unparser::dialect::PostgreSqlDialect {};
    let sql = datafusion::sql::unparser::Unparser::new(&dialect)
        .plan_to_sql(&remote)
        .map_err(|e| tracing::debug!("the check's query cannot be written for the database: {e}"))
        .ok()?
        .to_string();
    Some(Whole { config, sql })
}

/// [`whole`] of the plan whose rows `plan` gives, for counting them: the projections on top
/// (which change no row count) are left out, the unparser writing a projection over another
/// with qualifiers its derived table hides.
pub fn whole_rows(mut plan: &LogicalPlan) -> Option<Whole> {
    while let LogicalPlan::Projection(p) = plan {
        plan = p.input.as_ref();
    }
    whole(plan)
}

/// Whether `node` is one PostgreSQL computes as DataFusion does (a table scan: a whole table
/// of the same database as the others, `config`).
fn node_alike(node: &LogicalPlan, config: &mut Option<Settings>) -> bool {
    use datafusion::logical_expr::Distinct;
    let kind = match node {
        LogicalPlan::TableScan(scan) => {
            let Ok(provider) = source_as_provider(&scan.source) else {
                return false;
            };
            let Some(pg) = provider.downcast_ref::<PgTable>() else {
                return false;
            };
            let same = match config {
                Some(c) => key(c) == key(&pg.config),
                None => {
                    *config = Some(pg.config.clone());
                    true
                }
            };
            same && scan.projection.is_none() && scan.fetch.is_none()
        }
        LogicalPlan::Projection(_)
        | LogicalPlan::Filter(_)
        | LogicalPlan::Aggregate(_)
        | LogicalPlan::SubqueryAlias(_)
        | LogicalPlan::Join(_)
        | LogicalPlan::Union(_)
        | LogicalPlan::Distinct(Distinct::All(_))
        | LogicalPlan::EmptyRelation(_)
        | LogicalPlan::Values(_) => true,
        _ => false,
    };
    kind && node.expressions().iter().all(expr_alike)
}

/// Whether `e` is built only of what both engines compute alike (see the module).
fn expr_alike(e: &Expr) -> bool {
    let mut alike = true;
    let _ = e.apply(|e| {
        alike &= match e {
            Expr::Column(_)
            | Expr::Literal(..)
            | Expr::Alias(_)
            | Expr::Not(_)
            | Expr::IsNull(_)
            | Expr::IsNotNull(_)
            | Expr::Between(_)
            | Expr::InList(_)
            | Expr::Negative(_)
            | Expr::Cast(_)
            | Expr::Like(_) => true,
            // A window's bound, in a plan not bound yet (asked once per task, see `checks`).
            Expr::Placeholder(_) => true,
            Expr::BinaryExpr(b) => {
                use Operator::*;
                let text = |e: &Expr| {
                    matches!(
                        e,
                        Expr::Literal(ScalarValue::Utf8(_) | ScalarValue::LargeUtf8(_), _)
                    )
                };
                match b.op {
                    Eq | NotEq | IsDistinctFrom | IsNotDistinctFrom | And | Or | Plus | Minus
                    | Multiply => true,
                    // Text is ordered by the database's collation, not byte by byte.
                    Lt | LtEq | Gt | GtEq => !text(&b.left) && !text(&b.right),
                    _ => false,
                }
            }
            Expr::AggregateFunction(a) => {
                matches!(a.func.name(), "count" | "sum" | "min" | "max")
                    && a.params.filter.is_none()
                    && a.params.order_by.is_empty()
            }
            _ => false,
        };
        Ok(match alike {
            true => TreeNodeRecursion::Continue,
            false => TreeNodeRecursion::Stop,
        })
    });
    alike
}

impl Whole {
    /// The statement counting the plan's rows.
    pub fn count_sql(&self) -> String {
        format!("SELECT count(*) FROM ({}) AS q", self.sql)
    }

    /// The statement giving the plan's `columns` columns as text.
    pub fn text_sql(&self, columns: usize) -> String {
        let names: Vec<String> = (0..columns).map(|i| format!("c{i}")).collect();
        let texts: Vec<String> = names.iter().map(|c| format!("q.{c}::text")).collect();
        format!(
            "SELECT {} FROM ({}) AS q({})",
            texts.join(", "),
            self.sql,
            names.join(", ")
        )
    }

    /// The plan's rows counted by the server, in the run's snapshot; `None` when the server
    /// refuses the statement as written (a syntax or type error: SQLSTATE class 42).
    pub async fn count(&self) -> Result<Option<u64>> {
        let Some(rows) = self.query(&self.count_sql()).await? else {
            return Ok(None);
        };
        let n: i64 = rows.first().map(|r| r.get(0)).unwrap_or_default();
        Ok(Some(n as u64))
    }

    /// The plan's rows, `columns` columns as text (NULL as `None`), computed by the server in
    /// the run's snapshot; `None` as for [`Whole::count`].
    pub async fn text_rows(&self, columns: usize) -> Result<Option<Vec<Vec<Option<String>>>>> {
        let Some(rows) = self.query(&self.text_sql(columns)).await? else {
            return Ok(None);
        };
        Ok(Some(
            rows.iter()
                .map(|r| (0..columns).map(|i| r.get(i)).collect())
                .collect(),
        ))
    }

    async fn query(&self, sql: &str) -> Result<Option<Vec<tokio_postgres::Row>>> {
        let client = in_snapshot(&self.config).await?;
        tracing::debug!(
            sql,
            "PostgreSQL query sent (a check computed by the database)"
        );
        match client.query(sql, &[]).await {
            Ok(rows) => Ok(Some(rows)),
            Err(e) if e.code().is_some_and(|c| c.code().starts_with("42")) => {
                tracing::info!(
                    sql,
                    "the database refused the check's query as written, which the checks then compute themselves: {e}"
                );
                Ok(None)
            }
            Err(e) => Err(failure(e)),
        }
    }
}

/// The unqualified name of `table` in the database: `(schema, name)` as the catalog spells
/// them.
pub(super) async fn remote_name(
    client: &tokio_postgres::Client,
    table: &str,
) -> Result<TableReference> {
    let row = client
        .query_one(
            "SELECT n.nspname::text, c.relname::text FROM pg_class c \
             JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = $1::text::regclass",
            &[&table],
        )
        .await
        .map_err(failure)?;
    Ok(TableReference::partial(
        row.get::<_, String>(0),
        row.get::<_, String>(1),
    ))
}
