"""A batch of binding times in one call, by hand: each slot's content moves time by time,
the prior state is replaced at each slot's own first time (a truncate empties every slot at
its own), and classic DEBEZIUM refuses."""

from __future__ import annotations

import pytest

from cdc_core.envelopes import (
    EnvelopeBatch,
    apply_debezium_upsert,
    apply_envelope,
    apply_upsert,
    output_schema,
)
from cdc_core.schemas import ERROR
from tests.envelopes.test_envelope_debezium_upsert import AFTER, UNKNOWN_X, ev, row
from tests.envelopes.test_envelope_debezium_upsert import KEY as DBZ_KEY
from tests.envelopes.test_envelope_support import (
    TOPIC,
    batch,
    dataframe,
    reclocked,
    timed_updates,
    with_diff,
)
from tests.envelopes.test_envelope_upsert import BAD_N, KEY, VALUE, v


def test_one_key_moves_time_by_time_within_one_call(spark) -> None:
    records = {10: [(0, 0, 1, v("a", 1))], 20: [(0, 1, 1, v("b", 2))], 30: [(0, 2, 1, None)]}
    result = apply_upsert(
        EnvelopeBatch(batch(spark, records), topic=TOPIC, key_schema=KEY, value_schema=VALUE),
    )
    assert timed_updates(result.changes) == sorted(
        [(1, "a", 1, 10, 1), (1, "a", 1, 20, -1), (1, "b", 2, 20, 1), (1, "b", 2, 30, -1)],
        key=repr,
    )
    assert timed_updates(result.errors) == []


def test_prior_content_is_replaced_at_each_slots_first_time_in_the_batch(spark) -> None:
    prior_changes = dataframe(
        spark, [(2, "p", 0, 1)], with_diff(output_schema("upsert", KEY, VALUE))
    )
    prior_errors = dataframe(spark, [(TOPIC, 0, 0, "3", BAD_N, None, 1)], with_diff(ERROR))
    records = {
        10: [(0, 1, 1, v("a", 1)), (0, 2, 3, {"n": "x"})],
        20: [(0, 3, 2, v("q", 5)), (0, 4, 1, v("a", 1))],
        30: [(0, 5, 3, v("c", 3))],
    }
    result = apply_upsert(
        EnvelopeBatch(
            batch(spark, records),
            topic=TOPIC,
            key_schema=KEY,
            value_schema=VALUE,
            prior_changes=prior_changes,
            prior_errors=prior_errors,
        ),
    )
    assert timed_updates(result.changes) == sorted(
        [(1, "a", 1, 10, 1), (2, "p", 0, 20, -1), (2, "q", 5, 20, 1), (3, "c", 3, 30, 1)],
        key=repr,
    )
    assert timed_updates(result.errors) == sorted(
        [
            (TOPIC, 0, 0, "3", BAD_N, None, 10, -1),
            (TOPIC, 0, 2, "3", BAD_N, None, 10, 1),
            (TOPIC, 0, 2, "3", BAD_N, None, 30, -1),
        ],
        key=repr,
    )


def test_classic_debezium_needs_one_window_time(spark) -> None:
    with pytest.raises(ValueError, match="one window per call"):
        apply_envelope(
            "debezium",
            EnvelopeBatch(
                batch(spark, {10: []}),
                topic=TOPIC,
                key_schema=KEY,
                value_schema=output_schema("upsert", KEY, VALUE),
            ),
        )


def test_a_time_column_and_time_are_ambiguous(spark) -> None:
    with pytest.raises(ValueError, match="time column"):
        apply_upsert(
            EnvelopeBatch(
                batch(spark, {10: []}),
                time=10,
                topic=TOPIC,
                key_schema=KEY,
                value_schema=VALUE,
            ),
        )
    with pytest.raises(ValueError, match="need time="):
        apply_upsert(
            EnvelopeBatch(reclocked(spark, []), topic=TOPIC, key_schema=KEY, value_schema=VALUE),
        )


def test_truncates_of_several_windows_in_one_call(spark) -> None:
    """DEBEZIUM UPSERT: each window's truncate empties every slot at its position (the
    prior state's rows and errors, the batch's earlier windows), its window's later
    records apply after it."""
    after = output_schema("debezium-upsert", DBZ_KEY, AFTER)
    prior_changes = dataframe(spark, [(2, "p", 1)], with_diff(after))
    prior_errors = dataframe(spark, [(TOPIC, 0, 9, "7", UNKNOWN_X, None, 1)], with_diff(ERROR))
    records = {
        10: [(0, 10, 1, ev("c", row(1, "a"))), (0, 11, None, ev("t")),
             (0, 12, 3, ev("c", row(3, "c")))],
        20: [(0, 13, 1, ev("c", row(1, "b")))],
        30: [(0, 14, None, ev("t")), (0, 15, 3, ev("u", row(3, "C"), before=row(3, "c")))],
    }  # fmt: skip
    result = apply_debezium_upsert(
        EnvelopeBatch(
            batch(spark, records), topic=TOPIC, key_schema=DBZ_KEY, value_schema=AFTER,
            prior_changes=prior_changes, prior_errors=prior_errors,
        ),
    )  # fmt: skip
    assert timed_updates(result.changes) == sorted(
        [(2, "p", 10, -1), (3, "c", 10, 1), (1, "b", 20, 1),
         (1, "b", 30, -1), (3, "c", 30, -1), (3, "C", 30, 1)],
        key=repr,
    )  # fmt: skip
    assert timed_updates(result.errors) == [(TOPIC, 0, 9, "7", UNKNOWN_X, None, 10, -1)]
