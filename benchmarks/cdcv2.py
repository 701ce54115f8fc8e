"""Throughput of the data-parallel CDCv2 reader against a plain Spark read.

Writes a scrambled stream (every fact once, a share of them again, all shuffled) as
Parquet update rows plus JSON-lines progress statements (two tilings and copies),
then times ``spark_reader.read_stream`` (judging counts, then writing out the
complete updates to Spark's no-op sink) against counting every column of the same
files, and against a plain ``dropDuplicates`` of them (the least any deduplicating
reader must do). Run: ``python -m benchmarks.cdcv2 --updates 5000000``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from benchmarks.report_page import Report, add_page_option, bar_chart, figure, publish, table
from cdc_core.cdcv2 import DataColumns, Progress, codec_json, read_stream, tile_progress
from cdc_core.frontier import TimeFrontier
from cdc_core.spark import get_spark

DATA = StructType([StructField("key", LongType()), StructField("value", StringType())])
EPOCH = 1_700_000_000_000  # first IntoTime of the stream, epoch milliseconds
TICK = 1_000  # one second between times

Result = TypeVar("Result")


def timed(action: Callable[[], Result]) -> tuple[Result, float]:
    started = time.perf_counter()
    result = action()
    return result, time.perf_counter() - started


def write_nowhere(frame: DataFrame) -> None:
    """Compute every row and column, keep nothing (Spark's no-op sink)."""
    frame.write.format("noop").mode("overwrite").save()


def facts(spark: SparkSession, updates: int, times: int) -> DataFrame:
    """``updates`` distinct facts spread evenly over ``times`` times; diffs +1 / -1."""
    ids = spark.range(updates)
    return ids.select(
        F.col("id").alias("key"),
        F.concat(F.lit("value-"), (F.col("id") % 997).cast("string")).alias("value"),
        (F.lit(EPOCH) + (F.col("id") % times) * TICK).alias("time"),
        F.when(F.col("id") % 5 == 0, -1).otherwise(1).cast("long").alias("diff"),
    )


def announced(updates: int, times: int) -> dict[int, int]:
    """The count per time of ``facts``, worked out without reading them."""
    per_time, extra = divmod(updates, times)
    counts = {EPOCH + t * TICK: per_time + (t < extra) for t in range(times)}
    return {at: count for at, count in counts.items() if count}


def write_stream(
    spark: SparkSession, folder: Path, updates: int, times: int, duplicated: float
) -> tuple[list[Progress], TimeFrontier]:
    """Write the scrambled stream; returns its progress statements and upper."""
    stream = facts(spark, updates, times)
    copies = stream.sample(fraction=duplicated, seed=7)
    scrambled = stream.unionByName(copies).orderBy(F.rand(seed=11))
    scrambled.write.mode("overwrite").parquet(str(folder / "updates"))

    upper = TimeFrontier.at(EPOCH + times * TICK)
    counts = announced(updates, times)
    statements = list(tile_progress(counts, 0, upper, 10))
    statements += list(tile_progress(counts, 0, upper, 7)) + statements[::3]
    columns = DataColumns(DATA)
    lines = [codec_json.encode(p, columns) + "\n" for p in reversed(statements)]
    (folder / "progress.jsonl").write_text("".join(lines))
    return statements, upper


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=5_000_000, help="distinct updates")
    parser.add_argument("--times", type=int, default=1_000, help="distinct times")
    parser.add_argument("--duplicated", type=float, default=0.1, help="share sent twice")
    parser.add_argument("--workdir", type=Path, default=None, help="keep the files here")
    parser.add_argument("--master", default=None, help="Spark master (default local[2])")
    add_page_option(parser)
    args = parser.parse_args(argv)

    spark = get_spark(args.master)
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.workdir or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        _, seconds = timed(
            lambda: write_stream(spark, folder, args.updates, args.times, args.duplicated)
        )
        print(f"wrote the scrambled stream in {seconds:.1f} s to {folder}")
        updates = spark.read.parquet(str(folder / "updates"))
        columns = DataColumns(DATA)
        progress_lines = (folder / "progress.jsonl").read_text().splitlines()
        progress = [codec_json.decode(line, columns) for line in progress_lines]

        count_all = updates.select([F.count(c) for c in updates.columns])
        count_all.first()  # warm the file cache for both contenders
        rows, plain = timed(count_all.first)
        _, dedup = timed(lambda: write_nowhere(updates.dropDuplicates()))
        imported, judge = timed(lambda: read_stream(updates, progress))
        _, output = timed(lambda: write_nowhere(imported.updates))
        complete = imported.updates.count()

    reads = Reads(rows[0], args.updates, plain, dedup, judge, output)
    print(f"update rows in files:     {reads.rows:,} ({args.updates:,} distinct facts)")
    for name, seconds in reads.seconds.items():
        print(f"{name + ':':<25} {seconds:7.1f} s  {reads.rows / seconds:12,.0f} rows/s")
    print(f"reader: judge + frontier: {judge:7.1f} s")
    print(f"reader: write out result: {output:7.1f} s")
    print(f"reader / plain read:      {reads.reader / plain:7.1f}x")
    print(f"reader / plain dedup:     {reads.reader / dedup:7.1f}x")
    print(f"complete frontier: {imported.frontier}; complete updates: {complete:,}")
    if complete != args.updates:
        raise SystemExit(f"expected {args.updates:,} complete updates, read {complete:,}")
    publish(args.page, "benchmarks.cdcv2", argv, page_report(reads))


@dataclass(frozen=True)
class Reads:
    """The seconds of each read of the same update rows (``facts`` distinct): a plain
    read, a plain dedup, and the reader's two steps."""

    rows: int
    facts: int
    plain: float
    dedup: float
    judge: float
    output: float

    @property
    def reader(self) -> float:
        """The reader's seconds: judging the counts, then writing out the result."""
        return self.judge + self.output

    @property
    def seconds(self) -> dict[str, float]:
        """Each contender's seconds, by name."""
        return {"plain read, count all": self.plain, "plain dedup, write out": self.dedup,
                "reader total": self.reader}  # fmt: skip


def page_report(reads: Reads) -> Report:
    """The report page: each contender's rows per second."""
    drawn, (axes,) = figure(height=3.0)
    bar_chart(axes, {name: reads.rows / s for name, s in reads.seconds.items()},
              "update rows per second", f"{reads.rows:,} update rows, "
              f"{reads.facts:,} distinct")  # fmt: skip
    body = "\n\n".join([
        "A scrambled stream (every fact once, a share again, all shuffled) as Parquet "
        "update rows with JSON-lines progress statements; the reader judges the counts, "
        "then writes the complete updates to Spark's no-op sink.",
        table(["read", "seconds", "rows/s", "x plain read"],
              [[name, f"{s:.1f}", f"{reads.rows / s:,.0f}", f"{s / reads.plain:.1f}"]
               for name, s in reads.seconds.items()]),
        f"The reader's share: judging and the frontier {reads.judge:.1f} s, writing out "
        f"the result {reads.output:.1f} s.",
    ])  # fmt: skip
    return Report("cdcv2", "The CDCv2 reader's throughput", body, {"throughput": drawn})


if __name__ == "__main__":
    main()
