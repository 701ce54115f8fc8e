"""The data columns of a CDCv2 stream: which Spark types an encoding can carry, and
the strict check that turns an encoded row back into a ``Data`` tuple.

A value of the wrong type is a ``MalformedMessage``, never a silent null: a column
that quietly decodes to null would change the collection's contents.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pyspark.sql.types import (
    BooleanType,
    ByteType,
    DataType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
)

from cdc_core.cdcv2.model import Data, MalformedMessage


@dataclass(frozen=True)
class _Kind:
    avro: str
    python: type
    bits: int | None = None  # range of an integer column


_KINDS: dict[type[DataType], _Kind] = {
    BooleanType: _Kind("boolean", bool),
    ByteType: _Kind("int", int, 8),
    ShortType: _Kind("int", int, 16),
    IntegerType: _Kind("int", int, 32),
    LongType: _Kind("long", int, 64),
    FloatType: _Kind("float", float),
    DoubleType: _Kind("double", float),
    StringType: _Kind("string", str),
}


class UnsupportedColumnType(TypeError):
    """A data column whose Spark type no CDCv2 encoding of reclock carries."""


@dataclass(frozen=True)
class DataColumns:
    """The ordered data columns of a stream, built from a Spark ``StructType``."""

    schema: StructType

    def __post_init__(self) -> None:
        reserved = {"time", "diff"} & set(self.names)
        if reserved:
            raise UnsupportedColumnType(f"data columns may not be named {sorted(reserved)}")
        for field in self.schema.fields:
            if type(field.dataType) not in _KINDS:
                raise UnsupportedColumnType(
                    f"column {field.name!r} has type {field.dataType.simpleString()}; "
                    f"supported: {sorted(k().simpleString() for k in _KINDS)}"
                )

    @property
    def names(self) -> list[str]:
        """The data columns' names, in schema order (the order of a ``Data`` tuple)."""
        return [field.name for field in self.schema.fields]

    def avro_type(self, name: str) -> str:
        """The Avro type a column is encoded as."""
        return _KINDS[type(self.schema[name].dataType)].avro

    def to_record(self, data: Data) -> dict[str, object]:
        """A ``Data`` tuple as a record keyed by column name (the encoded row)."""
        return dict(zip(self.names, data, strict=True))

    def from_record(self, record: object, unwrap_unions: bool = False) -> Data:
        """The ``Data`` tuple of an encoded row; ``unwrap_unions`` accepts the Avro-JSON
        spelling of nullable values (``{"long": 5}``)."""
        if not isinstance(record, Mapping):
            raise MalformedMessage(f"update data must be a record, got {record!r}")
        if set(record) != set(self.names):
            raise MalformedMessage(
                f"update data has columns {sorted(record)}, expected {sorted(self.names)}"
            )
        return tuple(
            self._check(field.name, record[field.name], unwrap_unions)
            for field in self.schema.fields
        )

    def _check(self, name: str, value: object, unwrap_unions: bool) -> object:
        field = self.schema[name]
        kind = _KINDS[type(field.dataType)]
        if unwrap_unions and isinstance(value, Mapping) and list(value) == [kind.avro]:
            value = value[kind.avro]
        if value is None:
            if not field.nullable:
                raise MalformedMessage(f"column {name!r} is not nullable")
            return None
        if kind.python is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if type(value) is not kind.python:
            raise MalformedMessage(f"column {name!r} expects {kind.avro}, got {value!r}")
        if kind.bits is not None and not -(2 ** (kind.bits - 1)) <= value < 2 ** (kind.bits - 1):
            raise MalformedMessage(f"column {name!r} value {value} is out of range")
        return value
