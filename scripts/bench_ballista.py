#!/usr/bin/env python3
"""`make bench-ballista`: one window on a local Ballista cluster vs the embedded engine.

A scheduler and two executors (`idemlake cluster …`, loopback, BALLISTA_TASKS concurrent
tasks each) on this machine; TPC-H SF BENCH_SCALE (generated into $BENCH_WORK/data-sf<scale>
if absent). Two windows of the 15-column lineitem pass-through (tables/lineitem_by_ship_day.toml
with its [reconcile]): the day 1995-06-17 and, as a month-grain copy of the task, 1995-06. Each
is run once per engine as a warm-up (creating the table), then BENCH_REPS times, the engines
alternating; every cell is the median whole-process wall time. The time split comes from the
runs' own `-v` log lines and the scheduler's log:
  plan      process start → the cluster's first job is queued (idemlake: parse, lint, plan)
  execute   the task query's job, queued → finished on the cluster
  transfer + write   job finished → "staged the window's rows" (rows streamed back, written)
  commit    "reconciled" → "published" (commit and read-back)
and for the embedded engine: start → staged (plan, scan, write), reconciled → published.
Writes bench/BALLISTA.md. Needs a release build with --features ballista (BENCH_BIN).
"""

import datetime as dt
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = Path(os.environ.get("BENCH_BIN", REPO / "target" / "release" / "idemlake")).resolve()
SCALE = os.environ.get("BENCH_SCALE", "1")
REPS = int(os.environ.get("BENCH_REPS", "5"))
TASKS_PER_EXECUTOR = os.environ.get("BALLISTA_TASKS", "1")
WORK = Path(os.environ.get("BENCH_WORK", "/tmp/idemlake-bench")).resolve()
OUT = Path(os.environ.get("BENCH_OUT", REPO / "bench" / "BALLISTA.md")).resolve()
DATA = WORK / f"data-sf{SCALE}"
WINDOWS = [("day", "lineitem_by_ship_day", "1995-06-17"), ("month", "lineitem_by_ship_month", "1995-06")]
STAMP = re.compile(r"^(\S+Z)\s+(\w+)\s+(\S+): (.*)$")


def say(msg):
    print(f"[bench-ballista] {msg}", file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, secs=60):
    end = time.monotonic() + secs
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise SystemExit(f"a cluster process exited ({proc.returncode})")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise SystemExit(f"nothing listens on {port}")


def ts(text):
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def lines(text):
    for raw in text.splitlines():
        m = STAMP.match(re.sub(r"\x1b\[[0-9;]*m", "", raw))
        if m:
            yield ts(m.group(1)), m.group(4)


def run(project, lake, task, window, engine):
    cmd = [str(BIN), "--project", str(project), "--lake", str(lake), "--output", "json", "-v",
           "--engine", engine, "run", task, "--window", window]
    start = time.time()
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    reps = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    if p.returncode != 0 or not reps or reps[0].get("status") != "ok":
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    marks = {}
    for t, msg in lines(p.stderr):
        for key, prefix in (("staged", "staged the window"), ("reconciled", "reconciled"),
                            ("published", "published")):
            if msg.startswith(prefix) and key not in marks:
                marks[key] = t
    return start, wall, marks, reps[0]["rows_written"]


def jobs_between(log, start, end):
    """(queued, finished) times of the scheduler's jobs queued between start and end."""
    queued, finished = {}, {}
    for t, msg in lines(log.read_text()):
        m = re.search(r"Job queued: \[(\w+)\]", msg)
        if m and start <= t <= end:
            queued[m.group(1)] = t
        m = re.search(r"Job finished successfully: \[(\w+)\]", msg)
        if m:
            finished[m.group(1)] = t
    return sorted((q, finished.get(j)) for j, q in queued.items())


def main():
    if not BIN.exists():
        raise SystemExit(f"no binary at {BIN}: build with --features ballista (make bench-ballista does)")
    work = WORK / "ballista"
    shutil.rmtree(work, ignore_errors=True)
    project = work / "project"
    (project / "tables").mkdir(parents=True)
    shutil.copy(REPO / "tables" / "lineitem_by_ship_day.toml", project / "tables")
    month = (REPO / "tables" / "lineitem_by_ship_day.toml").read_text().replace('grain = "day"', 'grain = "month"')
    (project / "tables" / "lineitem_by_ship_month.toml").write_text(month)
    if not (DATA / "lineitem.parquet").exists():
        say(f"generating TPC-H SF {SCALE} into {DATA}")
        subprocess.run([str(BIN), "gen-tpch", "--scale", SCALE, "--out", str(DATA)], check=True)
    (project / "data").symlink_to(DATA)
    procs = []
    try:
        sched = free_port()
        slog = work / "scheduler.log"
        procs.append(subprocess.Popen([str(BIN), "-vv", "cluster", "scheduler", "--bind", f"127.0.0.1:{sched}"],
                                      stdout=open(slog, "w"), stderr=subprocess.STDOUT))
        wait_port(sched, procs[-1])
        for i in range(2):
            f, g = free_port(), free_port()
            (work / f"exec-{i}").mkdir()
            procs.append(subprocess.Popen(
                [str(BIN), "cluster", "executor", "--scheduler", f"127.0.0.1:{sched}", "--flight-port", str(f),
                 "--grpc-port", str(g), "--concurrent-tasks", TASKS_PER_EXECUTOR, "--work-dir", str(work / f"exec-{i}")],
                stdout=open(work / f"executor-{i}.log", "w"), stderr=subprocess.STDOUT))
            wait_port(f, procs[-1])
            wait_port(g, procs[-1])
        time.sleep(1.0)
        cluster = f"df://127.0.0.1:{sched}"
        rows = []
        for name, task, window in WINDOWS:
            res = {"cluster": [], "local": []}
            lakes = {"cluster": work / "lake-cluster", "local": work / "lake-local"}
            for i in range(REPS + 1):
                for kind in ("local", "cluster"):
                    engine = cluster if kind == "cluster" else "local"
                    start, wall, marks, n = run(project, lakes[kind], task, window, engine)
                    if i == 0:
                        continue
                    split = {"wall": wall, "rows": n}
                    if kind == "cluster":
                        jobs = jobs_between(slog, start, marks["staged"])
                        first_q = jobs[0][0] if jobs else None
                        main_job = jobs[0] if jobs else (None, None)
                        split["plan"] = first_q - start if first_q else None
                        split["execute"] = (main_job[1] - main_job[0]) if main_job[1] else None
                        split["transfer+write"] = marks["staged"] - main_job[1] if main_job[1] else None
                        split["jobs"] = len(jobs)
                    else:
                        split["plan+scan+write"] = marks["staged"] - start
                    split["reconcile wait"] = marks["reconciled"] - marks["staged"]
                    split["commit+read-back"] = marks["published"] - marks["reconciled"]
                    res[kind].append(split)
                say(f"{name} rep {i}: " + ", ".join(f"{k} {res[k][-1]['wall']:.2f} s" for k in res if i and res[k]))
            rows.append((name, window, res))
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()

    def med(xs, key):
        v = [x[key] for x in xs if x.get(key) is not None]
        return statistics.median(v) if v else float("nan")

    L = ["# One window on a local Ballista cluster vs the embedded engine\n",
         f"Generated by `make bench-ballista` (`scripts/bench_ballista.py`) on {dt.date.today().isoformat()}. "
         f"TPC-H SF {SCALE}; the 15-column `lineitem_by_ship_day` task with its `[reconcile]` (and a month-grain "
         f"copy); a scheduler and two executors on this machine ({os.cpu_count()} cores), {TASKS_PER_EXECUTOR} "
         f"concurrent task(s) each, loopback; one warm-up run per engine and window, then {REPS} reps, engines "
         "alternating; medians of whole-process wall times.\n",
         "| window | rows | embedded | cluster | cluster / embedded | cluster: plan | execute (task query job) | transfer + write | reconcile wait | commit + read-back | embedded: plan + scan + write | reconcile wait | commit + read-back |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, window, res in rows:
        c, l = res["cluster"], res["local"]
        L.append(f"| {name} {window} | {c[0]['rows']:,} | {med(l, 'wall'):.2f} s | {med(c, 'wall'):.2f} s | "
                 f"{med(c, 'wall') / med(l, 'wall'):.2f} | {med(c, 'plan'):.3f} s | {med(c, 'execute'):.3f} s | "
                 f"{med(c, 'transfer+write'):.3f} s | {med(c, 'reconcile wait'):.3f} s | {med(c, 'commit+read-back'):.3f} s | "
                 f"{med(l, 'plan+scan+write'):.3f} s | {med(l, 'reconcile wait'):.3f} s | {med(l, 'commit+read-back'):.3f} s |")
    L.append("")
    L.append("- The cluster's column *plan* runs from the process's start to the first job the scheduler queued "
             "(start-up, sources, lint, planning, the client session); *execute* is that job's life on the cluster "
             "(queued → finished, the scheduler's log); *transfer + write* runs from there to the staged files "
             "(results fetched over Arrow Flight, window check, Parquet written by idemlake). *reconcile wait* is "
             "the time from staged to reconciled (the `[reconcile].source` job runs beside the task's, so it is "
             "mostly hidden); the embedded engine's independent check also runs beside its scan.")
    L.append(f"- Jobs per cluster run (task query and reconcile source): {sorted({x['jobs'] for _, _, r in rows for x in r['cluster']})}.")
    OUT.write_text("\n".join(L) + "\n")
    say(f"wrote {OUT}")


if __name__ == "__main__":
    main()
