"""The closed vocabularies of the config file, defined once for the config and the engine.

Each is a ``StrEnum``: a member equals its config spelling (``Envelope.UPSERT == "upsert"``),
so engine code may compare against either and values print as they are written in YAML.
"""

from __future__ import annotations

from enum import StrEnum


class Format(StrEnum):
    """How a topic's dump payloads are encoded."""

    JSON = "json"
    CDCV2_JSON = "cdcv2-json"
    CDCV2_AVRO = "cdcv2-avro"


class Envelope(StrEnum):
    """How a source's records turn into changes."""

    NONE = "none"
    UPSERT = "upsert"
    DEBEZIUM_UPSERT = "debezium-upsert"
    DEBEZIUM = "debezium"

    @property
    def keyed(self) -> bool:
        """Every envelope but ``none`` identifies rows by their Kafka key columns."""
        return self is not Envelope.NONE

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
