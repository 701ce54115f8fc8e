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

# The Kafka headers of a record, as the kcat dump writes them: the JSON text of an array
# alternating names and values (``["trace", "abc", "k2", null]``); "[]" for a kcat record
# without headers, null for a Kafka Connect sink record (the sink keeps none, so they are
# unknown). Kept as text, like key and payload: decoding them is the envelope's job.
HEADERS = StructField("headers", StringType())


def reclocked_schema(headers: bool) -> StructType:
    """The columns of a source's ``reclocked`` shard: RECLOCKED, then HEADERS when the
    source includes headers.

    Only such a source pays for them: every other source parses, sorts, caches and stores
    nothing more than before, and its existing tables stay as they are. Whether a source
    includes headers is part of its fingerprint (``include``), so it never changes under
    existing outputs and a shard's columns stay fixed: re-runs write the same rows and a
    lake written before headers were kept opens unchanged, with no evolution at open.
    """
    return StructType([*RECLOCKED.fields, HEADERS]) if headers else RECLOCKED


VALID_FROM, VALID_TO = "valid_from", "valid_to"

# The SCD type 2 columns a ``history`` table adds to a source's output columns: the IntoTime
# interval ``[valid_from, valid_to)`` in which a version was its key's row (``valid_to`` null
# while it still is) and the Kafka position of the record that wrote the version.
HISTORY_COLUMNS = StructType(
    [
        StructField(VALID_FROM, LongType()),
        StructField(VALID_TO, LongType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
    ]
)


def history_schema(output: StructType) -> StructType:
    """The columns of a source's ``history`` table: its output columns, then HISTORY_COLUMNS."""
    return StructType([*output.fields, *HISTORY_COLUMNS.fields])
