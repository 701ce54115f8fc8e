"""A damaged line never holds back its Kafka partition.

A line whose ``(partition, offset)`` reads is bound like any record (by its own ``ts``
when that reads, else with the records before it) and becomes an ``errors`` row at its
binding time; the good records after it bind as if it were good. Each case puts the
damaged line between good records of one partition (or last), through one
``reclock materialize`` of an open-ended upsert source.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from dagster import AssetKey, DagsterInstance
from deltalake import DeltaTable
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_core.app.status import statuses
from cdc_core.config import Config, load_config
from cdc_core.frontier import OffsetFrontier
from cdc_core.ingest.registry import sink_gaps
from cdc_core.reclock import Windows
from cdc_core.reclock.remap import UnexpectedStartOffset
from cdc_core.source import SourcePipeline
from pipelines.build import ALL_WINDOWS_JOB, build_definitions
from pipelines.run import materialize
from tests.judged_alone import exactly_once
from tests.spark_examples import SPARK_EXAMPLES
from tests.upsert_config import write_upsert_config

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z, the config's start
MINUTE = 60_000
PARTITION = 52


def line(offset: int, key: int, name: str, ts: int = T0 + 1_000) -> bytes:
    record = {"topic": "users", "partition": PARTITION, "offset": offset, "tstype": "create",
              "ts": ts, "broker": 1, "headers": [], "key": json.dumps({"id": key}),
              "payload": json.dumps({"name": name})}  # fmt: skip
    return json.dumps(record).encode() + b"\n"


BAD_BYTES = b"\xff\xfe\xc3("


def bad_payload(offset: int) -> bytes:
    return line(offset, 1, "PAYLOAD").replace(b"PAYLOAD", BAD_BYTES)


def bad_key(offset: int) -> bytes:
    return line(offset, 1, "x").replace(b'{\\"id\\": 1}', b'{\\"id\\": \\"' + BAD_BYTES + b'\\"}')


def bad_ts(offset: int) -> bytes:
    return line(offset, 1, "x").replace(str(T0 + 1_000).encode(), b'"' + BAD_BYTES + b'"')


def write_config(workdir: Path, *, end: str | None = None, **options: str) -> Config:
    return load_config(write_upsert_config(workdir, end=end, source=options))


def table(config: Config, name: str) -> list[dict]:
    return DeltaTable(str(config.lake / "users" / name)).to_pyarrow_table().to_pylist()


def remap_top(config: Config) -> int:
    live: dict[int, int] = {}
    for row in table(config, "remap"):
        if row["partition"] == PARTITION:
            live[row["offset"]] = live.get(row["offset"], 0) + row["diff"]
    return max((o for o, count in live.items() if count), default=0)


def retyped(field: str, value: object) -> Callable[[int], bytes]:
    """A good line whose ``field`` holds a value of the wrong JSON type."""

    def damaged(offset: int) -> bytes:
        record = json.loads(line(offset, 1, "x"))
        return json.dumps({**record, field: value}).encode() + b"\n"

    return damaged


CASES = {
    "invalid UTF-8 in the payload": (bad_payload, "dump line is not valid UTF-8"),
    "invalid UTF-8 in the key": (bad_key, "dump line is not valid UTF-8"),
    "invalid UTF-8 in ts": (bad_ts, "dump line is not valid UTF-8"),
    "ts of the wrong type": (retyped("ts", "soon"), "ts must be a 64-bit integer"),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_a_damaged_line_between_good_records_does_not_stall(
    tmp_path: Path, spark, case: str
) -> None:
    damaged, reason = CASES[case]
    (tmp_path / "landing" / "users").mkdir(parents=True)
    (tmp_path / "landing" / "users" / "dump.json").write_bytes(
        line(0, 1, "first") + damaged(1) + line(2, 2, "after")
    )
    config = write_config(tmp_path, end="2026-01-01T00:03:00Z")
    assert materialize(config, T0 + 3 * MINUTE, exports=False)
    assert remap_top(config) == 3, "the binding passes the damaged line"
    reclocked = {(r["offset"], r["time"]) for r in table(config, "reclocked")}
    assert reclocked == {(0, T0 + MINUTE), (2, T0 + MINUTE)}
    errors = [e for e in table(config, "errors") if e["file"].endswith("dump.json")]
    assert [(e["partition"], e["offset"], e["time"]) for e in errors] == [
        (PARTITION, 1, T0 + MINUTE)
    ], "the damaged line is an error at its binding time"
    assert reason in errors[0]["reason"]
    assert {(r["id"], r["name"]) for r in table(config, "state")} == {(1, "first"), (2, "after")}


def test_a_damaged_last_line_is_bound_and_the_next_dump_goes_on(
    tmp_path: Path, spark, capsys: pytest.CaptureFixture[str]
) -> None:
    landing = tmp_path / "landing" / "users"
    landing.mkdir(parents=True)
    (landing / "a.json").write_bytes(line(0, 1, "first") + bad_payload(1))
    config = write_config(tmp_path, end="2026-01-01T00:03:00Z")
    assert materialize(config, T0 + MINUTE, exports=False)
    assert remap_top(config) == 2
    errors = [(e["partition"], e["offset"], e["time"]) for e in table(config, "errors")]
    assert errors == [(PARTITION, 1, T0 + MINUTE)]
    (landing / "b.json").write_bytes(line(2, 2, "later", ts=T0 + MINUTE + 1))
    capsys.readouterr()
    assert materialize(config, T0 + 3 * MINUTE, exports=False)
    assert "Materialized windows 2026-01-01T00:01:00 .. 2026-01-01T00:02:00 (2 windows)" in (
        capsys.readouterr().out
    ), "the run starts at the first window the outputs do not hold"
    assert remap_top(config) == 3
    assert {(r["id"], r["name"]) for r in table(config, "state")} == {(1, "first"), (2, "later")}
    assert len(table(config, "errors")) == 1, "the damaged line is reported once"


def test_a_partition_held_at_a_gap_is_named_and_fails_accounted_past_stall_after(
    tmp_path: Path, spark
) -> None:
    """Offset 1 never lands: the binding holds partition 52 at it. Each window's
    metadata, ``inspect`` and (once the dumps waited longer than ``stall_after``) the
    blocking ``accounted`` check name the partition, the offset and the gap."""
    landing = tmp_path / "landing" / "users"
    landing.mkdir(parents=True)
    (landing / "dump.json").write_bytes(line(0, 1, "first") + line(2, 2, "after"))
    config = write_config(tmp_path, end="2026-01-01T00:05:00Z", stall_after="2m")
    # Registered at the start of the first window, as a service would have seen it land.
    SourcePipeline.from_config(spark, config, config.source("users")).register_dumps(T0)
    job = build_definitions(config).resolve_job_def(ALL_WINDOWS_JOB)
    instance = DagsterInstance.ephemeral()
    waits = "partition 52 waits at offset 1"

    def run(key: str):
        result = job.execute_in_process(
            partition_key=key, instance=instance, raise_on_error=False,
            asset_selection=[AssetKey(["users", t]) for t in
                             ("remap", "reclocked", "changes", "state", "errors")],
        )  # fmt: skip
        [accounted] = [
            e for e in result.get_asset_check_evaluations() if e.check_name == "accounted"
        ]
        [remap] = [
            e.materialization for e in result.get_asset_materialization_events()
            if e.materialization.asset_key == AssetKey(["users", "remap"])
        ]  # fmt: skip
        return accounted, remap.metadata

    accounted, metadata = run("2026-01-01T00:00:00")  # registered 1 minute before its end
    assert accounted.passed, accounted.description
    assert metadata["held_partitions"].value == 1
    assert waits in metadata["held"].value and "offset gap" in metadata["held"].value
    accounted, metadata = run("2026-01-01T00:02:00")  # 3 minutes: past stall_after
    assert not accounted.passed
    assert "1 partition(s) stalled" in accounted.description
    assert waits in accounted.description and "offset gap" in accounted.description
    assert waits in metadata["held"].value
    described = statuses(config)[0].describe()
    assert waits in described and "no registered dump is known to hold offset 1" in described


def test_a_transactional_topics_marker_gaps_hold_it_unless_gaps_are_allowed_or_known(
    tmp_path: Path, spark
) -> None:
    """A topic a transactional producer writes: each commit marker takes an offset no
    consumer sees (3 and 7 here), and an aborted transaction's records and marker are
    skipped (8 to 10). In a kcat dump, the binding holds the partition at the first gap by
    default, saying why such gaps arise and which setting admits them; with
    ``allow_offset_gaps`` it binds every record. Kafka Connect sink files (here with their
    key files) show the holes themselves: a file's records run up to the next file's
    start, so the binding passes them by default, and the exactly-once check counts them
    as no record."""
    kept = {0: "a", 1: "b", 2: "c", 4: "d", 5: "e", 6: "f", 11: "g"}
    everything = {(o, name) for o, name in kept.items()}
    files = [(0, 1, 2), (4, 5, 6), (11,)]  # as a sink flushed them: one file per transaction
    cases = {"kcat": False, "kcat, gaps allowed": True, "sink files": False}
    for case, allowed in cases.items():
        workdir = tmp_path / case.replace(" ", "_").replace(",", "")
        landing = workdir / "landing" / "users"
        landing.mkdir(parents=True)
        if case.startswith("kcat"):
            dump = b"".join(line(offset, offset, name) for offset, name in kept.items())
            (landing / "dump.json").write_bytes(dump)
        for offsets in files if case == "sink files" else ():
            name = f"users+{PARTITION}+{offsets[0]:010d}"
            (landing / f"{name}.json").write_text(
                "".join(json.dumps({"name": kept[o]}) + "\n" for o in offsets))
            (landing / f"{name}.keys.json").write_text(
                "".join(json.dumps({"id": o}) + "\n" for o in offsets))  # fmt: skip
        config = write_config(workdir, allow_offset_gaps=allowed, sink_stores=["keys"],
                              reclock="arrival")  # fmt: skip
        pipeline = SourcePipeline.from_config(spark, config, config.source("users"))
        pipeline.register_dumps(T0)
        [report] = pipeline.run_windows(Windows(T0, T0 + MINUTE, MINUTE))
        pipeline.finish()
        state = {(r["id"], r["name"]) for r in table(config, "state")}
        held = pipeline.reader.inspect().held
        if case == "kcat":
            assert report.frontier.offsets == {PARTITION: 3}
            assert state == {(0, "a"), (1, "b"), (2, "c")}
            [waits] = held
            assert waits.describe().startswith(f"partition {PARTITION} waits at offset 3 ")
            assert "offset gap: no registered dump is known to hold offset 3" in waits.reason
            assert "written by a transactional producer (each commit marker takes an " \
                "offset no consumer sees, and an aborted transaction's records are " \
                "skipped)" in waits.reason
            assert waits.reason.endswith("set allow_offset_gaps for it")
            continue
        assert held == () and state == everything, case
        # The last sink file's holes after it are unknown (no next file): its end binds.
        assert report.frontier.offsets == {PARTITION: 12}, case
        holes = sink_gaps(pipeline.registry.files())
        assert holes == ({PARTITION: [(3, 4), (7, 11)]} if case == "sink files" else {})
        outcome = exactly_once(
            pipeline.reclocked, OffsetFrontier(), report.frontier, {}, 1, T0 + MINUTE + 1,
            gaps_allowed=allowed, errors=pipeline.errors, holes=holes,
        )  # fmt: skip
        assert outcome.passed, outcome.description


# Damage a line can carry while its partition and offset still read (bound at its
# position), and damage that loses the position (a hole the binding must wait at).
POSITIONED = {
    "payload": bad_payload,
    "key": bad_key,
    "ts": bad_ts,
    "ts of the wrong type": retyped("ts", "soon"),
    "ts missing": lambda offset: json.dumps(
        {"topic": "users", "partition": PARTITION, "offset": offset}
    ).encode() + b"\n",
}
UNPOSITIONED = {"cut": lambda offset: line(offset, 1, "x")[:50] + b"\n"}


@st.composite
def damaged_dumps(draw: st.DrawFn) -> list[tuple[int, str, int, int]]:
    """Per offset of partition 52, in order: (offset, kind, key, ts) where kind is good,
    trailing (a good record with text after it), a damage of POSITIONED or UNPOSITIONED,
    or a damage redelivered good in a later file (kind prefixed with ``healed ``)."""
    kinds = st.sampled_from(
        ["good"] * 4 + ["trailing", *POSITIONED, *UNPOSITIONED, "healed payload", "healed cut"]
    )
    size = draw(st.integers(3, 14))
    return [
        (offset, draw(kinds), draw(st.integers(0, 3)), T0 + draw(st.integers(0, 3 * MINUTE - 1)))
        for offset in range(size)
    ]


def expected_state(lines: list[tuple[int, str, int, int]]) -> dict[int, str]:
    """The plain-Python oracle: the binding passes every line whose position reads, and
    stops at the first offset no line places; the latest good record per key wins."""
    state: dict[int, str] = {}
    for offset, kind, key, _ in lines:
        if kind in UNPOSITIONED:
            break
        if kind in ("good", "trailing") or kind.startswith("healed "):
            state[key] = f"v{offset}"
    return state


@settings(SPARK_EXAMPLES, max_examples=6)
@given(lines=damaged_dumps())
def test_good_records_reach_state_whatever_damage_lies_around_them(
    spark, lines: list[tuple[int, str, int, int]]
) -> None:
    workdir = Path(tempfile.mkdtemp())
    landing = workdir / "landing" / "users"
    landing.mkdir(parents=True)
    first, later = [], []
    for offset, kind, key, ts in lines:
        if kind in ("good", "trailing"):
            text = line(offset, key, f"v{offset}", ts)
            first.append(text[:-1] + b" garbage\n" if kind == "trailing" else text)
        else:
            damage = kind.removeprefix("healed ")
            first.append({**POSITIONED, **UNPOSITIONED}[damage](offset))
            if kind.startswith("healed "):
                later.append(line(offset, key, f"v{offset}", ts))
    (landing / "a.json").write_bytes(b"".join(first))
    (landing / "b.json").write_bytes(b"".join(later))
    config = write_config(workdir, end="2026-01-01T00:03:00Z")
    pipeline = SourcePipeline.from_config(spark, config, config.source("users"))
    pipeline.register_dumps(T0)
    windows = Windows(T0, T0 + 3 * MINUTE, MINUTE)
    if lines[0][1] in UNPOSITIONED:  # the partition seems to start past 0: said, not skipped
        with pytest.raises(UnexpectedStartOffset, match="partition 52 starts at offset"):
            pipeline.run_windows(windows)
        return
    pipeline.run_windows(windows)
    pipeline.finish()
    assert {r["id"]: r["name"] for r in table(config, "state")} == expected_state(lines)
    placed = {(e["partition"], e["offset"]) for e in table(config, "errors")}
    stop = next((o for o, kind, *_ in lines if kind in UNPOSITIONED), len(lines))
    for offset, kind, *_ in lines:
        if kind in POSITIONED and offset < stop:
            assert (PARTITION, offset) in placed, f"no error row for damaged offset {offset}"
    assert remap_top(config) == stop, "the binding stops exactly at the first lost position"
