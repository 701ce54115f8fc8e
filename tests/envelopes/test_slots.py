"""Property: every source's keys and values decoded together into typed slots equal what
each source's own schema decodes (``decode_json``, ``decode_key``): the same values, down
to a double's sign, and the same error words, for texts good, odd and broken."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession
from pyspark.sql.types import (
    DoubleType,
    IntegerType,
    StringType,
    StructField,
    StructType,
)

from cdc_core.envelopes.decode import decode_json, decode_key, unwrap_connect_envelope
from cdc_core.envelopes.slots import (
    LAYOUT,
    SLOT_TYPES,
    Slots,
    decode_key_slots,
    decode_slots,
    unwrap_generic,
)
from tests.spark_examples import SPARK_EXAMPLES

NAMES = ("a", "id", "x y", "it's", 'q"t', "é", "schema", "payload", "n.m")
# JSON tokens as text: every type's good values, and values of every other kind.
TOKENS = (
    "0", "-5", "2147483648", "9223372036854775808", "1.0", "-0.0", "1.5", "1e3", "1e400",
    "Infinity", "-Infinity", "NaN", "true", "false", "null", '"12"', '"abc"', '"Infinity"',
    '"2024-01-01T00:00:00Z"', '"2024-02-03"', '"YWJj"', '"true"', '"qu\\"ote"', '"\\u00fc"',
    "[1, 2]", '{"x": 1.50}', "1700000000",
)  # fmt: skip
BROKEN = ('{"a":', "[1]", '[{"a": 1}]', '"s"', "null", "{'a': 1}", '{"a": 1} x', "{}", "",
          '{"a": 1,}', "7", "  {\"a\": 2}")  # fmt: skip

schemas = st.lists(
    st.tuples(st.sampled_from(NAMES), st.sampled_from(SLOT_TYPES), st.booleans()),
    min_size=1, max_size=4, unique_by=lambda f: f[0],
).map(lambda fields: StructType([StructField(n, t, nullable) for n, t, nullable in fields]))


@st.composite
def texts(draw, schema: StructType) -> str | None:
    """A text a source of ``schema`` may meet: an object of some of its fields (some
    twice) and others, maybe in a Connect wrapper, a bare token, or something broken."""
    kind = draw(st.sampled_from(("object", "object", "object", "wrapped", "bare", "broken")))
    if kind == "broken":
        return draw(st.one_of(st.none(), st.sampled_from(BROKEN)))
    if kind == "bare":
        return draw(st.sampled_from(TOKENS))
    names = draw(st.lists(st.sampled_from([*schema.names, "other"]), max_size=5))
    body = "{" + ", ".join(f"{json.dumps(n)}: {draw(st.sampled_from(TOKENS))}" for n in names) + "}"
    return '{"schema": {}, "payload": ' + body + "}" if kind == "wrapped" else body


@st.composite
def sources(draw) -> list[tuple[StructType, list[str | None]]]:
    """Three sources: each a schema and the texts it meets."""
    found = []
    for _ in range(3):
        schema = draw(schemas)
        found.append((schema, draw(st.lists(texts(schema), min_size=1, max_size=12))))
    return found


def _shown(value: object) -> str:
    """A value as compared: ``repr`` tells -0.0 from 0.0 and NaN from null."""
    return repr(value)


def _check(spark: SparkSession, found: list[tuple[StructType, list[str | None]]],
           key: bool) -> None:  # fmt: skip
    slots = Slots.holding([schema for schema, _ in found])
    rows = []
    for source, (schema, lines) in enumerate(found):
        layout = (
            slots.layout(schema, required=(), present=schema.names, scalar_key=True)
            if key
            else slots.layout(schema)
        )
        rows += [(source, i, line, layout) for i, line in enumerate(lines)]
    frame = spark.createDataFrame(rows, StructType([
        StructField("source", IntegerType()), StructField("i", IntegerType()),
        StructField("text", StringType()), StructField("layout", LAYOUT),
    ]))  # fmt: skip
    if key:
        together = decode_key_slots(frame, "text", slots, "layout", "v")
    else:
        together = decode_slots(unwrap_generic(frame, "text", "layout", "t"), "t", slots,
                                "layout", "v")  # fmt: skip
    got = {(r["source"], r["i"]): r for r in together.collect()}
    for source, (schema, lines) in enumerate(found):
        alone = spark.createDataFrame([(i, line) for i, line in enumerate(lines)],
                                      "i int, text string")  # fmt: skip
        if key:
            alone = decode_key(alone, "text", schema, "v")
        else:
            alone = decode_json(unwrap_connect_envelope(alone, "text", schema, "t"), "t",
                                schema, "v")  # fmt: skip
        placed = slots.placed(schema)
        for want in alone.collect():
            row = got[(source, want["i"])]
            shown = [_shown(row["v"][slots.names[slot]]) for slot in placed]
            expected = [_shown(want["v"][name]) for name in schema.names]
            assert (row["v_error"], shown) == (want["v_error"], expected), (schema, want["text"])


@settings(SPARK_EXAMPLES, max_examples=6)  # 100 each passed when the module was written
@given(found=sources())
def test_values_decoded_in_slots_equal_each_sources_own_decode(
    spark: SparkSession, found: list[tuple[StructType, list[str | None]]]
) -> None:
    _check(spark, found, key=False)


@settings(SPARK_EXAMPLES, max_examples=6)  # 100 each passed when the module was written
@given(found=sources())
def test_keys_decoded_in_slots_equal_each_sources_own_decode(
    spark: SparkSession, found: list[tuple[StructType, list[str | None]]]
) -> None:
    _check(spark, found, key=True)


def test_a_slot_holds_the_ith_column_of_its_type_and_refuses_other_types() -> None:
    first = StructType([StructField("a", IntegerType()), StructField("b", StringType()),
                        StructField("c", IntegerType())])  # fmt: skip
    second = StructType([StructField("d", IntegerType()), StructField("e", DoubleType())])
    slots = Slots.holding([first, second])
    assert slots.names == ("string_0", "integer_0", "integer_1", "double_0")
    assert [slots.names[s] for s in slots.placed(first)] == ["integer_0", "string_0", "integer_1"]
    assert [slots.names[s] for s in slots.placed(second)] == ["integer_0", "double_0"]
    nested = StructType([StructField("n", StructType([StructField("x", IntegerType())]))])
    try:
        Slots.holding([nested])
    except ValueError as refused:
        assert "struct<x:int>" in str(refused)
    else:
        raise AssertionError("a struct column found a slot")
    layout = slots.layout(first)
    assert layout["order"] == [1, 0, 2]
