//! Building the run events (OpenLineage spec [`SPEC`]) from what a window's run knows: its
//! report (run id, window, outcome, version, rows, checks), what it read (`WindowIo`), and its
//! task. Pure functions of their arguments, but for `eventTime`.

use serde_json::{Map, Value, json};

use crate::lineage::assertions;
use crate::lineage::names::{DatasetName, dataset};
use crate::lineage::settings::RunRef;
use crate::report::record::{Report, SourceVersion, Status};
use crate::task::{Format, Task};

/// The OpenLineage spec version the events follow.
pub const SPEC: &str = "2-0-2";

/// Where idemlake's source is (`Cargo.toml`'s `repository`): the `producer` of every event
/// and facet names it with the version that made the event.
pub const REPOSITORY: &str = env!("CARGO_PKG_REPOSITORY");

/// The `producer` of every event and facet.
pub fn producer() -> String {
    format!("{REPOSITORY}/tree/v{}", env!("CARGO_PKG_VERSION"))
}

/// The schema of idemlake's own run facet (`idemlake`), kept in the repository at this path.
pub const FACET_SCHEMA_PATH: &str = "docs/src/reference/openlineage/IdemlakeRunFacet-1-0-0.json";

/// The `$id` of idemlake's run facet schema.
pub fn facet_schema_id() -> String {
    format!("{REPOSITORY}/blob/main/{FACET_SCHEMA_PATH}")
}

/// Landing-zone files listed in an input's `subset` facet at most (beyond, only their count).
pub const MAX_LISTED_FILES: usize = 10_000;

/// The standard facets used, each with its schema as the spec publishes it.
const FACETS: [(&str, &str); 13] = [
    ("parent", "1-2-0/ParentRunFacet.json#/$defs/ParentRunFacet"),
    (
        "nominalTime",
        "1-0-1/NominalTimeRunFacet.json#/$defs/NominalTimeRunFacet",
    ),
    (
        "processing_engine",
        "1-1-1/ProcessingEngineRunFacet.json#/$defs/ProcessingEngineRunFacet",
    ),
    (
        "errorMessage",
        "1-0-1/ErrorMessageRunFacet.json#/$defs/ErrorMessageRunFacet",
    ),
    (
        "jobType",
        "2-0-4/JobTypeJobFacet.json#/$defs/JobTypeJobFacet",
    ),
    ("sql", "1-1-0/SQLJobFacet.json#/$defs/SQLJobFacet"),
    (
        "documentation",
        "1-1-0/DocumentationJobFacet.json#/$defs/DocumentationJobFacet",
    ),
    (
        "version",
        "1-0-1/DatasetVersionDatasetFacet.json#/$defs/DatasetVersionDatasetFacet",
    ),
    (
        "storage",
        "1-0-1/StorageDatasetFacet.json#/$defs/StorageDatasetFacet",
    ),
    (
        "outputStatistics",
        "1-0-2/OutputStatisticsOutputDatasetFacet.json#/$defs/OutputStatisticsOutputDatasetFacet",
    ),
    (
        "inputStatistics",
        "1-0-0/InputStatisticsInputDatasetFacet.json#/$defs/InputStatisticsInputDatasetFacet",
    ),
    (
        "dataQualityAssertions",
        "1-1-0/DataQualityAssertionsDatasetFacet.json#/$defs/DataQualityAssertionsDatasetFacet",
    ),
    (
        "subset",
        "1-0-0/BaseSubsetDatasetFacet.json#/$defs/InputSubsetInputDatasetFacet",
    ),
];

/// A facet: `fields` with the base facet's `_producer` and `_schemaURL` (`key` is one of
/// [`FACETS`], or `idemlake`).
fn facet(key: &str, fields: Value) -> Value {
    let schema = match FACETS.iter().find(|(k, _)| *k == key) {
        Some((_, path)) => format!("https://openlineage.io/spec/facets/{path}"),
        None => format!("{}#/$defs/IdemlakeRunFacet", facet_schema_id()),
    };
    let mut out = Map::new();
    out.insert("_producer".into(), json!(producer()));
    out.insert("_schemaURL".into(), json!(schema));
    if let Value::Object(f) = fields {
        out.extend(f);
    }
    Value::Object(out)
}

/// Which transition of a run an event reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Start,
    Complete,
    Fail,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Start => "START",
            Kind::Complete => "COMPLETE",
            Kind::Fail => "FAIL",
        }
    }

    /// How a finished window's report ends its run: FAIL when it exits non-zero.
    pub fn of(report: &Report) -> Kind {
        if report.exit_code.is_some() {
            Kind::Fail
        } else {
            Kind::Complete
        }
    }
}

/// A run's place among runs: its job, and the run it runs under (with the root of them).
pub struct Lineage<'a> {
    pub namespace: &'a str,
    pub parent: Option<&'a RunRef>,
    pub root: Option<&'a RunRef>,
}

/// The event's envelope: `eventType`, `eventTime`, `producer`, `schemaURL`, `run`, `job`.
fn envelope(kind: Kind, run: Value, job: Value) -> Map<String, Value> {
    let mut e = Map::new();
    e.insert("eventType".into(), json!(kind.name()));
    e.insert(
        "eventTime".into(),
        json!(format!("{:.3}", jiff::Timestamp::now())),
    );
    e.insert("producer".into(), json!(producer()));
    e.insert(
        "schemaURL".into(),
        json!(format!(
            "https://openlineage.io/spec/{SPEC}/OpenLineage.json#/$defs/RunEvent"
        )),
    );
    e.insert("run".into(), run);
    e.insert("job".into(), job);
    e
}

/// The run facets every run has: its parent (if any) and the engine.
fn base_run_facets(at: &Lineage) -> Map<String, Value> {
    let mut facets = Map::new();
    if let Some(p) = at.parent {
        let mut parent = json!({
            "run": {"runId": p.run_id},
            "job": {"namespace": p.namespace, "name": p.name},
        });
        if let Some(r) = at.root {
            parent["root"] = json!({
                "run": {"runId": r.run_id},
                "job": {"namespace": r.namespace, "name": r.name},
            });
        }
        facets.insert("parent".into(), facet("parent", parent));
    }
    facets.insert(
        "processing_engine".into(),
        facet(
            "processing_engine",
            json!({
                "name": "idemlake",
                "version": env!("CARGO_PKG_VERSION"),
                "openlineageAdapterVersion": env!("CARGO_PKG_VERSION"),
            }),
        ),
    );
    facets
}

fn job_type(kind: &str) -> Value {
    facet(
        "jobType",
        json!({"processingType": "BATCH", "integration": "IDEMLAKE", "jobType": kind}),
    )
}

/// The event of a window's run: `kind` of the run `report` describes, of `task`, whose table
/// is `table`.
pub fn window_event(
    kind: Kind,
    at: &Lineage,
    task: &Task,
    report: &Report,
    table: &DatasetName,
) -> Value {
    let mut run_facets = base_run_facets(at);
    run_facets.insert(
        "nominalTime".into(),
        facet(
            "nominalTime",
            json!({"nominalStartTime": report.window.start, "nominalEndTime": report.window.end}),
        ),
    );
    if kind == Kind::Fail {
        let message = report
            .error
            .clone()
            .unwrap_or_else(|| "the window failed".into());
        run_facets.insert(
            "errorMessage".into(),
            facet(
                "errorMessage",
                json!({"message": message, "programmingLanguage": "Rust"}),
            ),
        );
    }
    run_facets.insert(
        "idemlake".into(),
        facet("idemlake", own_facet(kind, task, report)),
    );
    let mut job_facets = Map::new();
    job_facets.insert("jobType".into(), job_type("WINDOW"));
    job_facets.insert(
        "sql".into(),
        facet("sql", json!({"query": task.sql, "dialect": "datafusion"})),
    );
    if let Some(d) = &task.description {
        job_facets.insert(
            "documentation".into(),
            facet("documentation", json!({"description": d})),
        );
    }
    let mut e = envelope(
        kind,
        json!({"runId": run_uuid(report.run_id.as_deref()), "facets": run_facets}),
        json!({"namespace": at.namespace, "name": task.name, "facets": job_facets}),
    );
    let assertions = (kind != Kind::Start).then(|| assertions::of(task, report));
    let inputs: Vec<Value> = task
        .sources
        .iter()
        .map(|s| {
            let read = report.io.sources.iter().find(|v| v.alias == s.alias);
            input(&s.uri, s.format, read, assertions.as_ref())
        })
        .collect();
    e.insert("inputs".into(), Value::Array(inputs));
    e.insert("outputs".into(), json!([output(kind, report, table)]));
    Value::Object(e)
}

/// The OpenLineage run id of a window's run: its own run id when that is a UUID (idemlake's
/// are), else a UUID derived from it (the same one for every event of the run).
pub fn run_uuid(run_id: Option<&str>) -> String {
    let run_id = run_id.unwrap_or_default();
    if let Ok(u) = uuid::Uuid::parse_str(run_id) {
        return u.hyphenated().to_string();
    }
    use sha2::Digest;
    let digest = sha2::Sha256::digest(run_id.as_bytes());
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Builder::from_random_bytes(bytes)
        .into_uuid()
        .hyphenated()
        .to_string()
}

/// idemlake's run facet: the window, its time zone and grain, the run id; at the end, how
/// the run ended (status, exit code and class).
fn own_facet(kind: Kind, task: &Task, report: &Report) -> Value {
    let mut f = json!({
        "task": task.name,
        "runId": report.run_id,
        "window": {
            "label": report.window.label,
            "start": report.window.start,
            "end": report.window.end,
        },
        "timeZone": task.timezone_name,
        "grain": task.grain.as_str(),
        "mode": task.mode,
    });
    if kind != Kind::Start {
        f["status"] = json!(report.status);
        f["published"] = json!(report.published);
        f["retryable"] = json!(report.retryable);
        if let Some(h) = &report.sql_hash {
            f["sqlHash"] = json!(h);
        }
        if let Some(code) = report.exit_code {
            f["exitCode"] = json!(code);
            let class = crate::error::ErrorKind::from_exit_code(code).map(|k| k.name());
            f["exitClass"] = json!(class.unwrap_or("unknown"));
        }
    }
    f
}

/// One source as an input dataset: its version (a Delta source's pinned version, a file
/// source's fingerprint), the files a landing zone's window read, and the window's checks.
fn input(
    uri: &str,
    format: Format,
    read: Option<&SourceVersion>,
    assertions: Option<&Value>,
) -> Value {
    let name = dataset(uri);
    let mut facets = Map::new();
    let mut input_facets = Map::new();
    if format == Format::Delta {
        facets.insert(
            "storage".into(),
            facet(
                "storage",
                json!({"storageLayer": "delta", "fileFormat": "parquet"}),
            ),
        );
    }
    if let Some(v) = read {
        let version = v.version.map(|n| n.to_string());
        let version =
            version.or_else(|| v.read.is_empty().then(|| v.fingerprint.clone()).flatten());
        if let Some(version) = version {
            facets.insert(
                "version".into(),
                facet("version", json!({"datasetVersion": version})),
            );
        }
        if let Some(files) = v.files {
            let mut stats = json!({"fileCount": files});
            if !v.read.is_empty() {
                stats["size"] = json!(v.read.iter().map(|f| f.size).sum::<u64>());
            }
            input_facets.insert("inputStatistics".into(), facet("inputStatistics", stats));
        }
        if !v.read.is_empty() && v.read.len() <= MAX_LISTED_FILES {
            let root = if name.namespace == "file" { "/" } else { "" };
            let locations: Vec<String> =
                v.read.iter().map(|f| format!("{root}{}", f.path)).collect();
            input_facets.insert(
                "subset".into(),
                facet(
                    "subset",
                    json!({"inputCondition": {"type": "location", "locations": locations}}),
                ),
            );
        }
    }
    if let Some(a) =
        assertions.filter(|a| a["assertions"].as_array().is_some_and(|v| !v.is_empty()))
    {
        input_facets.insert(
            "dataQualityAssertions".into(),
            facet("dataQualityAssertions", a.clone()),
        );
    }
    let mut d = json!({"namespace": name.namespace, "name": name.name, "facets": facets});
    if !input_facets.is_empty() {
        d["inputFacets"] = Value::Object(input_facets);
    }
    d
}

/// The task's table as the output dataset: at the end, the version the window's commit made
/// (or the table's version when it was skipped) and what it wrote.
fn output(kind: Kind, report: &Report, table: &DatasetName) -> Value {
    let mut facets = Map::new();
    facets.insert(
        "storage".into(),
        facet(
            "storage",
            json!({"storageLayer": "delta", "fileFormat": "parquet"}),
        ),
    );
    let mut d = json!({"namespace": table.namespace, "name": table.name});
    let landed = report.published || report.status == Status::Skipped;
    if kind != Kind::Start && landed {
        if let Some(v) = report.table_version {
            facets.insert(
                "version".into(),
                facet("version", json!({"datasetVersion": v.to_string()})),
            );
        }
        let stats = json!({
            "rowCount": report.rows_written,
            "size": report.io.bytes_written,
            "fileCount": report.io.files_written,
        });
        d["outputFacets"] = json!({"outputStatistics": facet("outputStatistics", stats)});
    }
    d["facets"] = Value::Object(facets);
    d
}

/// The event of an invocation's run (a backfill): job `name`, run `run_id`, under the
/// orchestrator's run if any; `error` for a FAIL.
pub fn invocation_event(
    kind: Kind,
    at: &Lineage,
    name: &str,
    run_id: &str,
    error: Option<&str>,
) -> Value {
    let mut run_facets = base_run_facets(at);
    if let Some(message) = error {
        run_facets.insert(
            "errorMessage".into(),
            facet(
                "errorMessage",
                json!({"message": message, "programmingLanguage": "Rust"}),
            ),
        );
    }
    let job_facets = json!({"jobType": job_type("BACKFILL")});
    let e = envelope(
        kind,
        json!({"runId": run_id, "facets": run_facets}),
        json!({"namespace": at.namespace, "name": name, "facets": job_facets}),
    );
    Value::Object(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_id_that_is_a_uuid_is_the_runs_and_another_is_derived_the_same_way_each_time() {
        let id = "B462EE4C-5FF8-4B2C-9B5C-83F13159F72B";
        assert_eq!(run_uuid(Some(id)), id.to_lowercase());
        let derived = run_uuid(Some("run-7"));
        assert_eq!(derived, run_uuid(Some("run-7")));
        assert_ne!(derived, run_uuid(Some("run-8")));
        assert!(uuid::Uuid::parse_str(&derived).is_ok());
    }

    #[test]
    fn every_exit_code_has_a_class() {
        for code in 1..=6 {
            let kind = crate::error::ErrorKind::from_exit_code(code).unwrap();
            assert_eq!(kind.exit_code(), code);
            assert!(!kind.name().is_empty());
        }
        assert_eq!(crate::error::ErrorKind::from_exit_code(0), None);
    }
}
