"""What every role of a shard handle shares: the table, its frontiers, its live files.

Invariant: a handle's frontiers, version and files all come from the one log version it
last loaded, so what it reads is consistent; ``refresh`` moves it to the newest version.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Self

from deltalake import DeltaTable
from deltalake.transaction import AddAction, RemoveAction, Transaction
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from cdc_core.frontier import TimeFrontier
from cdc_core.shard import delta_io
from cdc_core.shard.delta_io import DataFile
from cdc_core.shard.log import (
    SINCE,
    UPPER,
    KeptByMark,
    TableDescription,
    commit_once,
    frontier_at,
    frontier_transactions,
    location_failure,
    open_or_create,
    read_frontier,
    read_to_newest,
)
from cdc_core.storage import files
from cdc_core.updates import DIFF, TIME

# Progress statements live in the commit history, so the log must never expire.
TABLE_CONFIGURATION = {"delta.enableExpiredLogCleanup": "false"}


class ShardUsageError(ValueError):
    """A caller bug: reading before since / at or after upper, appending below upper, ..."""


class ShardHandle:
    """Handle on one shard; cheap to create, re-reads the Delta log on ``refresh``."""

    def __init__(
        self, spark: SparkSession, path: str, data_schema: StructType, table: DeltaTable
    ) -> None:
        self.path = path
        self.data_schema = data_schema
        self._spark = spark
        self._schema = delta_io.shard_schema(data_schema)
        self._table = table
        self.writer: str | None = None  # a registered writer's id names its staging
        # The upper whose commit releases the registered writer with it (``writing``).
        self.releases_at: TimeFrontier | None = None
        self._files: tuple[int, tuple[DataFile, ...]] | None = None  # by loaded version
        self._load_state()

    @classmethod
    def open(
        cls,
        spark: SparkSession,
        path: str,
        data_schema: StructType,
        described: TableDescription | None = None,
    ) -> Self:
        """Open the shard at ``path``, creating it (upper = since = [0], ``described``) if
        missing. ``data_schema`` excludes ``time``/``diff``; a mismatch with an existing
        table raises ShardUsageError naming the differing columns."""
        reserved = sorted({TIME, DIFF} & set(data_schema.names))
        if reserved:
            raise ShardUsageError(f"data columns may not be named {reserved}: the shard adds them")
        location = files.normalize(path)
        expected = delta_io.delta_schema(data_schema)
        minimum = TimeFrontier.minimum()
        table = open_or_create(
            location,
            expected,
            detail="upper = since = 0",
            configuration=TABLE_CONFIGURATION,
            described=described,
            app_transactions=[
                *frontier_transactions(UPPER, minimum),
                *frontier_transactions(SINCE, minimum),
            ],
        )
        # By name: columns a schema evolution added come after ``time`` and ``diff``.
        problems = delta_io.schema_differences(expected, table.schema(), ordered=False)
        if problems:
            raise ShardUsageError(f"shard {location} has another schema: {'; '.join(problems)}")
        return cls(spark, location, data_schema, table)

    @property
    def spark(self) -> SparkSession:
        """The session the shard's data is read and written with."""
        return self._spark

    @property
    def upper(self) -> TimeFrontier:
        """Every time not beyond it is complete: the shard holds all its updates."""
        return self._upper

    @property
    def since(self) -> TimeFrontier:
        """Snapshots at times beyond it are exact; older history may be compacted."""
        return self._since

    @property
    def delta_table(self) -> DeltaTable:
        """The Delta table object the handle loaded its state from. Whoever moves it on
        (a lease commit through it) must ``refresh`` the handle after."""
        return self._table

    @property
    def version(self) -> int:
        """The Delta log version this handle last loaded."""
        return self._version

    def refresh(self) -> Self:
        """Re-read the Delta log (another process may have committed)."""
        with location_failure(f"reading the log of {self.path}"):
            self._reload()
        return self

    def _commit(
        self,
        actions: Sequence[AddAction | RemoveAction],
        frontiers: Sequence[Transaction],
        metadata: dict[str, Any],
        still_valid: Callable[[], bool],
        also: Callable[[], tuple[dict[str, Any], list[Transaction]]] | None = None,
    ) -> bool:
        """Commit at the version this handle read (``log.commit_once``); after a conflict
        the commit is retried iff ``still_valid()`` holds on the new state, else False.
        ``also`` gives what each attempt carries besides, decided at the version it
        commits from: commit info entries and app transactions."""
        while True:
            extra, transactions = also() if also is not None else ({}, [])
            carried = [*frontiers, *transactions]
            try:
                committed = commit_once(
                    self._table, self.path, actions, carried, {**metadata, **extra}
                )
            finally:
                self._load_state()  # the table moved with the log: keep the frontiers in step
            if committed:
                return True
            if not still_valid():
                return False

    def _load_state(self) -> None:
        delta_io.check_table_features(self._table, self.path)
        self._version = self._table.version()
        self._upper = read_frontier(self._table, UPPER)
        self._since = read_frontier(self._table, SINCE)

    def _reload(self) -> None:
        read_to_newest(self._table, self.path)
        if self._table.version() != self._version:  # a version never changes once written
            self._load_state()

    def live_files(self) -> list[DataFile]:
        """The data files of the version this handle last loaded. A version's files never
        change, so they are built once per version (a run asks at each step), and each
        caller gets its own list."""
        kept = self._files
        if kept is None or kept[0] != self._version:
            with location_failure(f"listing the files of {self.path}"):
                kept = self._files = (self._version, tuple(delta_io.live_files(self._table)))
        return list(kept[1])

    def _files_holding(self, low: int | None, high: int | None) -> list[DataFile]:
        """The files whose ``time`` statistics may hold times in [low, high]."""
        return [f for f in self.live_files() if f.may_hold_times(low, high)]

    def _read(self, low: int | None, high: int | None) -> DataFrame:
        """The rows of the files that may hold times in [low, high], read by Spark."""
        files = self._files_holding(low, high)
        with location_failure(f"reading {self.path}"):
            return delta_io.read_files(self._spark, self.path, files, self._schema)


def stored_upper(path: str) -> TimeFrontier:
    """The upper committed at ``path``, read from its Delta log alone: no Spark, nothing
    created (a sensor's look must change nothing). ``[0]`` where no shard exists yet.

    The process keeps each upper it read with the log's mark (``KeptByMark``), and reads
    the newest commit again only once the mark moved: a sensor asking for every source's
    outputs each tick looks at each log, and reads only those committed to since its
    last tick."""
    upper = _STORED_UPPERS.get(path)
    return TimeFrontier.at(0) if upper is None else upper


_STORED_UPPERS: KeptByMark[TimeFrontier] = KeptByMark(
    lambda path, mark: frontier_at(path, mark.version, UPPER)
)
