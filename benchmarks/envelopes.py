"""How an UPSERT window's cost scales with the state: a fixed-size window against prior
states 10x apart, all read from Parquet as a shard would be.

    .venv/bin/python -m benchmarks.envelopes --states 10000 100000 1000000 --window 1000

Half the window's records update existing keys spread over the whole state, half insert
new keys. Reported: the median wall time to compute and write one window's changes and
errors (Parquet, as the shard append would), over ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from benchmarks.report_page import Report, add_page_option, figure, line_chart, publish, table
from cdc_core.envelopes import EnvelopeBatch, apply_upsert
from cdc_core.spark import get_spark

KEY = StructType([StructField("id", LongType())])
VALUE = StructType([StructField("name", StringType()), StructField("n", IntegerType())])


def write_state(spark: SparkSession, keys: int, path: str) -> None:
    spark.range(keys).select(
        F.col("id"),
        F.concat(F.lit("v"), F.col("id").cast("string")).alias("name"),
        (F.col("id") % 100).cast("int").alias("n"),
        F.lit(1).cast("long").alias("diff"),
    ).write.mode("overwrite").parquet(path)


def write_window(spark: SparkSession, keys: int, size: int, path: str) -> None:
    """``size`` records: even ones update existing keys spread over the state, odd ones
    insert new keys."""
    stride = max(keys // max(size // 2, 1), 1)
    i = F.col("id")
    key = F.when(i % 2 == 0, (i / 2).cast("long") * stride).otherwise(keys + i)
    value = F.struct(F.lit("new").alias("name"), (i % 7).cast("int").alias("n"))
    spark.range(size).select(
        F.lit(0).cast("int").alias("partition"),
        i.alias("offset"),
        F.lit(0).cast("long").alias("ts"),
        key.cast("string").alias("key"),
        F.to_json(value).alias("payload"),
    ).write.mode("overwrite").parquet(path)


def run_window(spark: SparkSession, root: Path, run: int) -> float:
    started = time.perf_counter()
    result = apply_upsert(
        EnvelopeBatch(
            spark.read.parquet(str(root / "window")),
            time=1000 + run,
            topic="bench",
            key_schema=KEY,
            value_schema=VALUE,
            prior_changes=spark.read.parquet(str(root / "state")),
            prior_errors=None,
        ),
    )
    outputs: dict[str, DataFrame] = {"changes": result.changes, "errors": result.errors}
    for name, updates in outputs.items():
        updates.write.mode("overwrite").parquet(str(root / f"out-{name}"))
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--states", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--window", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    add_page_option(parser)
    args = parser.parse_args()
    spark = get_spark()
    print(f"window={args.window} records, median of {args.repeat} runs")
    print(f"{'state keys':>12} {'seconds/window':>15} {'change rows':>12}")
    states: dict[int, tuple[float, int]] = {}
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        for keys in args.states:
            write_state(spark, keys, str(root / "state"))
            write_window(spark, keys, args.window, str(root / "window"))
            run_window(spark, root, -1)  # warm-up: JIT and caches
            times = [run_window(spark, root, run) for run in range(args.repeat)]
            changes = spark.read.parquet(str(root / "out-changes")).count()
            states[keys] = (statistics.median(times), changes)
            print(f"{keys:>12} {states[keys][0]:>15.2f} {changes:>12}", flush=True)
    publish(args.page, "benchmarks.envelopes", None, page_report(args.window, states))


def page_report(window: int, states: dict[int, tuple[float, int]]) -> Report:
    """The report page: a window's median seconds against the prior state's keys."""
    drawn, (axes,) = figure()
    line_chart(axes, {"UPSERT": {keys: s for keys, (s, _) in states.items()}}, "state keys",
               "median seconds per window", f"a {window:,}-record UPSERT window against "
               "the state it updates", log_x=True)  # fmt: skip
    body = "\n\n".join([
        f"A window of {window:,} records, half updating keys spread over the state, half "
        "inserting new ones; computed and written to Parquet as a shard append would.",
        table(["state keys", "seconds per window", "change rows"],
              [[f"{keys:,}", f"{s:.2f}", f"{changes:,}"]
               for keys, (s, changes) in states.items()]),
    ])  # fmt: skip
    return Report("envelopes", "An UPSERT window against its state", body, {"state": drawn})


if __name__ == "__main__":
    main()
