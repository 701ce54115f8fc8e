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
- ``one generic job``: one ``mapInArrow`` job over all sources' payloads; each task
  decodes every source's rows with that source's Arrow schema and writes them as Parquet
  into the shard's own staging folder (driver: footers only); then every shard commits
  its staged files (``ShardWriter.commit``: the same compare-and-set as an append), from
  4 threads.

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
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from statistics import median

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json
import pyarrow.parquet as pq
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
from cdc_core.frontier import TimeFrontier
from cdc_core.shard import Shard, StagedBatch, delta_io
from cdc_core.spark import get_spark

COLUMNS = 6
KINDS: tuple[DataType, ...] = (
    LongType(), StringType(), DoubleType(), BooleanType(), TimestampType(),
)  # fmt: skip
COMMIT_THREADS = 4
WRITTEN = "_target int, path string"


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
    """All sources' rows typed and staged by one job; every shard commits its own files."""
    time_ = deployment.next_window()
    shards = deployment.shards
    batches = {source: delta_io.new_batch_id(None) for source in range(len(shards))}
    targets = {source: (shard.path, batches[source]) for source, shard in enumerate(shards)}
    stage = _stager(targets, time_)
    written = deployment.payloads().mapInArrow(stage, WRITTEN).collect()
    files: dict[int, list[str]] = {}
    for row in written:
        files.setdefault(row["_target"], []).append(row["path"])

    def commit(source: int) -> None:
        shard = shards[source]
        described = tuple(delta_io.describe_file(shard.path, p) for p in files.get(source, []))
        rows = sum(f.num_records for f in described)
        staged = StagedBatch(batches[source], described, ((time_, rows),) if rows else ())
        lower, upper = TimeFrontier.at(time_), TimeFrontier.at(time_ + 1)
        if shard.commit(staged, lower, upper) is not None:
            raise RuntimeError(f"shard {shard.path} moved under the benchmark")

    with ThreadPoolExecutor(COMMIT_THREADS) as pool:
        list(pool.map(commit, range(len(shards))))


def _stager(
    targets: dict[int, tuple[str, str]], time_: int
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The task function of the generic job: per source in each batch, decode its payloads
    with its Arrow schema and write them as one Parquet file into its shard's staging
    folder; yields ``(_target, path)`` of every file written (path relative to the shard)."""

    def stage(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            table = pa.Table.from_batches([batch])
            sources, paths = [], []
            for source in pc.unique(table.column("source")).to_pylist():
                path, batch_id = targets[source]
                columns = source_schema(source)
                texts = table.filter(pc.equal(table.column("source"), source)).column("payload")
                data = "\n".join(texts.to_pylist()).encode() + b"\n"
                options = pa_json.ParseOptions(
                    explicit_schema=to_arrow_schema(columns, timezone="UTC"),
                    unexpected_field_behavior="ignore",
                )
                typed = pa_json.read_json(io.BytesIO(data), parse_options=options)
                typed = typed.append_column(
                    "time", pa.array([time_] * typed.num_rows, pa.int64())
                ).append_column("diff", pa.array([1] * typed.num_rows, pa.int64()))
                relative = f"{delta_io.DATA_DIR}/{batch_id}/part-{uuid.uuid4().hex}.parquet"
                target = Path(path) / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                layout = to_arrow_schema(delta_io.shard_schema(columns), timezone="UTC")
                pq.write_table(typed.cast(layout), target)
                sources.append(source)
                paths.append(relative)
            yield pa.RecordBatch.from_pydict(
                {"_target": pa.array(sources, pa.int32()), "path": pa.array(paths, pa.string())}
            )

    return stage


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
