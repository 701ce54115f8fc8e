"""What reclock tells a metastore of a table, what a metastore does with it, and how it
fails."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

import pyarrow as pa

from cdc_core.shard import ShardStorageError
from cdc_core.storage import from_spark_path


class CatalogUnreachable(ShardStorageError):
    """The metastore did not answer (or refused): nothing was registered, and a run that
    meets it before writing writes nothing."""

    def __init__(self, message: str) -> None:
        super().__init__(message, definitely_not_written=True)


class CatalogClash(RuntimeError):
    """A name the deployment would register is taken by a table at another location
    (another deployment's, or a table the user made): it is left as it is."""


class CatalogUnfit(RuntimeError):
    """The Spark session cannot register in a Hive metastore: it was started without one
    (a Connect server, or a session started before the config was read)."""


@dataclass(frozen=True)
class CatalogTable:
    """What a metastore is told of one table: its name in the database, its location (as
    the table's own storage names it: a local path or an ``s3://`` URL), description,
    properties and columns (name and Hive type, for catalogs that keep them)."""

    name: str
    location: str
    description: str
    properties: Mapping[str, str]
    columns: tuple[tuple[str, str], ...] = field(default=())


class Metastore(Protocol):
    """One database of a metastore, as reclock registers in it."""

    database: str

    def reach(self) -> None:
        """Make sure the metastore answers and the database exists (CatalogUnreachable)."""

    def locations(self, names: list[str]) -> dict[str, str]:
        """The location each of ``names`` that is registered points at (normalized as
        ``CatalogTable.location``)."""

    def create(self, table: CatalogTable) -> None:
        """Register ``table`` under its name, which ``locations`` found free."""

    def update(self, table: CatalogTable) -> bool:
        """Bring the registration of ``table`` (already at its location) up to date;
        whether anything had to change."""

    def drop(self, name: str) -> None:
        """Remove the registration ``name`` (never the table's files)."""


def same_location(registered: str, location: str) -> bool:
    """Whether a metastore's ``registered`` location names ``location`` (Spark and Hive
    report ``file:/...`` and ``s3a://...`` for a local path and an ``s3://`` URL)."""
    return from_spark_path(registered).rstrip("/") == from_spark_path(location).rstrip("/")


_SIMPLE_TYPES = {
    pa.int8(): "tinyint", pa.int16(): "smallint", pa.int32(): "int", pa.int64(): "bigint",
    pa.float32(): "float", pa.float64(): "double", pa.bool_(): "boolean",
    pa.string(): "string", pa.large_string(): "string", pa.string_view(): "string",
    pa.binary(): "binary", pa.large_binary(): "binary", pa.binary_view(): "binary",
    pa.date32(): "date",
}  # fmt: skip


def hive_type(kind: pa.DataType) -> str:
    """The Hive type name of an Arrow type of a Delta schema (``bigint``,
    ``array<struct<key:string,value:binary>>``)."""
    if kind in _SIMPLE_TYPES:
        return _SIMPLE_TYPES[kind]
    if pa.types.is_timestamp(kind):
        return "timestamp"
    if pa.types.is_decimal(kind):
        return f"decimal({kind.precision},{kind.scale})"
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_list_view(kind):
        return f"array<{hive_type(kind.value_type)}>"
    if pa.types.is_map(kind):
        return f"map<{hive_type(kind.key_type)},{hive_type(kind.item_type)}>"
    if pa.types.is_struct(kind):
        fields = ",".join(f"{f.name}:{hive_type(f.type)}" for f in kind)
        return f"struct<{fields}>"
    raise TypeError(f"no Hive type for {kind}")


def hive_columns(schema: pa.Schema) -> tuple[tuple[str, str], ...]:
    """A table's columns as (name, Hive type) pairs, in order."""
    return tuple((field.name, hive_type(field.type)) for field in schema)
