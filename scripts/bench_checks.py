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
  day      a first run of one day window, the nightly case (a window never run before, nothing
           reusable from an earlier run): each rep runs on a fresh copy of a table loaded with
           every ship day but that one (per variant, built once, untimed; the copy is made
           before the timed process); after one warm-up round
  retry    the same day window re-run on the loaded table, a retry (after one warm-up round)
  year     a 365-day backfill (1995) on the loaded table: re-runs of published windows
Every check is computed in the run that reports it. Appends a table to bench/CHECKS.md with
each variant's median and its ratio to `off`, the first run first.

Knobs: BENCH_BIN, CHECKS_SCALE [1], CHECKS_REPS [5] (loads and years: ceil(REPS/2)),
CHECKS_PARALLEL [4], CHECKS_WORK [/tmp/idemlake-checks], CHECKS_OUT [bench/CHECKS.md].
Standard library only.
"""
import datetime as dt
import json
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
FROM, TO = "1992-01-01", "1998-12-31"  # the load: every ship day of the generated data
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


def idem(variant: str, *args, lake: str = "lake") -> list:
    return [BIN, "--project", WORK, "--lake", os.path.join(WORK, f"{lake}-{variant}"), *args]


def timed(cmd, published=False) -> float:
    """Seconds of one process. `published`: its JSON reports must all say `ok` (a first run of a
    day with rows publishes them)."""
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    secs = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout}\n{r.stderr}")
    if published:
        reports = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
        if not reports or any(x.get("status") != "ok" for x in reports):
            raise SystemExit(f"not published: {' '.join(cmd)}\n{r.stdout}")
    return secs


def scenario(reps, cmd_of, before=None, warm=False, published=False):
    times = {v: [] for v in VARIANTS}
    for i in range(reps + (1 if warm else 0)):
        for v in VARIANTS:
            if before:
                before(v)  # untimed
            secs = timed(cmd_of(v), published)
            if not (warm and i == 0):
                times[v].append(secs)
    return times


def build_base(v: str):
    """`base-<v>`: the variant's table loaded with every ship day but DAY (untimed)."""
    shutil.rmtree(os.path.join(WORK, f"base-{v}"), ignore_errors=True)
    d = dt.date.fromisoformat(DAY)
    for a, b in ((FROM, (d - dt.timedelta(days=1)).isoformat()), ((d + dt.timedelta(days=1)).isoformat(), TO)):
        subprocess.run(idem(v, "backfill", f"narrow_{v}", "--from", a, "--to", b, "--parallel", PARALLEL,
                            lake="base"), check=True, capture_output=True)


def first_run_copy(v: str):
    """`first-<v>`: a fresh copy of `base-<v>`, in which DAY was never run, flushed to disk
    (sync) before the timed process. Parquet data files are hard links (Delta never modifies
    one in place); the log and `_idemlake/` are real copies."""
    base = os.path.join(WORK, f"base-{v}", f"narrow_{v}")
    lake = os.path.join(WORK, f"first-{v}")
    shutil.rmtree(lake, ignore_errors=True)

    def link_or_copy(src, dst):
        top = os.path.relpath(src, base).split(os.sep)[0]
        if top not in ("_delta_log", "_idemlake") and src.endswith(".parquet"):
            os.link(src, dst)
        else:
            shutil.copy2(src, dst)

    shutil.copytree(base, os.path.join(lake, f"narrow_{v}"), copy_function=link_or_copy)
    os.sync()


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
            slow, lambda v: idem(v, "backfill", f"narrow_{v}", "--from", FROM,
                                 "--to", TO, "--parallel", PARALLEL),
            before=lambda v: shutil.rmtree(os.path.join(WORK, f"lake-{v}"), ignore_errors=True))),
    ]
    for v in VARIANTS:
        build_base(v)
    results += [
        (f"day window ({DAY}), first run (never run before)", scenario(
            REPS, lambda v: idem(v, "--output", "json", "run", f"narrow_{v}", "--window", DAY, lake="first"),
            before=first_run_copy, warm=True, published=True)),
        (f"day window ({DAY}), re-run (retry)", scenario(
            REPS, lambda v: idem(v, "run", f"narrow_{v}", "--window", DAY), warm=True)),
        ("365-day backfill (re-runs of published windows)", scenario(
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
