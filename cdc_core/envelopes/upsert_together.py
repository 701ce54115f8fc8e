"""The UPSERT and DEBEZIUM UPSERT envelopes applied to many sources' records by one plan.

Why: ``apply_upsert`` builds a plan around one source's key and value schemas, and a
window of hundreds of sources would build, analyze and run hundreds of them for a few
records each. Here every source's records go through one plan whose shape does not
depend on the sources: their keys and values are decoded into typed slots
(``envelopes.slots``), each source's layout joined in as data, and ``apply_commands``
runs once over all of them with the source as part of every slot and key.

A row of the joint output holds ``_source``, then the key slots (``k_`` names), then the
value slots (``v_`` names); ``UpsertsTogether.own`` maps it back to a source's columns.
For DEBEZIUM UPSERT the value slots hold the after image, whose key columns are the
source's key: its own columns are the value slots alone, and the key slots repeat them
(a row exists only where the after image's key equals the record's).

Invariant: each source's changes and errors equal what ``apply_upsert`` (or
``apply_debezium_upsert``) gives for its records alone, from the same prior contents
(``tests/envelopes/test_upsert_together.py``).
"""

from __future__ import annotations

import functools
import json
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, IntegerType, StringType, StructField, StructType

from cdc_core.envelopes.batch import EnvelopeBatch
from cdc_core.envelopes.debezium import DELETE_OP, event_problem, stage_events
from cdc_core.envelopes.decode import error_column, key_slot
from cdc_core.envelopes.reasons import KEY_MISMATCH, reason
from cdc_core.envelopes.result import EnvelopeResult, column
from cdc_core.envelopes.slots import (
    LAYOUT,
    Slots,
    decode_key_slots,
    decode_slots,
    unwrap_generic,
)
from cdc_core.envelopes.upsert import Together, apply_commands, key_problem, value_problem
from cdc_core.vocabulary import Envelope

SOURCE = "_source"  # the column naming each row's source
KEY_PREFIX, VALUE_PREFIX = "k_", "v_"
_SOURCE_FIELD = StructField(SOURCE, IntegerType())
_LAYOUTS = StructType([
    _SOURCE_FIELD, StructField("topic", StringType()),
    StructField("key_layout", LAYOUT), StructField("value_layout", LAYOUT),
    # DEBEZIUM UPSERT: per key slot, which value slot of its type (1-based, among that
    # type's value slots) holds the same column of the after image, null when unused;
    # and the key's fields in order, as their JSON name text and key slot (1-based).
    StructField("key_in_value", ArrayType(IntegerType())),
    StructField("key_fields", ArrayType(StructType([
        StructField("name", StringType()), StructField("slot", IntegerType()),
    ]))),
])  # fmt: skip


@dataclass(frozen=True)
class UpsertSource:
    """One UPSERT or DEBEZIUM UPSERT source as the envelope sees it: its topic, key and
    value columns (for DEBEZIUM UPSERT, the after image's)."""

    topic: str
    key_schema: StructType
    value_schema: StructType
    envelope: Envelope = Envelope.UPSERT

    @property
    def joins(self) -> bool:
        """Whether it can be served together: a DEBEZIUM UPSERT source's key columns are
        after-image columns of the same types (its record key is compared with them)."""
        if self.envelope == Envelope.UPSERT:
            return True
        if self.envelope != Envelope.DEBEZIUM_UPSERT:
            return False
        image = {field.name: field.dataType for field in self.value_schema.fields}
        return all(image.get(f.name) == f.dataType for f in self.key_schema.fields)


@dataclass(frozen=True)
class UpsertsTogether:
    """Many UPSERT sources (by their ``_source`` number) and the slots their keys and
    values sit in."""

    sources: Mapping[int, UpsertSource]
    key: Slots
    value: Slots

    @classmethod
    def of(cls, sources: Mapping[int, UpsertSource]) -> UpsertsTogether:
        """The sources (all of one envelope, each ``joins``) with slots enough for every
        one of them."""
        if len({s.envelope for s in sources.values()}) > 1 or not all(
            s.joins for s in sources.values()
        ):
            raise ValueError("sources served together share one envelope, and each joins")
        return cls(
            dict(sources),
            Slots.holding([s.key_schema for s in sources.values()]),
            Slots.holding([s.value_schema for s in sources.values()]),
        )

    @property
    def envelope(self) -> Envelope:
        """The envelope every source applies."""
        return next(iter(self.sources.values())).envelope

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
        """Per output column of ``source`` (UPSERT: key columns, then value columns;
        DEBEZIUM UPSERT: the after image's), the joint column holding it: ``(joint name,
        own name)``."""
        keys, values = self._placed(source)
        return values if self.envelope == Envelope.DEBEZIUM_UPSERT else [*keys, *values]

    def placing(self, source: int) -> list[tuple[str, str]]:
        """Per joint column a row of ``source``'s own columns fills, the own column:
        ``own``, and for DEBEZIUM UPSERT the key slots too, from the image's key columns."""
        keys, values = self._placed(source)
        return [*keys, *values]

    def _placed(self, source: int) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        """The key columns of ``source`` by key slot, its value columns by value slot."""
        key, value = self.sources[source].key_schema, self.sources[source].value_schema
        return (
            [(KEY_PREFIX + self.key.names[s], f.name)
             for f, s in zip(key.fields, self.key.placed(key), strict=True)],
            [(VALUE_PREFIX + self.value.names[s], f.name)
             for f, s in zip(value.fields, self.value.placed(value), strict=True)],
        )  # fmt: skip

    def layouts(self, spark: SparkSession) -> DataFrame:
        """A row per source: its number, topic and the layouts of its key and value."""
        rows = [
            (number, s.topic,
             self.key.layout(s.key_schema, required=(), present=s.key_schema.names,
                             scalar_key=True),
             self.value.layout(s.value_schema), *self._key_in_value(s))
            for number, s in sorted(self.sources.items())
        ]  # fmt: skip
        return spark.createDataFrame(rows, _LAYOUTS)

    def _key_in_value(self, source: UpsertSource) -> tuple[list[int | None], list[tuple]]:
        """The ``key_in_value`` and ``key_fields`` of a source's layout."""
        key, value = source.key_schema, source.value_schema
        value_slot = dict(zip(value.names, self.value.placed(value), strict=True))
        in_value: list[int | None] = [None] * len(self.key.names)
        fields = []
        for field, slot in zip(key.fields, self.key.placed(key), strict=True):
            fields.append((json.dumps(field.name, ensure_ascii=False), slot + 1))
            if field.name in value_slot:
                same_type = self.value.types[value_slot[field.name]]
                kind = [i for i, t in enumerate(self.value.types) if t == same_type]
                in_value[slot] = kind.index(value_slot[field.name]) + 1
        return in_value, fields


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

    def command(latest: DataFrame) -> DataFrame:
        staged = unwrap_generic(latest, "payload", "value_layout", "value_text")
        staged = decode_slots(staged, "value_text", together.value, "value_layout", "value")
        is_tombstone = F.col("value_text").isNull()
        problem = F.when(
            ~is_tombstone, F.coalesce(key_problem(), value_problem("value", "value"))
        )
        return _with_command(staged, together, problem, "value", ~is_tombstone)

    return _apply_together(records, together, command, prior_changes, prior_errors)


def apply_debezium_upsert_together(
    records: DataFrame,
    together: UpsertsTogether,
    prior_changes: DataFrame | None = None,
    prior_errors: DataFrame | None = None,
) -> EnvelopeResult:
    """The DEBEZIUM UPSERT envelope for every source's ``records``, as
    ``apply_upsert_together`` takes and gives them. The records must hold no truncate
    event (``debezium.may_hold_truncates``): a source whose batch may truncate its table
    applies its own envelope."""
    is_tombstone = F.col("event_text").isNull()
    deletes = (F.col("op") == DELETE_OP) | F.col("after_text").isNull()
    problem = F.when(
        ~is_tombstone,
        F.coalesce(
            key_problem(), event_problem("after"),
            F.when(~deletes, _after_key_mismatch(together)),
        ),
    )  # fmt: skip

    def command(latest: DataFrame) -> DataFrame:
        staged = decode_slots(
            stage_events(latest), "after_text", together.value, "value_layout", "after"
        )
        return _with_command(staged, together, problem, "after", ~is_tombstone & ~deletes)

    return _apply_together(records, together, command, prior_changes, prior_errors)


def _with_command(
    staged: DataFrame, together: UpsertsTogether, problem: Column, image: str, holds: Column
) -> DataFrame:
    """``staged`` with its command: ``reason`` (``problem``) and ``row``, the joint key
    and the decoded ``image`` in the value slots, where the record ``holds`` a row and
    has no problem."""
    fields = [
        *(F.col("key_value")[name].alias(name) for name in together.key_schema.names),
        *(F.col(image)[name].alias(VALUE_PREFIX + name) for name in together.value.names),
    ]
    return staged.withColumn("reason", problem).withColumn(
        "row", F.when(holds & F.col("reason").isNull(), F.struct(*fields))
    )


def _apply_together(
    records: DataFrame,
    together: UpsertsTogether,
    command: Callable[[DataFrame], DataFrame],
    prior_changes: DataFrame | None,
    prior_errors: DataFrame | None,
) -> EnvelopeResult:
    """``apply_commands`` over every source's records, keyed by the source and the key
    slots, each row with its source's layouts (for ``command``) and topic."""
    spark = records.sparkSession
    layouts = F.broadcast(together.layouts(spark))
    keyed = _keyed(records.join(layouts, SOURCE), together)

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


def _after_key_mismatch(together: UpsertsTogether) -> Column:
    """``debezium.after_key_mismatch`` in slots: a ``key mismatch`` error when the after
    image's key columns (its value slots that ``key_in_value`` names) differ from the
    record's key slots, worded as the source's own envelope words it."""
    key, value = together.key, together.value
    image = []
    for name, data_type in zip(key.names, key.types, strict=True):
        same = [F.col("after")[v] for v, t in zip(value.names, value.types, strict=True)
                if t == data_type]  # fmt: skip
        at = F.element_at(F.col("key_in_value"), key.names.index(name) + 1)
        image.append(F.element_at(F.array(*same), at) if same else F.lit(None).cast(data_type))
    record = [F.col("key_value")[KEY_PREFIX + name] for name in key.names]
    differs = ~functools.reduce(
        operator.and_, [i.eqNullSafe(r) for i, r in zip(image, record, strict=True)], F.lit(True)
    )
    return F.when(
        F.col("after_text").isNotNull() & differs,
        reason(
            KEY_MISMATCH,
            F.concat(
                F.lit("after image key "), _key_json(image),
                F.lit(" differs from the record key "), _key_json(record),
            ),
        ),  # fmt: skip
    )


def _key_json(slots: list[Column]) -> Column:
    """The JSON text ``to_json`` gives a source's key struct whose values are ``slots``
    (by key slot), in its ``key_fields`` order, null fields left out as ``to_json``
    leaves them."""
    texts = F.array(
        *(F.when(c.isNotNull(), F.regexp_extract(F.to_json(F.struct(c.alias("v"))),
                                                 r'^\{"v":(.*)\}$', 1))
          for c in slots)
    )  # fmt: skip
    pairs = F.transform(
        F.col("key_fields"),
        lambda f: F.when(
            F.element_at(texts, f["slot"]).isNotNull(),
            F.concat(f["name"], F.lit(":"), F.element_at(texts, f["slot"])),
        ),
    )
    return F.concat(F.lit("{"), F.array_join(pairs, ","), F.lit("}"))


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
    placed = {joint: own_name for joint, own_name in together.placing(source)}
    shared = [c for c in own.columns if c not in set(placed.values())]
    slots: list[Column] = [
        (column(placed[f.name]) if f.name in placed else F.lit(None))
        .cast(f.dataType).alias(f.name)
        for f in together.output.fields[1:]
    ]
    return own.select(F.lit(source).cast("int").alias(SOURCE), *slots, *shared)
