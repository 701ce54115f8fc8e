"""Maintenance of one source: what keeps its tables bounded however long it runs.

One pass, safe to repeat and to run beside the source's runs (every step is a
compare-and-set commit, or deletes only what no version and no live registration
refers to): retire the dumps below the resumption frontier; advance each shard's since
to the source's retention horizon (the calendar's ``source_horizon``: the windows that can still
be materialized are read back exactly, older ones are compacted), never past a live
reader's hold; compact the shards logically and physically; collect their garbage;
checkpoint every table's Delta log and trim it to ``log_keep_ms`` of commits. After it,
a table holds about one file per compaction and a log of ``log_keep_ms``, whatever its
age. A transaction group's tables and transaction dumps are kept the same way, from the
earliest time any of its members, checks or catch-ups still asks about.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cdc_core.frontier import TimeFrontier
from cdc_core.ingest.registry import Registry, fold_registry
from cdc_core.reclock.transactions import TransactionGroupBinder
from cdc_core.shard import Shard, existing_table
from cdc_core.shard.delta_io import live_files
from cdc_core.shard.maintenance import tidy_table
from cdc_core.source.resumption import (
    ResumptionFrontiers,
    RetireReport,
    retirable,
    retire_files,
)
from cdc_core.storage import LocationLike
from cdc_core.vocabulary import RetirePolicy

# A registry table with this many files or more is compacted: it gained some since the
# last maintenance (each registration merges the small files it leaves once they are
# ``delta_io.MERGE_AT``, so between two maintenances they stay few, never one alone).
SMALL_FILES = 2


@dataclass(frozen=True)
class TableUpkeep:
    """What maintenance did to one table: live files before and after, data files
    collected, log files trimmed, and (for a shard) where its since stands."""

    files_before: int
    files_after: int
    collected: int
    log_trimmed: int
    since: TimeFrontier | None = None


@dataclass(frozen=True)
class MaintenanceReport:
    """One source's maintenance: the retire, and each table's upkeep."""

    source: str
    retired: RetireReport
    tables: dict[str, TableUpkeep] = field(default_factory=dict)
    transaction_dumps_retired: int = 0

    def describe(self) -> str:
        """What ``reclock maintain`` prints: one line per table."""
        lines = [
            f"{self.source}: retired {len(self.retired.archived) + len(self.retired.deleted)} "
            f"dump(s); remap since {self.retired.remap_since.iso()}"
        ]
        if self.transaction_dumps_retired:
            lines.append(f"  retired {self.transaction_dumps_retired} transaction topic dump(s)")
        for name, t in self.tables.items():
            since = "" if t.since is None else f", since {t.since.iso()}"
            lines.append(
                f"  {name:<14} files {t.files_before} -> {t.files_after}, collected "
                f"{t.collected}, log files trimmed {t.log_trimmed}{since}"
            )
        return "\n".join(lines)


def maintain_shard(shard: Shard, horizon_ms: int | None, log_keep_ms: int) -> TableUpkeep:
    """Advance ``shard``'s since to ``horizon_ms`` (never past its upper's last complete
    time, nor a live reader's hold), compact it, collect the files removed more than
    ``log_keep_ms`` ago and trim its log to that much."""
    shard.refresh()
    before = len(shard.live_files())
    upper = shard.upper.time
    if horizon_ms is not None and upper is not None and upper > 0:
        target = TimeFrontier.at(min(horizon_ms, upper - 1))
        if shard.since < target:
            shard.downgrade_since(target)
    shard.compact()
    collected = shard.gc(retention_hours=log_keep_ms / 3_600_000)
    trimmed = shard.trim_log(log_keep_ms)
    after = len(shard.refresh().live_files())
    return TableUpkeep(before, after, len(collected), len(trimmed), shard.since)


def maintain_table(
    path: Path | str, log_keep_ms: int, *, compact: Callable[[str], object] | None = None
) -> TableUpkeep | None:
    """Collect and trim a table that is no shard (None when it does not exist yet);
    ``compact``: how to lay it out anew first, once there are ``SMALL_FILES`` (an
    append-only registry gains files with its registrations, and merges them as it goes;
    ``state`` is rewritten whole by every publish and is not compacted)."""
    table = existing_table(str(path))
    if table is None:
        return None
    before = len(live_files(table))
    if compact is not None and before >= SMALL_FILES:
        compact(str(path))
    collected, trimmed = tidy_table(str(path), log_keep_ms)
    tidied = existing_table(str(path))
    after = 0 if tidied is None else len(live_files(tidied))
    return TableUpkeep(before, after, len(collected), len(trimmed))


def maintain_registry(registry: Registry, log_keep_ms: int) -> dict[str, TableUpkeep]:
    """A dump registry's tables, compacted, collected and trimmed: both folded once
    ``files`` has gathered small files (``fold_registry``: retired files' rows leave what
    a run reads, the rest sorted by path so the sensor's look at landed paths reads a row
    group of it, whatever its age)."""
    tables: dict[str, TableUpkeep] = {}
    compactions = {
        "dumps/files": (registry.files_path, lambda _: fold_registry(registry)),
        "dumps/retired": (registry.retired_path, None),
    }
    for name, (path, compact) in compactions.items():
        upkeep = maintain_table(path, log_keep_ms, compact=compact)
        if upkeep is not None:
            tables[name] = upkeep
    return tables


@dataclass(frozen=True)
class GroupUpkeep:
    """What maintenance did to a transaction group: transaction dumps retired, and each
    of its tables' upkeep."""

    retired: int
    tables: dict[str, TableUpkeep]


def maintain_group(
    group: TransactionGroupBinder,
    keep_from: int | None,
    log_keep_ms: int,
    *,
    mode: RetirePolicy,
    landing: LocationLike,
    now_ms: int,
) -> GroupUpkeep:
    """Retire the transaction dumps wholly below the group's open mark at ``keep_from``
    (the earliest time anything still asks about: nothing reads the topic below that
    mark), advance the group's shards' sinces to it, and compact, collect and trim them
    and the dump registry. Without ``keep_from`` (a member not bound yet) nothing is
    retired and no since moves."""
    retired = 0
    if keep_from is not None:
        mark = group.open_mark(keep_from)
        files = retirable(
            group.registry.live_files(), ResumptionFrontiers(TimeFrontier.at(keep_from + 1), mark)
        )
        archived, deleted = retire_files(
            group.registry, files, mode=mode, landing=landing, archive=group.root / "archive",
            now_ms=now_ms,
        )  # fmt: skip
        retired = len(archived) + len(deleted)
    tables = {
        "bindings": maintain_shard(group.bindings, keep_from, log_keep_ms),
        "admitted": maintain_shard(group.admitted, keep_from, log_keep_ms),
    }
    tables.update(maintain_registry(group.registry, log_keep_ms))
    return GroupUpkeep(retired, tables)
