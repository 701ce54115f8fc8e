"""CDCv2 messages in the Materialize CDC Avro format.

The schema is a top-level union, in this order, of an array of
``com.materialize.cdc.update`` records (``data``: record ``com.materialize.cdc.data``
with the row columns, nullable ones as ``["null", type]``; ``time``, ``diff``: long)
and the record ``com.materialize.cdc.progress`` (``lower``, ``upper``: array of long;
``counts``: array of record ``counts`` {``time``, ``count``: long}). One message is one
union value. Single messages use the Confluent wire format (magic byte 0, 4-byte
big-endian schema id) unless told otherwise; files are Avro object container files.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Iterable, Iterator
from typing import Any, BinaryIO

import fastavro
from pyspark.sql.types import StructType

from cdc_core.cdcv2.data_columns import DataColumns
from cdc_core.cdcv2.model import MalformedMessage, Message
from cdc_core.cdcv2.records import progress_from_value, to_value, updates_from_value

_NAMESPACE = "com.materialize.cdc"
_CONFLUENT_MAGIC = 0
_CONFLUENT_HEADER = struct.Struct(">bI")


def cdc_schema(data_schema: StructType) -> list[dict[str, Any]]:
    """The Materialize CDC Avro schema for rows of ``data_schema``."""
    columns = DataColumns(data_schema)
    data_fields = []
    for field in data_schema.fields:
        avro_type = columns.avro_type(field.name)
        data_fields.append(
            {"name": field.name, "type": ["null", avro_type] if field.nullable else avro_type}
        )
    update = {
        "type": "record",
        "name": "update",
        "namespace": _NAMESPACE,
        "fields": [
            {"name": "data", "type": {"type": "record", "name": "data", "fields": data_fields}},
            {"name": "time", "type": "long"},
            {"name": "diff", "type": "long"},
        ],
    }
    progress = {
        "type": "record",
        "name": "progress",
        "namespace": _NAMESPACE,
        "fields": [
            {"name": "lower", "type": {"type": "array", "items": "long"}},
            {"name": "upper", "type": {"type": "array", "items": "long"}},
            {
                "name": "counts",
                "type": {
                    "type": "array",
                    "items": {
                        "type": "record",
                        "name": "counts",
                        "fields": [
                            {"name": "time", "type": "long"},
                            {"name": "count", "type": "long"},
                        ],
                    },
                },
            },
        ],
    }
    return [{"type": "array", "items": update}, progress]


class AvroCodec:
    """Encodes and decodes the messages of one data schema (the parsed schema is cached)."""

    def __init__(self, data_schema: StructType) -> None:
        self.columns = DataColumns(data_schema)
        self.schema = fastavro.parse_schema(cdc_schema(data_schema))

    def value(self, message: Message) -> object:
        """The union value of ``message`` (what ``fastavro.validation`` checks)."""
        return to_value(message, self.columns)

    def message(self, value: object) -> Message:
        """One decoded container value: an array of updates or a progress record."""
        if isinstance(value, list):
            return updates_from_value(value, self.columns, unwrap_unions=False)
        return progress_from_value(value)

    def encode(self, message: Message, schema_id: int | None = None) -> bytes:
        """Avro binary of one message; with ``schema_id``, in the Confluent wire format."""
        out = io.BytesIO()
        if schema_id is not None:
            out.write(_CONFLUENT_HEADER.pack(_CONFLUENT_MAGIC, schema_id))
        fastavro.schemaless_writer(out, self.schema, self.value(message))
        return out.getvalue()

    def decode(self, payload: bytes, confluent: bool = True) -> Message:
        """One message; ``confluent`` expects (and strips) the 5-byte wire-format header.

        The header cannot be sniffed: the updates branch index encodes as byte 0 too."""
        if confluent:
            if len(payload) < _CONFLUENT_HEADER.size or payload[0] != _CONFLUENT_MAGIC:
                raise MalformedMessage("missing the Confluent wire-format header")
            payload = payload[_CONFLUENT_HEADER.size :]
        source = io.BytesIO(payload)
        try:
            value = fastavro.schemaless_reader(source, self.schema, self.schema)
        except (EOFError, ValueError, IndexError, UnicodeDecodeError) as error:
            raise MalformedMessage(f"undecodable Avro: {error!r}") from None
        if source.tell() != len(payload):
            raise MalformedMessage(f"{len(payload) - source.tell()} bytes left after the message")
        return self.message(value)

    def write_container(self, out: BinaryIO, messages: Iterable[Message]) -> None:
        """An Avro object container file holding one record per message."""
        fastavro.writer(out, self.schema, (self.value(m) for m in messages), codec="deflate")

    def read_container(self, source: BinaryIO) -> Iterator[Message]:
        """The messages of one Avro container file, in order; damage: ``MalformedMessage``."""
        try:
            for value in fastavro.reader(source, self.schema):
                yield self.message(value)
        except (EOFError, ValueError, IndexError, UnicodeDecodeError) as error:
            raise MalformedMessage(f"undecodable Avro container: {error!r}") from None
