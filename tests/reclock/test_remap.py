"""Remap bindings: minting policies, gap and start-offset options, durability, inversion."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from cdc_core.calendar import MisalignedWindow, Windows
from cdc_core.frontier import OffsetFrontier, TimeFrontier
from cdc_core.ingest import Registry
from cdc_core.reclock.remap import (
    FrontierRequest,
    NonMonotoneBinding,
    UnexpectedStartOffset,
    binding_updates,
    mint_bindings,
    offsets_for,
    propose_frontiers,
    visible_at,
)
from cdc_core.schemas import REMAP
from cdc_core.shard import Shard
from tests.reclock.test_reclock_support import Options, Rec, register_new, write_dump


def proposed(spark, source, registry, previous, windows):
    """The frontiers ``source`` binds at the ends of ``windows`` from ``previous``, asked
    alone (what it cannot bind is raised)."""
    request = FrontierRequest(source, registry, previous, windows)
    (answer,) = propose_frontiers(spark, [request]).frontiers
    if isinstance(answer, Exception):
        raise answer
    return answer


def propose_frontier(spark, source, registry, previous, end):
    """The frontier one window ending at ``end`` binds from ``previous``."""
    return proposed(spark, source, registry, previous, Windows.one(0, end))[0]


def mint_binding(spark, source, registry, remap, start, end):
    """Bind the one window ``[start, end)``: its frontier, and whether this call minted it."""
    bound = mint_bindings(spark, source, registry, remap, Windows.one(start, end))
    return bound.at(end), end in bound.minted


@pytest.fixture
def landing(tmp_path: Path) -> Path:
    return tmp_path / "landing"


@pytest.fixture
def registry(tmp_path: Path) -> Registry:
    return Registry(tmp_path / "registry", "t")


def test_event_time_gap_holds_back_unless_gaps_are_allowed(
    spark: SparkSession, landing: Path, registry: Registry
) -> None:
    # Partition 0 misses offset 3 (compacted away); partition 1 has a late timestamp at 2.
    write_dump(landing, "t", "a.json", [Rec(0, o, 10) for o in (0, 1, 2, 4, 5)])
    write_dump(landing, "t", "b.json", [Rec(1, 0, 10), Rec(1, 1, 10), Rec(1, 2, 99), Rec(1, 3, 10)])
    register_new(spark, registry, landing, arrival_ms=1)

    strict = propose_frontier(spark, Options(), registry, OffsetFrontier(), end=50)
    assert strict.offsets == {0: 3, 1: 2}
    compacted = Options(allow_offset_gaps=True)
    assert propose_frontier(spark, compacted, registry, OffsetFrontier(), end=50).offsets == {
        0: 6,
        1: 2,
    }


def test_arrival_policy_uses_only_files_registered_before_the_window_end(
    spark: SparkSession, landing: Path, registry: Registry
) -> None:
    write_dump(landing, "t", "a.json", [Rec(0, o, 1000) for o in range(3)])
    register_new(spark, registry, landing, arrival_ms=40)
    write_dump(landing, "t", "b.json", [Rec(0, o, 0) for o in range(3, 6)])
    register_new(spark, registry, landing, arrival_ms=60)

    arrival = Options(reclock="arrival")
    # Timestamps do not matter under arrival; the arrival time of each file does.
    assert propose_frontier(spark, arrival, registry, OffsetFrontier(), end=50).offsets == {0: 3}
    assert propose_frontier(spark, arrival, registry, OffsetFrontier({0: 3}), end=70).offsets == {
        0: 6
    }


def test_unexpected_start_offset_is_refused_unless_configured(
    spark: SparkSession, landing: Path, registry: Registry
) -> None:
    write_dump(landing, "t", "head_lost.json", [Rec(0, o, 1) for o in range(5, 9)])
    register_new(spark, registry, landing, arrival_ms=1)

    with pytest.raises(UnexpectedStartOffset, match=r"partition 0 starts at offset 5 in .*head"):
        propose_frontier(spark, Options(), registry, OffsetFrontier(), end=50)
    with pytest.raises(UnexpectedStartOffset):  # gaps mode does not excuse a missing head
        propose_frontier(spark, Options(allow_offset_gaps=True), registry, OffsetFrontier(), 50)
    accepted = Options(start_offsets={0: 5})
    assert propose_frontier(spark, accepted, registry, OffsetFrontier(), end=50).offsets == {0: 9}
    # A start inside the dump: the records below it are not part of the source.
    later = Options(start_offsets={0: 7})
    assert propose_frontier(spark, later, registry, OffsetFrontier(), end=50).offsets == {0: 9}


def test_a_binding_may_not_move_backwards(spark: SparkSession) -> None:
    with pytest.raises(NonMonotoneBinding, match="partition 1: 5 -> 3"):
        binding_updates(OffsetFrontier({0: 1, 1: 5}), [(10, OffsetFrontier({0: 2, 1: 3}))])


def test_bindings_are_minted_once_reused_and_invertible(
    spark: SparkSession, tmp_path: Path, landing: Path, registry: Registry
) -> None:
    write_dump(landing, "t", "a.json", [Rec(0, o, 10 * o) for o in range(6)])
    register_new(spark, registry, landing, arrival_ms=1)
    remap = Shard.open(spark, str(tmp_path / "remap"), REMAP)

    first, minted = mint_binding(spark, Options(), registry, remap, start=0, end=25)
    assert (first.offsets, minted) == ({0: 3}, True)
    # New data that would change the binding arrives; another process re-runs the window.
    write_dump(landing, "t", "b.json", [Rec(1, 0, 0)])
    register_new(spark, registry, landing, arrival_ms=2)
    other = Shard.open(spark, str(tmp_path / "remap"), REMAP)
    assert mint_binding(spark, Options(), registry, other, start=0, end=25) == (first, False)

    # Window [50, 75) materialized before [25, 50): the skipped window keeps the frontier.
    third, _ = mint_binding(spark, Options(), registry, other, start=50, end=75)
    assert third.offsets == {0: 6, 1: 1}
    assert mint_binding(spark, Options(), registry, remap, start=25, end=50) == (first, False)
    assert remap.refresh().upper == TimeFrontier.at(76)

    assert [visible_at(remap, 0, o) for o in (0, 2, 3, 5, 6)] == [25, 25, 75, 75, None]
    assert visible_at(remap, 1, 0) == 75
    assert offsets_for(remap, TimeFrontier.at(26)).offsets == {0: 3}
    assert offsets_for(remap, TimeFrontier.at(75)).offsets == {0: 3}
    assert offsets_for(remap, TimeFrontier.at(0)) == OffsetFrontier()
    assert offsets_for(remap, TimeFrontier.empty()).offsets == {0: 6, 1: 1}


def test_a_run_of_windows_reads_back_what_is_bound_and_mints_the_rest_in_one_commit(
    spark: SparkSession, tmp_path: Path, landing: Path, registry: Registry
) -> None:
    write_dump(landing, "t", "a.json", [Rec(0, o, 10 * o) for o in range(8)])
    register_new(spark, registry, landing, arrival_ms=1)
    remap = Shard.open(spark, str(tmp_path / "remap"), REMAP)
    first, _ = mint_binding(spark, Options(), registry, remap, start=0, end=25)
    version = remap.version

    run = mint_bindings(spark, Options(), registry, remap, Windows(0, 75, 25))
    assert [run.at(end).offsets for end in (25, 50, 75)] == [first.offsets, {0: 5}, {0: 8}]
    assert run.minted == {50, 75}
    assert remap.refresh().version == version + 1  # both new windows in one commit
    with pytest.raises(MisalignedWindow):
        mint_bindings(spark, Options(), registry, remap, Windows(10, 110, 50))


def test_arrival_bindings_of_a_run_jump_gaps_only_when_allowed(
    spark: SparkSession, landing: Path, registry: Registry
) -> None:
    # The head of the partition arrives after the tail.
    write_dump(landing, "t", "tail.json", [Rec(0, o, 0) for o in (2, 3)])
    register_new(spark, registry, landing, arrival_ms=10)
    write_dump(landing, "t", "head.json", [Rec(0, o, 0) for o in (0, 1)])
    register_new(spark, registry, landing, arrival_ms=40)
    windows = Windows(0, 50, 25)

    def frontiers(source: Options) -> list[dict[int, int]]:
        bound = proposed(spark, source, registry, OffsetFrontier(), windows)
        return [f.offsets for f in bound]

    assert frontiers(Options(reclock="arrival")) == [{}, {0: 4}]
    assert frontiers(Options(reclock="arrival", allow_offset_gaps=True)) == [{0: 4}, {0: 4}]
