"""Dagster assets backed by idemlake: one daily partition = one idemlake window.

Materialising partition ``1995-06-01`` of ``lineitem_by_ship_day`` runs

    idemlake --project P --lake L --output json run lineitem_by_ship_day \
        --window 1995-06-01T00:00:00+00:00/1995-06-02T00:00:00+00:00

(the partition's time window, ``context.partition_time_window``). idemlake replaces exactly that
window in the Delta table with one atomic commit, so re-materialising a partition, a retry or a
backfill over partitions already done republishes the same rows and never duplicates any.

Configuration (the ``idemlake`` resource; defaults read from the environment when the code
location loads): IDEMLAKE_BIN (default ``idemlake`` on PATH: ``pip install`` idemlake's wheel,
built by ``make wheel``, into the code location's environment), IDEMLAKE_PROJECT (default
/srv/pipelines, the container image's project), IDEMLAKE_LAKE (default <project>/lake), IDEMLAKE_PARTITION_START (first
partition, default 1992-01-01), IDEMLAKE_RETRY_DELAY_SECONDS (first retry delay, default 30).

The partitions are UTC days, like the sample tasks' ``[window] timezone = "UTC"``; a task in
another zone needs ``DailyPartitionsDefinition(timezone=...)`` with the same zone, otherwise the
interval is not one day of the task's grain and idemlake refuses it (exit 2).

Retries: one rule, driven by idemlake's report. Every JSON report carries ``retryable``: true
for a runtime failure (exit 1) and for a window published whose check after the commit failed
(exit 5), false for invalid input (2), a reconciliation mismatch (3), damage (4) and a failed
data check (6). A retryable failure raises a plain exception, which the asset's RetryPolicy
retries; any other raises ``dagster.Failure(allow_retries=False)``, which fails the step at
once. Without a report (the process was killed) exit codes 2, 3, 4 and 6 are final.

Backfills: select a partition range in the UI (``dagster dev``) and launch a backfill; each
partition is one run of one window, safe to repeat. Or let idemlake do a range in one process,
resumable after a crash (only windows never published run):
``idemlake backfill lineitem_by_ship_day --from 1995-06-01 --to 1995-06-30 --missing``.
"""

import json
import os
import subprocess

import dagster as dg

# idemlake's exit codes that no retry can fix, for when there is no report to read.
FINAL_EXIT_CODES = {
    2: "invalid input (task file, SQL, lint, window or schema change)",
    3: "reconciliation mismatch between source and output",
    4: "audit or verify found damaged or differing windows",
    6: "a data check ([checks]) failed",
}


def is_retryable(code: int, reports: list[dict]) -> bool:
    """Retry when a report says so; without one, unless the exit code is final."""
    if reports:
        return any(r.get("retryable") is True for r in reports)
    return code not in FINAL_EXIT_CODES

daily_partitions = dg.DailyPartitionsDefinition(
    start_date=os.environ.get("IDEMLAKE_PARTITION_START", "1992-01-01"),
    timezone="UTC",
)


class IdemlakeResource(dg.ConfigurableResource):
    """Where the idemlake binary, the project (holding tables/) and the lake are."""

    bin: str = os.environ.get("IDEMLAKE_BIN", "idemlake")
    project: str = os.environ.get("IDEMLAKE_PROJECT", "/srv/pipelines")
    lake: str = os.environ.get("IDEMLAKE_LAKE", "")

    def run_window(self, task: str, window: str, log) -> dict:
        """Run one window; return idemlake's JSON report, or raise (Failure unless retryable)."""
        cmd = [self.bin, "--project", self.project]
        if self.lake:
            cmd += ["--lake", self.lake]
        cmd += ["--output", "json", "run", task, "--window", window]
        log.info("running: %s", " ".join(cmd))
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        for line in proc.stderr.splitlines():
            log.info("idemlake: %s", line)
        reports = [json.loads(l) for l in proc.stdout.splitlines() if l.strip().startswith("{")]
        report = reports[-1] if reports else {}
        if proc.returncode != 0 and not is_retryable(proc.returncode, reports):
            why = FINAL_EXIT_CODES.get(proc.returncode, "the report says retryable: false")
            raise dg.Failure(
                description=f"idemlake exited {proc.returncode}: {why}; not retrying",
                metadata={"window": window, "error": str(report.get("error") or proc.stderr[-2000:])},
                allow_retries=False,
            )
        if proc.returncode != 0:
            # Retryable (the report says so: exit 1, or 5): a plain exception lets the
            # RetryPolicy try again.
            raise RuntimeError(
                f"idemlake exited {proc.returncode} for {task} {window}: "
                f"{report.get('error') or proc.stderr[-2000:]}"
            )
        if report.get("status") not in ("ok", "skipped", "mismatch", "warned"):
            raise RuntimeError(f"idemlake exited 0 without a report: {proc.stdout[-2000:]}")
        return report


def idemlake_asset(task: str, description: str | None = None) -> dg.AssetsDefinition:
    """A daily-partitioned asset publishing ``task``'s window for its partition."""

    @dg.asset(
        name=task,
        description=description or f"idemlake task {task}, one UTC day per partition",
        partitions_def=daily_partitions,
        retry_policy=dg.RetryPolicy(
            max_retries=3,
            delay=float(os.environ.get("IDEMLAKE_RETRY_DELAY_SECONDS", "30")),
            backoff=dg.Backoff.EXPONENTIAL,
        ),
        group_name="idemlake",
        kinds={"delta"},
    )
    def _asset(context: dg.AssetExecutionContext, idemlake: IdemlakeResource) -> dg.MaterializeResult:
        tw = context.partition_time_window
        window = f"{tw.start.isoformat()}/{tw.end.isoformat()}"
        report = idemlake.run_window(task, window, context.log)
        return dg.MaterializeResult(
            metadata={
                "window": window,
                "status": report.get("status"),
                "rows_written": dg.MetadataValue.int(int(report.get("rows_written") or 0)),
                "table_version": dg.MetadataValue.int(int(report.get("table_version") or 0)),
                "run_id": str(report.get("run_id")),
                "duration_ms": dg.MetadataValue.int(int(report.get("duration_ms") or 0)),
                "reconciliation": dg.MetadataValue.json(report.get("reconciliation") or []),
            }
        )

    return _asset


lineitem_by_ship_day = idemlake_asset("lineitem_by_ship_day", "lineitem rows by ship day (pass-through)")
daily_revenue = idemlake_asset("daily_revenue", "revenue per ship day, return flag and line status")
