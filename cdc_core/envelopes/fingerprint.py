"""Config drift: a stable fingerprint of what shapes a source's outputs, stored with them.

Changing the envelope, the key columns or a schema under existing outputs would mix rows of
two meanings (and retract rows by the wrong key), so a run whose fingerprint differs from
the stored one is refused, with what changed and what the user can do. The one drift that
keeps every row's meaning, nullable value columns appended to the value schema (older rows
read null), is told apart by ``appended_value_columns`` so the outputs can evolve instead.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from pyspark.sql.types import StructField, StructType

FORMAT_VERSION = 1
# What no evolution may change: the fingerprint's format, the envelope and the key.
FIXED = ("version", "envelope", "key_columns", "key_schema")
DEFAULT_RESET_HINT = (
    "rebuild the source: `reclock rebuild --config FILE --source NAME` builds new tables "
    "from its dumps beside the old ones and swaps them in once they are complete; or give "
    "the source a new name, so its tables start anew beside the old ones (only nullable "
    "value columns added at the end of `value` evolve the tables in place)"
)


class ConfigDriftError(RuntimeError):
    """A source's configuration no longer matches the one its outputs were written with."""


def fingerprint(
    envelope: str,
    key_schema: StructType,
    value_schema: StructType,
    include: Sequence[str] = (),
) -> str:
    """A stable text (canonical JSON) naming the envelope, key columns, both schemas and
    the included metadata columns (named only when there are some, so fingerprints of
    sources without them stay as they were)."""
    included = {"include": [str(field) for field in include]} if include else {}
    return json.dumps(
        {
            "version": FORMAT_VERSION,
            "envelope": envelope,
            "key_columns": key_schema.names,
            "key_schema": key_schema.jsonValue(),
            "value_schema": value_schema.jsonValue(),
            **included,
        },
        sort_keys=True,
        separators=(",", ":"),
    )


def describe_field(field: StructField) -> str:
    """A column's type as stored in a fingerprint (``bigint not null``)."""
    nullable = "" if field.nullable else " not null"
    return f"{field.dataType.simpleString()}{nullable}"


def schema_drift(label: str, old: StructType, new: StructType) -> list[str]:
    """What changed from ``old`` to ``new`` columns, one line per change (empty: compatible)."""
    old_fields = {f.name: f for f in old.fields}
    new_fields = {f.name: f for f in new.fields}
    changes = [f"{label} column {name!r} removed" for name in old_fields if name not in new_fields]
    changes += [
        f"{label} column {name!r} added ({describe_field(field)})"
        for name, field in new_fields.items()
        if name not in old_fields
    ]
    changes += [
        f"{label} column {name!r} changed from {describe_field(old_fields[name])} "
        f"to {describe_field(field)}"
        for name, field in new_fields.items()
        if name in old_fields and describe_field(old_fields[name]) != describe_field(field)
    ]
    if not changes and old.names != new.names:
        changes.append(f"{label} columns reordered from {old.names} to {new.names}")
    return changes


def describe_drift(old: str, new: str) -> str:
    """What changed between two fingerprints, in words ("no change" when equal)."""
    try:
        before, after = json.loads(old), json.loads(new)
        changes = []
        if before["envelope"] != after["envelope"]:
            changes.append(f"envelope changed from {before['envelope']} to {after['envelope']}")
        if before["key_columns"] != after["key_columns"]:
            changes.append(
                f"key columns changed from {before['key_columns']} to {after['key_columns']}"
            )
        if before.get("include", []) != after.get("include", []):
            changes.append(
                f"include changed from {before.get('include', [])} to {after.get('include', [])}"
            )
        for label in ("key", "value"):
            changes += schema_drift(
                label,
                StructType.fromJson(before[f"{label}_schema"]),
                StructType.fromJson(after[f"{label}_schema"]),
            )
    except (ValueError, KeyError, TypeError) as error:
        return f"the stored fingerprint is unreadable ({error})"
    if not changes and old != new:
        changes.append(f"fingerprint changed from {old} to {new}")
    return "; ".join(changes) or "no change"


def appended_value_columns(stored: str, current: str) -> tuple[StructField, ...] | None:
    """The value columns ``current`` adds when its only change from ``stored`` is nullable
    value columns appended after the stored ones (empty when nothing changed); None for any
    other change, or an unreadable fingerprint."""
    try:
        before, after = json.loads(stored), json.loads(current)
        same = all(before[k] == after[k] for k in FIXED)
        same = same and before.get("include", []) == after.get("include", [])
        old = StructType.fromJson(before["value_schema"]).fields
        new = StructType.fromJson(after["value_schema"]).fields
    except (ValueError, KeyError, TypeError):
        return None
    added = tuple(new[len(old) :])
    if not same or new[: len(old)] != old or not all(f.nullable for f in added):
        return None
    return added


def check_fingerprint(
    stored: str | None, current: str, *, reset_hint: str = DEFAULT_RESET_HINT
) -> None:
    """Raise ConfigDriftError unless the outputs are new (``stored`` is None) or were
    written with the ``current`` configuration."""
    if stored is None or stored == current:
        return
    raise ConfigDriftError(
        f"configuration changed since the outputs were written: {describe_drift(stored, current)}. "
        f"Nothing was written. To go on with the existing outputs, restore the previous "
        f"configuration; to use the new one, {reset_hint}."
    )
