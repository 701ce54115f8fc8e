"""Property: random transaction logs over two Debezium topics of two partitions each (late
records, transactions that never complete, records outside any transaction, redelivered
dumps and END records) are bound by the group exactly as the admission rule says (a
plain-Python oracle, below), and no window ever splits a transaction.

Also: a member that runs after another member bound the group copies the group's
bindings even when more dumps landed in between, and a source bound before it joined a
group is refused.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from cdc_core.config import parse_config
from cdc_core.frontier import OffsetFrontier
from cdc_core.ingest import Registry, list_dump_files
from cdc_core.reclock import Windows, mint_bindings
from cdc_core.reclock.transactions import TransactionBindingMismatch
from cdc_core.schemas import REMAP
from cdc_core.shard import Shard
from cdc_core.source.layout import transaction_binder
from tests.spark_examples import SPARK_EXAMPLES

T0 = 1_767_225_600_000
W = 60_000
WINDOWS = 3
MEMBERS = {"a": "db.a", "b": "db.b"}  # source -> its topic (and data collection)
TXN = "db.transaction"


@dataclass(frozen=True)
class Rec:
    """One Kafka record: of a member topic (``txid`` None: outside any transaction) or of
    the transaction topic (``member`` TXN; ``txid``, and ``end`` counts for an END or
    None for a BEGIN)."""

    member: str
    partition: int
    offset: int
    ts: int
    txid: str | None
    end: tuple[tuple[str, int], ...] | None = None  # END: (member, announced count)


@st.composite
def logs(draw: st.DrawFn) -> list[Rec]:
    """Transactions in commit order, 2 to 8 of them (a log costs a few Spark jobs whatever
    its length, so the test draws a few long logs rather than many short ones: each meets
    more of the cases below at once), each writing 1-3 events over the members' partitions
    at its END's window or one later (a late record); some announce one event too many
    (never complete); records outside transactions in between; an END now and then again
    (redelivered at a new offset)."""
    offsets: dict[tuple[str, int], int] = {}
    records: list[Rec] = []

    def add(member: str, partition: int, ts: int, txid: str | None, end=None) -> None:
        offset = offsets.get((member, partition), 0)
        offsets[(member, partition)] = offset + 1
        records.append(Rec(member, partition, offset, ts, txid, end))

    window = 0
    for n in range(draw(st.integers(2, 8))):
        window = min(window + draw(st.integers(0, 1)), WINDOWS - 1)
        txid = f"T{n}"
        events = draw(st.lists(st.tuples(st.sampled_from(sorted(MEMBERS)), st.integers(0, 1),
                                         st.integers(0, 1)), min_size=1, max_size=3))
        counts: dict[str, int] = {}
        for member, partition, late in events:
            ts = T0 + min(window + late, WINDOWS) * W + draw(st.integers(0, W - 1))
            add(member, partition, ts, txid)
            counts[member] = counts.get(member, 0) + 1
        if draw(st.integers(0, 5)) == 0:  # announces an event that never comes
            counts["a"] = counts.get("a", 0) + 1
        end_ts = T0 + window * W + draw(st.integers(0, W - 1))
        add(TXN, 0, end_ts, txid, tuple(sorted(counts.items())))
        if draw(st.integers(0, 4)) == 0:
            add(TXN, 0, end_ts, txid, tuple(sorted(counts.items())))  # redelivered END
        if draw(st.booleans()):
            member, partition = draw(st.sampled_from(sorted(MEMBERS))), draw(st.integers(0, 1))
            add(member, partition, T0 + window * W + draw(st.integers(0, W - 1)), None)
    return records


def event_time_frontier(records: list[Rec], end: int) -> dict[int, int]:
    """Per partition, the longest offset prefix whose running maximum ts lies before end."""
    frontier = {}
    for partition in {r.partition for r in records}:
        top, reached = -1, 0
        for r in sorted((r for r in records if r.partition == partition), key=lambda r: r.offset):
            top = max(top, r.ts)
            if top >= end:
                break
            reached = r.offset + 1
        frontier[partition] = reached
    return frontier


def oracle(log: list[Rec]) -> list[dict[str, dict[int, int]]]:
    """The admission rule of docs/concepts/transactions.md, window by window, in plain Python."""
    txn = [r for r in log if r.member == TXN]
    bound = {m: {} for m in MEMBERS}
    txn_top = 0
    result = []
    for window in range(1, WINDOWS + 1):
        end = T0 + window * W
        proposed = {m: event_time_frontier([r for r in log if r.member == m], end)
                    for m in MEMBERS}
        known = [r for r in txn if r.offset < event_time_frontier(txn, end).get(0, 0)]
        before = {r.txid for r in known if r.offset < txn_top}
        open_ends = sorted((r for r in known if r.txid not in before), key=lambda r: r.offset)
        pending = [r for r in log if r.member in MEMBERS and r.txid is not None
                   and r.txid not in before and r.offset >= bound[r.member].get(r.partition, 0)]
        cut = {m: dict(f) for m, f in proposed.items()}
        while True:
            inside = [r for r in pending if r.offset < cut[r.member].get(r.partition, 0)]
            admitted: set[str] = set()
            first_open = None
            for r in open_ends:
                seen = {m: sum(1 for x in inside if x.txid == r.txid and x.member == m)
                        for m in MEMBERS}
                if all(seen[m] >= dict(r.end).get(m, 0) for m in MEMBERS):
                    admitted.add(r.txid)
                else:
                    first_open = r.offset
                    break
            held = [r for r in inside if r.txid not in admitted]
            if not held:
                break
            for r in held:
                cut[r.member][r.partition] = min(cut[r.member][r.partition], r.offset)
        top = first_open if first_open is not None else max((r.offset + 1 for r in known),
                                                            default=0)
        txn_top = max(txn_top, top)
        bound = cut
        result.append({m: {p: o for p, o in f.items() if o} for m, f in cut.items()})
    return result


def config_for(root: Path, *, group: bool = True) -> object:
    member = {"key": {"id": "bigint"}, "value": {"id": "bigint"},
              "envelope": "debezium-upsert", "reclock": "event-time"}
    data = {
        "lake": str(root / "lake"), "landing": str(root / "landing"), "window": "1m",
        "start": "2026-01-01T00:00:00Z",
        "sources": [{"name": m, "topic": t, **member} for m, t in MEMBERS.items()],
    }
    if group:
        data["transactions"] = [{"name": "g", "topic": TXN, "sources": MEMBERS}]
    return parse_config(data, root)


def write_log(landing: Path, log: list[Rec], name: str = "d.json") -> None:
    """kcat lines per topic; the member topics' first file is delivered twice."""
    for member in [*MEMBERS, TXN]:
        topic = MEMBERS.get(member, TXN)
        lines = []
        for r in (r for r in log if r.member == member):
            if member == TXN and r.end is None:
                value = {"status": "BEGIN", "id": r.txid}
            elif r.end is None:
                value = {"op": "c", "after": {"id": r.offset}, "before": None,
                         "transaction": None if r.txid is None else {"id": r.txid}}
            else:
                value = {"status": "END", "id": r.txid,
                         "data_collections": [{"data_collection": MEMBERS[m], "event_count": n}
                                              for m, n in r.end]}
            lines.append(json.dumps({"topic": topic, "partition": r.partition,
                                     "offset": r.offset, "ts": r.ts,
                                     "key": json.dumps({"id": r.offset}),
                                     "payload": json.dumps(value)}))
        (landing / topic).mkdir(parents=True, exist_ok=True)
        (landing / topic / name).write_text("".join(line + "\n" for line in lines))
        (landing / topic / f"again-{name}").write_text("".join(line + "\n" for line in lines))


def register(spark: SparkSession, binder, landing: Path) -> None:
    for registry in [*(m.registry for m in binder.members.values()), binder.registry]:
        registry.register(spark, list_dump_files(landing, registry.topic), T0)


def bound_frontiers(binder, member: str) -> list[dict[int, int]]:
    """The member's frontier at each window end, as the group binds it."""
    windows = Windows(T0, T0 + WINDOWS * W, W)
    minted = dict(binder.member_bindings(member, OffsetFrontier(), 0, windows))
    frontier, result = OffsetFrontier(), []
    for end in windows.ends:
        frontier = minted.get(end, frontier)
        result.append(dict(frontier.offsets))
    return result


@settings(SPARK_EXAMPLES, max_examples=3)
@given(log=logs())
def test_the_group_binds_as_the_rule_says_and_never_splits(
    spark: SparkSession, log: list[Rec]
) -> None:
    root = Path(tempfile.mkdtemp())
    config = config_for(root)
    write_log(root / "landing", log)
    binder = transaction_binder(spark, config, config.lake, "a")
    register(spark, binder, root / "landing")
    bound = {m: bound_frontiers(binder, m) for m in MEMBERS}
    expected = oracle(log)
    assert [{m: bound[m][i] for m in MEMBERS} for i in range(WINDOWS)] == expected
    for i in range(WINDOWS):  # whatever the rule: a transaction is bound whole or not at all
        shown: dict[str, set[bool]] = {}
        for r in log:
            if r.member in MEMBERS and r.txid is not None:
                covered = r.offset < bound[r.member][i].get(r.partition, 0)
                shown.setdefault(r.txid, set()).add(covered)
        assert all(len(flags) == 1 for flags in shown.values()), (i, shown)


def test_a_member_copies_the_group_binding_minted_before_more_dumps_landed(
    spark: SparkSession, tmp_path: Path
) -> None:
    """``a`` binds window 1 for the group; then a line of T0 lands (its ts in window 1);
    ``b``, run afterwards, gets the group's window 1 (T0 held), not a new computation."""
    log = [Rec("a", 0, 0, T0 + 10_000, "T0"),
           Rec(TXN, 0, 0, T0 + 20_000, "T0", (("a", 1), ("b", 1)))]
    config = config_for(tmp_path)
    write_log(tmp_path / "landing", log)
    binder = transaction_binder(spark, config, config.lake, "a")
    register(spark, binder, tmp_path / "landing")
    one = Windows(T0, T0 + W, W)
    assert binder.member_bindings("a", OffsetFrontier(), 0, one) == [(T0 + W, OffsetFrontier())]
    write_log(tmp_path / "landing", [Rec("b", 1, 0, T0 + 30_000, "T0")], name="late.json")
    register(spark, binder, tmp_path / "landing")
    assert binder.member_bindings("b", OffsetFrontier(), 0, one) == [(T0 + W, OffsetFrontier())]
    two = Windows(T0, T0 + 2 * W, W)  # window 2 sees the line: T0 whole
    assert binder.member_bindings("b", OffsetFrontier(), 0, two) == [
        (T0 + W, OffsetFrontier()), (T0 + 2 * W, OffsetFrontier({1: 1}))
    ]
    assert binder.member_bindings("a", OffsetFrontier(), 0, two)[-1] == (
        T0 + 2 * W, OffsetFrontier({0: 1})
    )


def test_a_source_bound_before_it_joined_a_group_is_refused(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Bound alone, ``a`` took a record whose transaction never ends; its group would not."""
    log = [Rec("a", 0, 0, T0 + 10_000, "T0")]
    write_log(tmp_path / "landing", log)
    alone = config_for(tmp_path, group=False)
    source = alone.source("a")
    registry = Registry(alone.lake / "a" / "dumps", source.topic)
    registry.register(spark, list_dump_files(tmp_path / "landing", source.topic), T0)
    remap = Shard.open(spark, str(alone.lake / "a" / "remap"), REMAP)
    assert mint_bindings(spark, source, registry, remap, Windows(T0, T0 + W, W)).top == (
        OffsetFrontier({0: 1})
    )
    grouped = config_for(tmp_path)
    binder = transaction_binder(spark, grouped, grouped.lake, "a")
    register(spark, binder, tmp_path / "landing")
    with pytest.raises(TransactionBindingMismatch, match="source a: remap at"):
        mint_bindings(spark, source, registry, remap, Windows(T0, T0 + 2 * W, W), None,
                      lambda previous, bound, windows: binder.member_bindings(
                          "a", previous, bound, windows))
