"""Benchmark of the shard layer: append throughput, and snapshot/listen time against a
bare ``spark.read.parquet`` of the same files.

    python -m pipelines.bench_shard --rows 5000000

Every read is forced in full with Spark's ``noop`` sink, so the figures measure reading
and computing, not collecting. Each read runs ``--repeat`` times; the best run counts.
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from collections.abc import Callable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from cdc_core.delta_io import count_by_time, shard_schema
from cdc_core.frontier import TimeFrontier
from cdc_core.shard import Shard
from cdc_core.spark import get_spark

DATA = StructType([StructField("key", StringType()), StructField("value", LongType())])
TIMES = 10  # the batch spreads its updates over this many IntoTimes


def generated_updates(spark: SparkSession, rows: int) -> DataFrame:
    """``rows`` distinct updates (nothing consolidates away), spread over TIMES times."""
    ids = spark.range(rows)
    return ids.select(
        F.concat(F.lit("key-"), F.col("id").cast("string")).alias("key"),
        (F.col("id") * 7).alias("value"),
        (F.col("id") % TIMES).alias("time"),
        F.lit(1).cast("long").alias("diff"),
    )


def run_fully(df: DataFrame) -> None:
    df.write.format("noop").mode("overwrite").save()


def best_seconds(action: Callable[[], None], repeat: int) -> float:
    timings = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        timings.append(time.perf_counter() - start)
    return min(timings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--workdir", default="bench-out/shard")
    parser.add_argument("--master", default=None, help="Spark master (default: local[2])")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()

    spark = get_spark(args.master)
    shutil.rmtree(args.workdir, ignore_errors=True)
    run_fully(spark.range(1000).groupBy((F.col("id") % 3).alias("g")).count())  # warm up

    shard = Shard.open(spark, os.path.join(args.workdir, "table"), DATA)
    updates = generated_updates(spark, args.rows)
    start = time.perf_counter()
    staged = shard.stage(updates)
    staged_at = time.perf_counter()
    outcome = shard.commit(staged, TimeFrontier.minimum(), TimeFrontier.at(TIMES))
    committed_at = time.perf_counter()
    if outcome is not None:
        raise SystemExit(f"benchmark append lost its upper: {outcome}")
    append_seconds = committed_at - start

    files = [os.path.join(shard.path, f.path) for f in staged.files]
    schema = shard_schema(DATA)
    bare = best_seconds(lambda: run_fully(spark.read.schema(schema).parquet(*files)), args.repeat)
    snapshot = best_seconds(lambda: run_fully(shard.snapshot(TIMES - 1)), args.repeat)
    listen = best_seconds(lambda: run_fully(shard.listen(0)), args.repeat)
    counting = best_seconds(
        lambda: count_by_time(spark, shard.path, staged.files, schema), args.repeat
    )
    size = sum(f.size for f in staged.files)

    print(f"rows                    {args.rows:>12,}")
    print(f"spark master            {spark.sparkContext.master:>12}")
    print(f"files / bytes           {len(files):>5} / {size:,}")
    print(
        f"append (stage+commit)   {append_seconds:>9.2f} s  "
        f"({args.rows / append_seconds:,.0f} rows/s)"
    )
    print(f"  stage (Spark write)   {staged_at - start:>9.2f} s")
    print(
        f"  per-time counts alone {counting:>9.2f} s  (part of stage; footers suffice "
        "when each file holds one time)"
    )
    print(f"  commit (driver)       {committed_at - staged_at:>9.3f} s")
    print(f"bare spark.read.parquet {bare:>9.2f} s")
    print(f"snapshot(as_of)         {snapshot:>9.2f} s  ({snapshot / bare:.1f}x bare read)")
    print(f"listen(as_of)           {listen:>9.2f} s  ({listen / bare:.1f}x bare read)")


if __name__ == "__main__":
    main()
