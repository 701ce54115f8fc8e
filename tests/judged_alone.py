"""The engine's joint checks judged for one table at a time, as the tests ask them: each
is the ``*_together`` judgement with a single question, so a test exercises exactly what
a run judges."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from cdc_core.checks.invariants import (
    CheckOutcome,
    CompletenessQuestion,
    ExactlyOnceQuestion,
    StateQuestion,
    completeness_together,
    exactly_once_together,
    state_counts_together,
)
from cdc_core.frontier import OffsetFrontier
from cdc_core.shard.read import ShardReader


def completeness(
    shard: ShardReader, lower: int, upper: int, *, on_driver: bool = False
) -> CheckOutcome:
    """Whether ``shard`` is complete on ``[lower, upper)``."""
    question = CompletenessQuestion(shard, lower, upper, on_driver)
    return completeness_together(shard.spark, [question])[0]


def exactly_once(
    reclocked: ShardReader,
    before: OffsetFrontier,
    after: OffsetFrontier,
    starts: Mapping[int, int],
    lower: int,
    upper: int,
    *,
    gaps_allowed: bool,
    errors: ShardReader | None = None,
    holes: Mapping[int, Sequence[tuple[int, int]]] | None = None,
) -> CheckOutcome:
    """Whether ``reclocked`` holds each offset from ``before`` to ``after`` once."""
    question = ExactlyOnceQuestion(
        reclocked, before, after, starts, lower, upper, gaps_allowed, errors, holes or {}
    )
    return exactly_once_together(reclocked.spark, [question])[0]


def state_counts(changes: ShardReader, key_columns: Sequence[str], as_of: int) -> CheckOutcome:
    """Whether the state ``changes`` publishes at ``as_of`` holds each row as allowed."""
    return state_counts_together(changes.spark, [StateQuestion(changes, key_columns, as_of)])[0]
