//! Keeping the directories whose partition values a window's filters accept.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::execution::context::ExecutionProps;
use datafusion::logical_expr::Expr;
use datafusion::logical_expr::utils::conjunction;
use datafusion::physical_expr::create_physical_expr;
use object_store::path::Path;

use crate::error::{Error, Result};

/// The directories of one level whose values (columns `0..=depth`) the filters that name
/// only those columns accept.
pub(super) fn keep(
    columns: &[(String, DataType)],
    dirs: Vec<(Path, Vec<ScalarValue>)>,
    depth: usize,
    filters: &[&Expr],
) -> Result<Vec<(Path, Vec<ScalarValue>)>> {
    let known: Vec<&str> = columns[..=depth].iter().map(|(n, _)| n.as_str()).collect();
    let usable: Vec<Expr> = filters
        .iter()
        .filter(|f| datafusion::datasource::listing::helpers::expr_applicable_for_cols(&known, f))
        .map(|f| unqualified((*f).clone()))
        .collect::<Result<_>>()?;
    let Some(predicate) = conjunction(usable) else {
        return Ok(dirs);
    };
    if dirs.is_empty() {
        return Ok(dirs);
    }
    let schema = Arc::new(Schema::new(
        columns[..=depth]
            .iter()
            .map(|(n, t)| Field::new(n, t.clone(), true))
            .collect::<Vec<_>>(),
    ));
    let columns: Vec<ArrayRef> = (0..=depth)
        .map(|i| ScalarValue::iter_to_array(dirs.iter().map(|(_, v)| v[i].clone())))
        .collect::<std::result::Result<_, _>>()?;
    let batch = RecordBatch::try_new(schema.clone(), columns)?;
    let df_schema = DFSchema::try_from(schema)?;
    let expr = create_physical_expr(
        &predicate,
        &df_schema,
        &ExecutionProps::new(),
        &datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext::default(),
    )?;
    let result = expr.evaluate(&batch)?.into_array(batch.num_rows())?;
    let keep = result
        .as_any()
        .downcast_ref::<BooleanArray>()
        .ok_or_else(|| Error::runtime("a partition filter did not give booleans"))?
        .clone();
    Ok(dirs
        .into_iter()
        .enumerate()
        .filter(|(i, _)| keep.is_valid(*i) && keep.value(*i))
        .map(|(_, d)| d)
        .collect())
}

/// `e` with its columns unqualified (a scan's filters name the table; the directory values are
/// evaluated in a schema of the partition columns alone).
fn unqualified(e: Expr) -> Result<Expr> {
    use datafusion::common::tree_node::{Transformed, TreeNode};
    Ok(e.transform(|e| {
        Ok(match e {
            Expr::Column(c) if c.relation.is_some() => Transformed::yes(Expr::Column(
                datafusion::common::Column::new_unqualified(c.name),
            )),
            other => Transformed::no(other),
        })
    })?
    .data)
}
