"""The durable registry of a source's dump files, and the canonical records they hold.

Every dump file is registered once, with its arrival time and per-partition offset and
timestamp statistics, in a small Delta table written from the driver (metadata only).
The arrival time makes the ``arrival`` minting policy replayable; the statistics let a
window read only the files that can hold the offsets it needs.

Dump files are immutable once landed: registering a path again with the same size and
mtime is a no-op, while a changed size or mtime raises ``DumpFileChanged`` (a rewritten
dump could silently change records already bound to a window).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from cdc_core.frontier import OffsetFrontier
from cdc_core.ingest.connect_files import layout_of
from cdc_core.ingest.dumps import (
    SCAN_SCHEMA,
    DumpFile,
    DumpRead,
    GzipDamage,
    read_dumps,
    scan_dump_files,
)
from cdc_core.schemas import ERROR, RECLOCKED
from cdc_core.shard.log import append_rows
from cdc_core.spark import local_frame
from cdc_core.vocabulary import DumpLayout

FILES_SCHEMA = pa.schema(
    [
        ("path", pa.string()),
        ("size", pa.int64()),
        ("mtime_ms", pa.int64()),
        ("arrival_ms", pa.int64()),
        *(field for field in SCAN_SCHEMA if field.name != "file"),
        ("problem", pa.string()),
        ("bad_lines", pa.int64()),
    ]
)
RETIRED_SCHEMA = pa.schema(
    [("path", pa.string()), ("retired_ms", pa.int64()), ("archived_to", pa.string())]
)


class DumpFileChanged(ValueError):
    """A registered dump file changed size or mtime: dumps must be immutable once landed."""


class MissingDumpFile(FileNotFoundError):
    """A dump file that a run still needs is gone (never silently skipped)."""


@dataclass(frozen=True)
class PartitionStats:
    """What one dump file holds of one Kafka partition."""

    partition: int
    min_offset: int
    max_offset: int
    min_ts: int
    max_ts: int
    records: int


@dataclass(frozen=True)
class RegisteredFile:
    """One registered dump file; ``partitions`` is empty for a file without valid records.
    ``problem`` says why the file is damaged (a gzip stream cut short or corrupt) or
    cannot be read at all (``unreadable``); null for a sound file. ``bad_lines``: how
    many of its lines are no record."""

    path: str
    size: int
    mtime_ms: int
    arrival_ms: int
    partitions: tuple[PartitionStats, ...]
    archived_to: str | None = None
    retired: bool = False
    problem: str | None = None
    bad_lines: int = 0

    @property
    def has_errors(self) -> bool:
        """Reading it yields error rows: it is damaged, has bad lines, or has no record."""
        return bool(self.problem or self.bad_lines or not self.partitions)

    @property
    def unreadable(self) -> bool:
        """A path that could not be read when it was listed: there is nothing to parse."""
        return self.size < 0

    def no_record_reason(self) -> str:
        """The error reported for a file that yields no record."""
        if self.unreadable and self.problem:
            return self.problem
        if self.size == 0:
            return "empty dump file (0 bytes)"
        return "dump file holds no valid record"

    def overlaps(self, low: Mapping[int, int], high: OffsetFrontier | None) -> bool:
        """True iff some partition range meets ``[low[p], high[p])`` (``high=None``: unbounded)."""
        return any(
            s.max_offset >= low.get(s.partition, 0)
            and (high is None or s.min_offset < high[s.partition])
            for s in self.partitions
        )

    def lies_below(self, frontier: OffsetFrontier) -> bool:
        """True iff every record of the file is before ``frontier`` (and it has records)."""
        return bool(self.partitions) and all(
            frontier.contains(s.partition, s.max_offset) for s in self.partitions
        )

    def describe(self) -> str:
        """The file's offset ranges per partition, for error messages."""
        ranges = ", ".join(
            f"partition {s.partition} offsets {s.min_offset}..{s.max_offset}"
            for s in self.partitions
        )
        return f"{self.path} ({ranges or 'no records'})"


@dataclass(frozen=True)
class CanonicalRecords:
    """One copy per ``(partition, offset)`` plus the contradictions found while choosing it.

    ``lines``: every parsed line of the files read, with ``arrival_ms``, the copy rank
    ``_copy`` (1 for the kept copy) and, for a dropped copy whose ts/key/payload differ
    from the kept one, ``_kept_file``; files appear as small ids (``_file``), which
    ``catalog`` maps to their paths, so the shuffled and cached rows stay narrow.
    ``unreadable``: ERROR rows of files that could not be read. Records, conflicts and
    read errors are views of the one frame, so persisting it (``CanonicalReads``) parses
    and sorts every line once.
    """

    lines: DataFrame
    catalog: DataFrame
    unreadable: DataFrame

    @property
    def records(self) -> DataFrame:
        """RECLOCKED columns plus ``arrival_ms``, one row per (partition, offset)."""
        kept = F.col("reason").isNull() & (F.col("_copy") == 1)
        return self.lines.where(kept).select(*RECLOCKED.names, "arrival_ms")

    @property
    def conflicts(self) -> DataFrame:
        """ERROR rows of every distinct dropped copy that contradicts the kept one."""
        kept_file = self.catalog.select(F.col("_file").alias("_kept_file"),
                                        F.col("file").alias("_kept_path"))
        reason = F.format_string(
            "conflicting copy of partition %d offset %d: ts/key/payload differ from the "
            "kept copy in %s", F.col("partition"), F.col("offset"), F.col("_kept_path"),
        )
        return (
            self.lines.where(F.col("_kept_file").isNotNull())
            .dropDuplicates(["partition", "offset", "_file", "ts", "key", "payload"])
            .join(F.broadcast(self.catalog.select("_file", "file")), "_file")
            .join(F.broadcast(kept_file), "_kept_file")
            .select(*[(reason if n == "reason" else F.col(n)).alias(n) for n in ERROR.names])
        )

    @property
    def read_errors(self) -> DataFrame:
        """ERROR rows of malformed lines (file known, position unknown) and unreadable files."""
        failed = self.lines.where(F.col("reason").isNotNull() | F.col("dropped").isNotNull())
        named = failed.join(F.broadcast(self.catalog.select("_file", "file")), "_file")
        return DumpRead(named, self.unreadable).errors


class CanonicalReads:
    """The canonical reads of one run, persisted and reused: binding a run's windows and
    reclocking them then parse and sort each dump line once. A read serves any later
    request for a subset of its files with the same partition starts (records outside a
    request's offsets are dropped by the request's own filters). ``release`` when the run
    ends. With ``persist=False`` (a caller that reads once) nothing is kept."""

    def __init__(self, spark: SparkSession, registry: Registry, *, persist: bool = True) -> None:
        self.spark = spark
        self.registry = registry
        self.persist = persist
        self._reads: list[tuple[frozenset[str], dict[int, int], CanonicalRecords]] = []

    def read(self, files: Sequence[RegisteredFile], starts: Mapping[int, int]) -> CanonicalRecords:
        """Canonical records of ``files`` at or above ``starts``."""
        paths = frozenset(f.path for f in files)
        for known, known_starts, canonical in self._reads:
            if paths <= known and known_starts == dict(starts):
                return canonical
        keep = F.col("offset") >= starts_column(self.spark, starts)
        canonical = read_canonical(self.spark, self.registry, files, keep)
        if self.persist:
            canonical = dataclasses.replace(canonical, lines=canonical.lines.persist())
            self._reads.append((paths, dict(starts), canonical))
        return canonical

    def release(self) -> None:
        """Unpersist every canonical read cached by this run."""
        for _, _, canonical in self._reads:
            canonical.lines.unpersist()
        self._reads.clear()


def starts_column(spark: SparkSession, starts: Mapping[int, int]) -> Column:
    """A column with each record's partition start (0 for partitions not listed)."""
    pairs = [x for p, o in sorted(starts.items()) for x in (F.lit(p), F.lit(o))]
    if not pairs:
        return F.lit(0).cast("bigint")
    lookup = F.create_map(*pairs)
    return F.coalesce(lookup[F.col("partition")], F.lit(0)).cast("bigint")


class Registry:
    """The registry of one topic's dumps: ``files`` and ``retired`` Delta tables under ``root``."""

    def __init__(self, root: Path | str, topic: str) -> None:
        self.root = Path(root)
        self.topic = topic
        self.files_path = str(self.root / "files")
        self.retired_path = str(self.root / "retired")

    def files(self) -> list[RegisteredFile]:
        """Registered files, retired ones included (a run that still needs one must fail
        loudly, not skip it), oldest arrival first (then path), each exactly once."""
        rows = _read_rows(self.files_path)
        retired = {r["path"]: r["archived_to"] for r in _read_rows(self.retired_path)}
        first: dict[str, dict] = {}
        for row in sorted(rows, key=lambda r: (r["arrival_ms"], r["path"])):
            first.setdefault(row["path"], row)
        partitions: dict[str, dict[int, PartitionStats]] = {path: {} for path in first}
        for row in rows:
            chosen = first[row["path"]]
            if row["partition"] is not None and row["arrival_ms"] == chosen["arrival_ms"]:
                partitions[row["path"]][row["partition"]] = PartitionStats(
                    row["partition"], row["min_offset"], row["max_offset"],
                    row["min_ts"], row["max_ts"], row["records"],
                )
        return [
            RegisteredFile(
                path=path,
                size=row["size"],
                mtime_ms=row["mtime_ms"],
                arrival_ms=row["arrival_ms"],
                partitions=tuple(sorted(partitions[path].values(), key=lambda s: s.partition)),
                archived_to=retired.get(path),
                retired=path in retired,
                problem=row.get("problem"),
                bad_lines=row.get("bad_lines") or 0,
            )
            for path, row in first.items()
        ]

    def register(
        self, spark: SparkSession, files: Iterable[DumpFile], arrival_ms: int
    ) -> list[RegisteredFile]:
        """Register the files not registered yet; returns the newly registered ones.

        Idempotent: a file already registered with the same size and mtime is skipped.
        """
        known = {f.path: f for f in self.files()}
        new: list[DumpFile] = []
        for dump in files:
            seen = known.get(str(dump.path))
            if seen is None:
                new.append(dump)
            elif dump.problem is None and (seen.size, seen.mtime_ms) != (
                dump.size, dump.mtime_ms
            ):
                was = f" (registered as unreadable: {seen.problem})" if seen.unreadable else ""
                raise DumpFileChanged(
                    f"dump file {dump.path} changed after registration{was} "
                    f"(size {seen.size} -> {dump.size}, mtime {seen.mtime_ms} -> {dump.mtime_ms});"
                    " dumps must be immutable: land new data as a new file"
                )
        if not new:
            return []
        rows = _registration_rows(spark, new, arrival_ms, self.topic)
        append_rows(self.files_path, rows, "register", f"{len(new)} dump file(s)")
        paths = {str(d.path) for d in new}
        return [f for f in self.files() if f.path in paths]

    def mark_retired(self, retired: Mapping[str, str | None], retired_ms: int) -> None:
        """Record that these files (path -> archive path, None when deleted) are retired."""
        if retired:
            rows = [
                {"path": path, "retired_ms": retired_ms, "archived_to": to}
                for path, to in sorted(retired.items())
            ]
            table = pa.Table.from_pylist(rows, RETIRED_SCHEMA)
            append_rows(self.retired_path, table, "retire", f"{len(rows)} dump file(s)")

    def end_offsets(self, files: Sequence[RegisteredFile] | None = None) -> OffsetFrontier:
        """Per partition, the highest registered offset + 1 (retired files included);
        ``files``: the registry's files when the caller has read them already."""
        ends: dict[int, int] = {}
        for registered in self.files() if files is None else files:
            for s in registered.partitions:
                ends[s.partition] = max(ends.get(s.partition, 0), s.max_offset + 1)
        return OffsetFrontier(ends)


def _read_rows(path: str) -> list[dict]:
    if not DeltaTable.is_deltatable(path):
        return []
    return DeltaTable(path).to_pyarrow_table().to_pylist()


def _registration_rows(
    spark: SparkSession, new: Sequence[DumpFile], arrival_ms: int, topic: str
) -> pa.Table:
    """One row per (file, partition) from the scan, plus one partition-less row per file
    whose scan found no valid record, so that such files are registered too; each row
    carries the file's problem (unreadable path, damaged gzip stream) and bad lines."""
    scan = scan_dump_files(spark, [d.path for d in new if d.problem is None], topic=topic)
    by_path: dict[str, list[dict]] = {}
    for row in scan.summary.to_pylist():
        by_path.setdefault(str(row["file"]), []).append(row)
    rows = []
    for dump in new:
        base = {"path": str(dump.path), "size": dump.size, "mtime_ms": dump.mtime_ms,
                "arrival_ms": arrival_ms, "problem": dump.problem or scan.damaged.get(dump.path),
                "bad_lines": scan.bad_lines.get(dump.path, 0)}
        stats = by_path.get(str(dump.path)) or [{"partition": None, "records": 0}]
        for s in stats:
            rows.append({**base, **{k: s.get(k) for k in SCAN_SCHEMA.names[1:]}})
    return pa.Table.from_pylist(rows, FILES_SCHEMA)


def require_present(files: Iterable[RegisteredFile]) -> None:
    """Fail loudly, naming each file and its offsets, when a needed dump file is gone."""
    missing = [f for f in files if f.retired or not Path(f.path).exists()]
    if missing:
        described = "; ".join(
            f.describe() + (f" retired to {f.archived_to}" if f.archived_to else "")
            for f in missing
        )
        raise MissingDumpFile(f"dump file(s) still needed but missing: {described}")


def read_canonical(
    spark: SparkSession, registry: Registry, files: Sequence[RegisteredFile], keep: Column
) -> CanonicalRecords:
    """Read ``files`` and keep one copy per (partition, offset) among records passing ``keep``.

    The kept copy is a kcat copy before a Kafka Connect sink copy (which knows neither the
    key nor the true timestamp), then the one of the earliest-arriving file, then the
    smallest path, so every run picks the same copy; dropped copies of the kept copy's
    layout that differ in ts, key or payload become conflict rows. Identical redeliveries
    simply collapse. The lines are shuffled once, by Kafka partition, and sorted by
    offset: the copy ranking and every later per-partition pass in offset order (the
    binding times) reuse that layout. Gzip damage comes from the registry (judged when
    the immutable files were registered).
    """
    files = sorted((f for f in files if not f.unreadable), key=lambda f: f.path)
    require_present(files)
    damage = {f.path: GzipDamage.from_reason(f.problem) for f in files if f.problem}
    dumps = read_dumps(spark, [f.path for f in files], topic=registry.topic, damaged=damage)
    # File ids in path order, so ordering copies by id orders them by path.
    catalog = local_frame(
        spark,
        pa.table(
            {"file": [f.path for f in files], "_file": list(range(len(files))),
             "arrival_ms": [f.arrival_ms for f in files],
             "_from_sink": [layout_of(f.path) is DumpLayout.CONNECT for f in files]},
            schema=pa.schema(
                [("file", pa.string()), ("_file", pa.int32()), ("arrival_ms", pa.int64()),
                 ("_from_sink", pa.bool_())]
            ),
        ),
    )
    good = F.col("reason").isNull()
    # A left join (every line's file is in the catalog): an inner one would add a
    # not-null filter on ``file`` that Spark computes apart, decoding every path twice.
    lines = (
        dumps.lines.join(F.broadcast(catalog), "file", "left")
        .drop("file")
        .repartition("partition")
    )
    # Good records sort before bad lines at the same position, so a bad line never
    # displaces a good copy; the kept copy is the first row of its position.
    # A kcat copy is preferred to a sink copy, which lacks the key and the true timestamp;
    # copies of different layouts are not compared (a sink rewrites the value's JSON).
    copies = Window.partitionBy("partition", "offset").orderBy(
        ~good, "_from_sink", "arrival_ms", "_file"
    )
    kept = {c: F.first(c).over(copies) for c in ("ts", "key", "payload", "_file", "_from_sink")}
    same = (
        F.col("ts").eqNullSafe(kept["ts"])
        & F.col("key").eqNullSafe(kept["key"])
        & F.col("payload").eqNullSafe(kept["payload"])
    )
    rank = F.row_number().over(copies)
    same_layout = F.col("_from_sink") == kept["_from_sink"]
    conflict = F.when(good & (rank > 1) & same_layout & ~same, kept["_file"])
    # ``keep`` applies after the ranking, which it cannot change (a position is ranked on
    # its own). Before the shuffle Spark would push it into the parse and parse each line
    # twice, and tested on ``reason`` first, evaluate every check of every line.
    ranked = lines.select("*", rank.alias("_copy"), conflict.alias("_kept_file")).where(
        keep | ~good
    )
    return CanonicalRecords(lines=ranked, catalog=catalog, unreadable=dumps.unreadable)
