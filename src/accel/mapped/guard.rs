//! The SIGBUS guard of the source maps: which address ranges are idemlake's own maps, and
//! which of them lost a page under a read (their file was truncated).
//!
//! Invariants:
//! - The handler acts only on a fault (`BUS_ADRERR`) inside a range registered here: it maps
//!   a zero page over the faulting page and marks that map faulted. Any other SIGBUS is not
//!   the guard's: a fault the kernel raised repeats under the disposition in place before the
//!   guard (Rust's runtime's, which restores the default: the process dies of it), and a
//!   signal a process sent is raised again under the default action.
//! - A fault belongs to the file of its map, recorded by location for the life of the
//!   process: a window fails if a file it reaches faulted, and only then (see [`faulted`]).
//! - A map is unregistered before it is unmapped, so its addresses, once reused by another
//!   map or allocation, are never taken for one of ours.
//! - The handler touches only atomics and calls only async-signal-safe functions (`mmap`,
//!   `sigaction`, `raise`); locks and allocation happen outside it, when maps are registered,
//!   dropped, or [`faulted`] is asked.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// How many maps may be live at once; beyond it ranges are read without a map.
const SLOTS: usize = 4096;

const FREE: u8 = 0;
const BUSY: u8 = 1;
const LIVE: u8 = 2;

/// One registered map: `[start, end)` of the process's address space.
struct Slot {
    state: AtomicU8,
    start: AtomicUsize,
    end: AtomicUsize,
    faulted: AtomicBool,
}

static TABLE: [Slot; SLOTS] = [const {
    Slot {
        state: AtomicU8::new(FREE),
        start: AtomicUsize::new(0),
        end: AtomicUsize::new(0),
        faulted: AtomicBool::new(false),
    }
}; SLOTS];

/// Where the next registration starts looking for a free slot.
static HINT: AtomicUsize = AtomicUsize::new(0);
/// The page size, read before the handler is installed (the handler only reads it).
static PAGE: AtomicUsize = AtomicUsize::new(4096);
/// The SIGBUS disposition before the guard's, put back for faults that are not ours.
static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();

/// The location of each live slot's file.
fn live() -> &'static Mutex<HashMap<usize, String>> {
    static LIVE_FILES: OnceLock<Mutex<HashMap<usize, String>>> = OnceLock::new();
    LIVE_FILES.get_or_init(Default::default)
}

/// Locations whose maps faulted and are gone.
fn recorded() -> &'static Mutex<BTreeSet<String>> {
    static FAULTED: OnceLock<Mutex<BTreeSet<String>>> = OnceLock::new();
    FAULTED.get_or_init(Default::default)
}

/// The locations (object store paths) of mapped source files, among those `wanted` selects,
/// whose pages vanished while this process read them: what was read from them is zeros, not
/// the file, and nothing computed from them may be published.
pub fn faulted(wanted: impl Fn(&str) -> bool) -> Vec<String> {
    let mut out: BTreeSet<String> = recorded()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|l| wanted(l))
        .cloned()
        .collect();
    let live = live().lock().unwrap_or_else(|e| e.into_inner());
    for (&i, location) in live.iter() {
        if TABLE[i].faulted.load(Ordering::SeqCst) && wanted(location) {
            out.insert(location.clone());
        }
    }
    out.into_iter().collect()
}

/// A registered map; dropping it unregisters it (recording a fault) before the map's own
/// drop unmaps it.
pub struct Registered {
    slot: usize,
}

/// Register `[start, start + len)`, the map of `location`; `None` when every slot is taken.
pub fn register(start: usize, len: usize, location: &str) -> Option<Registered> {
    install();
    let from = HINT.load(Ordering::Relaxed);
    let slot = (0..SLOTS).map(|k| (from + k) % SLOTS).find(|&i| {
        TABLE[i]
            .state
            .compare_exchange(FREE, BUSY, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    })?;
    HINT.store((slot + 1) % SLOTS, Ordering::Relaxed);
    live()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(slot, location.to_string());
    let s = &TABLE[slot];
    s.faulted.store(false, Ordering::SeqCst);
    s.start.store(start, Ordering::SeqCst);
    s.end.store(start.saturating_add(len), Ordering::SeqCst);
    s.state.store(LIVE, Ordering::Release);
    Some(Registered { slot })
}

impl Drop for Registered {
    fn drop(&mut self) {
        let s = &TABLE[self.slot];
        // The handler ignores the slot from here on.
        s.state.store(BUSY, Ordering::SeqCst);
        let location = live()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.slot);
        if s.faulted.swap(false, Ordering::SeqCst)
            && let Some(l) = location
        {
            recorded()
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(l);
        }
        s.start.store(0, Ordering::SeqCst);
        s.end.store(0, Ordering::SeqCst);
        s.state.store(FREE, Ordering::Release);
    }
}

/// Install the SIGBUS handler (once per process, before the first map).
fn install() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: sysconf and sigaction are called with valid arguments; the handler only
        // makes async-signal-safe calls (mmap, sigaction, raise) and touches atomics.
        unsafe {
            let page = libc::sysconf(libc::_SC_PAGESIZE);
            if page > 0 {
                PAGE.store(page as usize, Ordering::SeqCst);
            }
            let mut previous: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut previous) == 0 {
                let _ = PREVIOUS.set(previous);
            }
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_sigbus as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut());
        }
    });
}

/// Whether `addr` is inside a live registered map: its slot.
fn ours(addr: usize) -> Option<&'static Slot> {
    TABLE.iter().find(|s| {
        s.state.load(Ordering::Acquire) == LIVE
            && s.start.load(Ordering::SeqCst) <= addr
            && addr < s.end.load(Ordering::SeqCst)
    })
}

/// SIGBUS: a page of one of our maps whose file is gone (`BUS_ADRERR`) gets a zero page and
/// its map is marked; anything else goes to the previous disposition (see the module docs).
extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: called by the kernel with a valid siginfo for SIGBUS; only async-signal-safe
    // calls below.
    unsafe {
        let code = (*info).si_code;
        let addr = (*info).si_addr() as usize;
        if code == libc::BUS_ADRERR
            && let Some(slot) = ours(addr)
        {
            let page = PAGE.load(Ordering::SeqCst);
            let at = (addr & !(page - 1)) as *mut libc::c_void;
            let zero = libc::mmap(
                at,
                page,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            );
            if zero != libc::MAP_FAILED {
                slot.faulted.store(true, Ordering::SeqCst);
                return;
            }
        }
        // A fault the kernel raised repeats when the handler returns, under the previous
        // disposition (Rust's runtime tells a stack overflow from other faults there; it
        // then restores the default). A signal a process sent is raised again under the
        // default action.
        match PREVIOUS.get() {
            Some(previous) if code > 0 => {
                libc::sigaction(sig, previous, std::ptr::null_mut());
            }
            _ => {
                libc::signal(sig, libc::SIG_DFL);
                if code <= 0 {
                    libc::raise(sig);
                }
            }
        }
    }
}
