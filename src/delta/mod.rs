//! The target Delta table: open and create it, publish windows with one overwrite commit or
//! a window-pruned merge, read a commit back from the committed snapshot, keep the live-file
//! map, checkpoint and clean up.
//!
//! May import `task`, `storage`, `report`, `config`, `error`, `fault`.

pub mod actions;
pub mod features;
pub mod filemap;
pub mod merge;
pub mod overwrite;
pub mod partition;
pub mod readback;
pub mod table;
