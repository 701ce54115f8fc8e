"""Shards: durable, definite time-varying collections on Delta (the persist design).

Invariant: a shard's data and its ``upper``/``since`` frontiers change together, in one
compare-and-set commit on the Delta log; a snapshot at ``since <= t < upper`` is exact and
stays exact while a live reader holds ``t``.

Modules: ``shard`` (the handle: appends, snapshots, compaction, gc), ``leases`` (reader
and writer registrations in the log), ``delta_io`` (Spark writes Parquet, the driver
commits footers; pruned reads).
"""
