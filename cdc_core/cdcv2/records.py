"""Messages as plain values shaped like the Materialize CDC Avro schema: an updates
batch is a list of ``{data, time, diff}`` records, a progress statement a
``{lower, upper, counts}`` record. Both encodings (JSON and Avro) go through here.
"""

from __future__ import annotations

from collections.abc import Mapping

from cdc_core.cdcv2.data_columns import DataColumns
from cdc_core.cdcv2.model import MalformedMessage, Message, Progress, Updates
from cdc_core.frontier import TimeFrontier

UpdatesValue = list[dict[str, object]]
ProgressValue = dict[str, object]


def to_value(
    message: Message, columns: DataColumns, json: bool = False
) -> UpdatesValue | ProgressValue:
    """A message as the plain value both codecs encode (a list of updates or a progress
    record); ``json``: data values spelled for JSON (``DataColumns.to_record``)."""
    if isinstance(message, Updates):
        return [
            {"data": columns.to_record(data, json), "time": time, "diff": diff}
            for data, time, diff in message.updates
        ]
    return {
        "lower": _antichain(message.lower),
        "upper": _antichain(message.upper),
        "counts": [{"time": time, "count": count} for time, count in message.counts],
    }


def updates_from_value(
    value: object, columns: DataColumns, unwrap_unions: bool, json: bool = False
) -> Updates:
    """The updates of a decoded value (``json``: data values in their JSON spelling); shape
    errors raise ``MalformedMessage`` naming the field."""
    if not isinstance(value, list):
        raise MalformedMessage(f"updates must be an array, got {value!r}")
    updates = []
    for item in value:
        record = _record(item, ("data", "time", "diff"), "update")
        data = columns.from_record(record["data"], unwrap_unions, json)
        updates.append((data, _long(record["time"], "time"), _long(record["diff"], "diff")))
    return Updates(tuple(updates))


def progress_from_value(value: object) -> Progress:
    """The progress statement of a decoded value; shape errors raise ``MalformedMessage``."""
    record = _record(value, ("lower", "upper", "counts"), "progress")
    lower = _frontier(record["lower"], "lower")
    upper = _frontier(record["upper"], "upper")
    if not isinstance(record["counts"], list):
        raise MalformedMessage(f"progress counts must be an array, got {record['counts']!r}")
    counts = []
    for item in record["counts"]:
        count = _record(item, ("time", "count"), "count")
        counts.append((_long(count["time"], "time"), _long(count["count"], "count")))
    return Progress(lower, upper, tuple(counts))


def _antichain(frontier: TimeFrontier) -> list[int]:
    return [] if frontier.time is None else [frontier.time]


def _record(value: object, fields: tuple[str, ...], what: str) -> Mapping[str, object]:
    if not isinstance(value, Mapping) or set(value) != set(fields):
        raise MalformedMessage(f"{what} must be a record with fields {list(fields)}, got {value!r}")
    return value


def _long(value: object, what: str) -> int:
    if type(value) is not int or not -(2**63) <= value < 2**63:
        raise MalformedMessage(f"{what} must be a 64-bit integer, got {value!r}")
    return value


def _frontier(value: object, what: str) -> TimeFrontier:
    """IntoTime is totally ordered, so an antichain holds at most one time."""
    if not isinstance(value, list) or len(value) > 1:
        raise MalformedMessage(f"progress {what} must be an array of at most one time: {value!r}")
    return TimeFrontier.at(_long(value[0], what)) if value else TimeFrontier.empty()
