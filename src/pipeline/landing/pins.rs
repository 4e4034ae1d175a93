//! A window's pin on a landing zone: the filters its plan applies to the source, the files
//! they select, how that is recorded and how a later listing is compared with it.

use std::collections::HashMap;

use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::datasource::listing::PartitionedFile;
use datafusion::logical_expr::{Expr, LogicalPlan};
use object_store::path::Path;
use sha2::{Digest, Sha256};

use crate::report::record::FileRead;

/// The filters each scan of `alias` in an optimised plan applies at the scan (what the
/// listing prunes by), one list per scan, subqueries included.
pub fn scan_filters(plan: &LogicalPlan, alias: &str) -> Vec<Vec<Expr>> {
    let mut out = Vec::new();
    let _ = plan.apply_with_subqueries(|p| {
        if let LogicalPlan::TableScan(s) = p
            && s.table_name.table().eq_ignore_ascii_case(alias)
        {
            out.push(s.filters.clone());
        }
        Ok(TreeNodeRecursion::Continue)
    });
    out
}

/// What a window read of a landing zone, for its run record: the files, and a fingerprint of
/// their paths, sizes, modification times and ETags.
pub fn describe(files: &[PartitionedFile]) -> (String, Vec<FileRead>) {
    let mut h = Sha256::new();
    let mut read = Vec::with_capacity(files.len());
    for f in files {
        let m = &f.object_meta;
        h.update(m.location.as_ref().as_bytes());
        h.update(m.size.to_le_bytes());
        h.update(m.last_modified.timestamp_micros().to_le_bytes());
        h.update(m.e_tag.as_deref().unwrap_or_default().as_bytes());
        read.push(FileRead {
            path: m.location.to_string(),
            size: m.size,
            modified: m.last_modified.to_rfc3339(),
            e_tag: m.e_tag.clone(),
        });
    }
    (hex::encode(&h.finalize()[..8]), read)
}

/// The files of `before` that are not in `now` as they were (removed or rewritten), and the
/// files of `now` that are new, by path: what changed in a window's reach.
pub fn differences(before: &[PartitionedFile], now: &[PartitionedFile]) -> Vec<String> {
    let key = |f: &PartitionedFile| {
        let m = &f.object_meta;
        (m.size, m.last_modified, m.e_tag.clone())
    };
    let old: HashMap<&Path, _> = before
        .iter()
        .map(|f| (&f.object_meta.location, key(f)))
        .collect();
    let new: HashMap<&Path, _> = now
        .iter()
        .map(|f| (&f.object_meta.location, key(f)))
        .collect();
    let mut out: Vec<String> = Vec::new();
    for (p, k) in &old {
        match new.get(p) {
            None => out.push(format!("{p} (removed)")),
            Some(n) if n != k => out.push(format!("{p} (rewritten)")),
            Some(_) => {}
        }
    }
    for p in new.keys().filter(|p| !old.contains_key(*p)) {
        out.push(format!("{p} (added)"));
    }
    out.sort();
    out
}
