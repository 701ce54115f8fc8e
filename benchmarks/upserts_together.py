"""The UPSERT envelope of N sources applied together against one source at a time.

    python -m benchmarks.upserts_together [N ...]      (default: 4 32 128)

Each source has an ``int`` key and 3 to 8 value columns of mixed types (its own names,
a seeded choice of types), and 20 records over two binding times. Both peers run in this
process on the same cached records: ``together`` is ``apply_upsert_together`` over all
of them, ``one by one`` is ``apply_upsert`` per source; each counts its changes and
errors (a job each, as appending them would). Prints seconds, rows and the ratio.
"""

from __future__ import annotations

import random
import sys
import time

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType

from cdc_core.config.fields import COLUMN_TYPES
from cdc_core.envelopes import EnvelopeBatch, apply_upsert
from cdc_core.envelopes.upsert_together import (
    SOURCE,
    UpsertSource,
    UpsertsTogether,
    apply_upsert_together,
)
from cdc_core.spark import get_spark

# A value column's type and the JSON text of record ``r``'s value for it.
KINDS = {
    "string": '"s{}"', "int": "{}", "bigint": "{}", "double": "{}.5", "boolean": "true",
    "timestamp": '"2026-01-01T00:00:0{}Z"',
}  # fmt: skip
RECORDS = 20


def source(number: int) -> tuple[UpsertSource, list[tuple[str, str]]]:
    """Source ``number``: its shape, and its value columns with their kinds."""
    chosen = random.Random(number)
    columns = [(f"c{number}_{j}", chosen.choice(list(KINDS))) for j in range(chosen.randint(3, 8))]
    value = StructType([StructField(name, COLUMN_TYPES[kind]) for name, kind in columns])
    key = StructType([StructField("id", COLUMN_TYPES["int"])])
    return UpsertSource(f"t{number}", key, value), columns


def records(spark: SparkSession, sources: int) -> DataFrame:
    """Every source's records, cached."""
    rows = []
    for number in range(sources):
        _, columns = source(number)
        for r in range(RECORDS):
            value = ", ".join(f'"{name}": {KINDS[kind].format(r % 10)}' for name, kind in columns)
            rows.append((number, r % 4, r, str(r % 7), "{" + value + "}", 1 + r // 10))
    schema = "_source int, partition int, offset long, key string, payload string, time long"
    return spark.createDataFrame(rows, schema).localCheckpoint()


def main(argv: list[str]) -> None:
    """Time both peers for each N."""
    spark = get_spark("local[2]", {"spark.sql.shuffle.partitions": "4"})
    for sources in [int(a) for a in argv] or [4, 32, 128]:
        shapes = {number: source(number)[0] for number in range(sources)}
        batch = records(spark, sources)
        began = time.perf_counter()
        together = UpsertsTogether.of(shapes)
        result = apply_upsert_together(batch, together)
        joint_rows = result.changes.count() + result.errors.count()
        result.release()
        joint = time.perf_counter() - began
        began = time.perf_counter()
        alone_rows = 0
        for number, shape in shapes.items():
            mine = batch.where(F.col(SOURCE) == number).drop(SOURCE)
            alone = apply_upsert(EnvelopeBatch(mine, topic=shape.topic, key_schema=shape.key_schema,
                                               value_schema=shape.value_schema))  # fmt: skip
            alone_rows += alone.changes.count() + alone.errors.count()
            alone.release()
        one_by_one = time.perf_counter() - began
        print(f"{sources} sources: together {joint:.1f} s ({joint_rows} rows, "
              f"{len(together.value.names)} value slots), one by one {one_by_one:.1f} s "
              f"({alone_rows} rows), {one_by_one / joint:.1f}x", flush=True)  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1:])
