"""The landing-zone sensor on an S3 lake and landing zone: it sees a dump landed in the
store, asks for a run with the dump's first sighting, writes nothing to the lake, and
once the run has registered the dump it no longer counts it as new."""

from __future__ import annotations

import json

from dagster import DagsterInstance, build_sensor_context
from pyspark.sql import SparkSession

from assets.source_assets import ARRIVALS_TAG
from cdc_core.config import Config, parse_config, use_config
from cdc_core.source import SourcePipeline
from cdc_core.spark import get_spark
from cdc_core.storage import files
from pipelines.build import build_definitions
from resources.lake import LakeResource

LINE = {"topic": "users", "partition": 0, "offset": 0, "ts": 1767225600000,
        "key": '{"id": 1}', "payload": '{"name": "a"}'}  # fmt: skip


def s3_config(bucket: str) -> Config:
    return use_config(parse_config({
        "lake": f"s3://{bucket}/lake", "landing": f"s3://{bucket}/landing", "window": "1m",
        "start": "2026-01-01T00:00:00Z", "end": "2026-01-01T00:10:00Z",
        "sources": [{"name": "users", "topic": "users", "key": {"id": "bigint"},
                     "value": {"name": "string"}, "envelope": "upsert",
                     "reclock": "event-time"}],
    }, "."))  # fmt: skip


def tick(config: Config, cursor: str | None):
    definitions = build_definitions(config)
    lake = LakeResource(root=str(config.lake), landing=str(config.landing))
    context = build_sensor_context(
        instance=DagsterInstance.ephemeral(), cursor=cursor, resources={"lake": lake},
        repository_def=definitions.get_repository_def(),
    )  # fmt: skip
    return definitions.resolve_sensor_def("new_dumps").evaluate_tick(context)


def test_the_sensor_sees_dumps_in_the_store_and_forgets_them_once_registered(
    s3_bucket: str,
) -> None:
    files.write_bytes(f"s3://{s3_bucket}/landing/.keep", b"")  # the landing zone exists
    config = s3_config(s3_bucket)
    dump = f"s3://{s3_bucket}/landing/users/a.json"
    files.write_bytes(dump, (json.dumps(LINE) + "\n").encode())

    first = tick(config, None)
    (request,) = first.run_requests
    assert list(json.loads(request.tags[ARRIVALS_TAG])) == [dump]
    assert files.list_files(f"s3://{s3_bucket}/lake") == []  # a look writes nothing

    spark: SparkSession = get_spark("local[2]", {"spark.sql.shuffle.partitions": "4"},
                                    places=[config.lake])  # fmt: skip
    pipeline = SourcePipeline.from_config(spark, config, config.source("users"))
    assert pipeline.register_dumps(0, json.loads(request.tags[ARRIVALS_TAG])) == 1

    second = tick(config, first.cursor)
    assert json.loads(second.cursor)["seen"] == {}
    assert all(ARRIVALS_TAG not in r.tags or json.loads(r.tags[ARRIVALS_TAG]) == {}
               for r in second.run_requests)  # fmt: skip
