"""Benchmark of the shard layer: append throughput, and snapshot/listen time against a
bare ``spark.read.parquet`` of the same files and against Delta's Spark data source.

    python -m benchmarks.shard --rows 5000000 --history 100

Every read is forced in full with Spark's ``noop`` sink, so the figures measure reading
and computing, not collecting. Each read runs ``--repeat`` times; the best run counts.
``--history N`` then appends N small batches and times a read of the newest one through
the shard (its pruned file list) and through Delta's data source (``versionAsOf`` the
shard's version, data skipping on ``time``): the read a run does every window.
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

from benchmarks.report_page import Report, add_page_option, bar_chart, figure, publish, table
from cdc_core.frontier import TimeFrontier
from cdc_core.shard import Shard
from cdc_core.shard.delta_io import count_by_time, shard_schema
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
    parser.add_argument("--history", type=int, default=0, help="small appends after the big one")
    add_page_option(parser)
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
    delta = best_seconds(lambda: run_fully(delta_read(spark, shard, 0, TIMES - 1)), args.repeat)
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
    print(f"Delta data source read  {delta:>9.2f} s  ({delta / bare:.1f}x bare read)")
    newest = small_reads(spark, shard, args.history, args.repeat) if args.history else {}
    reads = {"bare spark.read.parquet": bare, "shard snapshot": snapshot,
             "shard listen": listen, "Delta data source": delta}  # fmt: skip
    publish(args.page, "benchmarks.shard", None,
            page_report(args.rows, append_seconds, reads, args.history, newest))  # fmt: skip


def page_report(
    rows: int, append: float, reads: dict[str, float], history: int, newest: dict[str, float]
) -> Report:
    """The report page: the big batch's reads, and (after ``history`` small commits) the
    newest batch's, best seconds each."""
    drawn, axes = figure(rows=2 if newest else 1, height=3.0)
    bar_chart(axes[0], reads, "best seconds", f"reading {rows:,} rows in full")
    if newest:
        bar_chart(axes[1], newest, "best seconds",
                  f"reading the newest 1,000 rows after {history} commits")  # fmt: skip
    parts = [
        f"An append of {rows:,} rows (stage and commit) took {append:.2f} s "
        f"({rows / append:,.0f} rows/s). Every read runs in full into Spark's no-op sink.",
        table(["read", "best s", "x bare read"],
              [[name, f"{s:.2f}", f"{s / reads['bare spark.read.parquet']:.1f}"]
               for name, s in reads.items()]),
    ]  # fmt: skip
    if newest:
        parts.append(table([f"newest batch after {history} commits", "best s"],
                           [[name, f"{s:.3f}"] for name, s in newest.items()]))  # fmt: skip
    return Report("shard", "Reading a shard", "\n\n".join(parts), {"reads": drawn})


def delta_read(spark: SparkSession, shard: Shard, after: int, until: int) -> DataFrame:
    """What ``shard.listen(after, until)`` reads, through Delta's Spark data source."""
    rows = spark.read.format("delta").option("versionAsOf", shard.version).load(shard.path)
    return rows.where((F.col("time") > after) & (F.col("time") <= until))


def small_reads(
    spark: SparkSession, shard: Shard, batches: int, repeat: int
) -> dict[str, float]:
    """Append ``batches`` batches of 1,000 rows, one time each, then time reading the newest
    batch both ways (a window's read on a long history); their best seconds by name."""
    lower = shard.upper.time
    for index in range(batches):
        time_ = lower + index
        rows = generated_updates(spark, 1000).withColumn("time", F.lit(time_).cast("long"))
        outcome = shard.compare_and_append(
            rows.coalesce(1), TimeFrontier.at(time_), TimeFrontier.at(time_ + 1)
        )
        if outcome is not None:
            raise SystemExit(f"benchmark append lost its upper: {outcome}")
    newest = shard.upper.time - 1
    listen = best_seconds(lambda: run_fully(shard.listen(newest - 1, newest)), repeat)
    delta = best_seconds(lambda: run_fully(delta_read(spark, shard, newest - 1, newest)), repeat)
    print(f"after {batches} more commits (version {shard.version}), reading the newest batch:")
    print(f"  listen (file list)    {listen:>9.3f} s")
    print(f"  Delta data source     {delta:>9.3f} s  ({delta / listen:.1f}x)")
    return {"shard listen (file list)": listen, "Delta data source": delta}


if __name__ == "__main__":
    main()
