"""One window's writes for N sources, each with its own columns: one Spark job per source
against one job for all of them.

    python -m benchmarks.stacking [--sources 1 16 64 200] [--records 20] [--repeat 3]
                                  [--page DIR] [--workdir DIR]

Today a run serves each source with its own small Spark jobs, so a window costs a fixed
amount more per source, whatever its data. This measures the floor of the alternative:
every source's rows in one frame with a ``source`` column, typed and written by one job.
Each source has its own shard (six columns of mixed types, then ``time`` and ``diff``)
and, per window, ``--records`` JSON payloads to decode into those columns and append.

Contenders, each timed over ``--repeat`` windows, in turn on the same shards:

- ``job per source``: ``ShardWriter.append`` of the source's frame (``from_json`` with its
  schema), one source after another: a Spark write job and a Delta commit each, as a run
  appends its outputs today;
- ``union of typed plans``: one frame that unions every source's typed plan (as
  ``to_json`` text, the one shape they share), counted in one job; nothing is written
  (a union cannot carry N schemas into N tables), so it is the floor of that design;
- ``one generic job``: ``cdc_core.shard.together.append_together``: one ``mapInArrow``
  job over all sources' payloads; each task decodes every source's rows with that
  source's Arrow schema and writes them as Parquet into the shard's own staging folder
  (driver: footers only); then every shard commits its staged files (the same
  compare-and-set as an append), from 4 threads.

Reports the wall seconds per window of each, per source, and the slope per source added
between the smallest and the largest N. Local disk only. ``--page DIR`` writes a report
page with its plot (``benchmarks/report_page.py``).
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from statistics import median

import pyarrow as pa
import pyarrow.json as pa_json
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BooleanType,
    DataType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from benchmarks.report_page import Report, add_page_option, figure, line_chart, publish, table
from cdc_core.shard import Shard
from cdc_core.shard.together import TARGET, Batch, append_together
from cdc_core.spark import get_spark

COLUMNS = 6
KINDS: tuple[DataType, ...] = (
    LongType(), StringType(), DoubleType(), BooleanType(), TimestampType(),
)  # fmt: skip
COMMIT_THREADS = 4


def source_schema(source: int) -> StructType:
    """Source ``source``'s own columns: six, named after it, of kinds that vary by source."""
    return StructType(
        [StructField(f"s{source}_c{j}", KINDS[(source + j) % len(KINDS)]) for j in range(COLUMNS)]
    )


def payload(source: int, record: int) -> str:
    """A JSON payload filling every column of ``source_schema(source)``."""
    values: dict[str, object] = {}
    for field in source_schema(source).fields:
        kind = field.dataType
        values[field.name] = (
            record if isinstance(kind, LongType) else
            record / 4 if isinstance(kind, DoubleType) else
            record % 2 == 0 if isinstance(kind, BooleanType) else
            f"2026-12-04T12:{record % 60:02d}:00Z" if isinstance(kind, TimestampType) else
            f"text {record}"
        )  # fmt: skip
    return json.dumps(values)


@dataclass
class Deployment:
    """N sources' shards and the window being appended."""

    spark: SparkSession
    shards: list[Shard]
    records: int
    time: int = -1  # the last window appended (a new shard's upper is 0)

    @classmethod
    def create(cls, spark: SparkSession, root: Path, n: int, records: int) -> Deployment:
        """Fresh shards for ``n`` sources."""
        shutil.rmtree(root, ignore_errors=True)
        shards = [Shard.open(spark, str(root / f"s{i}"), source_schema(i)) for i in range(n)]
        return cls(spark, shards, records)

    def payloads(self) -> DataFrame:
        """Every source's payloads of the next window: ``source``, ``payload``."""
        n = len(self.shards)
        rows = pa.table(
            {
                "source": pa.array([s for s in range(n) for _ in range(self.records)], pa.int32()),
                "payload": [
                    payload(s, r + self.time) for s in range(n) for r in range(self.records)
                ],
            }
        )
        return self.spark.createDataFrame(rows).repartition(2)

    def next_window(self) -> int:
        """The time of the window now appended: each contender that writes appends a
        window of its own, after the last."""
        self.time += 1
        return self.time


def job_per_source(deployment: Deployment) -> None:
    """Each source's rows typed by Spark and appended on their own."""
    frame = deployment.payloads().cache()
    time_ = deployment.next_window()
    for source, shard in enumerate(deployment.shards):
        schema = source_schema(source)
        typed = (
            frame.where(F.col("source") == source)
            .select(F.from_json("payload", schema).alias("row"))
            .select("row.*", F.lit(time_).alias("time"), F.lit(1).cast("long").alias("diff"))
        )
        shard.append(typed, time_, time_ + 1, consolidated=True)
    frame.unpersist()


def union_of_typed_plans(deployment: Deployment) -> None:
    """Every source's typed plan in one union (as text), counted in one job."""
    frame = deployment.payloads().cache()
    plans = [
        frame.where(F.col("source") == source).select(
            F.lit(source).alias("_target"),
            F.to_json(F.from_json("payload", source_schema(source))).alias("row"),
        )
        for source in range(len(deployment.shards))
    ]
    union = plans[0]
    for plan in plans[1:]:
        union = union.unionByName(plan)
    union.groupBy("_target").count().collect()
    frame.unpersist()


def one_generic_job(deployment: Deployment) -> None:
    """All sources' rows typed and staged by one job; every shard commits its own files
    (``cdc_core.shard.together.append_together``)."""
    time_ = deployment.next_window()
    rows = deployment.payloads().select(
        F.col("source").cast("string").alias(TARGET), "payload",
        F.lit(time_).alias("time"), F.lit(1).cast("long").alias("diff"),
    )  # fmt: skip
    batches = {str(i): Batch(shard, time_, time_ + 1) for i, shard in enumerate(deployment.shards)}
    append_together(rows, batches, _decode, threads=COMMIT_THREADS)


def _decode(target: str, rows: pa.Table) -> pa.Table:
    """A source's payloads read with its Arrow schema; ``time`` and ``diff`` kept."""
    layout = to_arrow_schema(source_schema(int(target)), timezone="UTC")
    data = "\n".join(rows.column("payload").to_pylist()).encode() + b"\n"
    options = pa_json.ParseOptions(explicit_schema=layout, unexpected_field_behavior="ignore")
    typed = pa_json.read_json(io.BytesIO(data), parse_options=options)
    return typed.append_column("time", rows.column("time")).append_column(
        "diff", rows.column("diff"))


CONTENDERS: dict[str, Callable[[Deployment], None]] = {
    "job per source": job_per_source,
    "union of typed plans": union_of_typed_plans,
    "one generic job": one_generic_job,
}


def measure(
    spark: SparkSession, root: Path, n: int, records: int, repeat: int
) -> dict[str, list[float]]:
    """Wall seconds per window of each contender for ``n`` sources, contenders in turn."""
    deployment = Deployment.create(spark, root / f"n{n}", n, records)
    for contender in CONTENDERS.values():  # warm: the first window of each is not timed
        contender(deployment)
    seconds: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    for _ in range(repeat):
        for name, contender in CONTENDERS.items():
            began = time.perf_counter()
            contender(deployment)
            seconds[name].append(time.perf_counter() - began)
    return seconds


def report_body(results: dict[int, dict[str, list[float]]]) -> str:
    """The table of medians, per window and per source, and each contender's slope."""
    rows = [
        [n, name, f"{median(samples):.2f}", f"{median(samples) / n:.3f}"]
        for n, seconds in results.items()
        for name, samples in seconds.items()
    ]
    body = table(["sources", "contender", "s per window (median)", "s per source"], rows)
    low, high = min(results), max(results)
    if high > low:
        slopes = []
        for name in CONTENDERS:
            added = (median(results[high][name]) - median(results[low][name])) / (high - low)
            slopes.append(f"- {name}: {added * 1000:.0f} ms per source added")
        body += "\n\n" + "\n".join(slopes)
    return body


def page_report(results: dict[int, dict[str, list[float]]]) -> Report:
    """The report page: each contender's seconds per window against the source count."""
    drawn, (axes,) = figure()
    line_chart(
        axes,
        {name: {n: median(results[n][name]) for n in results} for name in CONTENDERS},
        "sources",
        "seconds per window (median)",
        "One window's typed appends to every source's shard",
    )
    return Report("stacking", "One job for many sources", report_body(results), {"seconds": drawn})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sources", type=int, nargs="+", default=[1, 16, 64, 200])
    parser.add_argument("--records", type=int, default=20, help="per source and window")
    parser.add_argument("--repeat", type=int, default=3, help="timed windows per contender")
    parser.add_argument("--workdir", type=Path)
    add_page_option(parser)
    args = parser.parse_args(argv)
    root = args.workdir or Path(tempfile.mkdtemp(prefix="stacking-"))
    spark = get_spark("local[2]", {"spark.sql.shuffle.partitions": "2"})
    results: dict[int, dict[str, list[float]]] = {}
    for n in args.sources:
        results[n] = measure(spark, root, n, args.records, args.repeat)
        print(report_body({n: results[n]}), flush=True)
    print(report_body(results))
    publish(args.page, "benchmarks.stacking", argv, page_report(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
