"""Reclocking two topics on one IntoTime axis: consistent cuts, errors reported once, and
an event-time backfill that reproduces bindings and contents after the outputs are lost."""

from __future__ import annotations

import gzip
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from cdc_core.ingest import Registry
from cdc_core.reclock import ReclockedWindows
from tests.reclock.test_reclock_support import (
    Options,
    Rec,
    open_shards,
    reclocked_rows,
    register_new,
    remap_history,
    run_windows,
    write_dump,
)

WIDTH = 100
ENDS = (100, 200, 300)

# Timestamps grow along each partition, so under event-time every window binds exactly
# the records with ts below its end, in both topics: the cross-topic invariant.
ORDERS = [Rec(0, o, 40 * o) for o in range(9)] + [Rec(1, o, 15 + 70 * o) for o in range(5)]
PAYMENTS = [Rec(0, o, 5 + 33 * o) for o in range(11)]


def land(landing: Path) -> None:
    write_dump(landing, "orders", "o-1.json", ORDERS[:4] + ORDERS[9:11])
    write_dump(landing, "orders", "o-2.json", ORDERS[2:9] + ORDERS[11:], extra="{oops\n")
    write_dump(landing, "payments", "p-1.json", PAYMENTS[5:])
    write_dump(landing, "payments", "p-2.json", PAYMENTS[:6])


def land_late_conflict(landing: Path) -> None:
    """A redelivery of orders p0 offset 2 with another payload, arriving later."""
    write_dump(landing, "orders", "o-3.json", [Rec(0, 2, 80, payload="changed")])


def reclock_both(
    spark: SparkSession, lake: Path, registries: dict[str, Registry], *, batch: bool = False
):
    """Run every window for both topics (one by one, or all in one pass when ``batch``);
    return per topic (history, rows, errors)."""
    results = {}
    for topic, registry in registries.items():
        remap, reclocked = open_shards(spark, lake / topic)
        windows = run_windows(
            spark, Options(topic=topic), registry, remap, reclocked, ENDS, WIDTH, batch=batch
        )
        results[topic] = (remap_history(remap), reclocked_rows(reclocked), errors_of(windows))
    return results


def errors_of(windows: list[ReclockedWindows]) -> list[tuple]:
    rows = [
        (e["partition"], e["offset"], e["time"], e["reason"].split(":")[0], Path(e["file"]).name)
        for window in windows
        for e in window.reclocked.errors.collect()
    ]
    return sorted(rows, key=lambda row: (row[2], row[4]))


def test_two_topics_cut_consistently_and_a_backfill_reproduces_everything(
    spark: SparkSession, tmp_path: Path
) -> None:
    landing, lake = tmp_path / "landing", tmp_path / "lake"
    land(landing)
    topics = ("orders", "payments")
    registries = {topic: Registry(lake / topic / "dumps", topic) for topic in topics}
    for registry in registries.values():
        register_new(spark, registry, landing, arrival_ms=0)
    land_late_conflict(landing)
    register_new(spark, registries["orders"], landing, arrival_ms=1)

    first = reclock_both(spark, lake, registries)

    for topic, records in (("orders", ORDERS), ("payments", PAYMENTS)):
        _, rows, _ = first[topic]
        assert len(rows) == len({(p, o) for p, o, *_ in rows})  # each record once
        for end in ENDS:
            visible = {(p, o) for p, o, t, _, _ in rows if t <= end}
            assert visible == {(r.partition, r.offset) for r in records if r.ts < end}, (topic, end)
    # The kept copy of the contradicted offset is the earlier-arriving one.
    assert tuple(
        payload for p, o, *_, payload in first["orders"][1] if (p, o) == (0, 2)
    ) == ('{"v": "v0-2"}',)
    assert first["orders"][2] == [
        (None, None, 100, "not a JSON object", "o-2.json"),  # o-2 is first read at 100
        (0, 2, 100, "conflicting copy of partition 0 offset 2", "o-3.json"),
    ]
    assert first["payments"][2] == []
    assert first["orders"][0] == {100: {0: 3, 1: 2}, 200: {0: 5, 1: 3}, 300: {0: 8, 1: 5}}

    for topic in registries:  # lose the outputs, keep the dumps and their registry
        shutil.rmtree(lake / topic / "remap")
        shutil.rmtree(lake / topic / "reclocked")
    # The backfill binds and reclocks all windows in one pass, with the same result.
    assert reclock_both(spark, lake, registries, batch=True) == first


CLEAN = [Rec(0, o, 10 * o) for o in range(4)]


def landed(name: str, records: list[Rec], extra: str = "") -> Callable[[Path], None]:
    return lambda landing: write_dump(landing, "t", name, records, extra=extra)


def gzipped(name: str, data: bytes) -> Callable[[Path], None]:
    def land(landing: Path) -> None:
        (landing / "t" / name).write_bytes(data)

    return land


# Each range holds the clean records (twice: identical redeliveries are no error) plus one
# kind of error, alone, so that no other error could make the witness non-empty.
ONE_ERROR = {
    "a conflicting copy": landed("b.json", [Rec(0, 1, 10, payload="other")]),
    "text after a record": landed("b.json", [], extra=Rec(0, 4, 40).line("t") + " garbage\n"),
    "a damaged line with its position": landed(
        "b.json", [Rec(0, 4, 40)], extra='{"topic": "t", "partition": 0, "offset": 5, "ts": "x"}\n'
    ),
    "a line without a position": landed("b.json", [Rec(0, 4, 40)], extra="{oops\n"),
    "an empty file": landed("b.json", []),
    "a gzip stream cut short": gzipped(
        "b.json.gz", gzip.compress(b"".join(r.line("t").encode() + b"\n" for r in CLEAN))[:-9]
    ),
}


@pytest.mark.parametrize("error", [None, *ONE_ERROR])
def test_the_error_witness_proves_a_clean_range_and_never_hides_an_error(
    spark: SparkSession, tmp_path: Path, error: str | None
) -> None:
    landing, lake = tmp_path / "landing", tmp_path / "lake"
    write_dump(landing, "t", "a.json", CLEAN)
    write_dump(landing, "t", "a-again.json", CLEAN)
    if error is not None:
        ONE_ERROR[error](landing)
    registry = Registry(lake / "dumps", "t")
    register_new(spark, registry, landing, arrival_ms=0)
    remap, reclocked = open_shards(spark, lake)

    # ``run_windows`` asserts that a non-empty errors frame has no empty witness.
    [run] = run_windows(spark, Options(), registry, remap, reclocked, [100], WIDTH)

    witness = run.reclocked.error_witness
    if error is None:
        assert witness is not None and witness.isEmpty()
        assert run.reclocked.errors.isEmpty()
    else:
        assert not run.reclocked.errors.isEmpty(), error
