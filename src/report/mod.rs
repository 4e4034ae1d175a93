//! What runs report: the run record each commit carries, the report each run returns, the
//! run log beside the table, alerts, the status picture and output rendering.
//!
//! May import `task`, `config`, `error`; nothing that runs a window.

pub mod alert;
pub mod out;
pub mod picture;
pub mod record;
pub mod render;
pub mod runlog;
pub mod states;
