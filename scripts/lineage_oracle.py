#!/usr/bin/env python3
"""What polars makes of a task's input and of the table a downstream task built from it, per
downstream window, for the tests of staleness across tasks (tests/it/lineage.rs).

Usage:
  lineage_oracle.py windows INPUT TS AMOUNT TABLE WINDOW_COL TZ GRAIN FIRST LAST
      INPUT: a Delta table (directory) or a CSV file; its rows are grouped by the window of
      GRAIN (day | week, in time zone TZ) holding column TS (an instant). TABLE: the
      downstream Delta table, one row per window: WINDOW_COL (the window's first local date),
      `n` and `total`. Prints {"input": {date: [rows, sum AMOUNT]}, "table": {date: [n,
      total]}} for the windows whose first date lies in FIRST..LAST (inclusive).
  lineage_oracle.py rows TABLE KEY
      Prints the Delta table's rows as JSON objects (all values as text), sorted by KEY.
"""
import json
import sys
from datetime import date

import polars as pl


def instants(df: pl.DataFrame, ts: str) -> pl.Expr:
    col = pl.col(ts)
    if df.schema[ts] == pl.String:
        col = col.str.to_datetime(time_zone="UTC")
    elif getattr(df.schema[ts], "time_zone", None) is None:
        col = col.dt.replace_time_zone("UTC")
    return col


def windows(args: list) -> dict:
    inp, ts, amount, table, window_col, tz, grain, first, last = args
    lo, hi = date.fromisoformat(first), date.fromisoformat(last)
    src = pl.read_csv(inp) if inp.endswith(".csv") else pl.read_delta(inp)
    every = {"day": "1d", "week": "1w"}[grain]
    src = src.with_columns(
        instants(src, ts)
        .dt.convert_time_zone(tz)
        .dt.truncate(every)
        .dt.date()
        .alias("__w")
    ).filter((pl.col("__w") >= lo) & (pl.col("__w") <= hi))
    agg = src.group_by("__w").agg(pl.len().alias("n"), pl.col(amount).sum().alias("s"))
    out = pl.read_delta(table).filter(
        (pl.col(window_col) >= lo) & (pl.col(window_col) <= hi)
    )
    return {
        "input": {str(r["__w"]): [int(r["n"]), int(r["s"])] for r in agg.iter_rows(named=True)},
        "table": {
            str(r[window_col]): [int(r["n"]), int(r["total"] or 0)]
            for r in out.iter_rows(named=True)
            if r["n"]
        },
    }


def rows(args: list) -> list:
    table, key = args
    df = pl.read_delta(table).sort(key)
    return [{k: str(v) for k, v in r.items()} for r in df.iter_rows(named=True)]


def main() -> int:
    cmd, rest = sys.argv[1], sys.argv[2:]
    print(json.dumps({"windows": windows, "rows": rows}[cmd](rest)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
