//! The differential torture suite (issue 14 §2): generated tasks shaped like everyday SQL, run
//! through idemlake with every acceleration on (`backfill --parallel 1` and `4`), with every
//! acceleration off (`IDEMLAKE_ACCELERATE=0`), as single `run`s, killed with `kill -9` and
//! finished by `backfill --missing`, and as two processes racing on the same range. Every
//! resulting table must equal an oracle that does not use idemlake: the same SQL evaluated by
//! plain DataFusion per window (bounds computed here with jiff, bound as parameters), compared
//! as multisets after casting to the table's column types.
//!
//! `make test` runs a seeded slice bounded by time (`IDEMLAKE_TORTURE_SECS`, default 300 s);
//! `make torture` runs `IDEMLAKE_TORTURE_CASES` cases (default 2,000). A failing case prints
//! its seed; `IDEMLAKE_TORTURE_SEED=<seed> IDEMLAKE_TORTURE_CASES=1` replays it alone, and
//! failing seeds become named regression tests at the end of this file.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::array::{
    Array, ArrayRef, Date32Array, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
    TimestampNanosecondArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use datafusion::common::ScalarValue;
use datafusion::prelude::{CsvReadOptions, JsonReadOptions, ParquetReadOptions, SessionContext};
use jiff::civil::Date;
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};

use crate::common::*;

/// splitmix64: a small deterministic generator (the seed is the whole case).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Grain {
    Hour,
    Day,
    Week,
    Month,
}

impl Grain {
    fn name(self) -> &'static str {
        match self {
            Grain::Hour => "hour",
            Grain::Day => "day",
            Grain::Week => "week",
            Grain::Month => "month",
        }
    }
}

/// How the source stores the event time.
#[derive(Debug, Clone, Copy, PartialEq)]
enum TimeCol {
    /// TIMESTAMP µs with time zone UTC.
    TsUtcMicros,
    /// TIMESTAMP ns without time zone (taken as UTC).
    TsNaiveNanos,
    /// An RFC 3339 string.
    Text,
    /// A DATE (local calendar day; day, week and month grains only).
    Date,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Format {
    Parquet,
    ParquetFiles,
    /// A landing zone: `events/dt=YYYY-MM-DD/` by the UTC date of `ts` (NULL times in the
    /// first date's), `_SUCCESS` and checksum files beside the data, and a `dt` filter the
    /// task writes before or after its window filter (`dt_first`).
    Zone {
        dt_first: bool,
    },
    Csv,
    Json,
    Delta,
}

/// One generated case.
#[derive(Debug)]
struct Case {
    seed: u64,
    grain: Grain,
    tz: &'static str,
    time: TimeCol,
    format: Format,
    /// Window bounds `[start, end)`, in order.
    windows: Vec<(Timestamp, Timestamp)>,
    sql: String,
    reconcile: Option<(String, String)>,
    events: RecordBatch,
    dims: RecordBatch,
}

const ZONES: [&str; 4] = ["UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata"];
/// Interesting local dates: DST changes in Berlin and New York, a year end, a plain day.
const ANCHORS: [(i16, i8, i8); 6] = [
    (2026, 3, 29),
    (2026, 10, 25),
    (2026, 3, 8),
    (2026, 11, 1),
    (2026, 12, 31),
    (2026, 6, 15),
];

fn windows(grain: Grain, tz: &TimeZone, anchor: Date, count: usize) -> Vec<(Timestamp, Timestamp)> {
    let day = |d: Date| d.to_zoned(tz.clone()).unwrap().timestamp();
    let mut out = Vec::new();
    match grain {
        Grain::Hour => {
            let mut t = day(anchor);
            for _ in 0..count {
                let next = t.checked_add(SignedDuration::from_hours(1)).unwrap();
                out.push((t, next));
                t = next;
            }
        }
        Grain::Day => {
            let mut d = anchor.yesterday().unwrap();
            for _ in 0..count {
                out.push((day(d), day(d.tomorrow().unwrap())));
                d = d.tomorrow().unwrap();
            }
        }
        Grain::Week => {
            let mut d = anchor
                .checked_sub(
                    jiff::Span::new().days(i64::from(anchor.weekday().to_monday_zero_offset())),
                )
                .unwrap();
            for _ in 0..count {
                let next = d.checked_add(jiff::Span::new().days(7)).unwrap();
                out.push((day(d), day(next)));
                d = next;
            }
        }
        Grain::Month => {
            let mut d = anchor.first_of_month();
            for _ in 0..count {
                let next = d.last_of_month().tomorrow().unwrap();
                out.push((day(d), day(next)));
                d = next;
            }
        }
    }
    out
}

fn generate(seed: u64) -> Case {
    let mut r = Rng(seed);
    let grain = *r.pick(&[
        Grain::Hour,
        Grain::Day,
        Grain::Day,
        Grain::Week,
        Grain::Month,
    ]);
    let tz_name = *r.pick(&ZONES);
    let tz = TimeZone::get(tz_name).unwrap();
    let (y, m, d) = *r.pick(&ANCHORS);
    let anchor = jiff::civil::date(y, m, d);
    let count = match grain {
        Grain::Hour => 3 + r.below(8),
        Grain::Day => 2 + r.below(5),
        Grain::Week => 2 + r.below(2),
        Grain::Month => 2,
    };
    let windows = windows(grain, &tz, anchor, count);
    let time = if grain == Grain::Hour {
        *r.pick(&[TimeCol::TsUtcMicros, TimeCol::TsNaiveNanos, TimeCol::Text])
    } else {
        *r.pick(&[
            TimeCol::TsUtcMicros,
            TimeCol::TsNaiveNanos,
            TimeCol::Text,
            TimeCol::Date,
        ])
    };
    let format = *r.pick(&[
        Format::Parquet,
        Format::ParquetFiles,
        Format::Csv,
        Format::Json,
        Format::Delta,
    ]);
    // Half of the directory cases are landing zones; decided from the seed, not drawn, so
    // every other case stays what it was.
    let format = match format {
        Format::ParquetFiles if (seed >> 3) & 1 == 1 => Format::Zone {
            dt_first: (seed >> 4) & 1 == 1,
        },
        other => other,
    };

    // Events spread over the range and one window either side, unsorted, some times NULL.
    let lo = windows[0].0.as_second() - (windows[0].1.as_second() - windows[0].0.as_second());
    let last = windows[windows.len() - 1];
    let hi = last.1.as_second() + (last.1.as_second() - last.0.as_second());
    let n = 40 + r.below(160);
    let mut ids = Vec::with_capacity(n);
    let mut secs: Vec<Option<i64>> = Vec::with_capacity(n);
    let mut cats = Vec::with_capacity(n);
    let mut amounts = Vec::with_capacity(n);
    for i in 0..n {
        ids.push(i as i64 + 1);
        secs.push(if r.chance(4) {
            None
        } else if r.chance(10) {
            // Exactly on a window bound.
            let w = r.pick(&windows);
            Some(if r.chance(50) { w.0 } else { w.1 }.as_second())
        } else {
            Some(lo + (r.next() % (hi - lo) as u64) as i64)
        });
        cats.push(match r.below(5) {
            0 => None,
            1 | 2 => Some("a"),
            3 => Some("b"),
            _ => Some("c"),
        });
        amounts.push(1 + r.below(100) as i64);
    }
    let time_array: ArrayRef = match time {
        TimeCol::TsUtcMicros => Arc::new(
            TimestampMicrosecondArray::from(
                secs.iter()
                    .map(|s| s.map(|s| s * 1_000_000))
                    .collect::<Vec<_>>(),
            )
            .with_timezone("UTC"),
        ),
        TimeCol::TsNaiveNanos => Arc::new(TimestampNanosecondArray::from(
            secs.iter()
                .map(|s| s.map(|s| s * 1_000_000_000))
                .collect::<Vec<_>>(),
        )),
        TimeCol::Text => Arc::new(StringArray::from(
            secs.iter()
                .map(|s| s.map(|s| Timestamp::from_second(s).unwrap().to_string()))
                .collect::<Vec<_>>(),
        )),
        TimeCol::Date => Arc::new(Date32Array::from(
            secs.iter()
                .map(|s| {
                    s.map(|s| {
                        let d = Timestamp::from_second(s)
                            .unwrap()
                            .to_zoned(tz.clone())
                            .date();
                        d.since(jiff::civil::date(1970, 1, 1)).unwrap().get_days()
                    })
                })
                .collect::<Vec<_>>(),
        )),
    };
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("ts", time_array.data_type().clone(), true),
        Field::new("cat", DataType::Utf8, true),
        Field::new("amount", DataType::Int64, false),
    ]));
    let events = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(ids)),
            time_array,
            Arc::new(StringArray::from(cats)),
            Arc::new(Int64Array::from(amounts)),
        ],
    )
    .unwrap();
    let dims = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("cat", DataType::Utf8, false),
            Field::new("label", DataType::Utf8, false),
        ])),
        vec![
            Arc::new(StringArray::from(vec!["a", "b"])),
            Arc::new(StringArray::from(vec!["alpha", "beta"])),
        ],
    )
    .unwrap();

    let zone = match format {
        Format::Zone { dt_first } => Some(dt_first),
        _ => None,
    };
    let (sql, reconcile) = sql(&mut r, (grain, tz_name, time, zone), &windows);
    Case {
        seed,
        grain,
        tz: tz_name,
        time,
        format,
        windows,
        sql,
        reconcile,
        events,
        dims,
    }
}

/// The task's SQL and maybe a `[reconcile]` (source, output), from a grammar of everyday
/// shapes.
fn sql(
    r: &mut Rng,
    (grain, tz, time, zone): (Grain, &str, TimeCol, Option<bool>),
    windows: &[(Timestamp, Timestamp)],
) -> (String, Option<(String, String)>) {
    let t = |p: &str| match time {
        TimeCol::Text => format!("CAST({p}ts AS TIMESTAMP)"),
        TimeCol::Date => format!("CAST({p}ts AS DATE)"),
        _ => format!("{p}ts"),
    };
    let join = r.chance(20);
    let p = if join { "e." } else { "" };
    let tt = t(p);
    // The window filter.
    let window_filter = if time == TimeCol::Date {
        match r.below(3) {
            0 => format!("{tt} >= $window_start AND {tt} < $window_end"),
            1 => format!("{tt} BETWEEN $window_start AND $window_end - INTERVAL '1 day'"),
            _ => format!("$window_start <= {tt} AND {tt} < $window_end AND {tt} IS NOT NULL"),
        }
    } else {
        match r.below(5) {
            0 | 1 => format!("{tt} >= $window_start_ts AND {tt} < $window_end_ts"),
            2 => format!("{tt} BETWEEN $window_start_ts AND $window_end_ts - INTERVAL '1 second'"),
            3 => format!(
                "{tt} > $window_start_ts - INTERVAL '1 second' AND {tt} <= $window_end_ts - INTERVAL '1 second'"
            ),
            _ => format!(
                "{tt} >= $window_start_ts AND {tt} < $window_start_ts + INTERVAL '1 hour' \
                 OR {tt} >= $window_start_ts + INTERVAL '1 hour' AND {tt} < $window_end_ts"
            ),
        }
    };
    let extra = match r.below(6) {
        0 => format!(" AND {p}cat = 'a'"),
        1 => format!(" AND {p}amount > 30"),
        2 => format!(" AND {p}cat IS NOT NULL"),
        3 => format!(" AND {p}amount IN (1, 2, 3, 5, 8, 13, 21, 34, 55, 89)"),
        _ => String::new(),
    };
    // A landing zone's directories, widened by a day either side of the window's UTC dates.
    let filter = match zone {
        None => format!("({window_filter}){extra}"),
        Some(dt_first) => {
            let dt = format!(
                "{p}dt >= CAST($window_start_ts AS DATE) - INTERVAL '1' DAY AND {p}dt < CAST($window_end_ts AS DATE) + INTERVAL '1' DAY"
            );
            match dt_first {
                true => format!("{dt} AND ({window_filter}){extra}"),
                false => format!("({window_filter}){extra} AND {dt}"),
            }
        }
    };
    // The window column: stamped from the window, or derived from the data when that
    // provably lies in the window.
    let derived = match (time, grain) {
        (TimeCol::Date, Grain::Day) => Some(tt.clone()),
        (TimeCol::Date, _) => Some(tt.clone()),
        (_, Grain::Day) if tz == "UTC" => Some(format!("CAST({tt} AS DATE)")),
        (_, Grain::Hour) if tz != "Asia/Kolkata" => Some(format!("date_trunc('hour', {tt})")),
        _ => None,
    };
    let part = match derived {
        Some(d) if r.chance(50) => d,
        _ => "$window_start".to_string(),
    };
    // A constant equal to the first window's start (literal mapping must not confuse it).
    let first = windows[0].0;
    let constant = format!(
        "CASE WHEN {p}amount > 50 THEN TIMESTAMP '{}' ELSE TIMESTAMP '2000-01-01T00:00:00' END AS k",
        first.strftime("%Y-%m-%dT%H:%M:%S")
    );
    match r.below(if join { 1 } else { 4 }) {
        // Projection (or a join when `join`).
        0 => {
            let mut cols = vec![format!("{p}id"), format!("{p}amount"), format!("{p}cat")];
            if time != TimeCol::Date {
                cols.push(format!("{tt} AS t"));
                if r.chance(40) {
                    cols.push(format!(
                        "CASE WHEN {tt} >= $window_start_ts + INTERVAL '1 hour' THEN 'late' ELSE 'early' END AS phase"
                    ));
                }
            }
            if r.chance(30) {
                cols.push("$window_start_ts AS loaded_for".into());
            }
            if r.chance(30) {
                cols.push(constant);
            }
            cols.push(format!("{part} AS part"));
            if join {
                let kind = *r.pick(&["JOIN", "LEFT JOIN"]);
                cols.push("d.label".into());
                let sql = format!(
                    "SELECT {} FROM events e {kind} dims d ON e.cat = d.cat WHERE {filter}",
                    cols.join(", ")
                );
                return (sql, None);
            }
            let sql = format!("SELECT {} FROM events WHERE {filter}", cols.join(", "));
            let rec = r.chance(50).then(|| {
                (
                    format!(
                        "SELECT count(*) AS n, sum(amount) AS total FROM events WHERE {filter}"
                    ),
                    "SELECT count(*) AS n, sum(amount) AS total FROM output".to_string(),
                )
            });
            (sql, rec)
        }
        // Aggregate per category, stamped with the window.
        1 => {
            let sql = format!(
                "SELECT $window_start AS part, cat, count(*) AS n, sum(amount) AS total, min(id) AS first_id \
                 FROM events WHERE {filter} GROUP BY cat"
            );
            let rec = r.chance(50).then(|| {
                (
                    format!(
                        "SELECT count(*) AS rows, sum(amount) AS total FROM events WHERE {filter}"
                    ),
                    "SELECT coalesce(sum(n), 0) AS rows, sum(total) AS total FROM output"
                        .to_string(),
                )
            });
            (sql, rec)
        }
        // Window functions with a total order.
        2 => {
            let sql = format!(
                "SELECT id, cat, amount, {part} AS part, \
                 row_number() OVER (PARTITION BY cat ORDER BY id) AS rn, \
                 sum(amount) OVER (PARTITION BY cat ORDER BY id ROWS UNBOUNDED PRECEDING) AS running \
                 FROM events WHERE {filter}"
            );
            (sql, None)
        }
        // The window stamped as a column, a projection with arithmetic.
        _ => {
            let sql = format!(
                "SELECT id, amount * 2 AS doubled, upper(cat) AS cat, $window_start AS loaded_for, {part} AS part \
                 FROM events WHERE {filter}"
            );
            (sql, None)
        }
    }
}

/// Write the case's sources into `dir`; returns the `[sources.*]` sections.
async fn write_sources(case: &Case, dir: &Path) -> String {
    let mut sections = String::new();
    let events_uri = match case.format {
        Format::Parquet => {
            write_parquet(
                &dir.join("events.parquet"),
                std::slice::from_ref(&case.events),
            );
            "events.parquet".to_string()
        }
        Format::ParquetFiles => {
            let d = dir.join("events");
            std::fs::create_dir_all(&d).unwrap();
            let n = case.events.num_rows();
            let cut = [0, n / 3, n * 2 / 3, n];
            for i in 0..3 {
                let part = case.events.slice(cut[i], cut[i + 1] - cut[i]);
                write_parquet(&d.join(format!("part-{i}.parquet")), &[part]);
            }
            "events/".to_string()
        }
        Format::Zone { .. } => {
            write_zone(&case.events, &dir.join("events"));
            "events/".to_string()
        }
        Format::Csv => {
            let mut w = datafusion::arrow::csv::Writer::new(
                std::fs::File::create(dir.join("events.csv")).unwrap(),
            );
            w.write(&text_times(&case.events)).unwrap();
            "events.csv".to_string()
        }
        Format::Json => {
            let mut w = datafusion::arrow::json::LineDelimitedWriter::new(
                std::fs::File::create(dir.join("events.json")).unwrap(),
            );
            w.write(&text_times(&case.events)).unwrap();
            w.finish().unwrap();
            "events.json".to_string()
        }
        Format::Delta => {
            let path = dir.join("events_delta");
            std::fs::create_dir_all(&path).unwrap();
            let url = url::Url::from_directory_path(&path).unwrap();
            let t = deltalake::DeltaTableBuilder::from_url(url)
                .unwrap()
                .build()
                .unwrap();
            // Delta stores timestamps in microseconds.
            let b = &case.events;
            let i = b.schema().index_of("ts").unwrap();
            let mut cols = b.columns().to_vec();
            let mut fields: Vec<Field> = b
                .schema()
                .fields()
                .iter()
                .map(|f| f.as_ref().clone())
                .collect();
            if let DataType::Timestamp(TimeUnit::Nanosecond, tz) = cols[i].data_type().clone() {
                let to = DataType::Timestamp(TimeUnit::Microsecond, tz);
                cols[i] = datafusion::arrow::compute::cast(&cols[i], &to).unwrap();
                fields[i] = Field::new("ts", to, true);
            }
            let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).unwrap();
            t.write(vec![batch]).await.unwrap();
            "events_delta".to_string()
        }
    };
    let format = match case.format {
        Format::Parquet | Format::ParquetFiles | Format::Zone { .. } => "parquet",
        Format::Csv => "csv",
        Format::Json => "json",
        Format::Delta => "delta",
    };
    sections.push_str(&format!(
        "[sources.events]\nuri = \"{events_uri}\"\nformat = \"{format}\"\n"
    ));
    write_parquet(&dir.join("dims.parquet"), std::slice::from_ref(&case.dims));
    sections.push_str("[sources.dims]\nuri = \"dims.parquet\"\n");
    sections
}

/// `events` as a landing zone at `root` (see [`Format::Zone`]).
fn write_zone(events: &RecordBatch, root: &Path) {
    let i = events.schema().index_of("ts").unwrap();
    let secs: Vec<Option<i64>> = {
        let as_micros = datafusion::arrow::compute::cast(
            events.column(i),
            &DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        )
        .unwrap();
        let a = as_micros
            .as_any()
            .downcast_ref::<TimestampMicrosecondArray>()
            .unwrap();
        (0..a.len())
            .map(|k| a.is_valid(k).then(|| a.value(k).div_euclid(1_000_000)))
            .collect()
    };
    let date = |s: i64| {
        Timestamp::from_second(s)
            .unwrap()
            .to_zoned(TimeZone::UTC)
            .date()
    };
    let first = secs.iter().flatten().map(|s| date(*s)).min().unwrap();
    let mut days: std::collections::BTreeMap<jiff::civil::Date, Vec<u32>> = Default::default();
    for (k, s) in secs.iter().enumerate() {
        days.entry(s.map_or(first, date))
            .or_default()
            .push(k as u32);
    }
    for (d, rows) in days {
        let dir = root.join(format!("dt={d}"));
        std::fs::create_dir_all(&dir).unwrap();
        let idx = datafusion::arrow::array::UInt32Array::from(rows);
        let part = datafusion::arrow::compute::take_record_batch(events, &idx).unwrap();
        write_parquet(&dir.join("part-0.parquet"), &[part]);
        std::fs::write(dir.join("_SUCCESS"), b"").unwrap();
        std::fs::write(dir.join(".part-0.parquet.crc"), b"crc").unwrap();
    }
}

/// Text formats hold times and dates as text.
fn text_times(b: &RecordBatch) -> RecordBatch {
    let schema = b.schema();
    let i = schema.index_of("ts").unwrap();
    let col = b.column(i);
    let text: ArrayRef = match col.data_type() {
        DataType::Utf8 | DataType::Date32 => col.clone(),
        _ => {
            let micros = datafusion::arrow::compute::cast(
                col,
                &DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            )
            .unwrap();
            let a = micros
                .as_any()
                .downcast_ref::<TimestampMicrosecondArray>()
                .unwrap();
            Arc::new(StringArray::from(
                a.iter()
                    .map(|v| v.map(|us| Timestamp::from_microsecond(us).unwrap().to_string()))
                    .collect::<Vec<_>>(),
            ))
        }
    };
    let mut cols = b.columns().to_vec();
    cols[i] = text.clone();
    let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields[i] = Field::new("ts", text.data_type().clone(), true);
    RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).unwrap()
}

fn write_parquet(path: &Path, batches: &[RecordBatch]) {
    let f = std::fs::File::create(path).unwrap();
    let mut w = parquet::arrow::ArrowWriter::try_new(f, batches[0].schema(), None).unwrap();
    for b in batches {
        w.write(b).unwrap();
    }
    w.close().unwrap();
}

fn task_toml(case: &Case, sources: &str) -> String {
    let mut t = format!(
        "sql = \"\"\"\n{}\n\"\"\"\n[target]\npartition_by = \"part\"\n[window]\ngrain = \"{}\"\ntimezone = \"{}\"\n{sources}",
        case.sql,
        case.grain.name(),
        case.tz
    );
    if case.sql.contains(" OVER (") {
        // `id` is unique: the window functions' ORDER BY id is total. The determinism lint
        // cannot know that (its rule is about the columns the result carries; see
        // `task::lint::order`), so the case says it accepts the order.
        t.push_str("[lint]\nallow = [\"window_order\"]\n");
    }
    if let Some((source, output)) = &case.reconcile {
        t.push_str(&format!(
            "[reconcile]\nsource = \"\"\"{source}\"\"\"\noutput = \"\"\"{output}\"\"\"\n"
        ));
    }
    t
}

/// The oracle: the case's SQL per window in plain DataFusion, bound here.
async fn oracle(case: &Case, dir: &Path) -> std::result::Result<Vec<RecordBatch>, String> {
    let ctx = SessionContext::new();
    let p = |f: &str| dir.join(f).to_string_lossy().to_string();
    let e = |e: datafusion::error::DataFusionError| e.to_string();
    match case.format {
        Format::Parquet => ctx
            .register_parquet("events", p("events.parquet"), Default::default())
            .await
            .map_err(e)?,
        Format::ParquetFiles => ctx
            .register_parquet("events", p("events/"), Default::default())
            .await
            .map_err(e)?,
        Format::Zone { .. } => {
            let options = ParquetReadOptions::default()
                .table_partition_cols(vec![("dt".to_string(), DataType::Date32)]);
            ctx.register_parquet("events", p("events/"), options)
                .await
                .map_err(e)?
        }
        Format::Csv => ctx
            .register_csv("events", p("events.csv"), CsvReadOptions::new())
            .await
            .map_err(e)?,
        Format::Json => ctx
            .register_json("events", p("events.json"), JsonReadOptions::default())
            .await
            .map_err(e)?,
        Format::Delta => {
            let url = url::Url::from_directory_path(dir.join("events_delta")).unwrap();
            let mut t = deltalake::DeltaTableBuilder::from_url(url)
                .unwrap()
                .build()
                .unwrap();
            t.load().await.unwrap();
            t.update_datafusion_session(&ctx.state()).unwrap();
            ctx.register_table("events", t.table_provider().await.unwrap())
                .map_err(e)?;
        }
    }
    ctx.register_parquet("dims", p("dims.parquet"), Default::default())
        .await
        .map_err(e)?;
    let ts = |t: Timestamp| {
        ScalarValue::TimestampMicrosecond(Some(t.as_microsecond()), Some("UTC".into()))
    };
    let tz = TimeZone::get(case.tz).unwrap();
    let date = |t: Timestamp| {
        let d = t.to_zoned(tz.clone()).date();
        ScalarValue::Date32(Some(
            d.since(jiff::civil::date(1970, 1, 1)).unwrap().get_days(),
        ))
    };
    let mut out = Vec::new();
    for (start, end) in &case.windows {
        let (ws, we) = if case.grain == Grain::Hour {
            (ts(*start), ts(*end))
        } else {
            (date(*start), date(*end))
        };
        let df = ctx
            .sql(&case.sql)
            .await
            .map_err(e)?
            .with_param_values(vec![
                ("window_start", ws),
                ("window_end", we),
                ("window_start_ts", ts(*start)),
                ("window_end_ts", ts(*end)),
            ])
            .map_err(e)?;
        out.extend(df.collect().await.map_err(e)?);
    }
    Ok(out)
}

/// `batches` with every column cast to the type of the same-named field of `schema`.
fn cast_to(batches: &[RecordBatch], schema: &Schema) -> Vec<RecordBatch> {
    batches
        .iter()
        .map(|b| {
            let cols: Vec<ArrayRef> = schema
                .fields()
                .iter()
                .map(|f| {
                    let i = b.schema().index_of(f.name()).unwrap();
                    datafusion::arrow::compute::cast(b.column(i), f.data_type()).unwrap()
                })
                .collect();
            RecordBatch::try_new(Arc::new(schema.clone()), cols).unwrap()
        })
        .collect()
}

/// A table's rows (sorted multiset) and schema, read with delta-rs (not idemlake).
async fn table(dir: &Path) -> Option<(Vec<String>, Schema)> {
    let (_, ctx) = table_session(dir).await?;
    let df = ctx.sql("SELECT * FROM t").await.unwrap();
    let schema = df.schema().as_arrow().clone();
    Some((rows_of(&df.collect().await.unwrap()), schema))
}

/// The ways a case is run; each ends in a table that must equal the oracle.
const MODES: [&str; 7] = [
    "backfill --parallel 1",
    "backfill --parallel 4",
    "plain backfill",
    "single runs",
    "kill -9, then --missing",
    "two processes racing",
    "S3 behind a fault proxy, then --missing",
];

/// Every how many seeds the S3 fault mode runs (it is the slowest).
const S3_EVERY: u64 = 4;
/// S3 fault-mode cases run, and faults the proxies injected in them.
static S3_CASES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static S3_FAULTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A runtime of its own for fault proxies: it keeps forwarding while a worker thread blocks
/// waiting for an idemlake process.
fn proxy_runtime() -> &'static tokio::runtime::Runtime {
    static RT: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap()
    })
}

/// Start a fault proxy in front of the S3 test server (on [`proxy_runtime`]).
fn start_proxy(fault: crate::s3::Fault) -> crate::s3::Proxy {
    std::thread::spawn(move || proxy_runtime().block_on(crate::s3::proxy(fault)))
        .join()
        .unwrap()
}

/// The S3 mode: a backfill through a proxy that cuts uploads (or "dies" at the commit), then
/// `backfill --missing` straight to the server; the table must equal the oracle.
async fn s3_mode(
    case: &Case,
    p: &TestProject,
    range: &[&str],
) -> std::result::Result<(Vec<String>, Schema), String> {
    use crate::s3::{Fault, bucket, s3_env, store};
    let prefix = format!("torture-{}-{}", case.seed, uuid::Uuid::new_v4().simple());
    let lake = format!("s3://{}/{prefix}/lake", bucket());
    let fault = if case.seed.is_multiple_of(8) {
        Fault::DieAtCommit
    } else {
        Fault::CutParquetUploads
    };
    let px = start_proxy(fault);
    let out = p
        .cmd()
        .envs(s3_env())
        .env("AWS_ENDPOINT_URL", format!("http://{}", px.addr))
        .env("IDEMLAKE_S3_MAX_RETRIES", "1")
        .env("IDEMLAKE_S3_RETRY_TIMEOUT_SECS", "3")
        .args(["--lake", &lake, "backfill", "t", "--parallel", "2"])
        .args(range)
        .output()
        .unwrap();
    S3_CASES.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    S3_FAULTS.fetch_add(
        px.cuts.load(std::sync::atomic::Ordering::SeqCst) as u64,
        std::sync::atomic::Ordering::SeqCst,
    );
    if ![0, 1, 5].contains(&code(&out)) {
        return Err(format!(
            "backfill through the {fault:?} proxy: {}",
            text(&out)
        ));
    }
    let out = p
        .cmd()
        .envs(s3_env())
        .args(["--lake", &lake, "backfill", "t", "--missing"])
        .args(range)
        .output()
        .unwrap();
    if code(&out) != 0 {
        return Err(format!(
            "backfill --missing after the {fault:?} proxy: {}",
            text(&out)
        ));
    }
    let url = url::Url::parse(&format!("{lake}/t/")).unwrap();
    // idemlake's builder for the s3:// log store it registers; the store is the test's own.
    let mut t = idemlake::delta::table::builder_for(&url)
        .unwrap()
        .with_storage_backend(store(), url)
        .build()
        .unwrap();
    if t.load().await.is_err() {
        return Ok((Vec::new(), Schema::empty()));
    }
    let ctx = SessionContext::new();
    t.update_datafusion_session(&ctx.state()).unwrap();
    ctx.register_table("t", t.table_provider().await.unwrap())
        .unwrap();
    let df = ctx.sql("SELECT * FROM t").await.unwrap();
    let schema = df.schema().as_arrow().clone();
    Ok((rows_of(&df.collect().await.unwrap()), schema))
}

fn interval(w: &(Timestamp, Timestamp)) -> String {
    format!("{}/{}", w.0, w.1)
}

/// Run `case` in every mode; `Err` describes the first difference from the oracle.
async fn check(case: &Case, p: &TestProject) -> std::result::Result<bool, String> {
    let sources = write_sources(case, p.path()).await;
    p.task("t", &task_toml(case, &sources));
    let expected = match oracle(case, p.path()).await {
        Ok(b) => b,
        // SQL the oracle cannot run either (a type the grammar combined badly): idemlake must
        // refuse it as invalid input (exit 2).
        Err(e) => {
            let out = p.run(&["validate", "t"]);
            let code = code(&out);
            if code != 2 && code != 0 {
                return Err(format!("oracle failed ({e}); validate exited {code}"));
            }
            return Ok(false);
        }
    };
    let from = interval(&case.windows[0]);
    let to = interval(case.windows.last().unwrap());
    let range = ["--from", from.as_str(), "--to", to.as_str()];
    for (i, mode) in MODES.iter().enumerate() {
        if i == 6 {
            if !case.seed.is_multiple_of(S3_EVERY) {
                continue;
            }
            let (got, schema) = s3_mode(case, p, &range).await?;
            if got.is_empty() && expected.iter().all(|b| b.num_rows() == 0) {
                continue;
            }
            if schema.fields().is_empty() {
                return Err(format!("{mode}: no table, the oracle has rows"));
            }
            let want = rows_of(&cast_to(&expected, &schema));
            if got != want {
                return Err(format!(
                    "{mode}: {} rows, the oracle has {}",
                    got.len(),
                    want.len()
                ));
            }
            continue;
        }
        let lake = p.path().join(format!("lake{i}"));
        let lake_arg = lake.to_string_lossy().to_string();
        let base = |plain: bool| {
            let mut c = p.cmd();
            c.arg("--lake").arg(&lake_arg);
            if plain {
                c.env("IDEMLAKE_ACCELERATE", "0");
            }
            c
        };
        let ok = |out: &std::process::Output, what: &str| {
            if code(out) == 0 {
                Ok(())
            } else {
                Err(format!(
                    "{mode}: {what} exited {}:\n{}",
                    code(out),
                    text(out)
                ))
            }
        };
        match i {
            0..=2 => {
                let parallel = ["1", "4", "2"][i];
                let out = base(i == 2)
                    .args(["backfill", "t", "--parallel", parallel])
                    .args(range)
                    .output()
                    .unwrap();
                ok(&out, "backfill")?;
            }
            3 => {
                for w in &case.windows {
                    let out = base(false)
                        .args(["run", "t", "--window", &interval(w)])
                        .output()
                        .unwrap();
                    ok(&out, "run")?;
                }
            }
            4 => {
                let args = [&["backfill", "t", "--parallel", "2"], &range[..]].concat();
                let mut child = p.spawn(&lake, &args);
                let delay = case.seed % 400;
                std::thread::sleep(Duration::from_millis(delay));
                let _ = child.kill();
                let _ = child.wait();
                let out = base(false)
                    .args(["backfill", "t", "--missing"])
                    .args(range)
                    .output()
                    .unwrap();
                ok(&out, "backfill --missing after kill -9")?;
            }
            _ => {
                let args = [&["backfill", "t"], &range[..]].concat();
                let spawn = || p.spawn(&lake, &args);
                let (a, b) = (spawn(), spawn());
                for child in [a, b] {
                    let out = child.wait_with_output().unwrap();
                    ok(&out, "racing backfill")?;
                }
            }
        }
        let table_dir = lake.join("t");
        let Some((got, schema)) = table(&table_dir).await else {
            if expected.iter().all(|b| b.num_rows() == 0) {
                continue;
            }
            return Err(format!("{mode}: no table, the oracle has rows"));
        };
        let want = rows_of(&cast_to(&expected, &schema));
        if got != want {
            let only_got: Vec<_> = got.iter().filter(|r| !want.contains(r)).take(3).collect();
            let only_want: Vec<_> = want.iter().filter(|r| !got.contains(r)).take(3).collect();
            return Err(format!(
                "{mode}: {} rows, the oracle has {}; only in the table: {only_got:?}; only in the oracle: {only_want:?}",
                got.len(),
                want.len()
            ));
        }
    }
    Ok(true)
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// Run one seed; panics with the case and the difference.
async fn run_seed(seed: u64) -> bool {
    let case = generate(seed);
    let p = TestProject::new();
    match check(&case, &p).await {
        Ok(ran) => ran,
        Err(e) => panic!(
            "torture seed {seed} differs from the oracle: {e}\n  grain={} tz={} time={:?} format={:?}\n  sql: {}\n  reconcile: {:?}\n  replay: IDEMLAKE_TORTURE_SEED={seed} IDEMLAKE_TORTURE_CASES=1 cargo test --test it torture::generated",
            case.grain.name(),
            case.tz,
            case.time,
            case.format,
            case.sql,
            case.reconcile
        ),
    }
}

#[test]
fn generated_cases_equal_the_oracle_in_every_mode() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let first = env_u64("IDEMLAKE_TORTURE_SEED").unwrap_or(14_000);
    let cases = env_u64("IDEMLAKE_TORTURE_CASES");
    let budget = Duration::from_secs(env_u64("IDEMLAKE_TORTURE_SECS").unwrap_or(300));
    let jobs = env_u64("IDEMLAKE_TORTURE_JOBS").unwrap_or(2).max(1);
    let started = Instant::now();
    let next = Arc::new(AtomicU64::new(first));
    let (ran, refused) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let failed = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..jobs)
        .map(|_| {
            let (next, ran, refused, failed) =
                (next.clone(), ran.clone(), refused.clone(), failed.clone());
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                loop {
                    if failed.load(Ordering::SeqCst) {
                        break;
                    }
                    let seed = next.fetch_add(1, Ordering::SeqCst);
                    match cases {
                        Some(n) if seed - first >= n => break,
                        None if started.elapsed() >= budget => break,
                        _ => {}
                    }
                    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        rt.block_on(run_seed(seed))
                    }));
                    match outcome {
                        Ok(true) => {
                            let done = ran.fetch_add(1, Ordering::SeqCst) + 1;
                            if done % 100 == 0 {
                                eprintln!(
                                    "torture: {done} cases equal to the oracle so far, {:.0} s",
                                    started.elapsed().as_secs_f64()
                                );
                            }
                            done
                        }
                        Ok(false) => refused.fetch_add(1, Ordering::SeqCst),
                        Err(panic) => {
                            failed.store(true, Ordering::SeqCst);
                            std::panic::resume_unwind(panic);
                        }
                    };
                }
            })
        })
        .collect();
    let mut panics = Vec::new();
    for w in workers {
        if let Err(p) = w.join() {
            panics.push(p);
        }
    }
    if let Some(p) = panics.pop() {
        std::panic::resume_unwind(p);
    }
    let (ran, refused) = (ran.load(Ordering::SeqCst), refused.load(Ordering::SeqCst));
    eprintln!(
        "torture: {ran} cases equal to the oracle in all {} modes ({} of them also on S3 behind a fault proxy, {} faults injected), {refused} refused as invalid by both, from seed {first}, {jobs} at a time, {:.0} s",
        MODES.len(),
        S3_CASES.load(Ordering::SeqCst),
        S3_FAULTS.load(Ordering::SeqCst),
        started.elapsed().as_secs_f64()
    );
    assert!(ran > 0, "no generated case ran");
    assert!(
        refused * 4 <= ran + refused,
        "the grammar makes too many invalid cases: {refused} of {}",
        ran + refused
    );
}

#[test]
fn the_generator_is_deterministic_and_covers_its_grammar() {
    let a = generate(7);
    let b = generate(7);
    assert_eq!(a.sql, b.sql);
    assert_eq!(a.windows, b.windows);
    let mut grains = std::collections::HashSet::new();
    let mut zones = std::collections::HashSet::new();
    let mut formats = std::collections::HashSet::new();
    for seed in 0..400 {
        let c = generate(seed);
        grains.insert(c.grain.name());
        zones.insert(c.tz);
        formats.insert(format!("{:?}", c.format));
        assert!(c.windows.windows(2).all(|w| w[0].1 == w[1].0), "{seed}");
    }
    assert_eq!(grains.len(), 4);
    assert_eq!(zones.len(), 4);
    // Five formats, the landing zone with its `dt` filter first and last.
    assert_eq!(formats.len(), 7, "{formats:?}");
}
