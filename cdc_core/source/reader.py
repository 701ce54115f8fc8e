"""The read handle of a source: its tables as they stand, opened without writing anything.

``reclock inspect``, ``reclock snapshot`` and the status a run reports read a source
through a ``SourceReader``. Opened on its own (``SourceReader.open``) it creates, evolves
and commits nothing, so it works on a lake it may not write (read-only credentials, a
read-only mount): a table no run has created yet reads as empty (``AbsentShard``), a
config's columns not added yet are ignored, and a transaction group that never bound has
nothing pending. A run's ``SourcePipeline`` (the write handle) hands out a reader over the
shards it holds open, so its report reads what it wrote.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from cdc_core.config import Config, SourceConfig
from cdc_core.envelopes import DEDUP_STATE
from cdc_core.frontier import OffsetFrontier, TimeFrontier, iso
from cdc_core.ingest import Registry
from cdc_core.phases import phase
from cdc_core.reclock.transactions import PendingTransactions, TransactionGroupBinder
from cdc_core.schemas import ERROR, REMAP, history_schema
from cdc_core.shard import ShardUsageError
from cdc_core.shard.delta_io import live_files
from cdc_core.shard.log import table_to_read
from cdc_core.shard.read import ShardReader
from cdc_core.source.layout import output_tables, shard_tables, source_registry, transaction_binder
from cdc_core.source.planning import is_small_step, rows_to_read
from cdc_core.source.resumption import SourceInspection, UpstreamCommit, inspect_source
from cdc_core.source.state import current_rows
from cdc_core.source.swap import check_not_mid_swap
from cdc_core.spark import planned_as, planned_for_input
from cdc_core.storage import Location, LocationLike, located


@dataclass(frozen=True)
class TableStatus:
    """One table of a source, as ``reclock inspect`` shows it (version -1: not created)."""

    path: str
    schema: StructType
    version: int
    rows: int
    upper: int | None
    since: int | None


@dataclass(frozen=True)
class SourceStatus:
    """Per source: every table's frontiers and size, remap frontier and lag."""

    source: str
    window_ms: int
    start_ms: int
    tables: dict[str, TableStatus]
    inspection: SourceInspection
    current_errors: int
    # For a member of a transaction group: what its last bound window holds back.
    pending: PendingTransactions | None = None
    frontier: OffsetFrontier = field(init=False)
    lag: dict[int, int] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "frontier", self.inspection.frontier)
        object.__setattr__(self, "lag", self.inspection.lag)

    @property
    def upper(self) -> TimeFrontier:
        """Where the source's outputs stand (the resumption timestamp)."""
        return self.inspection.resumption.timestamp

    @property
    def windows_done(self) -> int:
        """How many configured windows the outputs hold."""
        upper = self.upper.time
        if upper is None or upper <= self.start_ms:
            return 0
        return (upper - 1 - self.start_ms) // self.window_ms

    def summary(self) -> dict[str, int | str]:
        """What a run's summary line shows of the source: windows done, the outputs'
        upper, the rows of ``state`` and the current errors."""
        return {
            "windows": self.windows_done,
            "upper": self.upper.iso(),
            "state rows": self.tables["state"].rows,
            "current errors": self.current_errors,
        }

    def describe(self) -> str:
        """What ``reclock inspect`` prints: frontiers, lag, and each table's version and rows."""
        lines = [self.inspection.describe(), "  tables:"]
        for name, table in self.tables.items():
            lines.append(
                f"    {name:<10} version {table.version:>4}  rows {table.rows:>9}  "
                f"upper {_iso_or_none(table.upper)}  since {_iso_or_none(table.since)}"
            )
        lines.append(f"  current errors: {self.current_errors}")
        if self.pending is not None:
            lines.append(f"  transactions: {self.pending.describe()}")
        return "\n".join(lines)


class SourceReader:
    """A source's shards, registry and upstream record, read and never written."""

    def __init__(
        self,
        spark: SparkSession,
        config: Config,
        source: SourceConfig,
        root: Location,
        shards: Mapping[str, ShardReader],
        group: TransactionGroupBinder | None,
    ) -> None:
        """A reader over ``shards`` already open (a run's write handle hands out its own);
        ``open`` opens them on its own, to read."""
        self.spark = spark
        self.config = config
        self.source = source
        self.root = root
        self.shards = dict(shards)
        self.registry: Registry = source_registry(root.parent, source)
        self.upstream = UpstreamCommit(root / "upstream")
        self.group = group

    @classmethod
    def open(
        cls, spark: SparkSession, config: Config, source: SourceConfig, lake: LocationLike
    ) -> SourceReader:
        """The source's tables in ``lake`` opened to read: nothing created or changed.

        A source whose rebuild was cut short is refused (``RebuildUnfinished``): its folder
        may be missing or half moved, so reading it would show empty or mixed tables."""
        check_not_mid_swap(lake, source.name)
        root = located(lake) / source.name
        expected = {"remap": REMAP, "reclocked": source.reclocked_schema,
                    "changes": source.output_schema, "errors": ERROR, "dedup": DEDUP_STATE}
        shards = {
            name: ShardReader.open_to_read(spark, str(root / name), expected[name])
            for name in shard_tables(source)
        }  # fmt: skip
        group = transaction_binder(spark, config, lake, source.name, to_read=True)
        return cls(spark, config, source, root, shards, group)

    @property
    def outputs(self) -> list[ShardReader]:
        """The shards written from reclocked data (remap excluded), in commit order."""
        return [self.shards[name] for name in output_tables(self.source)]

    @property
    def remap(self) -> ShardReader:
        """The source's bindings."""
        return self.shards["remap"]

    @property
    def reclocked(self) -> ShardReader:
        """The source's records at their binding times."""
        return self.shards["reclocked"]

    @property
    def changes(self) -> ShardReader:
        """The envelope's output: the source's changes."""
        return self.shards["changes"]

    @property
    def errors(self) -> ShardReader:
        """The source's error rows."""
        return self.shards["errors"]

    def outputs_upper(self) -> TimeFrontier:
        """Where all outputs stand: the meet of their uppers ([0] before the first window)."""
        meet = TimeFrontier.empty()
        for shard in self.outputs:
            meet = meet.meet(shard.refresh().upper)
        return meet

    def planned_by_tables(
        self, *tables: str, after: Mapping[str, int] | None = None
    ) -> AbstractContextManager[bool]:
        """Plan the block's queries as a small run's are when the source's ``tables`` (a
        shard's name, or a published table's: ``state``, ``history``) hold few rows
        (``planning.rows_to_read``; of a shard named in ``after``, only those after its
        time): a step after the run (publishing, the checks, the export) reads no more."""
        small = is_small_step(self.rows_to_read(*tables, after=after))
        return planned_as(self.spark, small, self.config.spark.conf)

    def rows_to_read(self, *tables: str, after: Mapping[str, int] | None = None) -> int:
        """The rows a step reads from the source's ``tables`` (``planning.rows_to_read``),
        from their logs alone: what plans a step over many sources' tables together."""
        read = {name: self.shards.get(name) or self.root / name for name in tables}
        return rows_to_read(read, after or {})

    @property
    def group_name(self) -> str | None:
        """The name of the source's transaction group (None when it belongs to none)."""
        group = self.config.transaction_group(self.source.name)
        return None if group is None else group.name

    def inspect(self) -> SourceInspection:
        """Frontiers and lag of the source, from the logs and the registry."""
        return inspect_source(
            self.source, self.source.name, self.shards["remap"], self.outputs, self.registry,
            self.upstream, group=self.group_name,
        )  # fmt: skip

    def snapshot_at(self, as_of: int) -> DataFrame:
        """The source's rows as they stood at IntoTime ``as_of`` (the ``state`` a run
        would have published then): exact for ``since <= as_of < upper`` of ``changes``."""
        changes = self.shards["changes"].refresh()
        since, upper = changes.since, changes.upper
        if not since.less_equal(as_of) or upper.less_equal(as_of):
            readable = "nothing yet" if since == upper else (
                f"from {iso(since.time or 0)} (since) up to, not including, "
                f"{'the end' if upper.time is None else iso(upper.time)} (upper)"
            )
            raise ShardUsageError(
                f"{self.source.name} has no exact snapshot at {iso(as_of)}: readable {readable}"
            )
        return current_rows(changes.snapshot(as_of), changes.data_schema)

    def pending_transactions(self, ends: list[int]) -> dict[int, PendingTransactions]:
        """Per window end the group has bound, the transactions of the source's group its
        binding holds back (nothing for a source in no group, or a group not bound yet)."""
        if self.group is None:
            return {}
        group = self.group
        stored = [f.size for f in group.registry.live_files()]
        stored += [f.size for shard in (group.bindings, group.admitted) for f in shard.live_files()]
        planned = planned_for_input(self.spark, sum(stored), self.config.spark.conf)
        with phase(self.source.name, "pending transactions") as figures, planned:
            pending = group.pending(ends)
            figures["pending"] = {end: p.count for end, p in pending.items()}
        return pending

    def status(self, *, transactions: bool = False) -> SourceStatus:
        """The inspection plus every table's version, rows and schema; ``transactions``:
        also what a transaction group member's last window holds back (Spark jobs over the
        transaction topic, so only on request)."""
        inspection = self.inspect()
        output = self.source.output_schema
        tables = {
            "remap": _table_status(self.shards["remap"]),
            "reclocked": _table_status(self.shards["reclocked"]),
            "changes": _table_status(self.shards["changes"]),
            "state": _plain_table_status(self.root / "state", output),
            "errors": _table_status(self.shards["errors"]),
        }
        if self.source.history:
            tables["history"] = _plain_table_status(self.root / "history", history_schema(output))
        errors = self.shards["errors"]
        upper = errors.upper.time
        current_errors = errors.size(upper - 1) if upper else 0
        held = inspection.resumption.timestamp.time
        pending = (
            self.pending_transactions([held - 1]).get(held - 1)
            if transactions and held is not None and held > 0 else None
        )
        return SourceStatus(
            self.source.name,
            self.config.window_ms,
            self.config.start_ms,
            tables,
            inspection,
            current_errors,
            pending,
        )


def _iso_or_none(time: int | None) -> str:
    return "-" if time is None else iso(time)


def _table_status(shard: ShardReader) -> TableStatus:
    shard.refresh()
    files = shard.live_files()
    return TableStatus(
        path=shard.path,
        schema=shard.data_schema,
        version=shard.version,
        rows=sum(f.num_records for f in files),
        upper=shard.upper.time,
        since=shard.since.time,
    )


def _plain_table_status(place: Location, schema: StructType) -> TableStatus:
    path = str(place)
    table = table_to_read(path)
    if table is None:
        return TableStatus(path, schema, -1, 0, None, None)
    files = live_files(table)
    return TableStatus(
        path, schema, table.version(), sum(f.num_records for f in files), None, None
    )
