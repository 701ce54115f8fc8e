"""reclock against what users would otherwise run, on the same deterministic dumps.

    python -m benchmarks.bench --size medium            # 1M records / 100k keys / 20 windows
    python -m benchmarks.bench --size large --repeats 2 # 10M records / 1M keys
    make bench ARGS="--size smoke"

Contenders, all in one process on one Spark session, run in a rotating order per repeat:

* FLOOR: a Spark read of the dumps with an explicit schema, counting rows;
* FLOOR-PARSE: the same read forced to parse every field (a count of every column);
* NAIVE: one Spark job: latest record per key, deletes dropped, written as Parquet;
* FLOOR-TABLES: the least Spark work that writes the Delta tables reclock writes for this
  source, with none of its machinery (no frontiers, checks, errors table, Dagster):
  ``reclocked`` (each record once, bound to its window by event time), ``changes`` (the
  upsert's retractions and insertions per window) and ``state``. What any Spark design
  that keeps those tables pays, so RECLOCK / FLOOR-TABLES is what the machinery costs;
* MERGE (Spark) / MERGE (Polars): what a Dagster + deltalake user would write: per window,
  the dumps that landed in it, latest record per key, then ``DeltaTable.merge``; the batch
  is prepared by Spark (and collected as Arrow) or by Polars;
* MERGE (delta-spark): the same per-window merge as a Spark user writes it, with Delta's
  own Spark connector (``delta.tables.DeltaTable.forPath(...).merge``);
* RECLOCK (Dagster): the full backfill, ``pipelines.run.materialize`` (assets + checks,
  without the CDCv2 export, which no other contender produces), one run that reclocks
  every window in one pass, timed per engine phase (as the engine announces them through
  ``cdc_core.phases``; the checks and Dagster itself are the rest);
* RECLOCK (Dagster, S3): the same backfill with its lake and landing zone on S3 (with
  ``--s3 s3://bucket/prefix``; endpoint and keys from the AWS environment): the dumps are
  uploaded once under ``<prefix>/dumps/``, each run's lake goes under ``<prefix>/scratch/``;
* RECLOCK (per window): the windows one run each, as a schedule produces them, through
  ``SourcePipeline`` directly (each window's dumps land before its run, which registers
  them, reclocks the window and publishes ``state``), timed per window with its Spark jobs
  and code generator compilations: the per-window cost against the history length.
  ``--records 1000000 --keys 100000 --windows 100``: 10k records a window, 100 windows.

Reported: medians, records/s, ratios to FLOOR and FLOOR-PARSE, output rows, peak memory
(this process plus its descendants, i.e. the Spark JVM), per-window seconds against the
window index, and RECLOCK's time per step. Written to ``bench-out/<timestamp>.md``; with
``--page DIR`` also as a dated report page of the documentation site, with plots of the
seconds per contender and per window (``benchmarks.report_page``).
Generated dumps are kept under ``<workdir>/dumps/`` and reused by later runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import re
import shutil
import statistics
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path

import polars as pl
import pyarrow as pa
from delta.tables import DeltaTable as SparkDeltaTable
from deltalake import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import BooleanType, IntegerType, LongType, StructField, StructType
from pyspark.sql.window import Window

from benchmarks.report_page import Report, add_page_option, figure, line_chart, machine, publish
from cdc_core.config import Config, parse_config, to_struct_type
from cdc_core.ingest import list_dump_files
from cdc_core.phases import PhaseEvent, observing
from cdc_core.reclock import Windows
from cdc_core.schemas import DUMP_RECORD
from cdc_core.shard.delta_io import live_files
from cdc_core.source import SourcePipeline
from cdc_core.spark import DEFAULT_CONF, SPARK_REMOTE, get_spark, is_connect
from cdc_core.storage import Location, delta_options
from cdc_core.storage import files as storage_files
from pipelines.run import materialize
from pipelines.sample import UPSERT_KEY_SCHEMA, UPSERT_VALUE_SCHEMA, generate_dumps

TOPIC = "users"
START = "2026-01-01T00:00:00Z"
KEY = to_struct_type(UPSERT_KEY_SCHEMA)
VALUE = to_struct_type(UPSERT_VALUE_SCHEMA)
# A kcat -J line as a user would declare it: the parsed dump record without its file.
LINE = StructType([field for field in DUMP_RECORD.fields if field.name != "file"])
# MERGE's batch: key, value, the Kafka position of the kept record, and whether it deletes.
# (``partition`` and ``offset`` are SQL keywords in merge predicates, hence the prefix.)
POSITION = [StructField("kafka_partition", IntegerType()), StructField("kafka_offset", LongType())]
MERGE_TARGET = StructType([*KEY.fields, *VALUE.fields, *POSITION])
DELETED = "deleted"
MERGE_BATCH = StructType([*MERGE_TARGET.fields, StructField(DELETED, BooleanType())])

FLOOR, FLOOR_PARSE, NAIVE = "FLOOR", "FLOOR-PARSE", "NAIVE"
FLOOR_TABLES = "FLOOR-TABLES"
MERGE_SPARK, MERGE_POLARS = "MERGE (Spark)", "MERGE (Polars)"
MERGE_DELTA_SPARK = "MERGE (delta-spark)"
RECLOCK_DAGSTER, RECLOCK_WINDOWS = "RECLOCK (Dagster)", "RECLOCK (per window)"
RECLOCK_S3 = "RECLOCK (Dagster, S3)"
MIB = 1 << 20


@dataclasses.dataclass(frozen=True)
class Workload:
    """The generated topic: one upsert topic cut into overlapping dump files."""

    records: int
    keys: int
    partitions: int
    windows: int
    window: str = "1m"
    delete_fraction: float = 0.05
    redelivery_fraction: float = 0.05
    files: int | None = None  # default: one dump file per window
    seed: int = 7

    @property
    def dump_files(self) -> int:
        return self.files or self.windows

    @property
    def name(self) -> str:
        return (
            f"{self.records}r-{self.keys}k-{self.partitions}p-{self.windows}x{self.window}-"
            f"{self.dump_files}f-d{self.delete_fraction}-r{self.redelivery_fraction}-s{self.seed}"
        )


SIZES = {
    "smoke": Workload(records=2_000, keys=200, partitions=3, windows=3),
    "medium": Workload(records=1_000_000, keys=100_000, partitions=4, windows=20),
    "large": Workload(records=10_000_000, keys=1_000_000, partitions=4, windows=20),
}


@dataclasses.dataclass(frozen=True)
class Dataset:
    """Dumps on disk and the reclock config (minus its lake) that reads them."""

    workload: Workload
    landing: Path
    config: Config
    files: tuple[str, ...]
    window_files: tuple[tuple[str, ...], ...]  # per window: the dumps that landed in it
    lines: int
    size_bytes: int
    s3: str | None = None  # ``--s3``: the prefix the dumps are uploaded below

    def windows(self) -> list[tuple[int, int]]:
        width, start = self.config.window_ms, self.config.start_ms
        return [(start + i * width, start + (i + 1) * width) for i in range(self.workload.windows)]

    def config_for(self, lake: Path | Location) -> Config:
        return self.config.model_copy(update={"lake": lake})

    @property
    def remote_landing(self) -> str:
        """Where the dumps are uploaded (``--s3``, which RECLOCK (Dagster, S3) needs)."""
        return f"{self.s3}/dumps/{self.workload.name}"

    def remote_config(self, lake: str) -> Config:
        """The config with its lake at ``lake`` and its landing zone the uploaded dumps."""
        places = {"lake": Location.parse(lake), "landing": Location.parse(self.remote_landing)}
        return self.config.model_copy(update=places)


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What one contender run produced besides its wall time."""

    rows_out: int
    window_seconds: tuple[float, ...] = ()
    steps: dict[str, float] = dataclasses.field(default_factory=dict)
    jobs: dict[str, int] = dataclasses.field(default_factory=dict)  # Spark jobs per step
    window_jobs: tuple[int, ...] = ()  # Spark jobs per window (per-window contenders)
    window_compilations: tuple[int, ...] = ()  # code generator compilations per window


@dataclasses.dataclass(frozen=True)
class Run:
    seconds: float
    peak_total_mib: float
    peak_python_mib: float
    outcome: Outcome


@dataclasses.dataclass(frozen=True)
class BenchResult:
    dataset: Dataset
    repeats: int
    master: str
    runs: dict[str, list[Run]]
    settings: dict[str, str]  # the session's tunables (DEFAULT_CONF's keys) as run


Contender = Callable[[SparkSession, Dataset, Path], Outcome]


# ---- the dumps ---------------------------------------------------------------------------


def prepare_dataset(
    spark: SparkSession, workload: Workload, workdir: Path, s3: str | None = None
) -> Dataset:
    """Generate the dumps once per workload (a marker file says they are complete); with
    ``s3``, upload them once below it too."""
    landing = Path(workdir).absolute() / "dumps" / workload.name
    config = _config(workload, landing)
    marker = landing / "_complete"
    if not marker.exists():
        shutil.rmtree(landing, ignore_errors=True)
        generate_dumps(
            landing,
            TOPIC,
            records=workload.records,
            keys=workload.keys,
            partitions=workload.partitions,
            windows=workload.windows,
            window_ms=config.window_ms,
            start_ms=config.start_ms,
            delete_fraction=workload.delete_fraction,
            redelivery_fraction=workload.redelivery_fraction,
            files=workload.dump_files,
            seed=workload.seed,
        )
        marker.touch()
    dumps = list_dump_files(landing, TOPIC)
    files = tuple(dump.path for dump in dumps)
    by_window: list[list[str]] = [[] for _ in range(workload.windows)]
    for dump in sorted(dumps, key=lambda d: (d.mtime_ms, d.path)):
        index = (dump.mtime_ms - config.start_ms) // config.window_ms
        by_window[min(max(index, 0), workload.windows - 1)].append(dump.path)
    lines = spark.read.schema(LINE).json(list(files)).count()
    dataset = Dataset(
        workload=workload,
        landing=landing,
        config=config,
        files=files,
        window_files=tuple(tuple(paths) for paths in by_window),
        lines=lines,
        size_bytes=sum(dump.size for dump in dumps),
        s3=None if s3 is None else s3.rstrip("/"),
    )
    if s3 is not None:
        upload_dumps(landing, dataset.remote_landing)
    return dataset


def upload_dumps(landing: Path, target: str) -> None:
    """Copy the dumps to ``target`` once (a marker object says the upload is complete).
    The objects' times are the upload's, not the files': the config binds by event
    time, so arrival times do not change what is bound."""
    marker = storage_files.join(target, "_complete")
    if not storage_files.exists(marker):
        for path in sorted(p for p in landing.rglob("*") if p.is_file() and p.name != "_complete"):
            relative = str(path.relative_to(landing))
            storage_files.write_bytes(storage_files.join(target, relative), path.read_bytes())
        storage_files.write_bytes(marker, b"")


def _config(workload: Workload, landing: Path) -> Config:
    """One upsert source, bound by event time, over exactly the generated windows."""
    source = {
        "name": TOPIC,
        "topic": TOPIC,
        "format": "json",
        "key": UPSERT_KEY_SCHEMA,
        "value": UPSERT_VALUE_SCHEMA,
        "envelope": "upsert",
        "reclock": "event-time",
    }
    data = {"lake": "lake", "landing": str(landing), "window": workload.window, "start": START}
    config = parse_config({**data, "sources": [source]}, landing.parent)
    return config.model_copy(
        update={"end_ms": config.start_ms + workload.windows * config.window_ms}
    )


# ---- contenders --------------------------------------------------------------------------


def floor(spark: SparkSession, dataset: Dataset, scratch: Path) -> Outcome:
    return Outcome(rows_out=spark.read.schema(LINE).json(list(dataset.files)).count())


def floor_parse(spark: SparkSession, dataset: Dataset, scratch: Path) -> Outcome:
    lines = spark.read.schema(LINE).json(list(dataset.files))
    counts = lines.agg(*(F.count(name).alias(name) for name in LINE.fieldNames())).first()
    return Outcome(rows_out=counts[0])


def naive(spark: SparkSession, dataset: Dataset, scratch: Path) -> Outcome:
    path = str(scratch / "naive")
    latest = spark_latest(spark, dataset.files)
    latest.where(~F.col(DELETED)).drop(DELETED).write.mode("overwrite").parquet(path)
    return Outcome(rows_out=spark.read.parquet(path).count())


def floor_tables(spark: SparkSession, dataset: Dataset, scratch: Path) -> Outcome:
    """The three tables by plain Spark: each table is written once and read back by the
    next, as durable tables are (see the module docstring)."""
    width, start = dataset.config.window_ms, dataset.config.start_ms
    first_end, last_end = start + width, start + dataset.workload.windows * width
    by_offset = Window.partitionBy("partition").orderBy("offset")
    lines = spark.read.schema(LINE).json(list(dataset.files))
    # Event time: a record is bound at the first window end above its partition's running
    # maximum timestamp; a redelivered position is kept once.
    running = F.max("ts").over(by_offset.rowsBetween(Window.unboundedPreceding, 0))
    bound_at = F.greatest(F.floor((running - start) / width) * width + start + width,
                          F.lit(first_end))
    reclocked = (
        lines.select("*", bound_at.alias("time"), F.lag("offset").over(by_offset).alias("prev"))
        .where(F.col("prev").isNull() | (F.col("prev") != F.col("offset")))
        .where(F.col("time") <= last_end)
        .select(*LINE.fieldNames(), "time", F.lit(1).alias("diff"))
    )
    reclocked.write.format("delta").save(str(scratch / "reclocked"))

    # Per key and window, the newest record; a change retracts the key's previous value.
    newest = (
        spark.read.format("delta").load(str(scratch / "reclocked"))
        .groupBy("key", "time")
        .agg(F.max_by("payload", F.struct("partition", "offset")).alias("payload"))
        .select(F.from_json("key", KEY).alias("k"), F.from_json("payload", VALUE).alias("v"),
                "time")
    )
    by_time = Window.partitionBy("k").orderBy("time")
    changed = newest.select("*", F.lag("v").over(by_time).alias("before")).where(
        ~F.col("v").eqNullSafe(F.col("before"))
    )
    inserted = changed.where(F.col("v").isNotNull()).select(
        "k", "v", "time", F.lit(1).alias("diff")
    )
    retracted = changed.where(F.col("before").isNotNull()).select(
        "k", F.col("before").alias("v"), "time", F.lit(-1).alias("diff")
    )
    changes = inserted.unionByName(retracted).select("k.*", "v.*", "time", "diff")
    changes.write.format("delta").save(str(scratch / "changes"))

    columns = [*KEY.fieldNames(), *VALUE.fieldNames()]
    state = (
        spark.read.format("delta").load(str(scratch / "changes"))
        .groupBy(*columns)
        .agg(F.sum("diff").alias("count"))
        .where(F.col("count") > 0)
        .drop("count")
    )
    state.write.format("delta").save(str(scratch / "state"))
    return Outcome(rows_out=_delta_rows(str(scratch / "state")))


def merge_spark(spark: SparkSession, dataset: Dataset, scratch: Path) -> Outcome:
    return merge_windows(dataset, scratch, lambda files: spark_latest(spark, files).toArrow())


def merge_polars(spark: SparkSession, dataset: Dataset, scratch: Path) -> Outcome:
    return merge_windows(dataset, scratch, polars_latest)


def merge_delta_spark(spark: SparkSession, dataset: Dataset, scratch: Path) -> Outcome:
    """Per window, as a Spark user writes it: the latest record per key of the dumps that
    landed, merged by Delta's own Spark connector (no row leaves the executors)."""
    path = str(scratch / "merged")
    target = (
        SparkDeltaTable.createIfNotExists(spark).location(path).addColumns(MERGE_TARGET).execute()
    )
    columns = {name: f"s.{name}" for name in MERGE_TARGET.fieldNames()}
    on = " AND ".join(f"t.{name} = s.{name}" for name in KEY.fieldNames())
    newer = "s.kafka_offset > t.kafka_offset"

    def merge(files: Sequence[str], steps: Counter[str]) -> None:
        with _timed(steps, "DeltaTable.merge (delta-spark)"):
            (
                target.alias("t")
                .merge(spark_latest(spark, files).alias("s"), on)
                .whenMatchedDelete(f"s.{DELETED} AND {newer}")
                .whenMatchedUpdate(f"NOT s.{DELETED} AND {newer}", set=columns)
                .whenNotMatchedInsert(f"NOT s.{DELETED}", values=columns)
                .execute()
            )

    seconds, steps = timed_windows(dataset, merge)
    return Outcome(_delta_rows(path), seconds, steps)


def reclock_dagster(spark: SparkSession, dataset: Dataset, scratch: Path) -> Outcome:
    return reclock_backfill(spark, dataset.config_for(scratch / "lake"))


def reclock_dagster_s3(spark: SparkSession, dataset: Dataset, scratch: Path) -> Outcome:
    lake = f"{dataset.s3}/scratch/{scratch.name}-{uuid.uuid4().hex[:8]}"
    try:
        return reclock_backfill(spark, dataset.remote_config(lake))
    finally:
        storage_files.delete_tree(lake)


def reclock_backfill(spark: SparkSession, config: Config) -> Outcome:
    """RECLOCK's backfill of ``config``, timed per engine step."""
    steps: Counter[str] = Counter()
    jobs: Counter[str] = Counter()
    with timed_engine_steps(spark, steps, jobs):
        if not materialize(config, exports=False):
            raise RuntimeError("the reclock backfill failed; see the Dagster log above")
    return Outcome(rows_out=state_rows(config), steps=dict(steps), jobs=dict(jobs))


def reclock_per_window(spark: SparkSession, dataset: Dataset, scratch: Path) -> Outcome:
    """The engine alone (no Dagster, no checks), one run per window as a schedule runs it:
    the window's dumps land (hard links into a landing zone of the run's own), then the run
    registers them, reclocks the window and publishes ``state``. Timed per window, with its
    Spark jobs and code generator compilations. Landing the dumps as they arrive keeps
    what a run reads what a scheduled run reads: with every dump registered at once, each
    run would count the dumps still ahead of it as its input."""
    landing = scratch / "landing"
    config = dataset.config_for(scratch / "lake").model_copy(
        update={"landing": Location.parse(str(landing))}
    )
    steps: Counter[str] = Counter()
    jobs: Counter[str] = Counter()
    seconds, run_jobs, compilations = [], [], []
    with timed_engine_steps(spark, steps, jobs):
        pipeline = SourcePipeline.from_config(spark, config, config.sources[0])
        for (start, end), paths in zip(dataset.windows(), dataset.window_files, strict=True):
            for path in paths:
                arrived = landing / Path(path).relative_to(dataset.landing)
                arrived.parent.mkdir(parents=True, exist_ok=True)
                os.link(path, arrived)
            jobs_before, compiled_before = jobs_started(spark), compilations_done(spark)
            started = time.perf_counter()
            pipeline.register_dumps(arrival_ms=end)
            pipeline.run_windows(Windows.one(start, end))
            pipeline.finish()
            seconds.append(time.perf_counter() - started)
            run_jobs.append(jobs_started(spark) - jobs_before)
            compilations.append(compilations_done(spark) - compiled_before)
    return Outcome(state_rows(config), tuple(seconds), dict(steps), dict(jobs),
                   tuple(run_jobs), tuple(compilations))  # fmt: skip


def jobs_started(spark: SparkSession) -> int:
    """Spark jobs started so far by this session's JVM, asked of its job scheduler in one
    call (the status tracker's list of retained job ids crosses the gateway an id at a
    time: up to a thousand calls a phase, a cost that grew with every window measured).
    0 over Spark Connect: the jobs run in the server, out of sight."""
    if is_connect(spark):
        return 0
    return spark.sparkContext._jsc.sc().dagScheduler().numTotalJobs()  # type: ignore[union-attr]


def compilations_done(spark: SparkSession) -> int:
    """Code generator compilations so far in this session's JVM (0 over Spark Connect)."""
    if is_connect(spark):
        return 0
    metrics = spark._jvm.org.apache.spark.metrics.source.CodegenMetrics  # type: ignore[union-attr]
    return metrics.METRIC_COMPILATION_TIME().getCount()


CONTENDERS: dict[str, Contender] = {
    FLOOR: floor,
    FLOOR_PARSE: floor_parse,
    NAIVE: naive,
    FLOOR_TABLES: floor_tables,
    MERGE_SPARK: merge_spark,
    MERGE_POLARS: merge_polars,
    MERGE_DELTA_SPARK: merge_delta_spark,
    RECLOCK_DAGSTER: reclock_dagster,
    RECLOCK_S3: reclock_dagster_s3,
    RECLOCK_WINDOWS: reclock_per_window,
}


def spark_latest(spark: SparkSession, files: Sequence[str]) -> DataFrame:
    """The newest record per key (by Kafka position), decoded, with a delete flag."""
    lines = spark.read.schema(LINE).json(list(files))
    keyed = lines.select(
        F.from_json("key", KEY).alias("k"),
        F.struct(
            F.col("partition").alias("kafka_partition"),
            F.col("offset").alias("kafka_offset"),
            "payload",
        ).alias("record"),
    ).select("k.*", "record")
    newest = keyed.groupBy(*KEY.fieldNames()).agg(
        F.max_by("record", F.struct("record.kafka_partition", "record.kafka_offset")).alias("r")
    )
    return newest.select(
        *KEY.fieldNames(),
        F.from_json("r.payload", VALUE).alias("v"),
        "r.kafka_partition",
        "r.kafka_offset",
        F.col("r.payload").isNull().alias(DELETED),
    ).select(*KEY.fieldNames(), "v.*", "kafka_partition", "kafka_offset", DELETED)


def polars_latest(files: Sequence[str]) -> pa.Table:
    """``spark_latest`` as a single-node user would write it in Polars."""
    lines = pl.scan_ndjson(list(files), schema=_polars_schema(LINE))
    newest = (
        lines.with_columns(pl.col("key").str.json_decode(pl.Struct(_polars_schema(KEY))))
        .unnest("key")
        .sort("partition", "offset")
        .unique(subset=KEY.fieldNames(), keep="last")
    )
    decoded = newest.select(
        *KEY.fieldNames(),
        pl.col("payload").str.json_decode(pl.Struct(_polars_schema(VALUE))).alias("v"),
        pl.col("partition").alias("kafka_partition"),
        pl.col("offset").alias("kafka_offset"),
        pl.col("payload").is_null().alias(DELETED),
    )
    flat = decoded.unnest("v").select(MERGE_BATCH.fieldNames())
    return flat.collect().to_arrow().cast(to_arrow_schema(MERGE_BATCH))


def merge_windows(
    dataset: Dataset, scratch: Path, prepare: Callable[[Sequence[str]], pa.Table]
) -> Outcome:
    """Per window: prepare the batch of the dumps that landed in it, then merge it into
    a Delta table; a position guard keeps an older redelivered record from winning."""
    path = str(scratch / "merged")
    target = DeltaTable.create(path, to_arrow_schema(MERGE_TARGET))

    def merge(files: Sequence[str], steps: Counter[str]) -> None:
        with _timed(steps, "prepare batch"):
            batch = prepare(files)
        with _timed(steps, "DeltaTable.merge"):
            merge_batch(target, batch)

    seconds, steps = timed_windows(dataset, merge)
    return Outcome(_delta_rows(path), seconds, steps)


def timed_windows(
    dataset: Dataset, merge: Callable[[Sequence[str], Counter[str]], None]
) -> tuple[tuple[float, ...], dict[str, float]]:
    """Merge each window's dumps (a window without any costs nothing), timing every window
    and the steps ``merge`` records."""
    steps: Counter[str] = Counter()
    seconds = []
    for files in dataset.window_files:
        started = time.perf_counter()
        if files:
            merge(files, steps)
        seconds.append(time.perf_counter() - started)
    return tuple(seconds), dict(steps)


def merge_batch(target: DeltaTable, batch: pa.Table) -> None:
    on = " AND ".join(f"t.{name} = s.{name}" for name in KEY.fieldNames())
    newer = "s.kafka_offset > t.kafka_offset"
    (
        target.merge(batch, predicate=on, source_alias="s", target_alias="t")
        .when_matched_delete(f"s.{DELETED} AND {newer}")
        .when_matched_update_all(f"NOT s.{DELETED} AND {newer}", except_cols=[DELETED])
        .when_not_matched_insert_all(f"NOT s.{DELETED}", except_cols=[DELETED])
        .execute()
    )


def state_rows(config: Config) -> int:
    return _delta_rows(str(config.lake / TOPIC / "state"))


def _delta_rows(path: str) -> int:
    table = DeltaTable(path, storage_options=delta_options(path))
    return sum(file.num_records for file in live_files(table))


def _polars_schema(schema: StructType) -> pl.Schema:
    return pl.from_arrow(to_arrow_schema(schema).empty_table()).schema


def slug(name: str) -> str:
    """A contender's name for the command line and its scratch folder: ``merge-spark``."""
    return "-".join(re.findall(r"[a-z0-9]+", name.lower()))


def by_slug() -> dict[str, str]:
    """Every contender's name by its name on the command line."""
    return {slug(name): name for name in CONTENDERS}


# ---- timing and memory -------------------------------------------------------------------


@contextmanager
def _timed(steps: Counter[str], step: str) -> Iterator[None]:
    started = time.perf_counter()
    try:
        yield
    finally:
        steps[step] += time.perf_counter() - started


@contextmanager
def timed_engine_steps(
    spark: SparkSession, steps: Counter[str], jobs: Counter[str] | None = None
) -> Iterator[None]:
    """Accumulate wall time (and Spark jobs started) per engine phase, as the engine
    announces its phases (cdc_core.phases); the run's other time is Dagster and checks.
    Over Spark Connect the jobs run in the server, out of this process's sight: no counts."""
    counted = not is_connect(spark)
    started: dict[str, int] = {}

    def record(event: PhaseEvent) -> None:
        if not event.ended:
            started[event.name] = jobs_started(spark)
            return
        steps[event.name] += event.seconds or 0.0
        if jobs is not None and counted:
            now = jobs_started(spark)
            jobs[event.name] += now - started.pop(event.name, now)

    with observing(record):
        yield


class PeakMemory:
    """The peak resident memory of this process and of all its descendants (the Spark JVM
    and its Python workers), sampled from /proc by a background thread."""

    SAMPLE_SECONDS = 0.2
    RESCAN_SAMPLES = 10  # look for new descendant processes every 2 s

    def __init__(self) -> None:
        self.peak_total = 0
        self.peak_python = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        me = os.getpid()
        pids: list[int] = []
        samples = 0
        while True:
            if samples % self.RESCAN_SAMPLES == 0:
                pids = [me, *_descendants(me)]
            sizes = [_rss_bytes(pid) for pid in pids]
            self.peak_python = max(self.peak_python, sizes[0])
            self.peak_total = max(self.peak_total, sum(sizes))
            samples += 1
            if self._stop.wait(self.SAMPLE_SECONDS):
                return


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(entry))
    found, frontier = [], [root]
    while frontier:
        kids = children.get(frontier.pop(), [])
        found += kids
        frontier += kids
    return found


def _rss_bytes(pid: int) -> int:
    try:
        resident_pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return 0  # the process ended between two samples
    return resident_pages * os.sysconf("SC_PAGE_SIZE")


# ---- the run -----------------------------------------------------------------------------


def run_benchmark(
    spark: SparkSession,
    workload: Workload,
    workdir: Path,
    *,
    repeats: int,
    contenders: Sequence[str] | None = None,
    s3: str | None = None,
) -> BenchResult:
    """Every contender (by default all; RECLOCK (Dagster, S3) only with ``s3``) ``repeats``
    times; repeat ``r`` starts ``r`` places further down the list, so no contender always
    runs first (cold) or right after the same one."""
    if contenders is None:
        contenders = [name for name in CONTENDERS if s3 is not None or name != RECLOCK_S3]
    if RECLOCK_S3 in contenders and s3 is None:
        raise ValueError(f"{RECLOCK_S3} needs s3 (--s3 s3://bucket/prefix)")
    dataset = prepare_dataset(spark, workload, workdir, s3)
    floor_parse(spark, dataset, Path(workdir))  # warm up the JVM and the page cache
    runs: dict[str, list[Run]] = {name: [] for name in contenders}
    for repeat in range(repeats):
        shift = repeat % len(contenders)
        for name in [*contenders[shift:], *contenders[:shift]]:
            scratch = Path(workdir).absolute() / "scratch" / slug(name)
            shutil.rmtree(scratch, ignore_errors=True)
            scratch.mkdir(parents=True)
            with PeakMemory() as memory:
                started = time.perf_counter()
                outcome = CONTENDERS[name](spark, dataset, scratch)
                seconds = time.perf_counter() - started
            shutil.rmtree(scratch, ignore_errors=True)
            runs[name].append(
                Run(seconds, memory.peak_total / MIB, memory.peak_python / MIB, outcome)
            )
            per_window = " ".join(f"{w:.1f}" for w in outcome.window_seconds)
            print(f"[{repeat + 1}/{repeats}] {name:<18} {seconds:9.2f} s  {per_window}", flush=True)
    settings = {key: str(spark.conf.get(key, None)) for key in sorted(DEFAULT_CONF)}
    master = spark.conf.get("spark.master") + (" (over Spark Connect)" if is_connect(spark) else "")
    return BenchResult(dataset, repeats, master, runs, settings)


# ---- the report --------------------------------------------------------------------------


def median_seconds(runs: Sequence[Run]) -> float:
    return statistics.median(run.seconds for run in runs)


def window_medians(runs: Sequence[Run]) -> list[float]:
    """Per window index, the median over repeats."""
    return _per_window_median([run.outcome.window_seconds for run in runs])


def _per_window_median(series: Sequence[Sequence[float]]) -> list[float]:
    """Per window index, the median of ``series`` (one per repeat)."""
    return [statistics.median(values) for values in zip(*series, strict=True)]


def history_growth(series: Sequence[float]) -> tuple[int, int, float] | None:
    """``(early, late, late/early)``: the last window against the window a tenth of the
    way in (1-based, at least the 2nd so table creation is not the baseline), among the
    windows that cost anything: a contender that skips a window no dump landed in
    (0 s) has no figure there to compare."""
    worked = [(window, seconds) for window, seconds in enumerate(series, 1) if seconds > 0]
    if len(worked) < 3:
        return None
    (early, first), (late, last) = worked[max(2, round(len(worked) / 10)) - 1], worked[-1]
    return early, late, last / first


def render(result: BenchResult) -> str:
    dataset, workload = result.dataset, result.dataset.workload
    medians = {name: median_seconds(runs) for name, runs in result.runs.items()}
    lines = [
        f"# reclock benchmark, {datetime.now(UTC):%Y-%m-%d %H:%M:%S} UTC",
        "",
        f"- records {workload.records:,} ({dataset.lines:,} dump lines with redeliveries), "
        f"keys {workload.keys:,}, partitions {workload.partitions}, "
        f"windows {workload.windows} x {workload.window}",
        f"- deletes {workload.delete_fraction:.0%}, redeliveries "
        f"{workload.redelivery_fraction:.0%}, {len(dataset.files)} dump files, "
        f"{dataset.size_bytes / MIB:,.1f} MiB, seed {workload.seed}",
        f"- Spark {result.master}, {result.repeats} repeat(s) in rotating order, "
        f"medians; {os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f} at the end",
        f"- machine: {machine()}; Python {platform.python_version()}, pyspark "
        f"{version('pyspark')}, delta-spark {version('delta-spark')}, "
        f"deltalake {version('deltalake')}, polars {version('polars')}",
        "- Spark settings: " + ", ".join(f"{k}={v}" for k, v in result.settings.items()),
        "",
        "| contender | median s | runs s | records/s | x FLOOR | x FLOOR-PARSE | rows out "
        "| peak RSS MiB (all) | peak RSS MiB (Python) |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, runs in result.runs.items():
        seconds = medians[name]
        lines.append(
            f"| {name} | {seconds:.2f} | {' '.join(f'{r.seconds:.1f}' for r in runs)} "
            f"| {workload.records / seconds:,.0f} | {_ratio(seconds, medians.get(FLOOR))} "
            f"| {_ratio(seconds, medians.get(FLOOR_PARSE))} | {runs[-1].outcome.rows_out:,} "
            f"| {max(r.peak_total_mib for r in runs):,.0f} "
            f"| {max(r.peak_python_mib for r in runs):,.0f} |"
        )
    lines += _window_section(result) + _steps_section(result) + _targets_section(result, medians)
    return "\n".join(lines) + "\n"


def _ratio(seconds: float, base: float | None) -> str:
    return f"{seconds / base:.2f}" if base else "-"


def _windowed(result: BenchResult) -> dict[str, list[float]]:
    return {
        name: window_medians(runs)
        for name, runs in result.runs.items()
        if runs[0].outcome.window_seconds
    }


def _window_section(result: BenchResult) -> list[str]:
    series = _windowed(result)
    if not series:
        return []
    names = list(series)
    lines = [
        "",
        "## Seconds per window against window index (history length), median over repeats",
        "",
        "| window | " + " | ".join(names) + " |",
        "|---:|" + "---:|" * len(names),
    ]
    for index, row in enumerate(zip(*series.values(), strict=True), start=1):
        lines.append(f"| {index} | " + " | ".join(f"{value:.2f}" for value in row) + " |")
    for name, values in series.items():
        growth = history_growth(values)
        if growth is not None:
            early, late, ratio = growth
            lines.append(
                f"\n{name}: window {late} / window {early} = {ratio:.2f}x "
                f"(history {late / early:.0f}x longer)"
            )
        lines += _window_work(name, values, result.runs[name])
    return lines


def _window_work(name: str, seconds: Sequence[float], runs: Sequence[Run]) -> list[str]:
    """A per-window contender's typical window: median seconds, Spark jobs and code
    generator compilations over its windows after the first (which creates the tables),
    and the last tenth of the windows against ten around the tenth window."""
    outcome = runs[0].outcome
    if len(seconds) < 20 or not outcome.window_jobs:
        return []
    tenth = len(seconds) // 10
    first = max(1, tenth - 5)  # never the first window
    early = statistics.median(seconds[first:tenth + 5])
    late = statistics.median(seconds[-tenth:])
    jobs = _per_window_median([r.outcome.window_jobs for r in runs])
    compiled = _per_window_median([r.outcome.window_compilations for r in runs])
    return [
        f"\n{name}, windows 2 to {len(seconds)}: median {statistics.median(seconds[1:]):.2f} s, "
        f"{statistics.median(jobs[1:]):.0f} Spark jobs (at most {max(jobs[1:]):.0f}) and "
        f"{statistics.median(compiled[1:]):.0f} code generator compilations per window "
        f"(first window {jobs[0]:.0f} jobs, {compiled[0]:.0f} compilations); the last "
        f"{tenth} windows' median / windows {first + 1} to {tenth + 5}'s = {late / early:.2f}x"
    ]


def _steps_section(result: BenchResult) -> list[str]:
    lines = []
    for name, runs in result.runs.items():
        if not runs[0].outcome.steps:
            continue
        total = median_seconds(runs)
        steps = {
            step: statistics.median(r.outcome.steps.get(step, 0.0) for r in runs)
            for step in runs[0].outcome.steps
        }
        jobs = {
            step: statistics.median(r.outcome.jobs.get(step, 0) for r in runs)
            for step in runs[0].outcome.steps
        }
        lines += [
            "",
            f"## {name}: time and Spark jobs per step (median over repeats)",
            "",
            "| step | seconds | share | Spark jobs |",
            "|---|---:|---:|---:|",
        ]
        counted = any(r.outcome.jobs for r in runs)  # none over Spark Connect
        for step, seconds in sorted(steps.items(), key=lambda item: -item[1]):
            count = f"{jobs[step]:.0f}" if counted else "-"
            lines.append(f"| {step} | {seconds:.2f} | {seconds / total:.0%} | {count} |")
        rest = total - sum(steps.values())
        lines.append(f"| everything else | {rest:.2f} | {rest / total:.0%} | |")
    return lines


def targets(workload: Workload) -> tuple[float, float]:
    """RECLOCK's ceilings (x FLOOR-PARSE, x MERGE (Polars)) for a backfill of this size:
    fixed costs weigh more on smaller ones."""
    return (5.0, 2.0) if workload.records >= 10_000_000 else (8.0, 4.0)


def _targets_section(result: BenchResult, medians: dict[str, float]) -> list[str]:
    reclock = medians.get(RECLOCK_DAGSTER)
    parse_target, merge_target = targets(result.dataset.workload)
    lines = ["", "## Targets", ""]
    if reclock and FLOOR_PARSE in medians:
        ratio = reclock / medians[FLOOR_PARSE]
        lines.append(f"- RECLOCK / FLOOR-PARSE = {ratio:.2f}x (target <= {parse_target})")
    if reclock and FLOOR_TABLES in medians:
        tables = medians[FLOOR_TABLES]
        lines.append(f"- RECLOCK / FLOOR-TABLES = {reclock / tables:.2f}x (reclock's machinery)")
        if FLOOR_PARSE in medians:
            ratio = tables / medians[FLOOR_PARSE]
            lines.append(
                f"- FLOOR-TABLES / FLOOR-PARSE = {ratio:.2f}x: no Spark design that writes "
                f"these tables gets under it (target for RECLOCK <= {parse_target})"
            )
    if reclock and MERGE_POLARS in medians:
        ratio = reclock / medians[MERGE_POLARS]
        lines.append(f"- RECLOCK / MERGE (Polars) = {ratio:.2f}x (target <= {merge_target})")
    for name, values in _windowed(result).items():
        growth = history_growth(values)
        if growth is not None:
            lines.append(f"- {name} per-window growth = {growth[2]:.2f}x (RECLOCK target <= 1.2)")
    return lines


def figures(result: BenchResult) -> dict:
    """The report's plots: median seconds per contender and, for the contenders timed per
    window, seconds per window against the window index (the history behind it)."""
    medians = {name: median_seconds(runs) for name, runs in result.runs.items()}
    series = _windowed(result)
    drawn, axes = figure(rows=2 if series else 1)
    names = sorted(medians, key=medians.get)
    axes[0].barh(names, [medians[name] for name in names], color="tab:blue")
    axes[0].set_xlabel("median wall seconds")
    workload = result.dataset.workload
    axes[0].set_title(f"{workload.records:,} records, {workload.keys:,} keys, "
                      f"{workload.windows} windows: the whole workload")  # fmt: skip
    if series:
        by_window = {name: dict(enumerate(values, 1)) for name, values in series.items()}
        line_chart(axes[1], by_window, "window (history length)", "seconds",
                   "cost per window against window count")  # fmt: skip
    return {"seconds": drawn}


def page_report(result: BenchResult, size: str, rendered: str) -> Report:
    """The report page: the rendered report under the page's own dated title, and the
    plots; named by the preset ``size``, or by records and windows when they differ."""
    workload = result.dataset.workload
    label = size if workload == SIZES[size] else f"{workload.records}r-{workload.windows}w"
    body = rendered.split("\n", 1)[1]
    return Report(f"bench-{label}", "reclock against its peers", body, figures(result))


def add_workload_arguments(parser: argparse.ArgumentParser) -> None:
    """The workload options: a preset ``--size``, and any of its fields overridden."""
    parser.add_argument("--size", choices=SIZES, default="medium", help="preset workload")
    parser.add_argument("--records", type=int)
    parser.add_argument("--keys", type=int)
    parser.add_argument("--partitions", type=int)
    parser.add_argument("--windows", type=int)
    parser.add_argument("--window", help="window length, e.g. 1m")
    parser.add_argument("--deletes", type=float, dest="delete_fraction")
    parser.add_argument("--redeliveries", type=float, dest="redelivery_fraction")
    parser.add_argument("--files", type=int, help="dump files (default: one per window)")
    parser.add_argument("--seed", type=int)


def workload_from(args: argparse.Namespace) -> Workload:
    """The workload ``add_workload_arguments``'s options name."""
    overrides = {
        field.name: getattr(args, field.name)
        for field in dataclasses.fields(Workload)
        if getattr(args, field.name, None) is not None
    }
    return dataclasses.replace(SIZES[args.size], **overrides)


def arguments() -> argparse.ArgumentParser:
    """The command's options (its workload, contenders and outputs)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_workload_arguments(parser)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--contenders", nargs="+", choices=by_slug())
    parser.add_argument("--s3", help=f"s3://bucket/prefix for {RECLOCK_S3} (AWS environment)")
    parser.add_argument("--workdir", type=Path, default=Path("bench-out"))
    parser.add_argument("--out", type=Path, help="report file (default bench-out/<time>.md)")
    add_page_option(parser)
    parser.add_argument(
        "--master",
        help="Spark master (default local[2]); sc://host:port runs every contender attached "
        "to that Spark Connect server (e.g. one `reclock spark-server` runs)",
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    args = arguments().parse_args(argv)

    workload = workload_from(args)
    if args.master and args.master.startswith("sc://"):
        os.environ[SPARK_REMOTE] = args.master  # the backfill's own sessions attach too
    spark = get_spark(args.master, places=[args.s3] if args.s3 else ())
    result = run_benchmark(
        spark,
        workload,
        args.workdir,
        repeats=args.repeats,
        contenders=[by_slug()[name] for name in args.contenders] if args.contenders else None,
        s3=args.s3,
    )
    report = render(result)
    out = args.out or args.workdir / f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(report, encoding="utf-8")
    print(report)
    print(f"written to {out}")
    if args.page is not None:
        publish(args.page, "benchmarks.bench", argv, page_report(result, args.size, report))


if __name__ == "__main__":
    main()
