"""The durable registry of a source's dump files: which files landed, when, and what they hold.

Every dump file is registered once, with its arrival time and per-partition offset and
timestamp statistics, in a small Delta table written from the driver (metadata only).
The arrival time makes the ``arrival`` minting policy replayable; the statistics let a
window read only the files that can hold the offsets it needs.

Dump files are immutable once landed: registering a path again with the same size and
mtime is a no-op, while a changed size or mtime raises ``DumpFileChanged`` (a rewritten
dump could silently change records already bound to a window).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from cdc_core.frontier import OffsetFrontier
from cdc_core.ingest.dumps import (
    SCAN_SCHEMA,
    DumpFile,
    scan_dump_files,
)
from cdc_core.shard.log import append_rows

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




@dataclass(frozen=True)
class PartitionStats:
    """What one dump file holds of one Kafka partition: the offset range of its records
    and of its damaged lines whose position is known (bound like records)."""

    partition: int
    min_offset: int
    max_offset: int
    min_ts: int | None  # None when only damaged lines without a readable ts hold it
    max_ts: int | None
    records: int
    damaged_lines: int = 0  # positioned damaged lines: bound like records, no record


@dataclass(frozen=True)
class RegisteredFile:
    """One registered dump file; ``partitions`` is empty for a file without a line whose
    position reads.
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
        return bool(self.problem or self.bad_lines or not self.has_records)

    @property
    def has_file_errors(self) -> bool:
        """Some of its errors belong to the file, not to a position: damage, no record,
        or lines without a position (the rest are bound with their positions)."""
        placed = sum(s.damaged_lines for s in self.partitions)
        return bool(self.problem or not self.has_records or self.bad_lines > placed)

    @property
    def has_records(self) -> bool:
        """Some line of it is a record (a file of damaged lines may still have positions)."""
        return any(s.records for s in self.partitions)

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
                    row.get("damaged_lines") or 0,
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
