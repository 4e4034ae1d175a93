//! The commands, each a composition of the layers below: backfill, verify, audit and
//! repair, status, explain and validate, init and new (scaffold), gen-tpch (`run` is [`crate::pipeline::runner::run_window`]).

pub mod adopt;
pub mod audit;
pub mod backfill;
pub mod check;
pub mod cluster;
pub mod explain;
pub mod optimize;
pub mod restore;
pub mod scaffold;
pub mod status;
#[cfg(feature = "tpch")]
pub mod tpch;
pub mod vacuum;
pub mod verify;
