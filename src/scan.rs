//! Shared window scans: read each source once for a run of windows and hand every window
//! exactly the rows its SQL can reach.
//!
//! A window query typically reads a thin slice of a large source (`WHERE l_shipdate >=
//! $window_start AND l_shipdate < $window_end`). Without sharing, every window of a backfill —
//! and the `[reconcile].source` query of every window — scans the whole source again. Here the
//! task's SQL (unbound, unoptimised) is analysed once: for a source whose *every* reference is
//! restricted by a lower and an upper bound on one column by window parameters (through
//! filters, inner joins and table aliases only), the rows any window can see are exactly the
//! rows whose column lies in that window's bounds. The source is then read once per *chunk* of
//! consecutive windows (bounds of the whole chunk pushed into the scan), sorted on that column,
//! and each window's session gets an in-memory table holding only its own slice.
//!
//! Invariants:
//! - A window's result is the same with or without sharing: its slice holds every source row
//!   satisfying the bounds its own filters impose (bounds are inclusive, a superset of `<`),
//!   and its SQL applies all of its filters again on top. Anything the analysis cannot prove
//!   (a reference inside a subquery expression, behind an outer join, aggregation or
//!   projection; bounds of different columns or types; non-integer-like columns) leaves that
//!   source un-shared: the window reads it directly, as before.
//! - Memory is bounded: a chunk whose rows exceed the budget is abandoned (its windows read
//!   the source directly) and later chunks get smaller; chunk sizes adapt to the measured
//!   bytes per window (`IDEMLAKE_SCAN_CACHE_KB`; default an eighth of the machine's — or the
//!   container's — memory, between 64 MiB and 1 GiB; 0 turns sharing off).
//! - Sources are pinned for a run (see `sources`), so reading a chunk once is the same as
//!   reading it per window.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use arrow::array::{Array, Int64Array, RecordBatch};
use arrow::compute::{SortOptions, cast, concat_batches, sort_to_indices, take_record_batch};
use arrow::datatypes::DataType;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{Column, ScalarValue, TableReference};
use datafusion::datasource::MemTable;
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{BinaryExpr, Expr, JoinType, LogicalPlan, Operator};
use datafusion::prelude::{SessionContext, col, lit};
use futures::StreamExt;
use tokio::sync::OnceCell;

use crate::error::Result;
use crate::plan::window_params;
use crate::task::Task;
use crate::window::Window;

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
/// Windows in the first chunk, before bytes per window are known.
const FIRST_CHUNK: usize = 32;
/// Most windows one chunk may hold.
const MAX_CHUNK: usize = 4096;
/// Small scan batches are merged once they hold this many bytes.
const MERGE_BYTES: u64 = 8 << 20;

/// How one reference to a source is bounded by window parameters.
#[derive(Debug, Clone, PartialEq)]
struct Leaf {
    column: String,
    lower: String,
    upper: String,
}

/// A source whose every reference is bounded on one column.
#[derive(Debug, Clone)]
pub struct Bound {
    alias: String,
    column: String,
    /// (lower parameter, upper parameter) of each reference.
    leaves: Vec<(String, String)>,
}

impl Bound {
    /// The inclusive bounds `[lo, hi]` of the rows `window` can see, as ScalarValues.
    fn window_bounds(
        &self,
        params: &HashMap<String, ScalarValue>,
    ) -> Option<(ScalarValue, ScalarValue)> {
        let mut lo: Option<ScalarValue> = None;
        let mut hi: Option<ScalarValue> = None;
        for (l, u) in &self.leaves {
            let (l, u) = (params.get(l)?, params.get(u)?);
            if lo.as_ref().is_none_or(|x| l < x) {
                lo = Some(l.clone());
            }
            if hi.as_ref().is_none_or(|x| u > x) {
                hi = Some(u.clone());
            }
        }
        Some((lo?, hi?))
    }
}

/// Which sources of a task can be shared, found from its unbound plans.
fn analyze(aliases: &[&str], plans: &[&LogicalPlan]) -> Vec<Bound> {
    let mut out = Vec::new();
    for alias in aliases {
        let mut total = 0usize;
        let mut leaves = Vec::new();
        for p in plans {
            total += count_scans(p, alias);
            let mut found = Vec::new();
            walk(p, &[], &mut found);
            leaves.extend(
                found
                    .into_iter()
                    .filter(|(table, _)| same_name(table, alias))
                    .map(|(_, leaf)| leaf),
            );
        }
        if total == 0 || leaves.len() != total {
            continue;
        }
        let Some(leaves) = leaves.into_iter().collect::<Option<Vec<Leaf>>>() else {
            continue;
        };
        let column = leaves[0].column.clone();
        if leaves.iter().any(|l| l.column != column) {
            continue;
        }
        out.push(Bound {
            alias: alias.to_string(),
            column,
            leaves: leaves.into_iter().map(|l| (l.lower, l.upper)).collect(),
        });
    }
    out
}

fn same_name(table: &TableReference, alias: &str) -> bool {
    table.table().eq_ignore_ascii_case(alias)
}

/// Every scan of `alias` in `plan`, subqueries included.
fn count_scans(plan: &LogicalPlan, alias: &str) -> usize {
    let mut n = 0;
    let _ = plan.apply_with_subqueries(|p| {
        if let LogicalPlan::TableScan(s) = p
            && same_name(&s.table_name, alias)
        {
            n += 1;
        }
        Ok(TreeNodeRecursion::Continue)
    });
    n
}

/// The scan a node stands for if it is a scan under table aliases only, with the qualifier
/// its columns carry above it.
fn leaf_scan(plan: &LogicalPlan) -> Option<(TableReference, TableReference)> {
    match plan {
        LogicalPlan::TableScan(s) => Some((s.table_name.clone(), s.table_name.clone())),
        LogicalPlan::SubqueryAlias(a) => {
            leaf_scan(&a.input).map(|(table, _)| (table, a.alias.clone()))
        }
        _ => None,
    }
}

/// Collect, for each scan reachable through plan inputs, the bound its filters impose
/// (`None` if it has none). `above` are the conjuncts that restrict this node's rows.
fn walk(plan: &LogicalPlan, above: &[&Expr], out: &mut Vec<(TableReference, Option<Leaf>)>) {
    if let Some((table, qualifier)) = leaf_scan(plan) {
        out.push((table, leaf_bound(above, &qualifier)));
        return;
    }
    match plan {
        LogicalPlan::Filter(f) => {
            let mut next: Vec<&Expr> = above.to_vec();
            next.extend(split_conjunction(&f.predicate));
            walk(&f.input, &next, out);
        }
        LogicalPlan::Join(j) if j.join_type == JoinType::Inner => {
            let mut next: Vec<&Expr> = above.to_vec();
            if let Some(f) = &j.filter {
                next.extend(split_conjunction(f));
            }
            walk(&j.left, &next, out);
            walk(&j.right, &next, out);
        }
        other => {
            for input in other.inputs() {
                walk(input, &[], out);
            }
        }
    }
}

fn param_name(e: &Expr) -> Option<String> {
    match e {
        Expr::Placeholder(p) => Some(p.id.trim_start_matches('$').to_string()),
        _ => None,
    }
}

fn column_of<'a>(e: &'a Expr, qualifier: &TableReference) -> Option<&'a Column> {
    match e {
        Expr::Column(c) if c.relation.as_ref() == Some(qualifier) => Some(c),
        _ => None,
    }
}

/// One lower and one upper window-parameter bound on the same column of `qualifier`.
fn leaf_bound(conjuncts: &[&Expr], qualifier: &TableReference) -> Option<Leaf> {
    let mut lowers: Vec<(String, String)> = Vec::new();
    let mut uppers: Vec<(String, String)> = Vec::new();
    for e in conjuncts {
        match e {
            Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
                let (c, p, op) = if let (Some(c), Some(p)) =
                    (column_of(left, qualifier), param_name(right))
                {
                    (c, p, *op)
                } else if let (Some(c), Some(p)) = (column_of(right, qualifier), param_name(left)) {
                    let Some(swapped) = op.swap() else { continue };
                    (c, p, swapped)
                } else {
                    continue;
                };
                match op {
                    Operator::Gt | Operator::GtEq => lowers.push((c.name.clone(), p)),
                    Operator::Lt | Operator::LtEq => uppers.push((c.name.clone(), p)),
                    Operator::Eq => {
                        lowers.push((c.name.clone(), p.clone()));
                        uppers.push((c.name.clone(), p));
                    }
                    _ => {}
                }
            }
            Expr::Between(b) if !b.negated => {
                if let (Some(c), Some(lo), Some(hi)) = (
                    column_of(&b.expr, qualifier),
                    param_name(&b.low),
                    param_name(&b.high),
                ) {
                    lowers.push((c.name.clone(), lo));
                    uppers.push((c.name.clone(), hi));
                }
            }
            _ => {}
        }
    }
    lowers.iter().find_map(|(c, lo)| {
        uppers.iter().find(|(c2, _)| c2 == c).map(|(_, hi)| Leaf {
            column: c.clone(),
            lower: lo.clone(),
            upper: hi.clone(),
        })
    })
}

/// Column types whose order survives a cast to Int64 (so slices can be found by binary search).
fn sliceable(dt: &DataType) -> bool {
    matches!(
        dt,
        DataType::Date32
            | DataType::Date64
            | DataType::Timestamp(_, _)
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
    )
}

fn as_i64(v: &ScalarValue) -> Option<i64> {
    let a = cast(&v.to_array().ok()?, &DataType::Int64).ok()?;
    let a = a.as_any().downcast_ref::<Int64Array>()?;
    (a.len() == 1 && a.is_valid(0)).then(|| a.value(0))
}

/// One source's rows for a chunk of windows, sorted on the bound column.
struct Rows {
    batch: RecordBatch,
    keys: Vec<i64>,
}

/// The windows of a run in order, with each label's position (looked up once per window).
#[derive(Default)]
struct WindowList {
    list: Vec<Window>,
    at: HashMap<String, usize>,
}

impl WindowList {
    /// The position of `w`, appending it if it was not announced.
    fn index_of(&mut self, w: &Window) -> usize {
        let label = w.label();
        if let Some(i) = self.at.get(&label) {
            return *i;
        }
        self.list.push(w.clone());
        self.at.insert(label, self.list.len() - 1);
        self.list.len() - 1
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
    grain: crate::window::Grain,
    windows: Mutex<WindowList>,
    chunks: Mutex<Vec<Chunk>>,
    next_size: Mutex<usize>,
    /// The first window (index) no chunk has been cut for yet.
    frontier: std::sync::atomic::AtomicUsize,
    budget: u64,
    /// Set when a single window's rows exceed the budget: windows then read directly.
    off: std::sync::atomic::AtomicBool,
}

/// What `session_for` hands a window.
pub struct WindowSession {
    pub ctx: SessionContext,
    /// Aliases read from a shared slice, for logs.
    pub shared: Vec<String>,
}

impl Shared {
    /// Sharing for `task` given its analysed bounds, or `None` if nothing can be shared or
    /// sharing is turned off.
    pub async fn new(task: &Task, ctx: &SessionContext, plans: &[&LogicalPlan]) -> Option<Shared> {
        let aliases: Vec<&str> = task.sources.iter().map(|s| s.alias.as_str()).collect();
        let bounds = analyze(&aliases, plans);
        let budget = std::env::var("IDEMLAKE_SCAN_CACHE_KB")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or_else(default_budget_kb)
            * 1024;
        if budget == 0 || bounds.is_empty() {
            return None;
        }
        // Keep only sources whose bound column has a sliceable type equal to the parameters'.
        let probe = Window::containing(
            task.grain,
            &jiff::Timestamp::UNIX_EPOCH.to_zoned(task.timezone.clone()),
        )
        .ok()?;
        let params: HashMap<String, ScalarValue> =
            window_params(task.grain, &probe).into_iter().collect();
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
            let typed = |p: &String| params.get(p).is_some_and(|v| &v.data_type() == dt);
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
    }

    /// A session for `window`: shared sources as in-memory slices, the others as in `base`.
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
        let mut config = base.copied_config();
        if loaded.is_some() {
            // Every shared source is an in-memory slice: use the caller's share of the cores.
            config = config.with_target_partitions(partitions.max(1));
        }
        let ctx = SessionContext::new_with_config_rt(config, base.runtime_env());
        let mut shared = Vec::new();
        let params: HashMap<String, ScalarValue> =
            window_params(self.grain, window).into_iter().collect();
        for alias in base_tables(base) {
            let provider = base.table_provider(alias.as_str()).await?;
            let slice = match (&loaded, self.bounds.iter().find(|b| b.alias == alias)) {
                (Some(rows), Some(b)) => rows
                    .get(&alias)
                    .and_then(|r| Some((r, b.window_bounds(&params)?)))
                    .and_then(|(r, (lo, hi))| slice(r, &lo, &hi)),
                _ => None,
            };
            match slice {
                Some(batch) => {
                    let parts = split(&batch, partitions.max(1));
                    ctx.register_table(
                        alias.as_str(),
                        Arc::new(MemTable::try_new(batch.schema(), parts)?),
                    )?;
                    shared.push(alias);
                }
                None => {
                    ctx.register_table(alias.as_str(), provider)?;
                }
            }
        }
        Ok(WindowSession { ctx, shared })
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
                        let last = (first + size - 1).min(count - 1);
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
        // two in memory stay within it).
        let frontier = self.frontier.load(Ordering::SeqCst);
        let off = self.off.load(Ordering::SeqCst);
        let ahead = (half_handed && is_last_cut && frontier < count && !off).then(|| {
            let last = (frontier + size - 1).min(count - 1);
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
        for b in &self.bounds {
            let mut lo: Option<ScalarValue> = None;
            let mut hi: Option<ScalarValue> = None;
            for w in windows {
                let params: HashMap<String, ScalarValue> =
                    window_params(self.grain, w).into_iter().collect();
                let Some((l, h)) = b.window_bounds(&params) else {
                    return Ok(None);
                };
                if lo.as_ref().is_none_or(|x| &l < x) {
                    lo = Some(l);
                }
                if hi.as_ref().is_none_or(|x| &h > x) {
                    hi = Some(h);
                }
            }
            let (Some(lo), Some(hi)) = (lo, hi) else {
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
            let df = df
                .filter(c.clone().gt_eq(lit(lo)).and(c.lt_eq(lit(hi))))?
                .select(keep)?;
            let schema = Arc::new(df.schema().as_arrow().clone());
            let mut stream = df.execute_stream().await?;
            // A filtered scan yields many small batches whose buffers' fixed overhead dwarfs
            // their rows (~4 MB for one day of lineitem in ~700 batches vs ~0.5 MB once
            // concatenated): small batches are merged as they arrive, so the budget and the
            // chunk sizing see what the rows really cost.
            let mut batches = Vec::new();
            let mut small = Vec::new();
            let mut small_bytes = 0u64;
            let mut kept = 0u64;
            while let Some(batch) = stream.next().await {
                let batch = compact(batch?)?;
                if batch.num_rows() == 0 {
                    continue;
                }
                small_bytes += batch.get_array_memory_size() as u64;
                small.push(batch);
                if small_bytes > MERGE_BYTES {
                    let merged = concat_batches(&schema, &small)?;
                    small.clear();
                    small_bytes = 0;
                    kept += merged.get_array_memory_size() as u64;
                    batches.push(merged);
                }
                if bytes + kept + small_bytes > self.budget {
                    self.resize(windows.len(), bytes, true);
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
            batches.extend(small);
            let batch = concat_batches(&schema, &batches)?;
            drop(batches);
            bytes += batch.get_array_memory_size() as u64;
            let key_col = batch.column(batch.schema().index_of(&b.column)?).clone();
            let order = sort_to_indices(&key_col, Some(SortOptions::default()), None)?;
            let batch = take_record_batch(&batch, &order)?;
            let keys = cast(
                batch.column(batch.schema().index_of(&b.column)?),
                &DataType::Int64,
            )?;
            let keys = keys
                .as_any()
                .downcast_ref::<Int64Array>()
                .expect("cast to Int64")
                .iter()
                .map(|v| v.unwrap_or(i64::MIN))
                .collect();
            out.insert(b.alias.clone(), Rows { batch, keys });
        }
        self.resize(windows.len(), bytes, false);
        tracing::debug!(
            windows = windows.len(),
            kb = bytes / 1024,
            ms = started.elapsed().as_millis() as u64,
            "shared scan loaded"
        );
        Ok(Some(Arc::new(out)))
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

/// Every column name referenced by an expression anywhere in `plans` (subqueries included).
/// A superset of what the SQL reads from each source, so planning it against a slice holding
/// only these columns resolves exactly as against the source.
fn mentioned_columns(plans: &[&LogicalPlan]) -> HashSet<String> {
    let mut out = HashSet::new();
    for p in plans {
        let _ = p.apply_with_subqueries(|node| {
            for e in node.expressions() {
                for c in e.column_refs() {
                    out.insert(c.name.clone());
                }
            }
            if let LogicalPlan::TableScan(s) = node {
                for f in &s.filters {
                    for c in f.column_refs() {
                        out.insert(c.name.clone());
                    }
                }
            }
            Ok(TreeNodeRecursion::Continue)
        });
    }
    out
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

/// The rows of `r` with key in `[lo, hi]` (zero-copy).
fn slice(r: &Rows, lo: &ScalarValue, hi: &ScalarValue) -> Option<RecordBatch> {
    let (lo, hi) = (as_i64(lo)?, as_i64(hi)?);
    let start = r.keys.partition_point(|k| *k < lo);
    let end = r.keys.partition_point(|k| *k <= hi);
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

    async fn bounds_of(sql: &str) -> Vec<(String, String, Vec<(String, String)>)> {
        let ctx = SessionContext::new();
        let li = Arc::new(Schema::new(vec![
            Field::new("l_orderkey", DataType::Int64, true),
            Field::new("l_shipdate", DataType::Date32, true),
            Field::new("l_commitdate", DataType::Date32, true),
            Field::new("l_quantity", DataType::Float64, true),
        ]));
        let o = Arc::new(Schema::new(vec![
            Field::new("o_orderkey", DataType::Int64, true),
            Field::new("o_orderdate", DataType::Date32, true),
        ]));
        for (name, schema) in [("lineitem", li), ("orders", o)] {
            let t = MemTable::try_new(schema, vec![vec![]]).unwrap();
            ctx.register_table(name, Arc::new(t)).unwrap();
        }
        let df = ctx.sql(sql).await.unwrap();
        analyze(&["lineitem", "orders"], &[df.logical_plan()])
            .into_iter()
            .map(|b| (b.alias, b.column, b.leaves))
            .collect()
    }

    fn leaf(lo: &str, hi: &str) -> (String, String) {
        (lo.to_string(), hi.to_string())
    }

    #[tokio::test]
    async fn a_window_filter_on_one_column_is_shared() {
        let b = bounds_of(
            "SELECT * FROM lineitem WHERE l_shipdate >= $window_start AND l_shipdate < $window_end",
        )
        .await;
        assert_eq!(
            b,
            vec![(
                "lineitem".into(),
                "l_shipdate".into(),
                vec![leaf("window_start", "window_end")]
            )]
        );
        // Aliases, flipped comparisons and BETWEEN are understood.
        let b = bounds_of(
            "SELECT l.l_orderkey FROM lineitem AS l WHERE $window_end > l.l_shipdate AND l.l_quantity > 1 AND $window_start <= l.l_shipdate",
        )
        .await;
        assert_eq!(b[0].2, vec![leaf("window_start", "window_end")]);
        let b = bounds_of(
            "SELECT l_orderkey FROM lineitem WHERE l_shipdate BETWEEN $window_start AND $window_end",
        )
        .await;
        assert_eq!(b[0].1, "l_shipdate");
    }

    #[tokio::test]
    async fn unbounded_or_hidden_references_are_not_shared() {
        // Only a lower bound.
        assert!(
            bounds_of("SELECT * FROM lineitem WHERE l_shipdate >= $window_start")
                .await
                .is_empty()
        );
        // An OR does not bound every row.
        assert!(
            bounds_of("SELECT * FROM lineitem WHERE l_shipdate >= $window_start AND (l_shipdate < $window_end OR l_quantity > 5)")
                .await
                .is_empty()
        );
        // A second, unbounded reference in a subquery expression.
        assert!(
            bounds_of("SELECT * FROM lineitem WHERE l_shipdate >= $window_start AND l_shipdate < $window_end AND l_quantity > (SELECT avg(l_quantity) FROM lineitem)")
                .await
                .is_empty()
        );
        // Bounds on different columns in two references.
        assert!(
            bounds_of("SELECT l_orderkey FROM lineitem WHERE l_shipdate >= $window_start AND l_shipdate < $window_end \
                       UNION ALL SELECT l_orderkey FROM lineitem WHERE l_commitdate >= $window_start AND l_commitdate < $window_end")
                .await
                .is_empty()
        );
        // The filter sits above a LEFT join on the optional side: not a restriction of the scan.
        let b = bounds_of(
            "SELECT o.o_orderkey FROM orders o LEFT JOIN lineitem l ON l.l_orderkey = o.o_orderkey \
             WHERE o.o_orderdate >= $window_start AND o.o_orderdate < $window_end AND l.l_shipdate >= $window_start AND l.l_shipdate < $window_end",
        )
        .await;
        assert!(b.is_empty(), "{b:?}");
    }

    #[tokio::test]
    async fn inner_joins_share_each_bounded_side() {
        let b = bounds_of(
            "SELECT o.o_orderkey, l.l_quantity FROM orders o JOIN lineitem l ON l.l_orderkey = o.o_orderkey \
             WHERE l.l_shipdate >= $window_start AND l.l_shipdate < $window_end",
        )
        .await;
        assert_eq!(
            b,
            vec![(
                "lineitem".into(),
                "l_shipdate".into(),
                vec![leaf("window_start", "window_end")]
            )]
        );
        // Two references with their own bounds: the union of both is kept.
        let b = bounds_of(
            "SELECT l_orderkey FROM lineitem WHERE l_shipdate >= $window_start AND l_shipdate < $window_end \
             UNION ALL SELECT l_orderkey FROM lineitem WHERE l_shipdate >= $window_start_ts AND l_shipdate <= $window_end",
        )
        .await;
        assert_eq!(
            b[0].2,
            vec![
                leaf("window_start", "window_end"),
                leaf("window_start_ts", "window_end")
            ]
        );
    }

    #[test]
    fn slices_are_inclusive_and_sorted() {
        let keys = vec![1i64, 2, 2, 3, 5, 8];
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, true)]));
        let batch =
            RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(keys.clone()))]).unwrap();
        let r = Rows { batch, keys };
        let s = slice(
            &r,
            &ScalarValue::Int64(Some(2)),
            &ScalarValue::Int64(Some(5)),
        )
        .unwrap();
        assert_eq!(s.num_rows(), 4);
        let s = slice(
            &r,
            &ScalarValue::Int64(Some(6)),
            &ScalarValue::Int64(Some(7)),
        )
        .unwrap();
        assert_eq!(s.num_rows(), 0);
    }
}
