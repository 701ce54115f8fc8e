"""Reading a lake's tables back for comparisons between two lakes built from the same dumps."""

from __future__ import annotations

from collections import Counter

from deltalake import DeltaTable

from cdc_core.config import Config


def table_rows(config: Config, source: str, table: str) -> Counter:
    """A table's rows as a multiset, with the lake's own folder (in error file names)
    replaced, so lakes built in different folders compare equal when their data is."""
    root = str(config.lake.parent)

    def portable(value: object) -> object:
        return value.replace(root, "<root>") if isinstance(value, str) else value

    rows = DeltaTable(str(config.lake / source / table)).to_pyarrow_table().to_pylist()
    return Counter(tuple((name, portable(v)) for name, v in sorted(row.items())) for row in rows)
