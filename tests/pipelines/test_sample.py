"""The generated dumps, checked by reading the files in plain Python (no reclock code)."""

from __future__ import annotations

import base64
import gzip
import io
import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import fastavro
import pytest
from pyspark.sql import SparkSession

from cdc_core.config import load_config
from cdc_core.ingest.dumps import list_dump_files, read_dumps
from pipelines.sample import generate_dumps, write_sample

START = 1_767_225_600_000  # 2026-01-01T00:00:00Z
END = START + 8 * 60_000


def file_bytes(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def dump_lines(path: Path) -> list[str]:
    data = path.read_bytes()
    text = gzip.decompress(data) if path.suffix == ".gz" else data
    return text.decode("utf-8").splitlines()


class Topic:
    """Every line of every dump file of a topic, parsed independently of reclock."""

    def __init__(self, landing: Path, topic: str) -> None:
        self.files = sorted((landing / topic).rglob("*.json*"))
        self.records: dict[Path, list[dict[str, Any]]] = {}
        self.malformed: list[tuple[Path, str]] = []
        for path in self.files:
            self.records[path] = []
            for text in dump_lines(path):
                try:
                    self.records[path].append(json.loads(text))
                except json.JSONDecodeError:
                    self.malformed.append((path, text))

    def positions(self, path: Path) -> set[tuple[int, int]]:
        return {(r["partition"], r["offset"]) for r in self.records[path]}

    def unique(self) -> dict[tuple[int, int], dict[str, Any]]:
        """One record per (partition, offset); redelivered copies must be identical."""
        by_position: dict[tuple[int, int], dict[str, Any]] = {}
        for records in self.records.values():
            for record in records:
                position = (record["partition"], record["offset"])
                assert by_position.setdefault(position, record) == record
        return by_position

    def in_kafka_order(self) -> list[dict[str, Any]]:
        return [record for _, record in sorted(self.unique().items())]


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_sample(tmp_path_factory.mktemp("sample"))


@pytest.fixture(scope="module")
def landing(sample: Path) -> Path:
    return sample.parent / "landing"


def test_same_seed_writes_identical_bytes_and_another_seed_does_not(
    sample: Path, tmp_path: Path
) -> None:
    again = write_sample(tmp_path / "again")
    other = write_sample(tmp_path / "other", seed=8)
    assert file_bytes(again.parent) == file_bytes(sample.parent)
    assert file_bytes(other.parent) != file_bytes(sample.parent)


def test_config_describes_the_sample(sample: Path) -> None:
    config = load_config(sample)
    assert config.landing == sample.parent / "landing"
    assert config.lake == sample.parent / "lake"
    assert (config.window_ms, config.start_ms, config.end_ms) == (60_000, START, END)
    assert {s.name: s.envelope for s in config.sources} == {
        "users": "upsert",
        "orders": "debezium-upsert",
        "order_lines": "debezium-upsert",
        "clicks": "none",
        "payments": "upsert",
        "pageviews": "none",
    }
    assert {s.reclock for s in config.sources} == {"event-time"}
    (group,) = config.transactions
    assert (group.topic, dict(group.sources)) == (
        "shop.transaction", {"orders": "public.orders", "order_lines": "public.order_lines"}
    )


def test_the_shop_transactions_span_both_tables_and_windows(landing: Path) -> None:
    """Every END counts, per table, the distinct change events carrying its id; some
    transactions write both tables, and some have lines in a later window than their order."""
    events: dict[str, Counter] = defaultdict(Counter)
    minutes: dict[str, set[int]] = defaultdict(set)
    for topic, collection in (("orders", "public.orders"), ("order_lines", "public.order_lines")):
        seen: set[tuple[str, str]] = set()  # a connector restart re-sends events
        for record in Topic(landing, topic).in_kafka_order():
            event = json.loads(record["payload"]) if record["payload"] else None
            if event is None or event["transaction"] is None:
                assert event is None or event["op"] == "r"  # the snapshot is in none
                continue
            txid = event["transaction"]["id"]
            minutes[txid].add((record["ts"] - START) // 60_000)
            identity = (txid, record["payload"].replace(f'"ts_ms":{event["ts_ms"]}', ""))
            if identity not in seen:
                seen.add(identity)
                events[txid][collection] += 1
    records = Topic(landing, "shop.transaction").in_kafka_order()
    ends = {r["key"]: json.loads(r["payload"]) for r in records
            if json.loads(r["payload"])["status"] == "END"}  # fmt: skip
    assert len(records) == 2 * len(ends)  # a BEGIN and an END each
    for end in ends.values():
        counts = {c["data_collection"]: c["event_count"] for c in end["data_collections"]}
        assert counts == dict(events[end["id"]]), end["id"]
        assert end["event_count"] == sum(counts.values())
    assert sum(1 for e in events.values() if len(e) == 2) >= 20
    assert any(len(m) == 2 for m in minutes.values())


@pytest.mark.parametrize("name", ["users", "orders", "clicks", "payments"])
def test_every_topic_is_realistic(landing: Path, name: str) -> None:
    topic = Topic(landing, name)
    unique = topic.unique()
    assert len(unique) >= 300

    partitions = {p for p, _ in unique}
    assert partitions == {0, 1, 2}
    for partition in partitions:  # no offset gaps once all files are in
        offsets = sorted(o for p, o in unique if p == partition)
        assert offsets == list(range(len(offsets)))

    # Overlapping files: some records are delivered twice.
    copies = Counter(pos for path in topic.files for pos in topic.positions(path))
    assert any(count > 1 for count in copies.values())

    # A file misses a run of a partition's offsets that another file delivers (late).
    assert any(_has_late_records(topic, path) for path in topic.files)

    # Gzip and plain files, in sub-folders, with names unrelated to offset order.
    assert {p.suffix for p in topic.files} == {".gz", ".json"}
    assert any(p.parent != landing / name for p in topic.files)
    by_first_offset = sorted(topic.files, key=lambda p: min(topic.positions(p))[1])
    assert by_first_offset != topic.files
    by_arrival = sorted(topic.files, key=lambda p: p.stat().st_mtime_ns)
    assert by_arrival != by_first_offset

    # Windows: timestamps inside the sample's span, every window holds data, and Kafka
    # timestamps mostly increase with the offset within a partition.
    records = topic.in_kafka_order()
    assert all(START <= r["ts"] < END for r in records)
    assert {(r["ts"] - START) // 60_000 for r in records} == set(range(8))
    steps = [(a["ts"], b["ts"]) for a, b in zip(records, records[1:], strict=False)
             if a["partition"] == b["partition"]]  # fmt: skip
    assert sum(1 for a, b in steps if b < a) < 0.1 * len(steps)
    assert all(r["topic"] == name for r in records)


def test_payments_are_avro_in_the_confluent_wire_format(sample: Path, landing: Path) -> None:
    value_entry = json.loads((sample.parent / "schemas/payments-value/1.json").read_text())
    value_schema = fastavro.parse_schema(json.loads(value_entry["schema"]))
    ids = Counter()
    for record in Topic(landing, "payments").unique().values():
        key = base64.b64decode(record["key"])
        assert key[0] == 0 and int.from_bytes(key[1:5], "big") == 101
        if record["payload"] is None:
            ids["tombstone"] += 1
            continue
        payload = base64.b64decode(record["payload"])
        ids[int.from_bytes(payload[1:5], "big")] += 1
        try:
            fastavro.schemaless_reader(io.BytesIO(payload[5:]), value_schema, value_schema)
        except EOFError:
            ids["cut short"] += 1
    assert ids[102] > 300 and ids[103] == 1 and ids["cut short"] == 1 and ids["tombstone"] > 5


def test_pageviews_are_kafka_connect_sink_files(landing: Path) -> None:
    files = sorted((landing / "pageviews").rglob("*"))
    files = [f for f in files if f.is_file()]
    assert {f.parent.name for f in files} == {"partition=0", "partition=1", "partition=2"}
    assert {"".join(f.suffixes[-2:]) if f.suffix == ".gz" else f.suffix for f in files} == {
        ".json", ".json.gz", ".avro"
    }
    offsets: dict[int, Counter] = defaultdict(Counter)
    for path in files:
        topic, partition, start = path.name.split(".")[0].split("+")
        assert topic == "pageviews" and path.parent.name == f"partition={partition}"
        data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        count = (
            len(list(fastavro.reader(io.BytesIO(data)))) if path.suffix == ".avro"
            else len(data.decode().splitlines())
        )  # fmt: skip
        offsets[int(partition)].update(range(int(start), int(start) + count))
        assert START <= path.stat().st_mtime_ns // 1_000_000 < END
    for counts in offsets.values():  # no gaps; one file was flushed twice
        assert sorted(counts) == list(range(len(counts)))
    assert any(n > 1 for counts in offsets.values() for n in counts.values())


def _has_late_records(topic: Topic, path: Path) -> bool:
    mine = topic.positions(path)
    elsewhere = set().union(*(topic.positions(p) for p in topic.files if p != path))
    for partition in {p for p, _ in mine}:
        offsets = sorted(o for p, o in mine if p == partition)
        holes = set(range(offsets[0], offsets[-1] + 1)) - set(offsets)
        if holes and all((partition, o) in elsewhere for o in holes):
            return True
    return False


def test_users_has_deletes_and_the_promised_bad_records(landing: Path) -> None:
    topic = Topic(landing, "users")
    records = topic.in_kafka_order()

    # Exactly one malformed line, a truncated copy of a record delivered intact elsewhere.
    assert len(topic.malformed) == 1
    broken_path, broken = topic.malformed[0]
    intact = [json.dumps(r, separators=(",", ":"), ensure_ascii=True) for r in records]
    assert any(text.startswith(broken) and len(text) > len(broken) for text in intact)
    assert broken_path in topic.files

    assert sum(1 for r in records if r["key"] is None) == 1
    undecodable = [r for r in records if r["payload"] is not None and not _is_json(r["payload"])]
    assert len(undecodable) == 1
    later_good = [r for r in records if r["key"] == undecodable[0]["key"]
                  and r["partition"] == undecodable[0]["partition"]
                  and r["offset"] > undecodable[0]["offset"] and r["payload"] is not None
                  and _is_json(r["payload"])]  # fmt: skip
    assert later_good, "the undecodable value is later overwritten by a good one"

    deletes = [r for r in records if r["key"] is not None and r["payload"] is None]
    assert len(deletes) >= 20
    seen: set[str] = set()
    never_seen_deletes = []
    for r in records:
        if r["payload"] is None and r["key"] not in seen:
            never_seen_deletes.append(r)
        if r["payload"] is not None:
            seen.add(r["key"])
    assert never_seen_deletes

    # A key always lives in one partition.
    partitions_of_key = defaultdict(set)
    for r in records:
        partitions_of_key[r["key"]].add(r["partition"])
    assert all(len(ps) == 1 for key, ps in partitions_of_key.items() if key is not None)
    assert len(partitions_of_key) > 100


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return False
    return True


def test_orders_is_debezium_postgres_with_snapshot_changes_and_tombstones(landing: Path) -> None:
    records = Topic(landing, "orders").in_kafka_order()
    events = [(r, json.loads(r["payload"])) for r in records if r["payload"] is not None]
    ops = Counter(event["op"] for _, event in events)
    assert ops["r"] >= 10 and ops["c"] >= 10 and ops["u"] >= 10 and ops["d"] >= 5

    for record, event in events:
        assert set(event) >= {"before", "after", "source", "op", "ts_ms"}
        source = event["source"]
        assert source["connector"] == "postgresql" and source["table"] == "orders"
        last_commit, lsn = json.loads(source["sequence"])
        assert lsn == str(source["lsn"])
        row = event["after"] if event["op"] != "d" else event["before"]
        assert json.loads(record["key"]) == {"id": row["id"]}
        if event["op"] == "r":
            assert source["snapshot"] in ("true", "last") and last_commit is None
            assert event["before"] is None
        else:
            assert source["snapshot"] == "false" and last_commit is not None
        if event["op"] == "u":
            assert event["before"]["id"] == event["after"]["id"]
        if event["op"] == "d":
            assert event["after"] is None

    # Every delete is followed, in its partition, by a null-payload tombstone of its key.
    by_position = {(r["partition"], r["offset"]): r for r in records}
    for record, event in events:
        if event["op"] == "d":
            tombstone = by_position[(record["partition"], record["offset"] + 1)]
            assert tombstone["payload"] is None and tombstone["key"] == record["key"]

    # The connector restart re-sends change events at new offsets (same source position).
    positions = Counter(
        (event["source"]["lsn"], event["op"], record["key"])
        for record, event in events
        if event["op"] != "r"
    )
    assert any(count > 1 for count in positions.values())


def test_read_dumps_parses_the_sample_with_one_malformed_line(
    spark: SparkSession, landing: Path
) -> None:
    expected = Topic(landing, "users")
    files = [dump.path for dump in list_dump_files(landing, "users")]
    read = read_dumps(spark, files, topic="users")
    errors = read.errors.collect()
    assert len(errors) == 1 and errors[0].reason.startswith("not a JSON object")
    positions = read.records.select("partition", "offset").distinct().count()
    assert positions == len(expected.unique())


def test_generate_dumps_streams_a_parametric_upsert_topic(tmp_path: Path) -> None:
    params = dict(records=3000, keys=400, partitions=4, windows=5, window_ms=60_000,
                  start_ms=START, delete_fraction=0.1, redelivery_fraction=0.05, files=7,
                  seed=3)  # fmt: skip
    generate_dumps(tmp_path / "a", "events", **params)
    generate_dumps(tmp_path / "b", "events", **params)
    assert file_bytes(tmp_path / "a") == file_bytes(tmp_path / "b")

    topic = Topic(tmp_path / "a", "events")
    assert len(topic.files) == 7 and not topic.malformed
    records = topic.in_kafka_order()
    assert len(records) == 3000
    assert {r["partition"] for r in records} == {0, 1, 2, 3}
    assert len({r["key"] for r in records}) > 350
    deletes = sum(1 for r in records if r["payload"] is None)
    assert 200 < deletes < 400
    assert all(START <= r["ts"] < START + 5 * 60_000 for r in records)
    copies = sum(len(topic.records[p]) for p in topic.files) - len(records)
    assert 0 < copies < 0.1 * len(records)

    with pytest.raises(ValueError, match="redelivery_fraction"):
        generate_dumps(tmp_path / "c", "events", **{**params, "redelivery_fraction": 1.5})
    with pytest.raises(ValueError, match="keys"):
        generate_dumps(tmp_path / "c", "events", **{**params, "keys": 0})
