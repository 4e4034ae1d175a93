#!/usr/bin/env python3
"""`make bench-landing`: idemlake against polars and DuckDB on a landing zone (issue 35).

A landing zone: LANDING_DAYS days x LANDING_FILES files a day x LANDING_ROWS events a file
(`events/dt=YYYY-MM-DD/part-NNNNN.parquet`, `ts` inside the file's day). The task filters on
the partition column and on `ts`:

    SELECT CAST(ts AS DATE) AS day, ts, id, v FROM events
    WHERE dt >= $window_start AND dt < $window_end AND ts >= $window_start_ts AND ts < $window_end_ts

Scenarios, tools alternating rep by rep (A B C A B C ...), medians reported:
  load    the initial load: idemlake `backfill --parallel N` of every day vs polars
          (scan_parquet(hive_partitioning=True) + one write_deltalake of everything) and DuckDB
          (read_parquet(..., hive_partitioning = true) + one write_deltalake)
  day     one day window on the loaded table: `idemlake run` vs polars and DuckDB pruning by
          `dt`, each overwriting the day of its own table (write_deltalake predicate)
  range   a LANDING_RANGE-day backfill vs the peers' one-process overwrite of the range
Every table is compared with polars over the source, day by day, after each scenario.
With LANDING_S3=1 the source and the tables are on the local S3 server (scripts/s3-server
start first; LANDING_S3_LATENCY_MS > 0 puts scripts/latency-proxy in front), and the report
gives the object-store requests of one idemlake day window (its -v summary).

Knobs: BENCH_BIN, LANDING_DAYS [730], LANDING_FILES [24], LANDING_ROWS [100], LANDING_REPS [5],
LANDING_RANGE [30], LANDING_PARALLEL [4], LANDING_WORK [/tmp/idemlake-landing], LANDING_OUT
[bench/LANDING.md, appended], LANDING_SCENARIOS [load,day,range], LANDING_S3 [0].
Runs with the project's .venv-py (polars, deltalake, duckdb: scripts/py-env).
"""
import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import write_deltalake

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("BENCH_BIN", os.path.join(REPO, "target/release/idemlake"))
DAYS = int(os.environ.get("LANDING_DAYS", "730"))
FILES = int(os.environ.get("LANDING_FILES", "24"))
ROWS = int(os.environ.get("LANDING_ROWS", "100"))
REPS = int(os.environ.get("LANDING_REPS", "5"))
RANGE = int(os.environ.get("LANDING_RANGE", "30"))
PARALLEL = os.environ.get("LANDING_PARALLEL", "4")
WORK = os.environ.get("LANDING_WORK", "/tmp/idemlake-landing")
OUT = os.environ.get("LANDING_OUT", os.path.join(REPO, "bench/LANDING.md"))
SCENARIOS = os.environ.get("LANDING_SCENARIOS", "load,day,range").split(",")
FIRST = dt.date(2024, 1, 1)

TASK = '''
sql = """
SELECT CAST(ts AS DATE) AS day, ts, id, v FROM events
WHERE dt >= $window_start AND dt < $window_end
  AND ts >= $window_start_ts AND ts < $window_end_ts
"""
[target]
partition_by = "day"
[window]
grain = "day"
timezone = "UTC"
[sources.events]
uri = "{uri}"
format = "parquet"
[write]
mode = "overwrite"
'''


def day(n: int) -> dt.date:
    return FIRST + dt.timedelta(days=n)


def zone_dir() -> str:
    return os.path.join(WORK, f"zone-{DAYS}x{FILES}x{ROWS}")


def generate() -> str:
    root = zone_dir()
    stamp = os.path.join(root, "_complete")
    if os.path.exists(stamp):
        return root
    shutil.rmtree(root, ignore_errors=True)
    t0 = time.time()
    for d in range(DAYS):
        base = dt.datetime.combine(day(d), dt.time(), tzinfo=dt.timezone.utc)
        ddir = os.path.join(root, f"dt={day(d)}")
        os.makedirs(ddir)
        start = int(base.timestamp()) * 1_000_000
        step = 86_400_000_000 // (FILES * ROWS)
        for f in range(FILES):
            k = range(ROWS)
            table = pa.table({
                "ts": pa.array([start + (f * ROWS + i) * step for i in k], pa.timestamp("us", tz="UTC")),
                "id": pa.array([d * 1_000_000 + f * 1000 + i for i in k], pa.int64()),
                "v": pa.array([(i * 7 + f + d) % 1000 for i in k], pa.int64()),
            })
            pq.write_table(table, os.path.join(ddir, f"part-{f:05d}.parquet"))
    open(stamp, "w").close()
    print(f"landing zone: {DAYS * FILES} files generated in {time.time() - t0:.0f} s", file=sys.stderr)
    return root


def timed(cmd, env=None) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    el = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout}\n{r.stderr}")
    return el


PEER = r'''
import sys, datetime as dt, polars as pl, duckdb
from deltalake import write_deltalake
tool, src, table, lo, hi, mode = sys.argv[1:]
lo, hi = dt.date.fromisoformat(lo), dt.date.fromisoformat(hi)
if tool == "polars":
    q = pl.scan_parquet(f"{src}/**/*.parquet", hive_partitioning=True)
    if mode != "load":
        q = q.filter((pl.col("dt") >= lo) & (pl.col("dt") <= hi))
    df = q.with_columns(pl.col("ts").dt.date().alias("day")).select("day", "ts", "id", "v").collect()
    arrow = df.to_arrow()
else:
    con = duckdb.connect()
    where = "" if mode == "load" else f"WHERE dt BETWEEN DATE '{lo}' AND DATE '{hi}'"
    arrow = con.execute(f"SELECT CAST(ts AS DATE) AS day, ts, id, v FROM read_parquet('{src}/*/*.parquet', hive_partitioning = true) {where}").arrow()
if mode == "load":
    write_deltalake(table, arrow, mode="overwrite", partition_by=["day"])
else:
    write_deltalake(table, arrow, mode="overwrite", partition_by=["day"],
                    predicate=f"day >= '{lo}' AND day <= '{hi}'")
'''


def peer(tool: str, src: str, table: str, lo: dt.date, hi: dt.date, mode: str):
    return [sys.executable, "-c", PEER, tool, src, table, str(lo), str(hi), mode]


def idem(project: str, lake: str, *args):
    return [BIN, "--project", project, "--lake", lake, *args]


def check(src: str, table: str, lo: dt.date, hi: dt.date):
    s = (pl.scan_parquet(f"{src}/**/*.parquet", hive_partitioning=True)
         .with_columns(pl.col("ts").dt.date().alias("d"))
         .filter((pl.col("d") >= lo) & (pl.col("d") <= hi))
         .group_by("d").agg(pl.len(), pl.col("v").sum()).sort("d").collect())
    t = (pl.read_delta(table).filter((pl.col("day") >= lo) & (pl.col("day") <= hi))
         .group_by("day").agg(pl.len(), pl.col("v").sum()).sort("day"))
    if s.rows() != t.rows():
        raise SystemExit(f"{table}: differs from polars over the source for {lo}..{hi}")


def requests_of_day(project: str, lake: str, d: dt.date) -> str:
    r = subprocess.run(idem(project, lake, "-v", "run", "events", "--window", str(d)),
                       capture_output=True, text=True)
    for line in (r.stderr + r.stdout).splitlines():
        if "storage requests" in line:
            return line.split("storage requests", 1)[1].strip(": ")
    return "(no summary)"


def main() -> int:
    os.makedirs(WORK, exist_ok=True)
    src = generate()
    project = os.path.join(WORK, "project")
    shutil.rmtree(project, ignore_errors=True)
    os.makedirs(os.path.join(project, "tables"))
    with open(os.path.join(project, "tables/events.toml"), "w") as f:
        f.write(TASK.format(uri=src))
    lakes = {t: os.path.join(WORK, f"lake-{t}") for t in ("idemlake", "polars", "duckdb")}
    tables = {"idemlake": os.path.join(lakes["idemlake"], "events"),
              "polars": os.path.join(lakes["polars"], "events"),
              "duckdb": os.path.join(lakes["duckdb"], "events")}
    results = []
    last = day(DAYS - 1)
    if "load" in SCENARIOS or not os.path.exists(tables["idemlake"]):
        times = {t: [] for t in tables}
        reps = REPS if "load" in SCENARIOS else 1
        for _ in range(max(1, min(reps, 3))):
            for t in tables:
                shutil.rmtree(lakes[t], ignore_errors=True)
                cmd = (idem(project, lakes[t], "backfill", "events", "--from", str(day(0)), "--to",
                            str(last), "--parallel", PARALLEL) if t == "idemlake"
                       else peer(t, src, tables[t], day(0), last, "load"))
                times[t].append(timed(cmd))
        for t in tables:
            check(src, tables[t], day(0), last)
        results.append(("initial load", times))
    mid = day(DAYS // 2)
    if "day" in SCENARIOS:
        times = {t: [] for t in tables}
        for _ in range(REPS + 1):
            for t in tables:
                cmd = (idem(project, lakes[t], "run", "events", "--window", str(mid)) if t == "idemlake"
                       else peer(t, src, tables[t], mid, mid, "day"))
                times[t].append(timed(cmd))
        for t in tables:
            times[t] = times[t][1:]  # the first round warms the page cache
            check(src, tables[t], mid, mid)
        results.append((f"day window ({mid})", times))
    if "range" in SCENARIOS:
        lo, hi = day(DAYS // 3), day(DAYS // 3 + RANGE - 1)
        times = {t: [] for t in tables}
        for _ in range(max(1, REPS // 2)):
            for t in tables:
                cmd = (idem(project, lakes[t], "backfill", "events", "--from", str(lo), "--to", str(hi),
                            "--parallel", PARALLEL) if t == "idemlake"
                       else peer(t, src, tables[t], lo, hi, "range"))
                times[t].append(timed(cmd))
        for t in tables:
            check(src, tables[t], lo, hi)
        results.append((f"{RANGE}-day backfill", times))
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    rev = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip()
    lines = [f"\n## Landing zone {DAYS} days x {FILES} files x {ROWS} rows ({DAYS * FILES} files), "
             f"{stamp}, {rev}\n",
             "| scenario | idemlake | polars | DuckDB | idemlake / polars | idemlake / DuckDB |",
             "|---|---|---|---|---|---|"]
    for name, times in results:
        med = {t: statistics.median(v) for t, v in times.items()}
        lines.append(f"| {name} (median of {len(times['idemlake'])}) | {med['idemlake']:.2f} s | "
                     f"{med['polars']:.2f} s | {med['duckdb']:.2f} s | "
                     f"{med['idemlake'] / med['polars']:.2f}x | {med['idemlake'] / med['duckdb']:.2f}x |")
    lines.append("\nEvery table matched polars over the source, day by day.")
    text = "\n".join(lines) + "\n"
    print(text)
    with open(OUT, "a") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
