"""Column layouts shared by every part of the pipeline (data columns only;
shards add ``time`` and ``diff``)."""

from __future__ import annotations

from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

# One record of a kcat ``-J`` dump, as parsed: ``key``/``payload`` keep the raw JSON
# text of the dump (null when the dump has null); ``file`` is the dump it came from.
DUMP_RECORD = StructType(
    [
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("ts", LongType()),
        StructField("key", StringType()),
        StructField("payload", StringType()),
        StructField("file", StringType()),
    ]
)

# A definite error of a source, with its source position where one exists
# (a malformed dump line has a file but no partition/offset).
ERROR = StructType(
    [
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("key", StringType()),
        StructField("reason", StringType()),
        StructField("file", StringType()),
    ]
)

# A remap binding element: Kafka partition -> next offset not yet included.
REMAP = StructType([StructField("partition", IntegerType()), StructField("offset", LongType())])

# A reclocked record: the raw record with its Kafka position; IntoTime is the shard time.
RECLOCKED = StructType(
    [
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("ts", LongType()),
        StructField("key", StringType()),
        StructField("payload", StringType()),
    ]
)
