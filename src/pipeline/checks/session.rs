//! The checks' own DataFusion session, built here rather than by `accel::session` (the
//! runner's constructor): a check never shares the path it checks, and a session builder
//! the accelerations own is part of that path (it raises DataFusion's listing cache and
//! registers the memory-mapped local store).
//!
//! What a check needs for its answers to equal the task's is kept: Delta's session defaults
//! and planner (Delta sources are read through delta-rs), and unquoted identifiers
//! normalised (standard SQL: `SELECT Amount` names column `amount`, as in the runner's
//! session). Nothing else of the runner's is: DataFusion's default runtime (its own listing
//! cache, for this session only, raised to [`LIST_FILES_CACHE_BYTES`] so that a landing zone
//! of many thousand files is listed once per run, not once per scan), object_store's plain local
//! store for `file://` sources, and no object store registered for S3 here (the sources
//! register a client of their own, see `sources::register_pinned`).

use std::collections::HashMap;

use datafusion::prelude::SessionContext;

use crate::error::Result;

/// The checks' own listing cache (DataFusion's default, 1 MiB, holds ~5,000 files' metadata:
/// a larger landing zone was listed again for every scan of a window's check).
pub const LIST_FILES_CACHE_BYTES: usize = 64 << 20;

/// A fresh session for checks; `pushdown`: Parquet filter pushdown (late materialisation).
pub fn build(pushdown: bool) -> Result<SessionContext> {
    let pushdown = if pushdown { "true" } else { "false" };
    let overrides = HashMap::from(
        [
            // The runner's SQL dialect: unquoted names are case-insensitive.
            ("datafusion.sql_parser.enable_ident_normalization", "true"),
            ("datafusion.execution.parquet.pushdown_filters", pushdown),
            ("datafusion.execution.parquet.reorder_filters", "true"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    let ctx =
        deltalake::delta_datafusion::DeltaSessionContext::new_with_session_overrides(&overrides)?
            .into_inner();
    if let Some(cache) = ctx.runtime_env().cache_manager.get_list_files_cache() {
        cache.update_cache_limit(LIST_FILES_CACHE_BYTES);
    }
    Ok(ctx)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The checks' session takes nothing from the runner's constructor: no memory-mapped
    /// local store, a listing cache of its own, and the same SQL dialect.
    #[tokio::test]
    async fn the_checks_session_is_plain_datafusion_with_the_runners_dialect() {
        let ctx = build(false).unwrap();
        let local = datafusion::execution::object_store::ObjectStoreUrl::local_filesystem();
        let store = ctx.runtime_env().object_store(&local).unwrap();
        assert!(store.to_string().starts_with("LocalFileSystem"), "{store}");
        let limit = ctx.runtime_env().cache_manager.get_list_files_cache_limit();
        assert_eq!(limit, LIST_FILES_CACHE_BYTES);
        let options = ctx.copied_config();
        let options = options.options();
        assert!(options.sql_parser.enable_ident_normalization);
        assert!(!options.execution.parquet.pushdown_filters);
        let df = ctx.sql("SELECT 1 AS Amount").await.unwrap();
        assert_eq!(df.schema().field(0).name(), "amount");
    }
}
