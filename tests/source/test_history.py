"""The ``history`` table (SCD type 2) of upsert sources, through the source's runs.

Random upsert streams over two partitions, with a partition's tail landing late (after the
windows its timestamps belong to were bound), run in two runs: after each run the history
equals a plain-Python oracle built from ``changes`` (intervals and values) and
``reclocked`` (positions); rows of the first run are never changed by the second except
to close them; a refresh with nothing new writes no Delta version.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest
from deltalake import DeltaTable
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from cdc_core.config import parse_config
from cdc_core.reclock import Windows
from cdc_core.source import SourcePipeline, history_upper
from tests.spark_examples import SPARK_EXAMPLES

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
WINDOW = 60_000
WINDOWS = 4
KEYS = ("id",)
VALUES = ("name", "n")


def config_of(root: Path, envelope: str = "upsert", **extra: object):
    source = {
        "name": "users",
        "topic": "users",
        "key": {"id": "bigint"},
        "value": {"name": "string", "n": "bigint"},
        "envelope": envelope,
        "reclock": "event-time",
        "history": True,
        **extra,
    }
    if envelope == "debezium-upsert":
        source["value"] = {"id": "bigint", "name": "string", "n": "bigint"}
    data = {
        "lake": "lake",
        "landing": "landing",
        "window": "1m",
        "start": "2026-01-01T00:00:00Z",
        "sources": [source],
    }
    return parse_config(data, root)


def kcat(partition: int, offset: int, window: int, key: int, value: object) -> str:
    """A kcat ``-J`` line; ``value`` is a number (a row), "null" (a delete) or "bad"."""
    payload = (
        None
        if value == "null"
        else json.dumps({"n": "x"} if value == "bad" else {"name": f"v{value}", "n": value})
    )
    record = {"topic": "users", "partition": partition, "offset": offset,
              "ts": T0 + window * WINDOW + 1 + offset, "key": json.dumps({"id": key}),
              "payload": payload}  # fmt: skip
    return json.dumps(record) + "\n"


# A message: (key, value, window its timestamp falls in); windows never decrease along a
# partition, so event time binds each record by its own timestamp unless its file is late.
messages = st.tuples(
    st.integers(0, 3),
    st.one_of(st.integers(0, 2), st.just("null"), st.just("bad")),
    st.integers(0, WINDOWS - 1),
)


@st.composite
def streams(draw) -> tuple[dict[int, list], dict[int, int], int]:
    """Per partition its log (sorted by window), where its late tail starts, and how many
    windows the first run covers."""
    logs, late_from = {}, {}
    for partition in (0, 1):
        log = sorted(draw(st.lists(messages, max_size=8)), key=lambda m: m[2])
        logs[partition] = log
        late_from[partition] = draw(st.integers(0, len(log)))
    return logs, late_from, draw(st.integers(1, WINDOWS - 1))


def write_dumps(landing: Path, logs: dict[int, list], late_from: dict[int, int], late: bool):
    folder = landing / "users"
    folder.mkdir(parents=True, exist_ok=True)
    for partition, log in logs.items():
        lines = [
            kcat(partition, offset, window, key, value)
            for offset, (key, value, window) in enumerate(log)
            if (offset >= late_from[partition]) == late
        ]
        if lines:
            (folder / f"p{partition}-{'late' if late else 'early'}.json").write_text("".join(lines))


def rows(path: Path) -> list[dict]:
    return DeltaTable(str(path)).to_pyarrow_table().to_pylist()


def history_of(path: Path) -> set[tuple]:
    columns = (*KEYS, *VALUES, "valid_from", "valid_to", "partition", "offset")
    return {tuple(row[c] for c in columns) for row in rows(path)}


def oracle(root: Path) -> set[tuple]:
    """Versions from ``changes``: per key in time order, a retraction closes the open
    version, an insertion opens one; its position is the greatest (partition, offset) of
    the key's records in ``reclocked`` at that time."""
    by_key: dict[int, dict[int, list]] = defaultdict(lambda: defaultdict(list))
    totals: dict[tuple, int] = defaultdict(int)
    for row in rows(root / "changes"):
        totals[(row["id"], row["name"], row["n"], row["time"])] += row["diff"]
    for (key, name, n, time), diff in totals.items():
        if diff:
            assert diff in (-1, 1)
            by_key[key][time].append((diff, name, n))
    positions: dict[tuple, tuple] = {}
    for record in rows(root / "reclocked"):
        key = json.loads(record["key"])["id"]
        at = (key, record["time"])
        positions[at] = max(positions.get(at, (-1, -1)), (record["partition"], record["offset"]))
    versions = set()
    for key, times in by_key.items():
        current = None
        for time in sorted(times):
            for diff, name, n in sorted(times[time]):  # the retraction first
                if diff < 0:
                    assert current is not None and current[1:3] == (name, n)
                    versions.add((*current[:4], time, *current[5:]))
                    current = None
                else:
                    current = (key, name, n, time, None, *positions[(key, time)])
        if current is not None:
            versions.add(current)
    return versions


def run(pipeline: SourcePipeline, first: int, last: int) -> None:
    """Register what landed, run windows ``first .. last`` (1-based), publish."""
    pipeline.register_dumps(arrival_ms=T0)
    pipeline.run_windows(Windows(T0 + (first - 1) * WINDOW, T0 + last * WINDOW, WINDOW))
    pipeline.finish()


@settings(
    SPARK_EXAMPLES,
    max_examples=6,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # a Spark example is slow to shrink
)
@given(stream=streams())
def test_history_equals_the_oracle_and_only_closes_older_rows(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory, stream
) -> None:
    logs, late_from, split = stream
    root = tmp_path_factory.mktemp("history")
    config = config_of(root)
    pipeline = SourcePipeline.from_config(spark, config, config.sources[0])
    lake = config.lake / "users"

    write_dumps(config.landing, logs, late_from, late=False)
    run(pipeline, 1, split)
    before = history_of(lake / "history")
    assert before == oracle(lake)
    assert history_upper(str(lake / "history")).time == T0 + split * WINDOW + 1

    write_dumps(config.landing, logs, late_from, late=True)  # late: bound from here on
    run(pipeline, split + 1, WINDOWS)
    after = history_of(lake / "history")
    assert after == oracle(lake)
    for version in before - after:  # only closed: the same version with a valid_to
        (closed,) = [v for v in after if v[:4] == version[:4]]
        assert version[4] is None and closed[4] is not None and closed[5:] == version[5:]

    # Each version is the payload of the record at its position, bound at valid_from.
    records = {(r["partition"], r["offset"]): r for r in rows(lake / "reclocked")}
    for key, name, n, valid_from, _, partition, offset in after:
        record = records[(partition, offset)]
        assert json.loads(record["key"]) == {"id": key} and record["time"] == valid_from
        assert json.loads(record["payload"]) == {"name": name, "n": n}

    version_before = DeltaTable(str(lake / "history")).version()
    pipeline.finish()  # nothing new: no new Delta version
    assert DeltaTable(str(lake / "history")).version() == version_before


def debezium(partition: int, offset: int, window: int, key: int, op: str | None, **after):
    """A Debezium change event line (``op`` None: the tombstone after a delete)."""
    event = None if op is None else {
        "op": op, "before": None, "after": after or None, "source": {"connector": "postgresql"}
    }  # fmt: skip
    record = {"topic": "users", "partition": partition, "offset": offset,
              "ts": T0 + window * WINDOW + 1 + offset, "key": json.dumps({"id": key}),
              "payload": None if event is None else json.dumps(event)}  # fmt: skip
    return json.dumps(record) + "\n"


def test_debezium_upsert_history_closes_on_delete_and_reopens_on_create(
    spark: SparkSession, tmp_path: Path
) -> None:
    config = config_of(tmp_path, "debezium-upsert")
    (config.landing / "users").mkdir(parents=True)
    lines = [
        debezium(0, 0, 0, 1, "c", id=1, name="a", n=1),
        debezium(0, 1, 0, 2, "c", id=2, name="b", n=2),
        debezium(0, 2, 1, 1, "u", id=1, name="a2", n=1),
        debezium(0, 3, 1, 2, "d"),
        debezium(0, 4, 1, 2, None),  # the tombstone: deletes nothing more
        debezium(0, 5, 2, 2, "c", id=2, name="b", n=2),
        debezium(0, 6, 2, 1, "u", id=1, name="a2", n=1),  # unchanged: no new version
    ]
    (config.landing / "users" / "dump.json").write_text("".join(lines))
    pipeline = SourcePipeline.from_config(spark, config, config.sources[0])
    run(pipeline, 1, 3)
    b1, b2, b3 = (T0 + w * WINDOW for w in (1, 2, 3))
    history = history_of(config.lake / "users" / "history")
    assert history == {
        (1, "a", 1, b1, b2, 0, 0),
        (2, "b", 2, b1, b2, 0, 1),
        (1, "a2", 1, b2, None, 0, 2),
        (2, "b", 2, b3, None, 0, 5),
    }
    assert history == oracle(config.lake / "users")


def test_a_key_with_a_null_field_is_closed_like_any_other_key(
    spark: SparkSession, tmp_path: Path
) -> None:
    config = config_of(tmp_path, key={"id": "bigint", "region": "string"})
    (config.landing / "users").mkdir(parents=True)

    def line(offset: int, window: int, payload: dict | None) -> str:
        return json.dumps({
            "topic": "users", "partition": 0, "offset": offset,
            "ts": T0 + window * WINDOW + 1 + offset,
            "key": json.dumps({"id": 1, "region": None}),
            "payload": None if payload is None else json.dumps(payload),
        }) + "\n"  # fmt: skip

    lines = [
        line(0, 0, {"name": "a", "n": 1}),
        line(1, 1, {"name": "b", "n": 2}),
        line(2, 2, None),  # deletes the key: closes its open version
    ]
    (config.landing / "users" / "dump.json").write_text("".join(lines))
    pipeline = SourcePipeline.from_config(spark, config, config.sources[0])
    run(pipeline, 1, 1)
    run(pipeline, 2, 3)  # the second run closes versions the first one wrote
    b1, b2, b3 = (T0 + w * WINDOW for w in (1, 2, 3))
    columns = ("id", "region", "name", "n", "valid_from", "valid_to", "partition", "offset")
    history = {tuple(r[c] for c in columns) for r in rows(config.lake / "users" / "history")}
    assert history == {
        (1, None, "a", 1, b1, b2, 0, 0),
        (1, None, "b", 2, b2, b3, 0, 1),
    }
