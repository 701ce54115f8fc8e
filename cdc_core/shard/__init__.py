"""Shards: durable, definite time-varying collections on Delta (the persist design).

Invariant: a shard's data and its ``upper``/``since`` frontiers change together, in one
compare-and-set commit on the Delta log; a snapshot at ``since <= t < upper`` is exact and
stays exact while a live reader holds ``t``.

Modules: ``shard`` (the handle, combining the roles ``write``, ``read`` and
``maintenance`` over ``handle``), ``log`` (the one commit path to Delta, for every table
reclock writes), ``leases`` (reader and writer registrations in the log), ``delta_io``
(Spark writes Parquet, the driver commits footers; pruned reads).
"""

from cdc_core.shard.handle import ShardUsageError, stored_upper
from cdc_core.shard.log import ShardStorageError, existing_table
from cdc_core.shard.read import ProgressStatement
from cdc_core.shard.shard import Shard
from cdc_core.shard.write import StagedBatch, UpperMismatch

__all__ = [
    "ProgressStatement",
    "Shard",
    "ShardStorageError",
    "ShardUsageError",
    "StagedBatch",
    "UpperMismatch",
    "existing_table",
    "stored_upper",
]
