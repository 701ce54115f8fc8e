"""Where a source's tables and dumps live, and which tables it has.

One place answers "which tables does a source have": the run writes them, the read
handle opens them, maintenance bounds them and Dagster shows them, each asking here.
Nothing here opens or writes a table except ``transaction_binder``'s group shards.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import SparkSession

from cdc_core.config import Config, SourceConfig, TransactionGroup
from cdc_core.frontier import TimeFrontier
from cdc_core.ingest import Registry
from cdc_core.reclock.transactions import GROUP_TABLES, Member, TransactionGroupBinder
from cdc_core.shard import existing_table, stored_upper
from cdc_core.storage import Location, LocationLike, located
from cdc_core.vocabulary import Envelope


@dataclass(frozen=True)
class TableKind:
    """A table a source can have: its name, what it holds, the table its rows come from
    (None: the dumps), and how it is written.

    ``shard``: updates with ``time`` and ``diff``, appended (else a table rewritten whole,
    as of a time). ``output``: written from the reclocked records, so where the source's
    outputs stand is the meet of these tables' uppers. ``published``: a table users query,
    shown as an asset, registered in a catalog and described in its own log."""

    name: str
    description: str
    upstream: str | None
    shard: bool
    output: bool
    published: bool


# Every kind of table, in the order a run commits them.
TABLE_KINDS = (
    TableKind("remap", "Durable bindings: at each window end, the Kafka offset frontier per "
              "partition.", None, shard=True, output=False, published=True),
    TableKind("reclocked", "Each Kafka record exactly once, at the first window whose binding "
              "covers it.", "remap", shard=True, output=True, published=True),
    TableKind("changes", "Differential changes (data, time, diff) after the source's envelope.",
              "reclocked", shard=True, output=True, published=True),
    TableKind("state", "Current rows: the snapshot of `changes` at the newest complete time.",
              "changes", shard=False, output=False, published=True),
    TableKind("errors", "Definite errors of the source, with topic/partition/offset and a "
              "reason.", "reclocked", shard=True, output=True, published=True),
    TableKind("dedup", "The classic `debezium` envelope's deduplication state per partition: "
              "source positions seen, binlog files, snapshot keys.", "reclocked",
              shard=True, output=True, published=False),
    TableKind("history", "Every version of every key (SCD type 2): valid_from, valid_to (null "
              "while current) and the Kafka partition/offset of the record that wrote it.",
              "changes", shard=False, output=False, published=True),
)  # fmt: skip
KIND_OF = {kind.name: kind for kind in TABLE_KINDS}
# Under the lake: one folder per transaction group (its bindings and transaction dumps).
TRANSACTIONS_FOLDER = "_transactions"


def tables_of(source: SourceConfig) -> tuple[TableKind, ...]:
    """Every table ``source`` has, in commit order: ``dedup`` for the classic DEBEZIUM
    envelope, ``history`` when it keeps one."""
    return tuple(
        kind for kind in TABLE_KINDS
        if (kind.name != "dedup" or source.envelope == Envelope.DEBEZIUM)
        and (kind.name != "history" or source.history)
    )  # fmt: skip


def published_tables(source: SourceConfig) -> tuple[str, ...]:
    """The names of the tables of ``source`` users query, in commit order."""
    return tuple(kind.name for kind in tables_of(source) if kind.published)


def shard_tables(source: SourceConfig) -> list[str]:
    """The names of the shards of ``source`` (the remap and its outputs), in commit order."""
    return [kind.name for kind in tables_of(source) if kind.shard]


def output_tables(source: SourceConfig) -> list[str]:
    """The names of the shards of ``source`` written from reclocked data, in commit order."""
    return [kind.name for kind in tables_of(source) if kind.output]


def stored_outputs_upper(lake: LocationLike, source: SourceConfig) -> TimeFrontier:
    """Where the source's outputs stand (the meet of their uppers), read from the Delta
    logs alone: no Spark, nothing created, so a sensor's look changes nothing."""
    meet = TimeFrontier.empty()
    for table in output_tables(source):
        meet = meet.meet(stored_upper(str(located(lake) / source.name / table)))
    return meet


def source_registry(lake: LocationLike, source: SourceConfig) -> Registry:
    """The registry of ``source``'s dumps in ``lake``."""
    return Registry(located(lake) / source.name / "dumps", source.topic, source.sink_stores)


def group_root(lake: LocationLike, group: TransactionGroup) -> Location:
    """The folder of ``group``'s bindings and transaction dumps in ``lake``."""
    return located(lake) / TRANSACTIONS_FOLDER / group.name


def transaction_binder(
    spark: SparkSession,
    config: Config,
    lake: LocationLike,
    source: str,
    *,
    to_read: bool = False,
) -> TransactionGroupBinder | None:
    """The binder of ``source``'s transaction group (None when it belongs to none): the
    group's bindings and transaction dumps under ``<lake>/_transactions/<group>``, and
    every member's registry (where its own runs register its dumps). ``to_read``: only
    a group that has bound already (its tables exist: opening them then writes nothing),
    else None."""
    group = config.transaction_group(source)
    if group is None:
        return None
    lake = located(lake)  # once, not once per member: a group may have hundreds
    root = group_root(lake, group)
    if to_read and not all(existing_table(str(root / name)) for name in GROUP_TABLES):
        return None
    members = []
    for name, collection in group.sources.items():
        member = config.source(name)
        registry = source_registry(lake, member)
        members.append(Member(name, member, registry, collection, member.value_schema))
    return TransactionGroupBinder(spark, root, group.topic, members, group.timeout_ms)
