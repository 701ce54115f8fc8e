"""Kafka metadata columns (``include``): the partition, offset, timestamp, raw key and
headers of the record each output row comes from.

Invariant: a row's metadata is its own record's, so in the upsert envelopes it is the
winning (latest) record's, and a newer record for a key replaces the row even when its
value is unchanged (its metadata differs), as in Materialize. Headers are the one field
that is decoded (``headers``), and only for a source that includes them.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    TimestampType,
)

from cdc_core.envelopes.headers import DECODED, HEADERS_TYPE, decode_headers, headers_problem
from cdc_core.vocabulary import IncludeField

# The raw key as the dump held it, kept when the key is rewritten for decoding.
DUMP_KEY = "dump_key"

TYPES: dict[IncludeField, DataType] = {
    IncludeField.PARTITION: IntegerType(),
    IncludeField.OFFSET: LongType(),
    IncludeField.TIMESTAMP: TimestampType(),
    IncludeField.KEY: StringType(),
    IncludeField.HEADERS: HEADERS_TYPE,
}


def metadata_fields(include: Sequence[IncludeField]) -> list[StructField]:
    """The output columns ``include`` adds, in its order."""
    return [StructField(str(field), TYPES[field]) for field in include]


def with_metadata(records: DataFrame, include: Sequence[IncludeField]) -> DataFrame:
    """``records`` with what ``metadata_columns`` and ``metadata_problem`` read of them:
    their decoded headers, when included (nothing is added otherwise)."""
    return decode_headers(records) if IncludeField.HEADERS in include else records


def metadata_problem(include: Sequence[IncludeField]) -> Column:
    """Why a record's included metadata cannot be shown (null when it can): only headers
    can fail to decode (needs ``with_metadata``)."""
    return headers_problem() if IncludeField.HEADERS in include else F.lit(None).cast("string")


def metadata_columns(records: DataFrame, include: Sequence[IncludeField]) -> list[Column]:
    """Each included field of a reclocked record, as a column named after it (headers
    need ``with_metadata``)."""
    raw_key = F.col(DUMP_KEY) if DUMP_KEY in records.columns else F.col("key")
    value = {
        IncludeField.PARTITION: F.col("partition"),
        IncludeField.OFFSET: F.col("offset"),
        IncludeField.TIMESTAMP: F.timestamp_millis(F.col("ts")),
        IncludeField.KEY: raw_key,
        IncludeField.HEADERS: F.col(DECODED),
    }
    return [value[field].cast(TYPES[field]).alias(str(field)) for field in include]
