//! idemlake integration tests: one binary, one module per concern (fast to link).
mod common;

mod alerts;
mod audit;
mod backfill;
mod checks;
mod cli;
mod data_checks;
mod dependencies;
mod dst;
mod findings;
mod incident;
mod landing;
mod layers;
mod lineage;
mod lookback;
mod mutations;
mod python_reader;
mod rejections;
mod rerun;
mod s3;
mod schema;
mod shared_scan;
mod status;
mod torture;
mod upkeep;
mod verify;
