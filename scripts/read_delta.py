#!/usr/bin/env python3
"""Read a Delta table with independent clients (delta-rs Python bindings and polars) and print
a JSON summary: total rows, rows per partition value, and sums of the numeric columns asked for.

Usage: read_delta.py TABLE_DIR PARTITION_COLUMN [SUM_COLUMN ...]
Both readers must agree, otherwise the script exits 1.
"""
import json
import sys
from decimal import Decimal

import polars as pl
from deltalake import DeltaTable


def main() -> int:
    path, part, *sums = sys.argv[1:]
    dt = DeltaTable(path)
    arrow_table = dt.to_pyarrow_table()
    by_deltalake = pl.from_arrow(arrow_table)
    by_polars = pl.read_delta(path)
    summaries = []
    for df in (by_deltalake, by_polars):
        per_part = (
            df.group_by(part).len().sort(part).with_columns(pl.col(part).cast(pl.Utf8))
        )
        summaries.append(
            {
                "rows": df.height,
                "version": dt.version(),
                "partitions": {r[0]: r[1] for r in per_part.iter_rows()},
                "sums": {c: str(Decimal(str(df[c].sum()))) for c in sums},
            }
        )
    if summaries[0] != summaries[1]:
        print(json.dumps({"error": "readers disagree", "deltalake": summaries[0], "polars": summaries[1]}))
        return 1
    print(json.dumps(summaries[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
