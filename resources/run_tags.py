"""The run tags reclock reads: Dagster's documented tags that name a run's partition, or
its range of partitions, and reclock's own tag for a run its launcher knows is short.

The assets (which windows a run covers) and the Spark resource (whether a run is short)
read them; Dagster's public API documents its tags but exports no constants.
"""

PARTITION_NAME_TAG = "dagster/partition"
ASSET_PARTITION_RANGE_START_TAG = "dagster/asset_partition_range_start"
ASSET_PARTITION_RANGE_END_TAG = "dagster/asset_partition_range_end"
# reclock's own: set by a launcher that knows its run is short though it covers several
# windows (``reclock demo``: eight windows of a few hundred records), so its driver
# starts quick like a one-window run's.
SHORT_RUN_TAG = "reclock/short_run"
