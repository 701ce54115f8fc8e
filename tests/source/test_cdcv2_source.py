"""A topic carrying a CDCv2 stream (``format: cdcv2-json``, envelope ``materialize``),
through the whole pipeline: dumps registered, messages reclocked, stream judged.

The expected ``changes`` are computed here from the stream alone, by the rule: at window
end E the messages bound so far (event time: ts < E) are complete through F(E) = the end of
the progress chain from 0, held back at the first time with fewer distinct updates than
announced; each update lands at the first E with time < F(E). Materialize would keep the
stream's times; reclock advances them to the window that completes them (see
``cdc_core.envelopes.materialize``)."""

from __future__ import annotations

import base64
import json
import random
import tempfile
from collections import Counter
from pathlib import Path

import pytest
from deltalake import DeltaTable
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession
from pyspark.sql.types import IntegerType, StringType, StructField, StructType

from cdc_core.cdcv2.codec_avro import AvroCodec
from cdc_core.cdcv2.model import CountExceeded, Progress, Updates
from cdc_core.config import parse_config
from cdc_core.frontier import TimeFrontier
from cdc_core.reclock import Windows
from cdc_core.source import SourcePipeline
from tests.spark_examples import SPARK_EXAMPLES

T0 = 1_767_225_600_000
WIDTH = 60_000
WINDOWS = 3
NAMES = ("a", "b", "c")

Fact = tuple[tuple[str, int], int, int]  # ((name, n), time, diff)


def config_for(root: Path, format: str = "cdcv2-json"):
    return parse_config(
        {
            "lake": "lake",
            "landing": "landing",
            "window": "1m",
            "start": "2026-01-01T00:00:00Z",
            "sources": [
                {
                    "name": "stream",
                    "topic": "stream",
                    "format": format,
                    "value": {"name": "string", "n": "int"},
                    "envelope": "materialize",
                    "reclock": "event-time",
                }
            ],
        },
        root,
    )


def updates_message(facts: list[Fact]) -> str:
    rows = [{"data": {"name": d[0], "n": d[1]}, "time": t, "diff": x} for d, t, x in facts]
    return json.dumps({"updates": rows})


def progress_message(lower: int, upper: int, counts: Counter) -> str:
    listed = [{"time": t, "count": c} for t, c in sorted(counts.items()) if lower <= t < upper]
    return json.dumps({"progress": {"lower": [lower], "upper": [upper], "counts": listed}})


def kcat_line(partition: int, offset: int, ts: int, payload: str) -> str:
    return json.dumps(
        {"topic": "stream", "partition": partition, "offset": offset, "ts": ts,
         "key": None, "payload": payload}  # fmt: skip
    )


@st.composite
def streams(draw: st.DrawFn) -> tuple[list[Fact], list[tuple[str, int, str]]]:
    """Consolidated facts at times 0..5, and the messages that carry them: updates
    re-batched, progress split at random cuts, every message in random order, some
    messages repeated (a producer retry) and some Kafka records delivered twice (in two
    files); each message gets the window its ts falls in."""
    facts: dict[tuple[tuple[str, int], int], int] = {}
    for _ in range(draw(st.integers(1, 12))):
        data = (draw(st.sampled_from(NAMES)), draw(st.integers(0, 3)))
        time = draw(st.integers(0, 5))
        facts[(data, time)] = draw(st.sampled_from([-1, 1, 2]))
    fact_list = [(d, t, x) for (d, t), x in facts.items()]
    rng = random.Random(draw(st.integers(0, 2**32)))
    rng.shuffle(fact_list)
    messages: list[str] = []
    while fact_list:
        size = rng.randint(1, 4)
        messages.append(updates_message(fact_list[:size]))
        fact_list = fact_list[size:]
    counts = Counter(t for (_, t) in facts)
    cuts = sorted(set(draw(st.lists(st.integers(1, 6), max_size=3))) | {0, 7})
    messages += [progress_message(lo, hi, counts) for lo, hi in zip(cuts, cuts[1:], strict=False)]
    messages += [rng.choice(messages) for _ in range(draw(st.integers(0, 3)))]
    rng.shuffle(messages)
    windows = sorted(rng.randrange(WINDOWS) for _ in messages)  # ts ascend with offsets
    return [(d, t, x) for (d, t), x in facts.items()], [
        (payload, window, f"{index}") for index, (payload, window) in enumerate(
            zip(messages, windows, strict=True))
    ]


def expected_changes(messages: list[tuple[str, int, str]]) -> Counter:
    """((name, n), window end, diff) -> 1 by the rule in the module docstring."""
    out: Counter = Counter()
    previous = 0
    for window in range(WINDOWS):
        bound = [json.loads(p) for p, w, _ in messages if w <= window]
        facts = {
            ((u["data"]["name"], u["data"]["n"]), u["time"]): u["diff"]
            for m in bound for u in m.get("updates", [])
        }
        statements = sorted(
            {json.dumps(m["progress"], sort_keys=True) for m in bound if "progress" in m}
        )
        chain, announced = 0, {}
        for statement in sorted((json.loads(s) for s in statements), key=lambda p: p["lower"]):
            if statement["lower"][0] <= chain:
                chain = max(chain, statement["upper"][0])
                announced.update({c["time"]: c["count"] for c in statement["counts"]})
        found = Counter(t for (_, t) in facts)
        missing = [t for t in range(chain) if found[t] < announced.get(t, 0)]
        frontier = min([chain, *missing])
        end = T0 + (window + 1) * WIDTH
        for (data, time), diff in facts.items():
            if previous <= time < frontier:
                out[(data, end)] += diff
        previous = frontier
    return Counter({key: diff for key, diff in out.items() if diff})


def write_dumps(landing: Path, messages: list[tuple[str, int, str]]) -> None:
    folder = landing / "stream"
    folder.mkdir(parents=True)
    lines = [
        kcat_line(0, offset, T0 + window * WIDTH + 1000 + offset, payload)
        for offset, (payload, window, _) in enumerate(messages)
    ]
    (folder / "a.json").write_text("\n".join(lines[::2]) + "\n")
    (folder / "b.json").write_text("\n".join(lines[1::2]) + "\n")
    # A Kafka redelivery: the first half again, in another file.
    (folder / "c.json").write_text("\n".join(lines[: len(lines) // 2]) + "\n")


def run_stream(
    spark: SparkSession,
    root: Path,
    messages: list[tuple[str, int, str]],
    format: str = "cdcv2-json",
) -> Counter:
    config = config_for(root, format)
    write_dumps(config.landing, messages)
    pipeline = SourcePipeline.from_config(spark, config, config.sources[0])
    pipeline.register_dumps(arrival_ms=T0)
    # Two runs: the second judges the stream with the first run's messages as history.
    pipeline.run_windows(Windows(T0, T0 + WIDTH, WIDTH))
    pipeline.run_windows(Windows(T0 + WIDTH, T0 + WINDOWS * WIDTH, WIDTH))
    rows = DeltaTable(str(config.lake / "stream" / "changes")).to_pyarrow_table().to_pylist()
    found: Counter = Counter()
    for row in rows:
        found[((row["name"], row["n"]), row["time"])] += row["diff"]
    return Counter({key: diff for key, diff in found.items() if diff})


@settings(SPARK_EXAMPLES, max_examples=4)
@given(streams())
def test_duplicated_reordered_rebatched_streams_give_the_exact_changes(
    spark: SparkSession, stream: tuple[list[Fact], list[tuple[str, int, str]]]
) -> None:
    facts, messages = stream
    with tempfile.TemporaryDirectory() as root:
        found = run_stream(spark, Path(root), messages)
    assert found == expected_changes(messages)
    # Every message is bound by the last window and the stream is complete: all of it.
    total: Counter = Counter()
    for data, _, diff in facts:
        total[data] += diff
    state: Counter = Counter()
    for (data, _), diff in found.items():
        state[data] += diff
    assert +state == +total and -state == -total


def test_a_missing_update_holds_the_stream_and_bad_messages_are_errors(
    spark: SparkSession, tmp_path: Path
) -> None:
    facts = [(("a", 1), 0, 1), (("b", 1), 1, 1)]
    counts = Counter({0: 1, 1: 2})  # time 1 announces an update that never comes
    messages = [
        (updates_message(facts), 0, "0"),
        (progress_message(0, 3, counts), 0, "1"),
        ("{not json", 1, "2"),
    ]
    found = run_stream(spark, tmp_path, messages)
    assert found == Counter({(("a", 1), T0 + WIDTH): 1})
    errors = DeltaTable(str(tmp_path / "lake" / "stream" / "errors")).to_pyarrow_table()
    [error] = errors.to_pylist()
    assert (error["partition"], error["offset"], error["time"]) == (0, 2, T0 + 2 * WIDTH)
    assert error["reason"].startswith("cdcv2: not JSON")


def test_a_contradiction_is_a_named_error_and_nothing_is_written(
    spark: SparkSession, tmp_path: Path
) -> None:
    messages = [
        (updates_message([(("a", 1), 0, 1), (("b", 1), 0, 1)]), 0, "0"),
        (progress_message(0, 3, Counter({0: 1})), 0, "1"),
    ]
    with pytest.raises(CountExceeded, match=r"times \[0\]"):
        run_stream(spark, tmp_path, messages)
    assert not (tmp_path / "lake" / "stream" / "changes" / "_delta_log").exists() or not (
        DeltaTable(str(tmp_path / "lake" / "stream" / "changes")).to_pyarrow_table().num_rows
    )


def test_cdcv2_avro_topics_read_the_materialize_cdc_schema(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Each Kafka value is one Avro message of the Materialize CDC schema in the Confluent
    wire format; kcat dumps hold it as base64."""
    columns = [StructField("name", StringType()), StructField("n", IntegerType())]
    codec = AvroCodec(StructType(columns))

    def avro(message: object) -> str:
        return base64.b64encode(codec.encode(message, schema_id=1)).decode()

    facts = [(("a", 1), 0, 1), (("b", 2), 1, 2), (("a", 1), 2, -1)]
    messages = [
        (avro(Updates(tuple(facts[:2]))), 0, "0"),
        (avro(Progress(TimeFrontier.at(0), TimeFrontier.at(2), ((0, 1), (1, 1)))), 0, "1"),
        (avro(Updates((facts[2],))), 1, "2"),
        (avro(Progress(TimeFrontier.at(2), TimeFrontier.at(9), ((2, 1),))), 2, "3"),
        (base64.b64encode(b"\x00\x00\x00\x00\x01garbage").decode(), 2, "4"),
    ]
    found = run_stream(spark, tmp_path, messages, "cdcv2-avro")
    assert found == Counter({(("a", 1), T0 + WIDTH): 1, (("b", 2), T0 + WIDTH): 2,
                             (("a", 1), T0 + 3 * WIDTH): -1})  # fmt: skip
    errors = DeltaTable(str(tmp_path / "lake" / "stream" / "errors")).to_pyarrow_table()
    [error] = errors.to_pylist()
    assert (error["offset"], error["reason"][:25]) == (4, "cdcv2: undecodable Avro: ")
