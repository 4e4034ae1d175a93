//! A remote zone's scan that keeps its read groups.
//!
//! A remote zone's small files are read in up to `REMOTE_READS` groups at once so that their
//! round trips overlap (see `provider`). DataFusion's optimizer regroups a file scan whose
//! files total more than `repartition_file_min_size` (1 MiB) into `target_partitions` groups
//! by size — two on a 2-core machine — which made the files of a 31-day backfill behind
//! 20 ms of latency arrive two at a time: 744 files in 8.5 s instead of 0.7 s. This leaf
//! runs the scan as planned; DataFusion cannot see into it, so it does not regroup it (nor push
//! filters into it: the filters above it apply). Only for scans whose files are all fetched
//! whole (at most `WHOLE_FILE_BYTES`): a larger file is better split by byte ranges and pruned
//! by its statistics inside the scan, as DataFusion does.

use std::sync::Arc;

use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::Result;
use datafusion::execution::TaskContext;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::execution_plan::ReplaceChildrenOptions;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, SendableRecordBatchStream,
};

/// See the module documentation.
#[derive(Debug)]
pub struct KeptGroups {
    inner: Arc<dyn ExecutionPlan>,
}

impl KeptGroups {
    pub fn new(inner: Arc<dyn ExecutionPlan>) -> KeptGroups {
        KeptGroups { inner }
    }
}

impl DisplayAs for KeptGroups {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "KeptGroups: ")?;
        self.inner.fmt_as(t, f)
    }
}

impl ExecutionPlan for KeptGroups {
    fn name(&self) -> &'static str {
        "KeptGroups"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.inner.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn apply_expressions(
        &self,
        _: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn replace_children(
        self: Arc<Self>,
        _: Vec<Arc<dyn ExecutionPlan>>,
        _: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn with_new_children(
        self: Arc<Self>,
        _: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        self.inner.execute(partition, context)
    }
}
