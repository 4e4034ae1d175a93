#!/usr/bin/env python3
"""`make bench`: idemlake against its peers on TPC-H lineitem, whole-process timings.

Run by `make bench` (which builds the release binary first) with the system python3; only the
standard library is used here. The peers and the checksum reader run in `.venv-bench`, created
by this script with pinned versions (see PINS).

Scenarios (every measurement is one whole process, or a loop of processes for the peer's
per-window backfill; tools alternate rep by rep: A B A B ...):
  1  initial load of the whole table (idemlake: `backfill --parallel N` of every ship day)
     vs (b) polars write_parquet(partition_by=), (c) DataFusion COPY ... PARTITIONED BY, and
     deltalake's write_deltalake of the whole table in one commit
  2  one day window end to end, the headline: a FIRST RUN, the nightly case (a window never run
     before, nothing reusable from an earlier run): every rep of either tool starts from a fresh
     copy of a table loaded with every ship day but BENCH_DAY, made before its timed process;
     `idemlake run` vs (a) polars + write_deltalake(mode="overwrite", predicate=...) on the same
     kind of copy. Second, labelled as retries: re-runs of the published window on the loaded
     table of scenario 1 (the peer on its own copy of it)
  3  a 365-day backfill (1995) on the loaded table: `idemlake backfill --parallel N` vs the
     peer's loop of 365 processes, one per window
  4  one day window on a 10-day table after ~10 commits vs after BENCH_HISTORY commits (the same
     10 days re-published until the log is that long); each tool on its own copy; re-runs
     (retries) of a published window: this scenario measures the log's growth
  5  peak RSS of the first-run day windows of scenario 2 (os.wait4 per child)
  6  S3, with the 6-column task (NARROW_TOML below; the peer writes the same 6 columns): the
     table on a local S3 server (SeaweedFS, scripts/s3-server), the source on local disk:
     the initial load, re-runs (retries) of one day window on the loaded table (idemlake vs the
     peer on its own copy), the same through scripts/latency-proxy adding BENCH_S3_LATENCY_MS
     per request, the object-store requests of one idemlake re-run of the day window (its -v
     summary), and the BF_DAYS-day backfill vs the peer's loop
  7  initial load of the 6-column task (issue 18): idemlake vs (b) the polars floor writing the
     same 6 columns, and SQLMesh's first plan of an INCREMENTAL_BY_TIME_RANGE model over the
     same source on DuckDB (one batch into a DuckDB table; SQLMESH_PINS in .venv-sqlmesh);
     then on the loaded tables a day re-run (idemlake run vs `sqlmesh plan --restate-model
     --start D --end D`) and a BF_DAYS-day restatement (backfill vs the same over the range),
     both tables checksummed against the source afterwards (issue 17 §3); and dbt's
     microbatch model (day batches, dbt-duckdb, DBT_PINS in .venv-dbt) for the same three: the
     load once (one query per day: minutes), the day re-run and the restatement with
     `dbt run --event-time-start/--event-time-end`
  8  scale (issue 17 §3): the same first run of the day window as scenario 2 on a BENCH_BIG_SCALE
     table (TPC-H SF 10: 10× the rows per partition, 10× the source), each rep of either tool on
     a fresh copy of the table loaded with every ship day but BENCH_DAY, wall time and peak RSS,
     which must stay flat with table size (compared with scenario 2's); then, labelled as
     retries, re-runs of the window on the table each tool's last first run left. The idemlake
     load that builds the table is timed too (no peer: it is the setup)
  9  many workers, one table, a remote store (issue 55): the headline of `make bench-scale`,
     windows/s of 1 and 8 `backfill --shard I/N` workers publishing 365 day windows of the
     6-column task (SF 0.01) into one table on SeaweedFS behind scripts/latency-proxy at +20 and
     +60 ms per request, BENCH_SCALE_REPS reps alternating, every window checked against the
     source with polars (scripts/bench_scale.py, run as a child; bench/SCALE.md has the rest)
 10  a PostgreSQL source (issue 53): the headline of `make bench-postgres`, first runs of a
     nightly day window and a 365-day backfill from a 10-million-row `orders` table on the
     loopback server (scripts/pg-server), and one day of 4 million rows (peak RSS), against
     polars `read_database_uri` + deltalake `write_deltalake` (scripts/bench_postgres.py, run
     as a child; bench/POSTGRES.md has the history)

Environment knobs (defaults in brackets):
  BENCH_BIN       idemlake binary [<repo>/target/release/idemlake]
  BENCH_PROFILE   the cargo profile it was built with, for the report [release; `PROFILE=dist
                  make bench` builds and measures the dist profile's binary]
  BENCH_SCALE     TPC-H scale factor [1]
  BENCH_REPS      reps of scenarios 2, 4 and 8 [5], after one warm-up per tool
  BENCH_LOAD_REPS reps of scenario 1 [1]: one idemlake load of SF 1 takes ~35 s on 2 cores (the peers take longer)
  BENCH_LOAD_WARMUP  1: before scenario 1, one rep of each peer and a 30-day idemlake backfill [0]:
                  scenario 4 runs first and already warms the binary and the source file
  BENCH_BACKFILL_REPS reps of scenario 3 [1]; scenario 2's runs are its warm-up
  BENCH_PARALLEL  idemlake --parallel for loads and backfills [4]
  BENCH_HISTORY   commits for scenario 4's long history [1000]
  BENCH_DAY       the day window of scenarios 2, 5, 6, 7 and 8 [1995-06-17]; the first-run tables of
                  scenarios 2 and 8 are loaded with every ship day but this one
  BENCH_WORK      scratch directory (wiped at start, except data-*/) [/tmp/idemlake-bench]
  BENCH_DATA      TPC-H data directory [$BENCH_WORK/data-sf$BENCH_SCALE], generated if absent
  BENCH_SCENARIOS comma list of scenarios to run [1,2,3,4,5,6,7,8,9,10] (2, 3 and 5 need 1's table)
  BENCH_SCALE_REPS  reps of scenario 9 [3]
  BENCH_PG_REPS   reps of scenario 10's day window [3]; its backfill and large window run once
  BENCH_BIG_SCALE  TPC-H scale factor of scenario 8 [10]; its data goes to $BENCH_WORK/data-sf<it>,
                  generated if absent (kept between runs like every data-* directory)
  BENCH_S3_LATENCY_MS  milliseconds the latency proxy adds to each request in scenario 6 [20]
  BENCH_OUT       report path [<repo>/bench/RESULTS.md]
  BENCH_KEEP      1 keeps the tables in BENCH_WORK afterwards [0]
  BENCH_MIN_FREE_GIB  free disk the run needs besides TPC-H data it must generate [5]; checked
                  at start for BENCH_WORK and the S3 server's data directory (a full disk
                  makes SeaweedFS answer 500 to PUTs, and a run fails minutes in)
  BENCH_BACKFILL_DAYS  days of scenario 3's backfill, from 1995-01-01 [365]
  BENCH_SETTLE    seconds between deleting files and a timed scenario-1 load [35]: ext4 scans
                  past recently freed inodes on every create (see settle())
  BENCH_LOAD_RANGE  FROM..TO: load only these ship days in scenario 1 (for developing the
                  harness; the report says so) [every ship day of the source]
"""

import datetime as dt
import hashlib
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TASK = "lineitem_by_ship_day"
# The narrow task (issues 18 and 19): 6 columns, no [reconcile] (the default independent checks).
NARROW_TASK = "lineitem_narrow"
NARROW_TOML = """description = "6 columns of lineitem by ship day (bench)"
sql = \"\"\"
SELECT l_orderkey, l_linenumber, l_shipdate AS ship_date, l_extendedprice, l_quantity, l_shipmode
FROM lineitem
WHERE l_shipdate >= $window_start AND l_shipdate < $window_end
\"\"\"
[target]
partition_by = "ship_date"
[window]
grain = "day"
timezone = "UTC"
[sources.lineitem]
uri = "data/lineitem.parquet"
format = "parquet"
[write]
mode = "overwrite"
on_empty = "clear"
"""
PINS = "deltalake==1.6.6 polars==1.44.2 pyarrow==26.0.1 datafusion==55.0.0"


def env(name, default):
    v = os.environ.get(name, "")
    return v if v != "" else default


BIN = Path(env("BENCH_BIN", str(REPO / "target" / "release" / "idemlake"))).resolve()
SCALE = env("BENCH_SCALE", "1")
REPS = int(env("BENCH_REPS", "5"))
LOAD_REPS = int(env("BENCH_LOAD_REPS", "1"))
LOAD_WARMUP = env("BENCH_LOAD_WARMUP", "0") == "1"
BACKFILL_REPS = int(env("BENCH_BACKFILL_REPS", "1"))
PARALLEL = env("BENCH_PARALLEL", "4")
HISTORY = int(env("BENCH_HISTORY", "1000"))
DAY = env("BENCH_DAY", "1995-06-17")
WORK = Path(env("BENCH_WORK", "/tmp/idemlake-bench")).resolve()
DATA = Path(env("BENCH_DATA", str(WORK / f"data-sf{SCALE}"))).resolve()
SCENARIOS = {int(s) for s in env("BENCH_SCENARIOS", "1,2,3,4,5,6,7,8,9,10").split(",") if s.strip()}
SCALE_REPS = env("BENCH_SCALE_REPS", "3")
PG_REPS = env("BENCH_PG_REPS", "3")
SCALE_HEADLINE = {}  # scenario 9: bench_scale.py's medians by workload
PG_HEADLINE = {}  # scenario 10: bench_postgres.py's medians by scenario
BIG_SCALE = env("BENCH_BIG_SCALE", "10")
S3_LATENCY_MS = int(env("BENCH_S3_LATENCY_MS", "20"))
OUT = Path(env("BENCH_OUT", str(REPO / "bench" / "RESULTS.md"))).resolve()
KEEP = env("BENCH_KEEP", "0") == "1"
BF_DAYS = int(env("BENCH_BACKFILL_DAYS", "365"))
SETTLE = float(env("BENCH_SETTLE", "35"))

SQLMESH_PINS = "sqlmesh==0.236.0 duckdb==1.4.4"
SQLMESH_VENV = REPO / ".venv-sqlmesh"
# dbt-core 1.11.x installs here (1.12 needs a package that downloads at build time).
DBT_PINS = "dbt-core==1.11.16 dbt-duckdb==1.11.1 duckdb==1.4.4"
DBT_VENV = REPO / ".venv-dbt"
# dbt phones home unless told not to; the bench runs offline-clean.
DBT_ENV = {"DO_NOT_TRACK": "1", "DBT_SEND_ANONYMOUS_USAGE_STATS": "false"}
VENV = REPO / ".venv-bench"
PY = VENV / "bin" / "python"
PEER = REPO / "scripts" / "bench_peer.py"
SOURCE = DATA / "lineitem.parquet"
PROJECT = WORK / "project"
LOGS = WORK / "logs"
T0 = time.monotonic()


def say(msg):
    el = time.monotonic() - T0
    print(f"[bench {int(el // 60):3d}m{int(el % 60):02d}s] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- processes


class Failed(Exception):
    pass


def run(cmd, log, check=True, env_extra=None):
    """Run one process, return (seconds, peak RSS in KiB, stdout text). Times the whole process.
    `env_extra`: variables set for this process on top of this script's environment."""
    cmd = [str(c) for c in cmd]
    LOGS.mkdir(parents=True, exist_ok=True)
    out_path = LOGS / (log + ".out")
    err_path = LOGS / (log + ".err")
    with open(out_path, "ab") as out, open(err_path, "ab") as err:
        header = f"\n### {' '.join(cmd)}\n".encode()
        out.write(header)
        err.write(header)
        out.flush()
        err.flush()
        pos = out.tell()
        start = time.perf_counter()
        penv = {**os.environ, **env_extra} if env_extra else None
        p = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=penv)
        _, status, ru = os.wait4(p.pid, 0)
        secs = time.perf_counter() - start
        p.returncode = os.waitstatus_to_exitcode(status)
    text = out_path.read_bytes()[pos:].decode(errors="replace")
    if check and p.returncode != 0:
        tail = err_path.read_text(errors="replace")[-3000:]
        raise Failed(f"exit {p.returncode}: {' '.join(cmd)}\n--- stderr tail ({err_path}):\n{tail}")
    return secs, ru.ru_maxrss, text


def idem(lake, *args, json_out=True, verbose=False, project=None):
    cmd = [BIN, "--project", project or PROJECT, "--lake", lake]
    if json_out:
        cmd += ["--output", "json"]
    if verbose:
        cmd += ["-v"]
    return cmd + list(args)


def peer(*args):
    return [PY, PEER] + list(args)


def checksum(kind, path, lo=None, hi=None, env_extra=None):
    args = ["checksum", kind, path] + ([lo, hi] if lo else [])
    _, _, text = run(peer(*args), "checksum", env_extra=env_extra)
    return json.loads(text.strip().splitlines()[-1])


def json_lines(text):
    return [json.loads(l) for l in text.splitlines() if l.startswith("{")]


def check_reports(text, what, statuses=("ok", "skipped")):
    """The JSON reports in `text`; fails unless every window's status is one of `statuses` (a
    first run of a day with rows must say `ok`: it published them)."""
    reps = json_lines(text)
    bad = [r for r in reps if r.get("status") not in statuses]
    if bad:
        raise Failed(f"{what}: {len(bad)} windows not ok, first: {bad[0]}")
    return reps


def table_version(table):
    log = Path(table) / "_delta_log"
    versions = [int(p.name.split(".")[0]) for p in log.glob("*.json") if p.name[0].isdigit()]
    checkpoints = len(list(log.glob("*.checkpoint*.parquet")))
    return (max(versions) if versions else -1), checkpoints


DELETED_AT = [None]  # when this script last deleted files (None: not since the last settle)


def fresh(path):
    path = Path(path)
    if path.exists():
        shutil.rmtree(path)
        DELETED_AT[0] = time.monotonic()
    return path


def settle():
    """Before a timed run that creates thousands of files: let inodes this script freed age.

    ext4 does not reuse an inode freed in the last ~30 s (dirty_expire_centisecs); while many
    are that young, every file or directory created scans past them (`recently_deleted` in a
    profile: 11 % of a load's CPU right after deleting the previous load). Whichever tool ran
    first after a cleanup paid for it, so scenario 1 waits until those inodes are older.
    """
    if DELETED_AT[0] is not None:
        left = SETTLE - (time.monotonic() - DELETED_AT[0])
        if left > 0:
            time.sleep(left)
        DELETED_AT[0] = None


def copy_table(src, dst):
    fresh(dst)
    shutil.copytree(src, dst)
    return dst


def first_run_state(base, lake):
    """A fresh lake `lake` holding a copy of the table `base`, in which the day window was never
    run: the state a nightly first run starts from, nothing left by an earlier run of the window.
    Made before the timed process starts, and flushed to disk (sync), so neither the copy nor
    its writeback is timed. The table's Parquet data files are hard links (Delta data files are
    never modified in place: a writer adds new files and removes old ones in the log, and
    removing a link leaves `base` whole); the log and idemlake's `_idemlake/` are real copies.
    Returns the copy's table directory."""
    base = Path(base)
    fresh(lake)

    def link_or_copy(src, dst):
        top = Path(src).relative_to(base).parts[0]
        if top not in ("_delta_log", "_idemlake") and src.endswith(".parquet"):
            os.link(src, dst)
        else:
            shutil.copy2(src, dst)

    table = Path(lake) / base.name
    shutil.copytree(base, table, copy_function=link_or_copy)
    os.sync()
    return table


def spans_without(lo, hi, day):
    """The ranges (FROM, TO) of lo..hi without `day` (ISO dates): what a table loaded with every
    day but `day` is backfilled with."""
    d = dt.date.fromisoformat(day)
    spans = []
    if lo < day:
        spans.append((lo, min(hi, (d - dt.timedelta(days=1)).isoformat())))
    if day < hi:
        spans.append((max(lo, (d + dt.timedelta(days=1)).isoformat()), hi))
    if not spans:
        raise Failed(f"BENCH_DAY={day} is the only day of {lo}..{hi}: no table to run it on first")
    return spans


def load_without_day(lake, lo, hi, day, log, project=None):
    """Backfills `lake` with every day of lo..hi but `day` (one or two `backfill` processes): the
    table a first run of `day` starts from. Returns (seconds, peak RSS in KiB, reports), the
    seconds summed and the RSS the larger over the processes."""
    secs, peak, reps = 0.0, 0, []
    for a, b in spans_without(lo, hi, day):
        s, r, text = run(idem(lake, "backfill", TASK, "--from", a, "--to", b, "--parallel", PARALLEL,
                              project=project), log)
        reps += check_reports(text, f"load of {a}..{b}")
        secs, peak = secs + s, max(peak, r)
    return secs, peak, reps


# ---------------------------------------------------------------- measurements

# results[key] = {"label":…, "tool":…, "samples": [(secs, rss_kib)], "note": …}
RESULTS = {}
CHECKS = {}   # name -> checksum dict
NOTES = []
COMMANDS = []
S6_REQUESTS = {}  # scenario 6: the requests of one day window


def record(key, label, tool, secs, rss, note=None):
    r = RESULTS.setdefault(key, {"label": label, "tool": tool, "samples": [], "note": None})
    r["samples"].append((secs, rss))
    if note:
        r["note"] = note


def stats(key, i=0):
    xs = [s[i] for s in RESULTS[key]["samples"]]
    return statistics.median(xs), min(xs), max(xs), len(xs)


def fmt_t(key):
    if key not in RESULTS:
        return "—"
    med, lo, hi, n = stats(key)
    return f"{med:.2f} s ({lo:.2f}–{hi:.2f}, n={n})"


def fmt_rss(key):
    med, lo, hi, n = stats(key, 1)
    return f"{med / 1024:.0f} MiB ({lo / 1024:.0f}–{hi / 1024:.0f}, n={n})"


def med(key, i=0):
    return stats(key, i)[0]


# ---------------------------------------------------------------- setup


def ensure_venv(venv=VENV, pins=PINS):
    """`venv` with `pins` installed (re-installed when the pins change); its bin directory."""
    py = venv / "bin" / "python"
    stamp = venv / ".installed"
    if not py.exists():
        say(f"creating {venv}")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    if not stamp.exists() or stamp.read_text().strip() != pins:
        say(f"installing {pins} into {venv}")
        subprocess.run([str(py), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
                       + pins.split(), check=True)
        stamp.write_text(pins + "\n")
    return venv / "bin"


def check_free_disk():
    """Refuses to start a run the disk cannot hold: the tables of all scenarios (~4 GiB at SF 1
    with scenario 8 at SF 10), plus any TPC-H data still to generate."""
    gib = 1 << 30
    need = float(env("BENCH_MIN_FREE_GIB", "5")) * gib
    if not DATA.exists():
        need += 0.3 * float(SCALE) * gib
    big = WORK / f"data-sf{BIG_SCALE}"
    if 8 in SCENARIOS and not big.exists():
        need += 0.3 * float(BIG_SCALE) * gib
    for place in (WORK, REPO):
        free = shutil.disk_usage(place).free
        if free < need:
            raise SystemExit(
                f"bench: {free / gib:.1f} GiB free on the disk of {place}, the run needs about "
                f"{need / gib:.1f} GiB (tables, the S3 server's data, TPC-H data to generate); "
                "free some space or lower BENCH_MIN_FREE_GIB")


def setup():
    if not BIN.exists():
        raise SystemExit(f"bench: no binary at {BIN} (make bench builds it; or set BENCH_BIN)")
    ensure_venv()
    WORK.mkdir(parents=True, exist_ok=True)
    for p in WORK.iterdir():
        if not p.name.startswith("data-") and p != DATA:
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
            DELETED_AT[0] = time.monotonic()
    check_free_disk()
    (PROJECT / "tables").mkdir(parents=True)
    shutil.copy(REPO / "tables" / f"{TASK}.toml", PROJECT / "tables")
    (PROJECT / "tables" / f"{NARROW_TASK}.toml").write_text(NARROW_TOML)
    if not SOURCE.exists():
        say(f"generating TPC-H SF {SCALE} into {DATA}")
        secs, _, _ = run([BIN, "gen-tpch", "--scale", SCALE, "--out", DATA], "gen-tpch")
        NOTES.append(f"`idemlake gen-tpch --scale {SCALE}` took {secs:.1f} s in this run.")
    (PROJECT / "data").symlink_to(DATA)
    src = checksum("source", SOURCE)
    CHECKS["source"] = src
    say(f"source: {src['rows']:,} rows, {src['days']} ship days")
    return src


def first_last_day(source=SOURCE):
    _, _, text = run([PY, "-c", (
        "import polars as pl,sys; d=pl.scan_parquet(sys.argv[1]).select("
        "pl.col('l_shipdate').min().alias('a'),pl.col('l_shipdate').max().alias('b')).collect();"
        "print(d['a'][0], d['b'][0])"), source], "range")
    a, b = text.split()[-2:]
    return a, b


# ---------------------------------------------------------------- scenarios


S1_PEERS = {
    "floor": lambda out: ["floor", SOURCE, out],
    "dfcopy": lambda out: ["dfcopy", SOURCE, out],
    "dfserial": lambda out: ["dfcopy", SOURCE, out, "serial"],
    "deltaload": lambda out: ["deltaload", SOURCE, out],
}


def scenario1(lo, hi):
    say(f"scenario 1: initial load {lo}..{hi}, {LOAD_REPS} reps" + (" (+ warm-up)" if LOAD_WARMUP else ""))
    s1 = WORK / "s1"
    s1.mkdir()
    lake = lambda i: s1 / f"idemlake-{i}"
    load = ["backfill", TASK, "--from", lo, "--to", hi, "--parallel", PARALLEL]
    COMMANDS.append(f"idemlake --project P --lake L --output json {' '.join(load)}")
    COMMANDS.append(f"python scripts/bench_peer.py floor SOURCE OUT   # polars write_parquet(partition_by='ship_date')")
    COMMANDS.append(f"python scripts/bench_peer.py dfcopy SOURCE OUT  # datafusion COPY ... PARTITIONED BY (ship_date)")
    COMMANDS.append(f"python scripts/bench_peer.py dfcopy SOURCE OUT serial  # the same with allow_single_file_parallelism=false")
    COMMANDS.append(f"python scripts/bench_peer.py deltaload SOURCE TABLE  # write_deltalake, one commit")
    # warm-up: page cache for the source and the binaries
    if LOAD_WARMUP:
        warm_to = (dt.date.fromisoformat(lo) + dt.timedelta(days=29)).isoformat()
        run(idem(s1 / "warm", "backfill", TASK, "--from", lo, "--to", warm_to, "--parallel", PARALLEL),
            "s1-warm")
        for tool in S1_PEERS:
            run(peer(*S1_PEERS[tool](s1 / f"warm-{tool}")), "s1-warm")
        fresh(s1 / "warm")
        for tool in S1_PEERS:
            fresh(s1 / f"warm-{tool}")
    conflicts = []
    for i in range(LOAD_REPS):
        if i > 0:
            fresh(lake(i - 1))
        settle()
        secs, rss, text = run(idem(lake(i), *load), "s1-idemlake")
        reps = check_reports(text, "initial load")
        err = (LOGS / "s1-idemlake.err").read_text(errors="replace")
        conflicts.append(err.split("### ")[-1].count("exceeded maximum commit attempts"))
        record("s1.idemlake", "initial load", "idemlake backfill --parallel " + PARALLEL, secs, rss)
        say(f"  rep {i + 1}: idemlake {secs:.1f} s ({len(reps)} windows)")
        for tool in S1_PEERS:
            out = fresh(s1 / f"{tool}-{i}")
            settle()
            secs, rss, _ = run(peer(*S1_PEERS[tool](out)), f"s1-{tool}")
            record(f"s1.{tool}", "initial load", tool, secs, rss)
            say(f"  rep {i + 1}: {tool} {secs:.1f} s")
            if i < LOAD_REPS - 1:
                fresh(out)
    table = lake(LOAD_REPS - 1) / TASK
    durations = [r["duration_ms"] for r in reps]
    version, cps = table_version(table)
    NOTES.append(
        f"Scenario 1: idemlake's load publishes {len(reps)} windows (one per ship day; group "
        f"commits publish several staged windows at once) ending at table version {version}, "
        f"{cps} checkpoints. Per-window `duration_ms` in the last load: median "
        f"{statistics.median(durations)} ms, max {max(durations)} ms ({PARALLEL} windows in flight on {os.cpu_count()} CPUs). "
        f"delta-rs logged `exceeded maximum commit attempts` (a lost commit race that idemlake "
        f"rebuilds and retries) {'–'.join(sorted({str(min(conflicts)), str(max(conflicts))}, key=int))} times per load.")
    i = LOAD_REPS - 1
    CHECKS["s1.source"] = checksum("source", SOURCE, lo, hi)
    CHECKS["s1.idemlake"] = checksum("delta", table)
    CHECKS["s1.floor"] = checksum("parquet", s1 / f"floor-{i}")
    CHECKS["s1.dfcopy"] = checksum("parquet", s1 / f"dfcopy-{i}")
    CHECKS["s1.dfserial"] = checksum("parquet", s1 / f"dfserial-{i}")
    CHECKS["s1.deltaload"] = checksum("delta", s1 / f"deltaload-{i}")
    return table


def stage_breakdown(base, n=3):
    """Untimed diagnostic first runs with -v, each on a fresh copy of `base` (the table without
    the day window): where a first run's time goes."""
    marks = {"staged the window": "stage", "reconciled": "reconcile", "published in one": "commit"}
    rows = []
    for _ in range(n):
        lake = first_run_state(base, WORK / "s2" / "verbose").parent
        t_start = time.time()
        secs, _, _ = run(idem(lake, "run", TASK, "--window", DAY, json_out=False,
                              verbose=True), "s2-verbose")
        err = (LOGS / "s2-verbose.err").read_text(errors="replace").split("### ")[-1]
        stamps = {}
        for line in err.splitlines():
            m = re.match(r"(\S+Z)\s+INFO\s+\S+: (.*)", re.sub(r"\x1b\[[0-9;]*m", "", line))
            if not m:
                continue
            for k, v in marks.items():
                if m.group(2).startswith(k):
                    stamps[v] = dt.datetime.fromisoformat(m.group(1).replace("Z", "+00:00")).timestamp()
        if len(stamps) == 3:
            rows.append((stamps["stage"] - t_start, stamps["reconcile"] - stamps["stage"],
                         stamps["commit"] - stamps["reconcile"], t_start + secs - stamps["commit"]))
    if not rows:
        return None
    return [statistics.median(c) for c in zip(*rows)]


def scenario2(table, lo, hi):
    say(f"scenario 2: day window {DAY}: first runs on fresh copies of a table without it, then re-runs "
        f"(retries) on the loaded table; warm-up + {REPS} reps")
    s2 = WORK / "s2"
    # The first runs' table: every ship day of lo..hi but DAY, loaded once (untimed setup);
    # every rep of either tool runs on a fresh copy of it (first_run_state, untimed).
    load_without_day(s2 / "base", lo, hi, DAY, "s2-base")
    base = s2 / "base" / TASK
    bv, bcps = table_version(base)
    # The re-runs (retries): the loaded table of scenario 1, DAY published by that load.
    lake = table.parent
    ptable = copy_table(table, s2 / "peer" / TASK)
    v0, cps = table_version(table)
    COMMANDS.append(f"idemlake --project P --lake L --output json run {TASK} --window {DAY}  "
                    f"# first run: L a fresh copy of a table loaded with every ship day but {DAY}")
    COMMANDS.append(f"python scripts/bench_peer.py window TABLE SOURCE {DAY}  # polars + write_deltalake(overwrite, "
                    "predicate); first run: TABLE a fresh copy of the same table")
    COMMANDS.append(f"# re-runs (retries): the same two commands on the loaded table of scenario 1 (the peer on its copy)")
    for i in range(REPS + 1):
        first = first_run_state(base, s2 / "first-idemlake")
        s_i, r_i, text = run(idem(first.parent, "run", TASK, "--window", DAY), "s2-idemlake")
        check_reports(text, "day window, first run", statuses=("ok",))
        pfirst = first_run_state(base, s2 / "first-peer")
        s_p, r_p, _ = run(peer("window", pfirst, SOURCE, DAY), "s2-peer")
        s_ri, r_ri, text = run(idem(lake, "run", TASK, "--window", DAY), "s2-retry-idemlake")
        check_reports(text, "day window, re-run")
        s_rp, r_rp, _ = run(peer("window", ptable, SOURCE, DAY), "s2-retry-peer")
        if i == 0:
            continue  # warm-up
        record("s2.idemlake", "day window, first run", "idemlake run", s_i, r_i)
        record("s2.peer", "day window, first run", "polars + write_deltalake", s_p, r_p)
        record("s2.retry.idemlake", "day window, re-run (retry)", "idemlake run", s_ri, r_ri)
        record("s2.retry.peer", "day window, re-run (retry)", "polars + write_deltalake", s_rp, r_rp)
        say(f"  rep {i}: first run: idemlake {s_i:.2f} s, peer {s_p:.2f} s; "
            f"re-run (retry): idemlake {s_ri:.2f} s, peer {s_rp:.2f} s")
    CHECKS["s2.day.source"] = checksum("source", SOURCE, DAY, DAY)
    CHECKS["s2.first.day.idemlake"] = checksum("delta", first, DAY, DAY)
    CHECKS["s2.first.day.peer"] = checksum("delta", pfirst, DAY, DAY)
    CHECKS["s2.first.idemlake"] = checksum("delta", first)
    CHECKS["s2.first.peer"] = checksum("delta", pfirst)
    day_with_checks(base)
    v1, _ = table_version(table)
    NOTES.append(f"Scenario 2: every first run, of either tool, started from a fresh copy of a table loaded "
                 f"with every ship day of {lo}..{hi} but {DAY} (version {bv}, {bcps} checkpoints; the window "
                 "never run in it), made and synced to disk before the timed process (data files hard-linked, "
                 "the log and `_idemlake/` copied). The re-runs (retries) ran on the loaded table of scenario 1, "
                 f"at version {v0} ({cps} checkpoints, {CHECKS['source']['days']} partitions) when they began "
                 f"and {v1} after; the peer re-ran on a copy of it.")
    br = stage_breakdown(base)
    if br:
        NOTES.append(
            "Where idemlake's first run of the day window goes (3 extra first runs with `-v`, each on a fresh "
            f"copy, medians, from process start): open + plan + scan + write the staged files {br[0]:.2f} s; "
            f"reconcile (the `[reconcile].source` query over the source and the independent checks, computed "
            f"in the run) {br[1]:.2f} s; commit + read-back {br[2]:.2f} s; "
            f"run log + exit {br[3]:.2f} s.")
    CHECKS["s2.day.idemlake"] = checksum("delta", table, DAY, DAY)
    CHECKS["s2.day.peer"] = checksum("delta", ptable, DAY, DAY)
    CHECKS["s2.idemlake"] = checksum("delta", table)
    CHECKS["s2.peer"] = checksum("delta", ptable)
    return ptable


# Five data checks (issue 20) on the day window's rows, run before its commit.
FIVE_CHECKS = """
[checks]
not_null = ["l_orderkey", "ship_date"]
unique = [["l_orderkey", "l_linenumber"]]
accepted_values = { l_shipmode = ["AIR", "MAIL", "SHIP", "RAIL", "TRUCK", "FOB", "REG AIR"] }
range = { l_quantity = { min = 1, max = 50 } }
row_count = { min = 1 }
"""


def day_with_checks(base):
    """A first run of the day window with five `[checks]` against one without them, alternating,
    each on a fresh copy of `base` (the table without the window)."""
    project = WORK / "project-checks"
    (project / "tables").mkdir(parents=True, exist_ok=True)
    task = (PROJECT / "tables" / f"{TASK}.toml").read_text()
    (project / "tables" / f"{TASK}.toml").write_text(task + FIVE_CHECKS)
    if not (project / "data").exists():
        (project / "data").symlink_to(DATA)
    COMMANDS.append(f"idemlake --project P' --lake L --output json run {TASK} --window {DAY}  # P': the task + five [checks]; "
                    "first run, L a fresh copy as above")
    for i in range(REPS + 1):
        lake = first_run_state(base, WORK / "s2" / "first-checks").parent
        checked = [BIN, "--project", project, "--lake", lake, "--output", "json", "run", TASK, "--window", DAY]
        s_c, r_c, text = run(checked, "s2-checks")
        check_reports(text, "day window with checks, first run", statuses=("ok",))
        lake = first_run_state(base, WORK / "s2" / "first-nochecks").parent
        s_i, r_i, text = run(idem(lake, "run", TASK, "--window", DAY), "s2-nochecks")
        check_reports(text, "day window without checks, first run", statuses=("ok",))
        if i == 0:
            continue
        record("s2.checks", "day window, first run, five [checks]", "idemlake run", s_c, r_c)
        record("s2.nochecks", "day window, first run, no [checks]", "idemlake run", s_i, r_i)
        say(f"  rep {i}: first run with five checks {s_c:.2f} s, without {s_i:.2f} s")
    NOTES.append(
        f"Data checks (issue 20): the first run of the day window with five `[checks]` (not_null on 2 columns, "
        f"unique key, accepted_values, range, row_count) took {fmt_t('s2.checks')} against {fmt_t('s2.nochecks')} "
        f"without them ({med('s2.checks') / med('s2.nochecks'):.2f}×; alternating, each run on a fresh copy of "
        "the table without the window).")


def scenario3(table, ptable):
    days = [(dt.date(1995, 1, 1) + dt.timedelta(days=d)).isoformat() for d in range(BF_DAYS)]
    lo, hi = days[0], days[-1]
    say(f"scenario 3: {BF_DAYS}-day backfill {lo}..{hi}, {BACKFILL_REPS} reps")
    lake = table.parent
    args = ["backfill", TASK, "--from", lo, "--to", hi, "--parallel", PARALLEL]
    COMMANDS.append(f"idemlake --project P --lake L --output json {' '.join(args)}")
    COMMANDS.append(f"for d in <{BF_DAYS} days>: python scripts/bench_peer.py window TABLE SOURCE $d  # sequential, one process per window")
    v0, _ = table_version(table)
    for i in range(BACKFILL_REPS):
        secs, rss, text = run(idem(lake, *args), "s3-idemlake")
        reps = check_reports(text, "backfill")
        record("s3.idemlake", f"{BF_DAYS}-day backfill", "idemlake backfill --parallel " + PARALLEL, secs, rss)
        say(f"  rep {i + 1}: idemlake {secs:.1f} s ({len(reps)} windows)")
        start = time.perf_counter()
        peak = 0
        for n, d in enumerate(days):
            _, r, _ = run(peer("window", ptable, SOURCE, d), "s3-peer")
            peak = max(peak, r)
            if n % 73 == 72:
                say(f"    peer loop {n + 1}/{BF_DAYS}")
        secs = time.perf_counter() - start
        record("s3.peer", f"{BF_DAYS}-day backfill", f"polars + write_deltalake, {BF_DAYS} processes", secs, peak)
        say(f"  rep {i + 1}: peer loop {secs:.1f} s")
    v1, _ = table_version(table)
    NOTES.append(f"Scenario 3: idemlake's table went from version {v0} to {v1} "
                 f"({v1 - v0} commits for {BF_DAYS} windows: group commits); the peer made one commit per window.")
    CHECKS["s3.source"] = checksum("source", SOURCE, lo, hi)
    CHECKS["s3.idemlake"] = checksum("delta", table, lo, hi)
    CHECKS["s3.peer"] = checksum("delta", ptable, lo, hi)
    CHECKS["s3.idemlake.all"] = checksum("delta", table)
    CHECKS["s3.peer.all"] = checksum("delta", ptable)


def scenario4():
    lo, hi, day = "1995-06-01", "1995-06-10", "1995-06-05"
    say(f"scenario 4: day {day} on a 10-day table after 10 commits and after {HISTORY}")
    lake = WORK / "s4" / "idemlake"
    table = lake / TASK
    fill = ["backfill", TASK, "--from", lo, "--to", hi, "--parallel", PARALLEL]
    run(idem(lake, *fill), "s4-fill")

    def measure(stage):
        ptable = copy_table(table, WORK / "s4" / f"peer-{stage}" / TASK)
        v0, cps = table_version(table)
        for i in range(REPS + 1):
            s_i, r_i, text = run(idem(lake, "run", TASK, "--window", day), "s4-idemlake")
            check_reports(text, "day window")
            s_p, r_p, _ = run(peer("window", ptable, SOURCE, day), "s4-peer")
            if i == 0:
                continue
            record(f"s4.{stage}.idemlake", f"day window, {stage} commits", "idemlake run", s_i, r_i)
            record(f"s4.{stage}.peer", f"day window, {stage} commits", "polars + write_deltalake", s_p, r_p)
            say(f"  {stage} commits, rep {i}: idemlake {s_i:.2f} s, peer {s_p:.2f} s")
        v1, _ = table_version(table)
        RESULTS[f"s4.{stage}.idemlake"]["note"] = f"versions {v0}→{v1}, {cps} checkpoints"
        CHECKS[f"s4.{stage}.idemlake"] = checksum("delta", table)
        CHECKS[f"s4.{stage}.peer"] = checksum("delta", ptable)
        fresh(ptable.parent)

    measure("10")
    say(f"  growing the history to {HISTORY} commits (backfills of the same 10 days)")
    start = time.perf_counter()
    n = 0
    while table_version(table)[0] < HISTORY:
        run(idem(lake, *fill), "s4-grow")
        n += 1
        if n % 20 == 0:
            say(f"    version {table_version(table)[0]}")
    NOTES.append(f"Scenario 4: the history was grown with {n} `backfill --parallel {PARALLEL}` runs "
                 f"of the same 10 days ({time.perf_counter() - start:.0f} s); the 10-day data stays the "
                 "same, only the log grows. Each tool ran on its own copy of the table at each stage.")
    measure(str(HISTORY))
    CHECKS["s4.source"] = checksum("source", SOURCE, lo, hi)


# ---------------------------------------------------------------- scenario 6: S3


def s3_server():
    """Start the loopback S3 server (installs it on first use); its environment variables."""
    script = REPO / "scripts" / "s3-server"
    subprocess.run([str(script), "start"], check=True, stdout=subprocess.DEVNULL)
    out = subprocess.run([str(script), "env"], check=True, capture_output=True, text=True).stdout
    envs = {}
    for line in out.splitlines():
        if line.startswith("export ") and "=" in line:
            k, v = line[len("export "):].split("=", 1)
            envs[k] = v.strip("'")
    # The peer's commits: deltalake's put-if-absent on S3 (the same guarantee idemlake relies on).
    envs["AWS_CONDITIONAL_PUT"] = "etag"
    return envs


S3_PRELUDE = (
    "import sys, boto3\n"
    "e = dict(a.split('=', 1) for a in sys.argv[1:] if '=' in a)\n"
    "args = [a for a in sys.argv[1:] if '=' not in a]\n"
    "s3 = boto3.client('s3', endpoint_url=e['AWS_ENDPOINT_URL'], region_name=e['AWS_REGION'],"
    " aws_access_key_id=e['AWS_ACCESS_KEY_ID'], aws_secret_access_key=e['AWS_SECRET_ACCESS_KEY'])\n"
    "b = e['IDEMLAKE_S3_BUCKET']\n"
    "keys = lambda prefix: [o['Key'] for p in s3.get_paginator('list_objects_v2').paginate("
    "Bucket=b, Prefix=prefix) for o in p.get('Contents', [])]\n")


def s3py(envs, code, args, log):
    """Run `code` after S3_PRELUDE (boto3 client `s3`, bucket `b`, `keys(prefix)`, positional
    `args`) in the S3 server's venv; its stdout. Arguments must not contain `=`."""
    venv_py = Path(env("IDEMLAKE_S3_VENV", str(REPO / ".venv-s3"))) / "bin" / "python"
    _, _, text = run([venv_py, "-c", S3_PRELUDE + code] + list(args)
                     + [f"{k}={v}" for k, v in envs.items()], log)
    return text


def s3_copy(envs, src, dst):
    """Server-side copy of every object under prefix `src` to `dst` (not idemlake's `_idemlake/`)."""
    text = s3py(envs, (
        "from concurrent.futures import ThreadPoolExecutor\n"
        "src, dst = args\n"
        "todo = [k for k in keys(src) if '/_idemlake' not in k]\n"
        "cp = lambda k: s3.copy_object(Bucket=b, Key=dst + k[len(src):], CopySource={'Bucket': b, 'Key': k})\n"
        "with ThreadPoolExecutor(16) as ex: list(ex.map(cp, todo))\n"
        "print(len(todo))\n"), [src, dst], "s6-copy")
    return int(text.split()[-1])


def s3_log_state(envs, prefix):
    """(latest version, last checkpoint version) of the table whose log is under `prefix`."""
    text = s3py(envs, (
        "names = [k.rsplit('/', 1)[1] for k in keys(args[0])]\n"
        "v = max(int(n.split('.')[0]) for n in names if n.endswith('.json') and n[0].isdigit())\n"
        "c = max([int(n.split('.')[0]) for n in names if '.checkpoint' in n] or [-1])\n"
        "print(v, c)\n"), [prefix], "s6-log")
    v, c = text.split()[-2:]
    return int(v), int(c)


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scenario6(lo, hi):
    say(f"scenario 6: S3 (SeaweedFS on loopback), the 6-column task: load, day window {DAY} plain and with "
        f"{S3_LATENCY_MS} ms per request, {BF_DAYS}-day backfill")
    envs = s3_server()
    os.environ.update(envs)
    bucket = envs["IDEMLAKE_S3_BUCKET"]
    prefix = f"bench-{int(time.time())}"
    lake = f"s3://{bucket}/{prefix}/idemlake"
    table = f"{lake}/{NARROW_TASK}"
    ptable = f"s3://{bucket}/{prefix}/peer/{NARROW_TASK}"
    load = ["backfill", NARROW_TASK, "--from", lo, "--to", hi, "--parallel", PARALLEL]
    secs, rss, text = run(idem(lake, *load), "s6-load")
    check_reports(text, "S3 load")
    record("s6.load", "initial load to S3", "idemlake backfill --parallel " + PARALLEL, secs, rss)
    say(f"  load to S3: {secs:.1f} s")
    n = s3_copy(envs, f"{prefix}/idemlake/{NARROW_TASK}/", f"{prefix}/peer/{NARROW_TASK}/")
    say(f"  peer copy: {n} objects")
    COMMANDS.append(f"AWS_ENDPOINT_URL=<SeaweedFS> idemlake --project P --lake s3://B/L --output json run {NARROW_TASK} --window {DAY}")
    COMMANDS.append(f"AWS_ENDPOINT_URL=<SeaweedFS> python scripts/bench_peer.py window s3://B/peer SOURCE {DAY} --narrow")
    COMMANDS.append(f"scripts/latency-proxy PORT <SeaweedFS host:port> {S3_LATENCY_MS}  # then the same two, through it")

    def day_reps(key, label, env_extra=None):
        for i in range(REPS + 1):
            s_i, r_i, text = run(idem(lake, "run", NARROW_TASK, "--window", DAY), f"{key}-idemlake", env_extra=env_extra)
            check_reports(text, label)
            s_p, r_p, _ = run(peer("window", ptable, SOURCE, DAY, "--narrow"), f"{key}-peer", env_extra=env_extra)
            if i == 0:
                continue
            record(f"{key}.idemlake", label, "idemlake run", s_i, r_i)
            record(f"{key}.peer", label, "polars + write_deltalake", s_p, r_p)
            say(f"  {label}, rep {i}: idemlake {s_i:.2f} s, peer {s_p:.2f} s")

    day_reps("s6.day", "S3 day window")
    # The requests of one more day window, as idemlake counts them (-v), against the log's shape.
    v, cp = s3_log_state(envs, f"{prefix}/idemlake/{NARROW_TASK}/_delta_log/")
    _, _, _ = run(idem(lake, "run", NARROW_TASK, "--window", DAY, verbose=True), "s6-requests")
    err = (LOGS / "s6-requests.err").read_text(errors="replace")
    summary = [l.split("storage requests: ", 1)[1] for l in err.splitlines() if "storage requests: " in l]
    if summary:
        total = int(summary[-1].split()[0])
        after = v - cp
        S6_REQUESTS.update({"total": total, "line": summary[-1], "after": after, "version": v, "checkpoint": cp})
        say(f"  requests of a day window: {summary[-1]} ({after} commit files after the checkpoint)")

    port = free_port()
    upstream = envs["AWS_ENDPOINT_URL"].split("://", 1)[1].rstrip("/")
    proxy = subprocess.Popen([sys.executable, str(REPO / "scripts" / "latency-proxy"), str(port), upstream,
                              str(S3_LATENCY_MS)], stdout=subprocess.PIPE, text=True)
    try:
        proxy.stdout.readline()  # "listening on …"
        day_reps("s6.lat", f"S3 day window, +{S3_LATENCY_MS} ms/request",
                 env_extra={"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"})
    finally:
        proxy.terminate()
        proxy.wait()

    days = [(dt.date(1995, 1, 1) + dt.timedelta(days=d)).isoformat() for d in range(BF_DAYS)]
    args = ["backfill", NARROW_TASK, "--from", days[0], "--to", days[-1], "--parallel", PARALLEL]
    for i in range(BACKFILL_REPS):
        secs, rss, text = run(idem(lake, *args), "s6-backfill")
        check_reports(text, "S3 backfill")
        record("s6.bf.idemlake", f"S3 {BF_DAYS}-day backfill", "idemlake backfill --parallel " + PARALLEL, secs, rss)
        start, peak = time.perf_counter(), 0
        for d in days:
            _, r, _ = run(peer("window", ptable, SOURCE, d, "--narrow"), "s6-bf-peer")
            peak = max(peak, r)
        secs_p = time.perf_counter() - start
        record("s6.bf.peer", f"S3 {BF_DAYS}-day backfill", f"polars + write_deltalake, {BF_DAYS} processes", secs_p, peak)
        say(f"  S3 {BF_DAYS}-day backfill rep {i + 1}: idemlake {secs:.1f} s, peer loop {secs_p:.1f} s")

    NOTES.append(f"Scenario 6: the S3 server is SeaweedFS (`weed mini`) on loopback; the source stays on local "
                 f"disk; the peer's table is a server-side copy of idemlake's, written with AWS_CONDITIONAL_PUT=etag. "
                 f"The latency proxy delays the first bytes of each request by {S3_LATENCY_MS} ms.")
    CHECKS["s6.source"] = checksum("source", SOURCE, lo, hi)
    CHECKS["s6.idemlake"] = checksum("delta", table)
    CHECKS["s6.peer"] = checksum("delta", ptable)
    CHECKS["s6.day.source"] = checksum("source", SOURCE, DAY, DAY)
    CHECKS["s6.day.idemlake"] = checksum("delta", table, DAY, DAY)
    CHECKS["s6.day.peer"] = checksum("delta", ptable, DAY, DAY)
    CHECKS["s6.bf.source"] = checksum("source", SOURCE, days[0], days[-1])
    CHECKS["s6.bf.idemlake"] = checksum("delta", table, days[0], days[-1])
    CHECKS["s6.bf.peer"] = checksum("delta", ptable, days[0], days[-1])


# ---------------------------------------------------------------- scenario 7: the narrow load


def sqlmesh_project(root, lo, hi):
    """A SQLMesh project whose one model is the 6-column task as INCREMENTAL_BY_TIME_RANGE."""
    (root / "models").mkdir(parents=True)
    (root / "config.yaml").write_text(
        "gateways:\n  local:\n    connection:\n      type: duckdb\n"
        f"      database: {root / 'db.duckdb'}\n"
        "default_gateway: local\nmodel_defaults:\n  dialect: duckdb\n")
    (root / "models" / "lineitem_narrow.sql").write_text(f"""MODEL (
  name bench.lineitem_narrow,
  kind INCREMENTAL_BY_TIME_RANGE (time_column ship_date),
  start '{lo}',
  end '{hi}',
  cron '@daily',
  grain (l_orderkey, l_linenumber)
);
SELECT l_orderkey, l_linenumber, l_shipdate AS ship_date, l_extendedprice, l_quantity, l_shipmode
FROM read_parquet('{SOURCE}')
WHERE l_shipdate BETWEEN @start_ds AND @end_ds
""")
    return root


def duckdb_checksum(bin_dir, root, table="bench.lineitem_narrow"):
    code = (
        "import duckdb, json, sys\n"
        "c = duckdb.connect(sys.argv[1], read_only=True)\n"
        "r = c.sql('select count(*), sum(l_extendedprice)::varchar, "
        "sum(l_orderkey::bigint * l_linenumber::bigint)::varchar, count(distinct ship_date) "
        f"from {table}').fetchone()\n"
        "print(json.dumps({'rows': r[0], 'price': r[1], 'keys': r[2], 'days': str(r[3])}))\n")
    _, _, text = run([bin_dir / "python", "-c", code, root / "db.duckdb"], "checksum")
    return json.loads(text.strip().splitlines()[-1])


def dbt_project(root, lo):
    """A dbt project whose model is the 6-column task as a microbatch incremental model
    (`batch_size='day'`) on DuckDB: a view over the source declares `event_time`, so dbt
    filters it to each day's batch."""
    (root / "models").mkdir(parents=True)
    (root / "dbt_project.yml").write_text(
        "name: bench\nversion: '1.0'\nconfig-version: 2\nprofile: bench\nmodel-paths: [models]\n")
    (root / "profiles.yml").write_text(
        "bench:\n  target: dev\n  outputs:\n    dev:\n      type: duckdb\n"
        f"      path: {root / 'db.duckdb'}\n      threads: 1\n")
    (root / "models" / "stg_lineitem.sql").write_text(
        "{{ config(materialized='view', event_time='l_shipdate') }}\n"
        f"SELECT * FROM read_parquet('{SOURCE}')\n")
    (root / "models" / "lineitem_narrow.sql").write_text(f"""{{{{ config(materialized='incremental', incremental_strategy='microbatch',
          event_time='ship_date', batch_size='day', begin='{lo}', lookback=0) }}}}
SELECT l_orderkey, l_linenumber, l_shipdate AS ship_date, l_extendedprice, l_quantity, l_shipmode
FROM {{{{ ref('stg_lineitem') }}}}
""")
    return root


def dbt_run(bin_dir, root, first, last, *select):
    """`dbt run` over the days first..last (dbt's end is exclusive)."""
    end = (dt.date.fromisoformat(last) + dt.timedelta(days=1)).isoformat()
    return [bin_dir / "dbt", "run", "--profiles-dir", root, "--project-dir", root, *select,
            "--event-time-start", first, "--event-time-end", end]


def scenario7(lo, hi):
    say(f"scenario 7: initial load of the 6-column task {lo}..{hi}, {LOAD_REPS} reps")
    bin_dir = ensure_venv(SQLMESH_VENV, SQLMESH_PINS)
    s7 = WORK / "s7"
    s7.mkdir()
    load = ["backfill", NARROW_TASK, "--from", lo, "--to", hi, "--parallel", PARALLEL]
    COMMANDS.append(f"idemlake --project P --lake L --output json {' '.join(load)}")
    COMMANDS.append("python scripts/bench_peer.py floor SOURCE OUT --narrow   # the same 6 columns")
    COMMANDS.append("sqlmesh -p S plan --auto-apply --no-prompts   # S: a fresh project, see sqlmesh_project()")
    for i in range(LOAD_REPS):
        if i > 0:
            for tool in ("idemlake", "floor", "sqlmesh"):
                fresh(s7 / f"{tool}-{i - 1}")
        settle()
        secs, rss, text = run(idem(s7 / f"idemlake-{i}", *load), "s7-idemlake")
        check_reports(text, "narrow load")
        record("s7.idemlake", "initial load, 6 columns", "idemlake backfill --parallel " + PARALLEL, secs, rss)
        settle()
        secs_f, rss_f, _ = run(peer("floor", SOURCE, s7 / f"floor-{i}", "--narrow"), "s7-floor")
        record("s7.floor", "initial load, 6 columns", "polars write_parquet(partition_by)", secs_f, rss_f)
        root = sqlmesh_project(s7 / f"sqlmesh-{i}", lo, hi)
        settle()
        secs_s, rss_s, _ = run([bin_dir / "sqlmesh", "--log-file-dir", LOGS, "-p", root, "plan", "--auto-apply",
                                  "--no-prompts"], "s7-sqlmesh")
        record("s7.sqlmesh", "initial load, 6 columns", "SQLMesh plan (DuckDB)", secs_s, rss_s)
        say(f"  rep {i + 1}: idemlake {secs:.1f} s, floor {secs_f:.1f} s, SQLMesh {secs_s:.1f} s")
    # dbt runs one query per day batch: ~2 minutes for the whole range, so one rep.
    dbt_dir = ensure_venv(DBT_VENV, DBT_PINS)
    droot = dbt_project(s7 / "dbt", lo)
    COMMANDS.append("dbt run --profiles-dir D --project-dir D --event-time-start FROM --event-time-end TO+1   "
                    "# D: a fresh dbt project, see dbt_project()")
    settle()
    secs_d, rss_d, _ = run(dbt_run(dbt_dir, droot, lo, hi), "s7-dbt", env_extra=DBT_ENV)
    record("s7.dbt", "initial load, 6 columns", "dbt run (microbatch, DuckDB)", secs_d, rss_d)
    say(f"  dbt microbatch load: {secs_d:.1f} s")
    i = LOAD_REPS - 1
    CHECKS["s7.source"] = checksum("source", SOURCE, lo, hi)
    CHECKS["s7.dbt"] = duckdb_checksum(dbt_dir, droot, "main.lineitem_narrow")
    CHECKS["s7.idemlake"] = checksum("delta", s7 / f"idemlake-{i}" / NARROW_TASK)
    CHECKS["s7.floor"] = checksum("parquet", s7 / f"floor-{i}")
    CHECKS["s7.sqlmesh"] = duckdb_checksum(bin_dir, s7 / f"sqlmesh-{i}")

    # Re-running windows of the loaded tables (issue 17 §3): one day, then a BF_DAYS-day
    # restatement; SQLMesh's `plan --restate-model … --start --end` deletes and re-inserts the
    # range in one transaction, idemlake replaces each window in its own commit.
    ilake, sroot = s7 / f"idemlake-{i}", s7 / f"sqlmesh-{i}"

    def restate(a, b):
        return [bin_dir / "sqlmesh", "--log-file-dir", LOGS, "-p", sroot, "plan", "--restate-model",
                "bench.lineitem_narrow",
                "--start", a, "--end", b, "--auto-apply", "--no-prompts"]

    COMMANDS.append("sqlmesh -p S plan --restate-model bench.lineitem_narrow --start D --end D "
                    "--auto-apply --no-prompts   # the day re-run; the same with a range for the restatement")
    for r in range(REPS + 1):
        s_i, r_i, text = run(idem(ilake, "run", NARROW_TASK, "--window", DAY), "s7-day-idemlake")
        check_reports(text, "s7 day window")
        s_s, r_s, _ = run(restate(DAY, DAY), "s7-day-sqlmesh")
        s_d, r_d, _ = run(dbt_run(dbt_dir, droot, DAY, DAY, "--select", "lineitem_narrow"), "s7-day-dbt",
                          env_extra=DBT_ENV)
        if r == 0:
            continue
        record("s7.day.idemlake", "day re-run, 6 columns", "idemlake run", s_i, r_i)
        record("s7.day.sqlmesh", "day re-run, 6 columns", "SQLMesh plan --restate-model", s_s, r_s)
        record("s7.day.dbt", "day re-run, 6 columns", "dbt run --event-time-start/--event-time-end", s_d, r_d)
        say(f"  day re-run, rep {r}: idemlake {s_i:.2f} s, SQLMesh {s_s:.2f} s, dbt {s_d:.2f} s")
    first = "1995-01-01"
    last = (dt.date(1995, 1, 1) + dt.timedelta(days=BF_DAYS - 1)).isoformat()
    for r in range(BACKFILL_REPS):
        s_i, r_i, text = run(idem(ilake, "backfill", NARROW_TASK, "--from", first, "--to", last,
                                  "--parallel", PARALLEL), "s7-bf-idemlake")
        check_reports(text, "s7 restatement")
        s_s, r_s, _ = run(restate(first, last), "s7-bf-sqlmesh")
        s_d, r_d, _ = run(dbt_run(dbt_dir, droot, first, last, "--select", "lineitem_narrow"), "s7-bf-dbt",
                          env_extra=DBT_ENV)
        record("s7.bf.idemlake", f"{BF_DAYS}-day restatement, 6 columns",
               "idemlake backfill --parallel " + PARALLEL, s_i, r_i)
        record("s7.bf.sqlmesh", f"{BF_DAYS}-day restatement, 6 columns",
               "SQLMesh plan --restate-model", s_s, r_s)
        record("s7.bf.dbt", f"{BF_DAYS}-day restatement, 6 columns",
               "dbt run --event-time-start/--event-time-end", s_d, r_d)
        say(f"  {BF_DAYS}-day restatement: idemlake {s_i:.2f} s, SQLMesh {s_s:.2f} s, dbt {s_d:.2f} s")
    # After the re-runs both tables must still hold exactly the source's rows.
    CHECKS["s7.after.idemlake"] = checksum("delta", ilake / NARROW_TASK)
    CHECKS["s7.after.sqlmesh"] = duckdb_checksum(bin_dir, sroot)
    CHECKS["s7.after.dbt"] = duckdb_checksum(dbt_dir, droot, "main.lineitem_narrow")
    NOTES.append("Scenario 7: SQLMesh's first plan runs the model's whole range as one batch "
                 "(`INCREMENTAL_BY_TIME_RANGE` without `batch_size`), an INSERT into one DuckDB table in one "
                 "transaction; idemlake publishes one atomic Delta commit per day window (group commits) "
                 "as day-partitioned Parquet, and the floor writes the same partitions without a transaction. "
                 "dbt's microbatch model (`incremental_strategy='microbatch'`, `batch_size='day'`, dbt-duckdb, "
                 "threads 1) runs one delete+insert per day batch into one DuckDB table, each batch its own "
                 "transaction; its source is a view that declares `event_time`, which dbt filters to each batch. "
                 "The dbt load ran once (it takes minutes); its day re-run and restatement name the days with "
                 "`--event-time-start`/`--event-time-end`. SQLMesh and dbt write DuckDB tables, not Delta.")


# ---------------------------------------------------------------- scenario 8: a 10× table


def scenario8():
    data = WORK / f"data-sf{BIG_SCALE}"
    source = data / "lineitem.parquet"
    say(f"scenario 8: day window {DAY} on an SF {BIG_SCALE} table: first runs, then re-runs (retries); "
        f"warm-up + {REPS} reps each")
    if not source.exists():
        say(f"  generating TPC-H SF {BIG_SCALE} into {data}")
        secs, _, _ = run([BIN, "gen-tpch", "--scale", BIG_SCALE, "--out", data], "gen-tpch-big")
        NOTES.append(f"`idemlake gen-tpch --scale {BIG_SCALE}` took {secs:.1f} s in this run.")
    project = WORK / f"project-sf{BIG_SCALE}"
    (project / "tables").mkdir(parents=True)
    shutil.copy(REPO / "tables" / f"{TASK}.toml", project / "tables")
    (project / "data").symlink_to(data)
    lo, hi = first_last_day(source)
    s8 = WORK / "s8"
    big = lambda lake, *a: idem(lake, *a, project=project)
    # The setup, timed: every ship day but DAY, so that each rep's DAY is a first run.
    settle()
    secs, rss, reps = load_without_day(s8 / "base", lo, hi, DAY, "s8-load", project=project)
    record("s8.load", f"initial load, every ship day but {DAY}", "idemlake backfill --parallel " + PARALLEL, secs, rss)
    say(f"  load of every ship day but {DAY}: {secs:.1f} s, peak RSS {rss / 1024:.0f} MiB ({len(reps)} windows)")
    base = s8 / "base" / TASK
    v0, cps = table_version(base)
    COMMANDS.append(f"# scenario 8: the same commands with P, L and SOURCE of TPC-H SF {BIG_SCALE}; first runs on "
                    f"fresh copies of a table loaded with every ship day but {DAY}, then re-runs (retries) on the "
                    "table each tool's last first run left")
    for i in range(REPS + 1):
        first = first_run_state(base, s8 / "first-idemlake")
        s_i, r_i, text = run(big(first.parent, "run", TASK, "--window", DAY), "s8-idemlake")
        check_reports(text, f"SF {BIG_SCALE} day window, first run", statuses=("ok",))
        pfirst = first_run_state(base, s8 / "first-peer")
        s_p, r_p, _ = run(peer("window", pfirst, source, DAY), "s8-peer")
        if i == 0:
            continue  # warm-up
        record("s8.idemlake", "day window, first run", "idemlake run", s_i, r_i)
        record("s8.peer", "day window, first run", "polars + write_deltalake", s_p, r_p)
        say(f"  first run, rep {i}: idemlake {s_i:.2f} s ({r_i / 1024:.0f} MiB), peer {s_p:.2f} s ({r_p / 1024:.0f} MiB)")
    CHECKS["s8.day.source"] = checksum("source", source, DAY, DAY)
    CHECKS["s8.first.day.idemlake"] = checksum("delta", first, DAY, DAY)
    CHECKS["s8.first.day.peer"] = checksum("delta", pfirst, DAY, DAY)
    # Re-runs (retries) of the published window: each tool on the table its last first run left.
    for i in range(REPS + 1):
        s_i, r_i, text = run(big(first.parent, "run", TASK, "--window", DAY), "s8-retry-idemlake")
        check_reports(text, f"SF {BIG_SCALE} day window, re-run")
        s_p, r_p, _ = run(peer("window", pfirst, source, DAY), "s8-retry-peer")
        if i == 0:
            continue  # warm-up
        record("s8.retry.idemlake", "day window, re-run (retry)", "idemlake run", s_i, r_i)
        record("s8.retry.peer", "day window, re-run (retry)", "polars + write_deltalake", s_p, r_p)
        say(f"  re-run (retry), rep {i}: idemlake {s_i:.2f} s ({r_i / 1024:.0f} MiB), peer {s_p:.2f} s")
    src = checksum("source", source)
    NOTES.append(f"Scenario 8: TPC-H SF {BIG_SCALE}, {src['rows']:,} rows in {src['days']} ship days = "
                 f"partitions; every first run, of either tool, started from a fresh copy of a table loaded with "
                 f"every ship day but {DAY} (version {v0}, {cps} checkpoints), made and synced before the timed "
                 "process; the re-runs (retries) ran on the table each tool's last first run left.")
    CHECKS["s8.source"] = src
    CHECKS["s8.idemlake"] = checksum("delta", first)
    CHECKS["s8.peer"] = checksum("delta", pfirst)
    CHECKS["s8.day.idemlake"] = checksum("delta", first, DAY, DAY)
    CHECKS["s8.day.peer"] = checksum("delta", pfirst, DAY, DAY)
    fresh(s8)


# ---------------------------------------------------------------- scenario 9: many workers


def scenario9():
    say(f"scenario 9: 1 and 8 workers on one table, +20 and +60 ms per S3 request, {SCALE_REPS} reps")
    out = WORK / "scale-headline.json"
    run([sys.executable, REPO / "scripts" / "bench_scale.py"], "s9-scale", env_extra={
        "SCALE_WORKERS": "1,8", "SCALE_WORKLOADS": "latency", "SCALE_LATENCY_MS": "20,60",
        "SCALE_REPS": SCALE_REPS, "SCALE_JSON": str(out),
        "SCALE_OUT": str(WORK / "scale-headline.md"), "BENCH_BIN": str(BIN),
        # its own scratch directory (the child wipes it at start), the same TPC-H data
        "BENCH_WORK": str(WORK.parent / (WORK.name + "-scale")), "BENCH_DATA": str(DATA)})
    SCALE_HEADLINE.update(json.loads(out.read_text()))
    COMMANDS.append("SCALE_WORKERS=1,8 SCALE_WORKLOADS=latency make bench-scale  # scenario 9")


# ---------------------------------------------------------------- scenario 10: PostgreSQL


def scenario10():
    say(f"scenario 10: a PostgreSQL source, day window ({PG_REPS} reps), 365-day backfill, a 4-million-row day")
    out = WORK / "postgres-headline.json"
    run([sys.executable, REPO / "scripts" / "bench_postgres.py"], "s10-postgres", env_extra={
        "PG_REPS": PG_REPS, "PG_BACKFILL_REPS": "1", "PG_BIG_REPS": "1", "PG_JSON": str(out),
        "PG_OUT": str(WORK / "postgres-headline.md"), "BENCH_BIN": str(BIN),
        "PG_WORK": str(WORK.parent / (WORK.name + "-pg"))})
    PG_HEADLINE.update(json.loads(out.read_text()))
    COMMANDS.append("make bench-postgres  # scenario 10 (PG_BACKFILL_REPS=1 PG_BIG_REPS=1)")


def pg_rows():
    return [f"| {r['label']} | {r['idemlake_s']:.2f} s | {r['peer_s']:.2f} s | {r['idemlake_s'] / r['peer_s']:.2f}× "
            f"| {r['idemlake_rss_mib']:.0f} MiB | {r['peer_rss_mib']:.0f} MiB | {r['reps']} | {r['tables']} |"
            for r in PG_HEADLINE.values()]


def scale_rows():
    rows = []
    for key, wl in sorted(SCALE_HEADLINE.items(), key=lambda kv: kv[1]["latency_ms"]):
        one, eight = wl["by_workers"].get("1"), wl["by_workers"].get("8")
        if not one or not eight:
            continue
        rows.append(f"| +{wl['latency_ms']} ms | {one['windows_per_s']:.0f} | {eight['windows_per_s']:.0f} "
                    f"| {eight['windows_per_s'] / one['windows_per_s']:.2f}× | {one['p99_ms'] / 1000:.1f} s → "
                    f"{eight['p99_ms'] / 1000:.1f} s | {100 * one['cpu']:.0f} % → {100 * eight['cpu']:.0f} % |")
    return rows


# ---------------------------------------------------------------- report


def short(c):
    h = hashlib.sha1(f"{c['rows']}|{c['price']}|{c['keys']}".encode()).hexdigest()[:8]
    return h


def same(a, b):
    return all(CHECKS[a][k] == CHECKS[b][k] for k in ("rows", "price", "keys"))


def cs_cell(key, ref):
    if key not in CHECKS:
        return "—"
    c = CHECKS[key]
    ok = "= source" if same(key, ref) else "**≠ source**"
    return f"{c['rows']:,} · `{short(c)}` {ok}"


def machine():
    cpu = "?"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem = "?"
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal"):
            mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    return f"{os.cpu_count()} CPUs (nproc), {mem} memory, CPU model `{cpu}`, Linux {platform.release()}"


def versions():
    out = subprocess.run([str(BIN), "--version"], capture_output=True, text=True).stdout.strip()
    py = subprocess.run([str(PY), "-c", (
        "import sys,polars,deltalake,pyarrow,datafusion;"
        "print(f'Python {sys.version.split()[0]}, polars {polars.__version__}, deltalake "
        "{deltalake.__version__}, pyarrow {pyarrow.__version__}, datafusion {datafusion.__version__}')")],
        capture_output=True, text=True).stdout.strip()
    rustc = subprocess.run(["rustc", "--version"], capture_output=True, text=True).stdout.strip()
    profile = os.environ.get("BENCH_PROFILE") or next(
        (p for p in ("release", "dist", "profiling") if p in BIN.parts), None)
    build = f"{profile} build" if profile else "**not an optimised build**"
    return f"{out} ({build}, `{BIN}`), {rustc}; {py}"


def target_rows():
    rows = []

    def add(name, have, value, ok, gap):
        if have:
            rows.append(f"| {name} | {value} | {'met' if ok else '**not met**'} | {gap} |")

    if "s2.idemlake" in RESULTS:
        r = med("s2.idemlake") / med("s2.peer")
        add("day window, first run (never run before, every check computed), ≤ 0.5× the Python peer's first run",
            True, f"{r:.2f}×", r <= 0.5,
            "—" if r <= 0.5 else f"needs {r / 0.5:.1f}× faster ({med('s2.idemlake'):.2f} s → ≤ {0.5 * med('s2.peer'):.2f} s)")
    if "s3.idemlake" in RESULTS:
        r = med("s3.peer") / med("s3.idemlake")
        add(f"{BF_DAYS}-day backfill ≥ 5× faster than the peer's loop", True, f"{r:.1f}× faster", r >= 5,
            "—" if r >= 5 else f"needs {5 / r:.1f}× faster ({med('s3.idemlake'):.0f} s → ≤ {med('s3.peer') / 5:.0f} s)")
    if "s1.idemlake" in RESULTS:
        r = med("s1.idemlake") / med("s1.floor")
        add("initial load ≤ 1.25× the no-transaction floor", True, f"{r:.1f}×", r <= 1.25,
            "—" if r <= 1.25 else f"needs {r / 1.25:.1f}× faster ({med('s1.idemlake'):.0f} s → ≤ {1.25 * med('s1.floor'):.1f} s)")
    k = f"s4.{HISTORY}.idemlake"
    if k in RESULTS:
        r = med(k) / med("s4.10.idemlake")
        add(f"day window after {HISTORY} commits ≤ 1.5× after 10", True, f"{r:.2f}×", r <= 1.5,
            "—" if r <= 1.5 else f"{r / 1.5:.2f}× over")
    for key, what in (("s6.day", "S3 day window re-run (retry)"),
                      ("s6.lat", f"S3 day window re-run (retry), +{S3_LATENCY_MS} ms per request")):
        if f"{key}.idemlake" in RESULTS:
            r = med(f"{key}.idemlake") / med(f"{key}.peer")
            add(f"{what} ≤ 0.5× the Python peer", True, f"{r:.2f}×", r <= 0.5,
                "—" if r <= 0.5 else f"needs {r / 0.5:.2f}× faster ({med(f'{key}.idemlake'):.2f} s → ≤ {0.5 * med(f'{key}.peer'):.2f} s)")
    if S6_REQUESTS:
        q = S6_REQUESTS
        limit = 20 + q["after"]
        add("S3 day window re-run (retry) ≤ 20 requests + 1 per commit file after the checkpoint", True,
            f"{q['total']} requests, {q['after']} commit files after the checkpoint", q["total"] <= limit,
            "—" if q["total"] <= limit else f"{q['total'] - limit} over")
    if "s6.bf.idemlake" in RESULTS:
        r = med("s6.bf.peer") / med("s6.bf.idemlake")
        add(f"S3 {BF_DAYS}-day backfill ahead of the peer's loop", True, f"{r:.1f}× faster", r > 1, "—" if r > 1 else "behind")
    if "s7.idemlake" in RESULTS:
        r = med("s7.idemlake") / med("s7.floor")
        add("initial load, 6 columns, ≤ 1.25× its floor", True, f"{r:.2f}×", r <= 1.25,
            "—" if r <= 1.25 else f"needs {r / 1.25:.2f}× faster ({med('s7.idemlake'):.1f} s → ≤ {1.25 * med('s7.floor'):.1f} s)")
        r = med("s7.idemlake") / med("s7.sqlmesh")
        add("initial load, 6 columns, faster than SQLMesh on DuckDB", True, f"{r:.2f}×", r < 1,
            "—" if r < 1 else f"needs {r:.2f}× faster ({med('s7.idemlake'):.1f} s → < {med('s7.sqlmesh'):.1f} s)")
    if "s7.idemlake" in RESULTS and "s7.dbt" in RESULTS:
        r = med("s7.idemlake") / med("s7.dbt")
        add("initial load, 6 columns, faster than dbt (microbatch) on DuckDB", True, f"{r:.2f}×", r < 1,
            "—" if r < 1 else f"needs {r:.2f}× faster")
    for key, what in (("s7.day", "day re-run"), ("s7.bf", f"{BF_DAYS}-day restatement")):
        for peer_key, peer_name in (("sqlmesh", "SQLMesh"), ("dbt", "dbt")):
            if f"{key}.idemlake" in RESULTS and f"{key}.{peer_key}" in RESULTS:
                r = med(f"{key}.idemlake") / med(f"{key}.{peer_key}")
                add(f"{what}, 6 columns, faster than {peer_name}", True, f"{r:.2f}×", r < 1,
                    "—" if r < 1 else f"needs {r:.2f}× faster")
    if "s2.idemlake" in RESULTS:
        peak = stats("s2.idemlake", 1)[2] / 1024
        add(f"peak RSS of a day window's first run < 512 MiB (SF {SCALE})", True, f"{peak:.0f} MiB (max of reps)",
            peak < 512, "—" if peak < 512 else f"{peak - 512:.0f} MiB over")
    if "s8.idemlake" in RESULTS:
        r = med("s8.idemlake") / med("s8.peer")
        add(f"day window on the SF {BIG_SCALE} table, first run (never run before, every check computed), "
            "≤ 1.0× the Python peer's first run", True, f"{r:.2f}×",
            r <= 1, "—" if r <= 1 else f"needs {r:.2f}× faster ({med('s8.idemlake'):.2f} s → ≤ {med('s8.peer'):.2f} s)")
        big = stats("s8.idemlake", 1)[2] / 1024
        if "s2.idemlake" in RESULTS:
            small = stats("s2.idemlake", 1)[2] / 1024
            g = big / small
            add(f"peak RSS of a day window's first run flat with table size: SF {BIG_SCALE} ≤ 1.5× SF {SCALE}", True,
                f"{big:.0f} MiB vs {small:.0f} MiB = {g:.2f}× (max of reps)", g <= 1.5,
                "—" if g <= 1.5 else f"{g / 1.5:.2f}× over")
    for key, wl in sorted(SCALE_HEADLINE.items(), key=lambda kv: kv[1]["latency_ms"]):
        one, eight = wl["by_workers"].get("1"), wl["by_workers"].get("8")
        if one and eight:
            r = eight["windows_per_s"] / one["windows_per_s"]
            add(f"8 workers on one table ≥ 2.5× the windows/s of one, +{wl['latency_ms']} ms per request",
                True, f"{r:.2f}×", r >= 2.5, "—" if r >= 2.5 else f"needs {2.5 / r:.2f}× more")
            if wl["latency_ms"] == 20:
                w = one["windows_per_s"]
                add("one worker ≥ 45 windows/s at +20 ms per request", True, f"{w:.0f} windows/s", w >= 45,
                    "—" if w >= 45 else f"{45 - w:.0f} windows/s short")
    return rows


def report(total, partial=False):
    src = CHECKS["source"]
    L = []
    L.append("# idemlake benchmark results\n")
    L.append(f"Generated by `make bench` (`scripts/bench.py`) on {dt.date.today().isoformat()}; "
             f"total run time {total / 60:.1f} min." + (" **Partial: the run was still going.**" if partial else "") + "\n")
    L.append(f"- Machine: {machine()}")
    L.append(f"- Versions: {versions()}")
    L.append(f"- Data: TPC-H lineitem SF {SCALE} from `idemlake gen-tpch --scale {SCALE}`: "
             f"{src['rows']:,} rows, {src['days']} ship days = partitions; 15 columns written by every tool "
             "(6 in scenarios 6 and 7, the narrow task)" + (f"; scenario 8 uses SF {BIG_SCALE}." if 8 in SCENARIOS else "."))
    L.append(f"- Reps: every cell is the median (min–max, n reps) of whole-process wall times; tools "
             f"alternate rep by rep. Scenarios 2, 4 and 8: one warm-up per tool, then BENCH_REPS={REPS} "
             "for the first runs and again for the re-runs (scenario 2 re-runs in the same rep as its first runs, "
             "scenario 8 in a second loop). "
             f"Scenario 1: BENCH_LOAD_REPS={LOAD_REPS} (" + ("warm-up: one rep of each peer and a 30-day idemlake "
             "backfill" if LOAD_WARMUP else "no warm-up: BENCH_LOAD_WARMUP=0") + f"; each scenario-1 run starts "
             f"≥ {SETTLE:g} s after the script last deleted files, BENCH_SETTLE — see settle()). "
             f"Scenario 3: BENCH_BACKFILL_REPS={BACKFILL_REPS} (scenario 2's runs are its warm-up) "
             "— fewer reps because one rep of the idemlake load or of the peer's per-window process loop takes minutes.")
    dev = [f"{k}={v}" for k, v, d in (("BENCH_LOAD_REPS", LOAD_REPS, 1), ("BENCH_BACKFILL_DAYS", BF_DAYS, 365),
                                      ("BENCH_HISTORY", HISTORY, 1000), ("BENCH_REPS", REPS, 5),
                                      ("BENCH_BACKFILL_REPS", BACKFILL_REPS, 1), ("BENCH_PARALLEL", PARALLEL, "4"),
                                      ("BENCH_LOAD_RANGE", env("BENCH_LOAD_RANGE", ""), ""))
           if str(v) != str(d)]
    if dev:
        L.append(f"- **Not the default scenario sizes**: {', '.join(dev)} (defaults: 1 load rep, a 365-day "
                 "backfill, 1,000 commits, 5 reps, --parallel 4, the whole table).")
    L.append("- Checksum: rows · first 8 hex digits of sha1(count | sum(l_extendedprice) | "
             "sum(l_orderkey*l_linenumber)) of what was published, read back with polars "
             "(`scan_delta`, i.e. the deltalake reader, or `scan_parquet` for Parquet outputs), "
             "compared with the same sums over the source rows of the range. Full values at the end.\n")
    L.append("## Headline: the nightly first run\n")
    L.append(f"A day window never run before, nothing reusable from an earlier run: each rep of either tool "
             f"starts from a fresh copy of a table loaded with every ship day but {DAY}; idemlake computes every "
             "check in the run that reports it. Re-runs of a published window are retries: they follow in the "
             "results, labelled.\n")
    for key, scale in (("s2", SCALE), ("s8", BIG_SCALE)):
        if f"{key}.idemlake" in RESULTS and f"{key}.peer" in RESULTS:
            line = (f"- SF {scale}, day window {DAY}, first run: idemlake {fmt_t(f'{key}.idemlake')}, polars + "
                    f"write_deltalake {fmt_t(f'{key}.peer')}: **{med(f'{key}.idemlake') / med(f'{key}.peer'):.2f}×** the peer")
            if f"{key}.retry.idemlake" in RESULTS and f"{key}.retry.peer" in RESULTS:
                line += (f" (re-run, a retry: {fmt_t(f'{key}.retry.idemlake')} vs {fmt_t(f'{key}.retry.peer')}, "
                         f"{med(f'{key}.retry.idemlake') / med(f'{key}.retry.peer'):.2f}×)")
            L.append(line + ".")
    L.append("\n## Results\n")
    L.append("| # | scenario | idemlake | peer | peer time | idemlake / peer | rows · checksum (idemlake) | rows · checksum (peer) |")
    L.append("|---|---|---|---|---|---|---|---|")

    def row(n, scen, ik, pk, pname, ick, pck, ref, pref=None):
        if ik not in RESULTS or pk not in RESULTS:
            return
        ratio = med(ik) / med(pk)
        L.append(f"| {n} | {scen} | {fmt_t(ik)} | {pname} | {fmt_t(pk)} | {ratio:.2f} | "
                 f"{cs_cell(ick, ref)} | {cs_cell(pck, pref or ref)} |")

    row(1, "initial load, whole table", "s1.idemlake", "s1.floor", "(b) polars write_parquet(partition_by) — floor",
        "s1.idemlake", "s1.floor", "s1.source", "source")
    row(1, "initial load, whole table", "s1.idemlake", "s1.dfcopy", "(c) DataFusion COPY … PARTITIONED BY",
        "s1.idemlake", "s1.dfcopy", "s1.source", "source")
    row(1, "initial load, whole table", "s1.idemlake", "s1.dfserial", "(c') the same, allow_single_file_parallelism=false",
        "s1.idemlake", "s1.dfserial", "s1.source", "source")
    row(1, "initial load, whole table", "s1.idemlake", "s1.deltaload", "write_deltalake, whole table in 1 commit",
        "s1.idemlake", "s1.deltaload", "s1.source", "source")
    row(7, "initial load, 6 columns", "s7.idemlake", "s7.floor", "(b) polars write_parquet(partition_by), 6 columns — floor",
        "s7.idemlake", "s7.floor", "s7.source")
    row(7, "initial load, 6 columns", "s7.idemlake", "s7.sqlmesh", "SQLMesh 0.236 plan, INCREMENTAL_BY_TIME_RANGE on DuckDB 1.4.4",
        "s7.idemlake", "s7.sqlmesh", "s7.source")
    row(7, "initial load, 6 columns", "s7.idemlake", "s7.dbt",
        "dbt-core 1.11 run, microbatch (day batches) on DuckDB 1.4.4", "s7.idemlake", "s7.dbt", "s7.source")
    row(7, f"day re-run {DAY}, 6 columns, loaded table", "s7.day.idemlake", "s7.day.sqlmesh",
        "SQLMesh plan --restate-model (one day)", "s7.after.idemlake", "s7.after.sqlmesh", "s7.source")
    row(7, f"day re-run {DAY}, 6 columns, loaded table", "s7.day.idemlake", "s7.day.dbt",
        "dbt run --event-time-start D --event-time-end D+1", "s7.after.idemlake", "s7.after.dbt", "s7.source")
    row(7, f"{BF_DAYS}-day restatement (from 1995-01-01), 6 columns", "s7.bf.idemlake", "s7.bf.sqlmesh",
        f"SQLMesh plan --restate-model ({BF_DAYS} days)", "s7.after.idemlake", "s7.after.sqlmesh", "s7.source")
    row(7, f"{BF_DAYS}-day restatement (from 1995-01-01), 6 columns", "s7.bf.idemlake", "s7.bf.dbt",
        f"dbt run over {BF_DAYS} days (day batches)", "s7.after.idemlake", "s7.after.dbt", "s7.source")
    row(2, f"day window {DAY}, **first run** (never run before; table with every other day), every check computed",
        "s2.idemlake", "s2.peer", "(a) polars + write_deltalake(predicate), first run on the same state",
        "s2.first.day.idemlake", "s2.first.day.peer", "s2.day.source")
    row(2, f"day window {DAY}, re-run (retry) of a published window, loaded table", "s2.retry.idemlake",
        "s2.retry.peer", "(a) polars + write_deltalake(predicate), re-run", "s2.day.idemlake", "s2.day.peer",
        "s2.day.source")
    row(3, f"{BF_DAYS}-day backfill (from 1995-01-01)", "s3.idemlake", "s3.peer", f"(a) loop of {BF_DAYS} processes",
        "s3.idemlake", "s3.peer", "s3.source")
    for stage in ("10", str(HISTORY)):
        row(4, f"day window re-run (retry), 10-day table, {stage} commits", f"s4.{stage}.idemlake", f"s4.{stage}.peer",
            "(a) polars + write_deltalake(predicate)", f"s4.{stage}.idemlake", f"s4.{stage}.peer", "s4.source")
    row(6, f"S3, 6 columns: day window {DAY}, re-run (retry)", "s6.day.idemlake", "s6.day.peer", "(a) polars + write_deltalake(predicate)",
        "s6.day.idemlake", "s6.day.peer", "s6.day.source")
    row(6, f"S3 +{S3_LATENCY_MS} ms/request, 6 columns: day window {DAY}, re-run (retry)", "s6.lat.idemlake", "s6.lat.peer",
        "(a) polars + write_deltalake(predicate)", "s6.day.idemlake", "s6.day.peer", "s6.day.source")
    row(6, f"S3, 6 columns: {BF_DAYS}-day backfill (from 1995-01-01)", "s6.bf.idemlake", "s6.bf.peer", f"(a) loop of {BF_DAYS} processes",
        "s6.bf.idemlake", "s6.bf.peer", "s6.bf.source")
    if "s6.load" in RESULTS:
        L.append(f"| 6 | S3, 6 columns: initial load | {fmt_t('s6.load')} | | | | {cs_cell('s6.idemlake', 's6.source')} | "
                 f"{cs_cell('s6.peer', 's6.source')} (a server-side copy of idemlake's table) |")
    if "s2.idemlake" in RESULTS:
        ri, rp = med("s2.idemlake", 1), med("s2.peer", 1)
        L.append(f"| 5 | peak RSS, day window first run (SF {SCALE}) | {fmt_rss('s2.idemlake')} | (a) polars + write_deltalake "
                 f"| {fmt_rss('s2.peer')} | {ri / rp:.2f} | | |")
    row(8, f"SF {BIG_SCALE}: day window {DAY}, **first run** (never run before; table with every other day), "
        "every check computed", "s8.idemlake", "s8.peer",
        "(a) polars + write_deltalake(predicate), first run on the same state",
        "s8.first.day.idemlake", "s8.first.day.peer", "s8.day.source")
    row(8, f"SF {BIG_SCALE}: day window {DAY}, re-run (retry) of a published window", "s8.retry.idemlake",
        "s8.retry.peer", "(a) polars + write_deltalake(predicate), re-run", "s8.day.idemlake", "s8.day.peer",
        "s8.day.source")
    if "s8.idemlake" in RESULTS:
        ri, rp = med("s8.idemlake", 1), med("s8.peer", 1)
        L.append(f"| 8 | peak RSS, day window first run (SF {BIG_SCALE}) | {fmt_rss('s8.idemlake')} | (a) polars + "
                 f"write_deltalake | {fmt_rss('s8.peer')} | {ri / rp:.2f} | | |")
    if "s8.load" in RESULTS:
        L.append(f"| 8 | SF {BIG_SCALE}: initial load of every ship day but {DAY} (the scenario's setup, no peer) | "
                 f"{fmt_t('s8.load')}, peak RSS {stats('s8.load', 1)[2] / 1024:.0f} MiB | | | | "
                 f"{cs_cell('s8.idemlake', 's8.source')} (after the day's runs) | "
                 f"{cs_cell('s8.peer', 's8.source')} (after the day's runs) |")
    if S6_REQUESTS:
        q = S6_REQUESTS
        L.append(f"\nS3 requests of one idemlake re-run (retry) of the day window (its `-v` summary; table at version {q['version']}, "
                 f"checkpoint at {q['checkpoint']}): {q['line']}.")
    if f"s4.{HISTORY}.idemlake" in RESULTS:
        a = med(f"s4.{HISTORY}.idemlake") / med("s4.10.idemlake")
        b = med(f"s4.{HISTORY}.peer") / med("s4.10.peer")
        L.append(f"\nHistory growth (scenario 4), time after {HISTORY} commits / after 10: idemlake "
                 f"{a:.2f}×, peer {b:.2f}×. " + "; ".join(
                     f"{s} commits: idemlake table {RESULTS[f's4.{s}.idemlake']['note']}" for s in ("10", str(HISTORY))) + ".")
    if "s1.idemlake" in RESULTS:
        L.append("\nPeak RSS in scenario 1: " + ", ".join(
            f"{RESULTS[k]['tool']} {stats(k, 1)[2] / 1024:.0f} MiB"
            for k in ("s1.idemlake", "s1.floor", "s1.dfcopy", "s1.dfserial", "s1.deltaload")) + ".")
    if SCALE_HEADLINE:
        L.append("\n## Many workers, one table, a remote store (scenario 9)\n")
        L.append("365 day windows of the 6-column task (SF 0.01) into one table on SeaweedFS behind the latency "
                 f"proxy, split with `backfill --shard I/N` over 1 or 8 processes; medians of {SCALE_REPS} reps, "
                 "every window checked against the source with polars. CPU: the busy share of both cores over the "
                 "run. The full tables (2 and 4 workers, requests, rebuilt commits) come from `make bench-scale` "
                 "(bench/SCALE.md).\n")
        L.append("| added latency | windows/s, 1 worker | windows/s, 8 workers | 8 / 1 | window p99, 1 → 8 | CPU, 1 → 8 |")
        L.append("|---|---|---|---|---|---|")
        L.extend(scale_rows())
    if PG_HEADLINE:
        L.append("\n## A PostgreSQL source (scenario 10)\n")
        L.append("First runs from a 10-million-row `orders` table (index on `created_at`) on the loopback server, "
                 "against polars `read_database_uri` + deltalake `write_deltalake` (the backfill's peer: one process "
                 "looping over the days); medians; peak RSS of the process; every idemlake table compared with "
                 "the peer's. The history is in bench/POSTGRES.md (`make bench-postgres`).\n")
        L.append("| scenario | idemlake | peer | ratio | idemlake RSS | peer RSS | reps | tables |")
        L.append("|---|---|---|---|---|---|---|---|")
        L.extend(pg_rows())
    L.append("\n## Targets\n")
    L.append("| target | measured (medians) | status | gap |")
    L.append("|---|---|---|---|")
    L.extend(target_rows())
    L.append("\n## Observations\n")
    L.extend(f"- {n}" for n in NOTES)
    L.append("\n## Commands\n")
    L.append("Run: `make bench` (builds `cargo build --release --bin idemlake`, then "
             f"`python3 scripts/bench.py`); knobs as environment variables, see the docstring of "
             f"`scripts/bench.py`. This run: BENCH_SCALE={SCALE} BENCH_REPS={REPS} BENCH_LOAD_REPS={LOAD_REPS} "
             f"BENCH_BACKFILL_REPS={BACKFILL_REPS} BENCH_PARALLEL={PARALLEL} BENCH_HISTORY={HISTORY} BENCH_DAY={DAY}. "
             "P is a project holding a copy of `tables/lineitem_by_ship_day.toml` and `data/` (the generated "
             "TPC-H files), L a fresh lake directory; the Python side runs in `.venv-bench`.\n")
    L.append("```")
    L.extend(COMMANDS)
    L.append("```\n")
    L.append("## Checksums\n")
    L.append("| what | rows | sum(l_extendedprice) | sum(l_orderkey*l_linenumber) | days | table version |")
    L.append("|---|---|---|---|---|---|")
    for k, c in CHECKS.items():
        L.append(f"| {k} | {c['rows']:,} | {c['price']} | {c['keys']} | {c['days']} | {c.get('version', '')} |")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("\n".join(L) + "\n")
    say(f"wrote {OUT}")


def main():
    say(f"binary {BIN}, SF {SCALE}, work {WORK}")
    setup()
    lo, hi = first_last_day()
    if env("BENCH_LOAD_RANGE", ""):
        lo, hi = env("BENCH_LOAD_RANGE", "").split("..")
        NOTES.append(f"BENCH_LOAD_RANGE={lo}..{hi}: scenario 1 loaded only these days (not the whole table).")
    table = ptable = None
    # scenario 4 first: it needs no loaded table; the report is rewritten after every scenario
    if 4 in SCENARIOS:
        scenario4()
        report(time.monotonic() - T0, partial=True)
    if 1 in SCENARIOS:
        table = scenario1(lo, hi)
        report(time.monotonic() - T0, partial=True)
    if table is not None and SCENARIOS & {2, 3, 5}:
        ptable = scenario2(table, lo, hi)
        report(time.monotonic() - T0, partial=True)
    if ptable is not None and 3 in SCENARIOS:
        scenario3(table, ptable)
        report(time.monotonic() - T0, partial=True)
    if 7 in SCENARIOS:
        scenario7(lo, hi)
        report(time.monotonic() - T0, partial=True)
    if 6 in SCENARIOS:
        scenario6(lo, hi)
        report(time.monotonic() - T0, partial=True)
    if 8 in SCENARIOS:
        scenario8()
        report(time.monotonic() - T0, partial=True)
    if 9 in SCENARIOS:
        scenario9()
        report(time.monotonic() - T0, partial=True)
    if 10 in SCENARIOS:
        scenario10()
    report(time.monotonic() - T0)
    if not KEEP:
        for p in WORK.iterdir():
            if p.name not in ("logs",) and not p.name.startswith("data-") and p != DATA:
                shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()


if __name__ == "__main__":
    try:
        main()
    except Failed as e:
        print(f"bench: FAILED: {e}", file=sys.stderr)
        sys.exit(1)
