"""A source's upkeep through its write handle: retire its dumps, maintain its tables.

Both act on the shards a ``SourcePipeline`` opened (the only handle that commits) and take
``now`` from their caller. Retire commits the offset resumption frontier upstream and
retires the dumps below it; maintain retires first, then brings every table back within
its bounds (``cdc_core.source.maintenance`` says how each table is kept).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cdc_core.phases import phase
from cdc_core.reclock.transactions import TransactionGroupBinder
from cdc_core.shard import stored_upper
from cdc_core.source.layout import output_tables
from cdc_core.source.maintenance import (
    MaintenanceReport,
    maintain_group,
    maintain_registry,
    maintain_shard,
    maintain_table,
)
from cdc_core.source.resumption import RetireReport, retire
from cdc_core.vocabulary import RetirePolicy

if TYPE_CHECKING:
    from cdc_core.source.pipeline import SourcePipeline


def maintain_source(pipeline: SourcePipeline, now_ms: int) -> MaintenanceReport:
    """Retire, then bring every table of the source back within its bounds: shards'
    sinces at its retention horizon (the calendar's ``source_horizon``), compacted and
    collected, and every log trimmed to a reader lease of commits (see
    ``cdc_core.source.maintenance``). Its transaction group is kept from the earliest
    horizon of its members."""
    retired = retire_source(pipeline, now_ms)
    horizon = pipeline.config.calendar.source_horizon(pipeline.source.name, now_ms)
    keep_ms = pipeline.config.readers.lease_ms
    with phase(pipeline.source.name, "maintain tables"):
        tables = {"remap": maintain_shard(pipeline.remap, None, keep_ms)}
        for name in output_tables(pipeline.source):
            tables[name] = maintain_shard(getattr(pipeline, name), horizon, keep_ms)
        plain = {"state": str(pipeline.root / "state"),
                 "history": str(pipeline.root / "history"),
                 "upstream": pipeline.upstream.path}  # fmt: skip
        for name, path in plain.items():
            table = maintain_table(path, keep_ms)
            if table is not None:
                tables[name] = table
    with phase(pipeline.source.name, "maintain registry"):  # its fold, once due
        tables.update(maintain_registry(pipeline.registry, keep_ms))
    binder, group = pipeline.group, pipeline.config.transaction_group(pipeline.source.name)
    if binder is None or group is None:
        return MaintenanceReport(pipeline.source.name, retired, tables)
    modes = {pipeline.config.source(name).retire for name in binder.members}
    calendar = pipeline.config.calendar
    earliest = min(calendar.source_horizon(name, now_ms) for name in binder.members)
    kept = maintain_group(
        binder, _group_keep_from(pipeline, binder, earliest), keep_ms, now_ms=now_ms,
        mode=RetirePolicy.DELETE if modes == {RetirePolicy.DELETE} else RetirePolicy.ARCHIVE,
        landing=pipeline.landing,
    )  # fmt: skip
    for name, table in kept.tables.items():
        tables[f"{group.name}/{name}"] = table
    return MaintenanceReport(pipeline.source.name, retired, tables, kept.retired)


def _group_keep_from(
    pipeline: SourcePipeline, group: TransactionGroupBinder, horizon: int
) -> int | None:
    """The earliest time the source's transaction group is still asked about: the
    members' earliest retention horizon, each member's last binding (a member copies the
    group's bindings from its own upper on), and the last time the group and its admitted
    record hold; None while any of them holds nothing."""
    uppers = [stored_upper(str(pipeline.root.parent / name / "remap")).time
              for name in group.members]  # fmt: skip
    for shard in (group.bindings, group.admitted):
        uppers.append(shard.refresh().upper.time)
    known = [upper for upper in uppers if upper is not None]
    if any(upper <= 0 for upper in known):
        return None
    return min([horizon, *(upper - 1 for upper in known)])


def retire_source(pipeline: SourcePipeline, now_ms: int) -> RetireReport:
    """Commit the offset resumption frontier upstream and retire the dumps below it."""
    with phase(pipeline.source.name, "retire dumps"):
        return retire(
            pipeline.remap,
            pipeline.outputs,
            pipeline.registry,
            pipeline.upstream,
            mode=pipeline.source.retire,
            landing=pipeline.landing,
            archive=pipeline.root / "archive",
            now_ms=now_ms,
        )
