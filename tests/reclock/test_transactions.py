"""A transaction group through the public contract: a config, kcat dumps of two Debezium
topics and their transaction topic, ``reclock materialize``, then the Delta tables read
back with delta-rs. The expected windows are written out by hand from the scenario, and a
plain-Python oracle checks that no window's cross-table snapshot shows half a transaction.

The scenario (1m windows from T0; every member binds by event time):

- T1: an order and two lines over both partitions of each topic, END at 30s: window 1.
- T2: an order at 40s, its line at 70s (a window late), END at 50s: held at window 1,
  admitted whole at window 2.
- a snapshot order (no transaction) at 45s: never held.
- T3: an order and one line at 130s, but its END announces two lines: never complete, so
  it and everything after it (T4, complete, and a snapshot order behind T3's order in its
  partition) wait, for good.
- redeliveries: a whole orders file twice, T1's END twice in one file set and once more
  at a later offset of the transaction topic.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from dagster import AssetCheckKey, AssetKey, DagsterInstance, build_sensor_context
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from cdc_core.config import load_config
from cdc_core.reclock.transactions import TransactionGroupBinder
from cdc_core.source import SourcePipeline
from cdc_core.source.layout import transaction_binder
from pipelines.build import build_definitions
from pipelines.cli import main
from pipelines.run import materialize
from resources.lake import LakeResource

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
S = 1000
TXN_TOPIC = "shop.transaction"
ORDERS, LINES = "inventory.orders", "inventory.order_lines"


def event(table: str, row: dict, txid: str | None, order: int = 0) -> str:
    """A Debezium change event's value (JSON text), in a transaction or not."""
    transaction = (
        None if txid is None
        else {"id": txid, "total_order": order, "data_collection_order": order}
    )
    return json.dumps({"op": "c", "before": None, "after": row, "transaction": transaction,
                       "source": {"table": table}})


def record(topic: str, partition: int, offset: int, ts: int, key: object, value: str) -> dict:
    return {"topic": topic, "partition": partition, "offset": offset, "ts": T0 + ts,
            "key": json.dumps(key), "payload": value}


def end(txid: str, orders: int, lines: int) -> str:
    return json.dumps({"status": "END", "id": txid, "event_count": orders + lines,
                       "data_collections": [{"data_collection": ORDERS, "event_count": orders},
                                            {"data_collection": LINES, "event_count": lines}]})


def begin(txid: str) -> str:
    return json.dumps({"status": "BEGIN", "id": txid})


ORDER_RECORDS = [
    record(ORDERS, 0, 0, 10 * S, {"id": 1}, event(ORDERS, {"id": 1, "total": 10}, "T1")),
    record(ORDERS, 0, 1, 45 * S, {"id": 0}, event(ORDERS, {"id": 0, "total": 5}, None)),
    record(ORDERS, 1, 0, 40 * S, {"id": 2}, event(ORDERS, {"id": 2, "total": 20}, "T2")),
    record(ORDERS, 0, 2, 130 * S, {"id": 3}, event(ORDERS, {"id": 3, "total": 30}, "T3")),
    record(ORDERS, 0, 3, 170 * S, {"id": 9}, event(ORDERS, {"id": 9, "total": 90}, None)),
    record(ORDERS, 1, 1, 150 * S, {"id": 4}, event(ORDERS, {"id": 4, "total": 40}, "T4")),
]
LINE_RECORDS = [
    record(LINES, 0, 0, 10 * S, {"id": 11}, event(LINES, {"id": 11, "order_id": 1}, "T1", 1)),
    record(LINES, 1, 0, 20 * S, {"id": 12}, event(LINES, {"id": 12, "order_id": 1}, "T1", 2)),
    record(LINES, 0, 1, 70 * S, {"id": 21}, event(LINES, {"id": 21, "order_id": 2}, "T2", 1)),
    record(LINES, 1, 1, 130 * S, {"id": 31}, event(LINES, {"id": 31, "order_id": 3}, "T3", 1)),
    record(LINES, 0, 2, 150 * S, {"id": 41}, event(LINES, {"id": 41, "order_id": 4}, "T4", 1)),
]
TXN_RECORDS = [
    record(TXN_TOPIC, 0, 0, 5 * S, None, begin("T1")),
    record(TXN_TOPIC, 0, 1, 30 * S, None, end("T1", 1, 2)),
    record(TXN_TOPIC, 0, 2, 35 * S, None, begin("T2")),
    record(TXN_TOPIC, 0, 3, 50 * S, None, end("T2", 1, 1)),
    record(TXN_TOPIC, 0, 4, 55 * S, None, end("T1", 1, 2)),  # redelivered at a new offset
    record(TXN_TOPIC, 0, 5, 125 * S, None, begin("T3")),
    record(TXN_TOPIC, 0, 6, 140 * S, None, end("T3", 1, 2)),  # announces a line never sent
    record(TXN_TOPIC, 0, 7, 145 * S, None, begin("T4")),
    record(TXN_TOPIC, 0, 8, 160 * S, None, end("T4", 1, 1)),
]


def write_lines(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("txn")
    landing = root / "landing"
    write_lines(landing / ORDERS / "a.json", ORDER_RECORDS)
    write_lines(landing / ORDERS / "a-again.json", ORDER_RECORDS[:3])  # redelivered
    write_lines(landing / LINES / "p0.json", [r for r in LINE_RECORDS if r["partition"] == 0])
    write_lines(landing / LINES / "p1.json", [r for r in LINE_RECORDS if r["partition"] == 1])
    write_lines(landing / TXN_TOPIC / "t.json", TXN_RECORDS)
    write_lines(landing / TXN_TOPIC / "t-again.json", TXN_RECORDS[:2])  # END of T1 again
    member = {"key": {"id": "bigint"}, "envelope": "debezium-upsert", "reclock": "event-time"}
    config = {
        "lake": "lake", "landing": "landing", "window": "1m",
        "start": "2026-01-01T00:00:00Z", "end": "2026-01-01T00:05:00Z",
        "sources": [
            {"name": "orders", "topic": ORDERS, "value": {"id": "bigint", "total": "bigint"},
             **member},
            {"name": "order_lines", "topic": LINES,
             "value": {"id": "bigint", "order_id": "bigint"}, **member},
        ],
        "transactions": [
            {"name": "shop", "topic": TXN_TOPIC,
             "sources": {"orders": ORDERS, "order_lines": LINES}, "timeout": "2m"},
        ],
    }
    (root / "reclock.yaml").write_text(yaml.safe_dump(config))
    (root / "dagster").mkdir()
    with pytest.MonkeyPatch.context() as env:
        env.setenv("DAGSTER_HOME", str(root / "dagster"))  # the runs are recorded there
        assert materialize(load_config(root / "reclock.yaml"), exports=False)
    yield root / "lake"


@pytest.fixture(scope="module")
def instance(lake: Path) -> Iterator[DagsterInstance]:
    with pytest.MonkeyPatch.context() as env:
        env.setenv("DAGSTER_HOME", str(lake.parent / "dagster"))
        with DagsterInstance.get() as recorded:
            yield recorded


def frontiers(lake: Path, source: str) -> dict[int, dict[int, int]]:
    """The remap read back: window number -> partition -> next offset."""
    rows = DeltaTable(str(lake / source / "remap")).to_pyarrow_table().to_pylist()
    result = {}
    for window in range(1, 6):
        until = T0 + window * 60 * S
        live: dict[tuple[int, int], int] = {}
        for row in rows:
            if row["time"] <= until:
                live[(row["partition"], row["offset"])] = (
                    live.get((row["partition"], row["offset"]), 0) + row["diff"]
                )
        result[window] = {p: o for (p, o), n in live.items() if n > 0}
    return result


def visible_ids(lake: Path, source: str, window: int) -> set[int]:
    """Ids of the rows of ``changes`` at the end of ``window``."""
    rows = DeltaTable(str(lake / source / "changes")).to_pyarrow_table().to_pylist()
    totals: dict[int, int] = {}
    for row in rows:
        if row["time"] <= T0 + window * 60 * S:
            totals[row["id"]] = totals.get(row["id"], 0) + row["diff"]
    return {key for key, n in totals.items() if n > 0}


def test_windows_hold_transactions_whole(lake: Path) -> None:
    orders, lines = frontiers(lake, "orders"), frontiers(lake, "order_lines")
    # Window 1: T1 and the snapshot order; T2's order waits for its late line.
    assert orders[1] == {0: 2} and lines[1] == {0: 1, 1: 1}
    # Window 2: T2 whole.
    assert orders[2] == {0: 2, 1: 1} and lines[2] == {0: 2, 1: 1}
    # Windows 3 to 5: T3 never completes; it and all behind it wait.
    assert orders[3] == orders[4] == orders[5] == orders[2]
    assert lines[3] == lines[4] == lines[5] == lines[2]
    assert [visible_ids(lake, "orders", w) for w in range(1, 6)] == [
        {0, 1}, {0, 1, 2}, {0, 1, 2}, {0, 1, 2}, {0, 1, 2}
    ]
    assert [visible_ids(lake, "order_lines", w) for w in range(1, 6)] == [
        {11, 12}, {11, 12, 21}, {11, 12, 21}, {11, 12, 21}, {11, 12, 21}
    ]


def test_no_window_shows_half_a_transaction(lake: Path) -> None:
    """The oracle: at every window end, each transaction has all its records bound in every
    topic or none (counted from the dumps, not from reclock's tables)."""
    members = {"orders": ORDER_RECORDS, "order_lines": LINE_RECORDS}
    bound = {name: frontiers(lake, name) for name in members}
    for window in range(1, 6):
        shown: dict[str, list[bool]] = {}
        for name, records in members.items():
            for r in records:
                txid = (json.loads(r["payload"])["transaction"] or {}).get("id")
                if txid is not None:
                    covered = r["offset"] < bound[name][window].get(r["partition"], 0)
                    shown.setdefault(txid, []).append(covered)
        assert all(all(flags) or not any(flags) for flags in shown.values()), (window, shown)


def test_waiting_transactions_are_visible(lake: Path, instance: DagsterInstance) -> None:
    """Each window's materialization counts the transactions its binding holds back; the
    transactions check fails once one waited longer than the group's timeout (2m), naming
    it: at window 5's end (300s) T3 (announced at 125s) and T4 (145s) have."""
    records = instance.fetch_materializations(AssetKey(["orders", "remap"]), limit=10).records
    figures = {
        r.partition_key: r.asset_materialization.metadata for r in records
    }
    windows = [figures[key] for key in sorted(figures)]
    # Window 1 holds T2 (announced at 35s); window 2 admits it; 3 to 5 hold T3 and T4.
    assert [w["transactions_pending"].value for w in windows] == [1, 0, 2, 2, 2]
    assert [w["transactions_overdue"].value for w in windows] == [0, 0, 0, 0, 2]
    oldest = [w["transactions_oldest_age_seconds"].value for w in windows]
    assert oldest[0] == 60 - 35 and oldest[4] == 300 - 125
    check = instance.get_latest_asset_check_evaluation_record(
        AssetCheckKey(AssetKey(["orders", "remap"]), "transactions")
    )
    assert check is not None and not check.evaluation.passed
    assert "2 transaction(s) of group shop" in check.evaluation.description
    assert check.evaluation.description.endswith(": T3, T4")


def test_the_sensor_sees_transaction_topic_dumps(lake: Path) -> None:
    """A transaction topic file landing is a new dump: the sensor keeps its first sighting
    (the run registers it with that arrival time); the registered ones are not new."""
    config = load_config(lake.parent / "reclock.yaml")
    sensor = build_definitions(config).resolve_sensor_def("new_dumps")
    resources = {"lake": LakeResource(root=str(config.lake), landing=str(config.landing))}
    landed = config.landing / TXN_TOPIC / "late" / "u.json"
    write_lines(landed, [record(TXN_TOPIC, 0, 9, 200 * S, None, begin("T5"))])
    try:
        context = build_sensor_context(
            instance=DagsterInstance.ephemeral(), cursor=None, resources=resources
        )
        tick = sensor.evaluate_tick(context)
    finally:
        landed.unlink()
    assert list(json.loads(tick.cursor)["seen"]) == [str(landed)]
    assert tick.skip_message.startswith("1 new dump file(s)")  # every window is held


def test_inspect_shows_what_the_last_window_holds_back(
    lake: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """At window 5's end T3 (announced at 125s, BEGIN) and T4 (145s) wait, both longer
    than the group's 2m timeout."""
    assert main(["inspect", "--config", str(lake.parent / "reclock.yaml"), "--source",
                 "orders"]) == 0
    printed = capsys.readouterr().out
    assert ("  transactions: 2 transaction(s) waiting (oldest announced "
            "2026-01-01T00:02:05Z); 2 overdue: T3, T4") in printed.splitlines()


def test_members_share_one_answer_to_what_waits_until_a_group_table_moves(
    lake: Path, tmp_path: Path, spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every member asks what its group holds back at a window's end: the process finds
    it once for them all, and again once a group table moved (here, a BEGIN of T5 at 200s
    landed and registered on the transaction topic: at window 5's end it waits too)."""
    shutil.copytree(lake.parent, tmp_path / "copy", ignore=shutil.ignore_patterns("dagster"))
    config = load_config(tmp_path / "copy" / "reclock.yaml")
    found: list[list[int]] = []
    find = TransactionGroupBinder._pending

    def counted(binder: TransactionGroupBinder, ends: list[int]) -> dict:
        found.append(list(ends))
        return find(binder, ends)

    monkeypatch.setattr(TransactionGroupBinder, "_pending", counted)
    orders, lines = (transaction_binder(spark, config, config.lake, name)
                     for name in ("orders", "order_lines"))  # fmt: skip
    end = T0 + 5 * 60 * S - 1
    assert orders is not None and lines is not None
    waiting = orders.pending([end])[end]
    assert (waiting.count, waiting.overdue) == (2, ("T3", "T4"))
    assert lines.pending([end]) == {end: waiting} and found == [[end]]

    write_lines(config.landing / TXN_TOPIC / "late.json",
                [record(TXN_TOPIC, 0, 9, 200 * S, None, begin("T5"))])  # fmt: skip
    SourcePipeline.from_config(spark, config, config.source("orders")).register_dumps(T0)
    assert lines.pending([end])[end].count == 3 and found == [[end], [end]]
    assert orders.pending([end])[end].count == 3 and len(found) == 2
