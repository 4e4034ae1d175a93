//! The DataFusion session idemlake runs SQL in, and the switch between the accelerations and
//! their plain twins. Low in the house: the runner, the independent checks and the publish
//! stage use it; it uses nothing of idemlake but errors and the memory-mapped source store.

use datafusion::prelude::SessionContext;

use crate::error::Result;

/// The memory DataFusion may keep listings in: ~300,000 objects.
const LIST_FILES_CACHE_BYTES: usize = 64 << 20;

/// A DataFusion session configured for idemlake: standard SQL identifier rules (unquoted
/// names are case-insensitive), Delta's planner for Delta sources, and Parquet filter
/// pushdown: a window reads a thin slice of its sources, so the window predicate is evaluated
/// while decoding (only the filter columns are decoded for rows outside the window) instead of
/// decoding every column of every row and filtering afterwards (measured at TPC-H SF1: the
/// day-window scan of lineitem 1.56 s → 0.68 s in a debug build). Without arrow-rs's predicate
/// cache (the filter column's decoded pages kept for the projection that also outputs it): a
/// window keeps one row in thousands, so caching whole decoded pages to hand over a few rows
/// costs more than decoding them again (SF 10 day window 0.95× the wall time, SF 1 0.95×,
/// alternating pairs, release build).
pub fn new_session() -> Result<SessionContext> {
    session(crate::config::get().mmap, true)
}

/// [`new_session`], with local sources read through memory maps (`mapped`) or through
/// object_store's plain local store (the independent checks' session), and with Parquet
/// filter pushdown on or off (`pushdown`).
pub fn session(mapped: bool, pushdown: bool) -> Result<SessionContext> {
    let pushdown = if pushdown { "true" } else { "false" };
    let overrides = std::collections::HashMap::from(
        [
            ("datafusion.sql_parser.enable_ident_normalization", "true"),
            ("datafusion.execution.parquet.pushdown_filters", pushdown),
            ("datafusion.execution.parquet.reorder_filters", "true"),
            ("datafusion.execution.parquet.max_predicate_cache_size", "0"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    let ctx =
        deltalake::delta_datafusion::DeltaSessionContext::new_with_session_overrides(&overrides)?
            .into_inner();
    // DataFusion keeps each listing table's listing for the session (the run); its default
    // 1 MiB leaves a landing zone of more than a few thousand files to be listed again for
    // every window (the plain twin's and the checks' route, see `pipeline::landing`).
    if let Some(cache) = ctx.runtime_env().cache_manager.get_list_files_cache() {
        cache.update_cache_limit(LIST_FILES_CACHE_BYTES);
    }
    if mapped {
        // Local sources are read through memory maps (see `mapped`).
        let local = url::Url::parse("file:///").expect("a valid URL");
        ctx.runtime_env()
            .register_object_store(&local, crate::accel::mapped::MappedLocal::for_sources());
    }
    Ok(ctx)
}

/// Whether the accelerations are on (the default). `IDEMLAKE_ACCELERATE=0` selects their
/// plain twins, same inputs and no cleverness: no shared scans (each window reads its
/// sources), no prepared or derived plans (each window plans its SQL), no memory maps, and
/// no file map (each commit finds the window's files in a freshly loaded snapshot). The
/// differential tests run both and compare them with an oracle outside idemlake.
pub fn accelerated() -> bool {
    crate::config::get().accelerate
}
