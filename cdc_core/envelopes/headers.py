"""Kafka headers (``include: [headers]``): the headers text a dump holds, decoded into the
``headers`` column as Materialize's ``INCLUDE HEADERS`` shows it: a list of ``{key, value}``
in Kafka order, duplicate names kept, ``value`` the bytes of the header (null for a null
value). kcat ``-J`` writes headers as a JSON array alternating names and values, values as
text: a value's bytes are its UTF-8 encoding.

Invariant: a record's headers are either decoded whole or the record is a ``headers decode
error`` at its partition and offset (not an array, an odd number of items, a name that is
not a string, a value neither a string nor null); they are never cut down or dropped.
Headers a dump does not know (a Kafka Connect sink record: the sink keeps none) are null.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, BinaryType, StringType, StructField, StructType

from cdc_core.envelopes.reasons import HEADERS_DECODE, reason
from cdc_core.schemas import HEADERS

HEADERS_TYPE = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)
# The decoded headers of a record, beside the text they come from, and why they did not decode.
DECODED = "_headers_decoded"
DECODE_ERROR = "_headers_error"
_ITEMS = "_header_items"
_SNIPPET_CHARS = 120


def decode_headers(records: DataFrame) -> DataFrame:
    """Add ``DECODED`` (``HEADERS_TYPE``, from the ``headers`` text column) and
    ``DECODE_ERROR``; both are null for null headers text."""
    text = F.col(HEADERS.name)
    staged = records.withColumn(
        _ITEMS, F.try_variant_get(F.try_parse_json(text), "$", "array<variant>")
    )
    items = F.col(_ITEMS)
    # Per item, whether it has the JSON type its place asks for: names at even indexes.
    fits = F.transform(
        items,
        lambda item, i: F.when(i % 2 == 0, F.schema_of_variant(item) == "STRING").otherwise(
            F.schema_of_variant(item).isin("STRING", "VOID")
        ),
    )
    misfit = F.array_position(fits, False)  # 1-based; 0 when every item fits
    snippet = F.substring(text, 1, _SNIPPET_CHARS)
    error = (
        F.when(text.isNull(), F.lit(None))
        .when(
            items.isNull(),
            F.concat(F.lit("are not a JSON array of alternating names and values: "), snippet),
        )
        .when(
            F.size(items) % 2 == 1,
            F.concat(
                F.lit("hold an odd number of items ("), F.size(items).cast("string"),
                F.lit("), so the last name has no value: "), snippet,
            ),
        )
        .when(
            misfit > 0,
            F.concat(
                F.lit("item "), misfit.cast("string"),
                F.when(misfit % 2 == 1, F.lit(" is a name that is not a string: ")).otherwise(
                    F.lit(" is a value that is neither a string nor null: ")
                ),
                snippet,
            ),
        )
    )
    pairs = F.transform(
        items,
        lambda item, i: F.when(
            i % 2 == 0,
            F.struct(
                F.variant_get(item, "$", "string").alias("key"),
                F.encode(F.variant_get(F.get(items, i + 1), "$", "string"), "UTF-8").alias(
                    "value"
                ),
            ),
        ),
    )
    decoded = F.filter(pairs, lambda pair: pair.isNotNull()).cast(HEADERS_TYPE)
    return staged.select(
        "*",
        error.alias(DECODE_ERROR),
        F.when(error.isNull(), decoded).alias(DECODED),
    ).drop(_ITEMS)


def headers_problem() -> Column:
    """The ``headers decode error`` of a record whose headers did not decode, else null
    (needs ``decode_headers``)."""
    error = F.col(DECODE_ERROR)
    return F.when(error.isNotNull(), reason(HEADERS_DECODE, F.concat(F.lit("headers "), error)))
