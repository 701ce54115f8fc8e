"""Dump listing and parsing against hand-written kcat ``-J`` files and hand-written expectations."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession

from cdc_core.ingest.dumps import list_dump_files, read_dumps, scan_dump_files
from cdc_core.schemas import DUMP_RECORD, ERROR

T0 = 1_767_225_600_000


def line(partition: object, offset: object, ts: object, key: str | None, payload: str | None,
         topic: str = "users") -> str:  # fmt: skip
    """A kcat -J line, written out by hand (key/payload are JSON text inside JSON strings)."""

    def text(value: str | None) -> str:
        return "null" if value is None else '"' + value.replace('"', '\\"') + '"'

    return (
        f'{{"topic":"{topic}","partition":{partition},"offset":{offset},"tstype":"create",'
        f'"ts":{ts},"broker":1,"headers":[],"key":{text(key)},"payload":{text(payload)}}}\n'
    )


def write(path: Path, lines: list[str], *, gz: bool = False) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(lines).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return str(path)


def rows(frame: DataFrame) -> list[tuple]:
    return sorted((tuple(row) for row in frame.collect()), key=repr)


def test_list_dump_files_recurses_skips_hidden_and_in_progress(tmp_path: Path) -> None:
    topic = tmp_path / "users"
    kept = [
        write(topic / "a.json", ["x\n"]),
        write(topic / "2026" / "01" / "b.json.gz", ["x\n"], gz=True),
        write(topic / "deep" / "any name", ["yy\n"]),
    ]
    for ignored in [".hidden.json", "_SUCCESS", "c.json.tmp", "d.json.partial",
                    "_archive/old.json", ".staging/e.json"]:  # fmt: skip
        write(topic / ignored, ["x\n"])
    write(tmp_path / "orders" / "o.json", ["x\n"])
    os.utime(kept[0], ns=(T0 * 1_000_000, (T0 + 1234) * 1_000_000))

    listed = list_dump_files(tmp_path, "users")

    assert [dump.path for dump in listed] == sorted(kept)
    assert listed[0].path == str(topic / "2026" / "01" / "b.json.gz")
    first = next(dump for dump in listed if dump.path == kept[0])
    assert (first.size, first.mtime_ms) == (2, T0 + 1234)
    assert list_dump_files(tmp_path, "missing") == []


def test_plain_gzip_and_nested_files_parse_to_the_expected_records(
    spark: SparkSession, tmp_path: Path
) -> None:
    landing = tmp_path / "landing"
    plain = write(landing / "users" / "a b+c%20.json", [
        line(0, 0, T0, '{"id":1}', '{"name":"a"}'),
        line(0, 1, T0 + 5, '{"id":1}', None),
    ])  # fmt: skip
    zipped = write(landing / "users" / "sub" / "deeper" / "late.json.gz", [
        line(2, 7, T0 + 9, None, '{"name":"ü"}'),
        line(0, 1, T0 + 5, '{"id":1}', None),
    ], gz=True)  # fmt: skip
    files = [dump.path for dump in list_dump_files(landing, "users")]
    assert sorted(files) == sorted([plain, zipped])

    read = read_dumps(spark, files, topic="users")

    assert read.records.schema == DUMP_RECORD
    assert read.errors.schema == ERROR
    assert rows(read.records) == sorted(
        [
            ("users", 0, 0, T0, '{"id":1}', '{"name":"a"}', plain),
            ("users", 0, 1, T0 + 5, '{"id":1}', None, plain),
            ("users", 2, 7, T0 + 9, None, '{"name":"ü"}', zipped),
            ("users", 0, 1, T0 + 5, '{"id":1}', None, zipped),
        ],
        key=repr,
    )
    assert read.errors.count() == 0


# Lines that are not records, one per way a line can fail (errors listed in the test below).
BAD_LINES = [
    "this is not json\n",
    '{"topic":"users","partition":1,"offset":5,"ts":1\n',
    "[1, 2]\n",
    line('"one"', 6, T0, '{"id":6}', None),
    line(1, 7.5, T0, '{"id":7}', None),
    line(1, -8, T0, '{"id":8}', None),
    line(-1, 9, T0, '{"id":9}', None),
    line(1, 10, '"late"', '{"id":10}', None),
    line(1, 11, T0, '{"id":11}', None, topic="orders"),
    '{"topic":"users","offset":12,"ts":5}\n',
    '{"topic":"users","partition":1,"offset":null,"ts":5}\n',
]


def test_malformed_lines_become_errors_while_good_lines_parse(
    spark: SparkSession, tmp_path: Path
) -> None:
    good = line(1, 4, T0, '{"id":4}', '{"name":"d"}')
    dump = write(tmp_path / "users" / "mixed.json", [
        line(1, 3, T0, '{"id":3}', '{"name":"c"}'),
        *BAD_LINES,
        "   \n",
        good,
    ])  # fmt: skip

    read = read_dumps(spark, [dump], topic="users")

    assert rows(read.records.select("partition", "offset", "file")) == [
        (1, 3, dump),
        (1, 4, dump),
    ]
    assert rows(read.errors) == sorted(
        [
            (None, None, None, None, "not a JSON object: this is not json", dump),
            (None, None, None, None,
             'not a JSON object: {"topic":"users","partition":1,"offset":5,"ts":1', dump),
            (None, None, None, None, "not a JSON object: [1, 2]", dump),
            ("users", None, 6, '{"id":6}', 'partition must be a 32-bit integer, got "one"', dump),
            ("users", 1, None, '{"id":7}', "offset must be a 64-bit integer, got 7.5", dump),
            ("users", 1, -8, '{"id":8}', "negative offset -8", dump),
            ("users", -1, 9, '{"id":9}', "negative partition -1", dump),
            ("users", 1, 10, '{"id":10}', 'ts must be a 64-bit integer, got "late"', dump),
            ("orders", 1, 11, '{"id":11}', "topic orders found in a dump of users", dump),
            ("users", None, 12, None, "partition is missing", dump),
            ("users", 1, None, None, "offset must be a 64-bit integer, got null", dump),
        ],
        key=repr,
    )  # fmt: skip


def test_damaged_gzip_files_become_errors_and_other_files_still_parse(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A truncated gzip file keeps the complete lines before the cut (a pure function of
    its bytes); a corrupt one yields nothing; both are an error row naming the file."""
    good = write(tmp_path / "users" / "good.json.gz", [line(0, 0, T0, '{"id":1}', "{}")], gz=True)
    records = [line(0, offset, T0, '{"id":2}', "{}") for offset in range(1, 2001)]
    whole = gzip.compress("".join(records).encode(), compresslevel=1)
    truncated = tmp_path / "users" / "truncated.json.gz"
    truncated.write_bytes(whole[: len(whole) // 2])
    garbage = tmp_path / "users" / "garbage.json.gz"
    garbage.write_bytes(b"definitely not gzip\n")
    plain = write(tmp_path / "users" / "plain.json", [line(1, 0, T0, '{"id":3}', "{}")])
    # Oracle: the complete lines Python's own decompressor gets out of the cut file.
    with gzip.open(truncated, "rb") as stream:
        readable = b""
        with pytest.raises(EOFError):
            while chunk := stream.read1(1 << 16):
                readable += chunk
    salvaged = readable.count(b"\n")
    assert 0 < salvaged < len(records)

    read = read_dumps(spark, [good, str(truncated), str(garbage), plain])

    assert rows(read.records.select("partition", "offset", "file")) == sorted(
        [(0, 0, good), (1, 0, plain)]
        + [(0, offset, str(truncated)) for offset in range(1, salvaged + 1)],
        key=repr,
    )
    errors = {row.file: row.reason for row in read.errors.collect()}
    assert set(errors) == {str(truncated), str(garbage)}
    assert errors[str(garbage)].startswith("corrupt gzip file: ")
    assert errors[str(truncated)].startswith("truncated gzip file")
    assert "ended before the end-of-stream marker" in errors[str(truncated)]
    scan = scan_dump_files(spark, [str(truncated), str(garbage)])
    assert scan.damaged == errors
    assert [(r["file"], r["records"]) for r in scan.summary.to_pylist()] == [
        (str(truncated), salvaged)
    ]


def test_missing_files_raise_and_no_files_read_empty(spark: SparkSession, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="gone.json"):
        read_dumps(spark, [str(tmp_path / "gone.json")])
    empty = read_dumps(spark, [])
    assert (empty.records.count(), empty.errors.count()) == (0, 0)
    assert empty.records.schema == DUMP_RECORD


def test_scan_summarises_each_file_and_partition(spark: SparkSession, tmp_path: Path) -> None:
    first = write(tmp_path / "users" / "1.json", [
        line(0, 10, T0 + 30, '{"id":1}', "{}"),
        line(0, 11, T0 + 20, '{"id":2}', None),
        line(1, 3, T0 + 40, '{"id":3}', "{}"),
        line(0, 12, T0 + 50, '{"id":1}', "{}"),
        "garbage line\n",
        # Damaged, but its position reads: it widens the range, counted as damaged.
        '{"topic": "users", "partition": 1, "offset": 4, "ts": "soon"}\n',
    ])  # fmt: skip
    second = write(tmp_path / "users" / "2.json.gz", [
        line(0, 12, T0 + 50, '{"id":1}', "{}"),
        line(0, 13, T0 + 60, '{"id":1}', "{}"),
    ], gz=True)  # fmt: skip

    scan = scan_dump_files(spark, [second, first])
    table = scan.summary

    assert table.schema.field("partition").type == pa.int32()
    assert table.to_pylist() == [
        {"file": first, "partition": 0, "min_offset": 10, "max_offset": 12,
         "min_ts": T0 + 20, "max_ts": T0 + 50, "records": 3, "damaged_lines": 0},
        {"file": first, "partition": 1, "min_offset": 3, "max_offset": 4,
         "min_ts": T0 + 40, "max_ts": T0 + 40, "records": 1, "damaged_lines": 1},
        {"file": second, "partition": 0, "min_offset": 12, "max_offset": 13,
         "min_ts": T0 + 50, "max_ts": T0 + 60, "records": 2, "damaged_lines": 0},
    ]  # fmt: skip
    assert scan.bad_lines == {first: 2}


def test_scan_counts_exactly_the_lines_read_dumps_keeps(
    spark: SparkSession, tmp_path: Path
) -> None:
    dump = write(tmp_path / "users" / "mixed.json", [
        line(1, 3, T0 + 5, '{"id":3}', '{"name":"c"}'),
        # A key that is a JSON object rather than text: kept, as its JSON text.
        f'{{"topic":"users","partition":1,"offset":4,"ts":{T0 + 9},"key":{{"id":4}}}}\n',
        *BAD_LINES,
        line(2, 0, T0 + 1, None, None),
        # Two records on one line: the first is kept, the lost rest is an error.
        line(2, 1, T0 + 2, None, None)[:-1] + line(2, 2, T0 + 3, None, None),
    ])  # fmt: skip

    read = read_dumps(spark, [dump], topic="users")
    kept = read.records.collect()
    lost = [e for e in read.errors.collect() if e.reason.startswith("text after the JSON")]
    assert [(e.partition, e.offset) for e in lost] == [(2, 1)]
    # Damaged lines whose position reads widen their partition's range (bound there).
    placed = read.lines.where("positioned").collect()
    expected: dict[int, list[tuple[int, int | None, bool]]] = {}
    for line_ in [*kept, *placed]:
        expected.setdefault(line_.partition, []).append((line_.offset, line_.ts, line_ in kept))
    scanned = scan_dump_files(spark, [dump], topic="users").summary.to_pylist()

    assert sorted(expected) == [1, 2]  # the oracle itself kept what it should
    assert placed, "BAD_LINES hold damaged lines whose position reads"
    assert scanned == [
        {"file": dump, "partition": p, "min_offset": min(o for o, _, _ in rows),
         "max_offset": max(o for o, _, _ in rows),
         "min_ts": min(t for _, t, _ in rows if t is not None),
         "max_ts": max(t for _, t, _ in rows if t is not None),
         "records": sum(good for _, _, good in rows),
         "damaged_lines": sum(not good for _, _, good in rows)}
        for p, rows in sorted(expected.items())
    ]  # fmt: skip
