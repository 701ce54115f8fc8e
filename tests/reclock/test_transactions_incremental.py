"""A transaction group's later run reads its transaction topic from the group's
transaction frontier on: the transactions admitted before come from a durable record,
caught up from the topic when a run died before writing it; its report of waiting
transactions reads from the open mark, and maintenance retires what lies below it."""

from __future__ import annotations

from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from cdc_core.frontier import OffsetFrontier, TimeFrontier
from cdc_core.reclock import Windows
from cdc_core.reclock.transactions import PendingTransactions, TransactionGroupBinder
from cdc_core.source import SourcePipeline
from cdc_core.source.layout import transaction_binder
from cdc_core.source.upkeep import maintain_source
from tests.reclock.test_transactions_property import (
    T0,
    TXN,
    Rec,
    W,
    config_for,
    register,
    write_log,
)


class RunDied(RuntimeError):
    """The fault: a run dies after its bindings commit, before its admitted record."""


def die(*_args: object) -> None:
    raise RunDied("died before recording the admitted transactions")


@pytest.mark.parametrize("record_lost", [False, True], ids=["recorded", "record lost"])
def test_a_redelivered_end_in_a_later_run_holds_nothing_back(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, record_lost: bool
) -> None:
    """Run 1 admits T0. Run 2 finds T0's END again (a redelivery, after the frontier)
    and T1 complete behind it: T1 binds, because T0 is known admitted. With the record
    lost (the death is provoked by failing its write: no real fault stops a run exactly
    there), run 2 first catches the record up from the topic and binds the same."""
    landing = tmp_path / "landing"
    write_log(landing, [Rec("a", 0, 0, T0 + 10_000, "T0"),
                        Rec(TXN, 0, 0, T0 + 20_000, "T0", (("a", 1),))])  # fmt: skip
    config = config_for(tmp_path)
    binder = transaction_binder(spark, config, config.lake, "a")
    register(spark, binder, landing)
    first = Windows(T0, T0 + W, W)
    if record_lost:
        with monkeypatch.context() as patched:
            patched.setattr(TransactionGroupBinder, "_record_admitted", die)
            with pytest.raises(RunDied):
                binder.member_bindings("a", OffsetFrontier(), 0, first)
    else:
        binder.member_bindings("a", OffsetFrontier(), 0, first)
    assert binder.bindings.refresh().upper.time == T0 + W + 1
    assert binder.admitted.refresh().upper.time == (0 if record_lost else T0 + W + 1)

    write_log(landing, [Rec(TXN, 0, 1, T0 + W + 5_000, "T0", (("a", 1),)),
                        Rec("a", 0, 1, T0 + W + 10_000, "T1"),
                        Rec(TXN, 0, 2, T0 + W + 20_000, "T1", (("a", 1),))],
              name="later.json")  # fmt: skip
    later = transaction_binder(spark, config, config.lake, "a")
    register(spark, later, landing)
    second = Windows(T0 + W, T0 + 2 * W, W)
    assert later.member_bindings("a", OffsetFrontier({0: 1}), T0 + W + 1, second)[-1] == (
        T0 + 2 * W, OffsetFrontier({0: 2})
    )
    admitted = later.admitted.snapshot(T0 + 2 * W).toArrow()["txid"].to_pylist()
    assert sorted(admitted) == ["T0", "T1"]


def land_open_transaction(root: Path) -> Path:
    """Two dumps in the landing zone under ``root``: first.json, T0 whole (BEGIN, its one
    record of a, END); second.json, T1 open (BEGIN at offset 2, one of the two records of
    a its END announces, END at offset 3). Returns the landing zone."""
    landing = root / "landing"
    write_log(landing, [Rec(TXN, 0, 0, T0 + 1_000, "T0"),
                        Rec(TXN, 0, 1, T0 + 20_000, "T0", (("a", 1),)),
                        Rec("a", 0, 0, T0 + 10_000, "T0")], name="first.json")  # fmt: skip
    write_log(landing, [Rec(TXN, 0, 2, T0 + 25_000, "T1"),
                        Rec(TXN, 0, 3, T0 + 30_000, "T1", (("a", 2),)),
                        Rec("a", 0, 1, T0 + 26_000, "T1")], name="second.json")  # fmt: skip
    return landing


def test_waiting_transactions_are_read_from_the_open_mark(
    spark: SparkSession, tmp_path: Path
) -> None:
    """T1's BEGIN lies below the transaction frontier (which waits at T1's END): the
    report of waiting transactions still dates T1 from its BEGIN, and reads the topic
    from T1's BEGIN on, never the dump below it (deleted here: a read of it would fail).
    Once T1 is admitted, nothing waits."""
    landing = land_open_transaction(tmp_path)
    config = config_for(tmp_path)
    binder = transaction_binder(spark, config, config.lake, "a")
    register(spark, binder, landing)
    first = Windows(T0, T0 + W, W)
    assert binder.member_bindings("a", OffsetFrontier(), 0, first)[-1] == (
        T0 + W, OffsetFrontier({0: 1})
    ), "T1 (one of its two records) waits"
    for name in ["first.json", "again-first.json"]:
        (landing / TXN / name).unlink()
    waiting = binder.pending([T0 + W])[T0 + W]
    assert (waiting.count, waiting.oldest_ms) == (1, T0 + 25_000)

    write_log(landing, [Rec("a", 0, 2, T0 + W + 1_000, "T1")], name="third.json")
    later = transaction_binder(spark, config, config.lake, "a")
    register(spark, later, landing)
    second = Windows(T0 + W, T0 + 2 * W, W)
    assert later.member_bindings("a", OffsetFrontier({0: 1}), T0 + W + 1, second)[-1] == (
        T0 + 2 * W, OffsetFrontier({0: 3})
    )
    assert later.pending([T0 + W, T0 + 2 * W]) == {
        T0 + W: PendingTransactions(1, T0 + 25_000, (), 0),
        T0 + 2 * W: PendingTransactions(0, None, (), 0),
    }



def test_maintenance_keeps_the_group_from_its_slowest_member(
    spark: SparkSession, tmp_path: Path
) -> None:
    """After a's and b's first window (T1 open, its BEGIN at offset 2) and a's second
    (T1 complete), a's maintenance retires the transaction dumps wholly below T1's BEGIN
    and keeps the rest; the group's sinces stop at b's last binding, so b's second window
    still copies the group's bindings, and a's state holds T1 whole."""
    landing = land_open_transaction(tmp_path)
    config = config_for(tmp_path)
    a, b = (SourcePipeline.from_config(spark, config, config.source(n)) for n in "ab")
    for pipeline in (a, b):
        pipeline.register_dumps(T0 + W - 1)
        pipeline.run_windows(Windows.one(T0, T0 + W))
    write_log(landing, [Rec("a", 0, 2, T0 + W + 1_000, "T1")], name="third.json")
    a.register_dumps(T0 + 2 * W - 1)
    a.run_windows(Windows.one(T0 + W, T0 + 2 * W))
    a.finish()

    # the retention horizon lies past every window
    report = maintain_source(a, T0 + 32 * 86_400_000)
    assert report.transaction_dumps_retired == 2
    archive = Path(a.group.root) / "archive" / TXN
    assert sorted(p.name for p in archive.iterdir()) == ["again-first.json", "first.json"]
    assert sorted(p.name for p in (landing / TXN).iterdir()) == [
        "again-second.json", "again-third.json", "second.json", "third.json"
    ]
    assert report.tables["g/bindings"].since == TimeFrontier.at(T0 + W), "b is bound to T0 + W"
    assert report.tables["g/admitted"].since == TimeFrontier.at(T0 + W)

    b.register_dumps(T0 + 2 * W - 1)
    b.run_windows(Windows.one(T0 + W, T0 + 2 * W))
    assert b.group.pending([T0 + W, T0 + 2 * W]) == {
        T0 + W: PendingTransactions(1, T0 + 25_000, (), 0),
        T0 + 2 * W: PendingTransactions(0, None, (), 0),
    }
    state = DeltaTable(str(config.lake / "a" / "state")).to_pyarrow_table()
    assert sorted(state["id"].to_pylist()) == [0, 1, 2]
