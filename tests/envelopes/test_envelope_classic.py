"""Classic DEBEZIUM: emission, dedup of connector restarts by composite source position,
snapshot dedup by key, the dedup state shard, and the seed's constraints."""

from __future__ import annotations

import json

import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from cdc_core.envelopes import (
    EnvelopeBatch,
    apply_debezium,
    has_constraint_violations,
    output_schema,
)
from tests.envelopes.test_envelope_support import Run, batched, error, reclocked, updates

KEY = StructType([StructField("id", LongType())])
AFTER = StructType([StructField("id", LongType()), StructField("name", StringType())])
IMAGE = {"c": (False, True), "r": (False, True), "u": (True, True), "d": (True, False)}
LATE_SNAPSHOT = (
    "constraint violated: snapshot: a snapshot event after the partition's snapshot ended "
    "cannot be deduplicated (use DEBEZIUM UPSERT for re-snapshots)"
)


@pytest.fixture
def run(spark) -> Run:
    apply = batched(apply_debezium, key_schema=KEY, value_schema=AFTER)
    return Run(spark, output_schema("debezium", KEY, AFTER), apply)


def row(id_: int, name: str) -> dict:
    return {"id": id_, "name": name}


def event(op: str, before: dict | None, after: dict | None, source: dict) -> dict:
    return {"op": op, "before": before, "after": after, "source": source}


def pg(op: str, before: dict | None, after: dict | None, commit: int | None, lsn: int) -> dict:
    """A Postgres event; ``commit`` is last_commit_lsn (sequence[0])."""
    sequence = json.dumps([None if commit is None else str(commit), str(lsn)])
    source = {"connector": "postgresql", "snapshot": "false", "sequence": sequence, "lsn": lsn}
    return event(op, before, after, source)


def my(op: str, before: dict | None, after: dict | None, file: str, pos: int) -> dict:
    source = {"connector": "mysql", "snapshot": "false", "file": file, "pos": pos, "row": 0}
    return event(op, before, after, source)


def snap(after: dict, marker: object = True) -> dict:
    return event("r", None, after, {"connector": "postgresql", "snapshot": marker, "lsn": 1})


def rec(offset: int, value: dict | None, partition: int = 0) -> tuple:
    """A record keyed by its image's id."""
    image = (value or {}).get("after") or (value or {}).get("before") or {"id": offset}
    return (partition, offset, {"id": image["id"]}, value)


# A Postgres stream; later tests re-send parts of it at new Kafka offsets.
E1 = pg("c", None, row(1, "a"), 100, 101)
E2 = pg("c", None, row(2, "b"), 110, 111)
E3 = pg("u", row(1, "a"), row(1, "A"), 120, 121)
E4 = pg("d", row(2, "b"), None, 130, 131)
E5 = pg("c", None, row(3, "c"), 140, 141)


def test_emission_is_minus_before_plus_after_and_tombstones_carry_nothing(run: Run) -> None:
    changes, errors = run.dedup_window(
        10, [rec(0, E1), rec(1, E2), rec(2, E3), rec(3, E4), (0, 4, {"id": 2}, None)]
    )
    # +a, +b, -a +A, -b: consolidated
    assert changes == [(1, "A", 1)]
    assert errors == []


def test_a_connector_restart_re_sending_a_contiguous_range_gives_no_duplicate(run: Run) -> None:
    first, _ = run.dedup_window(10, [rec(0, E1), rec(1, E2), rec(2, E3)])
    # Restart: E2, E3 re-sent at new offsets, then new E4; again from E3, then new E5.
    second, errors2 = run.dedup_window(20, [rec(3, E2), rec(4, E3), rec(5, E4)])
    third, errors3 = run.dedup_window(30, [rec(6, E3), rec(7, E4), rec(8, E5), rec(9, E5)])
    assert first == [(1, "A", 1), (2, "b", 1)]
    assert second == [(2, "b", -1)]
    assert third == [(3, "c", 1)]
    assert errors2 == errors3 == []
    assert run.state() == [(1, "A", 1), (3, "c", 1)]
    # O(1) steady state: one cursor at E5's position (last_commit_lsn, lsn, op rank c=1).
    assert run.dedup_entries("cursor") == [(0, None, None, True, (140, 141, 1), (140, 141, 1), 1)]


def test_postgres_orders_by_commit_lsn_then_lsn_then_op_not_by_lsn_alone(run: Run) -> None:
    run.dedup_window(10, [rec(0, pg("c", None, row(1, "a"), 100, 500))])
    later_commit_lower_lsn = pg("c", None, row(2, "b"), 200, 400)
    # A primary-key change 1 -> 3: a delete and a create at one position, d before c.
    key_change = [
        rec(2, pg("d", row(1, "a"), None, 300, 600)),
        rec(3, pg("c", None, row(3, "a"), 300, 600)),
    ]
    changes, errors = run.dedup_window(20, [rec(1, later_commit_lower_lsn), *key_change])
    assert changes == [(1, "a", -1), (2, "b", 1), (3, "a", 1)]
    assert errors == []


def test_mysql_orders_binlog_files_by_first_appearance_across_windows(run: Run) -> None:
    # File names sort opposite to their order; "a-bin.10" comes after "z-bin.9".
    m1 = my("c", None, row(1, "a"), "z-bin.9", 100)
    m2 = my("c", None, row(2, "b"), "z-bin.9", 200)
    m3 = my("c", None, row(3, "c"), "a-bin.10", 4)
    m4 = my("u", row(3, "c"), row(3, "C"), "a-bin.10", 50)
    run.dedup_window(10, [rec(0, m1), rec(1, m2), rec(2, m3)])
    changes, errors = run.dedup_window(20, [rec(3, m2), rec(4, m3), rec(5, m4)])
    assert changes == [(3, "C", 1), (3, "c", -1)]
    assert errors == []
    assert run.dedup_entries("binlog_file") == [
        (0, "a-bin.10", 1, None, None, None, 1),
        (0, "z-bin.9", 0, None, None, None, 1),
    ]


def test_snapshot_records_are_deduplicated_by_key_until_streaming_begins(run: Run) -> None:
    first, _ = run.dedup_window(10, [rec(0, snap(row(1, "a"))), rec(1, snap(row(2, "b")))])
    # Restart during the snapshot: it starts over, re-sending keys 1 and 2.
    second, _ = run.dedup_window(
        20,
        [rec(2, snap(row(1, "a"))), rec(3, snap(row(2, "b"))), rec(4, snap(row(3, "c"), "last"))],
    )
    keys_seen = run.dedup_entries("snapshot_key")
    third, errors3 = run.dedup_window(30, [rec(5, pg("c", None, row(4, "d"), 140, 141))])
    fourth, errors4 = run.dedup_window(40, [rec(6, snap(row(9, "z")))])
    assert first == [(1, "a", 1), (2, "b", 1)]
    assert second == [(3, "c", 1)]
    assert keys_seen == [
        (0, '{"id":1}', None, None, None, None, 1),
        (0, '{"id":2}', None, None, None, None, 1),
        (0, '{"id":3}', None, None, None, None, 1),
    ]
    assert third == [(4, "d", 1)] and errors3 == []
    # Streaming began: the seen keys are dropped, the state is one cursor again.
    assert run.dedup_entries("snapshot_key") == []
    assert run.state() == [(1, "a", 1), (2, "b", 1), (3, "c", 1), (4, "d", 1)]
    assert fourth == []
    assert errors4 == [error(0, 6, {"id": 9}, LATE_SNAPSHOT, 1)]


def test_broken_constraints_give_error_rows_and_fail_the_check(spark) -> None:
    bad_before = pg("u", None, row(1, "x"), 100, 101)
    sqlserver = {**E2, "source": {"connector": "sqlserver", "change_lsn": "0:0:1"}}
    no_sequence = {**E2, "source": {"connector": "postgresql", "lsn": 5}}
    bad_sequence = {**E2, "source": {**E2["source"], "sequence": '["x", "1"]'}}
    stream = [
        rec(0, bad_before),
        (0, 1, None, E1),
        rec(2, sqlserver),
        rec(3, no_sequence),
        rec(4, bad_sequence),
        # Positions 10, 20, 30; a re-send from 20 that stops short of 30; then 40.
        rec(5, pg("c", None, row(10, "p"), 10, 10)),
        rec(6, pg("c", None, row(20, "q"), 20, 20)),
        rec(7, pg("c", None, row(30, "r"), 30, 30)),
        rec(8, pg("c", None, row(20, "q"), 20, 20)),
        rec(9, pg("c", None, row(40, "s"), 40, 40)),
    ]
    result = apply_debezium(
        EnvelopeBatch(
            reclocked(spark, stream),
            time=10,
            topic="t",
            key_schema=KEY,
            value_schema=AFTER,
        ),
    )
    reasons = {(r["offset"], r["reason"]) for r in result.errors.collect()}
    assert reasons == {
        (
            0,
            "constraint violated: before image: op 'u' has no before image; a before image "
            "must be the whole row: Postgres needs REPLICA IDENTITY FULL (ALTER TABLE ... "
            "REPLICA IDENTITY FULL), MySQL binlog_row_image=FULL",
        ),
        (1, "constraint violated: primary key: the record has no key (its table needs one)"),
        (2, "constraint violated: connector: 'sqlserver' is neither postgresql nor mysql"),
        (
            3,
            "constraint violated: source position: a streaming postgresql event lacks "
            "source.sequence, which the deduplication orders by (the Debezium PostgreSQL "
            "connector writes source.sequence from version 1.5 on, and source.lsn with every "
            "streamed event)",
        ),
        (4, 'value decode error: invalid sequence: ["x", "1"]'),
        (
            9,
            "constraint violated: contiguous re-sends: a re-send stopped at position (20, 20, 1) "
            "below the high-water mark (30, 30, 1) and the stream went on at (40, 40, 1); "
            "events in between may have been dropped",
        ),
    }
    # The event after the gap is still applied; the duplicate is not.
    assert updates(result.changes, 10) == [
        (10, "p", 1),
        (20, "q", 1),
        (30, "r", 1),
        (40, "s", 1),
    ]
    assert has_constraint_violations(result.errors)


def test_a_clean_stream_passes_the_check(spark) -> None:
    stream = [rec(0, E1), rec(1, E2), rec(2, E1), rec(3, E2), rec(4, E3)]
    result = apply_debezium(
        EnvelopeBatch(
            reclocked(spark, stream),
            time=10,
            topic="t",
            key_schema=KEY,
            value_schema=AFTER,
        ),
    )
    assert not has_constraint_violations(result.errors)
