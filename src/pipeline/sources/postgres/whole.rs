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
//! Only plans both engines compute alike are sent (the short list is in `alike`); anything
//! else (a function, arithmetic, a float, text ordered by collation, a subquery, a `LIMIT`, a
//! table that is not one of the database's) leaves the check on the checks' DataFusion
//! route, and the report says which route computed it. So does a statement the server
//! refuses as written or cannot compute (SQLSTATE classes 42 and 22).

use datafusion::common::TableReference;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::datasource::source_as_provider;
use datafusion::logical_expr::{LogicalPlan, SubqueryAlias, TableScanBuilder};

mod alike;

use super::snapshot::in_snapshot;
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
    let Some(config) = alike::database(plan) else {
        tracing::debug!("the check's query is not sent whole (see the debug line above, if any)");
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
    /// refuses the statement as written or cannot compute it (SQLSTATE classes 42 and 22).
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
            // Class 42: the statement as written (syntax, a type); class 22: a value the
            // database cannot compute (an overflow) where DataFusion may.
            Err(e)
                if e.code()
                    .is_some_and(|c| ["42", "22"].contains(&&c.code()[..2])) =>
            {
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
