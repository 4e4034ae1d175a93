//! Shared window scans: read each source once for a run of windows and hand every window
//! exactly the rows its SQL can reach.
//!
//! A window query typically reads a thin slice of a large source (`WHERE l_shipdate >=
//! $window_start AND l_shipdate < $window_end`). Without sharing, every window of a backfill
//! scans the whole source again (`[reconcile].source` always does: it is the independent
//! check, see `checks`, and never reads a slice). Here the
//! task's SQL (unbound, unoptimised) is analysed once (`bounds`): for a source whose *every*
//! reference is bounded on one column by window parameters, the rows any window can see are
//! exactly the rows whose column lies in that window's bounds. The source is then read once
//! per *chunk* of consecutive windows (bounds of the whole chunk pushed into the scan), sorted
//! on that column, and each window's session gets an in-memory table holding only its own
//! rows (a zero-copy slice).
//!
//! Chunk sizes: the first chunk of a run is small (windows start soon); its scan reads the
//! whole run's range once and counts the rows of every window (a census) while keeping only
//! the chunk's. Later chunks are cut from those counts and the bytes per row measured so far,
//! as few as the budget allows, of even size. When the whole run's rows fit half the budget
//! the census keeps them all, and every later chunk is a view of them (nothing is read
//! twice). Without a census (a run of few windows, or windows not announced) chunk sizes
//! follow the measured bytes per window.
//!
//! Invariants:
//! - A window's result is the same with or without sharing: its slice holds every source row
//!   satisfying the bounds its own filters impose (inclusive, except an upper bound that is
//!   strict in every reference), and its SQL applies all of its filters again on top.
//!   Anything the analysis cannot prove leaves that source un-shared: the window reads it
//!   directly, as before.
//! - Memory is bounded: a chunk whose rows exceed the budget is abandoned (its windows read
//!   the source directly) and later chunks get smaller (`IDEMLAKE_SCAN_CACHE_KB`; default an
//!   eighth of the machine's — or the container's — memory, between 64 MiB and 1 GiB; 0 turns
//!   sharing off).
//! - Sources are pinned for a run (see `sources`), so reading a chunk once is the same as
//!   reading it per window.

mod bounds;
mod chunk;
mod load;
mod prune;
mod rows;
mod session;

pub use session::WindowSession;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use arrow::datatypes::DataType;
use datafusion::datasource::MemTable;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::SessionContext;

use crate::error::Result;
use crate::task::Task;
use crate::task::range::WindowRange;
use crate::task::window::Window;
use bounds::{Bound, analyze, mentioned_columns, sliceable};
use chunk::{Chunk, FIRST_CHUNK, MIN_BATCH, Tally, WindowList};
use rows::{slice, split};

/// Rows kept for a whole run, and each source's span (inclusive, as whole numbers) they cover.
type Whole = (
    Arc<HashMap<String, rows::Rows>>,
    HashMap<String, (i64, i64)>,
);

/// The shared scans of one runner: which sources are shared and the chunks in memory.
pub struct Shared {
    bounds: Vec<Bound>,
    /// Every column name the task's SQL mentions: shared slices hold only those columns.
    columns: HashSet<String>,
    grain: crate::task::window::Grain,
    /// The window column (for each window's [`WindowRange`]).
    column: String,
    windows: Mutex<WindowList>,
    chunks: Mutex<Vec<Chunk>>,
    next_size: Mutex<usize>,
    /// The first window (index) no chunk has been cut for yet.
    frontier: std::sync::atomic::AtomicUsize,
    budget: u64,
    /// Set when a single window's rows exceed the budget: windows then read directly.
    off: std::sync::atomic::AtomicBool,
    /// Claimed by the load that takes the census.
    census_taken: std::sync::atomic::AtomicBool,
    /// The windows (the first of the announced list) the census's scan covered.
    census_len: std::sync::atomic::AtomicUsize,
    /// Rows of each shared source in each announced window (by index), once counted.
    census: Mutex<Option<Arc<HashMap<String, Tally>>>>,
    /// Every row of the run's span of each shared source (with that span), when the census
    /// could keep them within half the budget: later chunks are views of them.
    whole: Mutex<Option<Whole>>,
    /// Bytes per row of each shared source, as last measured.
    row_bytes: Mutex<HashMap<String, f64>>,
}

impl Shared {
    /// The range of `window` (a window of the task): its parameters bound each source.
    fn range(&self, window: &Window) -> WindowRange {
        WindowRange::new(self.grain, &self.column, window)
    }

    /// Sharing for `task` given its analysed bounds, or `None` if nothing can be shared or
    /// sharing is turned off.
    pub async fn new(task: &Task, ctx: &SessionContext, plans: &[&LogicalPlan]) -> Option<Shared> {
        let aliases: Vec<&str> = task.sources.iter().map(|s| s.alias.as_str()).collect();
        let bounds = analyze(&aliases, plans);
        let budget = crate::config::get().memory_budget();
        if budget == 0 || bounds.is_empty() {
            return None;
        }
        // Keep only sources whose bound column has a sliceable type equal to the parameters'.
        let params: HashMap<String, DataType> = crate::task::plan::param_types(task.grain)
            .into_iter()
            .collect();
        let mut kept = Vec::new();
        for b in bounds {
            // A database answers each window's indexed query itself: sharing a chunk scan of
            // it measured no faster (365-day backfill of 10 million PostgreSQL rows: 28.4 s
            // shared, 29.6 s window by window) and held 1 GiB more (bench/POSTGRES.md).
            let database = task
                .sources
                .iter()
                .any(|s| s.alias == b.alias && s.format == crate::task::Format::Postgres);
            if database {
                continue;
            }
            let Ok(provider) = ctx.table_provider(b.alias.as_str()).await else {
                continue;
            };
            let schema = provider.schema();
            let Ok(field) = schema.field_with_name(&b.column) else {
                continue;
            };
            let dt = field.data_type();
            let typed = |p: &String| params.get(p) == Some(dt);
            if sliceable(dt) && b.leaves.iter().all(|(l, u)| typed(l) && typed(u)) {
                kept.push(b);
            }
        }
        let bounds = kept;
        if bounds.is_empty() {
            return None;
        }
        Some(Shared {
            bounds,
            columns: mentioned_columns(plans),
            grain: task.grain,
            column: task.partition_by.clone(),
            windows: Mutex::new(WindowList::default()),
            chunks: Mutex::new(Vec::new()),
            next_size: Mutex::new(FIRST_CHUNK),
            frontier: std::sync::atomic::AtomicUsize::new(0),
            budget,
            off: std::sync::atomic::AtomicBool::new(false),
            census_taken: std::sync::atomic::AtomicBool::new(false),
            census_len: std::sync::atomic::AtomicUsize::new(0),
            census: Mutex::new(None),
            whole: Mutex::new(None),
            row_bytes: Mutex::new(HashMap::new()),
        })
    }

    /// A session like `base` in which every shared source is an empty table with the columns
    /// its slices will have: what window sessions look like, for planning once (`prepared`).
    pub async fn template_session(&self, base: &SessionContext) -> Result<SessionContext> {
        let ctx = SessionContext::new_with_config_rt(base.copied_config(), base.runtime_env());
        for alias in base_tables(base) {
            let provider = base.table_provider(alias.as_str()).await?;
            match self.bounds.iter().find(|b| b.alias == alias) {
                Some(b) => {
                    let schema = provider.schema();
                    let kept: Vec<_> = schema
                        .fields()
                        .iter()
                        .filter(|f| self.columns.contains(f.name()) || f.name() == &b.column)
                        .cloned()
                        .collect();
                    let schema = Arc::new(arrow::datatypes::Schema::new(kept));
                    ctx.register_table(
                        alias.as_str(),
                        Arc::new(MemTable::try_new(schema, vec![vec![]])?),
                    )?;
                }
                None => {
                    ctx.register_table(alias.as_str(), provider)?;
                }
            }
        }
        Ok(ctx)
    }

    /// The sources that are shared (for logs and `explain`).
    pub fn shared_sources(&self) -> Vec<(String, String)> {
        self.bounds
            .iter()
            .map(|b| (b.alias.clone(), b.column.clone()))
            .collect()
    }

    /// Announce the windows about to run, in order (a backfill); chunks follow this order.
    pub fn plan_windows(&self, windows: &[Window]) {
        let mut w = self.windows.lock().expect("not poisoned");
        *w = WindowList::default();
        for window in windows {
            w.index_of(window);
        }
        self.chunks.lock().expect("not poisoned").clear();
        self.frontier.store(0, std::sync::atomic::Ordering::SeqCst);
        *self.census.lock().expect("not poisoned") = None;
        *self.whole.lock().expect("not poisoned") = None;
        self.census_taken
            .store(false, std::sync::atomic::Ordering::SeqCst);
        // The first chunk's windows run while the second chunk is read: a long run starts
        // with more of them (a tenth, up to 8× the usual first chunk).
        *self.next_size.lock().expect("not poisoned") =
            (windows.len() / 10).clamp(FIRST_CHUNK, 8 * FIRST_CHUNK);
    }

    /// [`Shared::load`]; a source that cannot be read for the chunk fails the windows that
    /// read it, no other: on an error each window of the chunk reads its sources itself (no
    /// slice: an empty map), and meets the fault only if it is within its own reach.
    async fn load_or_read_directly(
        &self,
        base: &SessionContext,
        windows: &[Window],
    ) -> Option<Arc<HashMap<String, rows::Rows>>> {
        match self.load(base, windows).await {
            Ok(loaded) => loaded,
            Err(e) => {
                tracing::warn!(
                    windows = windows.len(),
                    "a shared scan failed; these windows read their sources directly: {e}"
                );
                Some(Arc::new(HashMap::new()))
            }
        }
    }

    /// The session for `window`: shared sources as in-memory slices, the others as in `base`.
    pub async fn session_for(
        self: &Arc<Self>,
        base: &SessionContext,
        window: &Window,
        partitions: usize,
    ) -> Result<WindowSession> {
        let mut loaded = None;
        while !self.off.load(std::sync::atomic::Ordering::SeqCst) {
            let ((rows, first, last), ahead) = self.chunk_for(window);
            let windows: Vec<Window> = {
                let w = self.windows.lock().expect("not poisoned");
                w.list[first..=last].to_vec()
            };
            if let Some((cell, first, last)) = ahead {
                let ahead: Vec<Window> = {
                    let w = self.windows.lock().expect("not poisoned");
                    w.list[first..=last].to_vec()
                };
                let (me, base) = (self.clone(), base.clone());
                // A failed read-ahead leaves the cell empty: the chunk's first window reads it.
                tokio::spawn(async move {
                    let _ = cell.get_or_try_init(|| me.load(&base, &ahead)).await;
                });
            }
            loaded = rows
                .get_or_init(|| self.load_or_read_directly(base, &windows))
                .await
                .clone();
            if loaded.is_some() || first == last {
                break;
            }
            // Over budget: forget the chunk; this window (and each of its other windows)
            // asks again and gets a smaller one.
            self.chunks
                .lock()
                .expect("not poisoned")
                .retain(|c| !Arc::ptr_eq(&c.rows, &rows));
        }
        // Over budget, or the chunk's scan failed (no source's rows): read directly.
        let Some(rows) = loaded.as_ref().filter(|r| !r.is_empty()) else {
            return Ok(WindowSession::base(base));
        };
        let range = self.range(window);
        let mut slices = HashMap::new();
        for b in &self.bounds {
            let Some(r) = rows.get(&b.alias) else {
                continue;
            };
            if let Some(batch) = b
                .window_bounds(&range)
                .and_then(|(lo, hi)| slice(r, &lo, &hi, b.upper_strict))
            {
                slices.insert(b.alias.clone(), split(&batch, partitions.max(1)));
            }
        }
        // Every shared source is an in-memory slice: use the caller's share of the cores.
        let mut config = base
            .copied_config()
            .with_target_partitions(partitions.max(1));
        // Batches at least half the batch size pass through filters without being copied into
        // a new batch; a window's slice is one batch per partition, so a batch size of about
        // its size keeps it as it is (it is never split: the size is at least it).
        let largest = slices
            .values()
            .flatten()
            .flatten()
            .map(|b| b.num_rows())
            .max()
            .unwrap_or(0);
        if largest < config.batch_size() {
            config = config.with_batch_size(largest.max(MIN_BATCH));
        }
        WindowSession::with_slices(base, config, slices)
    }
}

/// The names of the tables registered in the default schema of `ctx`.
fn base_tables(ctx: &SessionContext) -> Vec<String> {
    let state = ctx.state();
    let options = state.config_options();
    let catalog = options.catalog.default_catalog.clone();
    let schema = options.catalog.default_schema.clone();
    ctx.catalog(&catalog)
        .and_then(|c| c.schema(&schema))
        .map(|s| s.table_names())
        .unwrap_or_default()
}
