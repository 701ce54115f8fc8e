"""Dagster's documented run tags that name a run's partition, or its range of partitions.

Both the assets (which windows a run covers) and the Spark resource (whether a run is one
partition) read them; Dagster's public API documents the tags but exports no constants.
"""

PARTITION_NAME_TAG = "dagster/partition"
ASSET_PARTITION_RANGE_START_TAG = "dagster/asset_partition_range_start"
ASSET_PARTITION_RANGE_END_TAG = "dagster/asset_partition_range_end"
