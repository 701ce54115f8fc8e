"""Where Spark meets Delta: Spark moves the rows, the driver moves only metadata.

Write: Spark writes Parquet files into a fresh folder under the table's ``data/`` folder;
the driver reads nothing but their footers (size, row count, min/max/null counts) and
turns them into Delta Add actions. Read: the driver prunes the table's files by their
``time`` statistics and hands the list to ``spark.read.parquet`` on the executors.

Tables live in a local folder or under an ``s3://`` prefix: the driver reaches their
files through ``cdc_core.storage.files``, Spark through ``spark_path`` (``s3a://``).
"""

from __future__ import annotations

import contextlib
import json
import posixpath
import threading
import time
import uuid
from collections import Counter, OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake import Schema as DeltaSchema
from deltalake.transaction import AddAction, RemoveAction
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import LongType, StructField, StructType

from cdc_core.spark import local_frame
from cdc_core.storage import files, spark_path
from cdc_core.updates import DIFF, TIME

DATA_DIR = "data"
LOG_DIR = "_delta_log"

# Table features reclock reads and writes correctly: its readers list Parquet files and
# its writers commit plain Add/Remove actions, so a feature that changes what a file
# means (deletion vectors, column mapping) or obliges writers to do more (constraints,
# change data feed, row tracking, append-only) is refused before anything is read or
# written. Protocol versions up to (1, 2) carry no such feature by themselves.
SAFE_READER_FEATURES = frozenset({"timestampNtz"})
SAFE_WRITER_FEATURES = frozenset({"appendOnly", "invariants", "timestampNtz"})
_UNSAFE_SETTINGS: dict[str, str] = {
    "delta.enableDeletionVectors": "true",
    "delta.enableChangeDataFeed": "true",
    "delta.enableRowTracking": "true",
    "delta.appendOnly": "true",
}


class UnsupportedTableFeature(RuntimeError):
    """A user enabled a Delta table feature reclock cannot honour: nothing was read or
    written; the message names the table, the feature and how to undo it."""


def check_table_features(table: DeltaTable, path: str) -> None:
    """Raise UnsupportedTableFeature when ``table`` uses a feature outside the safe sets
    or a setting that changes what its files mean or what a writer owes."""
    protocol = table.protocol()
    unsafe = sorted(set(protocol.reader_features or ()) - SAFE_READER_FEATURES)
    unsafe += sorted(set(protocol.writer_features or ()) - SAFE_WRITER_FEATURES - set(unsafe))
    configuration = table.metadata().configuration
    unsafe += [
        f"{key}={value}"
        for key, value in sorted(configuration.items())
        if _UNSAFE_SETTINGS.get(key) == str(value).lower()
        or (key == "delta.columnMapping.mode" and str(value).lower() != "none")
        or key.startswith("delta.constraints.")
    ]
    if unsafe:
        raise UnsupportedTableFeature(
            f"table {path} uses Delta features reclock cannot read or write safely: "
            f"{', '.join(unsafe)}; nothing was read or written. Disable them (ALTER TABLE "
            "... SET TBLPROPERTIES, then REORG ... APPLY (PURGE) for deletion vectors) or "
            "rebuild the source's outputs"
        )


def shard_schema(data_schema: StructType) -> StructType:
    """The full Spark layout of a shard: data columns, then ``time`` and ``diff``."""
    return StructType(
        [*data_schema.fields, StructField(TIME, LongType()), StructField(DIFF, LongType())]
    )


def delta_schema(data_schema: StructType) -> DeltaSchema:
    """The Delta schema of a shard (data columns, then ``time`` and ``diff``)."""
    return nullable_delta_schema(shard_schema(data_schema))


def nullable_delta_schema(schema: StructType) -> DeltaSchema:
    """The Delta schema of a Spark layout. Every field is nullable: Spark may write a column
    as optional, and a non-null column is still a valid instance of a nullable field.
    Timestamps are UTC microseconds, as the session writes them."""
    arrow = to_arrow_schema(schema, timezone="UTC")
    return DeltaSchema.from_arrow(pa.schema([field.with_nullable(True) for field in arrow]))


def schema_differences(
    expected: DeltaSchema, actual: DeltaSchema, *, ordered: bool = True
) -> list[str]:
    """Human-readable differences between two Delta schemas (names and types, and their
    order unless ``ordered`` is False: readers and writers that go by name do not care)."""
    want = pa.schema(expected.to_arrow())
    have = pa.schema(actual.to_arrow())
    problems = [f"missing column {name!r}" for name in want.names if name not in have.names]
    problems += [f"unexpected column {name!r}" for name in have.names if name not in want.names]
    problems += [
        f"column {field.name!r} is {have.field(field.name).type}, expected {field.type}"
        for field in want
        if field.name in have.names and not have.field(field.name).type.equals(field.type)
    ]
    if ordered and not problems and want.names != have.names:
        problems.append(f"column order is {have.names}, expected {want.names}")
    return problems


@dataclass(frozen=True)
class DataFile:
    """One Parquet file of a table: what pruning and compaction need to know about it.
    ``min_time``/``max_time`` are None when unknown (no statistics)."""

    path: str  # relative to the table root, as in the Delta log
    size: int
    num_records: int
    min_time: int | None
    max_time: int | None

    def may_hold_times(self, low: int | None, high: int | None) -> bool:
        """False only if the statistics prove no row has ``low <= time <= high``."""
        if low is not None and self.max_time is not None and self.max_time < low:
            return False
        return not (high is not None and self.min_time is not None and self.min_time > high)


@dataclass(frozen=True)
class WrittenFile(DataFile):
    """A freshly written file, not yet in the log, with what its footer says."""

    null_times: int
    null_diffs: int
    stats: str  # Delta statistics JSON for the Add action


def write_files(df: DataFrame, table_path: str, batch_id: str) -> tuple[WrittenFile, ...]:
    """Write ``df`` (in the shard layout) as Parquet into the folder ``data/<batch_id>`` of
    the table and describe the files from their footers. Empty files and the filesystem's
    checksum files are removed right away; the caller owns the folder if this fails."""
    folder = files.join(table_path, DATA_DIR, batch_id)
    # "error": the spelling Spark Connect knows too
    df.write.mode("error").parquet(spark_path(folder))
    written: list[WrittenFile] = []
    for name in files.list_names(folder):
        if name.endswith(".crc"):
            files.delete_file(files.join(folder, name))
        elif name.endswith(".parquet") and not name.startswith((".", "_")):
            described = describe_file(table_path, f"{DATA_DIR}/{batch_id}/{name}")
            if described.num_records == 0:
                files.delete_file(files.join(folder, name))
            else:
                written.append(described)
    return tuple(written)


def write_arrow(
    table_path: str, rows: pa.Table, batch_id: str, row_group_rows: int | None = None
) -> WrittenFile:
    """Write driver-held ``rows`` (a few rows of metadata, never data) as one Parquet file
    in ``data/<batch_id>`` of the table, described from its footer."""
    rel_path = f"{DATA_DIR}/{batch_id}/part-0.parquet"
    files.write_parquet(files.join(table_path, rel_path), rows, row_group_rows)
    return describe_file(table_path, rel_path)


def describe_file(table_path: str, rel_path: str) -> WrittenFile:
    """Read one file's footer (never its rows) into a WrittenFile with Delta statistics."""
    meta, size = files.parquet_metadata(files.join(table_path, rel_path))
    columns = _footer_columns(meta)
    mins = {name: c.minimum for name, c in columns.items() if c.minimum is not None}
    maxs = {name: c.maximum for name, c in columns.items() if c.maximum is not None}
    nulls = {name: c.nulls for name, c in columns.items()}
    stats = {"numRecords": meta.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls}
    return WrittenFile(
        path=rel_path,
        size=size,
        num_records=meta.num_rows,
        min_time=mins.get(TIME),
        max_time=maxs.get(TIME),
        null_times=nulls.get(TIME, 0),
        null_diffs=nulls.get(DIFF, 0),
        stats=json.dumps(stats),
    )


@dataclass(frozen=True)
class _ColumnFooter:
    minimum: int | None
    maximum: int | None
    nulls: int


def _footer_columns(meta: pq.FileMetaData) -> dict[str, _ColumnFooter]:
    """Per top-level primitive column: null count, and min/max for integer columns (the
    only ones whose Parquet statistics map one-to-one onto Delta's JSON statistics)."""
    arrow = meta.schema.to_arrow_schema()
    result: dict[str, _ColumnFooter] = {}
    for index in range(meta.num_columns):
        name = meta.schema.column(index).path
        if "." in name:
            continue  # nested leaf: Delta statistics for nested data are optional
        chunks = [meta.row_group(g).column(index).statistics for g in range(meta.num_row_groups)]
        if any(s is None or not s.has_null_count for s in chunks):
            continue
        nulls = sum(s.null_count for s in chunks)
        minimum = maximum = None
        valued = [s for s in chunks if s.num_values > 0]
        integer = pa.types.is_integer(arrow.field(name).type)
        if integer and valued and all(s.has_min_max for s in valued):
            minimum = min(s.min for s in valued)
            maximum = max(s.max for s in valued)
        result[name] = _ColumnFooter(minimum, maximum, nulls)
    return result


def add_action(file: WrittenFile, *, data_change: bool) -> AddAction:
    """The Delta Add action that makes a written file part of the table."""
    return AddAction(
        path=file.path,
        size=file.size,
        partition_values={},
        modification_time=int(time.time() * 1000),
        data_change=data_change,
        stats=file.stats,
    )


def remove_action(file: DataFile, *, data_change: bool = False) -> RemoveAction:
    """The Delta Remove action that drops a file from the table (its bytes stay for gc);
    ``data_change``: the rows it held change (not merely move to other files)."""
    return RemoveAction(
        path=file.path,
        data_change=data_change,
        deletion_timestamp=int(time.time() * 1000),
        size=file.size,
        partition_values={},
    )


def live_files(table: DeltaTable) -> list[DataFile]:
    """The files of the table's loaded version, from its Add actions (log metadata only)."""
    actions = pa.table(table.get_add_actions(flatten=True))
    columns = actions.column_names
    rows = actions.select(
        [c for c in ("path", "size_bytes", "num_records", "min.time", "max.time") if c in columns]
    ).to_pylist()
    return [
        DataFile(
            path=row["path"],
            size=row["size_bytes"],
            num_records=row.get("num_records") or 0,
            min_time=row.get("min.time"),
            max_time=row.get("max.time"),
        )
        for row in rows
    ]


# A table the driver appends to (a remap, a registry) gains one small file per commit; once
# it holds MERGE_AT files under SMALL_FILE_BYTES, they are merged into one as it goes, so
# what a run reads of it between two maintenances stays a few files (maintenance still
# compacts it fully). A merged file stays small, and is merged again, until it outgrows
# that size.
MERGE_AT = 8
SMALL_FILE_BYTES = 1 << 20


def files_to_merge(files: Sequence[DataFile]) -> list[DataFile]:
    """The small files of ``files`` (under SMALL_FILE_BYTES), when there are MERGE_AT of
    them or more; else none. At most MERGE_AT x SMALL_FILE_BYTES of rows to read."""
    small = [f for f in files if f.size < SMALL_FILE_BYTES]
    return small if len(small) >= MERGE_AT else []


def read_arrow(table_path: str, chosen: Sequence[DataFile], schema: pa.Schema) -> pa.Table:
    """The rows of the ``chosen`` files of a table of metadata, read on the driver, in
    ``schema`` (each file cast on its own: another Delta writer may store strings as
    views; columns a file written by an older reclock lacks read as nulls)."""
    tables = [_metadata_file(files.join(table_path, f.path), f.size) for f in chosen]
    return pa.concat_tables([schema.empty_table(), *(conformed(t, schema) for t in tables)])


def _metadata_file(location: str, size: int) -> pa.Table:
    """The rows of one file of a metadata table, read once per process (``_METADATA``)."""
    kept = _METADATA.get((location, size))
    if kept is None:
        kept = files.read_parquet(location)
        _METADATA.put((location, size), kept)
    return kept


class _ReadFiles:
    """Files of metadata tables this process read, by location and size, the least
    recently used dropped beyond ``limit`` bytes.

    Why: a run reads the remap's files again at each step that needs a binding, each read
    a HEAD and a GET on an object store. A file a Delta log names never changes (a new
    version adds new files, under new names), so what was read of it stays true."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._rows: OrderedDict[tuple[str, int], pa.Table] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: tuple[str, int]) -> pa.Table | None:
        """The rows kept for ``key`` (location, size), or None."""
        with self._lock:
            rows = self._rows.get(key)
            if rows is not None:
                self._rows.move_to_end(key)
            return rows

    def put(self, key: tuple[str, int], rows: pa.Table) -> None:
        """Keep ``rows`` for ``key``, dropping the least recently used beyond the limit."""
        with self._lock:
            if key in self._rows:
                return
            self._rows[key] = rows
            self._bytes += rows.nbytes
            while self._bytes > self.limit and len(self._rows) > 1:
                self._bytes -= self._rows.popitem(last=False)[1].nbytes


_METADATA = _ReadFiles(64 * 2**20)


def conformed(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """``rows`` with ``schema``'s columns, cast (a column ``rows`` lacks reads as nulls)."""
    return pa.table({
        f.name: rows[f.name].cast(f.type) if f.name in rows.column_names
        else pa.nulls(rows.num_rows, f.type)
        for f in schema
    }, schema=schema)  # fmt: skip


def read_files(
    spark: SparkSession, table_path: str, files: Sequence[DataFile], schema: StructType
) -> DataFrame:
    """The rows of ``files`` as a DataFrame, read by the executors; no files -> no rows."""
    if not files:
        return local_frame(spark, [], schema)
    paths = [spark_path(posixpath.join(table_path, f.path)) for f in files]
    return spark.read.schema(schema).parquet(*paths)


def count_by_time(
    spark: SparkSession, table_path: str, files: Sequence[DataFile], schema: StructType
) -> dict[int, int]:
    """Rows per ``time`` over ``files``: from the footers when each file holds a single
    time, else from a small aggregate that reads only the ``time`` column."""
    single_time = {
        f.path: f.min_time for f in files if f.max_time is not None and f.min_time == f.max_time
    }
    if len(single_time) == len(files):
        counts: Counter[int] = Counter()
        for f in files:
            counts[single_time[f.path]] += f.num_records
        return dict(counts)
    rows = read_files(spark, table_path, files, schema).groupBy(TIME).count().collect()
    return {row[TIME]: row["count"] for row in rows}


def delete_batches(table_path: str, batch_ids: Iterable[str]) -> None:
    """Best-effort removal of uncommitted batch folders (gc catches whatever remains)."""
    for batch_id in batch_ids:
        with contextlib.suppress(OSError):
            files.delete_tree(files.join(table_path, DATA_DIR, batch_id))


def remove_files(table_path: str, rel_paths: Iterable[str]) -> None:
    """Delete data files (paths relative to the table root, under its data folder) and
    the batch folders they leave empty; Delta itself only tracks files."""
    prefix = f"{DATA_DIR}/"
    names = []
    for rel_path in rel_paths:
        if not rel_path.startswith(prefix):
            raise ValueError(f"{rel_path} is not under the data folder of {table_path}")
        names.append(rel_path[len(prefix):])
    files.delete_files(files.join(table_path, DATA_DIR), names)


def new_batch_id(writer: str | None) -> str:
    """A fresh staging folder name; a registered writer's folders carry its id, so that gc
    can tell a live writer's staging from a crashed one's."""
    return uuid.uuid4().hex if writer is None else f"{writer}.{uuid.uuid4().hex}"


def batch_writer(rel_path: str) -> str | None:
    """The writer whose staging folder holds ``rel_path`` (None: an anonymous writer)."""
    parts = rel_path.split("/")
    if len(parts) < 3 or parts[0] != DATA_DIR or "." not in parts[1]:
        return None
    return parts[1].split(".", 1)[0]


def commit_actions(table_path: str, version: int) -> list[dict]:
    """The actions of one commit of the log, read from its JSON file (log metadata only);
    FileNotFoundError when log cleanup expired it."""
    log_file = files.join(table_path, LOG_DIR, f"{version:020d}.json")
    lines = files.read_bytes(log_file).decode("utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


@dataclass(frozen=True)
class RemovedFile:
    """A file a commit removed from the table (it stays on disk until gc)."""

    path: str
    version: int  # the commit that removed it: every version before it may still read it
    removed_ms: int
    size: int


def file_history(table_path: str, through: int) -> tuple[set[str], list[RemovedFile]]:
    """Every file added in the commits the log still holds up to ``through``, and every
    removal there (a removed file counts as added: its add may be in an expired commit).
    Log cleanup (reclock's ``trim_log``, or Delta's own) deletes commits before a
    checkpoint, so the history starts at the oldest commit left."""
    added: set[str] = set()
    removed: list[RemovedFile] = []
    for version in (v for v in commit_versions(table_path) if v <= through):
        for action in commit_actions(table_path, version):
            if "add" in action:
                added.add(unquote(action["add"]["path"]))
            elif "remove" in action:
                remove = action["remove"]
                removed.append(
                    RemovedFile(
                        unquote(remove["path"]),
                        version,
                        remove.get("deletionTimestamp") or 0,
                        remove.get("size") or 0,
                    )
                )
    return added | {r.path for r in removed}, removed


def commit_versions(table_path: str) -> list[int]:
    """The versions whose commit files the log still holds, ascending."""
    names = files.list_names(files.join(table_path, LOG_DIR))
    return sorted(int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit())


def trim_log(table_path: str, keep_from: int, older_than_ms: int) -> list[str]:
    """Delete the log files (commits, their checksums, checkpoints) of versions before
    the newest checkpoint at or before ``keep_from``, when written before
    ``older_than_ms``; returns their names. Every version from that checkpoint on stays
    readable (time travel included), as Delta's own expired-log cleanup keeps it."""
    log = files.join(table_path, LOG_DIR)
    entries = {posixpath.basename(e.path): e for e in files.list_files(log, recursive=False)}
    names = list(entries)
    checkpoints = [
        int(name.split(".", 1)[0]) for name in names if ".checkpoint." in name
        and name.split(".", 1)[0].isdigit() and int(name.split(".", 1)[0]) <= keep_from
    ]
    if not checkpoints:
        return []
    base = max(checkpoints)
    removed = []
    for name in sorted(names):
        version = name.split(".", 1)[0]
        if not version.isdigit() or int(version) >= base:
            continue
        if entries[name].mtime_ms < older_than_ms:
            files.delete_file(files.join(log, name))
            removed.append(name)
    return removed


def data_files(table_path: str) -> Iterator[str]:
    """Every Parquet file under the table's data folder, relative to the table root."""
    for entry in data_file_entries(table_path):
        yield entry.path


def data_file_entries(table_path: str) -> list[files.FileEntry]:
    """Every file under the table's data folder with its size and modification time,
    its path relative to the table root (one listing, on disk or on S3)."""
    return [
        files.FileEntry(f"{DATA_DIR}/{entry.path}", entry.size, entry.mtime_ms)
        for entry in files.list_relative(files.join(table_path, DATA_DIR))
    ]
