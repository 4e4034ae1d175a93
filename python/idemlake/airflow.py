"""Airflow: :class:`IdemlakeOperator` runs one idemlake window per task instance.

    from idemlake.airflow import IdemlakeOperator

    IdemlakeOperator(task_id="publish_orders", idemlake_task="orders_daily")

By default the window is the run's data interval (``data_interval_start/data_interval_end``,
which idemlake reads as one window of the task's grain: a daily schedule needs a timetable with
a data interval, such as ``CronDataIntervalTimetable``). The operator:

- runs ``idemlake --output json run <task> --window <interval>`` (``backfill --from --to`` with
  ``backfill=True``, for a range in one process, resumable with ``missing=True``; ``shard="I/N"``
  makes it worker I of N, for dynamic task mapping: ``.partial(...).expand(shard=[...])``);
- pushes the JSON report (the list of reports for a backfill) to XCom as its return value;
- retries only what the report calls ``retryable`` (exit 1, or 5: a window published whose check
  after the commit failed): anything else raises ``AirflowFailException``, which fails the task
  at once, retries left unused;
- runs idemlake's OpenLineage events under the Airflow task's run when the OpenLineage provider
  is installed (its ``lineage_parent_id`` macro, passed as ``--lineage-parent``).

``project`` and ``lake`` default to the worker's ``IDEMLAKE_PROJECT`` and ``IDEMLAKE_LAKE``;
credentials come from the worker's environment (``AWS_*``, ``PGPASSWORD``): ``env`` adds
variables, for instance from an Airflow connection. Supports Airflow 3.0.0 and later (tested
with 3.0.0 and 3.3.2); the imports fall back to Airflow 2's locations, untested.
"""

from __future__ import annotations

from typing import Any, Sequence

import idemlake

try:  # Airflow 3
    from airflow.sdk import BaseOperator
except ImportError:  # Airflow 2
    from airflow.models import BaseOperator

try:
    from airflow.sdk.exceptions import AirflowFailException
except ImportError:
    from airflow.exceptions import AirflowFailException

from airflow.exceptions import AirflowException

__all__ = ["IdemlakeOperator"]


def _lineage_parent(context) -> str | None:
    """``NAMESPACE/JOB/RUN_ID`` of the task instance's OpenLineage run, when the provider is
    installed."""
    try:
        from airflow.providers.openlineage.plugins.macros import lineage_parent_id
    except ImportError:
        return None
    try:
        return lineage_parent_id(context["ti"])
    except Exception:  # the provider is installed but not configured
        return None


def _instant(value: Any) -> str:
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


class IdemlakeOperator(BaseOperator):
    """Run an idemlake task's window (or range) and publish it atomically; see the module."""

    template_fields: Sequence[str] = (
        "idemlake_task", "window", "from_", "to", "parallel", "shard", "project", "lake", "env",
    )

    def __init__(
        self,
        *,
        idemlake_task: str,
        window: str | None = None,
        backfill: bool = False,
        from_: str | None = None,
        to: str | None = None,
        missing: bool = False,
        parallel: int | str | None = None,
        shard: str | None = None,
        project: str | None = None,
        lake: str | None = None,
        env: dict[str, str] | None = None,
        lineage: bool = True,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        self.idemlake_task = idemlake_task
        self.window = window
        self.backfill = backfill
        self.from_ = from_
        self.to = to
        self.missing = missing
        self.parallel = parallel
        self.shard = shard
        self.project = project
        self.lake = lake
        self.env = env
        self.lineage = lineage

    def _args(self, context) -> list[str]:
        if self.backfill:
            if not (self.from_ and self.to):
                raise AirflowFailException("backfill=True needs from_ and to (windows, inclusive)")
            args = ["backfill", self.idemlake_task, "--from", self.from_, "--to", self.to]
            if self.missing:
                args.append("--missing")
            if self.parallel:
                args += ["--parallel", str(self.parallel)]
            if self.shard:
                args += ["--shard", str(self.shard)]
            return args
        window = self.window
        if not window:
            start, end = context.get("data_interval_start"), context.get("data_interval_end")
            if start is None or end is None:
                raise AirflowFailException("no data interval in the context: pass window=")
            window = f"{_instant(start)}/{_instant(end)}"
        return ["run", self.idemlake_task, "--window", window]

    def execute(self, context):
        result = idemlake.run(
            self._args(context),
            project=self.project,
            lake=self.lake,
            lineage_parent=_lineage_parent(context) if self.lineage else None,
            env=self.env,
            log=self.log,
        )
        value = result.reports if self.backfill else (result.reports[-1] if result.reports else None)
        if result.ok:
            return value
        # The report reaches XCom also when the window failed, for whoever looks.
        context["ti"].xcom_push(key="idemlake_report", value=value)
        if result.retryable:
            raise AirflowException(result.reason() + " (retryable)")
        raise AirflowFailException(result.reason() + "; not retrying: fix the cause, then clear the task")
