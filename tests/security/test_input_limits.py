"""Dumps sized to exhaust a reader: a 64 MiB line in a kcat dump (and a line over the
limit in a Kafka Connect sink file) and a gzip bomb (1 GiB of zeros in about 1 MiB, as a
kcat dump and as a sink file), through one real run of three sources.

Each must become an ``errors`` row naming its file and where in it (never an
out-of-memory crash of the run); the records around a long line keep flowing, and so
do the other sources. The big files are built here, streaming, never committed; the
readers are shown to hold at most the line limit of a line and a few chunks of a bomb
(measured with ``tracemalloc``, in bytes, not time)."""

from __future__ import annotations

import os
import re
import shutil
import tracemalloc
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from cdc_core.config import Config, load_config
from cdc_core.ingest.dump_bytes import (
    CHUNK,
    GZIP_FREE_BYTES,
    MAX_GZIP_RATIO,
    MAX_LINE_BYTES,
    LongLine,
    bounded_lines,
    dump_damage,
)
from pipelines.run import materialize
from tests.source.test_bad_inputs import TS, kcat, user

MIB = 2**20
LONG = 64 * MIB  # the long lines' payload
BOMB = 2**30  # the gzip bomb's zeros
LIMIT = f"{MAX_LINE_BYTES // MIB} MiB"


def write_streaming(path: Path, head: bytes, tail: bytes, size: int = LONG) -> None:
    """``head``, ``size`` bytes of ``x`` (one long run, written a MiB at a time), ``tail``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    block = b"x" * MIB
    with path.open("wb") as out:
        out.write(head)
        for _ in range(size // MIB):
            out.write(block)
        out.write(tail)


def write_bomb(path: Path) -> None:
    """1 GiB of zeros streamed through gzip at level 9 (about 1 MiB)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    deflate = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: a gzip header and trailer
    zeros = bytes(MIB)
    with path.open("wb") as out:
        for _ in range(BOMB // MIB):
            out.write(deflate.compress(zeros))
        out.write(deflate.flush())


USERS_FIRST = user(0, 0, 1, "a")  # the kcat dump's line before its long line
SINK_FIRST = b'{"page": "/a", "n": 1}\n'  # the sink file's line before its long line
SINK_NAME = "clicks+0+0000000000.json"


@dataclass(frozen=True)
class Limits:
    config: Config
    bomb: Path


def write_config(work: Path) -> Config:
    def source(name: str, key: dict, value: dict, envelope: str) -> dict:
        return {"name": name, "topic": name, "key": key, "value": value, "envelope": envelope,
                "reclock": "event-time"}  # fmt: skip

    config = {
        "lake": "lake", "landing": "landing", "window": "1m",
        "start": "2026-01-01T00:00:00Z", "end": "2026-01-01T00:02:00Z",
        "spark": {"master": "local[2]", "conf": {"spark.sql.shuffle.partitions": "4"}},
        "sources": [
            source("users", {"id": "bigint"}, {"name": "string", "n": "bigint"}, "upsert"),
            source("clicks", {}, {"page": "string", "n": "bigint"}, "none"),
            source("orders", {"id": "bigint"}, {"name": "string"}, "upsert"),
        ],
    }  # fmt: skip
    (work / "reclock.yaml").write_text(yaml.safe_dump(config))
    return load_config(work / "reclock.yaml")


@pytest.fixture(scope="module")
def limits(tmp_path_factory: pytest.TempPathFactory, spark: SparkSession) -> Limits:
    work = tmp_path_factory.mktemp("limits")
    landing = work / "landing"
    # A record whose payload is 64 MiB, in its own partition, between two good records.
    long_record = kcat("users", 1, 0, '{"id": 2}', "PAYLOAD")
    head, tail = long_record.split(b"PAYLOAD")
    write_streaming(landing / "users" / "long-line.json", USERS_FIRST + head,
                    tail + user(0, 1, 3, "c"))  # fmt: skip
    write_bomb(landing / "users" / "bomb.json.gz")
    # Just over the limit: the run stays small (a 64 MiB one would plan it as a backfill).
    write_streaming(landing / "clicks" / "partition=0" / SINK_NAME, SINK_FIRST,
                    b'\n{"page": "/c", "n": 3}\n', MAX_LINE_BYTES + MIB)  # fmt: skip
    sink_bomb = landing / "clicks" / "partition=1" / "clicks+1+0000000000.json.gz"
    sink_bomb.parent.mkdir(parents=True)
    shutil.copyfile(landing / "users" / "bomb.json.gz", sink_bomb)
    for sink in (landing / "clicks" / "partition=0" / SINK_NAME, sink_bomb):
        os.utime(sink, ns=(TS * 1_000_000, TS * 1_000_000))  # a sink record's ts: in window 1
    (landing / "orders").mkdir()
    (landing / "orders" / "good.json").write_bytes(
        kcat("orders", 0, 0, '{"id": 1}', '{"name": "o"}', ts=TS)
    )
    config = write_config(work)
    assert materialize(config, exports=False), "oversized input never fails a run"
    return Limits(config, landing / "users" / "bomb.json.gz")


def rows(config: Config, source: str, table: str) -> list[dict]:
    return DeltaTable(str(config.lake / source / table)).to_pyarrow_table().to_pylist()


def reason(config: Config, source: str, file: Path, start: str) -> str:
    """The reason of the one errors row of ``file`` that starts with ``start``."""
    [found] = [row["reason"] for row in rows(config, source, "errors")
               if row["file"] == str(file) and row["reason"].startswith(start)]  # fmt: skip
    return found


def test_a_long_kcat_line_is_an_error_row_and_its_neighbours_are_read(limits: Limits) -> None:
    config = limits.config
    long_line = config.landing / "users" / "long-line.json"
    assert reason(config, "users", long_line, "line(s)") == (
        f"line(s) over the line limit: 1 line(s) over the {LIMIT} line limit are skipped, the "
        f"first line 2 (byte {len(USERS_FIRST)}) is over the {LIMIT} limit; the other lines are "
        "read"
    )
    assert {(r["id"], r["name"]) for r in rows(config, "users", "state")} == {(1, "a"), (3, "c")}


def test_a_gzip_bomb_is_an_error_row_refused_early(limits: Limits) -> None:
    config = limits.config
    bomb = reason(config, "users", limits.bomb, "gzip bomb")
    expanded = re.fullmatch(
        rf"gzip bomb: the gzip stream expands past {MAX_GZIP_RATIO} times its size "
        r"\(([\d,]+) bytes from ([\d,]+)\), the input limit; no line of it is read", bomb
    )
    assert expanded, bomb
    inflated, compressed = (int(group.replace(",", "")) for group in expanded.groups())
    assert GZIP_FREE_BYTES < inflated <= GZIP_FREE_BYTES + CHUNK  # not the whole GiB
    assert inflated > MAX_GZIP_RATIO * compressed


def test_sink_files_report_a_long_line_or_a_bomb_after_their_good_records(
    limits: Limits,
) -> None:
    config = limits.config
    landing = config.landing / "clicks"
    long_line = reason(config, "clicks", landing / "partition=0" / SINK_NAME, "not a JSON")
    assert (
        f"damaged after 1 record(s): line 2 (byte {len(SINK_FIRST)}) is over the {LIMIT} limit"
        in long_line
    )
    bomb = reason(config, "clicks", landing / "partition=1" / "clicks+1+0000000000.json.gz",
                  "not a JSON")  # fmt: skip
    assert f"damaged after 0 record(s): the gzip stream expands past {MAX_GZIP_RATIO}" in bomb
    assert [r["page"] for r in rows(config, "clicks", "state")] == ["/a"]


def test_the_clean_source_is_unaffected(limits: Limits) -> None:
    assert [(r["id"], r["name"]) for r in rows(limits.config, "orders", "state")] == [(1, "o")]
    assert rows(limits.config, "orders", "errors") == []


class Repeated:
    """A stream of ``size`` bytes of ``x`` then ``tail``, made as it is read (one block,
    reused), so that only the reader's own buffers show in ``tracemalloc``."""

    def __init__(self, size: int, tail: bytes) -> None:
        self._left, self._tail, self._block = size, tail, b"x" * CHUNK

    def read(self, size: int = -1, /) -> bytes:
        if self._left > 0:
            self._left -= CHUNK
            return self._block
        tail, self._tail = self._tail, b""
        return tail


def peak_bytes(work: Callable[[], object]) -> tuple[object, int]:
    """What ``work`` returns, and the most memory Python held meanwhile."""
    tracemalloc.start()
    try:
        result = work()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_long_line_is_never_held_whole() -> None:
    lines, peak = peak_bytes(lambda: list(bounded_lines(Repeated(LONG, b"\nok\n"))))
    assert lines == [LongLine(1, 0), b"ok"]
    assert peak < MAX_LINE_BYTES * 5 // 4 < LONG, f"{peak} bytes held"


def test_a_gzip_bomb_is_judged_holding_a_few_chunks(limits: Limits) -> None:
    damage, peak = peak_bytes(lambda: dump_damage(str(limits.bomb)))
    assert damage is not None and damage.reason.startswith("gzip bomb") and not damage.salvaged
    assert peak < 8 * CHUNK, f"{peak} bytes held"


def test_a_big_dump_of_short_lines_is_within_the_limits(tmp_path: Path) -> None:
    """Files over the line limit are scanned for long lines; short lines pass."""
    path = tmp_path / "big.json"
    line = b"x" * (CHUNK // 3) + b"\n"  # lines that straddle the chunks read
    path.write_bytes(line * (MAX_LINE_BYTES // len(line) + 2))
    assert path.stat().st_size > MAX_LINE_BYTES
    assert dump_damage(str(path)) is None
