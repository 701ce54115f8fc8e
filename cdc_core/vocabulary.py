"""The closed vocabularies of the config file, defined once for the config and the engine.

Each is a ``StrEnum``: a member equals its config spelling (``Envelope.UPSERT == "upsert"``),
so engine code may compare against either and values print as they are written in YAML.
"""

from __future__ import annotations

from enum import StrEnum


class Format(StrEnum):
    """How a topic's dump payloads are encoded: plain records, or a CDCv2 stream (one
    message per record; such a topic's envelope is ``materialize``)."""

    JSON = "json"
    CDCV2_JSON = "cdcv2-json"
    CDCV2_AVRO = "cdcv2-avro"

    @property
    def cdcv2(self) -> bool:
        """True for the CDCv2 formats, whose records carry their own updates and progress."""
        return self is not Format.JSON


class RecordEncoding(StrEnum):
    """How a Kafka key or value is written in a dump: JSON text (an object or a scalar),
    plain text, raw bytes (base64 text in the dump), or Avro in the Confluent wire format
    (base64 text of magic byte 0, a 4-byte schema id and the Avro binary)."""

    JSON = "json"
    TEXT = "text"
    BYTES = "bytes"
    AVRO = "avro"

    @property
    def single_column(self) -> str | None:
        """The one column type text and bytes decode into (None: any columns)."""
        return {RecordEncoding.TEXT: "string", RecordEncoding.BYTES: "bytes"}.get(self)


class DumpLayout(StrEnum):
    """How a dump file holds records: kcat ``-J`` JSON lines (each record with its
    position), or a Kafka Connect storage sink file (values only, positions from its name:
    ``<topic>+<partition>+<start offset>.<json|avro>[.gz]``)."""

    KCAT = "kcat"
    CONNECT = "connect"


class SinkStore(StrEnum):
    """What a Kafka Connect storage sink writes beside each value file when told to
    (``store.kafka.keys``, ``store.kafka.headers``): a file of the records' keys
    (``<name>.keys.<ext>``) or of their headers (``<name>.headers.<ext>``)."""

    KEYS = "keys"
    HEADERS = "headers"


class IncludeField(StrEnum):
    """Kafka metadata of the record a row comes from (its winning record for the upsert
    envelopes), each an output column of its own name, after the data columns."""

    PARTITION = "partition"
    OFFSET = "offset"
    TIMESTAMP = "timestamp"
    HEADERS = "headers"
    KEY = "key"


class Envelope(StrEnum):
    """How a source's records turn into changes."""

    NONE = "none"
    UPSERT = "upsert"
    DEBEZIUM_UPSERT = "debezium-upsert"
    DEBEZIUM = "debezium"
    MATERIALIZE = "materialize"  # the updates of a CDCv2 stream, as Materialize names it

    @property
    def keyed(self) -> bool:
        """Every envelope but ``none`` and ``materialize`` identifies rows by their Kafka
        key columns."""
        return self not in (Envelope.NONE, Envelope.MATERIALIZE)

    @property
    def after_image(self) -> bool:
        """The Debezium envelopes output the after image, which holds the key columns;
        the others output key columns followed by value columns."""
        return self in (Envelope.DEBEZIUM_UPSERT, Envelope.DEBEZIUM)


class ReclockPolicy(StrEnum):
    """What decides the window a record binds to: its arrival or its event time (ts)."""

    ARRIVAL = "arrival"
    EVENT_TIME = "event-time"


class RetirePolicy(StrEnum):
    """What happens to dumps no run needs any more."""

    ARCHIVE = "archive"
    DELETE = "delete"


class CatalogKind(StrEnum):
    """Where a deployment's tables are registered by name: nowhere (paths only), a Hive
    metastore (Spark's session catalog), or the AWS Glue Data Catalog."""

    NONE = "none"
    HIVE = "hive"
    GLUE = "glue"
