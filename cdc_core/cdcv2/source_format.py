"""Topics that carry a CDCv2 stream: their dump records decoded into the stream's
update rows, progress statements and errors (the ``materialize`` envelope,
``cdc_core.envelopes.materialize``, turns them into a source's ``changes``).

Dumps follow ``cdc_core.schemas.DUMP_RECORD``, one Kafka message per record:
- ``cdcv2-json``: ``payload`` is the JSON text of one message (see ``codec_json``);
- ``cdcv2-avro``: kcat's JSON dump cannot hold raw bytes, so ``payload`` is the
  **base64** text of the Kafka value: one Avro message of the Materialize CDC schema,
  in the Confluent wire format (magic byte, schema id) unless ``confluent=False``.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql.types import StructType

from cdc_core.cdcv2.spark_decode import DecodedStream, Packing, decode_messages
from cdc_core.vocabulary import Format


class UnknownFormat(ValueError):
    """A source format name this module does not know."""


def decode_cdcv2_dumps(
    dumps: DataFrame, data_schema: StructType, format: str, confluent: bool = True
) -> DecodedStream:
    """Decode dump records of a CDCv2 topic into update rows, progress statements and
    errors (with topic/partition/offset), ready for ``spark_reader.read_stream``."""
    if format == Format.CDCV2_JSON:
        packing = Packing.JSON
    elif format == Format.CDCV2_AVRO:
        packing = Packing.AVRO_CONFLUENT_BASE64 if confluent else Packing.AVRO_BASE64
    else:
        expected = f"{Format.CDCV2_JSON}, {Format.CDCV2_AVRO}"
        raise UnknownFormat(f"unknown CDCv2 format {format!r}; expected one of {expected}")
    return decode_messages(dumps, data_schema, packing)
