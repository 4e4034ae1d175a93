#!/usr/bin/env python3
"""`make bench-checks`: what the default independent check costs (issue 37).

One task, the 6-column lineitem task of `make bench` (no `[reconcile]`), in three variants that
differ only in their `[reconcile]` section:
  rows     the default: `source_rows`, the task's query for the window on the checker's route,
           counted against the rows staged
  content  `default = "content"`: also `source_content`, an order-independent fingerprint of
           every row on both sides (the staged side read back from the staged files)
  off      `independent = false` (with a reason): no independent check at all
Scenarios, variants alternating rep by rep (rows content off rows content off ...), medians:
  load     the initial load, every ship day, `backfill --parallel N` into an empty lake
  day      one day window on the loaded table (after one warm-up round)
  year     a 365-day backfill (1995) on the loaded table
Appends a table to bench/CHECKS.md with each variant's median and its ratio to `off`.

Knobs: BENCH_BIN, CHECKS_SCALE [1], CHECKS_REPS [5] (loads and years: ceil(REPS/2)),
CHECKS_PARALLEL [4], CHECKS_WORK [/tmp/idemlake-checks], CHECKS_OUT [bench/CHECKS.md].
Standard library only.
"""
import datetime as dt
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("BENCH_BIN", os.path.join(REPO, "target/release/idemlake"))
SCALE = os.environ.get("CHECKS_SCALE", "1")
REPS = int(os.environ.get("CHECKS_REPS", "5"))
PARALLEL = os.environ.get("CHECKS_PARALLEL", "4")
WORK = os.environ.get("CHECKS_WORK", "/tmp/idemlake-checks")
OUT = os.environ.get("CHECKS_OUT", os.path.join(REPO, "bench/CHECKS.md"))
DAY = "1995-06-17"
VARIANTS = {
    "rows": "",
    "content": '[reconcile]\ndefault = "content"\n',
    "off": '[reconcile]\nindependent = false\nreason = "bench: the cost of the default check"\n',
}


def narrow_task() -> str:
    """The 6-column task of scripts/bench.py (one definition, read from there)."""
    text = open(os.path.join(REPO, "scripts/bench.py")).read()
    body = re.search(r'NARROW_TOML = """(.*?)"""\n', text, re.S).group(1)
    return body.replace('\\"\\"\\"', '"""')


def idem(variant: str, *args) -> list:
    return [BIN, "--project", WORK, "--lake", os.path.join(WORK, f"lake-{variant}"), *args]


def timed(cmd) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout}\n{r.stderr}")
    return time.perf_counter() - t0


def scenario(reps, cmd_of, before=None, warm=False):
    times = {v: [] for v in VARIANTS}
    for i in range(reps + (1 if warm else 0)):
        for v in VARIANTS:
            if before:
                before(v)
            secs = timed(cmd_of(v))
            if not (warm and i == 0):
                times[v].append(secs)
    return times


def main() -> int:
    os.makedirs(os.path.join(WORK, "tables"), exist_ok=True)
    task = narrow_task()
    for v, extra in VARIANTS.items():
        with open(os.path.join(WORK, "tables", f"narrow_{v}.toml"), "w") as f:
            f.write(task + extra)
    subprocess.run([BIN, "gen-tpch", "--scale", SCALE, "--out", os.path.join(WORK, "data")],
                   check=True, capture_output=True)
    slow = max(1, (REPS + 1) // 2)
    results = [
        ("initial load", scenario(
            slow, lambda v: idem(v, "backfill", f"narrow_{v}", "--from", "1992-01-01",
                                 "--to", "1998-12-31", "--parallel", PARALLEL),
            before=lambda v: shutil.rmtree(os.path.join(WORK, f"lake-{v}"), ignore_errors=True))),
        (f"day window ({DAY})", scenario(
            REPS, lambda v: idem(v, "run", f"narrow_{v}", "--window", DAY), warm=True)),
        ("365-day backfill", scenario(
            slow, lambda v: idem(v, "backfill", f"narrow_{v}", "--from", "1995-01-01",
                                 "--to", "1995-12-31", "--parallel", PARALLEL))),
    ]
    rev = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip()
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"\n## TPC-H SF {SCALE}, the 6-column task, {stamp}, {rev}\n",
             "| scenario | rows (default) | content | off | rows / off | content / off |",
             "|---|---|---|---|---|---|"]
    for name, times in results:
        med = {v: statistics.median(t) for v, t in times.items()}
        lines.append(f"| {name} (median of {len(times['off'])}) | {med['rows']:.2f} s | "
                     f"{med['content']:.2f} s | {med['off']:.2f} s | {med['rows'] / med['off']:.2f}x | "
                     f"{med['content'] / med['off']:.2f}x |")
    text = "\n".join(lines) + "\n"
    print(text)
    with open(OUT, "a") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
