"""The engine on a lake and landing zone on S3 writes, row for row, what it writes in
local folders (the session's sample lake as its first run left it): bindings, reclocked
records, changes, errors, the published state; and it retires (archives) the dumps it no
longer needs from the store."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from cdc_core.source.upkeep import retire_source
from cdc_core.storage import Location, delta_options, files
from tests.lake_rows import SampleLake, run_through

# Every source of the sample but pageviews, whose Kafka Connect sink files carry no record
# timestamps: its records take each file's modification time, which the upload here sets
# anew (docs: guides/object-storage.md), so its windows cannot match the sample's. users: upsert;
# orders and order_lines: debezium members of the transaction group; clicks: no envelope;
# payments: upsert of Avro values.
SOURCES = ("users", "orders", "order_lines", "clicks", "payments")
TABLES = ("remap", "reclocked", "changes", "errors", "state")


def upload(folder: Path, target: str) -> None:
    """Every file under ``folder`` to the same relative key under ``target``."""
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        files.write_bytes(files.join(target, str(path.relative_to(folder))), path.read_bytes())


def portable(table: pa.Table, root: str) -> Counter:
    """``table``'s rows as ``SampleLake.rows`` gives them: a multiset, the lake's and the
    landing zone's common root (in error file names) written ``<root>``."""
    return Counter(
        tuple((name, v.replace(root, "<root>") if isinstance(v, str) else v)
              for name, v in sorted(row.items()))
        for row in table.to_pylist()
    )  # fmt: skip


def test_a_run_on_s3_writes_what_a_run_in_folders_writes_and_retires_from_the_store(
    s3_spark: SparkSession, sample_lake: SampleLake, s3_bucket: str
) -> None:
    sample, bucket = sample_lake.config, f"s3://{s3_bucket}"
    upload(Path(sample.landing), f"{bucket}/landing")
    remote = sample.model_copy(update={"lake": Location.parse(f"{bucket}/lake"),
                                       "landing": Location.parse(f"{bucket}/landing")})
    pipelines = {}
    for name in SOURCES:
        pipelines[name] = run_through(s3_spark, remote, name, sample_lake.first_run_ms)
        for table in TABLES:
            path = f"{bucket}/lake/{name}/{table}"
            written = DeltaTable(path, storage_options=delta_options(path)).to_pyarrow_table()
            assert portable(written, bucket) == sample_lake.rows(name, table, first_run=True), (
                f"{name}/{table}"
            )

    on_s3 = pipelines["orders"]
    report = retire_source(on_s3, int(time.time() * 1000))
    landing_left = {e.path for e in files.list_files(f"{bucket}/landing/orders")}
    archived = {e.path for e in files.list_files(f"{bucket}/lake/orders/archive")}
    assert report.archived and set(report.archived.values()) == archived
    assert not set(report.archived) & landing_left
    assert {p.removeprefix(f"{bucket}/landing/") for p in report.archived} == {
        p.removeprefix(f"{bucket}/lake/orders/archive/") for p in archived
    }
    assert all(f.retired for f in on_s3.registry.files() if f.path in report.archived)
