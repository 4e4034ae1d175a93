#!/usr/bin/env python3
"""PostgreSQL source benchmark: idemlake vs the Python a user would write, side by side.

An `orders` table of PG_ROWS rows (default 10,000,000) spread evenly over 365 days of 2025
(UTC), with an index on `created_at`, on the loopback server of scripts/pg-server. Two
scenarios, first runs only (every rep writes a table that does not exist yet), reps alternating
A B A B, medians and peak RSS (the process's, /usr/bin/time):

  1  a nightly day window (2025-06-15): `idemlake run` vs polars `read_database_uri` of the
     day's rows + deltalake `write_deltalake` (one process);
  2  a 365-day backfill: `idemlake backfill --parallel 4` vs one Python process looping over
     the days, each read with `read_database_uri` and written with `write_deltalake`;
  3  a window too large to hold comfortably: one day of PG_BIG_ROWS rows (default 4,000,000,
     a table of its own, `orders_bench_big_<rows>`), as scenario 1 — its peak RSS is the
     figure (idemlake streams the rows; the peer holds the window in memory).

Every idemlake table is compared with the peer's (rows and sum of amount per day) on the last
rep. Appends to bench/POSTGRES.md. Knobs: PG_SCENARIOS (day,backfill,big), PG_OUT (the report, appended to), PG_JSON (also
write the medians there, for `make bench`), PG_ROWS, PG_BIG_ROWS, PG_REPS (3), PG_BACKFILL_REPS (2), PG_BIG_REPS (2),
BENCH_BIN (target/release/idemlake), PG_WORK (/tmp/idemlake-bench-pg).
"""
import datetime as dt
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ROWS = int(os.environ.get("PG_ROWS", "10000000"))
REPS = int(os.environ.get("PG_REPS", "3"))
BACKFILL_REPS = int(os.environ.get("PG_BACKFILL_REPS", "2"))
TARGET = os.environ.get("CARGO_TARGET_DIR", str(REPO / "target"))
BIN = os.environ.get("BENCH_BIN", f"{TARGET}/release/idemlake")
WORK = Path(os.environ.get("PG_WORK", "/tmp/idemlake-bench-pg"))
PY = str(REPO / ".venv-py/bin/python")
TABLE = f"orders_bench_{ROWS}"
BIG_ROWS = int(os.environ.get("PG_BIG_ROWS", "4000000"))
BIG_REPS = int(os.environ.get("PG_BIG_REPS", "2"))
BIG_TABLE = f"orders_bench_big_{BIG_ROWS}"
SCENARIOS = os.environ.get("PG_SCENARIOS", "day,backfill,big").split(",")
DAY = "2025-06-15"


def sh(cmd, env=None, check=True):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if check and r.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r


def pg_env():
    sh([str(REPO / "scripts/pg-server"), "start"])
    out = sh([str(REPO / "scripts/pg-server"), "env"]).stdout
    env = {}
    for line in out.splitlines():
        k, v = line.removeprefix("export ").split("=", 1)
        env[k] = v.strip("'")
    return env


def psql(sql):
    return sh([str(REPO / "scripts/pg-server"), "psql", "-Atq", "-c", sql]).stdout.strip()


def ensure_table(table=TABLE, rows=ROWS, start="2025-01-01", seconds=365 * 86400):
    """`table` of `rows` rows spread evenly over `seconds` from `start` (UTC), made if missing;
    the seconds it took (0 when it was there)."""
    have = psql(f"SELECT to_regclass('public.{table}') IS NOT NULL")
    if have == "t":
        return 0.0
    t0 = time.monotonic()
    step = seconds / rows
    psql(
        f"CREATE TABLE {table} (id bigint PRIMARY KEY, customer text, amount numeric(12,2), "
        f"created_at timestamptz NOT NULL, status text); "
        f"INSERT INTO {table} SELECT i, 'c' || (i % 9973), round((i % 100000) * 0.37, 2), "
        f"timestamptz '{start} 00:00:00+00' + (i * {step}) * interval '1 second', "
        f"CASE WHEN i % 3 = 0 THEN 'paid' ELSE 'open' END FROM generate_series(0, {rows - 1}) i; "
        f"CREATE INDEX ON {table} (created_at); ANALYZE {table}"
    )
    return time.monotonic() - t0


TASK = """
sql = \"\"\"
SELECT id, customer, amount, created_at, CAST(created_at AS DATE) AS day, status
FROM orders
WHERE created_at >= $window_start_ts AND created_at < $window_end_ts
\"\"\"

[target]
partition_by = "day"

[window]
grain = "day"
timezone = "UTC"

[sources.orders]
format = "postgres"
uri = "{uri}"
table = "public.{table}"
"""

PEER = r"""
import datetime as dt, sys, polars as pl
from deltalake import write_deltalake
uri, table, out, first, days = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
d0 = dt.date.fromisoformat(first)
for k in range(days):
    lo, hi = d0 + dt.timedelta(days=k), d0 + dt.timedelta(days=k + 1)
    df = pl.read_database_uri(
        f"SELECT id, customer, amount, created_at, status FROM public.{table} "
        f"WHERE created_at >= '{lo}T00:00:00Z' AND created_at < '{hi}T00:00:00Z'", uri)
    df = df.with_columns(pl.col("created_at").dt.date().alias("day"))
    write_deltalake(out, df.to_arrow(), mode="append", partition_by=["day"])
"""

CHECK = r"""
import sys, polars as pl
a = pl.read_delta(sys.argv[1]).group_by("day").agg(pl.len(), pl.col("amount").cast(pl.Float64).sum().round(2)).sort("day")
b = pl.read_delta(sys.argv[2]).group_by("day").agg(pl.len(), pl.col("amount").cast(pl.Float64).sum().round(2)).sort("day")
print("equal" if a.equals(b) else f"DIFFER\n{a}\n{b}")
"""


def timed(cmd, env):
    t0 = time.monotonic()
    r = sh(["/usr/bin/time", "-f", "RSS %M"] + cmd, env=env)
    secs = time.monotonic() - t0
    rss = int([l for l in r.stderr.splitlines() if l.startswith("RSS ")][-1].split()[1])
    return secs, rss / 1024


def main():
    if not Path(BIN).exists():
        raise SystemExit(f"no binary at {BIN}: cargo build --release (or set BENCH_BIN)")
    env = dict(os.environ, **pg_env())
    made = ensure_table() if {"day", "backfill"} & set(SCENARIOS) else 0.0
    made_big = ensure_table(BIG_TABLE, BIG_ROWS, DAY, 86400) if "big" in SCENARIOS else 0.0
    pw_uri = f"postgresql://{env['PGUSER']}:{env['PGPASSWORD']}@{env['PGHOST']}:{env['PGPORT']}/{env['PGDATABASE']}"
    shutil.rmtree(WORK, ignore_errors=True)
    (WORK / "project/tables").mkdir(parents=True)
    (WORK / "project/tables/orders_daily.toml").write_text(
        TASK.format(uri=env["IDEMLAKE_PG_URL"], table=TABLE))
    (WORK / "project/tables/orders_big.toml").write_text(
        TASK.format(uri=env["IDEMLAKE_PG_URL"], table=BIG_TABLE))
    results = {}

    def scenario(key, idem_args, days, first, reps, table=TABLE):
        name = idem_args[1]
        for rep in range(reps):
            for tool in ("idemlake", "peer"):
                out = WORK / f"{key}-{tool}-{rep}"
                if tool == "idemlake":
                    cmd = [BIN, "--project", str(WORK / "project"), "--lake", str(out), "--output", "json"] + idem_args
                else:
                    cmd = [PY, "-c", PEER, pw_uri, table, str(out / name), first, str(days)]
                secs, rss = timed(cmd, env)
                results.setdefault((key, tool), []).append((secs, rss))
                print(f"{key} {tool} rep {rep}: {secs:.2f} s, {rss:.0f} MiB", file=sys.stderr)
        last = reps - 1
        ok = sh([PY, "-c", CHECK, str(WORK / f"{key}-idemlake-{last}/{name}"),
                 str(WORK / f"{key}-peer-{last}/{name}")]).stdout.strip()
        results[(key, "check")] = ok
        if ok != "equal":
            raise SystemExit(f"{key}: idemlake and the peer disagree: {ok}")

    if "day" in SCENARIOS:
        scenario("day", ["run", "orders_daily", "--window", DAY], 1, DAY, REPS)
    if "backfill" in SCENARIOS:
        scenario("backfill", ["backfill", "orders_daily", "--from", "2025-01-01", "--to",
                              "2025-12-31", "--parallel", "4"], 365, "2025-01-01", BACKFILL_REPS)
    if "big" in SCENARIOS:
        scenario("big", ["run", "orders_big", "--window", DAY], 1, DAY, BIG_REPS, BIG_TABLE)
    med = lambda k, t, i: statistics.median(x[i] for x in results[(k, t)])
    lines = [f"\n## {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.node()}, "
             f"{os.cpu_count()} cores, `{TABLE}` ({ROWS:,} rows over 365 days, index on created_at)\n",
             "First runs (each rep writes a new table), reps alternating, medians; peak RSS of the process.\n",
             "| scenario | idemlake | peer (polars read_database_uri + write_deltalake) | ratio | idemlake RSS | peer RSS | reps | tables equal |",
             "|---|---|---|---|---|---|---|---|"]
    rows = (("day", f"nightly day window ({DAY})", REPS),
            ("backfill", "365-day backfill (`--parallel 4`; the peer: one process, 365 reads and writes)",
             BACKFILL_REPS),
            ("big", f"a day window of {BIG_ROWS:,} rows (`{BIG_TABLE}`)", BIG_REPS))
    for key, label, reps in (r for r in rows if r[0] in SCENARIOS):
        a, b = med(key, "idemlake", 0), med(key, "peer", 0)
        lines.append(f"| {label} | {a:.2f} s | {b:.2f} s | {a / b:.2f}× | {med(key, 'idemlake', 1):.0f} MiB | "
                     f"{med(key, 'peer', 1):.0f} MiB | {reps} | {results[(key, 'check')]} |")
    if made or made_big:
        lines.append(f"\nTables generated in this run: {made:.0f} s and {made_big:.0f} s.")
    text = "\n".join(lines) + "\n"
    if os.environ.get("PG_JSON"):
        Path(os.environ["PG_JSON"]).write_text(json.dumps({
            key: {"label": label, "reps": reps, "idemlake_s": med(key, "idemlake", 0),
                  "peer_s": med(key, "peer", 0), "idemlake_rss_mib": med(key, "idemlake", 1),
                  "peer_rss_mib": med(key, "peer", 1), "tables": results[(key, "check")]}
            for key, label, reps in rows if key in SCENARIOS}))
    out = Path(os.environ.get("PG_OUT", str(REPO / "bench/POSTGRES.md")))
    if not out.exists():
        out.write_text("# PostgreSQL sources: idemlake vs the Python a user would write\n\n"
                       "Written by `make bench-postgres` (scripts/bench_postgres.py); each run appends.\n")
    with out.open("a") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
