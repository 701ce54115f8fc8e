"""Dumps landed on S3 and a registry kept on S3 behave as the same dumps and registry in
local folders: registration (statistics, damage, bad lines), the sensor's look for
unregistered paths (before and after maintenance sorts the registry), the canonical
read (kcat, gzip, Kafka Connect sink files with their key and header files, a truncated
gzip file's salvaged lines, an empty object, a line that is not UTF-8) and the loud
failure on a needed file that is gone."""

from __future__ import annotations

import gzip
import json
from dataclasses import replace
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from cdc_core.ingest import MissingDumpFile, Registry, list_dump_files
from cdc_core.ingest.canonical import SourceFiles, read_canonical
from cdc_core.ingest.connect_files import layout_of
from cdc_core.ingest.registry import RegisteredPaths, fold_registry
from cdc_core.spark import get_spark
from cdc_core.storage import Location, files
from cdc_core.vocabulary import DumpLayout

TOPIC = "users"


def kcat(offsets: range, partition: int = 0, extra: str = "") -> bytes:
    """kcat ``-J`` lines of ``offsets`` (payload and ts follow the offset)."""
    lines = "".join(
        json.dumps({"topic": TOPIC, "partition": partition, "offset": o, "ts": 1000 + o,
                    "key": json.dumps({"k": o}), "payload": json.dumps({"v": o})}) + "\n"
        for o in offsets
    )  # fmt: skip
    return (lines + extra).encode()


def sink(values: range) -> bytes:
    """A Kafka Connect JSON sink file's lines (values only)."""
    return "".join(json.dumps({"v": v}) + "\n" for v in values).encode()


DUMPS = {
    "a.json": kcat(range(0, 5), extra="not json\n"),
    "nested/b.json.gz": gzip.compress(kcat(range(5, 9)) + kcat(range(0, 3), partition=1)),
    "cut.json.gz": gzip.compress(kcat(range(20, 200)), compresslevel=1)[:-30],
    "with space+plus.json": kcat(range(9, 12)),
    f"partition=2/{TOPIC}+2+40.json": sink(range(40, 43)),
    # What the sink stores beside it (store.kafka.keys, store.kafka.headers).
    f"partition=2/{TOPIC}+2+40.keys.json": "".join(
        json.dumps({"k": k}) + "\n" for k in range(40, 43)
    ).encode(),
    f"partition=2/{TOPIC}+2+40.headers.json": "".join(
        json.dumps({"headers": [{"key": "h", "value": str(k)}]}) + "\n" for k in range(40, 43)
    ).encode(),
    "empty.json": b"",
    "undecodable.json": kcat(range(12, 14)) + b'{"topic": "users", "ts": "\xff\xfe"}\n',
}


@pytest.fixture
def spark(s3_bucket: str) -> SparkSession:
    """The suite's session, with the s3a settings of the test's server."""
    return get_spark("local[2]", {"spark.sql.shuffle.partitions": "4"},
                     places=[Location.parse(f"s3://{s3_bucket}/landing")])  # fmt: skip


def land(root: str) -> None:
    for name, data in DUMPS.items():
        files.write_bytes(files.join(root, TOPIC, name), data)


def registered(spark: SparkSession, landing: str, registry_root: str) -> Registry:
    registry = Registry(registry_root, TOPIC, stores=("keys", "headers"))
    registry.register(spark, list_dump_files(Location.parse(landing), TOPIC), arrival_ms=7)
    return registry


def relative(path: str, landing: str) -> str:
    return path.removeprefix(landing)


def test_dumps_on_s3_register_and_read_as_the_same_dumps_in_a_folder(
    spark: SparkSession, s3_bucket: str, tmp_path: Path
) -> None:
    remote, local = f"s3://{s3_bucket}/landing", str(tmp_path / "landing")
    for landing in (remote, local):
        land(landing)
    on_s3 = registered(spark, remote, f"s3://{s3_bucket}/lake/users/dumps")
    on_disk = registered(spark, local, str(tmp_path / "lake" / "users" / "dumps"))

    def described(registry: Registry, landing: str) -> list[tuple]:
        """Each file's registration; a sink file's ts is its modification time (the
        store's, not the folder's), so only its offsets and counts are compared."""
        return sorted(
            (relative(f.path, landing), tuple(
                replace(s, min_ts=None, max_ts=None) if layout_of(f.path) is DumpLayout.CONNECT
                else s for s in f.partitions
            ), f.problem, f.bad_lines)
            for f in registry.files()
        )  # fmt: skip

    s3_files = described(on_s3, remote)
    assert s3_files == described(on_disk, local)
    assert len(s3_files) == len(DUMPS)
    by_name = {name: (problem, bad) for name, _, problem, bad in s3_files}
    assert by_name[f"/{TOPIC}/a.json"] == (None, 1)
    assert by_name[f"/{TOPIC}/cut.json.gz"][0].startswith("truncated gzip file")
    (empty,) = [f for f in on_s3.files() if f.path.endswith("/empty.json")]
    assert (empty.size, empty.no_record_reason()) == (0, "empty dump file (0 bytes)")
    assert by_name[f"/{TOPIC}/undecodable.json"] == (None, 1)
    ends = on_s3.end_offsets().offsets  # partition 0: up to the truncated file's cut
    assert (ends[1], ends[2]) == (3, 43) and 20 < ends[0] < 200

    late = files.join(remote, TOPIC, "late.json")
    known = files.join(remote, TOPIC, "a.json")
    assert on_s3.unregistered([known, late]) == [late]
    assert fold_registry(on_s3)  # maintenance's rewrite, made on the store
    assert described(on_s3, remote) == s3_files
    assert RegisteredPaths(on_s3.files_path).missing([known, late]) == [late]

    def records(registry: Registry) -> list[tuple]:
        part = SourceFiles(registry.topic, registry.files(), {})
        canonical = read_canonical(spark, [part], headers=True)
        columns = ("partition", "offset", "ts", "payload", "key", "headers")
        return sorted(tuple(row) for row in canonical.records.select(*columns).collect())

    s3_records = records(on_s3)
    local_records = records(on_disk)
    assert [r for r in s3_records if r[0] != 2] == [r for r in local_records if r[0] != 2]
    assert [r[:2] + r[3:] for r in s3_records] == [r[:2] + r[3:] for r in local_records]
    offsets = {(p, o) for p, o, *_ in s3_records}
    # The sink's value file read with its key and header files, on the store as on disk.
    assert [(o, key, json.loads(headers)) for p, o, _, _, key, headers in s3_records
            if p == 2] == [(k, json.dumps({"k": k}), ["h", str(k)]) for k in range(40, 43)]
    assert {(0, o) for o in range(12)} | {(1, o) for o in range(3)} <= offsets
    assert {(2, 40), (2, 41), (2, 42)} <= offsets
    salvaged = {o for p, o in offsets if p == 0 and o >= 20}
    assert salvaged and salvaged == set(range(20, 20 + len(salvaged)))
    sink_file = files.join(remote, TOPIC, f"partition=2/{TOPIC}+2+40.json")
    assert {ts for p, _, ts, *_ in s3_records if p == 2} == {files.mtime_ms(sink_file)}
    canonical = read_canonical(spark, [SourceFiles(on_s3.topic, on_s3.files(), {})])
    errors = {(row.file, row.reason.split(":")[0]) for row in canonical.read_errors.collect()}
    assert (known, "not a JSON object") in errors
    undecodable = files.join(remote, TOPIC, "undecodable.json")
    assert (undecodable, "dump line is not valid UTF-8 (bad bytes shown as \ufffd)") in errors


def test_a_needed_dump_gone_from_s3_is_named_with_its_offsets(
    spark: SparkSession, s3_bucket: str
) -> None:
    remote = f"s3://{s3_bucket}/landing"
    land(remote)
    registry = registered(spark, remote, f"s3://{s3_bucket}/lake/users/dumps")
    files.delete_file(files.join(remote, TOPIC, "a.json"))
    with pytest.raises(MissingDumpFile, match=r"a\.json \(partition 0 offsets 0\.\.4\)"):
        read_canonical(spark, [SourceFiles(registry.topic, registry.files(), {})])
