//! A window's pin on a landing zone: the filters its plan applies to the source, the files
//! they select, how that is recorded and how a later listing is compared with it.

use std::collections::HashMap;

use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::datasource::listing::PartitionedFile;
use datafusion::logical_expr::{Expr, LogicalPlan};
use sha2::{Digest, Sha256};

use crate::report::record::FileRead;
use crate::storage::identity::FileId;

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

/// The identities of `files` as the zone's listing recorded them (see `storage::identity`:
/// a local file's inode and change time are its listed version).
pub fn identities(files: &[PartitionedFile]) -> Vec<FileId> {
    files
        .iter()
        .map(|f| FileId::of(&f.object_meta, false))
        .collect()
}

/// What a window read of a landing zone, for its run record: the files, and a fingerprint of
/// their identities.
pub fn describe(files: &[FileId]) -> (String, Vec<FileRead>) {
    let mut h = Sha256::new();
    let mut read = Vec::with_capacity(files.len());
    for f in files {
        f.hash_into(&mut h);
        let modified =
            chrono::DateTime::<chrono::Utc>::from_timestamp_micros(f.modified).unwrap_or_default();
        read.push(FileRead {
            path: f.path.clone(),
            size: f.size,
            modified: modified.to_rfc3339(),
            e_tag: f.e_tag.clone(),
        });
    }
    (hex::encode(&h.finalize()[..8]), read)
}

/// The files of `before` that are not in `now` as they were (removed or rewritten), and the
/// files of `now` that are new, by path: what changed in a window's reach.
pub fn differences(before: &[FileId], now: &[FileId]) -> Vec<String> {
    let old: HashMap<&str, &FileId> = before.iter().map(|f| (f.path.as_str(), f)).collect();
    let new: HashMap<&str, &FileId> = now.iter().map(|f| (f.path.as_str(), f)).collect();
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
