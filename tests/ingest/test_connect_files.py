"""Kafka Connect sink files (JSON lines and Avro container files, plain or gzip) as dumps:
offsets from the file name and the record's place in it, mixed with kcat files of the same
topic without counting a record twice, through a real pipeline run."""

from __future__ import annotations

import gzip
import io
import json
import os
from pathlib import Path

import fastavro
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from cdc_core.config import parse_config
from cdc_core.ingest.connect_files import connect_name, kcat_lines
from cdc_core.reclock import Windows
from cdc_core.source import SourcePipeline

T0 = 1_767_225_600_000
WIDTH = 60_000
VALUE_AVRO = {
    "type": "record",
    "name": "Click",
    "fields": [{"name": "page", "type": "string"}, {"name": "n", "type": "int"}],
}


def kcat(partition: int, offset: int, page: str) -> str:
    return json.dumps(
        {"topic": "clicks", "partition": partition, "offset": offset, "ts": T0 + 1000,
         "key": json.dumps({"id": offset}), "payload": json.dumps({"page": page, "n": offset})}
    )  # fmt: skip


def sink_json(offsets: range, partition: int) -> bytes:
    return "".join(
        json.dumps({"page": f"p{partition}-{o}", "n": o}) + "\n" for o in offsets
    ).encode()


def sink_avro(offsets: range, partition: int) -> bytes:
    out = io.BytesIO()
    records = [{"page": f"p{partition}-{o}", "n": o} for o in offsets]
    fastavro.writer(out, fastavro.parse_schema(VALUE_AVRO), records)
    return out.getvalue()


def write(path: Path, data: bytes, mtime_ms: int = T0 + 5000) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.utime(path, ns=(mtime_ms * 1_000_000, mtime_ms * 1_000_000))


def test_names_give_partition_and_start_offset() -> None:
    name = connect_name("/l/clicks/partition=3/clicks+3+0000000120.json.gz")
    assert (name.topic, name.partition, name.start, name.avro, name.gzip) == (
        "clicks", 3, 120, False, True
    )
    assert connect_name("/l/clicks/dump-0001.json") is None


def test_records_get_offsets_from_the_name_and_the_file_time_as_ts(tmp_path: Path) -> None:
    path = tmp_path / "clicks+2+40.json"
    write(path, b'{"page": "a", "n": 1}\nnull\n{"page": "c", "n": 3}', mtime_ms=T0 + 7)
    lines = [json.loads(line) for line in kcat_lines(str(path))]
    assert [(r["partition"], r["offset"], r["ts"], r["key"], r["payload"]) for r in lines] == [
        (2, 40, T0 + 7, None, '{"page": "a", "n": 1}'),
        (2, 41, T0 + 7, None, None),
        (2, 42, T0 + 7, None, '{"page": "c", "n": 3}'),
    ]


def test_sink_and_kcat_files_of_one_topic_give_each_record_once(
    spark: SparkSession, tmp_path: Path
) -> None:
    landing = tmp_path / "landing" / "clicks"
    # Partition 0: kcat holds offsets 0..3, the sink 2..5 (2 and 3 in both layouts).
    (landing / "kcat").mkdir(parents=True)
    (landing / "kcat" / "a.json").write_text(
        "\n".join(kcat(0, o, f"p0-{o}") for o in range(4)) + "\n"
    )
    write(landing / "partition=0" / "clicks+0+2.json", sink_json(range(2, 6), 0))
    # Partition 1: an Avro container file (0..2), then a gzip JSON file (3..4), and the
    # Avro file again under a gzip name (a redelivery).
    write(landing / "partition=1" / "clicks+1+0.avro", sink_avro(range(0, 3), 1))
    write(landing / "partition=1" / "clicks+1+3.json.gz", gzip.compress(sink_json(range(3, 5), 1)))
    write(landing / "partition=1" / "clicks+1+0.avro.gz", gzip.compress(sink_avro(range(0, 3), 1)))
    # Partition 2: a gzip sink file cut short: its first records count, the file is reported.
    whole = gzip.compress(sink_json(range(0, 400), 2))
    write(landing / "partition=2" / "clicks+2+0.json.gz", whole[: len(whole) // 2])
    config = parse_config(
        {
            "lake": "lake",
            "landing": "landing",
            "window": "1m",
            "start": "2026-01-01T00:00:00Z",
            "sources": [
                {"name": "clicks", "topic": "clicks", "value": {"page": "string", "n": "int"},
                 "envelope": "none", "reclock": "event-time"}  # fmt: skip
            ],
        },
        tmp_path,
    )
    pipeline = SourcePipeline.from_config(spark, config, config.sources[0])
    pipeline.register_dumps(arrival_ms=T0)
    pipeline.run_windows(Windows(T0, T0 + WIDTH, WIDTH))

    changes = DeltaTable(str(tmp_path / "lake" / "clicks" / "changes")).to_pyarrow_table()
    rows = sorted((r["page"], r["n"], r["diff"]) for r in changes.to_pylist())
    expected_p2 = [r for r in rows if r[0].startswith("p2-")]
    assert [r for r in rows if not r[0].startswith("p2-")] == sorted(
        [(f"p0-{o}", o, 1) for o in range(6)] + [(f"p1-{o}", o, 1) for o in range(5)]
    )
    # The truncated file: a prefix of its records, each once, in offset order from 0.
    assert expected_p2 == sorted((f"p2-{o}", o, 1) for o in range(len(expected_p2)))
    assert 0 < len(expected_p2) < 400
    reclocked = DeltaTable(str(tmp_path / "lake" / "clicks" / "reclocked")).to_pyarrow_table()
    kept = {(r["partition"], r["offset"]): r for r in reclocked.to_pylist()}
    assert kept[(0, 2)]["key"] == json.dumps({"id": 2})  # the kcat copy, with its key
    assert kept[(0, 5)]["key"] is None and kept[(0, 5)]["ts"] == T0 + 5000
    errors = DeltaTable(str(tmp_path / "lake" / "clicks" / "errors")).to_pyarrow_table()
    [damaged] = errors.to_pylist()
    assert damaged["file"].endswith("clicks+2+0.json.gz")
    assert "Kafka Connect sink file is damaged" in damaged["reason"]
