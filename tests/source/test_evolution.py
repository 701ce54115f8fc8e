"""Schema evolution of values: a nullable value column appended to a source's config evolves
``changes``, ``state`` and ``history`` in place (older rows read null, checks stay green,
re-runs write nothing); any other drift is refused before anything is written, saying what
changed and what the user can do."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from cdc_core.checks import history_versions
from cdc_core.config import parse_config
from cdc_core.envelopes import ConfigDriftError
from cdc_core.source import SourcePipeline
from tests.judged_alone import completeness, state_counts
from tests.source.test_history import T0, WINDOW, run

TABLES = ("remap", "reclocked", "changes", "state", "errors", "history")


def config_of(root: Path, value: dict[str, str], **source: object):
    data = {
        "lake": "lake",
        "landing": "landing",
        "window": "1m",
        "start": "2026-01-01T00:00:00Z",
        "sources": [
            {"name": "users", "topic": "users", "key": {"id": "bigint"}, "value": value,
             "envelope": "upsert", "reclock": "event-time", "history": True, **source}
        ],
    }  # fmt: skip
    return parse_config(data, root)


def user(offset: int, window: int, key: int, **payload: object) -> str:
    record = {"topic": "users", "partition": 0, "offset": offset,
              "ts": T0 + window * WINDOW + 1 + offset, "key": json.dumps({"id": key}),
              "payload": json.dumps(payload)}  # fmt: skip
    return json.dumps(record) + "\n"


# Every payload carries an email; the first config does not read it.
DUMP = [
    user(0, 0, 1, name="a", n=1, email="a@x"),
    user(1, 0, 2, name="b", n=2, email="b@x"),
    user(2, 1, 1, name="a1", n=1, email="a1@x"),
    user(3, 2, 2, name="b", n=2, email="b2@x"),  # only the new column differs
    user(4, 3, 3, name="c", n=3, email="c@x"),
]
BASE = {"name": "string", "n": "bigint"}


def rows(path: Path) -> list[dict]:
    return DeltaTable(str(path)).to_pyarrow_table().to_pylist()


def versions(lake: Path) -> dict[str, int]:
    return {table: DeltaTable(str(lake / table)).version() for table in TABLES}


@pytest.fixture
def two_windows(spark: SparkSession, tmp_path: Path):
    """Windows 1 and 2 run with the first config (no email)."""
    config = config_of(tmp_path, BASE)
    (config.landing / "users").mkdir(parents=True)
    (config.landing / "users" / "dump.json").write_text("".join(DUMP))
    run(SourcePipeline.from_config(spark, config, config.sources[0]), 1, 2)
    return config


def test_an_appended_value_column_evolves_every_table_and_stays_exact(
    spark: SparkSession, two_windows, tmp_path: Path
) -> None:
    config = config_of(tmp_path, {**BASE, "email": "string"})
    lake = config.lake / "users"
    pipeline = SourcePipeline.from_config(spark, config, config.sources[0])
    for table in ("changes", "state", "history"):
        assert "email" in DeltaTable(str(lake / table)).schema().to_arrow().names, table
    run(pipeline, 3, 4)

    b1, b2, b3, b4 = (T0 + w * WINDOW for w in (1, 2, 3, 4))
    history = {
        (v["id"], v["name"], v["email"], v["valid_from"], v["valid_to"])
        for v in rows(lake / "history")
    }
    assert history == {
        (1, "a", None, b1, b2),  # written before the column: it reads null
        (2, "b", None, b1, b3),
        (1, "a1", None, b2, None),
        (2, "b", "b2@x", b3, None),  # the new column alone makes a new version
        (3, "c", "c@x", b4, None),
    }
    state = {(r["id"], r["name"], r["email"]) for r in rows(lake / "state")}
    assert state == {(1, "a1", None), (2, "b", "b2@x"), (3, "c", "c@x")}
    # delta-spark reads the evolved tables, older files included.
    spark_state = spark.read.format("delta").load(str(lake / "state"))
    assert {tuple(r) for r in spark_state.select("id", "name", "email").collect()} == state

    # The checks judge the evolved tables green.
    pipeline = SourcePipeline.from_config(spark, config, config.sources[0])
    assert completeness(pipeline.changes, T0 + 1, b4 + 1).passed
    assert state_counts(pipeline.changes, ["id"], b4).passed
    verdict = history_versions(
        str(lake / "history"), pipeline.changes, config.sources[0].output_schema, ["id"], b4
    )
    assert verdict.passed, verdict.description

    # Re-running every window writes nothing, in any table.
    before = versions(lake)
    run(pipeline, 1, 4)
    assert versions(lake) == before


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"value": {"name": "string"}}, "value column 'n' removed"),
        ({"value": {"name": "string", "n": "string"}}, "value column 'n' changed from bigint"),
        ({"value": {"email": "string", **BASE}}, "value column 'email' added"),
        ({"key": {"id": "string"}}, "key column 'id' changed from bigint to string"),
        ({"envelope": "debezium-upsert", "value": {"id": "bigint", **BASE}},
         "envelope changed from upsert to debezium-upsert"),
    ],
)  # fmt: skip
def test_any_other_drift_is_refused_before_anything_is_written(
    spark: SparkSession, two_windows, tmp_path: Path, change: dict, named: str
) -> None:
    lake = two_windows.lake / "users"
    before = versions(lake)
    value = change.pop("value", BASE)
    config = config_of(tmp_path, value, **change)
    with pytest.raises(ConfigDriftError) as refused:
        SourcePipeline.from_config(spark, config, config.sources[0])
    message = str(refused.value)
    assert named in message and "Nothing was written" in message
    assert "reclock rebuild --config FILE --source NAME" in message
    assert "new name" in message
    assert versions(lake) == before
