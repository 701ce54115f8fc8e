"""Where a source's tables and dumps live, and which tables it has.

One place answers "which tables does a source have": the run writes them, the read
handle opens them, maintenance bounds them and Dagster shows them, each asking here.
Nothing here opens or writes a table except ``transaction_binder``'s group shards.
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from cdc_core.config import Config, SourceConfig, TransactionGroup
from cdc_core.frontier import TimeFrontier
from cdc_core.ingest import Registry
from cdc_core.reclock.transactions import GROUP_TABLES, Member, TransactionGroupBinder
from cdc_core.shard import existing_table, stored_upper
from cdc_core.storage import Location, LocationLike, located
from cdc_core.vocabulary import Envelope

OUTPUTS = ("remap", "reclocked", "changes", "state", "errors")
# What each table a run writes holds: its description in its Delta log, Dagster and catalogs.
DESCRIPTIONS = {
    "remap": "Durable bindings: at each window end, the Kafka offset frontier per partition.",
    "reclocked": "Each Kafka record exactly once, at the first window whose binding covers it.",
    "changes": "Differential changes (data, time, diff) after the source's envelope.",
    "state": "Current rows: the snapshot of `changes` at the newest complete time.",
    "errors": "Definite errors of the source, with topic/partition/offset and a reason.",
    "history": "Every version of every key (SCD type 2): valid_from, valid_to (null while "
    "current) and the Kafka partition/offset of the record that wrote it.",
}
# Under the lake: one folder per transaction group (its bindings and transaction dumps).
TRANSACTIONS_FOLDER = "_transactions"


def published_tables(source: SourceConfig) -> tuple[str, ...]:
    """Every table a run of ``source`` writes: OUTPUTS, then ``history`` when it keeps one."""
    return OUTPUTS + (("history",) if source.history else ())


def output_tables(source: SourceConfig) -> list[str]:
    """The shards written from reclocked data (remap excluded), in commit order."""
    tables = ["reclocked", "changes", "errors"]
    return tables + (["dedup"] if source.envelope == Envelope.DEBEZIUM else [])


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
    root = group_root(lake, group)
    if to_read and not all(existing_table(str(root / name)) for name in GROUP_TABLES):
        return None
    members = []
    for name, collection in group.sources.items():
        member = config.source(name)
        registry = source_registry(lake, member)
        members.append(Member(name, member, registry, collection, member.value_schema))
    return TransactionGroupBinder(spark, root, group.topic, members, group.timeout_ms)
