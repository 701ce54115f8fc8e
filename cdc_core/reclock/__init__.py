"""Reclocking: Kafka offsets (FromTime) bound to IntoTime windows, and the records they hold.

Invariant: a binding is minted once, durably, and reused by every later run; a record
appears exactly once in the reclocked collection, at the first binding that covers it.

Modules: ``remap`` (minting policies and the remap shard), ``reclocking`` (the reclocked
collection of a range of bindings), ``held`` (why a binding waits at an offset),
``transactions`` (a transaction group's bindings, which
never split a transaction, copied by its members), ``admission`` (which transactions a
group's window admits, from a run's summaries).
"""

from cdc_core.calendar import Windows
from cdc_core.reclock.held import HeldPartition, held_partitions, overdue
from cdc_core.reclock.reclocking import ReclockedWindows, reclock_windows
from cdc_core.reclock.remap import (
    RemapError,
    frontier_at,
    frontier_of,
    mint_bindings,
    offsets_for,
    remap_updates,
)

__all__ = [
    "HeldPartition",
    "ReclockedWindows",
    "RemapError",
    "Windows",
    "frontier_at",
    "frontier_of",
    "held_partitions",
    "mint_bindings",
    "offsets_for",
    "overdue",
    "reclock_windows",
    "remap_updates",
]
