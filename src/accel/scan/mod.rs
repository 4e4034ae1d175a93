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
//! as few as the budget allows, of even size. Without a census (a run of few windows, or
//! windows not announced) chunk sizes follow the measured bytes per window.
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
mod session;

pub use session::WindowSession;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use arrow::array::{Array, ArrayRef, Int64Array, RecordBatch};
use arrow::compute::{SortOptions, cast, concat, concat_batches, sort_to_indices, take};
use arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::{Column, ScalarValue};
use datafusion::datasource::MemTable;
use datafusion::logical_expr::{Expr, LogicalPlan};
use datafusion::prelude::{SessionContext, col, lit};
use futures::StreamExt;
use tokio::sync::OnceCell;

use crate::error::Result;
use crate::task::Task;
use crate::task::plan::window_params;
use crate::task::window::Window;
use bounds::{Bound, analyze, as_i64, mentioned_columns, sliceable};

/// Bounds of the default memory budget for one chunk of shared source rows (KiB).
const MIN_BUDGET_KB: u64 = 64 * 1024;
const MAX_BUDGET_KB: u64 = 1024 * 1024;
/// The budget when the memory available cannot be read.
const FALLBACK_BUDGET_KB: u64 = 256 * 1024;

/// The default chunk budget: an eighth of the memory this process may use (the machine's, or
/// its cgroup's limit if lower), within [`MIN_BUDGET_KB`, `MAX_BUDGET_KB`]. Fewer, larger
/// chunks mean fewer passes over an unsorted source (each pass decodes all of it).
fn default_budget_kb() -> u64 {
    let total_kb = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        m.lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
    });
    let cgroup_kb = std::fs::read_to_string("/sys/fs/cgroup/memory.max")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|b| b / 1024);
    match (total_kb, cgroup_kb) {
        (None, None) => FALLBACK_BUDGET_KB,
        (a, b) => (a.unwrap_or(u64::MAX).min(b.unwrap_or(u64::MAX)) / 8)
            .clamp(MIN_BUDGET_KB, MAX_BUDGET_KB),
    }
}
/// Windows in the first chunk, before bytes per window are known (a tenth of an announced
/// run, within 1–8× this).
const FIRST_CHUNK: usize = 32;
/// The smallest batch size a window session over slices gets.
const MIN_BATCH: usize = 1024;
/// Most windows one chunk may hold.
const MAX_CHUNK: usize = 4096;
/// Scan batches of fewer rows are small: merged once they hold [`MERGE_BYTES`].
const SMALL_ROWS: usize = 2048;
const MERGE_BYTES: u64 = 8 << 20;

/// One source's rows for a chunk of windows, sorted on the bound column.
struct Rows {
    batch: RecordBatch,
    keys: Vec<i64>,
}

impl Rows {
    /// `parts` (batches in arrival order) as one batch sorted on `column`.
    ///
    /// Columns are gathered in parallel (one thread per core, largest columns first): the
    /// gather is most of a chunk's assembly, and while the next chunk is assembled the
    /// windows of the last one may all be done (the cores would otherwise wait on one).
    fn sorted(schema: SchemaRef, parts: Vec<RecordBatch>, column: &str) -> Result<Rows> {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let at = schema.index_of(column)?;
        if parts.is_empty() {
            let batch = RecordBatch::new_empty(schema);
            return Ok(Rows {
                batch,
                keys: Vec::new(),
            });
        }
        let column_of =
            |i: usize| -> Vec<&dyn Array> { parts.iter().map(|b| b.column(i).as_ref()).collect() };
        let key = concat(&column_of(at))?;
        let order = sort_to_indices(&key, Some(SortOptions::default()), None)?;
        let mut by_size: Vec<usize> = (0..schema.fields().len()).collect();
        let size = |i: usize| -> usize {
            parts
                .iter()
                .map(|b| b.column(i).get_buffer_memory_size())
                .sum()
        };
        by_size.sort_by_key(|i| std::cmp::Reverse(size(*i)));
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, by_size.len().max(1));
        let next = AtomicUsize::new(0);
        let gather = || -> Result<Vec<(usize, ArrayRef)>> {
            let mut out = Vec::new();
            while let Some(&i) = by_size.get(next.fetch_add(1, Ordering::Relaxed)) {
                let whole = if i == at {
                    key.clone()
                } else {
                    concat(&column_of(i))?
                };
                out.push((i, take(&whole, &order, None)?));
            }
            Ok(out)
        };
        let gathered: Vec<Result<Vec<(usize, ArrayRef)>>> = std::thread::scope(|s| {
            let helpers: Vec<_> = (1..threads).map(|_| s.spawn(gather)).collect();
            let mut all = vec![gather()];
            all.extend(
                helpers
                    .into_iter()
                    .map(|h| h.join().expect("gather thread")),
            );
            all
        });
        let mut columns: Vec<Option<ArrayRef>> = vec![None; schema.fields().len()];
        for part in gathered {
            for (i, c) in part? {
                columns[i] = Some(c);
            }
        }
        let columns: Vec<ArrayRef> = columns
            .into_iter()
            .map(|c| c.expect("every column gathered"))
            .collect();
        drop(parts);
        let options = arrow::array::RecordBatchOptions::new().with_row_count(Some(order.len()));
        let batch = RecordBatch::try_new_with_options(schema, columns, &options)?;
        let keys = cast(batch.column(at), &DataType::Int64)?;
        let keys = keys
            .as_any()
            .downcast_ref::<Int64Array>()
            .expect("cast to Int64")
            .iter()
            .map(|v| v.unwrap_or(i64::MIN))
            .collect();
        Ok(Rows { batch, keys })
    }
}

/// The windows of a run in order, with each window's position by its identity (the instants
/// it spans, never its label: both hours of a DST fold share a local hour).
#[derive(Default)]
struct WindowList {
    list: Vec<Window>,
    at: HashMap<(i64, i64), usize>,
}

impl WindowList {
    /// The position of `w`, appending it if it was not announced.
    fn index_of(&mut self, w: &Window) -> usize {
        let key = w.key();
        if let Some(i) = self.at.get(&key) {
            return *i;
        }
        self.list.push(w.clone());
        self.at.insert(key, self.list.len() - 1);
        self.list.len() - 1
    }
}

/// A census of one source: how many rows each key has (as sorted keys and the rows below
/// each), and each announced window's inclusive bounds (`(MAX, MIN)` if it has none).
struct Tally {
    keys: Vec<i64>,
    below: Vec<u64>,
    bounds: Vec<(i64, i64)>,
}

impl Tally {
    /// Rows with key in `[lo, hi]`.
    fn rows(&self, lo: i64, hi: i64) -> u64 {
        let at = |i: usize| self.below[i];
        at(self.keys.partition_point(|k| *k <= hi))
            .saturating_sub(at(self.keys.partition_point(|k| *k < lo)))
    }
}

/// A chunk's rows once loaded: `None` if the chunk exceeded the budget.
type ChunkRows = Arc<OnceCell<Option<Arc<HashMap<String, Rows>>>>>;
/// A chunk as handed out: its rows cell and its first and last window.
type ChunkRef = (ChunkRows, usize, usize);

/// A chunk of consecutive windows (indexes into the run's window list) and its rows, loaded
/// once by the first window that needs them.
struct Chunk {
    first: usize,
    last: usize,
    handed: usize,
    /// `None` once loaded if the chunk exceeded the budget (its windows read directly).
    rows: ChunkRows,
}

/// The shared scans of one runner: which sources are shared and the chunks in memory.
pub struct Shared {
    bounds: Vec<Bound>,
    /// Every column name the task's SQL mentions: shared slices hold only those columns.
    columns: HashSet<String>,
    grain: crate::task::window::Grain,
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
    /// Rows of each shared source in each announced window (by index), once counted.
    census: Mutex<Option<Arc<HashMap<String, Tally>>>>,
    /// Bytes per row of each shared source, as last measured.
    row_bytes: Mutex<HashMap<String, f64>>,
}

impl Shared {
    /// Sharing for `task` given its analysed bounds, or `None` if nothing can be shared or
    /// sharing is turned off.
    pub async fn new(task: &Task, ctx: &SessionContext, plans: &[&LogicalPlan]) -> Option<Shared> {
        let aliases: Vec<&str> = task.sources.iter().map(|s| s.alias.as_str()).collect();
        let bounds = analyze(&aliases, plans);
        let budget = crate::config::get()
            .scan_cache_kb
            .unwrap_or_else(default_budget_kb)
            * 1024;
        if budget == 0 || bounds.is_empty() {
            return None;
        }
        // Keep only sources whose bound column has a sliceable type equal to the parameters'.
        let params: HashMap<String, DataType> = crate::task::plan::param_types(task.grain)
            .into_iter()
            .collect();
        let mut kept = Vec::new();
        for b in bounds {
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
            windows: Mutex::new(WindowList::default()),
            chunks: Mutex::new(Vec::new()),
            next_size: Mutex::new(FIRST_CHUNK),
            frontier: std::sync::atomic::AtomicUsize::new(0),
            budget,
            off: std::sync::atomic::AtomicBool::new(false),
            census_taken: std::sync::atomic::AtomicBool::new(false),
            census: Mutex::new(None),
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
        self.census_taken
            .store(false, std::sync::atomic::Ordering::SeqCst);
        // The first chunk's windows run while the second chunk is read: a long run starts
        // with more of them (a tenth, up to 8× the usual first chunk).
        *self.next_size.lock().expect("not poisoned") =
            (windows.len() / 10).clamp(FIRST_CHUNK, 8 * FIRST_CHUNK);
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
                .get_or_try_init(|| self.load(base, &windows))
                .await?
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
        let Some(rows) = &loaded else {
            return Ok(WindowSession::base(base));
        };
        let params: HashMap<String, ScalarValue> =
            window_params(self.grain, window).into_iter().collect();
        let mut slices = HashMap::new();
        for b in &self.bounds {
            let Some(r) = rows.get(&b.alias) else {
                continue;
            };
            if let Some(batch) = b
                .window_bounds(&params)
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

    /// The chunk holding `window` (created if needed), as (rows cell, first, last), and the
    /// next chunk to read ahead, if one was cut for that now.
    fn chunk_for(&self, window: &Window) -> (ChunkRef, Option<ChunkRef>) {
        use std::sync::atomic::Ordering;
        let mut windows = self.windows.lock().expect("not poisoned");
        let idx = windows.index_of(window);
        let count = windows.list.len();
        let mut chunks = self.chunks.lock().expect("not poisoned");
        let size = (*self.next_size.lock().expect("not poisoned")).max(1);
        let new_chunk = |first: usize, last: usize| Chunk {
            first,
            last,
            handed: 0,
            rows: Arc::new(OnceCell::new()),
        };
        let pos = chunks.iter().position(|c| c.first <= idx && idx <= c.last);
        let pos = match pos {
            Some(p) => p,
            None => {
                let frontier = self.frontier.load(Ordering::SeqCst);
                if idx >= frontier {
                    // Chunks are cut in window order from the first window no chunk has
                    // covered yet, whatever order windows arrive in (concurrent windows
                    // start in any order): chunk sizes follow the measurements, not arrival.
                    let mut first = frontier;
                    loop {
                        let last = self
                            .cut(first, count)
                            .unwrap_or((first + size - 1).min(count - 1));
                        chunks.push(new_chunk(first, last));
                        if last >= idx {
                            break;
                        }
                        first = last + 1;
                    }
                    self.frontier
                        .store(chunks[chunks.len() - 1].last + 1, Ordering::SeqCst);
                } else {
                    // A window whose chunk was dropped (over budget): a smaller chunk from
                    // it, never overlapping an existing one.
                    let limit = chunks
                        .iter()
                        .filter(|c| c.first > idx)
                        .map(|c| c.first - 1)
                        .min()
                        .unwrap_or(count - 1);
                    let last = (idx + size - 1).min(limit).min(count - 1);
                    chunks.push(new_chunk(idx, last));
                }
                chunks.len() - 1
            }
        };
        let c = &mut chunks[pos];
        c.handed += 1;
        let out = (c.rows.clone(), c.first, c.last);
        let len = c.last - c.first + 1;
        let half_handed = c.handed * 2 >= len;
        let is_last_cut = c.last + 1 == self.frontier.load(Ordering::SeqCst);
        if c.handed >= len {
            // Every window of the chunk has its session; the rows live on in those sessions.
            chunks.remove(pos);
        }
        // Read ahead: once half of the newest chunk's windows have started, cut the next one
        // so that its scan overlaps the remaining windows (chunks aim at half the budget, so
        // two in memory stay within it). After the first chunk, which is small (windows start
        // soon), the next one is read as soon as the census is in.
        let early = out.1 == 0 && self.census.lock().expect("not poisoned").is_some();
        let frontier = self.frontier.load(Ordering::SeqCst);
        let off = self.off.load(Ordering::SeqCst);
        let ahead =
            ((half_handed || early) && is_last_cut && frontier < count && !off).then(|| {
                let last = self
                    .cut(frontier, count)
                    .unwrap_or((frontier + size - 1).min(count - 1));
                chunks.push(new_chunk(frontier, last));
                self.frontier.store(last + 1, Ordering::SeqCst);
                let c = &chunks[chunks.len() - 1];
                (c.rows.clone(), c.first, c.last)
            });
        (out, ahead)
    }

    /// Read every shared source once for `windows` (sorted on its bound column), within the
    /// budget; `None` if over budget.
    async fn load(
        &self,
        base: &SessionContext,
        windows: &[Window],
    ) -> Result<Option<Arc<HashMap<String, Rows>>>> {
        let started = std::time::Instant::now();
        let mut out = HashMap::new();
        let mut bytes = 0u64;
        // The first chunk of a run of more windows than it holds takes the census.
        let census: Option<Vec<Window>> = {
            let all = self.windows.lock().expect("not poisoned");
            (all.list.len() > windows.len()
                && !self
                    .census_taken
                    .swap(true, std::sync::atomic::Ordering::SeqCst))
            .then(|| all.list.clone())
        };
        let mut counts: HashMap<String, Tally> = HashMap::new();
        for b in &self.bounds {
            let Some((lo, hi)) = self.span(b, windows) else {
                return Ok(None);
            };
            let scanned = match &census {
                Some(all) => match self.span(b, all) {
                    Some(span) => span,
                    None => return Ok(None),
                },
                None => (lo.clone(), hi.clone()),
            };
            let (Some(lo_i), Some(hi_i)) = (as_i64(&lo), as_i64(&hi)) else {
                return Ok(None);
            };
            let c = col(Column::new(Some(b.alias.as_str()), b.column.as_str()));
            let df = base.table(b.alias.as_str()).await?;
            // Filter pushdown pays off when a scan keeps a thin slice (one window); a chunk
            // keeps a large share of scattered rows, and decoding its filter column first and
            // then skipping between the survivors costs more than decoding everything
            // (measured on SF1 lineitem: a 300-day chunk took ~1.3 s with pushdown).
            let df = if windows.len() > 16 {
                // A copy of the state (same catalog): only its configuration changes.
                let mut state = base.state();
                state
                    .config_mut()
                    .options_mut()
                    .execution
                    .parquet
                    .pushdown_filters = false;
                let (_, plan) = df.into_parts();
                datafusion::dataframe::DataFrame::new(state, plan)
            } else {
                df
            };
            let keep: Vec<Expr> = df
                .schema()
                .columns()
                .into_iter()
                .filter(|c| self.columns.contains(&c.name) || c.name == b.column)
                .map(Expr::Column)
                .collect();
            let (scan_lo, scan_hi) = scanned;
            let df = df
                .filter(c.clone().gt_eq(lit(scan_lo)).and(c.lt_eq(lit(scan_hi))))?
                .select(keep)?;
            let key_at = df.schema().as_arrow().index_of(&b.column)?;
            let mut census_keys: HashMap<i64, u64> = HashMap::new();
            let schema = Arc::new(df.schema().as_arrow().clone());
            let mut stream = df.execute_stream().await?;
            // A filtered scan yields many small batches whose buffers' fixed overhead dwarfs
            // their rows (~4 MB for one day of lineitem in ~700 batches vs ~0.5 MB once
            // concatenated): small batches are merged as they arrive, so the budget and the
            // chunk sizing see what the rows really cost. Large ones are kept as they come.
            let mut parts = Vec::new();
            let mut small = Vec::new();
            let mut small_bytes = 0u64;
            let mut kept = 0u64;
            let mut rows = 0u64;
            while let Some(batch) = stream.next().await {
                let mut batch = batch?;
                if census.is_some() {
                    // The scan covers the whole run: count every window's rows, keep the
                    // chunk's.
                    let keys = cast(batch.column(key_at), &DataType::Int64)?;
                    let keys = keys.as_any().downcast_ref::<Int64Array>().expect("Int64");
                    let mut keep = Vec::with_capacity(keys.len());
                    for k in keys.iter() {
                        keep.push(k.is_some_and(|k| {
                            *census_keys.entry(k).or_insert(0) += 1;
                            lo_i <= k && k <= hi_i
                        }));
                    }
                    batch = arrow::compute::filter_record_batch(
                        &batch,
                        &arrow::array::BooleanArray::from(keep),
                    )?;
                }
                let batch = compact(batch)?;
                rows += batch.num_rows() as u64;
                if batch.num_rows() == 0 {
                    continue;
                }
                let size = batch.get_array_memory_size() as u64;
                if batch.num_rows() >= SMALL_ROWS {
                    // Large enough to count as it is (it is copied once, into the chunk).
                    kept += size;
                    parts.push(batch);
                } else {
                    small_bytes += size;
                    small.push(batch);
                }
                if small_bytes > MERGE_BYTES {
                    let merged = concat_batches(&schema, &small)?;
                    small.clear();
                    small_bytes = 0;
                    kept += merged.get_array_memory_size() as u64;
                    parts.push(merged);
                }
                if bytes + kept + small_bytes > self.budget {
                    self.measured(&b.alias, kept + small_bytes, rows);
                    self.resize(windows.len(), bytes, true);
                    if census.is_some() {
                        // The next (smaller) first chunk takes the census again.
                        self.census_taken
                            .store(false, std::sync::atomic::Ordering::SeqCst);
                    }
                    if windows.len() == 1 {
                        // Not even one window fits: stop trying for the rest of the run.
                        self.off.store(true, std::sync::atomic::Ordering::SeqCst);
                    }
                    tracing::info!(
                        windows = windows.len(),
                        budget_kb = self.budget / 1024,
                        "shared scan over budget; these windows read their sources directly"
                    );
                    return Ok(None);
                }
            }
            if !small.is_empty() {
                let merged = concat_batches(&schema, &small)?;
                kept += merged.get_array_memory_size() as u64;
                parts.push(merged);
            }
            bytes += kept;
            self.measured(&b.alias, kept, rows);
            if let Some(all) = &census {
                counts.insert(b.alias.clone(), self.tally(b, all, census_keys));
            }
            out.insert(b.alias.clone(), Rows::sorted(schema, parts, &b.column)?);
        }
        self.resize(windows.len(), bytes, false);
        if census.is_some() {
            *self.census.lock().expect("not poisoned") = Some(Arc::new(counts));
        }
        tracing::debug!(
            windows = windows.len(),
            kb = bytes / 1024,
            ms = started.elapsed().as_millis() as u64,
            census = census.is_some(),
            "shared scan loaded"
        );
        Ok(Some(Arc::new(out)))
    }

    /// The inclusive bounds of `b` covering all of `windows`.
    fn span(&self, b: &Bound, windows: &[Window]) -> Option<(ScalarValue, ScalarValue)> {
        let mut lo: Option<ScalarValue> = None;
        let mut hi: Option<ScalarValue> = None;
        for w in windows {
            let params: HashMap<String, ScalarValue> =
                window_params(self.grain, w).into_iter().collect();
            let (l, h) = b.window_bounds(&params)?;
            if lo.as_ref().is_none_or(|x| &l < x) {
                lo = Some(l);
            }
            if hi.as_ref().is_none_or(|x| &h > x) {
                hi = Some(h);
            }
        }
        Some((lo?, hi?))
    }

    /// The census of `b` over `windows`: its count per key, as prefix sums, and each
    /// window's bounds.
    fn tally(&self, b: &Bound, windows: &[Window], per_key: HashMap<i64, u64>) -> Tally {
        let mut counted: Vec<(i64, u64)> = per_key.into_iter().collect();
        counted.sort_unstable();
        let mut below = Vec::with_capacity(counted.len() + 1);
        let mut sum = 0u64;
        for (_, n) in &counted {
            below.push(sum);
            sum += n;
        }
        below.push(sum);
        let bounds = windows
            .iter()
            .map(|w| {
                let params: HashMap<String, ScalarValue> =
                    window_params(self.grain, w).into_iter().collect();
                b.window_bounds(&params)
                    .and_then(|(l, h)| Some((as_i64(&l)?, as_i64(&h)?)))
                    .unwrap_or((i64::MAX, i64::MIN))
            })
            .collect();
        Tally {
            keys: counted.into_iter().map(|(k, _)| k).collect(),
            below,
            bounds,
        }
    }

    /// Record the bytes per row a load of `alias` measured.
    fn measured(&self, alias: &str, bytes: u64, rows: u64) {
        if rows > 0 {
            self.row_bytes
                .lock()
                .expect("not poisoned")
                .insert(alias.to_string(), bytes as f64 / rows as f64);
        }
    }

    /// The last window of a chunk starting at `first`, cut from the census: the fewest chunks
    /// whose estimated bytes fit half the budget each (two may be in memory at once), of even
    /// size. `None` without a census (or for windows it did not count).
    fn cut(&self, first: usize, count: usize) -> Option<usize> {
        let census = self.census.lock().expect("not poisoned").clone()?;
        let row_bytes = self.row_bytes.lock().expect("not poisoned").clone();
        let end = census.values().map(|t| t.bounds.len()).min()?.min(count);
        if first >= end {
            return None;
        }
        let sources: Vec<(&Tally, f64)> = census
            .iter()
            .map(|(alias, t)| Some((t, *row_bytes.get(alias)?)))
            .collect::<Option<_>>()?;
        // Estimated bytes of the windows taken so far (each source's key span times its
        // bytes per row), taking one more window at a time.
        let start =
            || -> Vec<(i64, i64)> { sources.iter().map(|(t, _)| t.bounds[first]).collect() };
        let take = |spans: &mut Vec<(i64, i64)>, w: usize| -> f64 {
            sources
                .iter()
                .zip(spans.iter_mut())
                .map(|((t, per_row), span)| {
                    let (l, h) = t.bounds[w];
                    *span = (span.0.min(l), span.1.max(h));
                    t.rows(span.0, span.1) as f64 * per_row
                })
                .sum()
        };
        let mut all = start();
        let remaining = (first..end)
            .map(|w| take(&mut all, w))
            .last()
            .unwrap_or(0.0);
        let target = (self.budget / 2) as f64;
        let per = remaining / (remaining / target).ceil().max(1.0);
        let cap = per * 1.03 + 1.0;
        let mut spans = start();
        let mut last = first;
        while last + 1 < end && last + 1 - first < MAX_CHUNK && take(&mut spans, last + 1) <= cap {
            last += 1;
        }
        Some(last)
    }

    /// Size the next chunk from what this one cost.
    fn resize(&self, windows: usize, bytes: u64, over: bool) {
        let mut next = self.next_size.lock().expect("not poisoned");
        if over {
            *next = (windows / 4).max(1);
            return;
        }
        let per_window = (bytes / windows.max(1) as u64).max(1);
        // Aim at half the budget, growing at most 4× per chunk (a few windows are a noisy
        // estimate of the next thousand).
        *next = ((self.budget / 2 / per_window) as usize).clamp(1, (windows * 4).min(MAX_CHUNK));
    }
}

/// Copy view arrays (Utf8View/BinaryView) so a batch holds only its own strings, not the
/// decoded pages they point into (which would keep the whole scan's buffers alive).
fn compact(batch: RecordBatch) -> Result<RecordBatch> {
    use arrow::array::AsArray;
    let mut changed = false;
    let columns: Vec<Arc<dyn Array>> = batch
        .columns()
        .iter()
        .map(|c| match c.data_type() {
            DataType::Utf8View => {
                changed = true;
                Arc::new(c.as_string_view().gc()) as Arc<dyn Array>
            }
            DataType::BinaryView => {
                changed = true;
                Arc::new(c.as_binary_view().gc()) as Arc<dyn Array>
            }
            _ => c.clone(),
        })
        .collect();
    if !changed {
        return Ok(batch);
    }
    Ok(RecordBatch::try_new(batch.schema(), columns)?)
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

/// The rows of `r` with key in `[lo, hi]`, or `[lo, hi)` if `strict` (zero-copy).
fn slice(r: &Rows, lo: &ScalarValue, hi: &ScalarValue, strict: bool) -> Option<RecordBatch> {
    let (lo, hi) = (as_i64(lo)?, as_i64(hi)?);
    let mut start = r.keys.partition_point(|k| *k < lo);
    let mut end = r
        .keys
        .partition_point(|k| if strict { *k < hi } else { *k <= hi });
    if crate::fault::mutation("slice-drop-row") && end > start {
        end -= 1;
    }
    if crate::fault::mutation("slice-move-row") && end > start {
        start += 1;
        end = (end + 1).min(r.keys.len());
    }
    Some(r.batch.slice(start, end.saturating_sub(start)))
}

/// `batch` as up to `n` partitions of consecutive rows (parallel scans of the slice).
fn split(batch: &RecordBatch, n: usize) -> Vec<Vec<RecordBatch>> {
    let n = n.max(1);
    let rows = batch.num_rows();
    if rows < 8192 || n == 1 {
        return vec![vec![batch.clone()]];
    }
    let per = rows.div_ceil(n);
    (0..n)
        .map(|i| {
            let start = (i * per).min(rows);
            let len = per.min(rows - start);
            vec![batch.slice(start, len)]
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{Field, Schema};

    #[test]
    fn slices_are_inclusive_and_sorted() {
        let keys = vec![5i64, 1, 8, 2, 3, 2];
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, true)]));
        let batch = RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(keys))]).unwrap();
        // Two parts in arrival order: sorted together into one batch.
        let parts = [batch.slice(3, 3), batch.slice(0, 3)];
        let r = Rows::sorted(batch.schema(), parts.to_vec(), "k").unwrap();
        let keys_of = |lo: i64, hi: i64| {
            let s = slice(
                &r,
                &ScalarValue::Int64(Some(lo)),
                &ScalarValue::Int64(Some(hi)),
                false,
            )
            .unwrap();
            let k = s.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
            k.values().to_vec()
        };
        assert_eq!(keys_of(2, 5), vec![2, 2, 3, 5]);
        assert_eq!(r.keys, vec![1, 2, 2, 3, 5, 8]);
        assert_eq!(keys_of(6, 7), Vec::<i64>::new());
        assert_eq!(keys_of(8, 9), vec![8]);
        assert_eq!(keys_of(i64::MIN, i64::MAX).len(), 6);
        // A strict upper bound stops short of it.
        let strict = slice(
            &r,
            &ScalarValue::Int64(Some(2)),
            &ScalarValue::Int64(Some(5)),
            true,
        )
        .unwrap();
        assert_eq!(strict.num_rows(), 3);
    }

    #[test]
    fn a_census_counts_rows_by_inclusive_bounds() {
        let t = Tally {
            keys: vec![1, 2, 5],
            below: vec![0, 3, 4, 6],
            bounds: vec![],
        };
        assert_eq!(t.rows(1, 2), 4);
        assert_eq!(t.rows(2, 2), 1);
        assert_eq!(t.rows(3, 4), 0);
        assert_eq!(t.rows(2, 5), 3);
        assert_eq!(t.rows(0, 10), 6);
        assert_eq!(t.rows(6, 10), 0);
    }
}
