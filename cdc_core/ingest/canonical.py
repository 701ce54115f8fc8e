"""The canonical read of registered dump files: one copy per ``(partition, offset)``, the
same copy on every read, and the contradictions found while choosing it.

It sits above the registry (it reads what the registry registered, with the damage judged
at registration) and above the dump reader (``dumps``), so neither needs the other's
names. Invariant: the kept copy of a position depends only on the registered files, never
on the order or the run that reads them; a needed file that is gone fails loudly
(``MissingDumpFile``), never silently skipped.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from cdc_core.ingest.connect_files import layout_of
from cdc_core.ingest.dump_bytes import (
    DumpDamage,
)
from cdc_core.ingest.dumps import error_rows, read_dumps
from cdc_core.ingest.registry import RegisteredFile, Registry, sink_gaps
from cdc_core.schemas import ERROR, HEADERS, reclocked_schema
from cdc_core.spark import local_frame
from cdc_core.storage import files as storage_files
from cdc_core.vocabulary import DumpLayout


class MissingDumpFile(FileNotFoundError):
    """A dump file that a run still needs is gone (never silently skipped)."""


@dataclass(frozen=True)
class CanonicalRecords:
    """One copy per ``(partition, offset)`` plus the contradictions found while choosing it.

    ``lines``: every parsed line of the files read, with ``arrival_ms``, the copy rank
    ``_copy`` (1 for the kept copy) and, for a dropped copy whose ts/key/payload differ
    from the kept one, ``_kept_file``; files appear as small ids (``_file``), which
    ``catalog`` maps to their paths, so the shuffled and cached rows stay narrow.
    ``unreadable``: ERROR rows of files that could not be read. Records, positions,
    conflicts and errors are views of the one frame, so persisting it (``CanonicalReads``)
    parses and sorts every line once. ``headers``: whether the records carry their headers.
    """

    lines: DataFrame
    catalog: DataFrame
    unreadable: DataFrame
    headers: bool = False
    covered: DataFrame | None = None  # ``partition``, ``offset``, ``covers``: see positions

    @property
    def records(self) -> DataFrame:
        """``reclocked_schema`` columns plus ``arrival_ms``, one row per (partition, offset)."""
        kept = F.col("reason").isNull() & (F.col("_copy") == 1)
        return self.lines.where(kept).select(*reclocked_schema(self.headers).names, "arrival_ms")

    @property
    def positions(self) -> DataFrame:
        """``partition``, ``offset``, ``ts``, ``arrival_ms`` of every known position: the
        records, and the positioned damaged lines of positions no record holds (their
        ``ts`` null when it does not read). A binding passes these, so a damaged line
        never holds back the records after it. ``covers``: the last offset a position
        accounts for, its own, or for the last record of a Kafka Connect sink file the
        offset before the next file's start (``sink_gaps``)."""
        kept = (F.col("reason").isNull() | F.col("positioned")) & (F.col("_copy") == 1)
        positions = self.lines.where(kept).select("partition", "offset", "ts", "arrival_ms")
        if self.covered is None:
            return positions.withColumn("covers", F.col("offset"))
        return positions.join(F.broadcast(self.covered), ["partition", "offset"], "left").select(
            "partition", "offset", "ts", "arrival_ms",
            F.coalesce("covers", "offset").alias("covers"),
        )  # fmt: skip

    @property
    def conflicts(self) -> DataFrame:
        """ERROR rows of every distinct dropped copy that contradicts the kept one."""
        kept_file = self.catalog.select(F.col("_file").alias("_kept_file"),
                                        F.col("file").alias("_kept_path"))
        compared = _compared(self.headers)
        reason = F.format_string(
            f"conflicting copy of partition %d offset %d: {'/'.join(compared)} differ from the "
            "kept copy in %s", F.col("partition"), F.col("offset"), F.col("_kept_path"),
        )
        return (
            self.lines.where(F.col("_kept_file").isNotNull())
            .dropDuplicates(["partition", "offset", "_file", *compared])
            .join(F.broadcast(self.catalog.select("_file", "file")), "_file")
            .join(F.broadcast(kept_file), "_kept_file")
            .select(*[(reason if n == "reason" else F.col(n)).alias(n) for n in ERROR.names])
        )

    @property
    def erring_lines(self) -> DataFrame:
        """The lines that yield an error row of any kind (a conflicting copy, a failed
        line, a record's lost trailing text): when none does, every error of the read
        comes from ``unreadable`` alone. A filter of ``lines`` only, no shuffle or join,
        so testing it for emptiness costs one pass over a persisted read."""
        erring = F.col("_kept_file").isNotNull() | F.col("reason").isNotNull()
        return self.lines.where(erring | F.col("dropped").isNotNull())

    @property
    def line_errors(self) -> DataFrame:
        """ERROR rows of the lines whose position is known: positioned damaged lines and
        records whose line went on after their JSON object. They belong to the binding
        of their position."""
        placed = self.lines.where(F.col("positioned") | F.col("dropped").isNotNull())
        return error_rows(self._named(placed))

    @property
    def read_errors(self) -> DataFrame:
        """ERROR rows of malformed lines without a position (file known) and unreadable
        files: they belong to the first read of their file."""
        unplaced = self.lines.where(F.col("reason").isNotNull() & ~F.col("positioned"))
        return error_rows(self._named(unplaced)).unionByName(self.unreadable)

    def _named(self, lines: DataFrame) -> DataFrame:
        """``lines`` with their file's path."""
        return lines.join(F.broadcast(self.catalog.select("_file", "file")), "_file")


class CanonicalReads:
    """The canonical reads of one run, persisted and reused: binding a run's windows and
    reclocking them then parse and sort each dump line once. A read serves any later
    request for a subset of its files with the same partition starts (records outside a
    request's offsets are dropped by the request's own filters). ``release`` when the run
    ends. With ``persist=False`` (a caller that reads once) nothing is kept; with
    ``headers`` the records carry their headers (``reclocked_schema``)."""

    def __init__(
        self, spark: SparkSession, registry: Registry, *, persist: bool = True,
        headers: bool = False,
    ) -> None:
        self.spark = spark
        self.registry = registry
        self.persist = persist
        self.headers = headers
        self._reads: list[tuple[frozenset[str], dict[int, int], CanonicalRecords]] = []

    def read(self, files: Sequence[RegisteredFile], starts: Mapping[int, int]) -> CanonicalRecords:
        """Canonical records of ``files`` at or above ``starts``."""
        paths = frozenset(f.path for f in files)
        for known, known_starts, canonical in self._reads:
            if paths <= known and known_starts == dict(starts):
                return canonical
        keep = F.col("offset") >= starts_column(self.spark, starts)
        canonical = read_canonical(self.spark, self.registry, files, keep, headers=self.headers)
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


def require_present(files: Iterable[RegisteredFile]) -> None:
    """Fail loudly, naming each file and its offsets, when a needed dump file is gone."""
    missing = [
        f for f in files
        if f.retired or not all(storage_files.exists(p) for p in (f.path, *f.stored.values()))
    ]  # fmt: skip
    if missing:
        described = "; ".join(
            f.describe() + (f" retired to {f.archived_to}" if f.archived_to else "")
            for f in missing
        )
        raise MissingDumpFile(f"dump file(s) still needed but missing: {described}")


def _compared(headers: bool) -> tuple[str, ...]:
    """What two copies of one position must agree on: headers too when they are kept."""
    return ("ts", "key", "payload", *([HEADERS.name] if headers else []))


def read_canonical(
    spark: SparkSession,
    registry: Registry,
    files: Sequence[RegisteredFile],
    keep: Column,
    *,
    headers: bool = False,
) -> CanonicalRecords:
    """Read ``files`` and keep one copy per (partition, offset) among records passing ``keep``.

    The kept copy is a kcat copy before a Kafka Connect sink copy (which knows neither the
    key nor the true timestamp), then the one of the earliest-arriving file, then the
    smallest path, so every run picks the same copy (a sink value file is read with the
    key and header files registered for it, and not at all while it waits for them);
    dropped copies of the kept copy's layout that differ in ts, key or payload become
    conflict rows. Identical redeliveries
    simply collapse. The lines are shuffled once, by Kafka partition, and sorted by
    offset: the copy ranking and every later per-partition pass in offset order (the
    binding times) reuse that layout. Gzip damage comes from the registry (judged when
    the immutable files were registered). ``headers``: the records carry their headers,
    "[]" for a kcat record without any; a sink record's from its headers file, null
    without one (unknown, not absent); and copies must agree on them too.
    """
    gaps = sink_gaps(files)
    readable = (  # a key or header file is read with its value file, never alone
        f for f in files if not f.unreadable and not f.waiting_for and f.stored_kind is None
    )
    files = sorted(readable, key=lambda f: f.path)
    require_present(files)
    damage = {f.path: DumpDamage.from_reason(f.problem) for f in files if f.problem}
    dumps = read_dumps(
        spark, [f.path for f in files], topic=registry.topic, damaged=damage, headers=headers,
        stored={f.path: f.stored for f in files if f.stored},
    )  # fmt: skip
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
    lines = dumps.lines.join(F.broadcast(catalog), "file", "left").drop("file")
    if headers:
        known = F.coalesce(F.col(HEADERS.name), F.lit("[]"))
        sink = F.col(HEADERS.name)  # its headers file's, or unknown (null) without one
        lines = lines.withColumn(HEADERS.name, F.when(F.col("_from_sink"), sink).otherwise(known))
    lines = lines.repartition("partition")
    # Good records sort before bad lines at the same position, so a bad line never
    # displaces a good copy, and positioned bad lines before the rest (another topic's
    # line may claim any position); the kept copy is the first row of its position.
    # A kcat copy is preferred to a sink copy, which lacks the key and the true timestamp;
    # copies of different layouts are not compared (a sink rewrites the value's JSON).
    copies = Window.partitionBy("partition", "offset").orderBy(
        ~good, ~F.col("positioned"), "_from_sink", "arrival_ms", "_file"
    )
    compared = _compared(headers)
    kept = {c: F.first(c).over(copies) for c in (*compared, "_file", "_from_sink")}
    same = functools.reduce(
        operator.and_, [F.col(c).eqNullSafe(kept[c]) for c in compared]
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
    covered = None
    if gaps:
        covered = local_frame(
            spark, [(p, low - 1, high - 1) for p, spans in gaps.items() for low, high in spans],
            "partition int, offset bigint, covers bigint",
        )  # fmt: skip
    return CanonicalRecords(
        lines=ranked, catalog=catalog, unreadable=dumps.unreadable, headers=headers,
        covered=covered,
    )  # fmt: skip
