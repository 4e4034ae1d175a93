//! Object-store requests counted per process, by kind, for the `-v` summary a command ends
//! with (`storage requests: GET 12 (3.1 MiB), PUT 4 (90 KiB), LIST 2, …`).
//!
//! Every S3 store idemlake builds is wrapped in [`Counted`] (see `store_for`); one call on the
//! store is one HTTP request (ranged reads go through `get_opts` one range at a time),
//! except: a multipart upload counts once as `PUT` whatever its parts; a listing counts once
//! per call however many pages it takes (1,000 keys a page); `DELETE` counts objects (S3
//! deletes up to 1,000 per request); object_store's own retries happen inside the wrapped
//! store and are not seen here. Each request is also logged at `trace` level with the object
//! it names (`IDEMLAKE_LOG=idemlake::storage::count=trace`).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use object_store::ObjectStore;

use crate::storage::wrap::Intercept;

/// Requests and bytes by kind (`GET`, `HEAD`, `PUT`, `LIST`, `DELETE`, `COPY`).
fn counts() -> &'static Mutex<BTreeMap<&'static str, (u64, u64)>> {
    static COUNTS: std::sync::OnceLock<Mutex<BTreeMap<&'static str, (u64, u64)>>> =
        std::sync::OnceLock::new();
    COUNTS.get_or_init(Default::default)
}

fn add(kind: &'static str, location: &object_store::path::Path, bytes: u64) {
    tracing::trace!(kind, %location, bytes, "storage request");
    let mut c = counts().lock().expect("not poisoned");
    let e = c.entry(kind).or_default();
    e.0 += 1;
    e.1 += bytes;
}

/// The requests counted so far, by kind: `(requests, bytes)`.
pub fn snapshot() -> BTreeMap<&'static str, (u64, u64)> {
    counts().lock().expect("not poisoned").clone()
}

/// One line for the log, or `None` if no request was made.
pub fn summary() -> Option<String> {
    let c = snapshot();
    if c.is_empty() {
        return None;
    }
    let total: u64 = c.values().map(|(n, _)| n).sum();
    let parts: Vec<String> = c
        .iter()
        .map(|(k, (n, b))| {
            if *b > 0 {
                format!("{k} {n} ({})", human(*b))
            } else {
                format!("{k} {n}")
            }
        })
        .collect();
    Some(format!("storage requests: {total} ({})", parts.join(", ")))
}

fn human(b: u64) -> String {
    match b {
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}

/// A store whose requests are counted.
#[derive(Debug)]
pub struct Counted(pub Arc<dyn ObjectStore>);

impl fmt::Display for Counted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl Intercept for Counted {
    fn inner(&self) -> &dyn ObjectStore {
        self.0.as_ref()
    }
    fn request_hook(&self) -> Option<fn(&'static str, &object_store::path::Path, u64)> {
        Some(add)
    }
}
