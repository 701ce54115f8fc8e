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

from pyspark.sql.types import StructType

from cdc_core.config import SourceConfig
from cdc_core.envelopes import appended_value_columns, check_fingerprint, fingerprint
from cdc_core.schemas import history_schema
from cdc_core.shard.delta_io import check_table_features, nullable_delta_schema
from cdc_core.shard.log import add_missing_columns, existing_table, location_failure
from cdc_core.storage import LocationLike, files, located

FINGERPRINT_FILE = "_reclock_fingerprint.json"


def settle_schema(root: LocationLike, source: SourceConfig) -> list[str]:
    """Make the outputs under ``root`` fit ``source``'s config: record its fingerprint on
    first use, add appended value columns, refuse any other drift (ConfigDriftError).
    Returns the names of the columns added to the tables."""
    root = str(located(root))
    path = files.join(root, "changes", FINGERPRINT_FILE)
    current = fingerprint(
        source.envelope, source.key_schema, source.value_schema, source.include
    )
    stored = files.read_bytes(path).decode() if files.exists(path) else None
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
            _add_columns(files.join(root, table), schema)
    # Replaced whole, never seen half-written by a concurrent writer of the same one.
    files.replace_file(path, current.encode())
    return names


def _add_columns(location: str, schema: StructType) -> None:
    """Add to the table at ``location`` (if there is one) the columns of ``schema`` it lacks."""
    with location_failure(f"opening {location}"):
        table = existing_table(location)
    if table is None:
        return
    check_table_features(table, location)
    add_missing_columns(table, location, nullable_delta_schema(schema))
