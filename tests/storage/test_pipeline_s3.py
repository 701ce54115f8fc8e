"""The engine on a lake and landing zone on S3 writes, row for row, what it writes in
local folders: bindings, reclocked records, changes, errors, the published state, a
transaction group's bindings; and it retires (archives) the dumps it no longer needs
from the store."""

from __future__ import annotations

from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from cdc_core.config import Config, load_config
from cdc_core.reclock import Windows
from cdc_core.source import SourcePipeline
from cdc_core.spark import get_spark
from cdc_core.storage import Location, delta_options, files
from pipelines.sample import write_sample

WINDOWS = 3  # of the sample's eight: enough to carry state from window to window
# users: upsert; orders: a member of the transaction group; pageviews: Kafka Connect
# sink files (their ts is the file's mtime: compared apart).
SOURCES = ("users", "orders")
TABLES = ("remap", "reclocked", "changes", "errors", "state")


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Config:
    return load_config(write_sample(tmp_path_factory.mktemp("sample")))


@pytest.fixture
def spark(s3_bucket: str) -> SparkSession:
    """The suite's session, with the s3a settings of the test's server."""
    return get_spark("local[2]", {"spark.sql.shuffle.partitions": "4"},
                     places=[Location.parse(f"s3://{s3_bucket}/lake")])  # fmt: skip


def upload(folder: Path, target: str) -> None:
    """Every file under ``folder`` to the same relative key under ``target``."""
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        files.write_bytes(files.join(target, str(path.relative_to(folder))), path.read_bytes())


def table_rows(path: str, landing: str) -> list[tuple]:
    """The table's rows, consolidated where it has a ``diff`` column, sorted; an error's
    dump file named relative to ``landing``."""
    totals: dict[tuple, int] = {}
    for row in DeltaTable(path, storage_options=delta_options(path)).to_pyarrow_table().to_pylist():
        diff = row.pop("diff", 1)
        if row.get("file"):
            row["file"] = row["file"].removeprefix(landing)
        key = tuple(sorted(row.items(), key=lambda item: item[0]))
        totals[key] = totals.get(key, 0) + diff
    return sorted(((key, diff) for key, diff in totals.items() if diff != 0), key=repr)


def run(spark: SparkSession, config: Config, name: str) -> SourcePipeline:
    """The first ``WINDOWS`` windows of ``name`` in one run, then its state published."""
    source = config.source(name)
    pipeline = SourcePipeline.from_config(spark, config, source)
    pipeline.register_dumps(arrival_ms=config.start_ms + 100 * config.window_ms)
    width = config.window_ms
    pipeline.run_windows(Windows(config.start_ms, config.start_ms + WINDOWS * width, width))
    pipeline.finish()
    return pipeline


def test_a_run_on_s3_writes_what_a_run_in_folders_writes_and_retires_from_the_store(
    spark: SparkSession, sample: Config, s3_bucket: str, tmp_path: Path
) -> None:
    bucket = f"s3://{s3_bucket}"
    upload(Path(sample.landing), f"{bucket}/landing")
    remote = sample.model_copy(update={"lake": Location.parse(f"{bucket}/lake"),
                                       "landing": Location.parse(f"{bucket}/landing")})
    local = sample.model_copy(update={"lake": tmp_path / "lake"})
    for name in SOURCES:
        on_s3, in_folder = run(spark, remote, name), run(spark, local, name)
        for table in TABLES:
            assert table_rows(f"{bucket}/lake/{name}/{table}", f"{bucket}/landing") == table_rows(
                str(tmp_path / "lake" / name / table), str(sample.landing)
            ), f"{name}/{table}"
        assert on_s3.inspect().resumption == in_folder.inspect().resumption
    group = sample.transactions[0].name
    assert table_rows(f"{bucket}/lake/_transactions/{group}/bindings", "") == table_rows(
        str(tmp_path / "lake" / "_transactions" / group / "bindings"), ""
    )

    report = on_s3.retire()
    landing_left = {e.path for e in files.list_files(f"{bucket}/landing/orders")}
    archived = {e.path for e in files.list_files(f"{bucket}/lake/orders/archive")}
    assert report.archived and set(report.archived.values()) == archived
    assert not set(report.archived) & landing_left
    assert {p.removeprefix(f"{bucket}/landing/") for p in report.archived} == {
        p.removeprefix(f"{bucket}/lake/orders/archive/") for p in archived
    }
    assert all(f.retired for f in on_s3.registry.files() if f.path in report.archived)
