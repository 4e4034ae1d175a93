//! Chunks of windows: which windows read their shared sources together, how large the next
//! chunk may be (the census of the first chunk, the bytes per row measured so far, the
//! memory budget). Reading a chunk is `load`.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::common::ScalarValue;
use tokio::sync::OnceCell;

use super::Shared;
use super::bounds::{Bound, as_i64};
use super::rows::Rows;
use crate::task::window::Window;

/// Windows in the first chunk, before bytes per window are known (a tenth of an announced
/// run, within 1–8× this).
pub(super) const FIRST_CHUNK: usize = 32;
/// The smallest batch size a window session over slices gets.
pub(super) const MIN_BATCH: usize = 1024;
/// Most windows one chunk may hold.
pub(super) const MAX_CHUNK: usize = 4096;
/// Scan batches of fewer rows are small: merged once they hold [`MERGE_BYTES`].
pub(super) const SMALL_ROWS: usize = 2048;
pub(super) const MERGE_BYTES: u64 = 8 << 20;

/// The windows of a run in order, with each window's position by its identity (the instants
/// it spans, never its label: both hours of a DST fold share a local hour).
#[derive(Default)]
pub(super) struct WindowList {
    pub(super) list: Vec<Window>,
    pub(super) at: HashMap<(i64, i64), usize>,
}

impl WindowList {
    /// The position of `w`, appending it if it was not announced.
    pub(super) fn index_of(&mut self, w: &Window) -> usize {
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
pub(super) struct Tally {
    pub(super) keys: Vec<i64>,
    pub(super) below: Vec<u64>,
    pub(super) bounds: Vec<(i64, i64)>,
}

impl Tally {
    /// Rows with key in `[lo, hi]`.
    pub(super) fn rows(&self, lo: i64, hi: i64) -> u64 {
        let at = |i: usize| self.below[i];
        at(self.keys.partition_point(|k| *k <= hi))
            .saturating_sub(at(self.keys.partition_point(|k| *k < lo)))
    }
}

/// A chunk's rows once loaded: `None` if the chunk exceeded the budget.
pub(super) type ChunkRows = Arc<OnceCell<Option<Arc<HashMap<String, Rows>>>>>;
/// A chunk as handed out: its rows cell and its first and last window.
pub(super) type ChunkRef = (ChunkRows, usize, usize);

/// A chunk of consecutive windows (indexes into the run's window list) and its rows, loaded
/// once by the first window that needs them.
pub(super) struct Chunk {
    pub(super) first: usize,
    pub(super) last: usize,
    pub(super) handed: usize,
    /// `None` once loaded if the chunk exceeded the budget (its windows read directly).
    pub(super) rows: ChunkRows,
}

impl Shared {
    /// The chunk holding `window` (created if needed), as (rows cell, first, last), and the
    /// next chunk to read ahead, if one was cut for that now.
    pub(super) fn chunk_for(&self, window: &Window) -> (ChunkRef, Option<ChunkRef>) {
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

    /// The inclusive bounds of `b` covering all of `windows`.
    pub(super) fn span(&self, b: &Bound, windows: &[Window]) -> Option<(ScalarValue, ScalarValue)> {
        let mut lo: Option<ScalarValue> = None;
        let mut hi: Option<ScalarValue> = None;
        for w in windows {
            let (l, h) = b.window_bounds(&self.range(w))?;
            if lo.as_ref().is_none_or(|x| &l < x) {
                lo = Some(l);
            }
            if hi.as_ref().is_none_or(|x| &h > x) {
                hi = Some(h);
            }
        }
        Some((lo?, hi?))
    }

    /// Whether the census's rows serve `windows`: always without other filters; with them
    /// (see `prune`), which hold for the census's windows only, when each is one of those.
    pub(super) fn census_covers(&self, windows: &[Window]) -> bool {
        use std::sync::atomic::Ordering;
        if self.bounds.iter().all(|b| b.prunes.is_empty()) {
            return true;
        }
        let listed = self.windows.lock().expect("not poisoned");
        let covered = self
            .census_len
            .load(Ordering::SeqCst)
            .min(listed.list.len());
        let census: std::collections::HashSet<_> =
            listed.list[..covered].iter().map(Window::key).collect();
        windows.iter().all(|w| census.contains(&w.key()))
    }

    /// The census of `b` over `windows`: its count per key, as prefix sums, and each
    /// window's bounds.
    pub(super) fn tally(&self, b: &Bound, windows: &[Window], per_key: HashMap<i64, u64>) -> Tally {
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
                b.window_bounds(&self.range(w))
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
    pub(super) fn measured(&self, alias: &str, bytes: u64, rows: u64) {
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
    pub(super) fn cut(&self, first: usize, count: usize) -> Option<usize> {
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
    pub(super) fn resize(&self, windows: usize, bytes: u64, over: bool) {
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
