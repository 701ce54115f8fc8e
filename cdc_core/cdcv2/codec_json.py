"""CDCv2 messages as JSON, one message per line.

Written as ``{"updates": [{"data": {...}, "time": 5, "diff": 1}]}`` and
``{"progress": {"lower": [3], "upper": [10], "counts": [{"time": 4, "count": 1}]}}``.
Also read: the Avro-JSON spelling of the Materialize CDC schema
(``{"array": [...]}``, ``{"com.materialize.cdc.progress": {...}}``, nullable values as
``{"long": 5}``), so test fixtures and tools of that ecosystem can be fed in unchanged.
Timestamps, dates and bytes are spelled as Avro-JSON spells them (``data_columns``).
"""

from __future__ import annotations

import json

from cdc_core.cdcv2.data_columns import DataColumns
from cdc_core.cdcv2.model import MalformedMessage, Message, Updates
from cdc_core.cdcv2.records import progress_from_value, to_value, updates_from_value

_UPDATES_KEYS = {"updates": False, "array": True}  # key -> values use Avro union spelling
_PROGRESS_KEYS = {"progress", "com.materialize.cdc.progress"}


def encode(message: Message, columns: DataColumns) -> str:
    """One message as a single JSON line (``{"updates": [...]}`` or ``{"progress": {...}}``)."""
    key = "updates" if isinstance(message, Updates) else "progress"
    return json.dumps({key: to_value(message, columns, json=True)}, separators=(",", ":"))


def decode(text: str, columns: DataColumns) -> Message:
    """The message of one JSON line; anything else raises ``MalformedMessage``."""
    try:
        envelope = json.loads(text)
    except (json.JSONDecodeError, TypeError) as error:
        raise MalformedMessage(f"not JSON: {error}") from None
    if not isinstance(envelope, dict) or len(envelope) != 1:
        raise MalformedMessage("a CDCv2 JSON message is an object with exactly one key")
    [(key, value)] = envelope.items()
    if key in _UPDATES_KEYS:
        return updates_from_value(value, columns, unwrap_unions=_UPDATES_KEYS[key], json=True)
    if key in _PROGRESS_KEYS:
        return progress_from_value(value)
    raise MalformedMessage(f"unknown CDCv2 message kind {key!r}")
