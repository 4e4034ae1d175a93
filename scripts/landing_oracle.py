#!/usr/bin/env python3
"""What polars makes of a Hive-partitioned landing zone and of the Delta table built from it,
per day, for the tests of landing-zone sources (tests/it/landing.rs).

Usage: landing_oracle.py SOURCE_DIR TABLE_DIR FIRST_DAY LAST_DAY [TIME_ZONE]
Prints JSON {"source": {day: [rows, sum_v]}, "table": {day: [rows, sum_v]}}: the source read
with polars' own Hive partitioning (rows whose `ts` falls on the day in TIME_ZONE, UTC by
default, days FIRST..LAST inclusive, whatever directory holds them), the table with polars'
Delta reader (column `day`).
"""
import json
import sys
from datetime import date

import polars as pl


def per_day(df: pl.DataFrame, col: str) -> dict:
    out = df.group_by(col).agg(pl.len().alias("n"), pl.col("v").sum().alias("s"))
    return {str(r[col]): [int(r["n"]), int(r["s"])] for r in out.iter_rows(named=True)}


def main() -> int:
    src, table, first, last = sys.argv[1:5]
    tz = sys.argv[5] if len(sys.argv) > 5 else "UTC"
    lo, hi = date.fromisoformat(first), date.fromisoformat(last)
    source = (
        pl.scan_parquet(f"{src}/**/*.parquet", hive_partitioning=True)
        .with_columns(pl.col("ts").dt.convert_time_zone(tz).dt.date().alias("d"))
        .filter((pl.col("d") >= lo) & (pl.col("d") <= hi))
        .collect()
    )
    written = pl.read_delta(table).filter((pl.col("day") >= lo) & (pl.col("day") <= hi))
    print(json.dumps({"source": per_day(source, "d"), "table": per_day(written, "day")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
