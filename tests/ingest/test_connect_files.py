"""Kafka Connect sink files (JSON lines and Avro container files, plain or gzip) as dumps:
offsets from the file name and the record's place in it, mixed with kcat files of the same
topic without counting a record twice, and read with the key and header files the sink
stores beside them (a value file waits for them), through real pipeline runs."""

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
from cdc_core.ingest.connect_files import connect_name, kcat_lines, stem
from cdc_core.reclock import Windows
from cdc_core.source import SourcePipeline
from cdc_core.vocabulary import SinkStore

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
    assert (name.topic, name.partition, name.start, name.avro, name.gzip, name.stored) == (
        "clicks", 3, 120, False, True, None
    )
    assert connect_name("/l/clicks/dump-0001.json") is None
    keys = connect_name("/l/a+b/partition=3/a+b+3+0000000120.keys.avro")
    assert (keys.topic, keys.partition, keys.start, keys.avro, keys.stored) == (
        "a+b", 3, 120, True, SinkStore.KEYS
    )
    folder = "/l/clicks/partition=3"
    names = ("clicks+3+0000000120.json", "clicks+3+0000000120.keys.json.gz",
             "clicks+3+0000000120.headers.avro")  # fmt: skip
    assert {stem(f"{folder}/{n}") for n in names} == {f"{folder}/clicks+3+0000000120"}
    assert stem(f"{folder}/clicks+3+0000000121.json") != stem(f"{folder}/{names[0]}")


def avro_file(schema: object, records: list) -> bytes:
    out = io.BytesIO()
    fastavro.writer(out, fastavro.parse_schema(schema), records)
    return out.getvalue()


HEADER_RECORD = {"type": "record", "name": "Header",
                 "fields": [{"name": "key", "type": "string"},
                            {"name": "value", "type": ["null", "string"]}]}  # fmt: skip
HEADERS_AVRO = {"type": "array", "items": HEADER_RECORD}
KEY_AVRO = {"type": "record", "name": "Key", "fields": [{"name": "id", "type": "long"}]}


def test_key_and_header_files_give_each_record_its_key_and_headers(tmp_path: Path) -> None:
    """As the S3 sink writes them: keys as JSON values (an object, or a string for a key
    it read as text), headers enveloped in JSON, bare in Avro; kcat's headers alternate
    names and values."""
    value = tmp_path / "clicks+0+7.json"
    write(value, b'{"page": "a", "n": 1}\nnull\n', mtime_ms=T0 + 7)
    write(tmp_path / "clicks+0+7.keys.json", b'{"id": 1}\n"k2"\n')
    write(tmp_path / "clicks+0+7.headers.json",
          b'{"headers":[{"key":"trace","value":"t1"},{"key":"n","value":null}]}\n'
          b'{"headers":[{"key":"trace","value":"t2"}]}\n')  # fmt: skip
    stored = {SinkStore.KEYS: str(tmp_path / "clicks+0+7.keys.json"),
              SinkStore.HEADERS: str(tmp_path / "clicks+0+7.headers.json")}  # fmt: skip
    lines = [json.loads(line) for line in kcat_lines(str(value), stored)]
    assert [(r["offset"], r["key"], r["payload"], r["headers"]) for r in lines] == [
        (7, '{"id": 1}', '{"page": "a", "n": 1}', ["trace", "t1", "n", None]),
        (8, '"k2"', None, ["trace", "t2"]),
    ]
    avro = tmp_path / "clicks+1+0.avro"
    write(avro, avro_file(VALUE_AVRO, [{"page": "x", "n": 5}]))
    write(tmp_path / "clicks+1+0.keys.avro", avro_file(KEY_AVRO, [{"id": 5}]))
    write(tmp_path / "clicks+1+0.headers.avro",
          avro_file(HEADERS_AVRO, [[{"key": "trace", "value": "t5"}]]))  # fmt: skip
    stored = {kind: str(tmp_path / f"clicks+1+0.{kind}.avro") for kind in SinkStore}
    [line] = [json.loads(line) for line in kcat_lines(str(avro), stored)]
    assert (line["key"], line["payload"], line["headers"]) == (
        '{"id": 5}', '{"page": "x", "n": 5}', ["trace", "t5"]
    )
    # A key file that ends early: the records before are read, the rest is the damage.
    write(tmp_path / "clicks+0+7.keys.json", b'{"id": 1}\n')
    short = list(kcat_lines(str(value), {SinkStore.KEYS: str(tmp_path / "clicks+0+7.keys.json")}))
    assert json.loads(short[0])["key"] == '{"id": 1}'
    assert short[1] == (
        f"Kafka Connect sink file is damaged after 1 record(s): its keys file "
        f"{tmp_path / 'clicks+0+7.keys.json'} holds only 1 record(s)"
    )


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


def test_a_sink_value_file_is_read_with_its_key_and_header_files_and_waits_for_them(
    spark: SparkSession, tmp_path: Path
) -> None:
    """An upsert source fed by a sink that stores keys and headers (JSON for partition 0,
    Avro for partition 1). Partition 0's second value file lands before its key file: the
    binding holds the partition at its first offset, naming the file it waits for; once
    the key file lands, the next window reads it."""
    landing = tmp_path / "landing" / "users"
    zero, one = landing / "partition=0", landing / "partition=1"

    def keys(ids: range) -> bytes:
        return "".join(json.dumps({"id": i}) + "\n" for i in ids).encode()

    def headers(ids: range) -> bytes:
        return "".join(
            json.dumps({"headers": [{"key": "trace", "value": f"t{i}"}]}) + "\n" for i in ids
        ).encode()

    def names(ids: range) -> bytes:
        return "".join(json.dumps({"name": f"n{i}"}) + "\n" for i in ids).encode()

    write(zero / "users+0+0000000000.json", names(range(1, 3)))
    write(zero / "users+0+0000000000.keys.json", keys(range(1, 3)))
    write(zero / "users+0+0000000000.headers.json", headers(range(1, 3)))
    write(one / "users+1+0000000000.avro",
          avro_file({"type": "record", "name": "V", "fields": [{"name": "name", "type": "string"}]},
                    [{"name": "n10"}]))  # fmt: skip
    write(one / "users+1+0000000000.keys.avro", avro_file(KEY_AVRO, [{"id": 10}]))
    write(one / "users+1+0000000000.headers.avro",
          avro_file(HEADERS_AVRO, [[{"key": "trace", "value": "t10"}]]))  # fmt: skip
    write(zero / "users+0+0000000002.json", names(range(3, 5)))  # its keys come later
    write(zero / "users+0+0000000002.headers.json", headers(range(3, 5)))
    config = parse_config(
        {"lake": "lake", "landing": "landing", "window": "1m", "start": "2026-01-01T00:00:00Z",
         "sources": [{"name": "users", "topic": "users", "key": {"id": "bigint"},
                      "value": {"name": "string"}, "envelope": "upsert", "reclock": "arrival",
                      "include": ["headers"], "sink_stores": ["keys", "headers"]}]},
        tmp_path,
    )  # fmt: skip
    pipeline = SourcePipeline.from_config(spark, config, config.sources[0])

    def state() -> list[tuple]:
        rows = DeltaTable(str(tmp_path / "lake" / "users" / "state")).to_pyarrow_table()
        return sorted(
            (r["id"], r["name"], [(h["key"], h["value"]) for h in r["headers"]])
            for r in rows.to_pylist()
        )

    pipeline.register_dumps(arrival_ms=T0)
    [report] = pipeline.run_windows(Windows(T0, T0 + WIDTH, WIDTH))
    pipeline.finish()
    assert state() == [(1, "n1", [("trace", b"t1")]), (2, "n2", [("trace", b"t2")]),
                       (10, "n10", [("trace", b"t10")])]  # fmt: skip
    assert report.frontier.offsets == {0: 2, 1: 1}
    [held] = pipeline.reader.inspect().held
    assert (held.partition, held.waits_at) == (0, 2)
    assert held.reason == (
        f"Kafka Connect sink file {zero / 'users+0+0000000002.json'} waits for its keys "
        "file: a value file is read only with the files the sink stores beside it "
        "(sink_stores), which land after it"
    )

    write(zero / "users+0+0000000002.keys.json", keys(range(3, 5)))
    pipeline.register_dumps(arrival_ms=T0 + WIDTH)
    [report] = pipeline.run_windows(Windows(T0 + WIDTH, T0 + 2 * WIDTH, WIDTH))
    pipeline.finish()
    assert report.frontier.offsets == {0: 4, 1: 1}
    assert state()[2:4] == [(3, "n3", [("trace", b"t3")]), (4, "n4", [("trace", b"t4")])]
    assert pipeline.reader.inspect().held == ()
    errors = DeltaTable(str(tmp_path / "lake" / "users" / "errors")).to_pyarrow_table()
    assert errors.num_rows == 0
