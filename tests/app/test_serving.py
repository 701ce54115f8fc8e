"""Sources served together: each on its own, a transaction group's members in turn, every
source reported once, a failure as that source's alone. Work stands in for a source's
run (no Spark job), so what is asserted is the serving itself; the sources' registration
together, before they are served, runs on the bundled sample's real dumps."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from cdc_core.app.materialize import (
    LandedDumps,
    ListedLanding,
    RegisteredAhead,
    Served,
    serve_together,
    serving_units,
)
from cdc_core.config import Config, load_config, parse_config
from cdc_core.ingest import DumpFileChanged, list_dump_files, registering
from cdc_core.ingest.dumps import DumpFile
from cdc_core.ingest.registry import Registry
from cdc_core.phases import ALL_SOURCES, PhaseEvent, observing
from cdc_core.source import SourcePipeline
from pipelines.sample import write_sample

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

    def input_bytes(self, listed: ListedLanding) -> int:
        return 1

    def landed_dumps(self) -> list:
        return []

    def registered_ahead(self, registered: RegisteredAhead) -> None:
        pass

    def binding(self) -> None:
        return None

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


def test_a_finishing_stage_sees_every_source_once_all_are_served(spark: SparkSession) -> None:
    """``finish`` runs once, after the last source is served, with every source as
    served (failures too; one that could not be opened is yielded at once), off the
    calling thread; what it returns is what is yielded."""
    recorder = Recorder(failing_open="b", failing_serve="c")
    seen: list[tuple[list[str], bool, str]] = []

    def finish(served: list[Served[str]]) -> list[Served[str]]:
        seen.append(([s.source for s in served], not recorder.running,
                     threading.current_thread().name))  # fmt: skip
        return [Served(s.source, result=f"{s.result} and finished") if s.result else s
                for s in served]  # fmt: skip

    served = list(serve_together(spark, deployment(), SOURCES, recorder.open,
                                 idle=lambda: None, finish=finish))  # fmt: skip

    ((names, all_done, thread),) = seen
    assert sorted(names) == sorted(set(SOURCES) - {"b"}) and all_done
    assert thread != threading.current_thread().name
    assert {s.source: s.result for s in served if s.failure is None} == {
        name: f"served {name} and finished" for name in ("a", "orders", "lines", "d")}  # fmt: skip
    assert {s.source for s in served if s.failure is not None} == {"b", "c"}


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


class Registering:
    """A source's part of a run that only registers its dumps: real registries, a real
    scan, and the source's own registration as its serving."""

    def __init__(self, pipeline: SourcePipeline, now_ms: int) -> None:
        self.pipeline, self.now_ms = pipeline, now_ms

    def input_bytes(self, listed: ListedLanding) -> int:
        return self.pipeline.input_bytes(listed)

    def landed_dumps(self) -> list[LandedDumps]:
        return self.pipeline.landed_dumps(self.now_ms)

    def registered_ahead(self, registered: RegisteredAhead) -> None:
        self.pipeline.registered_ahead(registered)

    def binding(self) -> None:
        return None

    def serve(self) -> int:
        return self.pipeline.register_dumps(self.now_ms)


def test_a_runs_new_dumps_are_registered_together_and_a_refusal_stays_its_sources(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every registry of the run (each source's, and the transaction topic's once) is
    registered before any source is served, so no source finds a new dump of its own,
    and no source reads a registry so registered again (a group's members would each
    read every registry of the group); a source whose registered dump changed fails
    alone, and the others are registered."""
    asked: Counter[str] = Counter()  # registry -> times asked for its new files
    new_files = Registry.new_files

    def counted(registry: Registry, files: Iterable[DumpFile]) -> list[DumpFile]:
        asked[registry.files_path] += 1
        return new_files(registry, files)

    monkeypatch.setattr(Registry, "new_files", counted)
    config = load_config(write_sample(tmp_path))
    now = config.start_ms + 100 * config.window_ms
    broken = config.source("clicks")
    SourcePipeline.from_config(spark, config, broken).register_dumps(now)
    rewritten = list_dump_files(config.landing, broken.topic)[0].path
    with open(rewritten, "a") as dump:
        dump.write("\n")
    topics = [s.topic for s in config.sources if s is not broken]
    topics += [group.topic for group in config.transactions]
    landed = {topic: {d.path for d in list_dump_files(config.landing, topic)} for topic in topics}
    events: list[PhaseEvent] = []

    with observing(events.append):
        served = list(serve_together(
            spark, config, [s.name for s in config.sources],
            lambda name: Registering(SourcePipeline.from_config(
                spark, config, config.source(name)), now),
            idle=lambda: None,
        ))  # fmt: skip

    together = [e for e in events if e.ended and e.source == ALL_SOURCES]
    assert [(e.name, e.figures) for e in together] == [
        ("register dumps", {"files": sum(len(paths) for paths in landed.values())})
    ]
    failures = {s.source: s.failure for s in served if s.failure is not None}
    assert list(failures) == ["clicks"] and isinstance(failures["clicks"], DumpFileChanged)
    assert {s.source: s.result for s in served if s.failure is None} == {
        s.name: 0 for s in config.sources if s is not broken
    }
    for source in config.sources:
        if source is not broken:
            registry = SourcePipeline.from_config(spark, config, source).registry
            assert {f.path for f in registry.files()} == landed[source.topic]
    # Once each, at the run's registration (and first, alone, the broken source's), and
    # again only where that failed: the broken source's, as it is served.
    clicks = SourcePipeline.from_config(spark, config, broken).registry.files_path
    assert asked == {path: 3 if path == clicks else 1 for path in asked}
    assert len(asked) == len(config.sources) + len(config.transactions)


def test_a_runs_sources_list_each_topic_once_and_count_each_registrys_bytes_once(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A transaction group's members each register every registry of their group: sized
    for one run, the topics are listed once for them all, and each registry's new dumps
    count once, for the first member sized, as much as that member counts alone; and a
    member registers its own dumps once (its registry is also one of its group's)."""
    config = load_config(write_sample(tmp_path))
    group = config.transactions[0]
    topics = [config.source(name).topic for name in group.sources] + [group.topic]
    landed = sum(d.size for topic in topics for d in list_dump_files(config.landing, topic))
    listings: Counter[str] = Counter()
    list_topic = registering.list_dump_files

    def counted(landing: Path, topic: str) -> list[DumpFile]:
        listings[topic] += 1
        return list_topic(landing, topic)

    monkeypatch.setattr(registering, "list_dump_files", counted)
    first, second = (SourcePipeline.from_config(spark, config, config.source(name))
                     for name in group.sources)  # fmt: skip
    listed = ListedLanding()
    assert (first.input_bytes(listed), second.input_bytes(listed)) == (landed, 0)
    assert listings == {topic: 1 for topic in topics}
    assert second.input_bytes() == landed  # alone, it counts and lists all of its own
    assert listings == {topic: 2 for topic in topics}
    # Its own registry is one of its group's: it registers its own dumps once, not twice.
    second.register_dumps(config.start_ms + 100 * config.window_ms)
    commits = DeltaTable(second.registry.files_path).history()
    assert [c.get("reclock.operation") for c in commits].count("register") == 1
