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
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, StructField, StructType
from pyspark.sql.window import Window

from cdc_core.ingest.connect_files import layout_of
from cdc_core.ingest.dump_bytes import (
    DumpDamage,
)
from cdc_core.ingest.dumps import FILE_TOPIC, error_rows, read_dumps
from cdc_core.ingest.registry import RegisteredFile, Registry, sink_gaps
from cdc_core.schemas import ERROR, HEADERS, reclocked_schema
from cdc_core.spark import local_frame
from cdc_core.storage import files as storage_files
from cdc_core.vocabulary import DumpLayout

# The lines' column telling the parts of a read of many sources' files apart.
SOURCE = "_source"


class MissingDumpFile(FileNotFoundError):
    """A dump file that a run still needs is gone (never silently skipped)."""


@dataclass(frozen=True)
class CanonicalRecords:
    """One copy per ``(partition, offset)`` plus the contradictions found while choosing it.

    ``lines``: every parsed line of the files read, with ``arrival_ms``, the copy rank
    ``_copy`` (1 for the kept copy) and, for a dropped copy whose ts/key/payload differ
    from the kept one, ``_kept_file``; files appear as small ids (``_file``), which
    ``catalog`` maps to their paths, so the shuffled and cached rows stay narrow.
    ``unreadable``: ``SOURCE`` and ERROR rows of files that could not be read. Records, positions,
    conflicts and errors are views of the one frame, so persisting it (``CanonicalReads``)
    parses and sorts every line once. ``headers``: whether the records carry their headers.
    A read of many sources' files tells them apart by ``SOURCE`` (their index among the
    read's parts): ``of_source`` is one source's part of it.
    """

    lines: DataFrame
    catalog: DataFrame
    unreadable: DataFrame
    headers: bool = False
    covered: DataFrame | None = None  # ``SOURCE``, ``partition``, ``offset``, ``covers``

    def of_source(self, part: int) -> CanonicalRecords:
        """The part ``part`` of a read of many sources' files, as a read of its files alone
        would give it (its rows relabelled as part 0; every view filters the one frame, so
        persisted, it is parsed once)."""

        def mine(frame: DataFrame) -> DataFrame:
            return frame.where(F.col(SOURCE) == part).withColumn(SOURCE, F.lit(0))

        return dataclasses.replace(
            self, lines=mine(self.lines), catalog=mine(self.catalog),
            unreadable=mine(self.unreadable),
            covered=None if self.covered is None else mine(self.covered),
        )  # fmt: skip

    @property
    def records(self) -> DataFrame:
        """``reclocked_schema`` columns plus ``arrival_ms``, one row per (partition, offset)."""
        return self.sourced_records.drop(SOURCE)

    @property
    def sourced_records(self) -> DataFrame:
        """``records`` with ``SOURCE``: which part of the read each belongs to."""
        kept = F.col("reason").isNull() & (F.col("_copy") == 1)
        names = reclocked_schema(self.headers).names
        return self.lines.where(kept).select(SOURCE, *names, "arrival_ms")

    @property
    def positions(self) -> DataFrame:
        """``partition``, ``offset``, ``ts``, ``arrival_ms`` of every known position: the
        records, and the positioned damaged lines of positions no record holds (their
        ``ts`` null when it does not read). A binding passes these, so a damaged line
        never holds back the records after it. ``covers``: the last offset a position
        accounts for, its own, or for the last record of a Kafka Connect sink file the
        offset before the next file's start (``sink_gaps``)."""
        kept = (F.col("reason").isNull() | F.col("positioned")) & (F.col("_copy") == 1)
        columns = (SOURCE, "partition", "offset", "ts", "arrival_ms")
        positions = self.lines.where(kept).select(*columns)
        if self.covered is None:
            return positions.withColumn("covers", F.col("offset"))
        on = [SOURCE, "partition", "offset"]
        return positions.join(F.broadcast(self.covered), on, "left").select(
            *columns, F.coalesce("covers", "offset").alias("covers"),
        )  # fmt: skip

    @property
    def conflicts(self) -> DataFrame:
        """ERROR rows of every distinct dropped copy that contradicts the kept one."""
        kept_file = self.catalog.select(
            F.col("_file").alias("_kept_file"), F.col("file").alias("_kept_path")
        )
        compared = _compared(self.headers)
        reason = F.format_string(
            f"conflicting copy of partition %d offset %d: {'/'.join(compared)} differ from the "
            "kept copy in %s",
            F.col("partition"),
            F.col("offset"),
            F.col("_kept_path"),
        )
        return (
            self.lines.where(F.col("_kept_file").isNotNull())
            .dropDuplicates(["partition", "offset", "_file", *compared])
            .join(F.broadcast(self.catalog.select("_file", "file")), "_file")
            .join(F.broadcast(kept_file), "_kept_file")
            .select(
                SOURCE, *[(reason if n == "reason" else F.col(n)).alias(n) for n in ERROR.names]
            )
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
        return error_rows(self._named(placed), (SOURCE,))

    @property
    def read_errors(self) -> DataFrame:
        """ERROR rows of malformed lines without a position (file known) and unreadable
        files: they belong to the first read of their file."""
        unplaced = self.lines.where(F.col("reason").isNotNull() & ~F.col("positioned"))
        return error_rows(self._named(unplaced), (SOURCE,)).unionByName(self.unreadable)

    def _named(self, lines: DataFrame) -> DataFrame:
        """``lines`` with their file's path."""
        return lines.join(F.broadcast(self.catalog.select("_file", "file")), "_file")


@dataclass(frozen=True)
class SourceFiles:
    """One source's part of a canonical read: registered dump files of its topic, read at
    or above ``starts`` (partition -> first offset; partitions not listed start at 0)."""

    topic: str
    files: Sequence[RegisteredFile]
    starts: Mapping[int, int]


class CanonicalReads:
    """The canonical reads of one run, persisted and reused: binding a run's windows and
    reclocking them then parse and sort each dump line once. A read serves any later
    request for a subset of its files with the same partition starts (records outside a
    request's offsets are dropped by the request's own filters). ``release`` when the run
    ends. With ``persist=False`` (a caller that reads once) nothing is kept; with
    ``headers`` the records carry their headers (``reclocked_schema``)."""

    def __init__(
        self,
        spark: SparkSession,
        registry: Registry,
        *,
        persist: bool = True,
        headers: bool = False,
    ) -> None:
        self.spark = spark
        self.registry = registry
        self.persist = persist
        self.headers = headers
        self._reads: list[tuple[frozenset[str], dict[int, int], Callable[[], CanonicalRecords]]]
        self._reads = []
        self._persisted: list[DataFrame] = []

    def read(self, files: Sequence[RegisteredFile], starts: Mapping[int, int]) -> CanonicalRecords:
        """Canonical records of ``files`` at or above ``starts``."""
        paths = frozenset(f.path for f in files)
        for known, known_starts, part_of in self._reads:
            if paths <= known and known_starts == dict(starts):
                return part_of()
        part = SourceFiles(self.registry.topic, files, starts)
        canonical = read_canonical(self.spark, [part], headers=self.headers)
        if self.persist:
            canonical = dataclasses.replace(canonical, lines=canonical.lines.persist())
            self._persisted.append(canonical.lines)
            held = canonical
            self._reads.append((paths, dict(starts), lambda: held))
        return canonical

    def adopt(
        self, files: Sequence[RegisteredFile], starts: Mapping[int, int],
        part: Callable[[], CanonicalRecords],
    ) -> None:  # fmt: skip
        """Serve later requests for ``files`` at ``starts`` from what ``part`` gives (called
        once, when first asked): a read made for this run elsewhere (one source's part of a
        read of many sources' dumps, whose ``SharedReads`` persists and releases it). A
        run reclocked with other sources' never asks, and deriving its part would cost a
        Spark analysis of the joint read per source."""
        self._reads.append((frozenset(f.path for f in files), dict(starts), functools.cache(part)))

    def release(self) -> None:
        """Unpersist every canonical read cached by this run (an adopted read is left to
        the ``SharedReads`` that persisted it)."""
        for lines in self._persisted:
            lines.unpersist()
        self._persisted.clear()
        self._reads.clear()


class SharedReads:
    """Canonical reads made once for the runs of many sources (each run's reads adopt its
    part), persisted until every run is done: ``release`` when the last one is."""

    def __init__(self) -> None:
        self._frames: list[DataFrame] = []
        self._lock = threading.Lock()

    def persist(self, canonical: CanonicalRecords) -> CanonicalRecords:
        """``canonical`` persisted, to be released with the others."""
        lines = canonical.lines.persist()
        with self._lock:
            self._frames.append(lines)
        return dataclasses.replace(canonical, lines=lines)

    def persist_frame(self, frame: DataFrame) -> DataFrame:
        """A frame derived from the reads (what the runs share of them), persisted to be
        released with them."""
        frame = frame.persist()
        with self._lock:
            self._frames.append(frame)
        return frame

    def release(self) -> None:
        """Unpersist every read persisted here."""
        with self._lock:
            frames, self._frames = self._frames, []
        for frame in frames:
            frame.unpersist()


def starts_column(spark: SparkSession, starts: Mapping[int, int]) -> Column:
    """A column with each record's partition start (0 for partitions not listed)."""
    pairs = [x for p, o in sorted(starts.items()) for x in (F.lit(p), F.lit(o))]
    if not pairs:
        return F.lit(0).cast("bigint")
    lookup = F.create_map(*pairs)
    return F.coalesce(lookup[F.col("partition")], F.lit(0)).cast("bigint")


def parts_starts_column(spark: SparkSession, starts: Mapping[int, Mapping[int, int]]) -> Column:
    """A column with each line's partition start in its part (``SOURCE``) of a read, from
    each part's starts (by part; a lone part's lines are all its own)."""
    if len(starts) == 1:
        return starts_column(spark, next(iter(starts.values())))
    pairs = [
        x for k, known in sorted(starts.items()) if known
        for x in (F.lit(k), F.create_map(*[
            c for p, o in sorted(known.items())
            for c in (F.lit(p).cast("int"), F.lit(o).cast("bigint"))
        ]))
    ]  # fmt: skip
    if not pairs:
        return F.lit(0).cast("bigint")
    lookup = F.create_map(*pairs)
    return F.coalesce(lookup[F.col(SOURCE)][F.col("partition")], F.lit(0)).cast("bigint")


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
    spark: SparkSession, parts: Sequence[SourceFiles], *, headers: bool = False
) -> CanonicalRecords:
    """Read each part's files and keep one copy per (partition, offset) of its topic at or
    above its starts; the parts (the sources of a run, or one) are told apart by
    ``SOURCE``, and a part's rows are those a read of its files alone would give.

    The kept copy is a kcat copy before a Kafka Connect sink copy (which knows neither the
    key nor the true timestamp), then the one of the earliest-arriving file, then the
    smallest path, so every run picks the same copy (a sink value file is read with the
    key and header files registered for it, and not at all while it waits for them);
    dropped copies of the kept copy's layout that differ in ts, key or payload become
    conflict rows. Identical redeliveries
    simply collapse. The lines are shuffled once, by part and Kafka partition, and sorted
    by offset: the copy ranking and every later per-partition pass in offset order (the
    binding times) reuse that layout. Gzip damage comes from the registry (judged when
    the immutable files were registered). ``headers``: the records carry their headers,
    "[]" for a kcat record without any; a sink record's from its headers file, null
    without one (unknown, not absent); and copies must agree on them too. One scan
    reads every part's files (a file two parts share, once).
    """
    entries: list[tuple[str, int, RegisteredFile]] = []
    covered_rows: list[tuple[int, int, int, int]] = []
    for k, part in enumerate(parts):
        covered_rows += [
            (k, p, low - 1, high - 1)
            for p, spans in sink_gaps(part.files).items() for low, high in spans
        ]  # fmt: skip
        entries += [  # a key or header file is read with its value file, never alone
            (f.path, k, f) for f in part.files
            if not f.unreadable and not f.waiting_for and f.stored_kind is None
        ]  # fmt: skip
    # File ids in path order, so ordering copies by id orders them by path.
    entries.sort(key=lambda entry: entry[:2])
    files = list({path: f for path, _, f in entries}.values())
    require_present(files)
    damage = {f.path: DumpDamage.from_reason(f.problem) for f in files if f.problem}
    catalog = local_frame(
        spark,
        pa.table(
            {
                "file": [path for path, _, _ in entries],
                "_file": list(range(len(entries))),
                SOURCE: [k for _, k, _ in entries],
                "arrival_ms": [f.arrival_ms for _, _, f in entries],
                "_from_sink": [layout_of(path) is DumpLayout.CONNECT for path, _, _ in entries],
                FILE_TOPIC: [parts[k].topic for _, k, _ in entries],
            },
            schema=pa.schema(
                [
                    ("file", pa.string()),
                    ("_file", pa.int32()),
                    (SOURCE, pa.int32()),
                    ("arrival_ms", pa.int64()),
                    ("_from_sink", pa.bool_()),
                    (FILE_TOPIC, pa.string()),
                ]
            ),
        ),
    )
    dumps = read_dumps(
        spark, [f.path for f in files], damaged=damage, headers=headers,
        stored={f.path: f.stored for f in files if f.stored}, catalog=catalog,
    )  # fmt: skip
    good = F.col("reason").isNull()
    lines = dumps.lines.drop("file", FILE_TOPIC)
    if headers:
        known = F.coalesce(F.col(HEADERS.name), F.lit("[]"))
        sink = F.col(HEADERS.name)  # its headers file's, or unknown (null) without one
        lines = lines.withColumn(HEADERS.name, F.when(F.col("_from_sink"), sink).otherwise(known))
    lines = lines.repartition(SOURCE, "partition")
    # Good records sort before bad lines at the same position, so a bad line never
    # displaces a good copy, and positioned bad lines before the rest (another topic's
    # line may claim any position); the kept copy is the first row of its position.
    # A kcat copy is preferred to a sink copy, which lacks the key and the true timestamp;
    # copies of different layouts are not compared (a sink rewrites the value's JSON).
    copies = Window.partitionBy(SOURCE, "partition", "offset").orderBy(
        ~good, ~F.col("positioned"), "_from_sink", "arrival_ms", "_file"
    )
    compared = _compared(headers)
    kept = {c: F.first(c).over(copies) for c in (*compared, "_file", "_from_sink")}
    same = functools.reduce(operator.and_, [F.col(c).eqNullSafe(kept[c]) for c in compared])
    rank = F.row_number().over(copies)
    same_layout = F.col("_from_sink") == kept["_from_sink"]
    conflict = F.when(good & (rank > 1) & same_layout & ~same, kept["_file"])
    # Keeping the offsets at or above the starts applies after the ranking, which it
    # cannot change (a position is ranked on its own). Before the shuffle Spark would push
    # it into the parse and parse each line twice, and tested on ``reason`` first,
    # evaluate every check of every line.
    keep = F.col("offset") >= parts_starts_column(spark, dict(enumerate(p.starts for p in parts)))
    ranked = lines.select("*", rank.alias("_copy"), conflict.alias("_kept_file")).where(
        keep | ~good
    )
    covered = None
    if covered_rows:
        covered = local_frame(
            spark, covered_rows, f"{SOURCE} int, partition int, offset bigint, covers bigint"
        )
    # A damaged file's row, as ``read_dumps`` gives it, for each part that reads it.
    unreadable = local_frame(
        spark,
        [(k, None, None, None, None, damage[path].reason, path)
         for path, k, _ in entries if path in damage],
        StructType([StructField(SOURCE, IntegerType()), *ERROR.fields]),
    )  # fmt: skip
    return CanonicalRecords(
        lines=ranked, catalog=catalog.drop(FILE_TOPIC), unreadable=unreadable,
        headers=headers, covered=covered,
    )  # fmt: skip
