"""``include``: Kafka metadata columns of the record each row comes from; for the upsert
envelopes the winning (latest) record's, so a newer record with the same value still
replaces the row (Materialize: INCLUDE PARTITION, OFFSET, TIMESTAMP, KEY)."""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime
from zoneinfo import ZoneInfo

from pyspark.sql.types import LongType, StringType, StructField, StructType

from cdc_core.envelopes import EnvelopeBatch, apply_none, apply_upsert, output_schema
from cdc_core.envelopes.encodings import PartEncoding, as_json_text
from cdc_core.schemas import RECLOCKED
from cdc_core.vocabulary import IncludeField, RecordEncoding
from tests.envelopes.test_envelope_support import (
    accumulate,
    dataframe,
    text,
    updates,
    with_diff,
)

KEY = StructType([StructField("id", LongType())])
VALUE = StructType([StructField("name", StringType())])
ALL = (IncludeField.PARTITION, IncludeField.OFFSET, IncludeField.TIMESTAMP, IncludeField.KEY)
OUTPUT = output_schema("upsert", KEY, VALUE, ALL)
T0 = 1_767_225_600_000


def at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=ZoneInfo("UTC"))


def records(spark, rows):
    """RECLOCKED records from (partition, offset, ts, key, payload)."""
    return dataframe(spark, [(p, o, ts, text(k), text(v)) for p, o, ts, k, v in rows], RECLOCKED)


def test_output_columns_follow_the_data_columns() -> None:
    assert OUTPUT.simpleString() == (
        "struct<id:bigint,name:string,partition:int,offset:bigint,timestamp:timestamp,key:string>"
    )


def test_upsert_rows_carry_the_winning_records_metadata(spark) -> None:
    state: Counter = Counter()

    def window(time: int, rows: list[tuple]) -> list[tuple]:
        prior = spark.createDataFrame([(*d, n) for d, n in state.items()], with_diff(OUTPUT))
        batch = EnvelopeBatch(
            records(spark, rows), time=time, topic="t", key_schema=KEY, value_schema=VALUE,
            include=ALL, prior_changes=prior,
        )  # fmt: skip
        changes = updates(apply_upsert(batch).changes, time)
        accumulate(state, changes)
        return changes

    key = json.dumps({"id": 1})
    first = window(10, [(0, 3, T0, {"id": 1}, {"name": "a"}), (0, 5, T0 + 9, {"id": 1},
                                                                  {"name": "b"})])  # fmt: skip
    assert first == [(1, "b", 0, 5, at(T0 + 9), key, 1)]
    # The same value again, from a later record: the row changes (its metadata does).
    second = window(20, [(1, 0, T0 + 20, "1", {"name": "b"})])
    assert second == sorted(
        [(1, "b", 0, 5, at(T0 + 9), key, -1), (1, "b", 1, 0, at(T0 + 20), "1", 1)], key=repr
    )


def test_none_rows_carry_their_records_metadata(spark) -> None:
    include = (IncludeField.OFFSET, IncludeField.PARTITION)
    batch = EnvelopeBatch(
        records(spark, [(2, 7, T0, None, {"name": "x"})]),
        time=10, topic="t", key_schema=StructType([]), value_schema=VALUE, include=include,
    )  # fmt: skip
    assert updates(apply_none(batch).changes, 10) == [("x", 7, 2, 1)]


def test_the_key_column_shows_the_key_as_the_dump_holds_it(spark) -> None:
    part = PartEncoding(RecordEncoding.TEXT, ("name",))
    rows = as_json_text(records(spark, [(0, 0, T0, "k", "v")]), part, part)
    [row] = rows.select("key", "dump_key").collect()
    assert (row["key"], row["dump_key"]) == ('{"name":"k"}', "k")
