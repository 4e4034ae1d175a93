"""Airflow DAG: publish one idemlake window per daily DAG run.

Each run executes, through ``idemlake.airflow.IdemlakeOperator``,

    idemlake --project P --lake L --output json run lineitem_by_ship_day \
        --window 1995-06-01T00:00:00+00:00/1995-06-02T00:00:00+00:00

i.e. the run's data interval (``data_interval_start/data_interval_end``), which idemlake
accepts as an interval of exactly one UTC day. idemlake replaces that
window atomically, so a retry, a cleared task or a second backfill of the same day republishes
the same rows (one more Delta version, never duplicates).

Tested with apache-airflow 3.3.2 (see scripts/test-orchestrators); the imports fall back to the
Airflow 2 locations.

Configuration, resolved when the task runs (first match wins):

    binary   env IDEMLAKE_BIN                                          default: the wheel's ``idemlake``
    project  Airflow Variable ``idemlake_project``  env IDEMLAKE_PROJECT
    lake     Airflow Variable ``idemlake_lake``     env IDEMLAKE_LAKE     default <project>/lake

The binary: install idemlake's wheel (``make wheel``) into the workers' Python environment, as
any other requirement; it puts ``idemlake`` on their PATH (``make test-orchestrators`` runs this
DAG that way):

    pip install idemlake-0.1.0-py3-none-manylinux_2_35_x86_64.whl

Or, on a containerised Airflow, copy it from the image the repository's Dockerfile builds into
your worker image (it needs only glibc and CA certificates, both in the Airflow images):

    COPY --from=registry.example.com/data/idemlake:0.1.0 /usr/local/bin/idemlake /usr/local/bin/idemlake

(Variables can also come from the environment as AIRFLOW_VAR_IDEMLAKE_PROJECT, ...). When the DAG
file is parsed: IDEMLAKE_DAG_START (first logical date, default 1992-01-01), IDEMLAKE_DAG_CATCHUP
(``true`` to let the scheduler create every run since the start date; default false) and
IDEMLAKE_DAG_MAX_ACTIVE_RUNS (default 4; concurrent windows are safe, each is its own commit) and
IDEMLAKE_DAG_RETRY_DELAY_SECONDS (first retry delay, default 120; exponential backoff after).

Data intervals. The schedule is a CronDataIntervalTimetable: the scheduled run with logical date
D covers [D, D+1 day) and starts after D+1 day. Airflow 3's plain ``schedule="@daily"`` would be a
CronTriggerTimetable whose data interval is empty (start == end), which idemlake rejects (exit 2).
Note that a *manual* run -- including ``airflow dags test DAG D`` -- gets the last complete
interval before D, i.e. [D-1 day, D): ``airflow dags test idemlake_lineitem_by_ship_day
1995-06-02`` publishes ship day 1995-06-01.

Backfill recipes (each window is one atomic commit, so any of these can be re-run safely):

  * Through Airflow 3 (runs appear in the UI; needs a running scheduler):
        airflow backfill create --dag-id idemlake_lineitem_by_ship_day \
            --from-date 1995-06-01 --to-date 1995-06-30 --reprocess-behavior failed
    (Airflow 2: ``airflow dags backfill -s 1995-06-01 -e 1995-06-30 idemlake_lineitem_by_ship_day``.)
  * With catchup: set IDEMLAKE_DAG_START to the first day and IDEMLAKE_DAG_CATCHUP=true; the
    scheduler creates one run per missing day, max_active_runs at a time.
  * Outside Airflow, one process, resumable after a crash (only windows never published run):
        idemlake --project P --lake L backfill lineitem_by_ship_day \
            --from 1995-06-01 --to 1995-06-30 --missing --parallel 2
    ``idemlake status lineitem_by_ship_day --from ... --to ... --output json`` shows the result.

Fan-out backfill (a second DAG in this file, ``idemlake_lineitem_by_ship_day_backfill_shards``):
triggered by hand with a range and a number of workers, it maps one task per shard
(dynamic task mapping), each running

    idemlake ... backfill lineitem_by_ship_day --from F --to T --missing --shard I/N

Shard I (from 0, Airflow's map index) takes the I-th of N contiguous, balanced blocks of the
range's windows, so the workers never run the same window; every worker publishes into the same
table (each window is its own atomic commit; concurrent commits of different windows rebase on
each other). ``--missing`` makes a retried shard, or a re-triggered run, do only what is left:

    airflow dags trigger idemlake_lineitem_by_ship_day_backfill_shards \
        --conf '{"from": "1992-01-01", "to": "1998-12-31", "shards": 8, "parallel": 2}'

Retries: one rule, driven by idemlake's report, applied by ``idemlake.airflow.IdemlakeOperator``
(shipped in idemlake's wheel). Every JSON report carries ``retryable``: true for a runtime
failure (exit 1: storage, execution, a source changed during the run, a commit conflict) and for
a window published whose check after the commit failed (exit 5); false for invalid input (2), a
reconciliation mismatch (3), damage found by audit (4) and a failed data check (6), which fail
the same way on every try: the operator raises AirflowFailException for those (the task fails
at once, retries left unused). Without a report (the process was killed) exit codes 2, 3, 4 and
6 are final and the others retried. The report is the task's return value (XCom).
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone

try:  # Airflow 3
    from airflow.sdk import DAG, CronDataIntervalTimetable, Param, task
except ImportError:  # Airflow 2.x
    from airflow import DAG
    from airflow.decorators import task
    from airflow.models.param import Param
    from airflow.timetables.interval import CronDataIntervalTimetable

from idemlake.airflow import IdemlakeOperator

TASK = "lineitem_by_ship_day"

# Rendered when the task runs; empty means the worker's IDEMLAKE_PROJECT / IDEMLAKE_LAKE.
PROJECT = "{{ var.value.get('idemlake_project', '') }}"
LAKE = "{{ var.value.get('idemlake_lake', '') }}"


def retry_args(timeout: timedelta) -> dict:
    """3 retries with exponential backoff (only what the report calls retryable, see above)."""
    return {
        "retries": 3,
        "retry_delay": timedelta(seconds=int(os.environ.get("IDEMLAKE_DAG_RETRY_DELAY_SECONDS", "120"))),
        "retry_exponential_backoff": True,
        "max_retry_delay": timedelta(minutes=30),
        "execution_timeout": timeout,
    }


def _env_flag(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


with DAG(
    dag_id=f"idemlake_{TASK}",
    description=f"idemlake: publish {TASK} one UTC day per run (atomic, idempotent)",
    schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"),
    start_date=datetime.fromisoformat(os.environ.get("IDEMLAKE_DAG_START", "1992-01-01")).replace(
        tzinfo=timezone.utc
    ),
    catchup=_env_flag("IDEMLAKE_DAG_CATCHUP", False),
    max_active_runs=int(os.environ.get("IDEMLAKE_DAG_MAX_ACTIVE_RUNS", "4")),
    default_args=retry_args(timedelta(hours=2)),
    tags=["idemlake", "delta"],
) as dag:
    # The window is the run's data interval; the JSON report is the task's XCom return value.
    IdemlakeOperator(task_id=f"publish_{TASK}", idemlake_task=TASK, project=PROJECT, lake=LAKE)


with DAG(
    dag_id=f"idemlake_{TASK}_backfill_shards",
    description=f"idemlake: backfill a range of {TASK} with N workers (backfill --shard I/N)",
    schedule=None,  # triggered by hand (or by another DAG) with the range in its conf
    # Before any logical date a trigger may carry: Airflow creates no task instances for a
    # run whose logical date precedes the tasks' start date.
    start_date=datetime(1970, 1, 1, tzinfo=timezone.utc),
    catchup=False,
    params={
        "from": Param("1995-06-01", type="string", description="first window (inclusive)"),
        "to": Param("1995-06-30", type="string", description="last window (inclusive)"),
        "shards": Param(4, type="integer", minimum=1, maximum=256, description="workers"),
        "parallel": Param(2, type="integer", minimum=1, maximum=64, description="windows at once per worker"),
    },
    default_args=retry_args(timedelta(hours=6)),
    tags=["idemlake", "delta", "backfill"],
) as backfill_dag:

    @task
    def shards(params=None) -> list[str]:
        """One shard I/N per worker."""
        n = int(params["shards"])
        return [f"{i}/{n}" for i in range(n)]

    IdemlakeOperator.partial(
        task_id=f"backfill_{TASK}_shard",
        idemlake_task=TASK,
        backfill=True,
        from_="{{ params['from'] }}",
        to="{{ params['to'] }}",
        missing=True,
        parallel="{{ params['parallel'] }}",
        project=PROJECT,
        lake=LAKE,
        do_xcom_push=False,
    ).expand(shard=shards())
