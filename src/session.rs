//! The one DataFusion session builder: every session idemlake plans SQL in is made by
//! [`build`], and the routes differ only by the [`Profile`] they ask for. What every session
//! has:
//! - Delta's session defaults and planner (Delta sources are read through delta-rs);
//! - unquoted identifiers normalised (standard SQL: `SELECT Amount` names column `amount`);
//! - Parquet filter reordering (cheapest predicate first);
//! - DataFusion's default runtime.
//!
//! The checks' deliberate differences from the runner's session are all in [`Profile`]; the
//! object stores each session reads through are registered by its caller (the runner's
//! memory-mapped local store in `accel::session`, the checks' own S3 clients in
//! `pipeline::sources`).

use datafusion::execution::SessionStateBuilder;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::prelude::{SessionConfig, SessionContext};
use deltalake::delta_datafusion::DeltaSessionConfig;
use deltalake::delta_datafusion::planner::DeltaPlanner;

use crate::error::Result;

/// The accelerated runner's listing cache: ~300,000 objects' metadata, kept for its session
/// (one run; DataFusion's 1 MiB default holds ~5,000 files' metadata).
pub const LIST_FILES_CACHE_BYTES: usize = 64 << 20;

/// Which route a session is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// The runner's (accelerated or plain twin) and every other reader's. With the
    /// accelerations on, a listing cache of [`LIST_FILES_CACHE_BYTES`] for the run (a source
    /// directory is listed once, then checked for changes before each commit); on the plain
    /// twin none: every scan lists what it reads when it reads it, as the window's pins do.
    /// Parquet filter pushdown (a window reads a thin slice of its sources, so the window predicate is
    /// evaluated while decoding; measured at TPC-H SF 1: the day-window scan of lineitem
    /// 1.56 s → 0.68 s in a debug build), without arrow-rs's predicate cache (a window keeps one
    /// row in thousands, so caching whole decoded pages to hand over a few rows costs more than
    /// decoding them again: SF 10 day window 0.95× the wall time, release build).
    Runner,
    /// The independent checks': as [`Profile::Runner`], but
    /// - **no Parquet filter pushdown**: a check query reads few columns (the window column and
    ///   what it sums), so late materialisation saves it little, while building and applying the
    ///   row selection of a scattered window costs more than decoding the other column whole and
    ///   filtering after (a day window of the TPC-H lineitem task spent ~80 ms CPU in its check
    ///   with pushdown). Row-group and page pruning by statistics stay on;
    /// - **no statistics collected at planning** (a footer read of every file before the scan
    ///   reads it again; statistics steer plan choices such as a join's build side, never an
    ///   answer);
    /// - **no listing cache**: each check query lists what it reads when it reads it (a
    ///   landing zone level by level, see `landing::plain` and
    ///   `internals/independent-checks.md`), so a check never answers from a listing older
    ///   than the window's own.
    Checks,
}

/// A fresh session for `profile` (see the module documentation).
pub fn build(profile: Profile) -> Result<SessionContext> {
    let (pushdown, statistics) = match profile {
        Profile::Runner => ("true", "true"),
        Profile::Checks => ("false", "false"),
    };
    let mut config: SessionConfig = DeltaSessionConfig::default().into();
    for (key, value) in [
        ("datafusion.sql_parser.enable_ident_normalization", "true"),
        ("datafusion.execution.parquet.pushdown_filters", pushdown),
        ("datafusion.execution.parquet.reorder_filters", "true"),
        ("datafusion.execution.parquet.max_predicate_cache_size", "0"),
        ("datafusion.execution.collect_statistics", statistics),
    ] {
        config.options_mut().set(key, value)?;
    }
    let cache = match profile {
        Profile::Runner if crate::config::get().accelerate => LIST_FILES_CACHE_BYTES,
        _ => 0,
    };
    let runtime = RuntimeEnvBuilder::new()
        .with_object_list_cache_limit(cache)
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

    /// Both profiles: object_store's plain local store (the caller registers another), the
    /// same SQL dialect; only pushdown, statistics and the listing cache differ.
    #[tokio::test]
    async fn the_profiles_differ_only_where_documented() {
        let runner = build(Profile::Runner).unwrap();
        let checks = build(Profile::Checks).unwrap();
        for ctx in [&runner, &checks] {
            let local = datafusion::execution::object_store::ObjectStoreUrl::local_filesystem();
            let store = ctx.runtime_env().object_store(&local).unwrap();
            assert!(store.to_string().starts_with("LocalFileSystem"), "{store}");
            let df = ctx.sql("SELECT 1 AS Amount").await.unwrap();
            assert_eq!(df.schema().field(0).name(), "amount");
        }
        let limit =
            |ctx: &SessionContext| ctx.runtime_env().cache_manager.get_list_files_cache_limit();
        assert_eq!(limit(&checks), 0);
        let accelerated = crate::config::get().accelerate;
        assert_eq!(limit(&runner) > 0, accelerated);
        let (r, c) = (runner.copied_config(), checks.copied_config());
        let (mut r, mut c) = (r.options().as_ref().clone(), c.options().as_ref().clone());
        assert!(r.execution.parquet.pushdown_filters && !c.execution.parquet.pushdown_filters);
        assert!(r.execution.collect_statistics && !c.execution.collect_statistics);
        c.execution.parquet.pushdown_filters = true;
        c.execution.collect_statistics = true;
        r.execution.target_partitions = c.execution.target_partitions;
        assert_eq!(format!("{r:?}"), format!("{c:?}"));
    }
}
