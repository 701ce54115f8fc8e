"""The ``history`` asset and its ``versions`` check, through real Dagster runs of the tiny
deployment (its records and their windows are spelled out in ``test_dagster_surface``)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from dagster import AssetKey, DagsterInstance
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from cdc_core.config import Config, parse_config
from pipelines.build import ALL_WINDOWS_JOB, build_definitions
from tests.assets.test_dagster_surface import (
    BINDING_TIMES,
    FIRST_DUMP,
    KEYS,
    SECOND_DUMP,
    SOURCE,
    check_evaluations,
    deployment_data,
    materializations,
    run_checks_alone,
    value,
    write_dump,
)

B1, B2, B3 = BINDING_TIMES
# Versions by hand after each window: (id, name, valid_from, valid_to, partition, offset).
# Window 2 updates key 1 and deletes key 2; window 3 inserts keys 3 and 4 (key 5's value
# does not decode: an error, no version).
HISTORY_AFTER = (
    {(1, "Ada", B1, None, 0, 0), (2, "Grace", B1, None, 1, 0)},
    {(1, "Ada", B1, B2, 0, 0), (2, "Grace", B1, B2, 1, 0), (1, "Ada L.", B2, None, 0, 1)},
    {(1, "Ada", B1, B2, 0, 0), (2, "Grace", B1, B2, 1, 0), (1, "Ada L.", B2, None, 0, 1),
     (3, "Linus", B3, None, 0, 2), (4, "Edsger", B3, None, 1, 2)},
)  # fmt: skip


def history_rows(config: Config) -> set[tuple]:
    rows = DeltaTable(str(config.lake / SOURCE / "history")).to_pyarrow_table().to_pylist()
    columns = ("id", "name", "valid_from", "valid_to", "partition", "offset")
    return {tuple(row[c] for c in columns) for row in rows}


@pytest.fixture(scope="module")
def with_history(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Config:
    data = deployment_data()
    data["sources"][0]["history"] = True
    config = parse_config(data, tmp_path_factory.mktemp("history_asset"))
    write_dump(config.landing / SOURCE / "a.json", FIRST_DUMP)
    write_dump(config.landing / SOURCE / "later" / "b.json", SECOND_DUMP)
    return config


def test_each_window_materializes_history_and_its_check_passes(with_history: Config) -> None:
    job = build_definitions(with_history).resolve_job_def(ALL_WINDOWS_JOB)
    instance = DagsterInstance.ephemeral()
    for key, expected in zip(KEYS, HISTORY_AFTER, strict=True):
        run = job.execute_in_process(partition_key=key, instance=instance)
        assert run.success
        assert history_rows(with_history) == expected
        (event,) = materializations(run, "history")
        assert event.partition == key
        columns = [c.name for c in value(event.metadata, "dagster/column_schema").columns]
        assert columns == ["id", "name", "valid_from", "valid_to", "partition", "offset"]
        versions = check_evaluations(run)["history.versions"]
        assert versions.passed, versions.description
        assert value(versions.metadata, "figures")["versions"] == len(expected)

    # Run again: nothing new, so the history gets no new Delta version.
    before = DeltaTable(str(with_history.lake / SOURCE / "history")).version()
    assert job.execute_in_process(partition_key=KEYS[-1], instance=instance).success
    assert DeltaTable(str(with_history.lake / SOURCE / "history")).version() == before

    # Reopen Ada's closed version behind reclock's back: the check fails, naming why.
    reopen_closed_version(with_history.lake / SOURCE / "history", name="Ada")
    rerun = run_checks_alone(with_history, [AssetKey([SOURCE, "history"])], KEYS[-1])
    failed = check_evaluations(rerun)["history.versions"]
    assert not failed.passed
    figures = value(failed.metadata, "figures")
    assert figures["keys_with_several_open_versions"] == 1
    assert figures["overlapping_versions"] == 1
    assert figures["rows_differing_from_changes"] == 1


def reopen_closed_version(table_path: Path, name: str) -> None:
    """Set ``valid_to`` of the version named ``name`` to null, in its Parquet file."""
    for uri in DeltaTable(str(table_path)).file_uris():
        path = uri.removeprefix("file://")
        rows = pq.read_table(path)
        named = pc.equal(rows["name"], name)
        if pc.any(named).as_py():
            valid_to = pc.if_else(named, pa.scalar(None, pa.int64()), rows["valid_to"])
            index = rows.schema.get_field_index("valid_to")
            pq.write_table(rows.set_column(index, rows.schema.field(index), valid_to), path)
            return
    raise AssertionError(f"no version named {name!r}")
