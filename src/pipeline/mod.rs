//! The stages of one window, in order: plan → stage → reconcile → commit → record.
//!
//! May import `accel`, `delta`, `lineage`, `report`, `storage`, `task`, `config`, `error`, `fault`.

pub mod checks;
pub mod commit;
pub mod execute;
pub mod independent;
pub mod landing;
pub mod lineage;
pub mod lookback;
pub mod pins;
pub mod reconcile;
pub mod runner;
pub mod sources;
pub mod stage;
pub mod stages;
pub mod target;
pub mod window;
