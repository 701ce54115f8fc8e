"""Helpers shared by the envelope tests: reclocked records from plain tuples, and a
window-by-window runner that feeds each window's outputs back as the next prior state
(accumulated in plain Python, the way the shards would hold them)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import DataType, LongType, StructField, StructType

from cdc_core.envelopes import DEDUP_STATE, EnvelopeBatch, EnvelopeResult
from cdc_core.schemas import ERROR, RECLOCKED

TOPIC = "t"


def text(value: object) -> str | None:
    """Dump text of a key/payload: None stays null, a str is raw text, else JSON."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value)


def frozen(value: object) -> object:
    """A hashable copy of an Arrow value: structs (dicts) become tuples of their fields."""
    if isinstance(value, dict):
        return tuple(frozen(v) for v in value.values())
    return value


def thawed(value: object, data_type: DataType) -> object:
    if value is not None and isinstance(data_type, StructType):
        return {f.name: thawed(v, f.dataType) for f, v in zip(data_type.fields, value, strict=True)}
    return value


def dataframe(spark: SparkSession, rows: Iterable[tuple], schema: StructType) -> DataFrame:
    """A DataFrame from plain tuples, through Arrow (no Python workers)."""
    arrow_schema = to_arrow_schema(schema)
    columns = list(zip(*rows, strict=True)) or [() for _ in schema.fields]
    arrays = [
        pa.array([thawed(v, f.dataType) for v in values], type=arrow_schema.field(i).type)
        for i, (f, values) in enumerate(zip(schema.fields, columns, strict=True))
    ]
    return spark.createDataFrame(pa.Table.from_arrays(arrays, schema=arrow_schema))


def reclocked(spark: SparkSession, rows: Iterable[tuple[int, int, object, object]]) -> DataFrame:
    """RECLOCKED records from ``(partition, offset, key, payload)``."""
    return dataframe(spark, [(p, o, 0, text(k), text(v)) for p, o, k, v in rows], RECLOCKED)


def batch(
    spark: SparkSession, windows: Mapping[int, Iterable[tuple[int, int, object, object]]]
) -> DataFrame:
    """RECLOCKED records of many windows, each with its binding ``time`` column, from
    ``{time: [(partition, offset, key, payload), ...]}``."""
    rows = [
        (p, o, 0, text(k), text(v), t) for t, window in windows.items() for p, o, k, v in window
    ]
    return dataframe(spark, rows, StructType([*RECLOCKED.fields, StructField("time", LongType())]))


def timed_updates(df: DataFrame) -> list[tuple]:
    """The rows of an envelope output as sorted ``(*data, time, diff)``."""
    columns = [name for name in df.columns if name not in ("time", "diff")]
    rows = df.select(*columns, "time", "diff").toArrow().to_pylist()
    return sorted((tuple(frozen(v) for v in row.values()) for row in rows), key=repr)


def updates(df: DataFrame, time: int) -> list[tuple]:
    """The rows of an envelope output as sorted ``(*data, diff)``; every time must be ``time``."""
    rows = df.toArrow().to_pylist()
    assert {row["time"] for row in rows} <= {time}
    return sorted(
        (tuple(frozen(v) for k, v in row.items() if k != "time") for row in rows), key=repr
    )


def error(partition: int, offset: int, key: object, reason: str, diff: int) -> tuple:
    """An expected ERROR update (file is always null for envelope errors)."""
    return (TOPIC, partition, offset, text(key), reason, None, diff)


def batched(
    apply: Callable[[EnvelopeBatch], EnvelopeResult], **fixed: object
) -> Callable[..., EnvelopeResult]:
    """``apply`` taking the records and the batch's other fields as keywords, ``fixed``
    (e.g. the schemas) given once."""
    return lambda records, **given: apply(EnvelopeBatch(records, **fixed, **given))


def with_diff(schema: StructType) -> StructType:
    return StructType([*schema.fields, StructField("diff", LongType())])


@dataclass
class Run:
    """Runs windows in order, holding the consolidated contents of each output shard."""

    spark: SparkSession
    output: StructType
    apply: Callable[..., EnvelopeResult]
    changes: Counter = field(default_factory=Counter)
    errors: Counter = field(default_factory=Counter)
    dedup_state: Counter = field(default_factory=Counter)

    def prior(self, contents: Counter, schema: StructType) -> DataFrame:
        rows = [(*data, diff) for data, diff in contents.items() if diff]
        return dataframe(self.spark, rows, with_diff(schema))

    def window(self, time: int, rows: Iterable[tuple[int, int, object, object]], **prior):
        """Apply one window; returns its ``(changes, errors)`` updates and accumulates them."""
        result = self.apply(reclocked(self.spark, rows), time=time, topic=TOPIC, **prior)
        changes, errors = updates(result.changes, time), updates(result.errors, time)
        assert_witness_exact(result, errors)
        accumulate(self.changes, changes)
        accumulate(self.errors, errors)
        if result.dedup_state is not None:
            accumulate(self.dedup_state, updates(result.dedup_state, time))
        return changes, errors

    def state(self) -> list[tuple]:
        return sorted(((*data, diff) for data, diff in self.changes.items() if diff), key=repr)

    def error_state(self) -> list[tuple]:
        return sorted(((*data, diff) for data, diff in self.errors.items() if diff), key=repr)

    def upsert_window(self, time: int, rows: Iterable[tuple[int, int, object, object]]):
        return self.window(
            time,
            rows,
            prior_changes=self.prior(self.changes, self.output),
            # None for no errors, as the pipeline passes an errors shard without updates
            prior_errors=self.prior(self.errors, ERROR) if self.errors else None,
        )

    def dedup_window(self, time: int, rows: Iterable[tuple[int, int, object, object]]):
        return self.window(
            time,
            rows,
            prior_changes=self.prior(self.changes, self.output),
            prior_dedup_state=self.prior(self.dedup_state, DEDUP_STATE),
        )

    def dedup_entries(self, entry: str) -> list[tuple]:
        """The accumulated dedup state rows of one kind, without the ``entry`` column."""
        return sorted(
            (
                (data[0], *data[2:], diff)
                for data, diff in self.dedup_state.items()
                if data[1] == entry
            ),
            key=repr,
        )


def assert_witness_exact(result: EnvelopeResult, errors: list[tuple]) -> None:
    """An envelope's error witness, where it offers one, is empty exactly when its errors
    are: never hiding an error, and proving a batch without any empty."""
    if result.error_witness is not None:
        assert result.error_witness.isEmpty() == (not errors), errors


def accumulate(contents: Counter, rows: list[tuple]) -> None:
    for *data, diff in rows:
        contents[tuple(data)] += diff
        if not contents[tuple(data)]:
            del contents[tuple(data)]
