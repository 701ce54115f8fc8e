"""Property: random dumps (shuffled, redelivered, split across files arriving at different
times) reclocked window by window, or all windows in one pass, put every record in
``reclocked`` exactly once, at the first covering binding of the event-time or arrival
policy (plain-Python oracle), and the remap stays monotone."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from cdc_core.ingest import Registry
from tests.reclock.test_reclock_support import (
    Options,
    Rec,
    open_shards,
    oracle_bindings,
    oracle_times,
    reclocked_rows,
    register_new,
    remap_history,
    run_windows,
    write_dump,
)
from tests.spark_examples import SPARK_EXAMPLES

WIDTH = 30
ENDS = (30, 60, 90)


ARRIVALS = (0, 20, 50, 80)


@dataclass(frozen=True)
class Case:
    records: list[Rec]
    files: list[tuple[int, list[Rec]]]  # (arrival, contents)
    allow_gaps: bool
    policy: str
    batch: bool

    def arrivals(self) -> dict[tuple[int, int], int]:
        """Each offset's earliest arrival (the kept copy is the earliest-arriving one)."""
        first: dict[tuple[int, int], int] = {}
        for arrival, contents in self.files:
            for r in contents:
                position = (r.partition, r.offset)
                first[position] = min(first.get(position, arrival), arrival)
        return first


@st.composite
def cases(draw: st.DrawFn) -> Case:
    """Records of up to two partitions (offset 0 always present; with gaps allowed some
    later offsets are missing), spread over files with redeliveries, in shuffled order."""
    allow_gaps = draw(st.booleans())
    records = []
    for partition in range(draw(st.integers(1, 2))):
        count = draw(st.integers(1, 7))
        offsets = [0] + [
            o for o in range(1, count) if not (allow_gaps and draw(st.booleans()))
        ]
        records += [Rec(partition, o, draw(st.integers(0, 100))) for o in offsets]
    files: list[list[Rec]] = [[] for _ in range(draw(st.integers(1, 3)))]
    for record in records:
        for _ in range(draw(st.integers(1, 2))):  # a second copy is a redelivery
            files[draw(st.integers(0, len(files) - 1))].append(record)
    return Case(
        records,
        [(draw(st.sampled_from(ARRIVALS)), draw(st.permutations(f))) for f in files if f],
        allow_gaps,
        draw(st.sampled_from(["event-time", "arrival"])),
        draw(st.booleans()),
    )


@settings(SPARK_EXAMPLES, max_examples=6)
@given(case=cases())
def test_every_record_once_at_its_first_covering_binding(
    spark: SparkSession, tmp_path_factory, case: Case
) -> None:
    root: Path = tmp_path_factory.mktemp("property")
    landing = root / "landing"
    registry = Registry(root / "registry", "t")
    for arrival in sorted({arrival for arrival, _ in case.files}):
        for index, (when, contents) in enumerate(case.files):
            if when == arrival:
                write_dump(landing, "t", f"part-{index}.json", contents)
        register_new(spark, registry, landing, arrival_ms=arrival)
    remap, reclocked = open_shards(spark, root)
    source = Options(reclock=case.policy, allow_offset_gaps=case.allow_gaps)

    run_windows(spark, source, registry, remap, reclocked, ENDS, WIDTH, batch=case.batch)

    arrivals = case.arrivals() if case.policy == "arrival" else None
    expected_bindings = oracle_bindings(case.records, ENDS, case.allow_gaps, arrivals)
    history = remap_history(remap)
    bound = [history[t] for t in sorted(history)]
    assert all(  # monotone, and every stored binding is one of the oracle's
        all(a.get(p, 0) <= b.get(p, 0) for p in a) for a, b in itertools.pairwise(bound)
    )
    for end, expected in zip(ENDS, expected_bindings, strict=True):
        latest = max((t for t in history if t <= end), default=None)
        assert (history[latest] if latest is not None else {}) == expected

    times = oracle_times(case.records, ENDS, expected_bindings)
    rows = reclocked_rows(reclocked)
    assert [(p, o, t, d) for p, o, t, d, _ in rows] == sorted(
        (p, o, t, 1) for (p, o), t in times.items()
    )
    assert reclocked.upper.time == ENDS[-1] + 1
