"""CDCv2 streams as files for downstream consumers: JSON lines (one message per line)
or Avro object container files (one message per record), in one folder.

Updates are written by the executors, one file per Spark partition (and per part, when a
stream is split into windows, each its own folder); the progress statements (small) by
the driver. Every file appears atomically (written under a hidden name, then renamed), so
a reader never sees half a file; a retried task may leave a second copy of its updates,
which the protocol absorbs as duplication.
"""

from __future__ import annotations

import bisect
import itertools
import operator
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import LongType, StructField, StructType

from cdc_core.cdcv2 import codec_json
from cdc_core.cdcv2.codec_avro import AvroCodec
from cdc_core.cdcv2.data_columns import DataColumns
from cdc_core.cdcv2.export import CdcStream, StreamInterval, part_progress
from cdc_core.cdcv2.model import Message, Updates
from cdc_core.cdcv2.spark_decode import DecodedStream, Packing, decode_messages
from cdc_core.frontier import TimeFrontier
from cdc_core.spark import index_frame
from cdc_core.storage import files, on_workers

DEFAULT_BATCH_SIZE = 1000


class Encoding(Enum):
    """How a stream's files are encoded; the value is the files' suffix."""
    JSON = ".jsonl"
    AVRO = ".avro"


@dataclass(frozen=True)
class UpdateFiles:
    """The update files ``write_updates`` wrote for one part, with their counts:
    ``per_time``, the updates at each time, is what the part's progress statements say."""

    paths: tuple[str, ...]
    messages: int
    updates: int
    per_time: Mapping[int, int]


@dataclass(frozen=True)
class StreamFiles:
    """What ``write_stream`` wrote: file paths and how many messages and updates."""

    update_files: tuple[str, ...]
    progress_file: str
    update_messages: int
    updates: int
    progress_statements: int


# What a writing task reports per file: its counts, and its updates per time (two
# arrays, ``times[i]`` with ``at_time[i]`` updates).
_SUMMARY = (
    "part long, path string, messages long, updates long, times array<long>, at_time array<long>"
)
# The same, per stream of a joint write.
_STORED_SUMMARY = f"{_SUMMARY}, stream long"
_TIME_DIFF = (StructField("time", LongType(), False), StructField("diff", LongType(), False))


def write_stream(
    stream: CdcStream,
    directory: str | Path,
    encoding: Encoding,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> StreamFiles:
    """Write ``stream`` into ``directory`` (created if missing); updates are grouped
    into messages of at most ``batch_size`` updates."""
    return write_parts(stream, [(stream.lower, stream.upper, directory)], encoding, batch_size)[0]


# A part of a stream: the times [lower, upper) it holds and the folder it goes to (a
# local path or an object-store URL, as the storage layer takes it).
StreamPart = tuple[int, TimeFrontier, str | Path]


def write_parts(
    stream: CdcStream,
    parts: Sequence[StreamPart],
    encoding: Encoding,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> list[StreamFiles]:
    """Write each part of ``stream`` (disjoint time ranges within its interval, e.g. its
    windows) into its own folder, as a stream of its own: its updates and progress
    statements tiling its range, so the parts chain back into the stream."""
    written = write_updates(stream, parts, encoding, batch_size)
    files = []
    for part, updates in zip(parts, written, strict=True):
        progress_file, statements = write_progress(stream.interval, part, updates, encoding)
        files.append(
            StreamFiles(updates.paths, progress_file, updates.messages, updates.updates, statements)
        )
    return files


def write_updates(
    stream: CdcStream,
    parts: Sequence[StreamPart],
    encoding: Encoding,
    batch_size: int = DEFAULT_BATCH_SIZE,
    owner: str | None = None,
) -> list[UpdateFiles]:
    """Write the updates of each part into its folder (``owner``, if given, in every file
    name: see ``file_owner``). One Spark job writes every part's updates (each task
    routes its rows by time, and counts them per time for the progress statements);
    updates at times outside every part are not written."""
    bounds = []
    for lower, upper, directory in parts:
        files.make_folder(str(directory))
        bounds.append((lower, upper.time, str(directory)))
    columns = DataColumns(stream.data_schema)
    writer = _partition_writer(bounds, encoding, columns, batch_size, owner)
    # Sorted by time within each task, a part's rows arrive together: a task streams them
    # into one file per part instead of holding its rows until the last one is seen.
    ordered = stream.updates.sortWithinPartitions("time")
    folders = [folder for _, _, folder in bounds]
    written = ordered.mapInArrow(on_workers(writer, folders), _SUMMARY).collect()
    return _update_files(written, len(parts))


def _update_files(written: Sequence[Row], parts: int) -> list[UpdateFiles]:
    """Per part (by index), the files the writing tasks reported for it (``_SUMMARY``
    rows) and their counts."""
    found = []
    for index in range(parts):
        mine = [row for row in written if row["part"] == index]
        per_time: Counter[int] = Counter()
        for row in mine:
            per_time.update(dict(zip(row["times"], row["at_time"], strict=True)))
        found.append(
            UpdateFiles(
                tuple(sorted(row["path"] for row in mine)),
                sum(row["messages"] for row in mine),
                sum(row["updates"] for row in mine),
                dict(per_time),
            )
        )
    return found


@dataclass(frozen=True)
class StoredStream:
    """A stream's updates as the shard at ``table`` stores them, to be written into
    ``parts`` (``owner`` in every file name, if given): the shard's data ``files`` (path
    relative to ``table``, and size in bytes) that may hold the parts' times, whose rows
    are the stream's updates once the times outside every part are left out. That holds
    for a shard's updates past its since: each commit's are consolidated, and no two
    commits share a time."""

    table: str
    files: tuple[tuple[str, int], ...]
    data_schema: StructType
    parts: tuple[StreamPart, ...]
    owner: str | None = None


# The stored bytes one task reads of one stream at most: a stream of a few windows is one
# task (and one file per part); a large one is split by data, never serialized in a task.
TASK_BYTES = 64 * 2**20


def write_stored_updates(
    spark: SparkSession,
    streams: Sequence[StoredStream],
    encoding: Encoding,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> list[list[UpdateFiles]]:
    """Write every stream's updates into its parts' folders by one Spark job, whatever
    the streams' columns: per stream, per part, the files written and their counts.

    Why: a run exporting hundreds of sources would otherwise run a job per source, each
    planned over that source's own columns. Here the job's rows only name work: each task
    reads a stream's shard files (at most ``TASK_BYTES`` of them) in the stream's own
    layout (a column a file lacks reads as null), and routes and encodes their rows as
    ``write_updates`` does, one file per part."""
    units: list[tuple[int, list[str]]] = []
    for index, stream in enumerate(streams):
        for _, _, directory in stream.parts:
            files.make_folder(str(directory))
        unit: list[str] = []
        size = 0
        for path, stored_bytes in stream.files:
            if unit and size + stored_bytes > TASK_BYTES:
                units.append((index, unit))
                unit, size = [], 0
            unit.append(files.join(stream.table, path))
            size += stored_bytes
        if unit:
            units.append((index, unit))
    if not units:
        return [_update_files([], len(stream.parts)) for stream in streams]
    writer = _stored_writer(streams, units, encoding, batch_size)
    job = index_frame(spark, len(units)).mapInArrow(
        on_workers(writer, [stream.table for stream in streams]), _STORED_SUMMARY
    )
    written = job.collect()
    return [
        _update_files([row for row in written if row["stream"] == index], len(stream.parts))
        for index, stream in enumerate(streams)
    ]


def _stored_writer(
    streams: Sequence[StoredStream],
    units: Sequence[tuple[int, Sequence[str]]],
    encoding: Encoding,
    batch_size: int,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The task of ``write_stored_updates``: for each unit its ``id`` rows name (by
    index), the unit's files read in its stream's layout, ordered by time (each part's
    rows then come together: one file per part), and written into the stream's parts."""
    layouts = [
        to_arrow_schema(StructType([*s.data_schema.fields, *_TIME_DIFF]), timezone="UTC")
        for s in streams
    ]

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for unit in batch.column("id").to_pylist():
                index, paths = units[unit]
                stream, layout = streams[index], layouts[index]
                stored = pa.concat_tables(
                    [_in_layout(files.read_parquet(path), layout) for path in paths]
                ).sort_by("time")
                bounds = [(low, up.time, str(folder)) for low, up, folder in stream.parts]
                writer = _partition_writer(bounds, encoding, DataColumns(stream.data_schema),
                                           batch_size, stream.owner)  # fmt: skip
                for summary in writer(iter(stored.to_batches())):
                    stream_column = pa.array([index] * summary.num_rows, pa.int64())
                    yield summary.append_column("stream", stream_column)

    return write


def _in_layout(stored: pa.Table, layout: pa.Schema) -> pa.Table:
    """A shard file's rows in ``layout``: its columns by name, cast, a column the file
    lacks (written before the column was added) as nulls."""
    return pa.table(
        [
            stored.column(field.name).cast(field.type)
            if field.name in stored.column_names
            else pa.nulls(stored.num_rows, field.type)
            for field in layout
        ],
        schema=layout,
    )


def write_progress(
    stream: StreamInterval,
    part: StreamPart,
    written: UpdateFiles,
    encoding: Encoding,
    owner: str | None = None,
) -> tuple[str, int]:
    """Write the progress statements of ``part`` (the counts of the updates ``written``
    there) into its folder; returns the file's path and how many statements it holds."""
    lower, upper, directory = part
    progress = part_progress(stream, lower, upper, written.per_time)
    columns = DataColumns(stream.data_schema)
    path, _ = _write_file(str(directory), "progress", encoding, columns, owner, progress)
    return path, len(progress)


def file_owner(name: str) -> str | None:
    """The owner a stream file's name carries (``<kind>.<owner>.<id><suffix>``), or None
    for a file written without one (``<kind>-<id><suffix>``)."""
    pieces = name.split(".")
    return pieces[1] if len(pieces) == 4 else None


def is_progress_file(name: str) -> bool:
    """Whether a stream file's name is a progress file's (updates otherwise)."""
    return name.startswith("progress")


def read_stream_files(
    spark: SparkSession, paths: str | Sequence[str], data_schema: StructType, encoding: Encoding
) -> DecodedStream:
    """Decode stream files (folders or files) back into updates, progress and errors."""
    sources = [str(paths)] if isinstance(paths, (str, Path)) else [str(p) for p in paths]
    pattern = f"*{encoding.value}"
    if encoding is Encoding.JSON:
        files = spark.read.option("pathGlobFilter", pattern).text(sources)
        raw = files.select(F.col("value").alias("payload"), F.col("_metadata.file_path"))
        packing = Packing.JSON
    else:
        files = spark.read.format("binaryFile").option("pathGlobFilter", pattern).load(sources)
        raw = files.select(F.col("content").alias("payload"), F.col("path").alias("file_path"))
        packing = Packing.AVRO_CONTAINER
    return decode_messages(_without_kafka_position(raw), data_schema, packing)


def _without_kafka_position(raw: DataFrame) -> DataFrame:
    return raw.select(
        "payload",
        F.lit(None).cast("string").alias("topic"),
        F.lit(None).cast("int").alias("partition"),
        F.lit(None).cast("long").alias("offset"),
        F.lit(None).cast("string").alias("key"),
        F.col("file_path").alias("file"),
    )


def _partition_writer(
    bounds: Sequence[tuple[int, int | None, str]],
    encoding: Encoding,
    columns: DataColumns,
    batch_size: int,
    owner: str | None,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def write_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        routed = (item for batch in batches for item in _route(batch, bounds))
        # A file per run of one part's rows: one per part when the rows come time-ordered.
        for index, run in itertools.groupby(routed, key=operator.itemgetter(0)):
            per_time: Counter[int] = Counter()
            rows = (_tallied(part, per_time) for _, part in run)
            messages = _update_messages(rows, columns, batch_size)
            path, counts = _write_file(
                bounds[index][2], "updates", encoding, columns, owner, messages
            )
            summary = {"part": index, "path": path, **counts,
                       "times": list(per_time), "at_time": list(per_time.values())}  # fmt: skip
            yield pa.RecordBatch.from_pylist([summary])

    return write_partition


def _tallied(batch: pa.RecordBatch, per_time: Counter[int]) -> pa.RecordBatch:
    """``batch``, its rows counted per time into ``per_time`` on the way."""
    for entry in pc.value_counts(batch.column("time")).to_pylist():
        per_time[entry["values"]] += entry["counts"]
    return batch


def _route(
    batch: pa.RecordBatch, bounds: Sequence[tuple[int, int | None, str]]
) -> Iterator[tuple[int, pa.RecordBatch]]:
    """The rows of ``batch`` per part whose ``[lower, upper)`` holds their time (rows of
    no part are dropped): one sort by time, then a binary search per part bound, so a
    batch costs O(rows log rows + parts log rows), not a filter per part."""
    ordered = batch.take(pc.sort_indices(batch.column("time")))
    times = ordered.column("time")
    positions = range(ordered.num_rows)

    def first_at(time: int) -> int:
        return bisect.bisect_left(positions, time, key=lambda i: times[i].as_py())

    for index, (lower, upper, _) in enumerate(bounds):
        begin = first_at(lower)
        end = ordered.num_rows if upper is None else first_at(upper)
        if end > begin:
            yield index, ordered.slice(begin, end - begin)


def _update_messages(
    batches: Iterable[pa.RecordBatch], columns: DataColumns, batch_size: int
) -> Iterator[Updates]:
    names = columns.names
    pending: list[tuple[tuple[object, ...], int, int]] = []
    for batch in batches:
        for row in batch.to_pylist():
            pending.append((tuple(row[n] for n in names), row["time"], row["diff"]))
            if len(pending) == batch_size:
                yield Updates(tuple(pending))
                pending = []
    if pending:
        yield Updates(tuple(pending))


def _write_file(
    directory: str,
    prefix: str,
    encoding: Encoding,
    columns: DataColumns,
    owner: str | None,
    *message_groups: Iterable[Message],
) -> tuple[str, dict[str, int]]:
    """Write the messages to a new file, published whole; returns its path and counts."""
    if owner is not None and ("." in owner or "/" in owner):
        raise ValueError(f"a stream file's owner has no dots or slashes: {owner!r}")
    unique = uuid.uuid4().hex
    name = f"{prefix}-{unique}" if owner is None else f"{prefix}.{owner}.{unique}"
    path = files.join(directory, f"{name}{encoding.value}")
    counts = {"messages": 0, "updates": 0}

    def counted() -> Iterator[Message]:
        for group in message_groups:
            for message in group:
                counts["messages"] += 1
                counts["updates"] += len(message.updates) if isinstance(message, Updates) else 0
                yield message

    with files.published_output(path) as out:
        if encoding is Encoding.JSON:
            out.writelines((codec_json.encode(m, columns) + "\n").encode() for m in counted())
        else:
            AvroCodec(columns.schema).write_container(out, counted())
    return path, counts
