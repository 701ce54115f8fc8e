"""Property: random upsert streams, with producer redeliveries and partitions whose dumps
arrive late, processed window by window (each window's outputs fed back as the next prior
state), equal a plain-Python oracle at every window's time."""

from __future__ import annotations

import json
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_core.envelopes import apply_upsert, output_schema
from tests.envelopes.test_envelope_support import TOPIC, Run, batched
from tests.envelopes.test_envelope_upsert import BAD_N, KEY, NULL_KEY, VALUE
from tests.spark_examples import SPARK_EXAMPLES

PARTITIONS = (0, 1)
# A message: (key or None, value number, or "null" for a tombstone, or "bad").
messages = st.tuples(
    st.one_of(st.integers(0, 3), st.none()),
    st.one_of(st.integers(0, 2), st.just("null"), st.just("bad")),
)


@st.composite
def partition_logs(draw) -> dict[int, list]:
    """Per partition, its log; a redelivery re-appends a contiguous slice at new offsets."""
    logs = {}
    for partition in PARTITIONS:
        log = draw(st.lists(messages, max_size=6))
        if log and draw(st.booleans()):
            start = draw(st.integers(0, len(log) - 1))
            end = draw(st.integers(start + 1, len(log)))
            log = log + log[start:end]
        logs[partition] = log
    return logs


@st.composite
def streams(draw, max_windows: int = 3) -> tuple[dict[int, list], list[dict[int, int]]]:
    """Logs and, per window, the bound frontier (partition -> next offset). A partition
    whose frontier stands still while another moves is a late dump."""
    logs = draw(partition_logs())
    windows = draw(st.integers(1, max_windows))
    cuts = {
        p: sorted(draw(st.lists(st.integers(0, len(log)), min_size=windows, max_size=windows)))
        for p, log in logs.items()
    }
    return logs, [{p: cuts[p][w] for p in logs} for w in range(windows)]


def payload(value: object) -> str | None:
    if value == "null":
        return None
    if value == "bad":
        return json.dumps({"n": "x"})
    return json.dumps({"name": f"v{value}", "n": value})


def bound_in(logs, frontiers, window: int):
    """``(partition, offset, key, value)`` of the records first bound at ``window``."""
    before = frontiers[window - 1] if window else {p: 0 for p in logs}
    for partition, log in logs.items():
        for offset in range(before[partition], frontiers[window][partition]):
            yield (partition, offset, *log[offset])


def oracle(logs: dict[int, list], frontiers: list[dict[int, int]], upto: int):
    """Rows and errors at window ``upto``: per slot, the record with the greatest
    (window, partition, offset) among those bound so far decides."""
    latest: dict[object, tuple] = {}
    for window in range(upto + 1):
        for partition, offset, key, value in bound_in(logs, frontiers, window):
            order = (window, partition, offset)
            if key not in latest or latest[key][0] < order:
                latest[key] = (order, partition, offset, value)
    rows, errors = Counter(), Counter()
    for key, (_, partition, offset, value) in latest.items():
        if value == "null":
            continue
        if key is None:
            errors[(TOPIC, partition, offset, None, NULL_KEY, None)] = 1
        elif value == "bad":
            errors[(TOPIC, partition, offset, json.dumps(key), BAD_N, None)] = 1
        else:
            rows[(key, f"v{value}", value)] = 1
    return rows, errors


def window_records(logs, frontiers, window: int) -> list[tuple]:
    return [
        (p, o, None if key is None else json.dumps(key), payload(value))
        for p, o, key, value in bound_in(logs, frontiers, window)
    ]


@settings(SPARK_EXAMPLES, max_examples=8)
@given(stream=streams())
def test_upsert_windows_equal_the_oracle_at_every_time(spark, stream) -> None:
    logs, frontiers = stream
    run = Run(
        spark,
        output_schema("upsert", KEY, VALUE),
        batched(apply_upsert, key_schema=KEY, value_schema=VALUE),
    )
    previous_rows: Counter = Counter()
    for window in range(len(frontiers)):
        changes, _ = run.upsert_window(100 * (window + 1), window_records(logs, frontiers, window))
        rows, errors = oracle(logs, frontiers, window)
        assert run.changes == rows, f"window {window}"
        assert run.errors == errors, f"window {window}"
        moved = set(rows) | set(previous_rows)
        difference = {d: rows[d] - previous_rows[d] for d in moved if rows[d] != previous_rows[d]}
        assert changes == sorted(((*d, n) for d, n in difference.items()), key=repr)
        previous_rows = rows
