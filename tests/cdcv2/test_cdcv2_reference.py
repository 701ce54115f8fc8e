"""The reference reader on hand-written streams, including each place where reclock is
stricter than the seed's iterator and differential dataflow's capture reader."""

from __future__ import annotations

import itertools

import pytest

from cdc_core.cdcv2.model import (
    CountDisagreement,
    CountExceeded,
    DiffContradiction,
    MalformedMessage,
    Progress,
    UpdateBeforeStart,
    Updates,
)
from cdc_core.cdcv2.reference import ReferenceReader, read_all
from cdc_core.frontier import TimeFrontier

T = TimeFrontier.at
CLOSED = TimeFrontier.empty()


def up(*updates: tuple[str, int, int]) -> Updates:
    return Updates(tuple(((data,), time, diff) for data, time, diff in updates))


def prog(lower: int, upper: int | None, **counts: int) -> Progress:
    end = CLOSED if upper is None else T(upper)
    return Progress(T(lower), end, tuple((int(t[1:]), c) for t, c in counts.items()))


# The seed's example history, consolidated, with one statement per time.
SEED_STREAM = [
    up(("record0", 0, 2), ("record1", 0, 1), ("record2", 0, 1)),
    prog(0, 1, t0=3),
    up(("record1", 1, -1), ("record2", 1, 1)),
    prog(1, 2, t1=2),
    up(("record0", 2, -1), ("record2", 2, -1)),
    prog(2, 3, t2=2),
    prog(3, 4),
]
SEED_FACTS = {
    (("record0",), 0): 2,
    (("record1",), 0): 1,
    (("record2",), 0): 1,
    (("record1",), 1): -1,
    (("record2",), 1): 1,
    (("record0",), 2): -1,
    (("record2",), 2): -1,
}


def as_facts(updates: list) -> dict:
    facts = {(data, time): diff for data, time, diff in updates}
    assert len(facts) == len(updates), "an update was reported twice"
    return facts


def test_in_order_stream_yields_once_per_advance() -> None:
    yields = [(as_facts(batch), frontier) for batch, frontier in ReferenceReader(SEED_STREAM)]
    assert [frontier for _, frontier in yields] == [T(1), T(2), T(3), T(4)]
    assert yields[0][0] == {k: v for k, v in SEED_FACTS.items() if k[1] == 0}
    assert yields[3][0] == {}


# Every 97th of the 5040 orders of the seven messages.
ORDERS = list(itertools.islice(itertools.permutations(range(7)), 0, None, 97))


@pytest.mark.parametrize("order", ORDERS)
def test_any_order_gives_the_same_history(order: tuple[int, ...]) -> None:
    updates, frontier = read_all([SEED_STREAM[i] for i in order])
    assert as_facts(updates) == SEED_FACTS
    assert frontier == T(4)


def test_statement_beyond_a_gap_waits_for_the_gap() -> None:
    reader = ReferenceReader([up(("a", 5, 1)), prog(3, 8, t5=1), prog(0, 3)])
    assert next(reader) == ([(("a",), 5, 1)], T(8))


def test_copies_inside_one_batch_count_once() -> None:
    # Differential dataflow decrements the count of time 0 for both copies and would
    # report time 0 complete although ("b", 0, 1) never arrived; reclock does not.
    updates, frontier = read_all([prog(0, 1, t0=2), up(("a", 0, 1), ("a", 0, 1))])
    assert (updates, frontier) == ([], T(0))


def test_missing_update_pins_the_frontier_at_its_time() -> None:
    stream = [s for s in SEED_STREAM if s != SEED_STREAM[2]] + [up(("record2", 1, 1))]
    updates, frontier = read_all(stream)
    assert frontier == T(1)
    assert as_facts(updates) == {k: v for k, v in SEED_FACTS.items() if k[1] == 0}


def test_closed_stream_reaches_the_empty_frontier() -> None:
    updates, frontier = read_all([prog(0, None, t7=1), up(("a", 7, -1))])
    assert (updates, frontier) == ([(("a",), 7, -1)], CLOSED)


def test_late_duplicate_is_absorbed() -> None:
    updates, frontier = read_all([up(("a", 0, 1)), prog(0, 1, t0=1), up(("a", 0, 1))])
    assert (updates, frontier) == ([(("a",), 0, 1)], T(1))


def test_second_diff_for_a_key_is_a_contradiction() -> None:
    # Differential dataflow's reference reader keeps both triples (it dedups whole
    # triples); its data-parallel reader panics. reclock names the time.
    with pytest.raises(DiffContradiction) as error:
        read_all([up(("a", 4, 1)), up(("a", 4, 2))])
    assert error.value.times == (4,)


def test_second_diff_after_the_time_was_reported_is_a_contradiction() -> None:
    with pytest.raises(DiffContradiction) as error:
        read_all([up(("a", 0, 1)), prog(0, 1, t0=1), up(("a", 0, -1))])
    assert error.value.times == (0,)


def test_more_distinct_updates_than_announced_is_a_contradiction() -> None:
    # Differential dataflow lets the count go negative and ignores it.
    with pytest.raises(CountExceeded) as error:
        read_all([up(("a", 2, 1), ("b", 2, 1)), prog(0, 3, t2=1)])
    assert error.value.times == (2,)


def test_novel_update_after_its_time_was_reported_exceeds_the_count() -> None:
    with pytest.raises(CountExceeded) as error:
        read_all([prog(0, 3, t2=1), up(("a", 2, 1)), up(("b", 2, 1))])
    assert error.value.times == (2,)


def test_disagreeing_progress_is_a_contradiction() -> None:
    # Differential dataflow applies the first statement and drops the second's count.
    with pytest.raises(CountDisagreement) as error:
        read_all([prog(0, 5, t1=2, t3=1), prog(2, 4, t3=2)])
    assert error.value.times == (3,)


def test_omitted_time_disagrees_with_an_announced_count() -> None:
    with pytest.raises(CountDisagreement) as error:
        read_all([prog(0, 5, t1=2), prog(0, 3)])
    assert error.value.times == (1,)


def test_overlapping_statements_that_agree_are_fine() -> None:
    stream = [prog(0, 5, t1=1), prog(1, 3, t1=1), prog(4, 9, t6=1), up(("a", 1, 1), ("b", 6, 1))]
    updates, frontier = read_all(stream)
    assert (as_facts(updates), frontier) == ({(("a",), 1): 1, (("b",), 6): 1}, T(9))


def test_start_frontier_and_updates_before_it() -> None:
    updates, frontier = read_all([prog(10, 12, t10=1), up(("a", 10, 1))], start=T(10))
    assert (updates, frontier) == ([(("a",), 10, 1)], T(12))
    with pytest.raises(UpdateBeforeStart) as error:
        read_all([up(("a", 9, 1))], start=T(10))
    assert error.value.times == (9,)


@pytest.mark.parametrize(
    "build",
    [
        lambda: up(("a", 1, 0)),
        lambda: up(("a", -1, 1)),
        lambda: prog(0, 3, t3=1),
        lambda: Progress(T(0), T(3), ((1, 1), (1, 2))),
        lambda: Progress(T(0), T(3), ((1, -1),)),
        lambda: Progress(T(4), T(3)),
        lambda: Progress(CLOSED, CLOSED),
    ],
)
def test_messages_that_cannot_be_facts_are_malformed(build) -> None:
    with pytest.raises(MalformedMessage):
        build()
