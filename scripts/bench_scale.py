#!/usr/bin/env python3
"""`make bench-scale`: many idemlake workers publishing into one S3 table (issue 17 §1).

For each worker count N (SCALE_WORKERS, default 1,2,4,8) and each rep, a fresh table on the
loopback SeaweedFS (scripts/s3-server) gets the same range of day windows (SCALE_FROM..SCALE_TO,
default all of 1995: 365 windows) from N concurrent processes

    idemlake --lake s3://… --output json -v --log-format json backfill TASK
        --from F --to T --parallel P --shard I/N          (I = 0 … N-1)

started together. Reported per N (medians over reps): wall time from the first start to the
last exit, windows/s, commits and commits/s (the table's commit rate), windows per commit
(group commits), commits rebuilt after another worker took the version (per commit), and the
p50/p99 of the per-window `duration_ms` the reports give. After every run the table is read
with polars (the deltalake reader, not idemlake) and each window's rows and sum(l_extendedprice)
must equal the source's: zero lost or doubled rows, or the script fails.

The task is the 6-column narrow task of `make bench` (scripts/bench.py) over TPC-H lineitem
SF BENCH_SCALE (default 1; the data directory is shared with `make bench`); the source is a
local file all workers read (as a shared volume would be). Writes bench/SCALE.md (SCALE_OUT).

Knobs: SCALE_WORKERS, SCALE_FROM, SCALE_TO, SCALE_PARALLEL (windows at once per worker,
default 2), SCALE_REPS (default 3), SCALE_WORKLOADS (sf,small,latency), SCALE_SMALL_SF (0.01),
SCALE_LATENCY_MS (20,60: one remote-store workload per value; `latency` in SCALE_WORKLOADS
selects them all), SCALE_JSON (also write the medians there, for `make bench`), BENCH_BIN,
BENCH_SCALE, BENCH_WORK. Not part of CI.

Beside each run the machine's CPU use is recorded (busy share of all cores over the run's wall
time, from /proc/stat): a table whose CPU is far from 100 % is bound by the commit path, not by
the cores.
"""

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench as b  # noqa: E402  (the bench's helpers: data, venv, S3 server, peers)

WORKERS = [int(x) for x in b.env("SCALE_WORKERS", "1,2,4,8").split(",") if x.strip()]
FROM = b.env("SCALE_FROM", "1995-01-01")
TO = b.env("SCALE_TO", "1995-12-31")
# The commit-bound workload: the same task over a small scale factor and its whole range, so
# that each window costs little CPU and the table's commit rate is what limits the workers.
SMALL_SF = b.env("SCALE_SMALL_SF", "0.01")
# The remote-store workloads: the small task's FROM..TO through a proxy adding this per request.
LATENCIES_MS = [int(x) for x in b.env("SCALE_LATENCY_MS", "20,60").split(",") if x.strip()]
PARALLEL = b.env("SCALE_PARALLEL", "2")
REPS = int(b.env("SCALE_REPS", "3"))
OUT = Path(b.env("SCALE_OUT", str(b.REPO / "bench" / "SCALE.md"))).resolve()


def cpu_ticks():
    """(busy, total) jiffies of all cores so far, from /proc/stat."""
    f = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = f[3] + (f[4] if len(f) > 4 else 0)  # idle + iowait
    return sum(f) - idle, sum(f)


def pct(xs, q):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))
    return xs[k]


class Workload:
    """A project (the narrow task over one source) and the range the workers share."""

    def __init__(self, key, what, project, source, lo, hi, latency_ms=0):
        self.key, self.what, self.project, self.source = key, what, project, source
        self.lo, self.hi = lo, hi
        # Workers reach the store through scripts/latency-proxy adding this much per request
        # (0: directly), as workers on other machines would reach a remote store.
        self.latency_ms = latency_ms


def daycounts(kind, path, lo, hi, env_extra=None):
    _, _, text = b.run([b.PY, b.PEER, "daycounts", kind, path, lo, hi], "daycounts",
                       env_extra=env_extra)
    return json.loads(text.strip().splitlines()[-1])


def small_workload():
    """The narrow task over TPC-H SF SMALL_SF (generated on first use), its whole range."""
    data = b.WORK / f"data-sf{SMALL_SF}"
    if not (data / "lineitem.parquet").exists():
        b.run([b.BIN, "gen-tpch", "--scale", SMALL_SF, "--out", data], "gen-tpch-small")
    project = b.WORK / "project-small"
    (project / "tables").mkdir(parents=True, exist_ok=True)
    (project / "tables" / f"{b.NARROW_TASK}.toml").write_text(b.NARROW_TOML)
    if not (project / "data").exists():
        (project / "data").symlink_to(data)
    _, _, text = b.run([b.PY, "-c", (
        "import polars as pl,sys; d=pl.scan_parquet(sys.argv[1]).select("
        "pl.col('l_shipdate').min().alias('a'),pl.col('l_shipdate').max().alias('b')).collect();"
        "print(d['a'][0], d['b'][0])"), data / "lineitem.parquet"], "range-small")
    lo, hi = text.split()[-2:]
    return Workload("small", f"SF {SMALL_SF}, whole range (commit-bound)", project,
                    data / "lineitem.parquet", lo, hi)


def one_run(envs, wl, n, rep, expected, stamp):
    """N workers on a fresh table; the run's measurements (raises on any failure or any
    window whose rows differ from the source's)."""
    prefix = f"scale-{stamp}/{wl.key}-w{n}-r{rep}"
    lake = f"s3://{envs['IDEMLAKE_S3_BUCKET']}/{prefix}"
    b.LOGS.mkdir(parents=True, exist_ok=True)
    procs = []
    penv = {**os.environ, **envs, **getattr(wl, "env", {})}
    cpu0 = cpu_ticks()
    t0 = time.perf_counter()
    for i in range(n):
        out = open(b.LOGS / f"scale-{wl.key}-w{n}-r{rep}-{i}.out", "wb")
        err = open(b.LOGS / f"scale-{wl.key}-w{n}-r{rep}-{i}.err", "wb")
        cmd = [str(c) for c in [b.BIN, "--project", wl.project, "--lake", lake, "--output", "json",
                                "-v", "--log-format", "json", "backfill", b.NARROW_TASK,
                                "--from", wl.lo, "--to", wl.hi, "--parallel", PARALLEL,
                                "--shard", f"{i}/{n}"]]
        procs.append((subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                       env=penv), out, err))
    ends = []
    for p, out, err in procs:
        p.wait()
        ends.append(time.perf_counter() - t0)
        out.close()
        err.close()
    wall = max(ends)
    cpu1 = cpu_ticks()
    cpu = (cpu1[0] - cpu0[0]) / max(1, cpu1[1] - cpu0[1])
    reports, commits, windows_committed, rebuilds, requests = [], 0, 0, 0, 0
    for i, (p, out, err) in enumerate(procs):
        text = Path(out.name).read_text(errors="replace")
        if p.returncode != 0:
            tail = Path(err.name).read_text(errors="replace")[-2000:]
            raise b.Failed(f"worker {i}/{n} exited {p.returncode}:\n{tail}")
        reports += b.check_reports(text, f"worker {i}/{n}")
        for line in Path(err.name).read_text(errors="replace").splitlines():
            if not line.startswith("{"):
                continue
            fields = json.loads(line).get("fields", {})
            if "rebuilds" in fields:
                commits += int(fields["commits"])
                windows_committed += int(fields["windows"])
                rebuilds += int(fields["rebuilds"])
            msg = fields.get("message", "")
            if msg.startswith("storage requests: "):
                requests += int(msg.split()[2])
    got = daycounts("delta", f"{lake}/{b.NARROW_TASK}", wl.lo, wl.hi, envs)
    if got != expected:
        lost = sorted(d for d in expected if got.get(d) != expected[d])
        extra = sorted(d for d in got if d not in expected)
        raise b.Failed(f"{n} workers: windows differ from the source: {lost[:5]} (of {len(lost)}),"
                       f" extra {extra[:5]}")
    _, _, text = b.run([b.PY, b.PEER, "creates", f"{lake}/{b.NARROW_TASK}"], "creates",
                       env_extra=envs)
    made = json.loads(text.strip().splitlines()[-1])
    if made != {"creates": [0], "ids": 1}:
        raise b.Failed(f"{n} workers: the table was created more than once: {made}")
    durations = [r["duration_ms"] for r in reports]
    return {
        "wall": wall,
        "windows": len(reports),
        "commits": commits,
        "windows_committed": windows_committed,
        "rebuilds": rebuilds,
        "requests": requests,
        "p50": pct(durations, 0.5),
        "p99": pct(durations, 0.99),
        "cpu": cpu,
    }


def main():
    b.setup()
    envs = b.s3_server()
    small = small_workload()
    workloads = [
        Workload("sf", f"SF {b.SCALE}, {FROM}..{TO}", b.PROJECT, b.SOURCE, FROM, TO),
        small,
    ] + [
        Workload(f"latency{ms}", f"SF {SMALL_SF}, {FROM}..{TO}, +{ms} ms per S3 request",
                 small.project, small.source, FROM, TO, ms)
        for ms in LATENCIES_MS
    ]
    chosen = [k.strip() for k in b.env("SCALE_WORKLOADS", "sf,small,latency").split(",")]
    workloads = [wl for wl in workloads
                 if wl.key in chosen or ("latency" in chosen and wl.latency_ms)]
    stamp = time.strftime("%Y%m%d%H%M%S")
    results = {}
    for wl in workloads:
        expected = daycounts("source", str(wl.source), wl.lo, wl.hi)
        wl.windows = len(expected)
        proxy = None
        if wl.latency_ms:
            port = b.free_port()
            upstream = envs["AWS_ENDPOINT_URL"].split("://", 1)[1].rstrip("/")
            proxy = subprocess.Popen([sys.executable, str(b.REPO / "scripts" / "latency-proxy"),
                                      str(port), upstream, str(wl.latency_ms)],
                                     stdout=subprocess.PIPE, text=True)
            proxy.stdout.readline()  # "listening on …"
            wl.env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"}
        b.say(f"scale: {wl.what}: {len(expected)} windows with rows in {wl.lo}..{wl.hi}; "
              f"workers {WORKERS}, {REPS} reps, --parallel {PARALLEL} each")
        try:
            for rep in range(REPS):
                for n in WORKERS:  # alternate worker counts within a rep (the machine drifts)
                    r = one_run(envs, wl, n, rep, expected, stamp)
                    results.setdefault(wl.key, {}).setdefault(n, []).append(r)
                    b.say(f"  {n} workers, rep {rep + 1}: {r['wall']:.2f} s, "
                          f"{r['windows'] / r['wall']:.0f} windows/s, {r['commits']} commits "
                          f"({r['rebuilds']} rebuilt), p50 {r['p50']} ms, p99 {r['p99']} ms, "
                          f"CPU {100 * r['cpu']:.0f} % — every window = source, one CREATE TABLE")
        finally:  # a failed run must not leave the proxy holding this process's stderr
            if proxy:
                proxy.terminate()
                proxy.wait()
    write(workloads, results)
    if b.env("SCALE_JSON", ""):
        Path(b.env("SCALE_JSON", "")).write_text(json.dumps({
            wl.key: {"what": wl.what, "latency_ms": wl.latency_ms,
                     "by_workers": {str(n): {"windows_per_s": med(rs, lambda r: r["windows"] / r["wall"]),
                                             "p99_ms": med(rs, lambda r: r["p99"]),
                                             "cpu": med(rs, lambda r: r["cpu"]),
                                             "windows_per_commit": med(rs, lambda r: r["windows_committed"] / max(1, r["commits"])),
                                             "reps": len(rs)}
                                    for n, rs in sorted(results[wl.key].items())}}
            for wl in workloads}, indent=1))


def med(rs, f):
    return statistics.median(f(r) for r in rs)


def table(rs_by_n):
    lines = [
        "| workers | wall s | windows/s | speed-up | commits | commits/s | windows per commit "
        "| rebuilt per commit | window p50 ms | window p99 ms | S3 requests | CPU busy |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    base = None
    for n in sorted(rs_by_n):
        rs = rs_by_n[n]
        wall = med(rs, lambda r: r["wall"])
        rate = med(rs, lambda r: r["windows"] / r["wall"])
        base = base or rate
        lo, hi = min(r["wall"] for r in rs), max(r["wall"] for r in rs)
        lines.append(
            f"| {n} | {wall:.2f} ({lo:.2f}–{hi:.2f}) | {rate:.0f} | {rate / base:.2f}× "
            f"| {med(rs, lambda r: r['commits']):.0f} | {med(rs, lambda r: r['commits'] / r['wall']):.1f} "
            f"| {med(rs, lambda r: r['windows_committed'] / max(1, r['commits'])):.1f} "
            f"| {med(rs, lambda r: r['rebuilds'] / max(1, r['commits'])):.2f} "
            f"| {med(rs, lambda r: r['p50']):.0f} | {med(rs, lambda r: r['p99']):.0f} "
            f"| {med(rs, lambda r: r['requests']):.0f} "
            f"| {100 * med(rs, lambda r: r.get('cpu', float('nan'))):.0f} % |")
    return lines


def write(workloads, results):
    lines = [
        "# idemlake worker scaling: N processes, one S3 table",
        "",
        f"Generated by `make bench-scale` (`scripts/bench_scale.py`) on {time.strftime('%Y-%m-%d')}.",
        "",
        f"- Machine: {b.machine()}",
        "- Storage: SeaweedFS on loopback (`scripts/s3-server`), one bucket; each run a fresh table.",
        "- Work: the 6-column narrow task of `make bench` (day windows), the range split with "
        f"`backfill --shard I/N` (contiguous blocks), `--parallel {PARALLEL}` in each worker; all "
        "workers start together. Windows/s counts every window of the range over the wall time from "
        "the first start to the last exit.",
        f"- Reps: {REPS} per worker count, worker counts alternating within each rep; cells are "
        "medians (min–max).",
        "- Checked after every run: per window, rows and sum(l_extendedprice) read with polars "
        "(deltalake reader) equal the source's — every run below had zero lost or doubled rows.",
        "",
    ]
    # The sections written by hand from a run's numbers (headings saying "(by hand"); a new run
    # keeps them (to be revised by whoever reads the new numbers).
    if OUT.exists():
        for section in OUT.read_text().split("\n## ")[1:]:
            if "(by hand" in section.splitlines()[0]:
                lines += ["## " + section.rstrip(), ""]
    for wl in workloads:
        lines += [f"## {wl.what}: {wl.windows} windows", ""] + table(results[wl.key]) + [""]
    lines += ["## Raw runs (JSON, one per line)", "", "```"]
    for wl in workloads:
        for n in sorted(results[wl.key]):
            for r in results[wl.key][n]:
                lines.append(json.dumps({"workload": wl.key, "workers": n,
                                         **{k: (round(v, 3) if isinstance(v, float) else v)
                                            for k, v in r.items()}}))
    lines += ["```", ""]
    OUT.write_text("\n".join(lines))
    b.say(f"wrote {OUT}")


if __name__ == "__main__":
    try:
        main()
    except b.Failed as e:
        print(f"bench-scale: FAILED: {e}", file=sys.stderr)
        sys.exit(1)
