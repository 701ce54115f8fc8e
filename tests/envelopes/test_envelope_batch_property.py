"""Property: one call over a batch of 1-4 binding times equals applying its windows one by
one in time order, each window's prior state being the prior shards plus every earlier
window's outputs (UPSERT, DEBEZIUM UPSERT, NONE). UPSERT's batch also equals the
plain-Python oracle at every time."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.types import StructType

from cdc_core.envelopes import (
    EnvelopeBatch,
    apply_debezium_upsert,
    apply_none,
    apply_upsert,
    output_schema,
)
from cdc_core.schemas import ERROR
from tests.envelopes.test_envelope_debezium_upsert import AFTER, ev, row
from tests.envelopes.test_envelope_support import (
    TOPIC,
    Run,
    accumulate,
    batch,
    batched,
    timed_updates,
)
from tests.envelopes.test_envelope_upsert import KEY, VALUE
from tests.envelopes.test_envelope_upsert_property import bound_in, oracle, payload, streams
from tests.spark_examples import SPARK_EXAMPLES

MAX_BATCH = 4


def upsert_record(key: object, value: object) -> tuple[object, object]:
    return (None if key is None else json.dumps(key)), payload(value)


def debezium_record(key: object, value: object) -> tuple[object, object]:
    """Values 0/1 create/update, 2 deletes, "bad" is an unknown op (a truncate for a null
    key); key 3 does not decode."""
    raw_key = "zz" if key == 3 else key
    if value == "null":
        return raw_key, None
    if value == "bad":
        return raw_key, ev("t") if key is None else ev("x", row(key, "x"))
    if value == 2:
        return raw_key, ev("d", before=row(key, "v"))
    return raw_key, ev("c" if value == 0 else "u", row(key, f"v{value}"))


# envelope -> (apply, value schema, record encoding, whether it reads prior state)
ENVELOPES: dict[str, tuple[Callable, StructType, Callable, bool]] = {
    "upsert": (apply_upsert, VALUE, upsert_record, True),
    "debezium-upsert": (apply_debezium_upsert, AFTER, debezium_record, True),
    "none": (apply_none, VALUE, upsert_record, False),
}


def at(time: int, rows: list[tuple]) -> list[tuple]:
    """Window outputs ``(*data, diff)`` as ``(*data, time, diff)``."""
    return [(*data, time, diff) for *data, diff in rows]


@pytest.mark.parametrize("envelope", ENVELOPES)
@settings(
    SPARK_EXAMPLES,
    max_examples=5,  # per envelope: 15 examples in all, each a few Spark jobs per window
)
@given(stream=streams(max_windows=MAX_BATCH + 1), with_prior=st.booleans())
def test_one_call_equals_window_by_window(spark, envelope, stream, with_prior) -> None:
    apply, value_schema, encode, reads_prior = ENVELOPES[envelope]
    logs, frontiers = stream
    windows = {
        100 * (w + 1): [(p, o, *encode(k, v)) for p, o, k, v in bound_in(logs, frontiers, w)]
        for w in range(len(frontiers))
    }
    times = sorted(windows)
    output = output_schema(envelope, KEY, value_schema)
    run = Run(spark, output, batched(apply, key_schema=KEY, value_schema=value_schema))
    step = run.upsert_window if reads_prior else run.window
    # The windows before the batch only build its prior state (the shards).
    split = max(len(times) - MAX_BATCH, int(with_prior and len(times) > 1))
    for time in times[:split]:
        step(time, windows[time])
    prior = (
        {
            "prior_changes": run.prior(run.changes, output),
            "prior_errors": run.prior(run.errors, ERROR),
        }
        if reads_prior
        else {}
    )
    before = (Counter(run.changes), Counter(run.errors))
    expected_changes, expected_errors = [], []
    for time in times[split:]:
        changes, errors = step(time, windows[time])
        expected_changes += at(time, changes)
        expected_errors += at(time, errors)

    result = apply(
        EnvelopeBatch(
            batch(spark, {time: windows[time] for time in times[split:]}),
            topic=TOPIC,
            key_schema=KEY,
            value_schema=value_schema,
            **prior,
        )
    )
    changes, errors = timed_updates(result.changes), timed_updates(result.errors)
    assert changes == sorted(expected_changes, key=repr)
    assert errors == sorted(expected_errors, key=repr)

    if envelope == "upsert":
        state, error_state = before
        for index in range(split, len(times)):
            accumulate(state, [(*d, n) for *d, t, n in changes if t == times[index]])
            accumulate(error_state, [(*d, n) for *d, t, n in errors if t == times[index]])
            assert (state, error_state) == oracle(logs, frontiers, index), f"time {times[index]}"
