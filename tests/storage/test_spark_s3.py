"""Spark reaches an s3:// lake through s3a with the storage layer's settings, and only a
config that uses object storage gives its session any."""

from __future__ import annotations

from pathlib import Path

from deltalake import DeltaTable

from cdc_core.spark import get_spark, session_conf
from cdc_core.storage import Location, delta_options

S3A = "spark.hadoop.fs.s3a."


def test_only_a_session_for_object_storage_gets_s3a_settings(tmp_path: Path) -> None:
    assert not any(key.startswith(S3A) for key in session_conf(places=[tmp_path, str(tmp_path)]))
    remote = session_conf(places=[tmp_path, Location.parse("s3://bucket/lake")])
    assert remote[f"{S3A}endpoint.region"]
    # A config's own s3a settings win over the derived ones.
    mine = session_conf(conf={f"{S3A}endpoint.region": "eu-west-3"}, places=["s3://bucket/l"])
    assert mine[f"{S3A}endpoint.region"] == "eu-west-3"


def test_a_session_for_an_s3_lake_writes_and_reads_delta_there(s3_bucket: str) -> None:
    lake = Location.parse(f"s3://{s3_bucket}/lake")
    spark = get_spark("local[2]", {"spark.sql.shuffle.partitions": "4"}, places=[lake])
    table = lake / "users" / "changes"

    spark.range(5).selectExpr("id", "cast(id * 10 as string) as name").write.format(
        "delta"
    ).save(table.spark_path)

    read = spark.read.format("delta").load(table.spark_path)
    assert sorted((r.id, r.name) for r in read.collect()) == [(i, str(i * 10)) for i in range(5)]
    # The same table through delta-rs, with the same settings: one lake, two readers.
    by_rust = DeltaTable(str(table), storage_options=delta_options(str(table)))
    assert sorted(by_rust.to_pyarrow_table().column("id").to_pylist()) == list(range(5))
