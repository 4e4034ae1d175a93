#!/usr/bin/env python3
"""Read a Delta table with independent clients (delta-rs Python bindings, polars, and DuckDB
with its delta extension) and print a JSON summary: total rows, rows per partition value, and
sums of the numeric columns asked for.

Usage: read_delta.py TABLE_DIR PARTITION_COLUMN [SUM_COLUMN ...]
All readers must agree, otherwise the script exits 1.
"""
import glob
import json
import os
import sys
import sysconfig
from decimal import Decimal

import duckdb
import polars as pl
from deltalake import DeltaTable

READERS = ["deltalake", "polars", "duckdb"]


def read_duckdb(path: str) -> pl.DataFrame:
    """The table as DuckDB's delta extension reads it (the extension file the
    duckdb-ext-delta wheel ships, loaded by path: no download at test time)."""
    found = glob.glob(os.path.join(sysconfig.get_paths()["purelib"], "duckdb_ext", "extensions",
                                   "v" + duckdb.__version__, "*", "delta.duckdb_extension"))
    if not found:
        raise SystemExit("read_delta.py: no delta.duckdb_extension in this environment (scripts/py-env)")
    con = duckdb.connect()
    con.execute(f"LOAD '{found[0]}'")
    return con.execute("SELECT * FROM delta_scan(?)", [path]).pl()


def main() -> int:
    path, part, *sums = sys.argv[1:]
    dt = DeltaTable(path)
    arrow_table = dt.to_pyarrow_table()
    by_deltalake = pl.from_arrow(arrow_table)
    by_polars = pl.read_delta(path)
    by_duckdb = read_duckdb(path)
    summaries = []
    for df in (by_deltalake, by_polars, by_duckdb):
        per_part = (
            df.group_by(part).len().sort(part).with_columns(pl.col(part).cast(pl.Utf8))
        )
        summaries.append(
            {
                "rows": df.height,
                "version": dt.version(),
                "readers": READERS,
                "partitions": {r[0]: r[1] for r in per_part.iter_rows()},
                "sums": {c: str(Decimal(str(df[c].sum()))) for c in sums},
            }
        )
    if any(s != summaries[0] for s in summaries[1:]):
        print(json.dumps({"error": "readers disagree", **dict(zip(READERS, summaries))}))
        return 1
    print(json.dumps(summaries[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
