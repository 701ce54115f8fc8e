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

import bisect
import dataclasses
import os
import posixpath
import threading
import uuid
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from cdc_core.frontier import OffsetFrontier
from cdc_core.ingest.connect_files import Stored, connect_name, stem, stored_kind
from cdc_core.ingest.dumps import (
    SCAN_SCHEMA,
    DumpFile,
    DumpScan,
    scan_dump_files,
)
from cdc_core.shard import delta_io
from cdc_core.shard.log import (
    NO_TABLE,
    LogMark,
    append_rows,
    existing_table,
    log_mark,
    merge_files,
    rewrite_table,
)
from cdc_core.storage import files as storage_files
from cdc_core.storage.files import LEADS_OUT
from cdc_core.vocabulary import SinkStore

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


# A Kafka Connect sink's key or header file (Arrow's RE2 regex; see ``connect_files``).
STORED_FILE = r"\+[0-9]+\+[0-9]+\.(keys|headers)\.(json|avro)(\.gz)?$"


class DumpFileChanged(ValueError):
    """A registered dump file changed size or mtime, or can no longer be read (replaced by
    a link leading out of its topic's folder, say): dumps must be immutable once landed."""




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
    many of its lines are no record. A Kafka Connect sink value file has the key and
    header files registered beside it (``stored``) and those its source expects but that
    have not landed yet (``waiting_for``): it is not read while it waits. A key or header
    file is registered too (``stored_kind``), as part of its value file, never read alone."""

    path: str
    size: int
    mtime_ms: int
    arrival_ms: int
    partitions: tuple[PartitionStats, ...]
    archived_to: str | None = None
    retired: bool = False
    problem: str | None = None
    bad_lines: int = 0
    stored_files: tuple[tuple[SinkStore, str], ...] = ()
    waiting_for: tuple[SinkStore, ...] = ()

    @property
    def stored(self) -> Stored:
        """The key and header files registered beside a sink value file, by what they store."""
        return dict(self.stored_files)

    @property
    def stored_kind(self) -> SinkStore | None:
        """What this file stores beside its value file (None for a dump of records)."""
        return stored_kind(self.path)

    @property
    def has_errors(self) -> bool:
        """Reading it yields error rows: it is damaged, has bad lines, or has no record (a
        key or header file has none of its own: its value file reports its damage)."""
        if self.stored_kind is not None:
            return False
        return bool(self.problem or self.bad_lines or not self.has_records)

    @property
    def has_file_errors(self) -> bool:
        """Some of its errors belong to the file, not to a position: damage, no record,
        or lines without a position (the rest are bound with their positions)."""
        placed = sum(s.damaged_lines for s in self.partitions)
        return self.has_errors and bool(
            self.problem or not self.has_records or self.bad_lines > placed
        )

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


def sink_gaps(files: Iterable[RegisteredFile]) -> dict[int, list[tuple[int, int]]]:
    """Per Kafka partition, the offset ranges ``[low, high)`` that sink value files among
    ``files`` show hold no record: from a sound file's last record to the start of the
    next file of its partition, when that file is among them and no file of any layout
    holds offsets in between. A damaged file (its records after the damage are lost)
    shows nothing."""
    starts: dict[int, set[int]] = {}
    ends: dict[int, set[int]] = {}  # the last offset of each sound file
    ranges: dict[int, list[tuple[int, int]]] = {}  # every file's, inclusive
    for registered in files:
        for stats in registered.partitions:
            ranges.setdefault(stats.partition, []).append((stats.min_offset, stats.max_offset))
        name = connect_name(registered.path)
        if name is None or name.stored is not None:
            continue
        starts.setdefault(name.partition, set()).add(name.start)
        if not registered.has_errors:
            for stats in registered.partitions:
                ends.setdefault(stats.partition, set()).add(stats.max_offset)
    gaps: dict[int, list[tuple[int, int]]] = {}
    for partition, lasts in sorted(ends.items()):
        for last in sorted(lasts):
            after = [start for start in starts.get(partition, ()) if start > last]
            low, high = last + 1, min(after, default=last + 1)
            crossed = any(a < high and b >= low for a, b in ranges.get(partition, ()))
            if high > low and not crossed:
                gaps.setdefault(partition, []).append((low, high))
    return gaps


class Registry:
    """The registry of one topic's dumps: ``files`` and ``retired`` Delta tables under ``root``.
    ``stores``: what its Kafka Connect sink writes beside each value file (a value file is
    read only once those files are registered too)."""

    def __init__(
        self, root: os.PathLike[str] | str, topic: str, stores: Collection[SinkStore] = ()
    ) -> None:
        self.topic = topic
        self.stores = tuple(SinkStore(kind) for kind in stores)
        self.files_path = storage_files.join(str(root), "files")
        self.retired_path = storage_files.join(str(root), "retired")

    def files(self, reaching: Mapping[int, int] | None = None) -> list[RegisteredFile]:
        """Registered files, oldest arrival first (then path), each exactly once.

        ``reaching`` (per partition an offset, 0 when absent): only what a run from there
        can need: the files with records (or positioned damaged lines) at or above it,
        retired ones too (a run that still needs one must fail loudly, not skip it), and
        the live files with errors (their rows may still be due). A service's registry
        gains a file a minute, so a run builds objects for those alone, and reads the
        folded rows (see ``fold_registry``) only when one of them reaches that far;
        without ``reaching``, every file."""
        tables = self._tables()
        if reaching is None:
            return tables.registered(tables.every_row(), self.stores)
        rows = tables.every_row() if tables.folded_reach(reaching) else tables.rows
        needed = pa.concat_arrays([
            pc.unique(pc.filter(rows["path"], _ahead(rows, reaching))),
            tables.live_with_errors,
        ])  # fmt: skip
        return tables.registered(rows.filter(pc.is_in(rows["path"], needed)), self.stores)

    def live_files(self) -> list[RegisteredFile]:
        """The registered files not retired (retire keeps them few)."""
        tables = self._tables()
        return tables.registered(tables.live_rows, self.stores)

    def unregistered(self, paths: Iterable[str]) -> list[str]:
        """Those of ``paths`` this registry does not hold (retired files count as held).

        Looks through the process's ``RegisteredPaths`` of the table, so a long-lived
        process (the sensor's code server, which asks every tick) reads only the row
        groups that can hold the asked paths, once, never the year of paths before."""
        known = _registered_paths(self.files_path)
        return known.missing(paths)

    def newest_ts(self) -> int | None:
        """The newest registered record's Kafka timestamp (None before any)."""
        tables = self._tables()
        tops = [pc.max(tables.rows["max_ts"]), pc.max(tables.folded_tops["max_ts"])]
        return max((t.as_py() for t in tops if t.is_valid), default=None)

    def _tables(self) -> _Tables:
        """The registry's tables, read again only when ``files`` or ``retired`` is another
        table or has a new version: a run asks the registry many times, from each of its
        steps. The process keeps the last read, and a look at each log's mark
        (``log_mark``: on an object store one listing from the known version, on local
        disk two lookups) finds whether it still holds, without opening either table."""
        with _READS_LOCK:
            cached = _READS.get(self.files_path)
        paths = (self.files_path, self.retired_path)
        known = (None, None) if cached is None else tuple(
            NO_TABLE if mark is None else mark for mark in cached.marks
        )
        marks = (log_mark(paths[0], known[0]), log_mark(paths[1], known[1]))
        if cached is None or cached.marks != marks:
            files, retired = (
                None if mark is None else existing_table(path, mark.version)
                for path, mark in zip(paths, marks, strict=True)
            )
            cached = _Tables.read(files, retired, marks)
            with _READS_LOCK:
                _READS[self.files_path] = cached
        return cached

    def register(
        self, spark: SparkSession, files: Iterable[DumpFile], arrival_ms: int
    ) -> list[RegisteredFile]:
        """Register the files not registered yet; returns the newly registered ones.

        Idempotent: a file already registered with the same size and mtime is skipped.
        A registered file that changed, or that lies under a folder now listed as a link
        leading out of the topic's folder (swapped in after registration: reads would
        follow it), raises ``DumpFileChanged``.
        """
        new = self.new_files(files)
        if not new:
            return []
        return self.record(new, scan_new_dumps(spark, [(self.topic, new)]), arrival_ms)

    def new_files(self, files: Iterable[DumpFile]) -> list[DumpFile]:
        """Those of ``files`` not registered yet (``DumpFileChanged`` for a registered
        one that changed: see ``register``)."""
        files = list(files)
        self._refuse_links_over_live_files(files)
        known = {f.path: f for f in self._named({str(d.path) for d in files})}
        new: list[DumpFile] = []
        for dump in files:
            seen = known.get(str(dump.path))
            if seen is None:
                new.append(dump)
            elif dump.problem is not None and not seen.unreadable:
                raise DumpFileChanged(
                    f"dump file {dump.path} became unreadable after registration "
                    f"({dump.problem}); dumps must be immutable: land new data as a new file"
                )
            elif dump.problem is None and (seen.size, seen.mtime_ms) != (
                dump.size, dump.mtime_ms
            ):
                was = f" (registered as unreadable: {seen.problem})" if seen.unreadable else ""
                raise DumpFileChanged(
                    f"dump file {dump.path} changed after registration{was} "
                    f"(size {seen.size} -> {dump.size}, mtime {seen.mtime_ms} -> {dump.mtime_ms});"
                    " dumps must be immutable: land new data as a new file"
                )
        return new

    def record(
        self, new: Sequence[DumpFile], scan: DumpScan, arrival_ms: int
    ) -> list[RegisteredFile]:
        """Register ``new`` (files ``new_files`` found new) with what ``scan`` found in
        them (a scan of them, maybe with other topics' files), stamped ``arrival_ms``, in
        one commit; returns them registered."""
        rows = _registration_rows(new, scan, arrival_ms)
        _append(self.files_path, rows, FILES_SCHEMA, "register", f"{len(new)} dump file(s)")
        return self._named({str(d.path) for d in new})

    def _refuse_links_over_live_files(self, files: Sequence[DumpFile]) -> None:
        """DumpFileChanged when a live registered file lies under a folder of ``files``
        listed as a link leading out of the topic's folder (``LEADS_OUT``)."""
        links = tuple(f"{d.path}/" for d in files if d.problem == LEADS_OUT)
        if not links:
            return
        under = [f.path for f in self.live_files() if f.path.startswith(links)]
        if under:
            raise DumpFileChanged(
                f"dump file(s) {', '.join(under)} now lie behind a link leading out of the "
                "topic's folder; dumps must be immutable: land new data as a new file"
            )

    def _named(self, paths: set[str]) -> list[RegisteredFile]:
        """The registered files among ``paths``."""
        tables = self._tables()
        asked = pa.array(sorted(paths), pa.string())
        found = pc.is_in(asked, tables.rows["path"])  # the rest may lie in folded files
        rows = tables.rows.filter(pc.is_in(tables.rows["path"], asked))
        folded = _rows_of(tables.folded_files, FILES_SCHEMA, pc.filter(asked, pc.invert(found)))
        return tables.registered(pa.concat_tables([rows, folded]), self.stores)

    def mark_retired(self, retired: Mapping[str, str | None], retired_ms: int) -> None:
        """Record that these files (path -> archive path, None when deleted) are retired."""
        if retired:
            rows = [
                {"path": path, "retired_ms": retired_ms, "archived_to": to}
                for path, to in sorted(retired.items())
            ]
            table = pa.Table.from_pylist(rows, RETIRED_SCHEMA)
            _append(self.retired_path, table, RETIRED_SCHEMA, "retire", f"{len(rows)} dump file(s)")

    def end_offsets(self) -> OffsetFrontier:
        """Per partition, the highest registered offset + 1 (retired files included)."""
        tables = self._tables()
        rows = pa.concat_tables([
            tables.rows.select(["partition", "max_offset"]),
            tables.folded_tops.select(["partition", "max_offset"]),
        ])  # fmt: skip
        rows = rows.filter(pc.is_valid(rows["partition"]))
        # In the calling thread: Arrow's thread pool, woken for a few rows, waits on a
        # run's busy cores (as a filter by expression would).
        tops = rows.group_by("partition", use_threads=False).aggregate([("max_offset", "max")])
        return OffsetFrontier({
            p: o + 1 for p, o in zip(tops["partition"].to_pylist(),
                                     tops["max_offset_max"].to_pylist(), strict=True)
        })  # fmt: skip


# Rows per row group of a registry's tables as maintenance lays them out: what one look
# at landed paths reads of them (their names sort together, the newest last).
PATH_ROW_GROUP = 8_192
# The batch folders of a registry table's *folded* files (see ``fold_registry``).
FOLDED_BATCH = "folded-"


def fold_registry(registry: Registry) -> bool:
    """Maintenance's compaction of a registry, which keeps what a run reads of it as small
    as on day one: the rows of retired files move into *folded* files (batch folders named
    ``FOLDED_BATCH``...), in both tables, and a run reads only the rest.

    ``files`` becomes one file of the live files' rows plus one folded file per Kafka
    partition (whose Delta statistics give that partition's highest offset and timestamp
    without reading it); ``retired`` becomes one file of the rows not folded plus one
    folded file. Each sorted by path in row groups of ``PATH_ROW_GROUP`` rows, the layout
    ``RegisteredPaths`` and a look at named paths read a row group of at a time.

    Invariant: a folded row of ``files`` belongs to a retired file. ``files`` is folded
    first, ``retired`` after, each in one commit attempted once: a crash or a conflicting
    registration or retire between leaves rows unfolded (read as before) for the next
    maintenance, never a live file folded. False when ``files`` was left as it was."""
    files = existing_table(registry.files_path)
    if files is None:
        return False
    retired = existing_table(registry.retired_path)
    gone = (RETIRED_SCHEMA.empty_table() if retired is None else retired.to_pyarrow_table())
    rows = files.to_pyarrow_table()
    is_gone = pc.is_in(rows["path"], gone["path"])
    folded = rows.filter(is_gone)
    parts = {uuid.uuid4().hex: rows.filter(pc.invert(is_gone)).sort_by("path")}
    for partition in pc.unique(folded["partition"]).to_pylist():
        same = (pc.is_null(folded["partition"]) if partition is None
                else pc.fill_null(pc.equal(folded["partition"], partition), False))  # fmt: skip
        parts[f"{FOLDED_BATCH}{uuid.uuid4().hex}"] = folded.filter(same).sort_by("path")
    detail = f"{folded.num_rows} row(s) of retired files folded, sorted by path"
    if not rewrite_table(files, registry.files_path, parts, PATH_ROW_GROUP, detail):
        return False
    if retired is not None:
        is_folded = pc.is_in(gone["path"], pc.unique(folded["path"]))
        parts = {
            uuid.uuid4().hex: gone.filter(pc.invert(is_folded)).sort_by("path"),
            f"{FOLDED_BATCH}{uuid.uuid4().hex}": gone.filter(is_folded).sort_by("path"),
        }
        detail = "rows of folded files folded, sorted by path"
        rewrite_table(retired, registry.retired_path, parts, PATH_ROW_GROUP, detail)
    return True


def _append(path: str, rows: pa.Table, schema: pa.Schema, operation: str, detail: str) -> None:
    """Append ``rows`` to one of a registry's tables, then merge its small files once they
    are enough (a registration a window would otherwise leave a file a window for every
    run to read until maintenance), in maintenance's layout: sorted by path in row groups
    of ``PATH_ROW_GROUP``; folded files stay as they are."""
    table = append_rows(path, rows, operation, detail)
    unfolded = [f for f in delta_io.live_files(table) if not _is_folded(f.path)]
    chosen = delta_io.files_to_merge(unfolded)
    if chosen:
        merge_files(
            table, path, chosen, schema, uuid.uuid4().hex,
            sort_by="path", row_group_rows=PATH_ROW_GROUP,
        )  # fmt: skip


def _is_folded(data_file: str) -> bool:
    """Whether a data file of a registry table (its path, absolute or relative to the
    table) is a folded one: it lies in a ``FOLDED_BATCH`` batch folder."""
    return posixpath.basename(posixpath.dirname(data_file)).startswith(FOLDED_BATCH)


class RegisteredPaths:
    """Which paths a registry's ``files`` table holds, answered without reading a year of
    paths: a look reads, of the table's data files, only the row groups whose path range
    (from the Parquet footer) can hold an asked path, and keeps what it read.

    Maintenance rewrites the table sorted by path in row groups of ``PATH_ROW_GROUP``
    rows (``fold_registry``), so the landed paths a tick asks about (the newest) fall in
    at most a row group or two of it, whatever its age; each registration since adds one
    small file. Invariant: every footer and row group kept belongs to a data file of the
    table at the version looked at, and a row group's kept paths are exactly its paths;
    a table created anew (another id) is looked at anew."""

    def __init__(self, files_path: str) -> None:
        self._files_path = files_path
        self._mark: LogMark | None = None  # where the table's log stood at the last look
        self._table_id: str | None = None  # the table looked at last
        self._files: dict[str, _PathRanges] = {}  # data file -> its row groups
        # The last question and its answer (the asked paths held), while the mark holds:
        # a sensor asks about the same landed paths tick after tick.
        self._answered: tuple[list[str], set[str]] | None = None
        self._lock = threading.Lock()  # sensors of one code server may tick at once

    def missing(self, paths: Iterable[str]) -> list[str]:
        """Those of ``paths`` the table does not hold now, in their order."""
        paths = list(paths)
        asked = sorted(set(paths))
        with self._lock:
            self._look()
            if self._answered is None or self._answered[0] != asked:
                held: set[str] = set()
                for ranges in self._files.values():
                    held.update(ranges.among(asked))
                self._answered = (asked, held)
            held = self._answered[1]
        return [path for path in paths if path not in held]

    @property
    def rows_read(self) -> int:
        """How many rows of the table the looks so far have read (what they cost)."""
        return sum(ranges.rows_read for ranges in self._files.values())

    def _look(self) -> None:
        """Bring the kept data files to the table's latest version: opened only when its
        log moved since the last look (``log_mark``)."""
        mark = log_mark(self._files_path, self._mark)
        if mark is not None and mark == self._mark:
            return
        self._answered = None
        table = None if mark is None else existing_table(self._files_path, mark.version)
        if table is None:
            self._mark, self._table_id, self._files = None, None, {}
            return
        table_id = str(table.metadata().id)  # a UUID; the stub says int
        if table_id != self._table_id:
            self._files = {}  # a new table under the same path
        fragments = {f.path: f for f in table.to_pyarrow_dataset().get_fragments()}
        self._files = {
            name: self._files.get(name) or _PathRanges(fragment)
            for name, fragment in fragments.items()
        }
        self._mark, self._table_id = mark, table_id


class _PathRanges:
    """One data file of a registry: its row groups' path ranges, read from its footer on
    first use, and the paths of the row groups read so far."""

    def __init__(self, fragment: pa.dataset.ParquetFileFragment) -> None:
        self._fragment = fragment
        self._ranges: list[tuple[str | None, str | None]] | None = None
        self._read: dict[int, frozenset[str]] = {}
        self.rows_read = 0

    def among(self, asked: Sequence[str]) -> set[str]:
        """Those of ``asked`` (sorted) this file holds."""
        found: set[str] = set()
        for group, (low, high) in enumerate(self._path_ranges()):
            first = 0 if low is None else bisect.bisect_left(asked, low)
            if first == len(asked) or (high is not None and asked[first] > high):
                continue  # no asked path in this row group's range
            if group not in self._read:
                rows = self._fragment.subset(row_group_ids=[group]).to_table(columns=["path"])
                self._read[group] = frozenset(rows["path"].to_pylist())
                self.rows_read += rows.num_rows
            found.update(self._read[group].intersection(asked))
        return found

    def _path_ranges(self) -> list[tuple[str | None, str | None]]:
        """Per row group, its smallest and greatest path (None where the footer has no
        statistics: that row group is read whenever asked)."""
        if self._ranges is None:
            meta = self._fragment.metadata
            column = meta.schema.names.index("path")  # a flat schema: leaf = column
            self._ranges = []
            for group in range(meta.num_row_groups):
                stats = meta.row_group(group).column(column).statistics
                known = stats is not None and stats.has_min_max
                self._ranges.append((stats.min, stats.max) if known else (None, None))
        return self._ranges


_REGISTERED_PATHS: dict[str, RegisteredPaths] = {}
_REGISTERED_PATHS_LOCK = threading.Lock()


def _registered_paths(files_path: str) -> RegisteredPaths:
    """The process's one ``RegisteredPaths`` of the table at ``files_path``."""
    with _REGISTERED_PATHS_LOCK:
        return _REGISTERED_PATHS.setdefault(files_path, RegisteredPaths(files_path))


# The last read of each registry in this process, by its files table's location.
_READS: dict[str, _Tables] = {}
_READS_LOCK = threading.Lock()


def _parts(table: DeltaTable | None, schema: pa.Schema) -> tuple[pa.Table, pa.dataset.Dataset]:
    """A registry table's rows outside its folded files (read now, with ``schema``'s
    columns), and its folded files (a dataset, read only when asked)."""
    if table is None:
        return schema.empty_table(), pa.dataset.dataset(schema.empty_table())
    dataset = table.to_pyarrow_dataset()
    fragments = list(dataset.get_fragments())
    kept = [f for f in fragments if not _is_folded(f.path)]
    folded = [f for f in fragments if _is_folded(f.path)]
    rows = _of(dataset, kept).to_table()
    return delta_io.conformed(rows, schema), _of(dataset, folded)


def _of(dataset: pa.dataset.FileSystemDataset, fragments: list) -> pa.dataset.Dataset:
    """The dataset of ``fragments`` alone, pruned by their Parquet footers only: the
    guarantees delta-rs derives from the Delta statistics would drop every row for a filter
    on ``path`` (the statistics reclock writes name integer columns alone)."""
    plain = [dataset.format.make_fragment(f.path, dataset.filesystem) for f in fragments]
    return pa.dataset.FileSystemDataset(plain, dataset.schema, dataset.format, dataset.filesystem)


_TOPS_SCHEMA = pa.schema(
    [("partition", pa.int32()), ("max_offset", pa.int64()), ("max_ts", pa.int64())]
)


def _folded_tops(table: DeltaTable | None) -> pa.Table:
    """Per Kafka partition, the highest offset and timestamp of ``files``' folded rows,
    from the Delta statistics of its folded files (one partition each; a statistic no
    file has reads as null)."""
    if table is None:
        return _TOPS_SCHEMA.empty_table()
    actions = pa.table(table.get_add_actions(flatten=True))
    folded = actions.filter(
        pa.array([_is_folded(p) for p in actions["path"].to_pylist()], pa.bool_())
    )
    stats = {"partition": "min.partition", "max_offset": "max.max_offset", "max_ts": "max.max_ts"}
    return pa.table({
        name: folded[stat] if stat in folded.column_names else pa.nulls(folded.num_rows)
        for name, stat in stats.items()
    }).cast(_TOPS_SCHEMA)  # fmt: skip


def _ahead(rows: pa.Table, reaching: Mapping[int, int]) -> pa.Array:
    """Which (file, partition) rows hold records at or above ``reaching``."""
    partitions = pa.array(list(reaching), pa.int32())
    lows = pa.array(list(reaching.values()), pa.int64())
    low = pc.fill_null(pc.take(lows, pc.index_in(rows["partition"], partitions)), 0)
    return pc.fill_null(pc.greater_equal(rows["max_offset"], low), False)


@dataclass(frozen=True)
class _Tables:
    """One read of a registry at ``marks`` (files, retired), as Arrow: the (file,
    partition) rows outside folded files, those of live files, the paths of live files
    with errors, the ``retired`` rows outside folded files (path, archived_to), per Kafka
    partition the tops of the folded rows, and the folded files themselves (read only when
    asked). What it reads stays as small as on day one once maintenance folds the
    registry, and a run or ``inspect`` turns into Python objects only the rows it asks for."""

    marks: tuple[LogMark | None, LogMark | None]
    rows: pa.Table
    live_rows: pa.Table
    live_with_errors: pa.Array
    retired: pa.Table
    folded_tops: pa.Table
    folded_files: pa.dataset.Dataset
    folded_retired: pa.dataset.Dataset
    stored: Mapping[str, Stored]  # by stem: the key and header files registered

    @classmethod
    def read(
        cls,
        files: DeltaTable | None,
        retired: DeltaTable | None,
        marks: tuple[LogMark | None, LogMark | None],
    ) -> _Tables:
        """Read both tables (loaded at their ``marks``) but their folded files."""
        rows, folded_files = _parts(files, FILES_SCHEMA)
        gone, folded_retired = _parts(retired, RETIRED_SCHEMA)
        # A filter, not Arrow's anti join: the join's engine took 50 ms a call in a run's
        # process (200 registries read at a run's start: 10 s), the filter well under 1 ms.
        live = rows.filter(pc.invert(pc.is_in(rows["path"], gone["path"])))
        with_records = pc.filter(live["path"], pc.fill_null(pc.greater(live["records"], 0), False))
        bad_lines = pc.fill_null(pc.greater(live["bad_lines"], 0), False)
        # A key or header file has no record of its own, and no error either.
        is_stored = pc.match_substring_regex(live["path"], STORED_FILE)
        errors = pc.and_(
            pc.or_(
                pc.or_(pc.is_valid(live["problem"]), bad_lines),
                pc.invert(pc.is_in(live["path"], with_records)),
            ),
            pc.invert(is_stored),
        )
        with_errors = pc.unique(pc.filter(live["path"], errors))
        stored: dict[str, dict[SinkStore, str]] = {}
        for path in pc.unique(pc.filter(rows["path"], pc.match_substring_regex(
            rows["path"], STORED_FILE
        ))).to_pylist():
            kind, paired = stored_kind(path), stem(path)
            assert kind is not None and paired is not None
            stored.setdefault(paired, {})[kind] = path
        return cls(
            marks, rows, live, with_errors, gone.select(["path", "archived_to"]),
            _folded_tops(files), folded_files, folded_retired, stored,
        )  # fmt: skip

    def folded_reach(self, reaching: Mapping[int, int]) -> bool:
        """Whether some folded row has records at or above ``reaching``."""
        return bool(pc.any(_ahead(self.folded_tops, reaching)).as_py())

    def every_row(self) -> pa.Table:
        """Every (file, partition) row, folded ones too."""
        return pa.concat_tables([self.rows, _rows_of(self.folded_files, FILES_SCHEMA)])

    def registered(self, rows: pa.Table, stores: Sequence[SinkStore]) -> list[RegisteredFile]:
        """``RegisteredFile``s of ``rows``, with where each retired one is archived (only
        folded files' archive paths lie in folded files), and for a sink value file the
        key and header files registered beside it (waiting for those of ``stores`` not
        registered yet)."""
        paths = pc.unique(rows["path"])
        kept = self.retired.filter(pc.is_in(self.retired["path"], paths))
        folded_paths = pc.filter(paths, pc.invert(pc.is_in(paths, self.rows["path"])))
        folded = _rows_of(self.folded_retired, RETIRED_SCHEMA, folded_paths)
        registered = _registered(rows, pa.concat_tables([kept, folded.select(kept.column_names)]))
        return [self._paired(f, stores) for f in registered]

    def _paired(self, registered: RegisteredFile, stores: Sequence[SinkStore]) -> RegisteredFile:
        """``registered`` with its stored files, when it is a sink value file."""
        name = connect_name(registered.path)
        if name is None or name.stored is not None:
            return registered
        stored = self.stored.get(stem(registered.path) or "", {})
        return dataclasses.replace(
            registered,
            stored_files=tuple(sorted(stored.items())),
            waiting_for=tuple(kind for kind in stores if kind not in stored),
        )


def _rows_of(
    dataset: pa.dataset.Dataset, schema: pa.Schema, paths: pa.Array | None = None
) -> pa.Table:
    """``dataset``'s rows with ``schema``'s columns; of ``paths`` only, when given: of a
    table sorted by path, only the row groups whose path range holds one are read, and
    none when none is asked."""
    if paths is None:
        return delta_io.conformed(dataset.to_table(), schema)
    if len(paths) == 0:
        return schema.empty_table()
    low, high = pc.min_max(paths).values()
    path = pc.field("path")
    where = (path >= low.as_py()) & (path <= high.as_py()) & path.isin(paths)
    return delta_io.conformed(dataset.to_table(filter=where), schema)


def _registered(rows: pa.Table, retired: pa.Table) -> list[RegisteredFile]:
    """``RegisteredFile``s of ``rows`` (one row per file and partition), each file once,
    with the arrival it was first registered at; oldest arrival first, then path;
    ``retired``: the (path, archived_to) rows of those of them retired."""
    archived = dict(zip(retired["path"].to_pylist(), retired["archived_to"].to_pylist(),
                        strict=True))  # fmt: skip
    rows_list = rows.to_pylist()
    first: dict[str, dict] = {}
    for row in sorted(rows_list, key=lambda r: (r["arrival_ms"], r["path"])):
        first.setdefault(row["path"], row)
    partitions: dict[str, dict[int, PartitionStats]] = {path: {} for path in first}
    for row in rows_list:
        chosen = first[row["path"]]
        if row["partition"] is not None and row["arrival_ms"] == chosen["arrival_ms"]:
            partitions[row["path"]][row["partition"]] = PartitionStats(
                row["partition"], row["min_offset"], row["max_offset"],
                row["min_ts"], row["max_ts"], row["records"],
                row["damaged_lines"] or 0,
            )
    return [
        RegisteredFile(
            path=path,
            size=row["size"],
            mtime_ms=row["mtime_ms"],
            arrival_ms=row["arrival_ms"],
            partitions=tuple(sorted(partitions[path].values(), key=lambda s: s.partition)),
            archived_to=archived.get(path),
            retired=path in archived,
            problem=row["problem"],
            bad_lines=row["bad_lines"] or 0,
        )
        for path, row in first.items()
    ]


def scan_new_dumps(
    spark: SparkSession, new: Iterable[tuple[str, Sequence[DumpFile]]]
) -> DumpScan:
    """One scan of the new dumps of any number of topics (``new``: topic and its dumps):
    what each registry's ``record`` registers them with. Files with a problem found while
    listing, and a sink's key and header files, are not read."""
    topics = {
        str(dump.path): topic
        for topic, dumps in new
        for dump in dumps
        if dump.problem is None and stored_kind(dump.path) is None
    }
    return scan_dump_files(spark, list(topics), topic=topics)


def _registration_rows(new: Sequence[DumpFile], scan: DumpScan, arrival_ms: int) -> pa.Table:
    """One row per (file, partition) from the scan, plus one partition-less row per file
    whose scan found no valid record, so that such files are registered too; each row
    carries the file's problem (unreadable path, damaged gzip stream) and bad lines."""
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
