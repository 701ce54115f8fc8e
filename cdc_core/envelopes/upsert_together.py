"""The UPSERT envelope applied to many sources' records by one plan.

Why: ``apply_upsert`` builds a plan around one source's key and value schemas, and a
window of hundreds of sources would build, analyze and run hundreds of them for a few
records each. Here every source's records go through one plan whose shape does not
depend on the sources: their keys and values are decoded into typed slots
(``envelopes.slots``), each source's layout joined in as data, and ``apply_commands``
runs once over all of them with the source as part of every slot and key.

A row of the joint output holds ``_source``, then the key slots (``k_`` names), then the
value slots (``v_`` names); ``UpsertsTogether.own`` maps it back to a source's columns.

Invariant: each source's changes and errors equal what ``apply_upsert`` gives for its
records alone, from the same prior contents (``tests/envelopes/test_upsert_together.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, StringType, StructField, StructType

from cdc_core.envelopes.batch import EnvelopeBatch
from cdc_core.envelopes.decode import error_column, key_slot
from cdc_core.envelopes.result import EnvelopeResult, column
from cdc_core.envelopes.slots import (
    LAYOUT,
    Slots,
    decode_key_slots,
    decode_slots,
    unwrap_generic,
)
from cdc_core.envelopes.upsert import Together, apply_commands, key_problem, value_problem

SOURCE = "_source"  # the column naming each row's source
KEY_PREFIX, VALUE_PREFIX = "k_", "v_"
_SOURCE_FIELD = StructField(SOURCE, IntegerType())
_LAYOUTS = StructType([
    _SOURCE_FIELD, StructField("topic", StringType()),
    StructField("key_layout", LAYOUT), StructField("value_layout", LAYOUT),
])  # fmt: skip


@dataclass(frozen=True)
class UpsertSource:
    """One UPSERT source as the envelope sees it: its topic, key and value columns."""

    topic: str
    key_schema: StructType
    value_schema: StructType


@dataclass(frozen=True)
class UpsertsTogether:
    """Many UPSERT sources (by their ``_source`` number) and the slots their keys and
    values sit in."""

    sources: Mapping[int, UpsertSource]
    key: Slots
    value: Slots

    @classmethod
    def of(cls, sources: Mapping[int, UpsertSource]) -> UpsertsTogether:
        """The sources with slots enough for every one of them."""
        return cls(
            dict(sources),
            Slots.holding([s.key_schema for s in sources.values()]),
            Slots.holding([s.value_schema for s in sources.values()]),
        )

    @property
    def key_schema(self) -> StructType:
        """The joint key: the source, then the key slots."""
        return StructType([_SOURCE_FIELD, *_prefixed(self.key.schema, KEY_PREFIX)])

    @property
    def output(self) -> StructType:
        """The joint output row: the joint key, then the value slots."""
        return StructType(
            [*self.key_schema.fields, *_prefixed(self.value.schema, VALUE_PREFIX)]
        )

    def own(self, source: int) -> list[tuple[str, str]]:
        """Per output column of ``source`` (key columns, then value columns), the joint
        column holding it: ``(joint name, own name)``."""
        key, value = self.sources[source].key_schema, self.sources[source].value_schema
        return [
            *((KEY_PREFIX + self.key.names[s], f.name)
              for f, s in zip(key.fields, self.key.placed(key), strict=True)),
            *((VALUE_PREFIX + self.value.names[s], f.name)
              for f, s in zip(value.fields, self.value.placed(value), strict=True)),
        ]  # fmt: skip

    def layouts(self, spark: SparkSession) -> DataFrame:
        """A row per source: its number, topic and the layouts of its key and value."""
        rows = [
            (number, s.topic,
             self.key.layout(s.key_schema, required=(), present=s.key_schema.names,
                             scalar_key=True),
             self.value.layout(s.value_schema))
            for number, s in sorted(self.sources.items())
        ]  # fmt: skip
        return spark.createDataFrame(rows, _LAYOUTS)


def _prefixed(schema: StructType, prefix: str) -> list[StructField]:
    """The fields of ``schema`` with ``prefix`` before their names."""
    return [StructField(prefix + f.name, f.dataType) for f in schema.fields]


def apply_upsert_together(
    records: DataFrame,
    together: UpsertsTogether,
    prior_changes: DataFrame | None = None,
    prior_errors: DataFrame | None = None,
) -> EnvelopeResult:
    """The UPSERT envelope for every source's ``records`` (``_source``, ``partition``,
    ``offset``, ``key``, ``payload`` and ``time``). ``prior_changes``: the sources'
    contents before the batch in ``together.output`` columns and ``diff`` (None:
    empty); ``prior_errors``: their errors (ERROR columns, ``_source``, ``diff``). The
    result's changes have ``together.output`` columns, its errors ERROR columns and
    ``_source``."""
    spark = records.sparkSession
    layouts = F.broadcast(together.layouts(spark))
    keyed = _keyed(records.join(layouts, SOURCE), together)
    value_names = together.value.names

    def command(latest: DataFrame) -> DataFrame:
        staged = unwrap_generic(latest, "payload", "value_layout", "value_text")
        staged = decode_slots(staged, "value_text", together.value, "value_layout", "value")
        is_tombstone = F.col("value_text").isNull()
        problem = F.when(
            ~is_tombstone, F.coalesce(key_problem(), value_problem("value", "value"))
        )
        fields = [
            *(F.col("key_value")[name].alias(name) for name in together.key_schema.names),
            *(F.col("value")[name].alias(VALUE_PREFIX + name) for name in value_names),
        ]
        return staged.withColumn("reason", problem).withColumn(
            "row", F.when(~is_tombstone & F.col("reason").isNull(), F.struct(*fields))
        )

    def keying(errors: DataFrame) -> DataFrame:
        key_layouts = layouts.select(SOURCE, "key_layout")
        return _keyed(errors.join(key_layouts, SOURCE), together).drop("key_layout")

    batch = EnvelopeBatch(
        records, topic="", key_schema=together.key_schema, value_schema=together.output,
        prior_changes=prior_changes, prior_errors=prior_errors,
    )  # fmt: skip
    return apply_commands(
        keyed, command, batch, together.output,
        together=Together((_SOURCE_FIELD,), "topic", keying),
    )  # fmt: skip


def _keyed(records: DataFrame, together: UpsertsTogether) -> DataFrame:
    """``records`` (with their ``key_layout``) with ``key_value`` (the joint key, null
    when the key does not decode), its error and ``slot``, each of them the source's."""
    decoded = decode_key_slots(records, "key", together.key, "key_layout", "key_value")
    joint = F.struct(
        F.col(SOURCE),
        *(F.col("key_value")[n].alias(KEY_PREFIX + n) for n in together.key.names),
    )
    own_slot = F.concat(F.col(SOURCE).cast("string"), F.lit("/"), key_slot("key", "key_value"))
    return (
        decoded.withColumn("key_value", joint)
        .withColumn("slot", own_slot)
        .withColumn(
            "key_value",
            F.when(F.col(error_column("key_value")).isNull(), F.col("key_value")),
        )
    )


def own_rows(joint: DataFrame, together: UpsertsTogether, source: int) -> DataFrame:
    """One source's rows of a joint output (``together.output`` columns and any others,
    such as ``time`` and ``diff``) in its own columns, the others kept."""
    named = together.own(source)
    shared = [c for c in joint.columns if c not in set(together.output.names)]
    return joint.where(F.col(SOURCE) == source).select(
        *(column(j).alias(own) for j, own in named), *shared
    )


def joint_rows(own: DataFrame, together: UpsertsTogether, source: int) -> DataFrame:
    """A source's rows in its own columns (and others, such as ``time`` and ``diff``) as
    joint output rows: its columns in their slots, every other slot null."""
    placed = {joint: own_name for joint, own_name in together.own(source)}
    shared = [c for c in own.columns if c not in set(placed.values())]
    slots: list[Column] = [
        (column(placed[f.name]) if f.name in placed else F.lit(None))
        .cast(f.dataType).alias(f.name)
        for f in together.output.fields[1:]
    ]
    return own.select(F.lit(source).cast("int").alias(SOURCE), *slots, *shared)
