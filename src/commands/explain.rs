//! `validate` and `explain`: a task checked and planned without publishing anything — the
//! same session, lints and plans a run uses, shown instead of executed.

use std::fmt::Write;

use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::logical_expr::LogicalPlan;

use crate::accel::session::new_session;
use crate::error::Result;
use crate::pipeline::sources;
use crate::report::record::SourceVersion;
use crate::task::Task;
use crate::task::plan::{self, Planned};
use crate::task::project::Project;
use crate::task::range::WindowRange;
use crate::task::window::Window;

/// Parse, lint and plan a task without a window and without reading rows; if its table
/// exists, check the output's columns against it (`[target] on_schema_change`). Returns
/// warnings: a partitioned landing zone no filter of the window prunes.
pub async fn validate(project: &Project, task: &Task) -> Result<Vec<String>> {
    let ctx = new_session()?;
    let local = crate::engine::Engine::Local;
    let (_, zones) = sources::register_with_zones(&ctx, &task.sources, &local).await?;
    let planned = plan::plan(&ctx, task, None).await?;
    crate::pipeline::independent::validate(task, &planned.schema)?;
    let refs = crate::pipeline::checks::data::References::default();
    crate::pipeline::checks::data::validate(&ctx, task, &planned.schema, &refs).await?;
    let table = crate::delta::table::open(&project.table_url(task)?).await?;
    crate::delta::table::schema_plan(
        &table,
        &planned.schema,
        &task.partition_by,
        task.on_schema_change,
    )?;
    let bounded = crate::pipeline::pins::window_bounded_columns(&ctx, task).await?;
    Ok(zones
        .iter()
        .filter(|z| {
            let columns = z.partition_columns();
            !columns.is_empty() && columns.iter().all(|(c, _)| !bounded.contains(c))
        })
        .map(|z| {
            let first = &z.partition_columns()[0].0;
            format!(
                "source `{}` is partitioned by `{first}`, but no filter bounds it by the window: every window lists and reads the whole zone. Declare its arrival days (arrival = \"{first}\", with lateness) or filter on `{first}` with the window parameters",
                z.alias
            )
        })
        .collect())
}

/// The bound parameters, plans and replaceWhere predicate of a window, as text.
pub async fn explain(project: &Project, task: &Task, window: &Window) -> Result<String> {
    let ctx = new_session()?;
    let versions = sources::register(&ctx, &task.sources, &crate::engine::Engine::Local).await?;
    let planned = plan::plan(&ctx, task, Some(window)).await?;
    let mut s = String::new();
    describe_window(&mut s, project, task, window, &planned)?;
    describe_checks(&mut s, task, &planned);
    describe_inputs(&mut s, task, &planned, &versions);
    describe_plans(&mut s, &planned).await?;
    Ok(s)
}

/// The task, its table and window, the predicate that replaces it and the SQL's hash.
fn describe_window(
    s: &mut String,
    project: &Project,
    task: &Task,
    window: &Window,
    planned: &Planned,
) -> Result<()> {
    let _ = writeln!(s, "task:          {} ({})", task.name, task.file.display());
    let _ = writeln!(s, "table:         {}", project.table_url(task)?);
    let _ = writeln!(s, "mode:          {:?}", task.mode);
    let _ = writeln!(
        s,
        "window:        {} = {} ({} {}, {} h)",
        window.label(),
        window.interval(),
        task.grain,
        task.timezone_name,
        window.hours()
    );
    let _ = writeln!(
        s,
        "replaceWhere:  {}",
        WindowRange::of(task, window).replace_where()
    );
    let _ = writeln!(s, "sql hash:      {}", planned.sql_hash);
    if !task.lint_allow.is_empty() {
        let _ = writeln!(
            s,
            "lint allow:    {} (non-deterministic functions allowed: reruns may differ)",
            task.lint_allow.join(", ")
        );
    }
    Ok(())
}

/// Which checks the window gets, which accelerations run, and the resolved configuration.
fn describe_checks(s: &mut String, task: &Task, planned: &Planned) {
    let shape = if row_preserving(planned.df.logical_plan()) {
        "a row-preserving task"
    } else {
        "the task's query computed in full"
    };
    let mut named = Vec::new();
    if task.reconcile.is_some() {
        named.push("[reconcile].source".to_string());
    }
    match task.checking.default {
        Some(crate::task::DefaultCheck::Rows) => {
            named.push(format!("source_rows ({shape})"));
        }
        Some(crate::task::DefaultCheck::Content) => {
            named.push(format!(
                "source_rows and source_content ({shape}, every row fingerprinted)"
            ));
        }
        None => {}
    }
    let check = match &task.checking.unchecked {
        Some(reason) => format!(
            "none independent ([reconcile] independent = false: {reason}); only rows_staged and the read-back"
        ),
        None => format!(
            "{} on the independent path (its own session: no shared scans, prepared or derived plans, memory maps)",
            named.join(", ")
        ),
    };
    let _ = writeln!(s, "checks:        {check}");
    let _ = writeln!(
        s,
        "accelerations: {}",
        if crate::accel::session::accelerated() {
            "on (shared scans, prepared and derived plans, memory maps, file map; the plan below is the plain one they must agree with)"
        } else {
            "off (IDEMLAKE_ACCELERATE=0: the plain plan below is the one that runs)"
        }
    );
    let config = crate::config::get().to_string();
    let _ = writeln!(
        s,
        "configuration: {}",
        config.replace('\n', "\n               ")
    );
}

/// The bound parameters, the sources as pinned and the SQL.
fn describe_inputs(s: &mut String, task: &Task, planned: &Planned, versions: &[SourceVersion]) {
    let _ = writeln!(s, "\nparameters (bound by DataFusion, not by text):");
    for (name, value) in &planned.params() {
        let _ = writeln!(s, "  ${name:<16} = {value} ({})", value.data_type());
    }
    let _ = writeln!(s, "\nsources:");
    for v in versions {
        let pin = match (v.version, v.files) {
            (Some(ver), _) => format!("delta version {ver}"),
            (None, Some(n)) => format!(
                "{n} file(s), fingerprint {}",
                v.fingerprint.clone().unwrap_or_default()
            ),
            _ => String::new(),
        };
        let _ = writeln!(s, "  {:<16} {:?}  {pin}", v.alias, v.format);
    }
    let _ = writeln!(
        s,
        "\nsql ({}):\n{}",
        task.sql_file.display(),
        task.sql.trim()
    );
}

/// The logical, optimised and physical plans of the window (the plain ones).
async fn describe_plans(s: &mut String, planned: &Planned) -> Result<()> {
    let _ = writeln!(
        s,
        "\nlogical plan (window bound):\n{}",
        planned.df.logical_plan().display_indent()
    );
    let optimized = planned.df.clone().into_optimized_plan()?;
    let _ = writeln!(s, "\noptimized plan:\n{}", optimized.display_indent());
    let physical = planned.df.clone().create_physical_plan().await?;
    let _ = writeln!(
        s,
        "\nphysical plan:\n{}",
        datafusion::physical_plan::displayable(physical.as_ref()).indent(true)
    );
    Ok(())
}

/// Whether every output row of `plan` is one input row of a single table, projected,
/// filtered and perhaps sorted (a sort without a limit changes the order, not the multiset):
/// then the rows a window must hold can be counted from the source. Anything else
/// (aggregates, joins, unions, limits, distinct, window functions, subqueries, unnest) is not.
/// (`explain` names a task's shape with it; the default check covers every shape.)
fn row_preserving(plan: &LogicalPlan) -> bool {
    let mut scans = 0;
    let mut ok = true;
    let _ = plan.apply_with_subqueries(|p| {
        match p {
            LogicalPlan::TableScan(_) => scans += 1,
            LogicalPlan::Projection(_) | LogicalPlan::Filter(_) | LogicalPlan::SubqueryAlias(_) => {
            }
            LogicalPlan::Sort(s) if s.fetch.is_none() => {}
            _ => ok = false,
        }
        Ok(if ok {
            TreeNodeRecursion::Continue
        } else {
            TreeNodeRecursion::Stop
        })
    });
    ok && scans == 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::SessionContext;

    async fn shape(sql: &str) -> bool {
        let ctx = SessionContext::new();
        ctx.sql("CREATE TABLE t (a INT, b INT, d DATE) AS VALUES (1, 2, DATE '2026-01-01')")
            .await
            .unwrap();
        ctx.sql("CREATE TABLE u (a INT) AS VALUES (1)")
            .await
            .unwrap();
        let df = ctx.sql(sql).await.unwrap();
        row_preserving(df.logical_plan())
    }

    #[tokio::test]
    async fn only_projections_and_filters_of_one_table_are_row_preserving() {
        assert!(shape("SELECT a, b + 1 AS c, d FROM t WHERE d >= DATE '2026-01-01'").await);
        assert!(shape("SELECT x.a FROM t AS x WHERE x.b > 0").await);
        assert!(shape("SELECT a, d FROM t WHERE a > 0 ORDER BY d, a").await);
        assert!(!shape("SELECT d, count(*) FROM t GROUP BY d").await);
        assert!(!shape("SELECT t.a FROM t JOIN u ON t.a = u.a").await);
        assert!(!shape("SELECT DISTINCT a FROM t").await);
        assert!(!shape("SELECT a FROM t ORDER BY a LIMIT 1").await);
        assert!(!shape("SELECT a FROM t UNION ALL SELECT a FROM u").await);
        assert!(!shape("SELECT a FROM t WHERE a IN (SELECT a FROM u)").await);
        assert!(!shape("SELECT a, row_number() OVER (ORDER BY a) FROM t").await);
    }
}
