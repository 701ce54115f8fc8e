"""Many sources' keys and values decoded by one plan: every column sits in a typed slot.

Why: ``decode.decode_json`` reads one source's JSON with that source's schema, and Spark
takes a schema only as a literal. So a plan decoding hundreds of sources would carry
hundreds of schemas, and Catalyst's cost grows with every one of them. Here the plan
carries *slots* instead: a fixed number of columns of each column type a config may use
(``string_0``, ``int_0``, ``int_1``, ...), as many as the widest source needs. Which of
a source's columns sits in which slot, and what its messages say, comes in as data (a
``layout`` struct per row, joined by source), so the plan's size depends on the slots,
not on the sources.

Each field's JSON token is found by the field's name, read from the layout. Spark's own
JSON reader still decides what a token is worth as the field's type: the token is parsed
again, alone, as ``{"v": token}`` against the slot's type. The token's text comes from
two generic parses of the object: as ``map<string,string>``, which renders a non-string
token exactly as the reader hands it to a ``string`` column, and as
``map<string,variant>``, which alone tells a JSON string (``"12"``) from a number
(``12``).

Invariant: for every text, a source's slots hold what ``decode_json`` (and
``decode_key``) decodes with its schema, and the error column says the same words:
fields that appear twice take their last value, and the record is wrong when any
occurrence is (``tests/envelopes/test_slots.py`` checks it against ``decode_json``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    IntegerType,
    StringType,
    StructField,
    StructType,
)

from cdc_core.config.fields import COLUMN_TYPES
from cdc_core.envelopes.decode import (
    CONNECT_WRAPPER_FIELDS,
    CORRUPT_FIELD,
    NOT_AN_OBJECT,
    decode_error,
    error_column,
)
from cdc_core.envelopes.encodings import encoding_error_column

# The column types slots hold, in slot order: those a config's schema may use.
SLOT_TYPES: tuple[DataType, ...] = tuple(COLUMN_TYPES.values())
_TYPE_INDEX = {t.simpleString(): i for i, t in enumerate(SLOT_TYPES)}

# What a layout tells the plan about one source's key or value.
LAYOUT = StructType(
    [
        # Per slot (by its index in ``Slots.names``): the name of the field it holds, or
        # null when the source leaves the slot empty.
        StructField("names", ArrayType(StringType())),
        # Per slot: what the error says when the field's value has the wrong type.
        StructField("wrong", ArrayType(StringType())),
        # The slots of the schema's fields, in the schema's order.
        StructField("order", ArrayType(IntegerType())),
        # Slots whose field must be non-null, then slots whose field must be present.
        StructField("required", ArrayType(IntegerType())),
        StructField("present", ArrayType(IntegerType())),
        # Whether a Kafka Connect wrapper is unwrapped (the schema names neither key).
        StructField("wraps", BooleanType()),
        # For a key of one column: the text a bare scalar is wrapped in, ``{"name":``.
        StructField("opening", StringType()),
    ]
)

_STRING_MAP = "map<string,string>"
_VARIANT_MAP = "map<string,variant>"
_SHAPE = StructType([StructField(CORRUPT_FIELD, StringType())])
_LENIENT = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT_FIELD}


@dataclass(frozen=True)
class Slots:
    """How many slots of each of ``SLOT_TYPES`` a plan carries."""

    counts: tuple[int, ...]

    @classmethod
    def holding(cls, schemas: Sequence[StructType]) -> Slots:
        """Enough slots for every schema of ``schemas`` (refuses a type no slot holds)."""
        counts = [0] * len(SLOT_TYPES)
        for schema in schemas:
            for index, number in enumerate(_type_counts(schema)):
                counts[index] = max(counts[index], number)
        return cls(tuple(counts))

    @property
    def names(self) -> tuple[str, ...]:
        """Every slot's column name, in slot order."""
        return tuple(
            f"{data_type.typeName()}_{i}"
            for data_type, count in zip(SLOT_TYPES, self.counts, strict=True)
            for i in range(count)
        )

    @property
    def types(self) -> tuple[DataType, ...]:
        """Every slot's column type, in slot order."""
        return tuple(
            data_type
            for data_type, count in zip(SLOT_TYPES, self.counts, strict=True)
            for _ in range(count)
        )

    @property
    def schema(self) -> StructType:
        """The struct of every slot (all nullable: a source fills only its own)."""
        return StructType(
            [StructField(n, t) for n, t in zip(self.names, self.types, strict=True)]
        )

    def placed(self, schema: StructType) -> tuple[int, ...]:
        """The slot of each field of ``schema``: the i-th field of a type takes that
        type's i-th slot."""
        firsts = [sum(self.counts[:i]) for i in range(len(SLOT_TYPES))]
        seen = [0] * len(SLOT_TYPES)
        placed = []
        for field in schema.fields:
            index = _slot_type(field.dataType)
            if seen[index] >= self.counts[index]:
                raise ValueError(f"no {field.dataType.simpleString()} slot left for {field.name!r}")
            placed.append(firsts[index] + seen[index])
            seen[index] += 1
        return tuple(placed)

    def layout(
        self,
        schema: StructType,
        required: Sequence[str] | None = None,
        present: Sequence[str] = (),
        scalar_key: bool = False,
    ) -> dict[str, object]:
        """The ``LAYOUT`` row of a source's key or value with ``schema`` (``required``
        and ``present`` as ``decode_json`` takes them; ``scalar_key``: a key, which a
        bare JSON scalar may hold when it has one column)."""
        if required is None:
            required = [field.name for field in schema.fields if not field.nullable]
        placed = self.placed(schema)
        slot_of = {field.name: slot for field, slot in zip(schema.fields, placed, strict=True)}
        names: list[str | None] = [None] * len(self.names)
        wrong: list[str | None] = [None] * len(self.names)
        for field, slot in zip(schema.fields, placed, strict=True):
            names[slot] = field.name
            wrong[slot] = f"field {field.name!r} is not a valid {field.dataType.simpleString()}"
        one = scalar_key and len(schema.fields) == 1
        return {
            "names": names,
            "wrong": wrong,
            "order": list(placed),
            "required": [slot_of[name] for name in required],
            "present": [slot_of[name] for name in present if name not in required],
            "wraps": not set(CONNECT_WRAPPER_FIELDS) & set(schema.names),
            "opening": "{" + json.dumps(schema.names[0]) + ":" if one else None,
        }


def _slot_type(data_type: DataType) -> int:
    """The index in ``SLOT_TYPES`` of a column's type (ValueError: no slot holds it)."""
    index = _TYPE_INDEX.get(data_type.simpleString())
    if index is None:
        raise ValueError(f"no slot holds columns of type {data_type.simpleString()}")
    return index


def _type_counts(schema: StructType) -> list[int]:
    """How many columns of each slot type ``schema`` has."""
    counts = [0] * len(SLOT_TYPES)
    for field in schema.fields:
        counts[_slot_type(field.dataType)] += 1
    return counts


def unwrap_generic(df: DataFrame, text: str, layout: str, into: str) -> DataFrame:
    """Add ``into``: the ``payload`` of a Kafka Connect wrapper in ``text`` when the row's
    ``layout`` unwraps, else the text (``decode.unwrap_connect_envelope``'s rule)."""
    if encoding_error_column(text) in df.columns:
        df = df.withColumn(encoding_error_column(into), F.col(encoding_error_column(text)))
    raw = F.col(text)
    maybe = F.col(layout)["wraps"] & raw.contains('"schema"') & raw.contains('"payload"')
    scratch = f"_{into}_keys"
    keys = F.col(scratch)
    wrapped = F.array_contains(keys, "schema") & F.array_contains(keys, "payload")
    return (
        df.withColumn(scratch, F.when(maybe, F.json_object_keys(raw)))
        .withColumn(into, F.when(wrapped, F.get_json_object(raw, "$.payload")).otherwise(raw))
        .drop(scratch)
    )


def decode_slots(df: DataFrame, text: str, slots: Slots, layout: str, into: str) -> DataFrame:
    """Add ``into`` (a struct of ``slots`` decoded from JSON column ``text``, each row
    by its own ``layout`` column) and its error column, as ``decode_json`` adds them."""
    occurrences = f"_{into}_occurrences"
    tokens = F.zip_with(
        F.map_entries(F.from_json(F.col(text), _STRING_MAP, _LENIENT)),
        F.map_entries(F.from_json(F.col(text), _VARIANT_MAP, _LENIENT)),
        lambda s, v: F.struct(
            s["key"].alias("k"), s["value"].alias("s"), F.to_json(v["value"]).alias("v")
        ),
    )
    df = df.withColumn(occurrences, tokens)
    values, failed, textless = [], [], []
    names = F.col(layout)["names"]
    for slot, (name, data_type) in enumerate(zip(slots.names, slots.types, strict=True)):
        mine = F.filter(F.col(occurrences), _named(F.get(names, slot)))
        # Spark's reader keeps a field's last occurrence that reads as its type (one
        # that does not leaves the value before it), and any that does not spoils the row.
        checked = F.zip_with(
            mine,
            F.transform(mine, _reader(data_type)),
            lambda o, x: F.struct(x.alias("x"), (_token(o).isNotNull() & x.isNull()).alias("bad")),
        )
        last = F.try_element_at(mine, F.lit(-1))
        kept = F.try_element_at(F.filter(checked, lambda c: ~c["bad"]), F.lit(-1))
        values.append(kept["x"].alias(name))
        failed.append(F.coalesce(F.exists(checked, lambda c: c["bad"]), F.lit(False)))
        textless.append(last["s"].isNull())
    value = F.struct(*values)
    scratch = f"_{into}_typed"
    df = df.withColumn(scratch, F.struct(value.alias("value"), F.array(*failed).alias("failed"),
                                         F.array(*textless).alias("textless")))  # fmt: skip
    typed = F.col(scratch)
    error = _error(df, text, typed, layout, slots)
    return (
        df.withColumn(error_column(into), error)
        .withColumn(into, typed["value"])
        .drop(scratch, occurrences)
    )


def decode_key_slots(
    df: DataFrame, raw: str, slots: Slots, layout: str, into: str
) -> DataFrame:
    """Add ``into`` (the Kafka key in column ``raw`` decoded into ``slots``) and its error
    column, as ``decode.decode_key`` adds them: an object of the key's columns, or a bare
    JSON scalar when the row's ``layout`` has an ``opening`` (a key of one column)."""
    text = f"_{into}_text"
    df = unwrap_generic(df, raw, layout, text)
    opening = F.col(layout)["opening"]
    bare = opening.isNotNull() & ~F.col(text).rlike(r"^\s*\{")
    df = df.withColumn(text, F.when(bare, F.concat(opening, F.col(text), F.lit("}")))
                       .otherwise(F.col(text)))  # fmt: skip
    df = decode_slots(df, text, slots, layout, into).drop(text, encoding_error_column(text))
    error = F.col(error_column(into))
    not_json = F.lit("is neither a JSON object nor a JSON scalar")
    return df.withColumn(
        error_column(into),
        F.when(opening.isNotNull() & (error == NOT_AN_OBJECT), not_json).otherwise(error),
    )


def _named(name: Column) -> Callable[[Column], Column]:
    """Whether an occurrence is of the field ``name``."""
    return lambda occurrence: occurrence["k"] == name


def _reader(data_type: DataType) -> Callable[[Column], Column]:
    """An occurrence's value as a field of ``data_type``: a ``string`` field takes the
    token as the reader renders it, any other type reads the token."""
    if isinstance(data_type, StringType):
        return lambda occurrence: occurrence["s"]
    return lambda occurrence: _typed(_token(occurrence), data_type)


def _token(occurrence: Column) -> Column:
    """One occurrence's JSON token as text: a JSON string quoted (from the variant), any
    other token as the reader renders it, a non-finite number bare (``NaN``), null for
    ``null``."""
    s, v = occurrence["s"], occurrence["v"]
    return (
        F.when(s.isNull(), F.lit(None).cast("string"))
        .when(v.startswith('"') & (v != s), v)
        .when(s.startswith('"'), s.substr(F.lit(2), F.length(s) - 2))
        .otherwise(s)
    )


def _typed(token: Column, data_type: DataType) -> Column:
    """The token read as a field of ``data_type``, by Spark's JSON reader (null when it
    is not one)."""
    wrapped = F.concat(F.lit('{"v":'), token, F.lit("}"))
    return F.from_json(wrapped, StructType([StructField("v", data_type)]), _LENIENT)["v"]


def _error(df: DataFrame, text: str, typed: Column, layout: str, slots: Slots) -> Column:
    """Why the row's text does not decode under its layout (``decode_json``'s words)."""
    raw = F.col(text)
    spec = F.col(layout)
    failed, textless, value = typed["failed"], typed["textless"], typed["value"]
    nonnull = F.array(*[value[name].isNotNull() for name in slots.names])
    shape = F.from_json(raw, _SHAPE, _LENIENT)
    corrupt = shape[CORRUPT_FIELD].isNotNull() | F.exists(failed, lambda b: b)
    keys = F.json_object_keys(raw)
    missing_required = F.filter(
        spec["required"], lambda s: ~F.get(nonnull, s) & F.get(textless, s)
    )
    absent = F.filter(
        spec["present"],
        lambda s: ~F.get(nonnull, s)
        & ~F.coalesce(F.array_contains(keys, F.get(spec["names"], s)), F.lit(False)),
    )
    decoded = (
        ~corrupt
        & F.forall(spec["required"], lambda s: F.get(nonnull, s))
        & (F.size(absent) == 0)
    )
    wrong_types = F.array_join(
        F.transform(
            F.filter(spec["order"], lambda s: ~F.get(nonnull, s) & ~F.get(textless, s)),
            lambda s: F.get(spec["wrong"], s),
        ),
        "; ",
    )
    missing = F.array_join(
        F.transform(F.concat(missing_required, absent), lambda s: F.get(spec["names"], s)), ", "
    )
    not_object = keys.isNull() & (
        shape.isNull() | shape[CORRUPT_FIELD].isNotNull() | ~raw.rlike(r"^\s*\{")
    )
    encoded = encoding_error_column(text) in df.columns
    return decode_error(text, encoded, decoded, not_object, corrupt, wrong_types, missing)
