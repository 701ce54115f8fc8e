"""The Avro schemas of a source's keys and values, found without a registry server.

A schema comes from a schema file (``.avsc``) with the id the registry gave it, or from a
subject version in a local schema folder laid out as the registry's REST API answers:
``<folder>/<subject>/<version>.json`` holding ``{"id": 7, "schema": "<schema JSON text>"}``
(what ``GET /subjects/<subject>/versions/<version>`` returns). Records name the schema they
were written with by that id, so a record with another id is refused, never guessed at.

Invariant: a schema loaded here parses, and every declared column is a field of its
record (of its ``after`` record for the Debezium envelopes) with a type that decodes into
the column's type, so decoding can only fail on a record's bytes, never on the config.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fastavro

LATEST = "latest"

# Column type -> the Avro types (with their logical type, if any) that decode into it.
_COMPATIBLE: dict[str, set[tuple[str, str | None]]] = {
    "string": {("string", None), ("enum", None)},
    "int": {("int", None)},
    "bigint": {("long", None), ("int", None)},
    "double": {("double", None), ("float", None)},
    "boolean": {("boolean", None)},
    "bytes": {("bytes", None), ("fixed", None)},
    "timestamp": {("long", "timestamp-millis"), ("long", "timestamp-micros")},
    "date": {("int", "date")},
}


class AvroSchemaError(ValueError):
    """A schema that cannot be found or read, or that does not fit the declared columns."""


@dataclass(frozen=True)
class AvroSchema:
    """A writer schema (parsed JSON), the registry id records carry, and where it came from."""

    schema_id: int
    schema: Any
    origin: str

    @property
    def is_record(self) -> bool:
        """True for a record schema (its fields fill the columns by name)."""
        return isinstance(self.schema, dict) and self.schema.get("type") == "record"


def load_schema_file(path: Path, schema_id: int) -> AvroSchema:
    """The schema in an ``.avsc`` file, which records name by ``schema_id``.

    The file may lie anywhere, inside the config's folder or not, as the lake and the
    landing zone may: the config is trusted input (whoever writes it already chooses
    where reclock reads and writes, and its Spark settings), so confining this one path
    would protect nothing. Dumps, written by whoever may write the landing zone, are the
    untrusted input, and nothing in a dump names a file to read."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise AvroSchemaError(f"cannot read {path}: {error.strerror or error}") from None
    return _parsed(text, schema_id, str(path))


def load_subject(folder: Path, subject: str, version: int | str) -> AvroSchema:
    """Version ``version`` (a number, or ``latest``: the highest) of ``subject`` in the
    schema folder. A subject names one folder directly in it: a subject that would
    climb out (``..``, a ``/``) is refused, so a config points at schemas only through
    ``schema_folder`` or a ``file``."""
    if subject in ("", ".", "..") or "/" in subject or "\\" in subject or "\0" in subject:
        raise AvroSchemaError(
            f"subject {subject!r} is not a folder name in {folder} (no /, \\, . or ..)"
        )
    subject_folder = Path(folder) / subject
    if version == LATEST:
        versions = sorted(
            int(p.stem) for p in subject_folder.glob("*.json") if p.stem.isdigit()
        )
        if not versions:
            raise AvroSchemaError(f"no version of subject {subject!r} in {subject_folder}")
        version = versions[-1]
    path = subject_folder / f"{version}.json"
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise AvroSchemaError(f"cannot read {path}: {error.strerror or error}") from None
    except json.JSONDecodeError as error:
        raise AvroSchemaError(f"{path} is not JSON: {error}") from None
    if (
        not isinstance(entry, dict)
        or not isinstance(entry.get("id"), int)
        or not isinstance(entry.get("schema"), str)
    ):
        raise AvroSchemaError(f'{path} must hold {{"id": <int>, "schema": "<schema JSON>"}}')
    return _parsed(entry["schema"], entry["id"], f"{subject} version {version}")


def _parsed(text: str, schema_id: int, origin: str) -> AvroSchema:
    try:
        schema = json.loads(text)
        fastavro.parse_schema(schema)
    except (json.JSONDecodeError, fastavro.schema.SchemaParseException, ValueError,
            TypeError, KeyError) as error:  # fmt: skip
        raise AvroSchemaError(f"{origin} is not a valid Avro schema: {error}") from None
    return AvroSchema(schema_id, schema, origin)


def column_problems(
    schema: AvroSchema, columns: Mapping[str, str], *, after_image: bool = False
) -> dict[str, str]:
    """``column -> problem`` for each declared column the schema cannot fill: the record's
    fields (the ``after`` record's, for ``after_image``) by name; a non-record schema fills
    exactly one column."""
    record = schema.schema
    if after_image:
        after = _field_types(record).get("after")
        record = _non_null(after) if after is not None else None
        if not (isinstance(record, dict) and record.get("type") == "record"):
            return {
                name: f"{schema.origin} has no record field 'after' (a Debezium event's)"
                for name in columns
            }
    if not (isinstance(record, dict) and record.get("type") == "record"):
        if len(columns) != 1:
            return {
                name: f"{schema.origin} is not a record, so it fills one column only"
                for name in columns
            }
        [(name, kind)] = columns.items()
        return {} if _fits(record, kind) else {name: _mismatch(schema, record, kind)}
    fields = _field_types(record)
    problems = {}
    for name, kind in columns.items():
        if name not in fields:
            problems[name] = f"is not a field of {schema.origin} (fields: {', '.join(fields)})"
        elif not _fits(fields[name], kind):
            problems[name] = _mismatch(schema, fields[name], kind)
    return problems


def _field_types(record: Any) -> dict[str, Any]:
    if not isinstance(record, dict):
        return {}
    return {f["name"]: f["type"] for f in record.get("fields", [])}


def _non_null(avro_type: Any) -> Any:
    """The one non-null branch of an optional type (the type itself if not a union)."""
    if isinstance(avro_type, list):
        branches = [branch for branch in avro_type if branch != "null"]
        return branches[0] if len(branches) == 1 else avro_type
    return avro_type


def _fits(avro_type: Any, kind: str) -> bool:
    avro_type = _non_null(avro_type)
    if isinstance(avro_type, list):
        return False
    if isinstance(avro_type, dict):
        key = (avro_type.get("type"), avro_type.get("logicalType"))
    else:
        key = (avro_type, None)
    return key in _COMPATIBLE[kind]


def _mismatch(schema: AvroSchema, avro_type: Any, kind: str) -> str:
    return f"type {kind} cannot hold {json.dumps(avro_type)} of {schema.origin}"
