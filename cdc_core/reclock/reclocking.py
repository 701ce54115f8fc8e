"""The reclocked collection: every record exactly once, at the first binding covering it.

For binding times in ``[lower, upper)`` the records are those with offsets in
``[remap[lower - 1], remap[upper - 1])`` per partition (above the partition's start
offset); record ``(p, o)`` gets the first binding time ``t`` with ``remap[t][p] > o``.
Only the registered files whose offset ranges meet that interval are read.

Errors of the range come back as a DataFrame for the caller to append to the source's
errors shard together with its own errors (one writer per window for that shard):
- a copy of an offset whose ts/key/payload differ from the kept copy, at the time the
  offset is reclocked;
- a damaged line whose ``(partition, offset)`` is known, and the text lost after a
  record on its line, at the binding time of that position (bound like a record, so
  it never holds back its partition);
- malformed lines without a position and damage of a dump file, at the first binding
  that covers any of its records;
- a file without any valid record (empty, unreadable, damaged beyond its first line),
  or landed after all its records were bound, at the first binding of the first range
  reclocked after it was registered, unless the caller says an earlier range already
  reported it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from cdc_core.calendar import Windows
from cdc_core.frontier import OffsetFrontier
from cdc_core.ingest import CanonicalReads, CanonicalRecords, RegisteredFile, Registry
from cdc_core.ingest.canonical import SOURCE, parts_starts_column
from cdc_core.reclock.remap import (
    ImposedBindings,
    RangeBindings,
    ReclockSource,
    configured_starts,
    effective_starts,
    mint_bindings,
)
from cdc_core.schemas import ERROR
from cdc_core.shard import Shard, ShardUsageError
from cdc_core.spark import local_frame

# The error row of a file without records, with its binding time.
_FILE_ERROR = pa.schema(
    [(SOURCE, pa.int32()), ("topic", pa.string()), ("partition", pa.int32()),
     ("offset", pa.int64()), ("key", pa.string()), ("reason", pa.string()), ("file", pa.string()),
     ("time", pa.int64())]
)


@dataclass(frozen=True)
class ReclockedFrames:
    """Reclocked records and errors: ``records``, the ``reclocked_schema`` columns (headers
    as the reads carry them) + time + diff; ``errors``, ERROR + time + diff.
    ``error_witness``: a frame whose emptiness proves ``errors`` empty, testable without a
    shuffle or join (the run's persisted lines, filtered); None when the driver already
    knows of errors to report."""

    records: DataFrame
    errors: DataFrame
    error_witness: DataFrame | None


@dataclass(frozen=True)
class ReclockedRange:
    """The reclocked records and errors for the binding times ``[lower, upper)``, built
    by ``build`` when first asked for.

    Why lazy: a source reclocked with many others has its part of the joint frames, and
    each frame derived on the driver costs a Spark analysis of the joint plan; a source
    whose envelope is applied with the others' never asks for its own."""

    lower: int
    upper: int
    build: Callable[[], ReclockedFrames]

    @classmethod
    def of(
        cls, lower: int, upper: int, records: DataFrame, errors: DataFrame,
        error_witness: DataFrame | None,
    ) -> ReclockedRange:
        """A range whose frames are built already."""
        frames = ReclockedFrames(records, errors, error_witness)
        return cls(lower, upper, lambda: frames)

    @functools.cached_property
    def frames(self) -> ReclockedFrames:
        """The range's frames, built once."""
        return self.build()

    @property
    def records(self) -> DataFrame:
        """The reclocked records (``ReclockedFrames.records``)."""
        return self.frames.records

    @property
    def errors(self) -> DataFrame:
        """The reclocked errors (``ReclockedFrames.errors``)."""
        return self.frames.errors

    @property
    def error_witness(self) -> DataFrame | None:
        """What proves the errors empty (``ReclockedFrames.error_witness``)."""
        return self.frames.error_witness


@dataclass(frozen=True)
class ReclockedWindows:
    """The bindings of a run's windows and the reclocked range ending with them."""

    bindings: RangeBindings
    reclocked: ReclockedRange


def binding_intervals(
    base: OffsetFrontier, bindings: Sequence[tuple[int, int, int]]
) -> list[tuple[int, int, int, int]]:
    """Per binding, the offsets it newly covers: ``(partition, lo, hi, time)``, so that
    every offset falls in exactly one interval (remap is monotone)."""
    reached = dict(base.offsets)
    intervals = []
    for p, o, t in sorted(bindings, key=lambda b: (b[0], b[2])):
        intervals.append((p, reached.get(p, 0), o, t))
        reached[p] = o
    return intervals


def first_covering(bindings: Sequence[tuple[int, int, int]], partition: int, offset: int) -> int:
    """The first binding time whose frontier for ``partition`` passes ``offset`` (or -1)."""
    times = [t for p, o, t in bindings if p == partition and o > offset]
    return min(times, default=-1)


def first_read_times(
    source: ReclockSource,
    files: Sequence[RegisteredFile],
    base: OffsetFrontier,
    bindings: Sequence[tuple[int, int, int]],
    upper: int,
    reported: Collection[str],
) -> dict[str, int]:
    """Files first read in this range -> the binding time at which their errors belong.

    A file with records was read before iff one of its offsets at or above the
    partition's start lies below ``base``; otherwise its errors belong to the first
    binding covering its lowest such offset. A file whose errors are still to report
    though no binding of the range covers it (it has no position, it landed after all
    its records were bound, or it has lines without a position while its positions
    wait) belongs to the range's first binding (``upper - 1`` when nothing moves).
    A file ``reported`` already is left out.
    """
    starts = configured_starts(source)
    first_binding = min((t for _, _, t in bindings), default=upper - 1)
    times: dict[str, int] = {}
    for registered in files:
        due = registered.has_errors and not registered.retired
        lowest = {
            s.partition: max(s.min_offset, starts.get(s.partition, 0))
            for s in registered.partitions
            if s.max_offset >= starts.get(s.partition, 0)
        }
        read_before = any(base.contains(p, o) for p, o in lowest.items())
        if not lowest or read_before:
            if due and registered.path not in reported:
                times[registered.path] = first_binding
            continue
        covered = [first_covering(bindings, p, o) for p, o in lowest.items()]
        covered = [t for t in covered if t >= 0]
        if registered.path in reported:
            continue
        if covered:
            times[registered.path] = min(covered)
        elif due and registered.has_file_errors:
            # What has no position waits on nothing: reported when first seen.
            times[registered.path] = first_binding
    return times


@dataclass(frozen=True)
class RangeToReclock:
    """What the driver decides of one source's reclocked range before any row is read:
    the range's bindings, the partitions' starts, the files to read (``needed``), the
    binding time of each file whose errors are due (``error_times``), the files without
    records among them (reported as one row each), and whether errors are known before
    reading (``known_errors``: files without records, damaged files)."""

    topic: str
    lower: int
    upper: int
    bindings: RangeBindings
    starts: dict[int, int]
    needed: list[RegisteredFile]
    error_times: dict[str, int]
    empty: list[RegisteredFile]

    @property
    def known_errors(self) -> bool:
        """Whether the range has errors the registry knows of (else only erring lines)."""
        return bool(self.empty) or any(f.problem for f in self.needed)

    @classmethod
    def of(
        cls,
        source: ReclockSource,
        registry: Registry,
        remap: Shard,
        lower: int,
        upper: int,
        known: RangeBindings | None = None,
        *,
        reported: Collection[str],
    ) -> RangeToReclock:
        """The range ``[lower, upper)`` of the source (``known``, ``reported``: see
        ``reclock_range``)."""
        bindings = known or RangeBindings.read(remap, lower, upper)
        starts = effective_starts(source, bindings.base)
        files = registry.files(reaching=starts)
        error_times = first_read_times(
            source, files, bindings.base, bindings.bindings, upper, reported
        )
        needed = [f for f in files if f.overlaps(starts, bindings.top) or f.path in error_times]
        empty = [f for f in needed if not f.has_records and f.path in error_times]
        return cls(source.topic, lower, upper, bindings, starts, needed, error_times, empty)


def reclocked_parts(
    spark: SparkSession, canonical: CanonicalRecords, ranges: Mapping[int, RangeToReclock]
) -> tuple[DataFrame, DataFrame]:
    """The reclocked records and errors of every part ``k`` of ``canonical`` (a read of
    at least ``ranges[k].needed`` from ``ranges[k].starts``), each for its range: records
    ``SOURCE`` + ``reclocked_schema`` (headers as the read carries them) + time + diff,
    errors ``SOURCE`` + ERROR + time + diff. One plan for every part: each part's
    bindings, starts and error times enter as data, keyed by ``SOURCE``."""
    intervals = F.broadcast(
        _frame(
            spark,
            [(k, *interval) for k, r in ranges.items()
             for interval in binding_intervals(r.bindings.base, r.bindings.bindings)],
            (SOURCE, "partition", "_lo", "_hi", "time"),
        )
    )  # fmt: skip

    def with_binding_time(frame: DataFrame) -> DataFrame:
        """Attach to each row the binding time whose interval holds its offset."""
        return frame.join(
            intervals,
            (frame[SOURCE] == intervals[SOURCE])
            & (frame["partition"] == intervals["partition"])
            & (frame["offset"] >= intervals["_lo"])
            & (frame["offset"] < intervals["_hi"]),
        ).select(frame["*"], intervals["time"])

    # Rows outside a range's offsets drop out in the interval join.
    records = with_binding_time(canonical.sourced_records.drop("arrival_ms")).withColumn(
        "diff", F.lit(1).cast("bigint")
    )
    file_times = F.broadcast(
        _frame(spark, [(k, path, time) for k, r in ranges.items()
                       for path, time in sorted(r.error_times.items())],
               (SOURCE, "file", "time"))
    )  # fmt: skip
    # A line's error belongs to the binding of its position; one below the partition's
    # start (a late file's copy of an offset bound earlier, or an offset before the
    # source starts) is reported with its file's other errors.
    line_errors = canonical.line_errors
    starts = {k: r.starts for k, r in ranges.items()}
    below_start = F.col("offset") < parts_starts_column(spark, starts)
    file_errors = canonical.read_errors.unionByName(line_errors.where(below_start)).join(
        file_times, [SOURCE, "file"]
    )
    empty_files = local_frame(
        spark,
        pa.Table.from_pylist(
            [
                {SOURCE: k, "topic": r.topic, "reason": f.no_record_reason(), "file": f.path,
                 "time": r.error_times[f.path]}
                for k, r in ranges.items() for f in r.empty
            ],
            _FILE_ERROR,
        ),
    )  # fmt: skip
    errors = (
        with_binding_time(canonical.conflicts)
        .unionByName(with_binding_time(line_errors.where(~below_start)))
        .unionByName(file_errors.select(SOURCE, *ERROR.fieldNames(), "time"))
        .unionByName(empty_files)
        .withColumn("diff", F.lit(1).cast("bigint"))
    )
    return records, errors


def reclock_range(
    spark: SparkSession,
    source: ReclockSource,
    registry: Registry,
    remap: Shard,
    lower: int,
    upper: int,
    known: RangeBindings | None = None,
    reads: CanonicalReads | None = None,
    *,
    reported: Collection[str],
) -> ReclockedRange:
    """Reclocked records and errors for binding times ``[lower, upper)`` (``upper`` must
    not exceed the remap's upper); ``known`` saves reading the remap when the caller has
    the range's bindings at hand, ``reads`` re-reading dumps the run has read already
    (and whether the records carry their headers: without ``reads``, they do not);
    ``reported``: the files with errors whose rows an earlier range wrote (a file due to
    be reported though no binding covers it is reported again unless listed)."""
    planned = RangeToReclock.of(
        source, registry, remap, lower, upper, known, reported=reported
    )
    reader = reads or CanonicalReads(spark, registry, persist=False)
    canonical = reader.read(planned.needed, planned.starts)
    records, errors = reclocked_parts(spark, canonical, {0: planned})
    # Besides the rows of files without records and of damaged files (known to the
    # registry), every error row comes from an erring line.
    witness = None if planned.known_errors else canonical.erring_lines
    return ReclockedRange.of(lower, upper, records.drop(SOURCE), errors.drop(SOURCE), witness)


def reclock_windows(
    spark: SparkSession,
    source: ReclockSource,
    registry: Registry,
    remap: Shard,
    lower: int,
    windows: Windows,
    reads: CanonicalReads | None = None,
    *,
    reported: Collection[str],
    imposed: ImposedBindings | None = None,
    bound: RangeBindings | None = None,
) -> ReclockedWindows:
    """Bind ``windows`` (or read their bindings back) and reclock the binding times
    ``[lower, windows.end + 1)``, where ``lower`` is where the caller's output shards stand
    (their meet of uppers, at most ``windows.end``). Pass the run's ``reads`` to parse the
    dumps once for both, and release them once the reclocked range is written;
    ``reported``: the files whose error rows the caller's outputs hold already;
    ``imposed``: bindings a transaction group imposes on the source; ``bound``: the
    bindings of ``windows`` minted for this run already (bound with other sources')."""
    if lower > windows.end:
        raise ShardUsageError(f"outputs at {lower} are already past {windows.end}")
    bindings = bound or mint_bindings(spark, source, registry, remap, windows, reads, imposed)
    known = bindings if lower == windows.start + 1 else None
    reclocked = reclock_range(
        spark, source, registry, remap, lower, windows.end + 1, known, reads, reported=reported
    )
    return ReclockedWindows(bindings, reclocked)


def _frame(spark: SparkSession, rows: Sequence[tuple], names: Sequence[str]) -> DataFrame:
    """A tiny driver-built DataFrame of metadata rows (ints are bigint, except partition
    and the part of a read)."""
    types = {"partition": pa.int32(), SOURCE: pa.int32(), "file": pa.string()}
    schema = pa.schema([(n, types.get(n, pa.int64())) for n in names])
    columns = {n: [row[i] for row in rows] for i, n in enumerate(names)}
    return local_frame(spark, pa.table(columns, schema=schema))
