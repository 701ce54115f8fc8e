"""Raw CDCv2 messages (dump payloads or stream files) decoded in Spark, split into
the three things the Spark reader and the source need: update rows (executors),
progress statements (driver, tiny) and errors with their source position.

A message that does not decode, or breaks the protocol's shape, becomes one error
row and none of its updates are used: the stream then lacks those facts, so the
complete frontier stops before them instead of silently skipping them.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import Enum
from typing import TypeVar

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import LongType, StringType, StructField, StructType

from cdc_core.cdcv2 import codec_json
from cdc_core.cdcv2.codec_avro import AvroCodec
from cdc_core.cdcv2.data_columns import DataColumns
from cdc_core.cdcv2.model import MalformedMessage, Message, Progress, Updates
from cdc_core.cdcv2.records import progress_from_value, to_value
from cdc_core.schemas import ERROR

# The columns a raw message DataFrame carries besides ``payload``.
POSITION_COLUMNS = ["topic", "partition", "offset", "key", "file"]

_Payload = TypeVar("_Payload", str, bytes)


class Packing(Enum):
    """How messages sit in a raw ``payload`` value."""

    JSON = "json"  # text: one JSON message
    AVRO_BASE64 = "avro-base64"  # text: base64 of one Avro message (schemaless binary)
    AVRO_CONFLUENT_BASE64 = "avro-confluent-base64"  # ... with the Confluent header
    AVRO_CONTAINER = "avro-container"  # bytes: an Avro object container file


@dataclass(frozen=True)
class DecodedStream:
    """``updates``: data columns + ``time`` + ``diff`` (lazy); ``progress``: the distinct
    statements; ``errors``: ``cdc_core.schemas.ERROR`` rows for undecodable messages."""

    updates: DataFrame
    progress: tuple[Progress, ...]
    errors: DataFrame


def decode_messages(raw: DataFrame, data_schema: StructType, packing: Packing) -> DecodedStream:
    """Decode ``raw`` (``payload`` plus ``POSITION_COLUMNS``) on the executors."""
    columns = DataColumns(data_schema)
    output = _output_schema(data_schema)
    decoded = raw.select("payload", *POSITION_COLUMNS).mapInArrow(
        _decoder(columns, packing, to_arrow_schema(output, timezone="UTC")), output
    )
    statements = decoded.filter(F.col("kind") == "progress").select("progress").distinct()
    progress = tuple(progress_from_value(json.loads(r["progress"])) for r in statements.collect())
    updates = decoded.filter(F.col("kind") == "update").select("data.*", "time", "diff")
    errors = decoded.filter(F.col("kind") == "error").select(*[f.name for f in ERROR.fields])
    return DecodedStream(updates, progress, errors)


def _output_schema(data_schema: StructType) -> StructType:
    return StructType(
        [
            StructField("kind", StringType()),
            StructField("data", data_schema),
            StructField("time", LongType()),
            StructField("diff", LongType()),
            StructField("progress", StringType()),
            *[StructField(f.name, f.dataType) for f in ERROR.fields],
        ]
    )


def _decoder(
    columns: DataColumns, packing: Packing, output: pa.Schema
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The per-partition decoding function (built on the driver, run on executors)."""

    def decode_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        unpack = _unpacker(packing, columns)
        for batch in batches:
            rows: list[dict[str, object]] = []
            for raw in batch.to_pylist():
                position = {name: raw[name] for name in POSITION_COLUMNS}
                try:
                    messages = unpack(raw["payload"])
                except MalformedMessage as error:
                    rows.append({"kind": "error", "reason": f"cdcv2: {error}", **position})
                    continue
                rows.extend(_rows(messages, columns, position))
            yield pa.RecordBatch.from_pylist(rows, schema=output)

    return decode_partition


def _rows(
    messages: list[Message], columns: DataColumns, position: dict[str, object]
) -> Iterator[dict[str, object]]:
    for message in messages:
        if isinstance(message, Updates):
            for data, time, diff in message.updates:
                record = columns.to_record(data)
                yield {"kind": "update", "data": record, "time": time, "diff": diff}
        else:
            statement = json.dumps(to_value(message, columns))
            yield {"kind": "progress", "progress": statement, **position}


def _unpacker(packing: Packing, columns: DataColumns) -> Callable[[object], list[Message]]:
    if packing is Packing.JSON:
        return lambda payload: [codec_json.decode(_present(payload, str), columns)]
    codec = AvroCodec(columns.schema)
    if packing is Packing.AVRO_CONTAINER:
        return lambda payload: list(codec.read_container(io.BytesIO(_present(payload, bytes))))
    confluent = packing is Packing.AVRO_CONFLUENT_BASE64
    return lambda payload: [codec.decode(_base64(_present(payload, str)), confluent)]


def _present(payload: object, kind: type[_Payload]) -> _Payload:
    """``payload`` as the ``kind`` its packing's column holds (text, or a file's bytes);
    a null payload, or one of another kind, is a ``MalformedMessage``."""
    if payload is None:
        raise MalformedMessage("null payload")
    if not isinstance(payload, kind):
        raise MalformedMessage(f"payload is {type(payload).__name__}, not {kind.__name__}")
    return payload


def _base64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as error:
        raise MalformedMessage(f"payload is not base64: {error}") from None
