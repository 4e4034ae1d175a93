//! Target tables whose properties ask writers for work idemlake does not do.
//!
//! Another tool may create a target table (or alter one idemlake created) with properties a
//! Delta writer must honour. idemlake writes each window's rows with delta-rs's Parquet writer
//! by column name and commits adds and removes; it does not evaluate a table's CHECK
//! constraints or column invariants, compute generated or identity columns, or write the
//! physical column names of a column-mapped table, and it stores every timestamp as a UTC
//! `timestamp`, never `timestamp_ntz`. Found by trying: a table with
//! `delta.constraints.v_small = 'v < 5'` was published with `v = 9` (deltalake refuses that
//! append), and a column-mapped table was written with logical names, after which deltalake
//! and polars could not open it. Such tables are refused before any row is read (exit 2), by
//! `validate` too, as is `delta.appendOnly` (a window's replacement removes files).

use deltalake::kernel::StructType;
use deltalake::table::state::DeltaTableState;

use crate::error::{Error, Result};

/// The first property of the table in `state` that idemlake cannot honour as a writer, as a
/// sentence; `Ok` if there is none.
pub fn check_writable(state: &DeltaTableState) -> Result<()> {
    let config = state.metadata().configuration();
    let mut constraints: Vec<String> = config
        .iter()
        .filter_map(|(k, v)| {
            k.strip_prefix("delta.constraints.")
                .map(|n| format!("{n} ({v})"))
        })
        .collect();
    constraints.sort();
    let problem = if !constraints.is_empty() {
        Some(format!(
            "has CHECK constraints ({}), which idemlake does not evaluate on the rows it writes",
            constraints.join(", ")
        ))
    } else if let Some(mode) = config
        .get("delta.columnMapping.mode")
        .filter(|m| !m.eq_ignore_ascii_case("none"))
    {
        Some(format!(
            "maps its columns to physical names (delta.columnMapping.mode = {mode}), which idemlake does not write"
        ))
    } else if config
        .get("delta.appendOnly")
        .is_some_and(|v| v.eq_ignore_ascii_case("true"))
    {
        Some(
            "is append-only (delta.appendOnly = true): replacing a window removes its files, which such a table refuses"
                .to_string(),
        )
    } else {
        column_rules(state.schema().as_ref())
    };
    match problem {
        None => Ok(()),
        Some(p) => Err(Error::input(format!(
            "the target table {p}, so idemlake cannot publish into it without breaking what its other writers rely on; nothing was written — publish into another table{}",
            match p.contains("timestamp_ntz") {
                true => "",
                false => ", or remove the property",
            }
        ))),
    }
}

/// A column whose metadata asks writers to check or compute it (invariants, generated or
/// identity columns), or whose type idemlake does not write (`timestamp_ntz`: idemlake
/// stores every timestamp as a UTC `timestamp`, so such a table refused every run as a
/// schema change no cast could fix), as a sentence.
fn column_rules(schema: &StructType) -> Option<String> {
    for f in schema.fields() {
        if f.data_type() == &deltalake::kernel::DataType::TIMESTAMP_NTZ {
            return Some(format!(
                "stores column `{}` as timestamp_ntz (a timestamp without time zone), and idemlake stores every timestamp as a UTC timestamp",
                f.name()
            ));
        }
        for (key, what) in [
            ("delta.invariants", "an invariant"),
            ("delta.generationExpression", "a generation expression"),
            ("delta.identity.start", "an identity"),
        ] {
            if f.metadata().contains_key(key) {
                return Some(format!(
                    "has {what} on column `{}` ({key}), which idemlake does not apply to the rows it writes",
                    f.name()
                ));
            }
        }
    }
    None
}
