"""The data columns of a CDCv2 stream: which Spark types an encoding can carry, and
the strict check that turns an encoded row back into a ``Data`` tuple.

A value of the wrong type is a ``MalformedMessage``, never a silent null: a column
that quietly decodes to null would change the collection's contents.

Timestamps, dates and bytes are Avro logical and primitive types (``timestamp-micros``,
``date``, ``bytes``). In JSON they are spelled as Avro-JSON spells them, the spelling of
Materialize's CDC tests: a timestamp as epoch microseconds, a date as days since the
epoch, bytes as a string of one code point (0-255) per byte. So one JSON line reads the
same with and without Avro-JSON's union wrappers (``{"long": 1767225600000000}``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
    TimestampType,
)

from cdc_core.cdcv2.model import Data, MalformedMessage

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_DAY = _EPOCH.date()


def _micros(value: datetime) -> int:
    return (value - _EPOCH) // timedelta(microseconds=1)


def _from_micros(value: int) -> datetime:
    return _EPOCH + timedelta(microseconds=value)


def _days(value: date) -> int:
    return (value - _EPOCH_DAY).days


def _from_days(value: int) -> date:
    return _EPOCH_DAY + timedelta(days=value)


@dataclass(frozen=True)
class _Spelling:
    """How a column's values are spelled in JSON: the JSON type and both conversions."""

    json: type
    encode: Callable[[Any], object]
    decode: Callable[[Any], object]


_SPELLINGS: dict[type[DataType], _Spelling] = {
    TimestampType: _Spelling(int, _micros, _from_micros),
    DateType: _Spelling(int, _days, _from_days),
    BinaryType: _Spelling(
        str,
        lambda value: value.decode("latin-1"),
        lambda value: value.encode("latin-1"),
    ),
}


@dataclass(frozen=True)
class _Kind:
    avro: str | dict[str, str]
    python: type
    bits: int | None = None  # range of an integer column

    @property
    def branch(self) -> str:
        """The name of the type's branch in an Avro union (a logical type's underlying one)."""
        return self.avro if isinstance(self.avro, str) else self.avro["type"]


_KINDS: dict[type[DataType], _Kind] = {
    BooleanType: _Kind("boolean", bool),
    ByteType: _Kind("int", int, 8),
    ShortType: _Kind("int", int, 16),
    IntegerType: _Kind("int", int, 32),
    LongType: _Kind("long", int, 64),
    FloatType: _Kind("float", float),
    DoubleType: _Kind("double", float),
    StringType: _Kind("string", str),
    TimestampType: _Kind({"type": "long", "logicalType": "timestamp-micros"}, datetime),
    DateType: _Kind({"type": "int", "logicalType": "date"}, date),
    BinaryType: _Kind("bytes", bytes),
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

    def avro_type(self, name: str) -> str | dict[str, str]:
        """The Avro type a column is encoded as."""
        return _KINDS[type(self.schema[name].dataType)].avro

    def to_record(self, data: Data, json: bool = False) -> dict[str, object]:
        """A ``Data`` tuple as a record keyed by column name (the encoded row); ``json``:
        values spelled for JSON (see the module docstring)."""
        if json:
            data = tuple(
                value if value is None or spelling is None else spelling.encode(value)
                for value, spelling in zip(data, self._spellings, strict=True)
            )
        return dict(zip(self.names, data, strict=True))

    @functools.cached_property
    def _spellings(self) -> list[_Spelling | None]:
        """Per column, its JSON spelling (None: the JSON value is the value itself)."""
        return [_SPELLINGS.get(type(field.dataType)) for field in self.schema.fields]

    def from_record(self, record: object, unwrap_unions: bool = False, json: bool = False) -> Data:
        """The ``Data`` tuple of an encoded row; ``unwrap_unions`` accepts the Avro-JSON
        spelling of nullable values (``{"long": 5}``), ``json`` the JSON spelling of
        timestamps, dates and bytes."""
        if not isinstance(record, Mapping):
            raise MalformedMessage(f"update data must be a record, got {record!r}")
        if set(record) != set(self.names):
            raise MalformedMessage(
                f"update data has columns {sorted(record)}, expected {sorted(self.names)}"
            )
        return tuple(
            self._check(field.name, record[field.name], unwrap_unions, json)
            for field in self.schema.fields
        )

    def _check(self, name: str, value: object, unwrap_unions: bool, json: bool) -> object:
        field = self.schema[name]
        kind = _KINDS[type(field.dataType)]
        if unwrap_unions and isinstance(value, Mapping) and list(value) == [kind.branch]:
            value = value[kind.branch]
        spelling = _SPELLINGS.get(type(field.dataType)) if json else None
        if spelling is not None and value is not None:
            value = self._spelled(name, value, spelling, kind)
        if value is None:
            if not field.nullable:
                raise MalformedMessage(f"column {name!r} is not nullable")
            return None
        if kind.python is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if type(value) is not kind.python:
            raise MalformedMessage(f"column {name!r} expects {kind.branch}, got {value!r}")
        if kind.bits is not None and not -(2 ** (kind.bits - 1)) <= value < 2 ** (kind.bits - 1):
            raise MalformedMessage(f"column {name!r} value {value} is out of range")
        return value

    @staticmethod
    def _spelled(name: str, value: object, spelling: _Spelling, kind: _Kind) -> object:
        """The value a JSON spelling stands for; a wrong spelling is ``MalformedMessage``."""
        if type(value) is not spelling.json:
            raise MalformedMessage(
                f"column {name!r} expects {kind.branch} ({kind.python.__name__} in JSON as "
                f"{spelling.json.__name__}), got {value!r}"
            )
        try:
            return spelling.decode(value)
        except (OverflowError, UnicodeEncodeError) as error:
            raise MalformedMessage(f"column {name!r} value {value!r}: {error}") from None
