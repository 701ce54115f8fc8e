"""A run's steps share one serving: each source served once, reported once, by its own
step (``assets.run_serving``); and a run's selection read as Dagster reads it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from dagster import AssetCheckKey, AssetKey, DagsterRun
from hypothesis import given, settings
from hypothesis import strategies as st

from assets.run_serving import RunServing, Selection
from cdc_core.app.materialize import Served


class Serves:
    """A stand-in for serving sources: records what each call was asked, gives each
    source its own result, and fails on ``broken`` sources' turn when asked to."""

    def __init__(self, broken: str | None = None) -> None:
        self.calls: list[list[str]] = []
        self.broken = broken

    def __call__(self, names: list[str]) -> Iterator[Served[str]]:
        self.calls.append(list(names))
        for name in names:
            if name == self.broken:
                raise RuntimeError("the serving itself failed")
            yield Served(name, result=f"result of {name}")


def run_steps(
    serving: RunServing[str], serves: Serves, steps: list[list[str]], run_wide: list[str]
) -> list[list[Served[str]]]:
    """The steps of one run, one after another, each taking what it reports."""
    return [list(serving.for_step("run", step, run_wide, serves)) for step in steps]


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_each_source_is_served_once_and_reported_by_its_own_step(data: st.DataObject) -> None:
    """Steps own disjoint sources; the run-wide selection read may miss some of them.
    The first step serves every source in one call, each later step serves only what no
    one served; every step reports exactly its own sources, and the run leaves nothing
    kept."""
    names = [f"s{i}" for i in range(data.draw(st.integers(1, 8)))]
    step_of = {name: data.draw(st.integers(0, 3)) for name in names}
    steps = [[n for n in names if step_of[n] == k] for k in sorted(set(step_of.values()))]
    missed = data.draw(st.sets(st.sampled_from(names)))
    run_wide = [n for n in names if n not in missed]
    serving: RunServing[str] = RunServing()
    serves = Serves()

    reported = run_steps(serving, serves, steps, run_wide)

    for step, got in zip(steps, reported, strict=True):
        assert sorted(s.source for s in got) == sorted(step)
        assert all(s.result == f"result of {s.source}" for s in got)
    served = [name for call in serves.calls for name in call]
    assert sorted(served) == sorted(names)  # each once
    assert set(serves.calls[0]) == set(steps[0]) | set(run_wide)
    for call in serves.calls[1:]:
        assert set(call) <= missed
    assert not serving.keeps("run")


def test_a_serving_that_fails_fails_the_first_step_and_every_source_it_had_not_given() -> None:
    """The serving raises on ``b``'s turn: the first step (owning ``a``) raises it, after
    reporting ``a``; ``b`` and ``c``'s step then reports both as failed with that
    error, without serving again."""
    serving: RunServing[str] = RunServing()
    serves = Serves(broken="b")
    first = serving.for_step("run", ["a"], ["a", "b", "c"], serves)
    assert next(first).result == "result of a"
    with pytest.raises(RuntimeError, match="the serving itself failed"):
        next(first)

    later = list(serving.for_step("run", ["b", "c"], ["a", "b", "c"], serves))

    assert [(s.source, str(s.failure)) for s in later] == [
        ("b", "the serving itself failed"), ("c", "the serving itself failed"),
    ]  # fmt: skip
    assert serves.calls == [["a", "b", "c"]]
    assert not serving.keeps("run")


def test_runs_share_nothing() -> None:
    """Two runs of one deployment in one process each serve their own sources."""
    serving: RunServing[str] = RunServing()
    serves = Serves()
    list(serving.for_step("one", ["a"], ["a", "b"], serves))
    assert list(serving.for_step("two", ["a"], ["a"], serves))[0].source == "a"
    assert serves.calls == [["a", "b"], ["a"]]
    assert serving.keeps("one") and not serving.keeps("two")
    assert [s.source for s in serving.for_step("one", ["b"], ["a", "b"], serves)] == ["b"]
    assert serves.calls == [["a", "b"], ["a"]]
    assert not serving.keeps("one")


TABLE, EXPORT, OTHER = AssetKey(["a", "changes"]), AssetKey(["a", "cdcv2"]), AssetKey(["b", "x"])
ON_TABLE, ON_OTHER = AssetCheckKey(TABLE, "complete"), AssetCheckKey(OTHER, "complete")
EVERY = Selection(frozenset({TABLE, EXPORT, OTHER}), frozenset({ON_TABLE, ON_OTHER}))


@pytest.mark.parametrize(
    ("assets", "checks", "expected"),
    [
        (None, None, EVERY),  # a scheduled run of the whole job
        (frozenset(), None, EVERY),  # an unsubset in-process run
        (frozenset({TABLE}), None, Selection(frozenset({TABLE}), frozenset({ON_TABLE}))),
        (frozenset({EXPORT}), None, Selection(frozenset({EXPORT}), frozenset())),
        (frozenset({TABLE, OTHER}), frozenset({ON_OTHER}),
         Selection(frozenset({TABLE, OTHER}), frozenset({ON_OTHER}))),
        (frozenset(), frozenset({ON_TABLE}), Selection(frozenset(), frozenset({ON_TABLE}))),
    ],
    ids=["none", "empty", "a table", "an export", "assets and a check", "a check alone"],
)  # fmt: skip
def test_a_runs_selection_is_read_as_dagster_reads_it(
    assets: frozenset[AssetKey] | None,
    checks: frozenset[AssetCheckKey] | None,
    expected: Selection,
) -> None:
    run = DagsterRun(job_name="job", asset_selection=assets, asset_check_selection=checks)
    assert EVERY.of_run(run) == expected
