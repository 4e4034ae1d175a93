"""Dagster definitions for the idemlake sample tasks: one daily partition = one idemlake window.

    pip install idemlake-0.1.0-py3-none-manylinux_2_35_x86_64.whl   # `make wheel`: the binary and `idemlake.dagster`
    export IDEMLAKE_PROJECT=/path/to/project IDEMLAKE_LAKE=/path/to/lake
    dagster asset materialize -f examples/dagster/definitions.py \
        --select lineitem_by_ship_day --partition 1995-06-01
    dagster dev -f examples/dagster/definitions.py      # UI; backfill a partition range from there

Materialising partition ``1995-06-01`` of ``lineitem_by_ship_day`` runs
``idemlake run lineitem_by_ship_day --window 1995-06-01T00:00:00+00:00/1995-06-02T00:00:00+00:00``
(the partition's time window); idemlake replaces exactly that window in one atomic commit, so a
re-materialisation, a retry or a backfill over partitions already done never duplicates a row.
A backfill launched over a partition range runs as one ``idemlake backfill --from --to``. Each
materialisation records the window's reconciliation as the asset check ``reconciliation`` (and
the task's ``[checks]`` as ``data_checks``). Retries follow the report's ``retryable``: see
``idemlake.dagster``.

The partitions are UTC days, like the sample tasks' ``[window] timezone = "UTC"``; a task in
another zone needs ``DailyPartitionsDefinition(timezone=...)`` with the same zone. Environment:
IDEMLAKE_PARTITION_START (first partition, default 1992-01-01), IDEMLAKE_RETRY_DELAY_SECONDS
(first retry delay, default 30).

Tested with dagster 1.13.29 (see scripts/test-orchestrators).
"""

from __future__ import annotations

import os

import dagster as dg

from idemlake.dagster import IdemlakeResource, idemlake_asset

daily = dg.DailyPartitionsDefinition(
    start_date=os.environ.get("IDEMLAKE_PARTITION_START", "1992-01-01"), timezone="UTC"
)
delay = float(os.environ.get("IDEMLAKE_RETRY_DELAY_SECONDS", "30"))

lineitem_by_ship_day = idemlake_asset(
    "lineitem_by_ship_day", daily, description="lineitem rows by ship day (pass-through)",
    retry_delay=delay,
)
daily_revenue = idemlake_asset(
    "daily_revenue", daily, description="revenue per ship day, return flag and line status",
    retry_delay=delay,
)

defs = dg.Definitions(
    assets=[lineitem_by_ship_day, daily_revenue],
    resources={"idemlake": IdemlakeResource()},
)
