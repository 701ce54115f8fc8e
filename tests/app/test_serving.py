"""Sources served together: each on its own, a transaction group's members in turn, every
source reported once, a failure as that source's alone. Work stands in for a source's
run (no Spark job), so what is asserted is the serving itself."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from cdc_core.app.materialize import serve_together, serving_units
from cdc_core.config import Config, parse_config

SOURCES = ["a", "orders", "b", "lines", "c", "d"]
GROUP = {"orders", "lines"}


def deployment() -> Config:
    def source(name: str) -> dict:
        envelope = "debezium-upsert" if name in GROUP else "upsert"
        value = {"id": "bigint", "v": "string"} if name in GROUP else {"v": "string"}
        return {"name": name, "topic": name, "key": {"id": "bigint"}, "value": value,
                "envelope": envelope, "reclock": "event-time"}  # fmt: skip

    return parse_config(
        {"lake": "lake", "landing": "landing", "window": "1m", "start": "2026-01-01T00:00:00Z",
         "sources": [source(name) for name in SOURCES],
         "transactions": [{"name": "shop", "topic": "shop.tx",
                           "sources": {"orders": "public.orders", "lines": "public.lines"}}]},
        Path("/deployment"),
    )  # fmt: skip


class Recorder:
    """Work that sleeps a little and records who ran at once, and in which thread."""

    def __init__(self, failing_open: str, failing_serve: str) -> None:
        self.lock = threading.Lock()
        self.running: set[str] = set()
        self.overlaps: list[set[str]] = []
        self.threads: set[str] = set()
        self.failing_open, self.failing_serve = failing_open, failing_serve

    def open(self, name: str) -> Work:
        if name == self.failing_open:
            raise RuntimeError(f"cannot open {name}")
        return Work(self, name)


class Work:
    def __init__(self, recorder: Recorder, name: str) -> None:
        self.recorder, self.name = recorder, name

    def input_bytes(self) -> int:
        return 1

    def serve(self) -> str:
        recorder = self.recorder
        with recorder.lock:
            recorder.running.add(self.name)
            recorder.overlaps.append(set(recorder.running))
            recorder.threads.add(threading.current_thread().name)
        time.sleep(0.2)
        with recorder.lock:
            recorder.running.discard(self.name)
        if self.name == recorder.failing_serve:
            raise ValueError(f"{self.name} broke")
        return f"served {self.name}"


def test_a_groups_members_are_one_unit_in_config_order() -> None:
    assert serving_units(deployment(), ["d", "lines", "a", "orders"]) == [
        ["a"], ["orders", "lines"], ["d"]
    ]


def test_sources_are_served_at_once_each_on_its_own(spark: SparkSession) -> None:
    recorder = Recorder(failing_open="b", failing_serve="c")
    idle_threads: set[str] = set()
    served = list(serve_together(
        spark, deployment(), SOURCES, recorder.open,
        idle=lambda: idle_threads.add(threading.current_thread().name), workers=3,
    ))  # fmt: skip

    results = {s.source: s.result for s in served if s.failure is None}
    failures = {s.source: str(s.failure) for s in served if s.failure is not None}
    assert results == {name: f"served {name}" for name in ("a", "orders", "lines", "d")}
    assert failures == {"b": "cannot open b", "c": "c broke"}
    assert len(served) == len(SOURCES)  # every source once
    # Several at once, never two members of one group, and never beyond the workers.
    assert max(len(running) for running in recorder.overlaps) > 1
    assert all(len(running & GROUP) <= 1 and len(running) <= 3 for running in recorder.overlaps)
    assert threading.current_thread().name not in recorder.threads
    assert idle_threads == {threading.current_thread().name}


def test_a_failure_of_every_source_is_reported_not_raised(spark: SparkSession) -> None:
    config = deployment()

    def cannot_open(name: str) -> Work:
        raise OSError(f"{name}: store unreachable")

    served = list(serve_together(spark, config, ["a", "b"], cannot_open, idle=lambda: None))
    assert [(s.source, str(s.failure)) for s in served] == [
        ("a", "a: store unreachable"), ("b", "b: store unreachable")
    ]


@pytest.mark.parametrize("names", [[], ["nobody"]])
def test_nothing_selected_serves_nothing(spark: SparkSession, names: list[str]) -> None:
    def never(name: str) -> Work:
        raise AssertionError("opened")

    assert list(serve_together(spark, deployment(), names, never, idle=lambda: None)) == []
