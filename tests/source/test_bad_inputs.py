"""A corpus of bad inputs (what a broken producer, a crashed copy job and an angry user
leave in a landing folder) through one ``reclock materialize`` of three sources.

Every case must surface as a row of its source's ``errors`` table naming its file or its
Kafka position; every good record must reach ``state``; the clean source must not notice;
every output table must stay readable by pyarrow and by delta-spark; ``inspect`` must not claim the
source is caught up. One pipeline run serves all cases, so the corpus costs one run.
"""

from __future__ import annotations

import gzip
import json
import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from deltalake import DeltaTable

from cdc_core.app.status import statuses
from cdc_core.config import Config, load_config
from cdc_core.source import SourcePipeline
from cdc_core.spark import planned_as
from pipelines.run import materialize

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z, the config's start
TS = T0 + 1_000  # inside the first window

# The tables every source has (a kept history aside).
TABLES = ("remap", "reclocked", "changes", "state", "errors")


def kcat(topic: str, partition: object, offset: object, key: object, payload: object,
         ts: object = TS) -> bytes:  # fmt: skip
    """A kcat ``-J`` line; ``key``/``payload`` are the JSON texts kcat writes as strings."""
    record = {"topic": topic, "partition": partition, "offset": offset, "tstype": "create",
              "ts": ts, "broker": 1, "headers": [], "key": key, "payload": payload}  # fmt: skip
    return json.dumps(record).encode() + b"\n"


def user(partition: int, offset: int, key: int, name: str, n: int = 1) -> bytes:
    return kcat("users", partition, offset, json.dumps({"id": key}),
                json.dumps({"name": name, "n": n}))  # fmt: skip


def click(partition: int, offset: int, page: str, n: int = 1) -> bytes:
    return kcat("clicks", partition, offset, None, json.dumps({"page": page, "n": n}))


def with_payload(partition: int, offset: int, key: str | None, payload: str | None) -> bytes:
    return kcat("users", partition, offset, key, payload)


def raw_line(partition: int, offset: int, bad_payload: bytes) -> bytes:
    """A users line whose payload string holds raw bytes (as a broken producer writes)."""
    return kcat("users", partition, offset, '{"id": 1}', "PAYLOAD").replace(b"PAYLOAD", bad_payload)


# Good records: users partition 0 (ids 0..5) spread over awkward but valid files, clicks
# partition 0, orders partition 0. Their rows must be in ``state``, exactly.
GOOD_USERS = {offset: (offset, f"user-{offset}") for offset in range(6)}
# The first records of lines that go on after their JSON object: kept, the rest reported.
FIRST_OF_LINE = {(700, "a"), (702, "a")}
GOOD_CLICKS = [f"/page/{i}" for i in range(4)]
GOOD_ORDERS = {i: (i, f"order-{i}") for i in range(5)}
# A complete gzip stream cut in half: the records before the cut still count.
TRUNCATED_RECORDS = 400
TRUNCATED_PARTITION = 2


def gzip_cut(data: bytes) -> bytes:
    whole = gzip.compress(data, compresslevel=1)
    return whole[: len(whole) // 2]


def gzip_corrupt(data: bytes) -> bytes:
    """A gzip stream whose deflate data is overwritten in the middle."""
    whole = bytearray(gzip.compress(data, compresslevel=1))
    middle = len(whole) // 2
    whole[middle : middle + 64] = b"\xff" * 64
    return bytes(whole)


@dataclass(frozen=True)
class Case:
    """One bad input: where it lands, how it is made, and the error row it must give:
    a reason fragment and, for a record-level error, the Kafka position."""

    name: str
    topic: str
    path: str  # under <landing>/<topic>/
    make: Callable[[Path], None]
    reason: str
    position: tuple[int, int] | None = None


def content(data: bytes) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        path.write_bytes(data)

    return write


def symlink_to(target: str) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        os.symlink(target, path)

    return make


def fifo(path: Path) -> None:
    os.mkfifo(path)


def folder_loop(path: Path) -> None:
    """A symlink back to the topic folder: walking it would never end."""
    os.symlink(path.parent.parent, path)


# Each line-level case gets its own users partition (100 + index) at offset 0: a line
# whose position reads is bound there as an error; one that loses its position leaves a
# hole, which holds back only that partition.
LINE_CASES = [
    ("invalid UTF-8 in the payload", raw_line(0, 0, b'{\\"name\\": \\"o\xff\xfe\\"}'),
     "dump line is not valid UTF-8"),
    ("invalid UTF-8 in a latin-1 name",
     raw_line(0, 0, '{\\"name\\": \\"Jos\xe9\\"}'.encode("latin-1")),
     "dump line is not valid UTF-8"),
    ("two records on one line", user(0, 0, 700, "a")[:-1] + user(0, 1, 701, "b"),
     "text after the JSON object is lost"),
    ("trailing garbage after the record", user(0, 0, 702, "a")[:-1] + b" garbage\n",
     "text after the JSON object is lost"),
    ("offset as a string", kcat("users", 0, "0", '{"id": 1}', "{}"),
     "offset must be a 64-bit integer"),
    ("partition beyond 32 bits", kcat("users", 2**40, 0, '{"id": 1}', "{}"),
     "partition must be a 32-bit integer"),
    ("negative offset", kcat("users", 0, -1, '{"id": 1}', "{}"), "negative offset -1"),
    ("fractional ts", kcat("users", 0, 0, '{"id": 1}', "{}", ts=1.5),
     "ts must be a 64-bit integer"),
    ("ts missing", json.dumps({"topic": "users", "partition": 0, "offset": 0}).encode() + b"\n",
     "ts is missing"),
    ("another topic's record", kcat("orders", 0, 0, '{"id": 1}', "{}"),
     "topic orders found in a dump of users"),
]


def line_case(index: int, name: str, line: bytes, reason: str) -> Case:
    """Rewrites the line's partition to 100 + index when it has a numeric one."""
    partition = 100 + index
    fixed = line.replace(b'"partition": 0,', f'"partition": {partition},'.encode(), 1)
    position = (partition, 0) if fixed != line and b'"offset": 0,' in fixed else None
    return Case(name, "users", f"lines/{index:02d}.json", content(fixed), reason, position)


# Envelope-level cases: well-formed dump lines (records, bound and reclocked) whose key or
# payload does not decode. Users partition 1, contiguous offsets, a key id of their own.
ENVELOPE_CASES = [
    ("Infinity in a bigint value field", '{"id": 1001}', '{"name": "a", "n": Infinity}',
     "value does not match the declared schema: field 'n' is not a valid bigint"),
    ("NaN as the key", '{"id": NaN}', '{"name": "a", "n": 1}',
     "key does not match the declared schema: field 'id' is not a valid bigint"),
    ("bigint overflow", '{"id": 1003}', '{"name": "a", "n": 1e30}',
     "field 'n' is not a valid bigint"),
    ("number as a string", '{"id": 1004}', '{"name": "a", "n": "12"}',
     "field 'n' is not a valid bigint"),
    ("key of the wrong type", '{"id": "abc"}', '{"name": "a", "n": 1}',
     "key does not match the declared schema: field 'id' is not a valid bigint"),
    ("key without its column", '{"other": 1}', '{"name": "a", "n": 1}',
     "key is missing required field(s): id"),
    ("key that is not JSON", "abc", '{"name": "a", "n": 1}',
     "key is neither a JSON object nor a JSON scalar"),
    ("payload that is a JSON array", '{"id": 1008}', '[{"name": "a"}]',
     "value is not a JSON object"),
    ("payload cut mid-object", '{"id": 1009}', '{"name": "a", "n"', "value is not a JSON object"),
    ("payload that is a bare string", '{"id": 1010}', '"hello"', "value is not a JSON object"),
    ("null key in an upsert source", None, '{"name": "a", "n": 1}', "null key"),
    ("an object where a bigint belongs", '{"id": 1012}', '{"name": "a", "n": {"x": 1}}',
     "value does not match the declared schema: field 'n' is not a valid bigint"),
]


def envelope_case(offset: int, name: str, key: str | None, payload: str, reason: str) -> Case:
    line = with_payload(1, offset, key, payload)
    return Case(name, "users", f"envelope/{offset:02d}.json", content(line), reason, (1, offset))


GOOD_USER_LINES = b"".join(user(0, o, *GOOD_USERS[o]) for o in range(6))
TRUNCATED_LINES = b"".join(
    user(TRUNCATED_PARTITION, o, 200 + o, "x" * 40) for o in range(TRUNCATED_RECORDS)
)

FILE_CASES = [
    Case("gzip file cut in half by a crashed copy", "users", "cut.json.gz",
         content(gzip_cut(TRUNCATED_LINES)), "truncated gzip file"),
    Case("gzip file corrupted in the middle", "users", "corrupt.json.gz",
         content(gzip_corrupt(user(3, 0, 400, "lost") * 200)), "corrupt gzip file"),
    Case("plain text named .gz", "users", "not-gzip.json.gz", content(user(4, 0, 401, "z")),
         "corrupt gzip file"),
    Case("gzip header only", "users", "header-only.json.gz",
         content(gzip.compress(b"x")[:6]), "gzip file"),
    Case("zero-byte file", "users", "zero.json", content(b""), "empty dump file (0 bytes)"),
    Case("zero-byte gzip file", "users", "zero.json.gz", content(b""),
         "empty dump file (0 bytes)"),
    Case("gzip of nothing", "users", "nothing.json.gz", content(gzip.compress(b"")),
         "dump file holds no valid record"),
    Case("whitespace only", "users", "blank.json", content(b"  \n\n\t\n"),
         "dump file holds no valid record"),
    Case("random binary", "users", "binary.json", content(bytes(range(256)) * 4),
         "dump line is not valid UTF-8"),
    Case("a CSV export", "users", "export.csv", content(b"id,name\n1,a\n"),
         "not a JSON object: id,name"),
    Case("a pretty-printed JSON array", "users", "array.json",
         content(b'[\n  {"topic": "users", "partition": 0, "offset": 9}\n]\n'),
         "not a JSON object: ["),
    Case("a line cut mid-record", "users", "cut-line.json",
         content(user(5, 0, 402, "cut")[:40]), "not a JSON object"),
    Case("NUL bytes from a preallocated file", "users", "nul.json", content(b"\x00" * 64 + b"\n"),
         "not a JSON object"),
    Case("symlink to itself", "users", "loop.json", symlink_to("loop.json"),
         "unreadable path: Too many levels of symbolic links"),
    Case("dangling symlink", "users", "dangling.json", symlink_to("/nonexistent/x.json"),
         "unreadable path: No such file or directory"),
    Case("named pipe", "users", "pipe.json", fifo, "unreadable path: not a regular file"),
    Case("folder symlinked into itself", "users", "nested/again", folder_loop, "symlink loop"),
    Case("clicks gzip cut in half", "clicks", "cut.json.gz",
         content(gzip_cut(b"".join(click(1, o, "/cut") for o in range(300)))),
         "truncated gzip file"),
    Case("clicks payload with Infinity", "clicks", "inf.json",
         content(kcat("clicks", 2, 0, None, '{"page": "/x", "n": Infinity}')),
         "value does not match the declared schema: field 'n' is not a valid bigint",
         position=(2, 0)),
    Case("clicks zero-byte file", "clicks", "zero.json", content(b""),
         "empty dump file (0 bytes)"),
]

CASES = (
    [line_case(i, *case) for i, case in enumerate(LINE_CASES)]
    + [envelope_case(i, *case) for i, case in enumerate(ENVELOPE_CASES)]
    + FILE_CASES
)


def write_landing(landing: Path) -> None:
    """Good records in awkward-but-valid files, then every case."""
    users = landing / "users"
    (users / "2026" / "01 01").mkdir(parents=True)
    lines = GOOD_USER_LINES.splitlines(keepends=True)
    (users / "crlf.json").write_bytes(b"".join(x.replace(b"\n", b"\r\n") for x in lines[:2]))
    (users / "2026" / "01 01" / "ünïcode name+%20.json.gz").write_bytes(
        gzip.compress(b"".join(lines[2:4]))
    )
    (users / "no-final-newline.json").write_bytes(b"\xef\xbb\xbf" + b"".join(lines[4:])[:-1])
    (landing / "clicks").mkdir()
    (landing / "clicks" / "good.json").write_bytes(
        b"".join(click(0, i, page) for i, page in enumerate(GOOD_CLICKS))
    )
    (landing / "orders").mkdir()
    (landing / "orders" / "good.json").write_bytes(
        b"".join(
            kcat("orders", 0, o, json.dumps({"id": i}), json.dumps({"name": name}))
            for o, (i, name) in GOOD_ORDERS.items()
        )
    )
    for case in CASES:
        path = landing / case.topic / case.path
        path.parent.mkdir(parents=True, exist_ok=True)
        case.make(path)


CONFIG_FILE = "reclock.yaml"


def write_config(workdir: Path) -> Config:
    def source(name: str, key: dict, value: dict, envelope: str) -> dict:
        return {"name": name, "topic": name, "format": "json", "key": key, "value": value,
                "envelope": envelope, "reclock": "event-time"}  # fmt: skip

    config = {
        "lake": "lake",
        "landing": "landing",
        "window": "1m",
        "start": "2026-01-01T00:00:00Z",
        "end": "2026-01-01T00:02:00Z",
        "spark": {"master": "local[2]", "conf": {"spark.sql.shuffle.partitions": "4"}},
        "sources": [
            source("users", {"id": "bigint"}, {"name": "string", "n": "bigint"}, "upsert"),
            source("clicks", {}, {"page": "string", "n": "bigint"}, "none"),
            source("orders", {"id": "bigint"}, {"name": "string"}, "upsert"),
        ],
    }
    path = workdir / CONFIG_FILE
    path.write_text(yaml.safe_dump(config))
    return load_config(path)


def table(config: Config, source: str, name: str) -> list[dict]:
    """An output table read back by pyarrow: ``to_pylist`` fails on invalid UTF-8."""
    return DeltaTable(str(config.lake / source / name)).to_pyarrow_table().to_pylist()


@pytest.fixture(scope="module")
def corpus(bad_input_lake: Config) -> Config:
    """The corpus through one run, shared with tests/pipelines/test_spark_connect.py."""
    return bad_input_lake


def test_the_corpus_is_large_enough() -> None:
    assert len(CASES) >= 40
    assert len({(case.topic, case.path) for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_each_bad_input_is_an_error_row_with_its_position(corpus: Config, case: Case) -> None:
    errors = table(corpus, case.topic, "errors")
    path = str(corpus.landing / case.topic / case.path)
    if case.position is not None:
        found = [e for e in errors if (e["partition"], e["offset"]) == case.position]
    else:
        found = [e for e in errors if e["file"] == path]
    assert found, f"no error row for {case.position or path}"
    assert any(case.reason in e["reason"] for e in found), [e["reason"] for e in found]
    assert all(e["diff"] > 0 for e in found)  # identical bad lines add up


def test_every_good_record_reaches_state(corpus: Config) -> None:
    users = {(r["id"], r["name"]) for r in table(corpus, "users", "state")}
    good = set(GOOD_USERS.values())
    assert good <= users
    # The complete lines before the cut of the truncated gzip file, each exactly once.
    salvaged = {(i, name) for i, name in users if 200 <= i < 200 + TRUNCATED_RECORDS}
    assert 0 < len(salvaged) < TRUNCATED_RECORDS
    assert salvaged == {(200 + o, "x" * 40) for o in range(len(salvaged))}
    assert users == good | salvaged | FIRST_OF_LINE, "no bad record became a row"
    clicks = Counter(r["page"] for r in table(corpus, "clicks", "state"))
    cut = clicks.pop("/cut")
    assert clicks == Counter(GOOD_CLICKS)
    assert 0 < cut < 300  # the lines before the cut of the clicks gzip file


def test_the_clean_source_is_unaffected(corpus: Config) -> None:
    assert {(r["id"], r["name"]) for r in table(corpus, "orders", "state")} == set(
        GOOD_ORDERS.values()
    )
    assert table(corpus, "orders", "errors") == []


def test_every_output_table_is_readable_and_errors_are_valid_text(corpus: Config, spark) -> None:
    with planned_as(spark, True, {}):  # small tables: planned as a small run's
        for source in corpus.sources:
            for name in TABLES:
                rows = table(corpus, source.name, name)
                path = str(corpus.lake / source.name / name)
                by_delta_spark = spark.read.format("delta").load(path).toArrow().to_pylist()
                assert sorted(map(repr, by_delta_spark)) == sorted(map(repr, rows)), path
                if name == "errors":
                    assert all(isinstance(r["reason"], str) and r["reason"] for r in rows)


def test_inspect_does_not_claim_caught_up(corpus: Config) -> None:
    status = {s.source: s for s in statuses(corpus)}
    users = status["users"].inspection
    assert not users.caught_up
    damaged = dict(users.damaged)
    for case in FILE_CASES:
        if case.topic == "users":
            assert str(corpus.landing / "users" / case.path) in damaged, case.name
    assert "NOT caught up" in status["users"].describe()
    assert status["orders"].inspection.caught_up


def test_a_rerun_reports_nothing_twice(corpus: Config, spark) -> None:
    """Files without records are reported by the first run only; a re-run writes nothing."""
    before = {s.name: DeltaTable(str(corpus.lake / s.name / "errors")).version()
              for s in corpus.sources}  # fmt: skip
    pipeline = SourcePipeline.from_config(spark, corpus, corpus.source("users"))
    assert pipeline.register_dumps(arrival_ms=T0) == 0
    assert materialize(corpus, exports=False)
    after = {s.name: DeltaTable(str(corpus.lake / s.name / "errors")).version()
             for s in corpus.sources}  # fmt: skip
    assert after == before
