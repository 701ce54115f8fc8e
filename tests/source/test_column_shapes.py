"""Every envelope's tables in the column shapes real topics have, through every check and
the CDCv2 export, in one real Dagster run: a key-only table (``f1`` is its key and its
only column, as join tables and Materialize's testdrive tables are) through
``debezium-upsert`` with history and through classic ``debezium``, one nullable column
(``none``, where equal records make a bag, and a CDCv2 stream), and only nullable columns
(``upsert``, a null key column and a null value). Expected tables by hand.

The run's one step serves the five sources at once; each source run alone writes the same
tables, row for row."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from dagster import DagsterInstance, ExecuteInProcessResult
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from assets.partitions import range_tags
from cdc_core.config import Config, parse_config
from pipelines.build import ALL_WINDOWS_JOB, build_definitions
from tests.lake_rows import run_through, table_rows

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
W1, W2 = T0 + 1_000, T0 + 61_000  # a record in the first and in the second window

SOURCES = [
    {"name": "joins", "topic": "joins", "key": {"f1": "bigint"}, "value": {"f1": "bigint"},
     "envelope": "debezium-upsert", "reclock": "event-time", "history": True},
    {"name": "pairs", "topic": "pairs", "key": {"f1": "bigint"}, "value": {"f1": "bigint"},
     "envelope": "debezium", "reclock": "event-time"},
    {"name": "events", "topic": "events", "value": {"v": "string"}, "envelope": "none",
     "reclock": "event-time",
     "expectations": [{"type": "expect_column_to_exist", "kwargs": {"column": "v"}}]},
    {"name": "notes", "topic": "notes", "key": {"id": "bigint"}, "value": {"note": "string"},
     "envelope": "upsert", "reclock": "event-time"},
    {"name": "counts", "topic": "counts", "format": "cdcv2-json", "value": {"n": "bigint"},
     "envelope": "materialize", "reclock": "event-time"},
]  # fmt: skip


def pg(op: str, f1: int, lsn: int, *, snapshot: bool = False) -> dict:
    """A Debezium Postgres event of a key-only table: its before image (REPLICA IDENTITY
    DEFAULT: the key columns) is the whole row."""
    image = {"f1": f1}
    source = {"connector": "postgresql", "snapshot": "true" if snapshot else "false",
              "lsn": lsn, "sequence": json.dumps([None if snapshot else str(lsn - 1), str(lsn)])}
    return {"op": op, "before": image if op in "ud" else None,
            "after": None if op == "d" else image, "source": source}  # fmt: skip


RECORDS = {  # topic -> (ts, key, value) in offset order
    "joins": [(W1, {"f1": 1}, pg("c", 1, 10)), (W1, {"f1": 2}, pg("c", 2, 20)),
              (W2, {"f1": 1}, pg("d", 1, 30)), (W2, {"f1": 1}, None)],
    "pairs": [(W1, {"f1": 1}, pg("r", 1, 5, snapshot=True)),
              (W1, {"f1": 2}, pg("r", 2, 5, snapshot=True)),
              (W2, {"f1": 1}, pg("d", 1, 30)), (W2, {"f1": 1}, None),
              (W2, {"f1": 3}, pg("c", 3, 40))],
    "events": [(W1, None, {"v": "a"}), (W1, None, {"v": None}), (W2, None, {"v": "a"})],
    "notes": [(W1, {"id": 1}, {"note": None}), (W1, {"id": None}, {"note": "x"}),
              (W2, {"id": 1}, {"note": "y"})],
    "counts": [(W1, None, {"updates": [{"data": {"n": 5}, "time": 1, "diff": 1}]}),
               (W1, None, {"progress": {"lower": [0], "upper": [2],
                                        "counts": [{"time": 1, "count": 1}]}})],
}  # fmt: skip


def landed(workdir: Path) -> Config:
    for topic, records in RECORDS.items():
        (workdir / "landing" / topic).mkdir(parents=True)
        lines = [
            json.dumps({"topic": topic, "partition": 0, "offset": offset, "ts": ts,
                        "key": None if key is None else json.dumps(key),
                        "payload": None if value is None else json.dumps(value)})
            for offset, (ts, key, value) in enumerate(records)
        ]  # fmt: skip
        (workdir / "landing" / topic / "dump.json").write_text("\n".join(lines) + "\n")
    return parse_config(
        {"lake": "lake", "landing": "landing", "window": "1m",
         "start": "2026-01-01T00:00:00Z", "end": "2026-01-01T00:03:00Z",
         "spark": {"master": "local[2]", "conf": {"spark.sql.shuffle.partitions": "4"}},
         "sources": SOURCES},
        workdir,
    )  # fmt: skip


def state(config: Config, source: str) -> list[tuple]:
    rows = DeltaTable(str(config.lake / source / "state")).to_pyarrow_table().to_pylist()
    return sorted((tuple(r.values()) for r in rows), key=repr)


@pytest.fixture(scope="module")
def together(
    tmp_path_factory: pytest.TempPathFactory, spark: SparkSession
) -> tuple[Config, ExecuteInProcessResult]:
    """Every source's two windows in one Dagster run (its step serves them at once)."""
    config = landed(tmp_path_factory.mktemp("together"))
    job = build_definitions(config).resolve_job_def(ALL_WINDOWS_JOB)
    result = job.execute_in_process(
        instance=DagsterInstance.ephemeral(), raise_on_error=False,
        tags=range_tags("2026-01-01T00:00:00", "2026-01-01T00:02:00"),
    )  # fmt: skip
    return config, result


def test_every_envelope_and_check_takes_key_only_single_and_nullable_columns(
    together: tuple[Config, ExecuteInProcessResult],
) -> None:
    config, result = together
    evaluations = {
        (e.asset_key.path[0], f"{e.asset_key.path[-1]}.{e.check_name}"): e
        for e in result.get_asset_check_evaluations()
    }
    failed = {key: e.description for key, e in evaluations.items() if not e.passed}
    assert result.success and not failed, failed
    shape_checks = {(s["name"], "changes.state_is_set") for s in SOURCES if "key" in s}
    shape_checks |= {("events", "changes.state_is_bag"), ("counts", "changes.state_is_bag"),
                     ("pairs", "errors.constraints"), ("joins", "history.versions"),
                     ("events", "changes.expectations")}  # fmt: skip
    assert shape_checks <= set(evaluations)
    assert state(config, "joins") == [(2,)]
    assert state(config, "pairs") == [(2,), (3,)]
    # A bag: equal records count each (``a`` twice).
    events = DeltaTable(str(config.lake / "events" / "changes")).to_pyarrow_table().to_pylist()
    changes = sorted(((r["v"], r["diff"]) for r in events), key=repr)
    assert changes == [("a", 1), ("a", 1), (None, 1)]
    assert state(config, "notes") == [(1, "y"), (None, "x")]
    assert state(config, "counts") == [(5,)]


def test_each_source_run_alone_writes_what_the_run_serving_them_together_wrote(
    together: tuple[Config, ExecuteInProcessResult], spark: SparkSession, tmp_path: Path
) -> None:
    """Sources served side by side share the session, never a table: each source run on
    its own (the engine alone, one source at a time) writes every table of the shared
    run row for row: the shards, the published state, the history and the dedup state."""
    shared, _ = together
    alone = landed(tmp_path)
    for source in SOURCES:
        run_through(spark, alone, source["name"], T0 + 120_000)
    for source in SOURCES:
        name = source["name"]
        tables = sorted(p.parent.name for p in (shared.lake / name).glob("*/_delta_log"))
        assert {"remap", "reclocked", "changes", "errors", "state"} <= set(tables)
        assert tables == sorted(p.parent.name for p in (alone.lake / name).glob("*/_delta_log"))
        for table in tables:
            assert table_rows(alone, name, table) == table_rows(shared, name, table), (
                f"{name}/{table}"
            )
