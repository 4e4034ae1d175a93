//! `[checks]`: a task's data checks on one window's rows, on the independent path.
//!
//! Each window's checks run in a session of their own built from the checker's (the sources
//! registered plainly, see the parent module), where `output` is the window as readers will see
//! it after the commit: the staged files read back from storage (overwrite), the table's window
//! with the staged rows upserted into it (merge), or the published window (`idemlake check`).
//! Every check is a query for offending rows; it passes when there are none.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::{DataType, SchemaRef};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::catalog::TableProvider;
use datafusion::common::{Column, JoinType, ScalarValue};
use datafusion::datasource::MemTable;
use datafusion::prelude::{DataFrame, Expr, SessionContext, col};
use deltalake::DeltaTable;

use crate::error::{Error, Result};
use crate::report::record::DataCheckResult;
use crate::task::Task;
use crate::task::checks::{CheckKind, DataCheck, Severity, quote, reference_table};
use crate::task::plan::{self, OUTPUT_TABLE};
use crate::task::range::WindowRange;
use crate::task::window::Window;

/// Offending rows kept per failed check.
const SAMPLE_ROWS: usize = 5;

/// The tables `relationships` checks compare against, opened once per run at their latest
/// version (reading their logs, not their data): every window of the run is checked against
/// the same version of each.
#[derive(Default)]
pub struct References {
    tables: tokio::sync::OnceCell<BTreeMap<usize, DeltaTable>>,
}

impl References {
    /// The other table of each relationship check, by the check's index in the task.
    async fn tables(&self, task: &Task) -> Result<&BTreeMap<usize, DeltaTable>> {
        self.tables
            .get_or_try_init(|| async {
                let mut out = BTreeMap::new();
                for (i, c) in task.checks.iter().enumerate() {
                    let CheckKind::Relationship {
                        to_task, to_uri, ..
                    } = &c.kind
                    else {
                        continue;
                    };
                    let url = url::Url::parse(to_uri).map_err(|e| {
                        Error::runtime(format!("relationships: table of `{to_task}`: {e}"))
                    })?;
                    let table = crate::delta::table::open(&url).await.map_err(|e| {
                        e.context(format!(
                            "[checks] {}: cannot read the table of task `{to_task}`",
                            c.name
                        ))
                    })?;
                    if table.version().is_none() {
                        return Err(Error::runtime(format!(
                            "[checks] {}: task `{to_task}` has published nothing yet, so no value can be checked against it",
                            c.name
                        )));
                    }
                    out.insert(i, table);
                }
                Ok::<_, Error>(out)
            })
            .await
    }

    /// Register the other tables in `own` under [`reference_table`] names.
    async fn register(&self, own: &SessionContext, task: &Task) -> Result<()> {
        for (i, table) in self.tables(task).await? {
            table.update_datafusion_session(&own.state())?;
            own.register_table(reference_table(*i).as_str(), table.table_provider().await?)?;
        }
        Ok(())
    }
}

/// Run every check of `task` for `window` against `output` in `own` (see [`session`]). The
/// checks were planned by [`validate`] already, so a failure here is a runtime one (exit 1).
pub async fn evaluate(
    own: &SessionContext,
    task: &Task,
    window: &Window,
    output: Arc<dyn TableProvider>,
    refs: &References,
) -> Result<Vec<DataCheckResult>> {
    own.register_table(OUTPUT_TABLE, output)?;
    refs.register(own, task).await?;
    let params = WindowRange::of(task, window).params();
    let mut out = Vec::with_capacity(task.checks.len());
    for (i, check) in task.checks.iter().enumerate() {
        let failed = |e: Error| {
            Error::runtime(format!(
                "[checks] {} failed to run: {}",
                check.name,
                e.message()
            ))
        };
        let df = plan_check(own, task, i, check, Some(&params))
            .await
            .map_err(failed)?;
        let failing_rows = df.clone().count().await.map_err(|e| failed(e.into()))? as u64;
        let sample = if failing_rows == 0 {
            Vec::new()
        } else {
            let batches = df.limit(0, Some(SAMPLE_ROWS))?.collect().await;
            rows(&batches.map_err(|e| failed(e.into()))?)?
        };
        out.push(DataCheckResult {
            check: check.name.clone(),
            severity: check.severity,
            ok: failing_rows == 0,
            failing_rows,
            sample,
        });
    }
    Ok(out)
}

/// The session a window's checks run in: `base`'s configuration, store registry and sources
/// (the checker's: plain), nothing else yet.
pub async fn session(base: &SessionContext, task: &Task) -> Result<SessionContext> {
    let own = SessionContext::new_with_config_rt(base.copied_config(), base.runtime_env());
    for s in &task.sources {
        own.register_table(
            s.alias.as_str(),
            base.table_provider(s.alias.as_str()).await?,
        )?;
    }
    Ok(own)
}

/// Plan check `index`: custom SQL with the window parameters bound (`None`: typed, unbound).
async fn plan_check(
    own: &SessionContext,
    task: &Task,
    index: usize,
    check: &DataCheck,
    params: Option<&[(String, ScalarValue)]>,
) -> Result<DataFrame> {
    match (&check.kind, params) {
        (CheckKind::Sql(sql), Some(p)) => {
            plan::plan_data_check(own, task, sql, &check.name, p).await
        }
        (CheckKind::Sql(sql), None) => {
            plan::plan_data_check_unbound(own, task, sql, &check.name).await
        }
        _ => own.sql(&check.sql(index)).await.map_err(|e| {
            Error::input(format!(
                "{}: [checks] {}: {e}",
                task.file.display(),
                check.name
            ))
        }),
    }
}

/// `provider` with `schema`'s columns, in its order and types (the staged files read back
/// put the partition column last and may read strings as views): what `validate` planned
/// the checks against.
pub fn shaped(
    own: &SessionContext,
    provider: Arc<dyn TableProvider>,
    schema: &SchemaRef,
) -> Result<Arc<dyn TableProvider>> {
    let df = own.read_table(provider)?;
    let columns: Vec<Expr> = schema
        .fields()
        .iter()
        .filter(|f| df.schema().has_column_with_unqualified_name(f.name()))
        .map(|f| datafusion::prelude::cast(column(f.name()), f.data_type().clone()).alias(f.name()))
        .collect();
    Ok(df.select(columns)?.into_view())
}

/// Rows as column → value text (NULL as null), redacted.
fn rows(batches: &[RecordBatch]) -> Result<Vec<serde_json::Map<String, serde_json::Value>>> {
    let config = crate::config::get();
    let mut out = Vec::new();
    for b in batches {
        for r in 0..b.num_rows() {
            let mut row = serde_json::Map::new();
            for (i, f) in b.schema().fields().iter().enumerate() {
                let v = ScalarValue::try_from_array(b.column(i), r)?;
                let v = if v.is_null() {
                    serde_json::Value::Null
                } else {
                    serde_json::Value::String(config.redact(&value_text(b.column(i), r, v)?))
                };
                row.insert(f.name().clone(), v);
            }
            out.push(row);
        }
    }
    Ok(out)
}

/// Value `row` of `array` (`value`) as text: a timestamp in RFC 3339, at its column's time
/// zone (`+00:00` for one without: idemlake takes those as UTC); anything else as DataFusion
/// prints it.
fn value_text(array: &ArrayRef, row: usize, value: ScalarValue) -> Result<String> {
    let naive = match array.data_type() {
        DataType::Timestamp(_, None) => true,
        DataType::Timestamp(_, Some(_)) => false,
        _ => return Ok(value.to_string()),
    };
    let options = FormatOptions::default()
        .with_timestamp_format(naive.then_some("%Y-%m-%dT%H:%M:%S%.f+00:00"))
        .with_timestamp_tz_format(Some("%Y-%m-%dT%H:%M:%S%.f%:z"));
    Ok(ArrayFormatter::try_new(array.as_ref(), &options)?
        .value(row)
        .to_string())
}

fn column(name: &str) -> Expr {
    col(Column::from_name(name))
}

/// The window `table` holds at its loaded version, as a DataFrame in `own`.
pub async fn published_window(
    own: &SessionContext,
    table: &DeltaTable,
    task: &Task,
    window: &Window,
) -> Result<DataFrame> {
    table.update_datafusion_session(&own.state())?;
    Ok(own
        .read_table(table.table_provider().await?)?
        .filter(WindowRange::of(task, window).filter(column(&task.partition_by)))?)
}

/// What a merge will leave in the window: the table's window rows whose key the staged rows do
/// not have, and the staged rows (a merge upserts on the key within the window).
pub async fn merged_window(
    own: &SessionContext,
    table: &DeltaTable,
    task: &Task,
    window: &Window,
    staged: Arc<dyn TableProvider>,
) -> Result<Arc<dyn TableProvider>> {
    let new = own.read_table(staged)?;
    if table.version().is_none() {
        return Ok(new.into_view());
    }
    let current = published_window(own, table, task, window).await?;
    let keys_of = |side: &str| -> Vec<Expr> {
        task.key
            .iter()
            .map(|k| col(Column::new(Some(side), k.as_str())))
            .collect()
    };
    let on: Vec<Expr> = keys_of("__cur")
        .into_iter()
        .zip(keys_of("__new"))
        .map(|(a, b)| a.eq(b))
        .collect();
    let new_keys = new
        .clone()
        .select(task.key.iter().map(|k| column(k)).collect::<Vec<_>>())?
        .alias("__new")?;
    let kept = current
        .alias("__cur")?
        .join_on(new_keys, JoinType::LeftAnti, on)?;
    let names: Vec<Expr> = new
        .schema()
        .fields()
        .iter()
        .filter(|f| kept.schema().has_column_with_unqualified_name(f.name()))
        .map(|f| column(f.name()))
        .collect();
    let kept = kept.select(names)?;
    Ok(kept.union_by_name(new)?.into_view())
}

/// Plan every check against an empty `output` with the task query's columns (`schema`) and
/// the relationships' other tables (their logs are read, not their data): a check naming a
/// column the query does not produce, or whose SQL does not plan, is the user's mistake
/// (exit 2), found before any data is read.
pub async fn validate(
    base: &SessionContext,
    task: &Task,
    schema: &SchemaRef,
    refs: &References,
) -> Result<()> {
    if task.checks.is_empty() {
        return Ok(());
    }
    let own = session(base, task).await?;
    own.register_table(
        OUTPUT_TABLE,
        Arc::new(MemTable::try_new(schema.clone(), vec![vec![]])?),
    )?;
    refs.register(&own, task).await?;
    for (i, check) in task.checks.iter().enumerate() {
        for c in check.columns() {
            if schema.field_with_name(c).is_err() {
                return Err(Error::input(format!(
                    "{}: [checks] {}: the query has no column `{c}` (it has: {})",
                    task.file.display(),
                    check.name,
                    plan::names(schema)
                )));
            }
        }
        literals_fit(&own, task, check, schema).await?;
        plan_check(&own, task, i, check, None).await?;
    }
    Ok(())
}

/// Each literal `check` compares a column with must be a value of the column's type: the
/// comparison is planned and optimised (where DataFusion casts the literal) against the empty
/// `output`, so a bound like `max = "abc"` for a DECIMAL column is refused here (exit 2), not
/// when the window's rows are checked.
async fn literals_fit(
    own: &SessionContext,
    task: &Task,
    check: &DataCheck,
    schema: &SchemaRef,
) -> Result<()> {
    for (role, c, lit) in check.literals() {
        let ty = schema.field_with_name(c).map(|f| f.data_type().clone());
        // DataFusion compares a text column with a number by casting every value of the
        // column: a string literal only, there (the literals quote strings).
        let text = ty.as_ref().is_ok_and(|t| {
            t.is_string() || matches!(t, DataType::Dictionary(_, v) if v.is_string())
        });
        let sql = format!("SELECT * FROM output WHERE {} = {lit}", quote(c));
        let fits = (!text || lit.starts_with('\''))
            && match own.sql(&sql).await {
                Ok(df) => df.into_optimized_plan().is_ok(),
                Err(_) => false,
            };
        if !fits {
            let role = if role == "value" {
                String::new()
            } else {
                format!("{role} ")
            };
            return Err(Error::input(format!(
                "{}: [checks] {}: {role}{lit} is not a value of column `{c}`, whose type is {}",
                task.file.display(),
                check.name,
                ty.map(|t| t.to_string()).unwrap_or_default()
            )));
        }
    }
    Ok(())
}

/// The failed checks of `results` with the given severity, described in one line.
pub fn describe(results: &[DataCheckResult], severity: Severity) -> Option<String> {
    let failed: Vec<String> = results
        .iter()
        .filter(|r| !r.ok && r.severity == severity)
        .map(|r| format!("{} ({} failing rows)", r.check, r.failing_rows))
        .collect();
    (!failed.is_empty()).then(|| failed.join(", "))
}
