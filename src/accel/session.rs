//! The runner's DataFusion session (built by `crate::session`, with the memory-mapped source
//! store when the accelerations are on), and the switch between the accelerations and their
//! plain twins. The independent checks never use it.

use datafusion::prelude::SessionContext;

use crate::error::Result;

/// The runner's session (`session::Profile::Runner`), with local sources read through memory
/// maps when the accelerations are on and `IDEMLAKE_MMAP` allows.
pub fn new_session() -> Result<SessionContext> {
    session(crate::config::get().mmap)
}

/// The runner's session (see `crate::session`), with local sources read through memory maps
/// (`mapped`) or through object_store's plain local store.
pub fn session(mapped: bool) -> Result<SessionContext> {
    let ctx = crate::session::build(crate::session::Profile::Runner)?;
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
