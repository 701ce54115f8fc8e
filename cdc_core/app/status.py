"""What a deployment holds, read without writing: status and inspect, snapshots, readers.

Every answer comes through a source's read handle (``SourceReader.open``) or from the
Delta logs alone, so none of these creates, evolves or commits a table: they run on a
lake this process may only read.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from pyspark.sql import DataFrame

from cdc_core.app.session import config_spark
from cdc_core.config import Config, SourceConfig
from cdc_core.frontier import OffsetFrontier
from cdc_core.ingest import Registry
from cdc_core.shard.leases import READER, Hold, LeaseBook, LeaseUsageError, holds_under
from cdc_core.source import SourceReader, SourceStatus
from cdc_core.source.layout import tables_of
from cdc_core.source.registration import catalog_tables
from cdc_core.storage import LocationLike, files, located
from cdc_core.vocabulary import CatalogKind


def statuses(
    config: Config, only: Collection[str] | None = None, *, transactions: bool = False
) -> list[SourceStatus]:
    """Every source's status (or those named in ``only``; none asked opens no session);
    ``transactions``: with what each transaction group member's last window holds back."""
    sources = [s for s in config.sources if only is None or s.name in only]
    if not sources:
        return []
    spark = config_spark(config)
    return [
        SourceReader.open(spark, config, source, config.lake).status(transactions=transactions)
        for source in sources
    ]


def snapshot(config: Config, source: str, as_of: int) -> DataFrame:
    """Source ``source``'s rows at IntoTime ``as_of``, lazy on the executors."""
    spark = config_spark(config)
    return SourceReader.open(spark, config, config.source(source), config.lake).snapshot_at(as_of)


def reader_holds(config: Config, only: str | None) -> dict[str, list[Hold]]:
    """Per source (or the one named ``only``), every registered reader and writer of its
    shards, read from the logs alone."""
    return {
        source.name: holds_under(str(located(config.lake) / source.name))
        for source in config.sources
        if only in (None, source.name)
    }


def live_readers(lake: LocationLike, source: SourceConfig) -> list[Hold]:
    """The live reader registrations (writers left out) on the shards of ``source`` in
    ``lake``, read from the logs alone."""
    root = located(lake) / source.name
    return [h for h in holds_under(str(root)) if h.live and h.registration.kind == READER]


def lease_book(config: Config, source: str, table: str) -> LeaseBook:
    """The reader registrations of one shard of ``source``; LeaseUsageError when the
    source has no such table yet."""
    path = located(config.lake) / config.source(source).name / table
    if not files.is_folder(str(path / "_delta_log")):
        raise LeaseUsageError(f"{source} has no {table} table yet ({path})")
    return LeaseBook(str(path))


@dataclass(frozen=True)
class SourceTable:
    """A table users query, as a front end shows it: its name, what it holds, the table its
    rows come from (None: the dumps), its URI, and its name in the config's catalog
    (``database.table``; None for a table no catalog registers)."""

    name: str
    description: str
    upstream: str | None
    uri: str
    catalog_name: str | None


def source_tables(config: Config, source: SourceConfig) -> list[SourceTable]:
    """Every table of ``source`` users query, in commit order (``history`` last, when it
    keeps one), from the config alone: nothing is read."""
    catalogued = catalog_tables(source) if config.catalog.kind is not CatalogKind.NONE else ()
    found = []
    for kind in (kind for kind in tables_of(source) if kind.published):
        catalogue = kind.name in catalogued
        name = config.catalog.table_name(source.name, kind.name) if catalogue else None
        found.append(SourceTable(
            kind.name, kind.description, kind.upstream,
            (located(config.lake) / source.name / kind.name).uri,
            f"{config.catalog.database}.{name}" if name else None,
        ))  # fmt: skip
    return found


@dataclass(frozen=True)
class Backlog:
    """What the landing zone has registered: the end offset per Kafka partition and the
    newest record's Kafka timestamp; a window's lag is measured against it."""

    ends: OffsetFrontier
    newest_ms: int | None

    @classmethod
    def of(cls, registry: Registry) -> Backlog:
        """Registered end offsets and newest Kafka timestamp, read from the registry alone."""
        return cls(registry.end_offsets(), registry.newest_ts())

    def offsets_behind(self, frontier: OffsetFrontier) -> int:
        """Registered offsets that ``frontier`` leaves for later windows."""
        return sum(max(self.ends[p] - frontier[p], 0) for p in self.ends.partitions)

    def seconds_behind(self, end_ms: int) -> float:
        """How far the newest registered record lies beyond ``end_ms`` (0 when it does not)."""
        return max((self.newest_ms or end_ms) - end_ms, 0) / 1000

    def coverage(self, frontier: OffsetFrontier) -> float:
        """The fraction of registered offsets that ``frontier`` has bound (1.0 when none)."""
        registered = sum(self.ends[p] for p in self.ends.partitions)
        bound = sum(min(frontier[p], self.ends[p]) for p in self.ends.partitions)
        return bound / registered if registered else 1.0
