//! The checks' own DataFusion session, built here rather than by `accel::session` (the
//! runner's constructor): a check never shares the path it checks, and a session builder
//! the accelerations own is part of that path (it raises DataFusion's listing cache and
//! registers the memory-mapped local store).
//!
//! What a check needs for its answers to equal the task's is kept: Delta's session defaults
//! and planner (Delta sources are read through delta-rs), and unquoted identifiers
//! normalised (standard SQL: `SELECT Amount` names column `amount`, as in the runner's
//! session). Nothing else of the runner's is: DataFusion's default runtime, object_store's
//! plain local store for `file://` sources, and no object store registered for S3 here (the
//! sources register a client of their own, see `sources::register_pinned`).
//!
//! The checks' session ([`Listings::Narrow`]) keeps **no listing cache**: DataFusion's cache,
//! on a miss, lists a table's whole location even for a scan that names one directory, and the
//! checks' landing zones are scanned one directory at a time (see `zone`). Nor does it collect
//! statistics at planning (a footer read of every file before the scan reads it again;
//! statistics steer plan choices such as a join's build side, never an answer). Other users of a plain session ([`Listings::Cached`])
//! keep a listing cache of [`LIST_FILES_CACHE_BYTES`].

use datafusion::execution::SessionStateBuilder;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::prelude::{SessionConfig, SessionContext};
use deltalake::delta_datafusion::DeltaSessionConfig;
use deltalake::delta_datafusion::planner::DeltaPlanner;

use crate::error::Result;

/// A cached listing's budget (DataFusion's default, 1 MiB, holds ~5,000 files' metadata: a
/// larger landing zone was listed again for every scan).
pub const LIST_FILES_CACHE_BYTES: usize = 64 << 20;

/// How a session lists directory sources.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listings {
    /// No listing cache, no statistics at planning: each scan lists what it names.
    Narrow,
    /// A listing cache of [`LIST_FILES_CACHE_BYTES`], DataFusion's statistics defaults.
    Cached,
}

/// A fresh session; `pushdown`: Parquet filter pushdown (late materialisation).
pub fn build(pushdown: bool, listings: Listings) -> Result<SessionContext> {
    let pushdown = if pushdown { "true" } else { "false" };
    let statistics = if listings == Listings::Narrow {
        "false"
    } else {
        "true"
    };
    let mut config: SessionConfig = DeltaSessionConfig::default().into();
    for (key, value) in [
        // The runner's SQL dialect: unquoted names are case-insensitive.
        ("datafusion.sql_parser.enable_ident_normalization", "true"),
        ("datafusion.execution.parquet.pushdown_filters", pushdown),
        ("datafusion.execution.parquet.reorder_filters", "true"),
        ("datafusion.execution.collect_statistics", statistics),
    ] {
        config.options_mut().set(key, value)?;
    }
    let limit = match listings {
        Listings::Narrow => 0,
        Listings::Cached => LIST_FILES_CACHE_BYTES,
    };
    let runtime = RuntimeEnvBuilder::new()
        .with_object_list_cache_limit(limit)
        .build_arc()?;
    // As `DeltaSessionContext` builds its sessions (Delta's defaults and planner), with this
    // runtime.
    let state = SessionStateBuilder::new()
        .with_default_features()
        .with_config(config)
        .with_runtime_env(runtime)
        .with_query_planner(DeltaPlanner::new())
        .build();
    Ok(SessionContext::new_with_state(state))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The checks' session takes nothing from the runner's constructor: no memory-mapped
    /// local store, no listing cache, and the same SQL dialect.
    #[tokio::test]
    async fn the_checks_session_is_plain_datafusion_with_the_runners_dialect() {
        let ctx = build(false, Listings::Narrow).unwrap();
        let local = datafusion::execution::object_store::ObjectStoreUrl::local_filesystem();
        let store = ctx.runtime_env().object_store(&local).unwrap();
        assert!(store.to_string().starts_with("LocalFileSystem"), "{store}");
        assert!(
            ctx.runtime_env()
                .cache_manager
                .get_list_files_cache()
                .is_none()
        );
        let cached = build(false, Listings::Cached).unwrap();
        let limit = cached
            .runtime_env()
            .cache_manager
            .get_list_files_cache_limit();
        assert_eq!(limit, LIST_FILES_CACHE_BYTES);
        let options = ctx.copied_config();
        let options = options.options();
        assert!(options.sql_parser.enable_ident_normalization);
        assert!(!options.execution.parquet.pushdown_filters);
        let df = ctx.sql("SELECT 1 AS Amount").await.unwrap();
        assert_eq!(df.schema().field(0).name(), "amount");
    }
}
