//! Physical plans reused across the windows of a run.
//!
//! A backfill binds the same prepared query for thousands of windows, and turning each bound
//! logical plan into a physical one (the physical planner and its optimiser passes) was an
//! eighth of an initial load's CPU (perf, SF1 lineitem). For a query over one in-memory slice
//! the physical plan of one window serves the next: the same operators over another slice,
//! with the window's values where the first window's were. A [`Reuse`] keeps the first
//! suitable window's physical plan as a *template* and derives later windows' plans from it.
//!
//! Invariants:
//! - A derived plan is the plan the window would get on its own, or the window is planned on
//!   its own. Derivation requires that the window's bound logical plan equals the template's
//!   in everything but literal values (so the optimiser made the same choices), that each
//!   literal that changed did so consistently (one old value, one new value), and that every
//!   literal of the physical plan is either one of those or a literal unchanged in the logical
//!   plan. Anything else — another literal, a table that is not a slice, more than one table,
//!   an operator outside a short list, dynamic filters — means planning the ordinary way.
//! - The first derived plan of a run is compared with one planned the ordinary way; if they
//!   differ, every later window is planned on its own.
//! - Derived plans share no execution state: every node is rebuilt, the leaf over the new
//!   window's slice. The template itself holds no rows (its leaf is emptied).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, OnceLock};

use arrow::array::RecordBatch;
use arrow::datatypes::Schema;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{ScalarValue, TableReference};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::source::{DataSource, DataSourceExec};
use datafusion::execution::SessionState;
use datafusion::logical_expr::{Expr, LogicalPlan};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::Literal;
use datafusion::physical_expr::projection::ProjectionExpr;
use datafusion::physical_plan::execution_plan::{ChildrenPropertiesMode, ReplaceChildrenOptions};
use datafusion::physical_plan::filter::{FilterExec, FilterExecBuilder};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::{ExecutionPlan, displayable};

use crate::error::Result;

/// A window's slices by table: the partitions of the in-memory table a reference resolves to
/// in the window's session, `None` if it is not a slice.
pub type Slices<'a> = &'a (dyn Fn(&TableReference) -> Option<Vec<Vec<RecordBatch>>> + Sync);

/// Operators a derived plan may contain besides its leaf (rebuilt with fresh state by
/// `with_new_children`; expressions checked for literals).
const REBUILT: &[&str] = &[
    "AggregateExec",
    "CoalesceBatchesExec",
    "CoalescePartitionsExec",
    "CooperativeExec",
    "GlobalLimitExec",
    "LocalLimitExec",
    "RepartitionExec",
    "SortExec",
    "SortPreservingMergeExec",
];

/// One query's physical plan, reused across a run's windows where that is proven safe.
#[derive(Default)]
pub struct Reuse {
    template: OnceLock<Template>,
    /// Whether the first derived plan matched the window's own (`None`: not compared yet).
    verified: OnceLock<bool>,
}

struct Template {
    /// The bound logical plan with every literal replaced by a null of its type.
    shape: LogicalPlan,
    /// The literals taken out of `shape`, in order.
    literals: Vec<ScalarValue>,
    /// The one table the plan reads (a slice in the windows it serves).
    table: TableReference,
    /// The physical plan, its leaf holding no rows.
    exec: Arc<dyn ExecutionPlan>,
}

/// How a window's literals differ from the template's.
struct Mapping {
    changed: HashMap<ScalarValue, ScalarValue>,
    same: HashSet<ScalarValue>,
}

impl Reuse {
    /// The physical plan of `logical` (a window's bound plan) in `state`, derived from the
    /// template when the window allows it, else planned (and kept as the template if none
    /// is yet and this one qualifies).
    pub async fn physical(
        &self,
        logical: &LogicalPlan,
        state: &SessionState,
        slices: Slices<'_>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if self.verified.get() != Some(&false)
            && let Some(t) = self.template.get()
            && let Some(derived) = t.derive(logical, state, slices)?
        {
            if self.verified.get() == Some(&true) {
                if crate::fault::mutation("derived-keep-literal")
                    && let Some(wrong) = t.derive_unmapped(state, slices)?
                {
                    return Ok(wrong);
                }
                return Ok(derived);
            }
            let planned = plan(logical, state).await?;
            let (a, b) = (show(&derived), show(&planned));
            if a != b {
                tracing::debug!(derived = %a, planned = %b, "a derived plan differs; planning every window");
            }
            if self.verified.set(a == b).is_ok() && a == b {
                tracing::debug!("physical plans derived for the run's windows");
            }
            return Ok(planned);
        }
        let planned = plan(logical, state).await?;
        if self.template.get().is_none()
            && let Some(t) = Template::new(logical, &planned, slices)?
        {
            let _ = self.template.set(t);
        }
        Ok(planned)
    }

    /// Whether windows are being given derived plans (after the first check passed).
    pub fn active(&self) -> bool {
        self.verified.get() == Some(&true)
    }
}

impl Template {
    fn new(
        logical: &LogicalPlan,
        exec: &Arc<dyn ExecutionPlan>,
        slices: Slices<'_>,
    ) -> Result<Option<Template>> {
        let mut tables = Vec::new();
        logical.apply_with_subqueries(|p| {
            if let LogicalPlan::TableScan(s) = p {
                tables.push(s.table_name.clone());
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
        let [table] = &tables[..] else {
            return Ok(None);
        };
        let Some(parts) = slices(table) else {
            return Ok(None);
        };
        let empty = vec![Vec::new(); parts.len()];
        let Some(exec) = rebuild(exec, None, &empty, None)? else {
            return Ok(None);
        };
        let (shape, literals) = shape(logical)?;
        Ok(Some(Template {
            shape,
            literals,
            table: table.clone(),
            exec,
        }))
    }

    /// The template over the window's slice with the window's literals, if `logical` (the
    /// window's bound plan) differs from the template's in literal values only.
    fn derive(
        &self,
        logical: &LogicalPlan,
        state: &SessionState,
        slices: Slices<'_>,
    ) -> Result<Option<Arc<dyn ExecutionPlan>>> {
        let (shape, literals) = shape(logical)?;
        if shape != self.shape || literals.len() != self.literals.len() {
            return Ok(None);
        }
        let Some(mapping) = Mapping::new(&self.literals, &literals) else {
            return Ok(None);
        };
        let Some(parts) = slices(&self.table) else {
            return Ok(None);
        };
        let batch_size = state.config().batch_size();
        rebuild(&self.exec, Some(&mapping), &parts, Some(batch_size))
    }

    /// The template over the window's slice keeping the template's own literals: the
    /// `derived-keep-literal` mutation (a derivation bug the checks must catch).
    fn derive_unmapped(
        &self,
        state: &SessionState,
        slices: Slices<'_>,
    ) -> Result<Option<Arc<dyn ExecutionPlan>>> {
        let Some(parts) = slices(&self.table) else {
            return Ok(None);
        };
        let batch_size = state.config().batch_size();
        rebuild(&self.exec, None, &parts, Some(batch_size))
    }
}

impl Mapping {
    /// The template's literal values → the window's; `None` if a value maps to two values or
    /// both changes and stays.
    fn new(template: &[ScalarValue], window: &[ScalarValue]) -> Option<Mapping> {
        let mut changed = HashMap::new();
        let mut same = HashSet::new();
        for (t, w) in template.iter().zip(window) {
            if t == w {
                same.insert(t.clone());
            } else if let Some(prev) = changed.insert(t.clone(), w.clone())
                && prev != *w
            {
                return None;
            }
        }
        if changed.keys().any(|t| same.contains(t)) {
            return None;
        }
        Some(Mapping { changed, same })
    }

    /// `value` in the window; `None` if it is not a literal of the logical plan.
    fn get(&self, value: &ScalarValue) -> Option<ScalarValue> {
        match self.changed.get(value) {
            Some(v) => Some(v.clone()),
            None => self.same.contains(value).then(|| value.clone()),
        }
    }
}

async fn plan(logical: &LogicalPlan, state: &SessionState) -> Result<Arc<dyn ExecutionPlan>> {
    Ok(state
        .query_planner()
        .create_physical_plan(logical, state)
        .await?)
}

fn show(plan: &Arc<dyn ExecutionPlan>) -> String {
    displayable(plan.as_ref()).indent(true).to_string()
}

/// `plan` with every literal replaced by a null of its type, and the literals in order.
fn shape(plan: &LogicalPlan) -> Result<(LogicalPlan, Vec<ScalarValue>)> {
    let mut literals = Vec::new();
    let shaped = plan
        .clone()
        .transform_up_with_subqueries(|node| {
            node.map_expressions(|e| {
                e.transform_up(|e| match e {
                    Expr::Literal(v, meta) => {
                        let null = ScalarValue::try_from(v.data_type())?;
                        literals.push(v);
                        Ok(Transformed::yes(Expr::Literal(null, meta)))
                    }
                    other => Ok(Transformed::no(other)),
                })
            })
        })?
        .data;
    Ok((shaped, literals))
}

/// Every node of `plan` anew, its one in-memory leaf reading `parts`, its literals mapped by
/// `mapping` (kept as they are without one) and filters sized for `batch_size` (kept without
/// one). `None` if the plan holds anything a derived plan may not (see the module doc).
fn rebuild(
    plan: &Arc<dyn ExecutionPlan>,
    mapping: Option<&Mapping>,
    parts: &[Vec<RecordBatch>],
    batch_size: Option<usize>,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    if !plan.dynamic_expressions_produced().is_empty() {
        return Ok(None);
    }
    if let Some(ds) = plan.downcast_ref::<DataSourceExec>() {
        return memory_leaf(ds, parts);
    }
    let mut children = Vec::new();
    for child in plan.children() {
        match rebuild(child, mapping, parts, batch_size)? {
            Some(c) => children.push(c),
            None => return Ok(None),
        }
    }
    if children.is_empty() {
        // A leaf other than the slice's: some other table, or rows made up by the optimiser.
        return Ok(None);
    }
    if let Some(f) = plan.downcast_ref::<FilterExec>() {
        let Some(predicate) = substitute(f.predicate(), mapping)? else {
            return Ok(None);
        };
        let exec = FilterExecBuilder::new(predicate, children.remove(0))
            .apply_projection_by_ref(f.projection().as_ref())?
            .with_default_selectivity(f.default_selectivity())
            .with_batch_size(batch_size.unwrap_or(f.batch_size()))
            .with_fetch(f.fetch())
            .build()?;
        return Ok(Some(Arc::new(exec)));
    }
    if let Some(p) = plan.downcast_ref::<ProjectionExec>() {
        return projection(p, children.remove(0), mapping);
    }
    if !REBUILT.contains(&plan.name()) {
        return Ok(None);
    }
    // Other operators keep their expressions: those may hold no literal the window changes.
    let mut fixed = true;
    plan.apply_expressions(&mut |e| {
        fixed = unchanged(e, mapping)?;
        Ok(if fixed {
            TreeNodeRecursion::Continue
        } else {
            TreeNodeRecursion::Stop
        })
    })?;
    if !fixed {
        return Ok(None);
    }
    let options = ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute);
    Ok(Some(plan.clone().replace_children(children, options)?))
}

/// Same column names, types and nullability, in the same order (metadata aside).
pub(crate) fn same_columns(a: &Schema, b: &Schema) -> bool {
    a.fields().len() == b.fields().len()
        && a.fields().iter().zip(b.fields()).all(|(x, y)| {
            x.name() == y.name()
                && x.data_type() == y.data_type()
                && x.is_nullable() == y.is_nullable()
        })
}

/// The slice's in-memory leaf reading `parts` instead (`None` if they do not fit it).
fn memory_leaf(
    ds: &DataSourceExec,
    parts: &[Vec<RecordBatch>],
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let Some(m) = ds.data_source().downcast_ref::<MemorySourceConfig>() else {
        return Ok(None);
    };
    let schema = m.original_schema();
    let fits = parts.len() == m.partitions().len()
        && parts
            .iter()
            .flatten()
            .all(|b| same_columns(&b.schema(), &schema));
    if !fits {
        return Ok(None);
    }
    let config = MemorySourceConfig::try_new(parts, schema, m.projection().clone())?
        .with_limit(m.fetch())
        .with_show_sizes(m.show_sizes())
        .try_with_sort_information(m.sort_information().to_vec())?;
    Ok(Some(DataSourceExec::from_data_source(config)))
}

/// A projection over `child` with its literals mapped (`None`: one the mapping lacks).
fn projection(
    p: &ProjectionExec,
    child: Arc<dyn ExecutionPlan>,
    mapping: Option<&Mapping>,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let mut exprs = Vec::with_capacity(p.expr().len());
    for e in p.expr() {
        let Some(expr) = substitute(&e.expr, mapping)? else {
            return Ok(None);
        };
        exprs.push(ProjectionExpr {
            expr,
            alias: e.alias.clone(),
        });
    }
    let exec = ProjectionExec::try_new_with_schema_metadata(exprs, child, p.schema().as_ref())?;
    Ok(Some(Arc::new(exec)))
}

/// `expr` with its literals mapped (as it is without a mapping); `None` if it holds a literal
/// the mapping does not know or one with metadata.
fn substitute(
    expr: &Arc<dyn PhysicalExpr>,
    mapping: Option<&Mapping>,
) -> Result<Option<Arc<dyn PhysicalExpr>>> {
    let Some(mapping) = mapping else {
        return Ok(Some(expr.clone()));
    };
    let mut known = true;
    let out = expr
        .clone()
        .transform_up(|e| {
            let Some(l) = e.downcast_ref::<Literal>() else {
                return Ok(Transformed::no(e));
            };
            let plain = l.return_field(&Schema::empty())?.metadata().is_empty();
            match mapping.get(l.value()) {
                Some(v) if plain && v == *l.value() => Ok(Transformed::no(e)),
                Some(v) if plain => Ok(Transformed::yes(Arc::new(Literal::new(v)) as _)),
                _ => {
                    known = false;
                    Ok(Transformed::no(e))
                }
            }
        })?
        .data;
    Ok(known.then_some(out))
}

/// Whether every literal of `expr` stays as it is in the window (always, without a mapping).
fn unchanged(
    expr: &Arc<dyn PhysicalExpr>,
    mapping: Option<&Mapping>,
) -> datafusion::common::Result<bool> {
    let Some(mapping) = mapping else {
        return Ok(true);
    };
    let mut kept = true;
    expr.apply(|e| {
        if let Some(l) = e.downcast_ref::<Literal>()
            && !mapping.same.contains(l.value())
        {
            kept = false;
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    Ok(kept)
}

#[cfg(test)]
mod tests;
