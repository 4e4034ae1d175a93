"""Dagster definitions for the idemlake sample tasks.

    pip install idemlake-0.1.0-py3-none-manylinux_2_35_x86_64.whl   # `make wheel`; idemlake on the venv's PATH
    export IDEMLAKE_PROJECT=/path/to/project IDEMLAKE_LAKE=/path/to/lake
    dagster asset materialize -f examples/dagster/definitions.py \
        --select lineitem_by_ship_day --partition 1995-06-01
    dagster dev -f examples/dagster/definitions.py      # UI; backfill a partition range from there

Tested with dagster 1.13.29 (see scripts/test-orchestrators).
"""

from __future__ import annotations

import os
import sys

# `dagster ... -f FILE` imports this file without putting its folder on sys.path.
_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

import dagster as dg  # noqa: E402

from idemlake_assets import IdemlakeResource, daily_revenue, lineitem_by_ship_day  # noqa: E402

defs = dg.Definitions(
    assets=[lineitem_by_ship_day, daily_revenue],
    resources={"idemlake": IdemlakeResource()},
)
