"""Dagster: :func:`idemlake_asset` makes an idemlake task a partitioned asset.

    import dagster as dg
    from idemlake.dagster import IdemlakeResource, idemlake_asset

    orders = idemlake_asset("orders_daily", dg.DailyPartitionsDefinition(start_date="2026-01-01"))
    defs = dg.Definitions(assets=[orders], resources={"idemlake": IdemlakeResource()})

- A partition is a window: materialising partition ``2026-11-21`` runs ``idemlake run
  orders_daily --window <the partition's time window>``; a backfill of partitions launched as a
  range (``BackfillPolicy.single_run()``) is one ``idemlake backfill --from --to`` over them.
  Use partitions of the task's grain and time zone (``DailyPartitionsDefinition(timezone=...)``
  for a day task in another zone, ``HourlyPartitionsDefinition`` for an hour task; idemlake's
  weeks start on Monday: ``WeeklyPartitionsDefinition(day_offset=1)``). A retried range runs
  ``backfill --missing``: only the windows not published yet.
- Checks: the run's reconciliation (``reconciliation``: every check of the report, source and
  output side by side) and its ``[checks]`` (``data_checks``) are Dagster asset check results
  of the materialisation. A window whose reconciliation fails publishes nothing (exit 3): the
  step fails with the reports in the failure's metadata, and no check result is recorded
  (nothing was materialised).
- Retries: a failure whose report says ``retryable`` raises a plain exception, which the
  asset's ``RetryPolicy`` retries; any other raises ``dagster.Failure(allow_retries=False)``.

The resource's ``project`` and ``lake`` default to ``IDEMLAKE_PROJECT`` and ``IDEMLAKE_LAKE``.
"""


from typing import List, Optional

import dagster as dg

import idemlake

__all__ = ["IdemlakeResource", "idemlake_asset"]


class IdemlakeResource(dg.ConfigurableResource):
    """Where the project (holding ``tables/``) and the lake are; empty means idemlake's
    defaults (``IDEMLAKE_PROJECT``, ``IDEMLAKE_LAKE``)."""

    project: str = ""
    lake: str = ""

    def run(self, args: List[str], log=None) -> idemlake.Result:
        return idemlake.run(args, project=self.project or None, lake=self.lake or None, log=log)


def _check_results(asset: str, reports: List[dict], data_checks: bool) -> List[dg.AssetCheckResult]:
    """The run's reconciliation (every check of every window) and, when declared, its
    ``[checks]`` results (none ran is a pass: the window had none to run)."""
    recon = [(r["window"]["label"], c) for r in reports for c in (r.get("reconciliation") or [])]
    data = [(r["window"]["label"], c) for r in reports for c in (r.get("data_checks") or [])]
    out = [
        dg.AssetCheckResult(
            asset_key=asset,
            check_name="reconciliation",
            passed=bool(recon) and all(c.get("ok") for _, c in recon),
            metadata={"checks": dg.MetadataValue.json([{"window": w, **c} for w, c in recon])},
        )
    ]
    if not data_checks:
        return out
    failing = [c for _, c in data if not c.get("ok")]
    severe = any(c.get("severity") == "error" for c in failing)
    out.append(
        dg.AssetCheckResult(
            asset_key=asset,
            check_name="data_checks",
            passed=not failing,
            severity=dg.AssetCheckSeverity.ERROR if severe else dg.AssetCheckSeverity.WARN,
            metadata={"checks": dg.MetadataValue.json([{"window": w, **c} for w, c in data])},
        )
    )
    return out


def idemlake_asset(
    task: str,
    partitions_def: dg.PartitionsDefinition,
    *,
    description: Optional[str] = None,
    data_checks: bool = False,
    max_retries: int = 3,
    retry_delay: float = 30.0,
    group_name: str = "idemlake",
) -> dg.AssetsDefinition:
    """An asset publishing ``task``'s windows, one per partition (see the module).
    ``data_checks`` declares the ``data_checks`` asset check (tasks with ``[checks]``)."""
    specs = [dg.AssetCheckSpec("reconciliation", asset=task, description="source vs output, per window")]
    if data_checks:
        specs.append(dg.AssetCheckSpec("data_checks", asset=task, description="the task's [checks]"))

    @dg.asset(
        name=task,
        description=description or f"idemlake task {task}",
        partitions_def=partitions_def,
        backfill_policy=dg.BackfillPolicy.single_run(),
        retry_policy=dg.RetryPolicy(
            max_retries=max_retries, delay=retry_delay, backoff=dg.Backoff.EXPONENTIAL
        ),
        check_specs=specs,
        group_name=group_name,
        kinds={"delta"},
    )
    def _asset(context: dg.AssetExecutionContext, idemlake: IdemlakeResource):
        tw = context.partition_time_window
        keys = context.partition_keys
        if len(keys) > 1:
            first, last = partitions_def.time_window_for_partition_key(keys[0]), partitions_def.time_window_for_partition_key(keys[-1])
            args = ["backfill", task, "--from", f"{first.start.isoformat()}/{first.end.isoformat()}",
                    "--to", f"{last.start.isoformat()}/{last.end.isoformat()}"]
            if context.retry_number > 0:
                args.append("--missing")
        else:
            args = ["run", task, "--window", f"{tw.start.isoformat()}/{tw.end.isoformat()}"]
        result = idemlake.run(args, log=context.log)
        if not result.ok and not result.retryable:
            raise dg.Failure(
                description=result.reason() + "; not retrying",
                metadata={"reports": dg.MetadataValue.json(result.reports)},
                allow_retries=False,
            )
        if not result.ok:
            raise RuntimeError(result.reason() + " (retryable)")
        reports = result.reports
        checks = _check_results(task, reports, data_checks)
        return dg.MaterializeResult(
            metadata={
                "windows": dg.MetadataValue.json([r["window"]["label"] for r in reports]),
                "rows_written": dg.MetadataValue.int(sum(int(r.get("rows_written") or 0) for r in reports)),
                "table_version": dg.MetadataValue.int(max((int(r.get("table_version") or 0) for r in reports), default=0)),
                "run_ids": dg.MetadataValue.json([r.get("run_id") for r in reports]),
            },
            check_results=checks,
        )

    return _asset
