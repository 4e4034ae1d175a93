#!/usr/bin/env python3
"""`make bench-landing`: idemlake against polars and DuckDB on a landing zone (issue 35).

A landing zone: LANDING_DAYS days x LANDING_FILES files a day x LANDING_ROWS events a file
(`events/dt=YYYY-MM-DD/part-NNNNN.parquet`, `ts` inside the file's day). The task filters on
the partition column and on `ts`:

    SELECT CAST(ts AS DATE) AS day, ts, id, v FROM events
    WHERE dt >= $window_start AND dt < $window_end AND ts >= $window_start_ts AND ts < $window_end_ts

Scenarios, tools alternating rep by rep (A B C A B C ...), medians reported:
  first   the nightly first run of a day window D (the middle day): D never run in the table,
          nothing reusable from an earlier run. Untimed setup: for each task form below a table
          of every day but D (`idemlake backfill --parallel N` of the days before D and of those
          after it), and a polars table of the same days (scan_parquet(hive_partitioning=True),
          one write_deltalake). Each rep (untimed) copies each table to a fresh directory
          (`.parquet` data files hard-linked, `_delta_log/`, `_idemlake/` and every other file
          copied; os.sync()); timed: `idemlake run events --window D` (the whole process) against
          polars doing what a user writes for one day: scan_parquet(hive_partitioning=True)
          filtered on `dt` and on `ts` inside the day, then write_deltalake(predicate "day = 'D'")
          on its own fresh copy. Three task forms, a row each: the guide's task (dt first); the
          same conjuncts ts first; the guide's time-zone form (`dt` widened by a day on each side,
          `timezone = "Asia/Kolkata"`, a half-hour offset, `day` the Kolkata date), whose peer
          reads the same three directories and keeps the Kolkata day. idemlake and polars only
          (no DuckDB); local disk only (skipped with LANDING_S3=1, whose report gives a first
          run's requests). After the reps both copies' day D, and idemlake's whole table, are
          compared with polars over the source.
  load    the initial load: idemlake `backfill --parallel N` of every day vs polars
          (scan_parquet(hive_partitioning=True) + one write_deltalake of everything) and DuckDB
          (read_parquet(..., hive_partitioning = true) + one write_deltalake)
  day     re-runs (retries) of one day window on the loaded table: `idemlake run` vs polars and
          DuckDB pruning by `dt`, each overwriting the day of its own table (write_deltalake
          predicate)
  range   a LANDING_RANGE-day backfill vs the peers' one-process overwrite of the range
Every table is compared with polars over the source, day by day, after each scenario.
With LANDING_S3=1 the source and the tables are on the local S3 server (scripts/s3-server
start first; LANDING_S3_LATENCY_MS > 0 puts scripts/latency-proxy in front), and the report
gives the object-store requests (the -v summary) of an idemlake day window: first of its first
run (a lake loaded with every other day, the window never run in it: the nightly case), then
of re-runs of it, labelled as retries. DuckDB reads S3 through its httpfs extension, loaded
from the duckdb-ext-httpfs wheel (scripts/py-env).

The issue's zone six times larger (105,120 files, same 24 files a day) is LANDING_DAYS=4380.

Knobs: BENCH_BIN, LANDING_DAYS [730], LANDING_FILES [24], LANDING_ROWS [100], LANDING_REPS [5],
LANDING_RANGE [30], LANDING_PARALLEL [4], LANDING_WORK [/tmp/idemlake-landing], LANDING_OUT
[bench/LANDING.md, appended], LANDING_SCENARIOS [first,load,day,range], LANDING_S3 [0] (LANDING_DAYS
defaults to 90 there), LANDING_S3_LATENCY_MS [0].
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

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import write_deltalake

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("BENCH_BIN", os.path.join(REPO, "target/release/idemlake"))
ON_S3 = os.environ.get("LANDING_S3", "0") == "1"
LATENCY_MS = int(os.environ.get("LANDING_S3_LATENCY_MS", "0"))
DAYS = int(os.environ.get("LANDING_DAYS", "90" if ON_S3 else "730"))
FILES = int(os.environ.get("LANDING_FILES", "24"))
ROWS = int(os.environ.get("LANDING_ROWS", "100"))
REPS = int(os.environ.get("LANDING_REPS", "5"))
RANGE = int(os.environ.get("LANDING_RANGE", "30"))
PARALLEL = os.environ.get("LANDING_PARALLEL", "4")
WORK = os.environ.get("LANDING_WORK", "/tmp/idemlake-landing")
OUT = os.environ.get("LANDING_OUT", os.path.join(REPO, "bench/LANDING.md"))
SCENARIOS = os.environ.get("LANDING_SCENARIOS", "first,load,day,range").split(",")
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

# The `first` scenario's task forms: (row label, day expression, WHERE clause, window zone).
KOLKATA = "Asia/Kolkata"
FIRST_FORMS = (
    ("dt first (the guide's task)", "CAST(ts AS DATE)",
     "dt >= $window_start AND dt < $window_end\n  AND ts >= $window_start_ts AND ts < $window_end_ts",
     "UTC"),
    ("ts first (the same conjuncts)", "CAST(ts AS DATE)",
     "ts >= $window_start_ts AND ts < $window_end_ts\n  AND dt >= $window_start AND dt < $window_end",
     "UTC"),
    (f"dt widened by a day each side, timezone {KOLKATA} (peer: the same three directories, "
     "the Kolkata day)", f"CAST(ts AT TIME ZONE '{KOLKATA}' AS DATE)",
     "dt >= CAST($window_start AS DATE) - INTERVAL '1' DAY\n"
     "  AND dt <  CAST($window_end AS DATE) + INTERVAL '1' DAY\n"
     "  AND ts >= $window_start_ts AND ts < $window_end_ts",
     KOLKATA),
)

FIRST_TASK = '''
sql = """
SELECT {day} AS day, ts, id, v FROM events
WHERE {where}
"""
[target]
partition_by = "day"
[window]
grain = "day"
timezone = "{tz}"
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


def s3_env() -> dict:
    """The local S3 server's settings (`scripts/s3-server env`), for every tool of the run."""
    out = subprocess.run([os.path.join(REPO, "scripts/s3-server"), "env"], capture_output=True,
                         text=True, check=True).stdout
    env = {}
    for line in out.splitlines():
        if line.startswith("export "):
            k, v = line[len("export "):].split("=", 1)
            env[k] = v.strip("'")
    return env


class Local:
    """Source and tables on local disk."""
    tools = ("idemlake", "polars", "duckdb")
    env = None

    def __init__(self, src: str):
        self.src = src

    def table(self, tool: str) -> str:
        return os.path.join(WORK, f"lake-{tool}", "events")

    def lake(self, tool: str) -> str:
        return os.path.join(WORK, f"lake-{tool}")

    def remove(self, tool: str):
        shutil.rmtree(self.lake(tool), ignore_errors=True)

    def exists(self, tool: str) -> bool:
        return os.path.exists(self.table(tool))

    def options(self):
        return None


class S3:
    """Source and tables on the local S3 server (optionally behind the latency proxy)."""
    tools = ("idemlake", "polars", "duckdb")

    def __init__(self, local_src: str):
        import pyarrow.fs as pafs
        self.base = s3_env()
        self.bucket = self.base["IDEMLAKE_S3_BUCKET"]
        self.fs = pafs.S3FileSystem(access_key=self.base["AWS_ACCESS_KEY_ID"],
                                    secret_key=self.base["AWS_SECRET_ACCESS_KEY"],
                                    endpoint_override=self.base["AWS_ENDPOINT_URL"],
                                    region=self.base["AWS_REGION"], scheme="http")
        key = f"{self.bucket}/landing/{os.path.basename(local_src)}"
        if self.fs.get_file_info(f"{key}/_complete").type == pafs.FileType.NotFound:
            t0 = time.time()
            self.fs.delete_dir_contents(key, missing_dir_ok=True)
            pafs.copy_files(local_src, key, destination_filesystem=self.fs, use_threads=True)
            print(f"landing zone uploaded to s3://{key} in {time.time() - t0:.0f} s", file=sys.stderr)
        self.src = f"s3://{key}"
        self.env = {**os.environ, **self.base}
        self.proxy = None
        if LATENCY_MS > 0:
            import socket
            with socket.socket() as so:
                so.bind(("127.0.0.1", 0))
                port = so.getsockname()[1]
            upstream = self.base["AWS_ENDPOINT_URL"].split("://", 1)[1].rstrip("/")
            self.proxy = subprocess.Popen([sys.executable, os.path.join(REPO, "scripts/latency-proxy"),
                                           str(port), upstream, str(LATENCY_MS)],
                                          stdout=subprocess.PIPE, text=True)
            self.proxy.stdout.readline()  # "listening on ..."
            self.env["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{port}"

    def lake(self, tool: str) -> str:
        return f"s3://{self.bucket}/landing-bench/lake-{tool}"

    def table(self, tool: str) -> str:
        return f"{self.lake(tool)}/events"

    def remove(self, tool: str):
        self.fs.delete_dir_contents(self.lake(tool)[len("s3://"):], missing_dir_ok=True)

    def exists(self, tool: str) -> bool:
        import pyarrow.fs as pafs
        return self.fs.get_file_info(self.table(tool)[len("s3://"):] + "/_delta_log").type != pafs.FileType.NotFound

    def options(self):
        e = self.env
        return {"aws_endpoint_url": e["AWS_ENDPOINT_URL"], "aws_access_key_id": e["AWS_ACCESS_KEY_ID"],
                "aws_secret_access_key": e["AWS_SECRET_ACCESS_KEY"], "aws_region": e["AWS_REGION"],
                "aws_allow_http": "true", "aws_conditional_put": "etag"}

    def close(self):
        if self.proxy is not None:
            self.proxy.terminate()
            self.proxy.wait()


def timed(cmd, env=None) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    el = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout}\n{r.stderr}")
    return el


PEER = r'''
import sys, json, datetime as dt, polars as pl
from deltalake import write_deltalake
tool, src, table, lo, hi, mode, opts = sys.argv[1:]
opts = json.loads(opts)
lo, hi = dt.date.fromisoformat(lo), dt.date.fromisoformat(hi)
if tool == "polars":
    q = pl.scan_parquet(f"{src}/**/*.parquet", hive_partitioning=True, storage_options=opts)
    if mode != "load":
        q = q.filter((pl.col("dt") >= lo) & (pl.col("dt") <= hi))
    df = q.with_columns(pl.col("ts").dt.date().alias("day")).select("day", "ts", "id", "v").collect()
    arrow = df.to_arrow()
else:
    import duckdb, glob, os, sysconfig
    con = duckdb.connect()
    if src.startswith("s3://"):
        # httpfs from the duckdb-ext-httpfs wheel (scripts/py-env), loaded by path: no
        # download at run time; the S3 settings from the same AWS_* environment as the others.
        ext = glob.glob(os.path.join(sysconfig.get_paths()["purelib"], "duckdb_ext", "extensions",
                                     "v" + duckdb.__version__, "*", "httpfs.duckdb_extension"))[0]
        con.execute(f"LOAD '{ext}'")
        e = os.environ
        scheme, endpoint = e["AWS_ENDPOINT_URL"].rstrip("/").split("://", 1)
        con.execute(f"CREATE SECRET s3 (TYPE s3, KEY_ID '{e['AWS_ACCESS_KEY_ID']}', "
                    f"SECRET '{e['AWS_SECRET_ACCESS_KEY']}', ENDPOINT '{endpoint}', URL_STYLE 'path', "
                    f"USE_SSL {'true' if scheme == 'https' else 'false'}, REGION '{e['AWS_REGION']}')")
    where = "" if mode == "load" else f"WHERE dt BETWEEN DATE '{lo}' AND DATE '{hi}'"
    arrow = con.execute(f"SELECT CAST(ts AS DATE) AS day, ts, id, v FROM read_parquet('{src}/*/*.parquet', hive_partitioning = true) {where}").arrow()
if mode == "load":
    write_deltalake(table, arrow, mode="overwrite", partition_by=["day"], storage_options=opts)
else:
    write_deltalake(table, arrow, mode="overwrite", partition_by=["day"],
                    predicate=f"day >= '{lo}' AND day <= '{hi}'", storage_options=opts)
'''

# The first run's polars peer. "base": the table of every day in FIRST..LAST but `d`, one
# write_deltalake. "first": what a user writes for day `d`: the zone filtered on `dt` (the day's
# directory; with a zone other than UTC the day's directory and its two neighbours, as the task's
# widened filter) and on `ts` inside the local day, written over the day of the table.
PEER_FIRST = r'''
import sys, datetime as dt, polars as pl
from zoneinfo import ZoneInfo
from deltalake import write_deltalake
src, table, d, tz, first, last, mode = sys.argv[1:]
d, first, last = (dt.date.fromisoformat(x) for x in (d, first, last))
q = pl.scan_parquet(f"{src}/**/*.parquet", hive_partitioning=True)
local = pl.col("ts") if tz == "UTC" else pl.col("ts").dt.convert_time_zone(tz)
if mode == "base":
    df = (q.with_columns(local.dt.date().alias("day"))
          .filter((pl.col("day") != d) & (pl.col("day") >= first) & (pl.col("day") <= last))
          .select("day", "ts", "id", "v").collect())
    write_deltalake(table, df, mode="overwrite", partition_by=["day"])
else:
    one = dt.timedelta(days=1)
    lo = dt.datetime.combine(d, dt.time(), tzinfo=ZoneInfo(tz)).astimezone(dt.timezone.utc)
    hi = dt.datetime.combine(d + one, dt.time(), tzinfo=ZoneInfo(tz)).astimezone(dt.timezone.utc)
    q = q.filter(pl.col("dt") == d) if tz == "UTC" else q.filter(pl.col("dt").is_between(d - one, d + one))
    df = (q.filter((pl.col("ts") >= lo) & (pl.col("ts") < hi))
          .with_columns(local.dt.date().alias("day")).select("day", "ts", "id", "v").collect())
    write_deltalake(table, df, mode="overwrite", partition_by=["day"], predicate=f"day = '{d}'")
'''


def peer_first(src: str, table: str, d: dt.date, tz: str, mode: str):
    return [sys.executable, "-c", PEER_FIRST, src, table, str(d), tz, str(day(0)), str(day(DAYS - 1)), mode]


def fresh_copy(src: str, dst: str):
    """`src` (a lake or a table directory) copied to a fresh `dst`: the `.parquet` data files
    hard-linked (never rewritten in place), everything else copied, `_delta_log/` and
    `_idemlake/` included; then os.sync()."""
    shutil.rmtree(dst, ignore_errors=True)
    for root, _, files in os.walk(src):
        rel = os.path.relpath(root, src)
        meta = any(part.startswith("_") for part in rel.split(os.sep))
        os.makedirs(os.path.join(dst, rel), exist_ok=True)
        for f in files:
            a, b = os.path.join(root, f), os.path.join(dst, rel, f)
            if f.endswith(".parquet") and not meta:
                os.link(a, b)
            else:
                shutil.copy2(a, b)
    os.sync()


def peer(store, tool: str, lo: dt.date, hi: dt.date, mode: str):
    return [sys.executable, "-c", PEER, tool, store.src, store.table(tool), str(lo), str(hi), mode,
            json.dumps(store.options())]


def idem(project: str, lake: str, *args):
    return [BIN, "--project", project, "--lake", lake, *args]


def check(store, tool: str, lo: dt.date, hi: dt.date, table: str = None, tz: str = "UTC"):
    """`tool`'s table (or the table at `table`) against polars over the source, day by day
    (`day` the date of `ts` in `tz`) from `lo` to `hi`."""
    opts = store.options()
    table = table or store.table(tool)
    local = pl.col("ts") if tz == "UTC" else pl.col("ts").dt.convert_time_zone(tz)
    s = (pl.scan_parquet(f"{store.src}/**/*.parquet", hive_partitioning=True, storage_options=opts)
         .with_columns(local.dt.date().alias("d"))
         .filter((pl.col("d") >= lo) & (pl.col("d") <= hi))
         .group_by("d").agg(pl.len(), pl.col("v").sum()).sort("d").collect())
    t = (pl.read_delta(table, storage_options=opts)
         .filter((pl.col("day") >= lo) & (pl.col("day") <= hi))
         .group_by("day").agg(pl.len(), pl.col("v").sum()).sort("day"))
    if s.rows() != t.rows():
        raise SystemExit(f"{table}: differs from polars over the source for {lo}..{hi}")


def requests_of_day(store, project: str, d: dt.date) -> str:
    """The -v request summaries of day `d`: first of a first run (a lake of its own, loaded with
    every other day, `d` never run in it: what a nightly run pays), then of ten re-runs of it in
    a row, retries (ten runs cover the table's checkpoint interval, so one of them writes a
    checkpoint and the log read after it grows from none to nine commits)."""
    lake = store.lake("idemlake-first")
    store.remove("idemlake-first")
    first, last = day(0), day(DAYS - 1)
    for lo, hi in ((first, d - dt.timedelta(days=1)), (d + dt.timedelta(days=1), last)):
        if lo <= hi:
            cmd = idem(project, lake, "backfill", "events", "--from", str(lo), "--to", str(hi), "--parallel", PARALLEL)
            r = subprocess.run(cmd, capture_output=True, text=True, env=store.env)
            if r.returncode != 0:
                raise SystemExit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr}")

    def one():
        r = subprocess.run(idem(project, lake, "-v", "run", "events", "--window", str(d)),
                           capture_output=True, text=True, env=store.env)
        found = [line.split("storage requests: ", 1)[1] for line in (r.stderr + r.stdout).splitlines()
                 if "storage requests: " in line]
        if r.returncode != 0 or not found:
            raise SystemExit(f"the -v day window failed or printed no request summary:\n{r.stderr}")
        return found[-1]
    first_run = one()
    reruns = [one() for _ in range(10)]
    totals = sorted(int(x.split(" ", 1)[0]) for x in reruns)
    store.remove("idemlake-first")
    return (f"first run (the window never run before, every other day loaded): {first_run}; "
            f"re-runs (retries), 10 in a row: median {statistics.median(totals):.0f}, min {totals[0]}, "
            f"max {totals[-1]} (the run writing the table's checkpoint); the last: {reruns[-1]}")


def scenario(store, name, reps, cmd_of, warm=False):
    times = {t: [] for t in store.tools}
    for _ in range(reps + (1 if warm else 0)):
        for t in store.tools:
            times[t].append(timed(cmd_of(t), env=store.env))
            print(f"{name}: {t} {times[t][-1]:.2f} s", file=sys.stderr, flush=True)
    if warm:
        times = {t: v[1:] for t, v in times.items()}  # the first round warms caches
    return (name, times)


def first_runs(store, d: dt.date):
    """The `first` scenario: one result row a task form (see the module's docstring)."""
    rows = []
    first, last = day(0), day(DAYS - 1)
    one = dt.timedelta(days=1)
    peer_base = {}
    for n, (label, day_expr, where, tz) in enumerate(FIRST_FORMS):
        project = os.path.join(WORK, f"first-project-{n}")
        shutil.rmtree(project, ignore_errors=True)
        os.makedirs(os.path.join(project, "tables"))
        with open(os.path.join(project, "tables/events.toml"), "w") as f:
            f.write(FIRST_TASK.format(day=day_expr, where=where, tz=tz, uri=store.src))
        # Untimed setup: idemlake's table of every day but d, and polars' (one a time zone).
        base, copy = os.path.join(WORK, f"first-base-idemlake-{n}"), os.path.join(WORK, "first-run-idemlake")
        shutil.rmtree(base, ignore_errors=True)
        t0 = time.time()
        for lo, hi in ((first, d - one), (d + one, last)):
            if lo <= hi:
                timed(idem(project, base, "backfill", "events", "--from", str(lo), "--to", str(hi),
                           "--parallel", PARALLEL))
        if tz not in peer_base:
            peer_base[tz] = os.path.join(WORK, f"first-base-polars-{tz.replace('/', '-')}")
            shutil.rmtree(peer_base[tz], ignore_errors=True)
            timed(peer_first(store.src, os.path.join(peer_base[tz], "events"), d, tz, "base"))
        for t in (os.path.join(base, "events"), os.path.join(peer_base[tz], "events")):
            if pl.read_delta(t).filter(pl.col("day") == d).height != 0:
                raise SystemExit(f"{t}: holds day {d}, which a first run must not find")
        print(f"first run, {label}: tables of every day but {d} in {time.time() - t0:.0f} s",
              file=sys.stderr, flush=True)
        pcopy = os.path.join(WORK, "first-run-polars")
        times = {"idemlake": [], "polars": []}
        for _ in range(REPS):
            fresh_copy(base, copy)
            fresh_copy(peer_base[tz], pcopy)
            times["idemlake"].append(timed(idem(project, copy, "run", "events", "--window", str(d))))
            times["polars"].append(timed(peer_first(store.src, os.path.join(pcopy, "events"), d, tz, "first")))
            print(f"first run, {label}: idemlake {times['idemlake'][-1]:.2f} s, "
                  f"polars {times['polars'][-1]:.2f} s", file=sys.stderr, flush=True)
        check(store, "idemlake", d, d, table=os.path.join(copy, "events"), tz=tz)
        check(store, "polars", d, d, table=os.path.join(pcopy, "events"), tz=tz)
        check(store, "idemlake", first, last, table=os.path.join(copy, "events"), tz=tz)
        shutil.rmtree(base, ignore_errors=True)
        rows.append((f"first run (nightly), day window {d} never run, {label}", times))
    for p in (os.path.join(WORK, "first-run-idemlake"), os.path.join(WORK, "first-run-polars"), *peer_base.values()):
        shutil.rmtree(p, ignore_errors=True)
    return rows


def main() -> int:
    os.makedirs(WORK, exist_ok=True)
    local_src = generate()
    store = S3(local_src) if ON_S3 else Local(local_src)
    try:
        return run(store)
    finally:
        if ON_S3:
            store.close()


def run(store) -> int:
    project = os.path.join(WORK, "project")
    shutil.rmtree(project, ignore_errors=True)
    os.makedirs(os.path.join(project, "tables"))
    with open(os.path.join(project, "tables/events.toml"), "w") as f:
        f.write(TASK.format(uri=store.src))
    tools = store.tools
    results, extra = [], []
    first, last = day(0), day(DAYS - 1)

    def load(t):
        store.remove(t)
        if t == "idemlake":
            return idem(project, store.lake(t), "backfill", "events", "--from", str(first), "--to",
                        str(last), "--parallel", PARALLEL)
        return peer(store, t, first, last, "load")

    mid = day(DAYS // 2)
    if "first" in SCENARIOS:
        if ON_S3:
            print("first: local disk only (the S3 report gives a first run's requests); skipped",
                  file=sys.stderr)
        else:
            results += first_runs(store, mid)
            extra.append(
                f"First run (nightly): day window {mid} never run in the table (every other day "
                f"loaded by `backfill --parallel {PARALLEL}`, nothing reusable from an earlier run); "
                "each rep on fresh copies of both tables (data files hard-linked, `_delta_log/` and "
                "`_idemlake/` copied, os.sync()), idemlake and polars alternating. Timed: "
                f"`idemlake run events --window {mid}` (the whole process) against polars "
                "`scan_parquet(zone/**/*.parquet, hive_partitioning=True)` filtered on `dt` and on "
                "`ts` inside the day, then `write_deltalake(mode=\"overwrite\", "
                f"predicate=\"day = '{mid}'\")`, each tool a process of its own. Day {mid} of both copies and idemlake's "
                "whole table matched polars over the source.")
    if ("load" in SCENARIOS or ("day" in SCENARIOS or "range" in SCENARIOS)
            and not all(store.exists(t) for t in tools)):
        reps = max(1, min(REPS, 3)) if "load" in SCENARIOS else 1
        results.append(scenario(store, "initial load", reps, load))
        for t in tools:
            check(store, t, first, last)
    if "day" in SCENARIOS:
        results.append(scenario(store, f"day window ({mid}), re-run (retry)", REPS, lambda t: (
            idem(project, store.lake(t), "run", "events", "--window", str(mid)) if t == "idemlake"
            else peer(store, t, mid, mid, "day")), warm=True))
        for t in tools:
            check(store, t, mid, mid)
        if ON_S3:
            extra.append(f"Requests of an idemlake day window ({FILES} source files in the window): "
                         f"{requests_of_day(store, project, mid)}")
    if "range" in SCENARIOS:
        lo, hi = day(DAYS // 3), day(DAYS // 3 + RANGE - 1)
        results.append(scenario(store, f"{RANGE}-day backfill", max(1, REPS // 2), lambda t: (
            idem(project, store.lake(t), "backfill", "events", "--from", str(lo), "--to", str(hi),
                 "--parallel", PARALLEL) if t == "idemlake" else peer(store, t, lo, hi, "range"))))
        for t in tools:
            check(store, t, lo, hi)
    report(results, extra)
    return 0


def report(results, extra):
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    rev = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip()
    where = "local disk"
    if ON_S3:
        where = "the local S3 server" + (f", +{LATENCY_MS} ms a request" if LATENCY_MS else "")
    peers = [t for t in ("polars", "duckdb") if any(t in times for _, times in results)]
    names = {"polars": "polars", "duckdb": "DuckDB"}
    lines = [f"\n## Landing zone {DAYS} days x {FILES} files x {ROWS} rows ({DAYS * FILES} files), "
             f"{where}, {stamp}, {rev}\n",
             "| scenario | idemlake | " + " | ".join(names[p] for p in peers) + " | "
             + " | ".join(f"idemlake / {names[p]}" for p in peers) + " |",
             "|---" * (2 + 2 * len(peers)) + "|"]
    for name, times in results:
        med = {t: statistics.median(v) for t, v in times.items()}
        lines.append(f"| {name} (median of {len(times['idemlake'])}) | {med['idemlake']:.2f} s | "
                     + " | ".join(f"{med[p]:.2f} s" if p in med else "–" for p in peers) + " | "
                     + " | ".join(f"{med['idemlake'] / med[p]:.2f}x" if p in med else "–" for p in peers)
                     + " |")
    lines.append("\nEvery table matched polars over the source, day by day.")
    lines += [f"\n{e}" for e in extra]
    text = "\n".join(lines) + "\n"
    print(text)
    with open(OUT, "a") as f:
        f.write(text)


if __name__ == "__main__":
    sys.exit(main())
