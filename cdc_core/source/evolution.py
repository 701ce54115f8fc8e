"""Schema evolution of a source's values, judged before any of its tables is opened.

The fingerprint of what shapes the outputs (envelope, key, value schema) is stored in the
``changes`` table's folder. When the config matches it, nothing happens; when the config
only appends nullable value columns, every table that holds values (``changes``, ``state``,
``history``) gets them as new Delta columns (older rows read null) and then the fingerprint
is replaced; any other change is refused with ConfigDriftError, naming it and what the user
can do (``reclock rebuild``, or a new source name).

Invariant: the stored fingerprint changes only after every table holds its columns, so a
crash in between is finished by the next open (a column a table already has is skipped),
and no table ever holds rows of two meanings.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from deltalake import DeltaTable
from pyspark.sql.types import StructType

from cdc_core.config import SourceConfig
from cdc_core.envelopes import appended_value_columns, check_fingerprint, fingerprint
from cdc_core.schemas import history_schema
from cdc_core.shard.delta_io import check_table_features, nullable_delta_schema
from cdc_core.shard.log import add_missing_columns, location_failure

FINGERPRINT_FILE = "_reclock_fingerprint.json"


def settle_schema(root: Path, source: SourceConfig) -> list[str]:
    """Make the outputs under ``root`` fit ``source``'s config: record its fingerprint on
    first use, add appended value columns, refuse any other drift (ConfigDriftError).
    Returns the names of the columns added to the tables."""
    path = Path(root) / "changes" / FINGERPRINT_FILE
    current = fingerprint(
        source.envelope, source.key_schema, source.value_schema, source.include
    )
    stored = path.read_text() if path.exists() else None
    if stored == current:
        return []
    added = () if stored is None else appended_value_columns(stored, current)
    if added is None:
        check_fingerprint(stored, current)  # raises, saying what changed and what to do
    names = [field.name for field in added or ()]
    if names:
        output = source.output_schema
        tables = {"changes": output, "state": output, "history": history_schema(output)}
        for table, schema in tables.items():
            _add_columns(Path(root) / table, schema)
    _record(path, current)
    return names


def _add_columns(path: Path, schema: StructType) -> None:
    """Add to the table at ``path`` (if there is one) the columns of ``schema`` it lacks."""
    location = str(path)
    if not DeltaTable.is_deltatable(location):
        return
    with location_failure(f"opening {location}"):
        table = DeltaTable(location)
    check_table_features(table, location)
    add_missing_columns(table, location, nullable_delta_schema(schema))


def _record(path: Path, text: str) -> None:
    """Write the fingerprint atomically (a temporary of its own, then a rename), so a
    concurrent writer of the same fingerprint never meets a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    temporary.write_text(text)
    temporary.replace(path)
