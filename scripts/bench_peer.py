"""Peers and readers for `make bench` (run with the .venv-bench interpreter).

One process does one thing, so the driver (scripts/bench.py) can time it as a whole process:

  window   TABLE SOURCE DAY      (a) polars reads the day from the source Parquet and
                                 deltalake's write_deltalake(mode="overwrite", predicate=...)
                                 replaces that day's partition: what an orchestrator would run
                                 once per window.
  floor    SOURCE OUT            (b) the no-transaction floor: polars write_parquet(partition_by=)
                                 of the whole table.
  dfcopy   SOURCE OUT [serial]   (c) DataFusion COPY ... PARTITIONED BY of the whole table;
                                 `serial` sets datafusion.execution.parquet.
                                 allow_single_file_parallelism=false (one encoder per file).
  deltaload SOURCE TABLE         extra: the whole table in one write_deltalake commit.
  checksum delta|parquet PATH [FROM TO]
                                 count, sum(l_extendedprice), sum(l_orderkey*l_linenumber) of a
                                 Delta table (polars scan_delta, i.e. the deltalake reader),
                                 a hive-partitioned Parquet directory, or the source (`source`),
                                 optionally restricted to ship days FROM <= d <= TO; prints JSON.
  daycounts delta|source PATH FROM TO
                                 per ship day: rows and sum(l_extendedprice), JSON (the worker
                                 scaling bench's per-window check, scripts/bench_scale.py).
  creates PATH                   the versions of a Delta table's log that created it (CREATE
                                 TABLE) and how many table ids it had, JSON, read with deltalake
                                 (workers racing to create one table must leave one creation).

All writers produce the same 15 columns as tables/lineitem_by_ship_day.toml, in the same order
and with the same types, with `l_shipdate` renamed `ship_date` (the partition column). With
`--narrow` (window, floor) they produce the 6 columns of bench.py's narrow task instead:
l_orderkey, l_linenumber, ship_date, l_extendedprice, l_quantity, l_shipmode.
"""

import datetime as dt
import json
import sys

COLUMNS = [
    "l_orderkey", "l_linenumber", "l_partkey", "l_suppkey",
    "l_quantity", "l_extendedprice", "l_discount", "l_tax",
    "l_returnflag", "l_linestatus", "l_commitdate", "l_receiptdate",
    "l_shipinstruct", "l_shipmode",
]


NARROW = [False]


def _select(pl):
    if NARROW[0]:
        return [pl.col("l_orderkey"), pl.col("l_linenumber"), pl.col("l_shipdate").alias("ship_date"),
                pl.col("l_extendedprice"), pl.col("l_quantity"), pl.col("l_shipmode")]
    return [pl.col(c) for c in COLUMNS] + [pl.col("l_shipdate").alias("ship_date")]


def window(table, source, day):
    import polars as pl
    from deltalake import write_deltalake

    start = dt.date.fromisoformat(day)
    end = start + dt.timedelta(days=1)
    df = (
        pl.scan_parquet(source)
        .filter((pl.col("l_shipdate") >= start) & (pl.col("l_shipdate") < end))
        .select(_select(pl))
        .collect()
    )
    write_deltalake(
        table,
        df.to_arrow(),
        mode="overwrite",
        predicate=f"ship_date = '{start.isoformat()}'",
        partition_by=["ship_date"],
    )
    print(json.dumps({"day": day, "rows": df.height}))


def floor(source, out):
    import polars as pl

    df = pl.scan_parquet(source).select(_select(pl)).collect()
    df.write_parquet(out, partition_by="ship_date")
    print(json.dumps({"rows": df.height}))


def dfcopy(source, out, mode="default"):
    from datafusion import SessionConfig, SessionContext

    cfg = SessionConfig()
    if mode == "serial":
        cfg = cfg.set("datafusion.execution.parquet.allow_single_file_parallelism", "false")
    ctx = SessionContext(cfg)
    ctx.register_parquet("lineitem", source)
    cols = ", ".join(COLUMNS)
    res = ctx.sql(
        f"COPY (SELECT {cols}, l_shipdate AS ship_date FROM lineitem) "
        f"TO '{out.rstrip('/')}/' STORED AS PARQUET PARTITIONED BY (ship_date)"
    ).collect()
    print(json.dumps({"rows": int(res[0].column(0)[0].as_py())}))


def deltaload(source, table):
    import polars as pl
    from deltalake import write_deltalake

    df = pl.scan_parquet(source).select(_select(pl)).collect()
    write_deltalake(table, df.to_arrow(), mode="overwrite", partition_by=["ship_date"])
    print(json.dumps({"rows": df.height}))


def checksum(kind, path, lo=None, hi=None):
    import polars as pl

    if kind == "delta":
        lf = pl.scan_delta(path)
        col = "ship_date"
    elif kind == "parquet":
        lf = pl.scan_parquet(
            f"{path.rstrip('/')}/**/*.parquet",
            hive_partitioning=True,
            hive_schema={"ship_date": pl.Date},
        )
        col = "ship_date"
    elif kind == "source":
        lf = pl.scan_parquet(path)
        col = "l_shipdate"
    else:
        raise SystemExit(f"unknown checksum kind {kind}")
    if lo:
        lf = lf.filter(
            (pl.col(col) >= dt.date.fromisoformat(lo)) & (pl.col(col) <= dt.date.fromisoformat(hi))
        )
    row = lf.select(
        pl.len().alias("rows"),
        pl.col("l_extendedprice").sum().alias("price"),
        (pl.col("l_orderkey").cast(pl.Int64) * pl.col("l_linenumber").cast(pl.Int64))
        .sum()
        .alias("keys"),
        pl.col(col).n_unique().alias("days"),
    ).collect().row(0, named=True)
    out = {k: (str(v) if v is not None else "0") for k, v in row.items()}
    out["rows"] = int(row["rows"])
    out["days"] = int(row["days"])
    if kind == "delta":
        from deltalake import DeltaTable

        out["version"] = DeltaTable(path).version()
    print(json.dumps(out))


def daycounts(kind, path, lo, hi):
    """{day: [rows, sum(l_extendedprice)]} of a Delta table (`delta`) or the source (`source`)
    over the inclusive range, read with polars."""
    import polars as pl

    if kind == "delta":
        lf, col = pl.scan_delta(path), "ship_date"
    elif kind == "source":
        lf, col = pl.scan_parquet(path), "l_shipdate"
    else:
        raise SystemExit(f"unknown daycounts kind {kind}")
    lf = lf.filter(
        (pl.col(col) >= dt.date.fromisoformat(lo)) & (pl.col(col) <= dt.date.fromisoformat(hi))
    )
    df = (
        lf.group_by(pl.col(col).cast(pl.Utf8).alias("day"))
        .agg(pl.len().alias("rows"), pl.col("l_extendedprice").sum().cast(pl.Utf8).alias("price"))
        .collect()
    )
    print(json.dumps({r["day"]: [int(r["rows"]), r["price"]] for r in df.iter_rows(named=True)}))


def creates(path):
    """{"creates": [versions], "ids": n}: the CREATE TABLE commits of a Delta table and its
    distinct table ids over its log, read with deltalake."""
    from deltalake import DeltaTable

    t = DeltaTable(path)
    made = sorted(h["version"] for h in t.history() if h.get("operation") == "CREATE TABLE")
    ids = {DeltaTable(path, version=v).metadata().id for v in made}
    print(json.dumps({"creates": made, "ids": len(ids | {t.metadata().id})}))


def main(argv):
    cmd, args = argv[1], [a for a in argv[2:] if a != "--narrow"]
    NARROW[0] = "--narrow" in argv[2:]
    {"window": window, "floor": floor, "dfcopy": dfcopy, "deltaload": deltaload,
     "checksum": checksum, "daycounts": daycounts, "creates": creates}[cmd](*args)


if __name__ == "__main__":
    main(sys.argv)
