"""What a year of one-minute windows costs reclock: the same measures at deployment ages
of 1, 30 and 365 days, each on the history that age leaves behind.

    python -m benchmarks.age --days 1 30 365 [--repeat 2] [--workdir DIR] [--cli] [--warm]
                             [--records 12]

One open-ended upsert source ``users`` (no ``end``, ``1m`` windows, the defaults: tables
and runs kept 30 days, six hours of windows launchable; one Kafka partition, a dump of 12
records a minute, or ``--records``). Per age:

- (a) one scheduled window, as the schedule launches it: a fresh process executes the
  windows' job for that one partition key, assets and checks, on the history's instance
  (``python -m benchmarks.age window``: what the run worker does with the schedule's
  request, without the daemon's launch); with ``--cli``, also once through the command
  line, ``reclock materialize --through <window end>``, which runs the closed windows
  the outputs do not hold yet as one range; with ``--warm``, also attached to a warm
  ``reclock spark-server`` (one server for every age, started before the first;
  SPARK_REMOTE, the config without its master), after one attached run not counted;
- (b) one tick of the ``new_dumps`` sensor, evaluated in this process through Dagster's
  ``build_sensor_context`` on the history's instance (definitions loaded beforehand, as
  the code server holds them): the process's first tick apart from the ticks after it;
  ``python -m benchmarks.age ticks --workdir DIR`` takes the ticks of the ages kept
  there in turn, in one process, so that the machine's load weighs on every age alike;
- (c) ``reclock inspect`` in a fresh process (its Spark session included);
- (d) the UI: a ``dagster-webserver`` on 127.0.0.1 serving the history's instance, timed
  per GraphQL query the asset page sends for ``users/changes``: ``partition status``
  (``partitionStats`` and ``assetPartitionStatuses``, the partition health bar),
  ``asset details`` (the node's definition, latest materialization and its checks'
  latest executions) and ``partition keys`` (``partitionKeysByDimension``, the
  Partitions tab's list), each sent ``--repeat`` times after one warm-up;
- (e) a backfill of the next 60 windows past the outputs' upper: one run over the range
  (the range's run tags, as Dagster launches a backfill of a range as one run), in a
  fresh process like (a);
- (f) ``python -m benchmarks.age first-backfill --workdir DIR [--days 365]``: 600
  records backfilled in one run (``reclock materialize``) by a new source whose ``start``
  lies ``days`` back (every window Dagster lists: the launchable span's), against the
  same records over 10 windows.

Wall and CPU seconds (a process and its descendants, the JVM included, sampled from
/proc) per measure, min and median over ``--repeat``; then each measure's ratio of the
oldest age to the youngest.

How the history of an age is built (and where it departs from a real deployment):

- **Tables, real:** the engine itself materializes the three windows before the history's
  upper (two ``reclock materialize`` runs of a config whose ``start`` is the first of them,
  the dumps landed as they would be), then the config's ``start`` is moved ``days`` back
  (a window boundary; nothing in the tables names ``start``) and ``reclock maintain`` runs
  on it: retire (the dumps archived), since at the retention horizon, compaction, gc,
  checkpoints and trimmed logs, as the daily job leaves them. Departure: the logs hold
  those runs' commits on a checkpoint, not up to a day of per-minute runs', and every age
  has the same few; the topic's earlier records are outside the tables (the source's
  ``start_offsets`` begins at the first real window's offset, as for a topic whose
  older offsets are gone), where a real year would hold them compacted at the since.
- **Dump registry and archive, synthesized:** one dump a minute from ``start`` up to the
  real windows, registered (one file sorted by path, as maintenance rewrites it) and retired
  (the ``retired`` table), each dump file written with its 12 records where ``retire``
  archives it (``<lake>/users/archive/users/``); offsets and timestamps follow the
  minute. Written with delta-rs as registration does, no Spark.
- **CDCv2 exports, synthesized:** a folder per window since ``start`` under
  ``<lake>/users/cdcv2/`` (as the export leaves them; maintenance does not remove them),
  each holding a copy of a real window's two files.
- **Dagster instance, synthesized** (``benchmarks.age_instance``): one finished run per
  window within the retention (those maintenance keeps), each with its window's
  materialization of the source's six assets, written into the storages' tables in bulk
  (a month in about 3 minutes); the real runs above add theirs. Departures: no step, log
  or check events in the synthesized runs; the event log is one SQLite database. Built
  once per length and kept under ``--workdir`` (``instance-<N>d``), then topped up at
  either end (runs of windows before the horizon deleted).
- **Landing zone:** the dumps of the windows still to materialize are landed just before
  the measure that needs them (the schedule's window, the backfill's 60); the outputs'
  upper is left as many windows behind the present as the measures will run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
from collections import defaultdict
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import yaml
from dagster import AssetKey, DagsterInstance, Definitions, build_sensor_context
from deltalake import write_deltalake

from benchmarks.age_instance import MINUTE_MS, instance_settings, write_runs
from benchmarks.open_ended import tree_cpu_seconds
from benchmarks.report_page import Report, add_page_option, figure, publish
from benchmarks.screenshot import graphql, running_webserver
from cdc_core.calendar import PARTITION_FORMAT, duration_ms, to_datetime
from cdc_core.config import DEFAULT_RETENTION
from cdc_core.ingest.registry import FILES_SCHEMA, RETIRED_SCHEMA, Registry, fold_registry
from cdc_core.spark_server import SparkServer, free_port
from resources.run_tags import PARTITION_NAME_TAG

SOURCE = "users"
SPARK_CONF = {"spark.sql.shuffle.partitions": "4"}
DAY_MS = 86_400_000
RECORDS = 12  # per one-minute dump (``--records``)
KEYS = 1_000  # distinct ids the records update
REAL_WINDOWS = 3  # materialized by the engine itself
BACKFILL = 60
ASSETS = ["remap", "reclocked", "changes", "state", "errors", "changes_cdcv2"]
PROJECT_ROOT = Path(__file__).resolve().parents[1]
STATUS_QUERY = """
{
  assetNodes(assetKeys: [{path: ["users", "changes"]}]) {
    partitionStats { numMaterialized numPartitions numFailed numMaterializing }
    assetPartitionStatuses {
      ... on TimePartitionStatuses { ranges { startKey endKey status } }
    }
  }
}
"""
DETAILS_QUERY = """
{
  assetNodeOrError(assetKey: {path: ["users", "changes"]}) {
    ... on AssetNode {
      id description opNames groupName
      partitionDefinition { description type }
      assetMaterializations(limit: 1) { partition runId timestamp }
      assetChecksOrError {
        ... on AssetChecks {
          checks { name executionForLatestMaterialization { status runId } }
        }
      }
    }
  }
}
"""
KEYS_QUERY = """
{
  assetNodeOrError(assetKey: {path: ["users", "changes"]}) {
    ... on AssetNode { partitionKeysByDimension { name partitionKeys } }
  }
}
"""
QUERIES = {"partition status": STATUS_QUERY, "asset details": DETAILS_QUERY,
           "partition keys": KEYS_QUERY}  # fmt: skip


@dataclass
class History:
    """One age's deployment: its folder, config, instance and where its outputs stand."""

    days: int
    root: Path
    start_ms: int
    upper_ms: int  # end of the last materialized window
    records: int = RECORDS  # per one-minute dump
    build_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def config(self) -> Path:
        """The config file."""
        return self.root / "reclock.yaml"

    def attached_config(self) -> Path:
        """The config without its Spark master, for runs attached to a Spark Connect server
        through SPARK_REMOTE (a config naming a master beside it is refused)."""
        settings = yaml.safe_load(self.config.read_text())
        settings["spark"].pop("master", None)
        path = self.root / "reclock-attached.yaml"
        path.write_text(yaml.safe_dump(settings))
        return path

    @property
    def home(self) -> Path:
        """The Dagster instance folder (DAGSTER_HOME)."""
        return self.root / "dagster"

    @property
    def landing(self) -> Path:
        """The source's landing folder."""
        return self.root / "landing" / SOURCE

    def env(self) -> dict[str, str]:
        """The environment of a process run against this history."""
        return {**os.environ, "DAGSTER_HOME": str(self.home), "RECLOCK_CONFIG": str(self.config)}


def floor_minute(ms: int) -> int:
    """``ms`` rounded down to a window boundary."""
    return ms // MINUTE_MS * MINUTE_MS


def iso(ms: int) -> str:
    """An ISO-8601 UTC time as the command line takes it."""
    return to_datetime(ms).strftime("%Y-%m-%dT%H:%M:%SZ")


def window_key(end_ms: int) -> str:
    """The partition key of the window ending at ``end_ms``."""
    return to_datetime(end_ms - MINUTE_MS).strftime(PARTITION_FORMAT)


def write_config(path: Path, start_ms: int, first_offset: int) -> None:
    """The source's config: ``start`` at ``start_ms``, its partition 0 from ``first_offset``."""
    path.write_text(yaml.safe_dump({
        "lake": "lake", "landing": "landing", "window": "1m", "start": iso(start_ms),
        "spark": {"master": "local[2]", "conf": SPARK_CONF},
        "sources": [{"name": SOURCE, "topic": SOURCE, "format": "json",
                     "key": {"id": "bigint"}, "value": {"name": "string"},
                     "envelope": "upsert", "reclock": "event-time",
                     "start_offsets": {"0": first_offset}}],
    }))  # fmt: skip


def ts_step(records: int) -> int:
    """Milliseconds between the Kafka timestamps of a dump's records: all inside its window."""
    return min(4_000, MINUTE_MS // (records + 1))


def dump_text(index: int, window_start_ms: int, records: int = RECORDS) -> str:
    """The dump of one window: ``records`` records of partition 0, offsets
    ``index * records`` on, Kafka timestamps inside the window."""
    lines, step = [], ts_step(records)
    for i in range(records):
        offset = index * records + i
        lines.append(json.dumps({
            "topic": SOURCE, "partition": 0, "offset": offset, "tstype": "create",
            "ts": window_start_ms + step * (i + 1), "broker": 1, "headers": [],
            "key": json.dumps({"id": offset % KEYS}), "payload": json.dumps({"name": f"n{offset}"}),
        }))  # fmt: skip
    return "\n".join(lines) + "\n"


def dump_name(window_start_ms: int) -> str:
    """A dump's file name: its window's start."""
    return to_datetime(window_start_ms).strftime("%Y%m%dT%H%M") + ".json"


def land(history: History, through_end_ms: int) -> None:
    """Land the dump of every window from the outputs' upper to ``through_end_ms``."""
    history.landing.mkdir(parents=True, exist_ok=True)
    for start in range(history.upper_ms, through_end_ms, MINUTE_MS):
        path = history.landing / dump_name(start)
        if not path.exists():
            index = (start - history.start_ms) // MINUTE_MS
            path.write_text(dump_text(index, start, history.records))


# -- measuring processes ---------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """One measurement: wall and CPU seconds, what it printed last, and the seconds of
    each engine phase and Dagster step its log reports."""

    wall: float
    cpu: float
    outcome: str = ""
    phases: dict[str, float] = field(default_factory=dict)


PHASE_DONE = re.compile(r"- \w+: (?P<name>[\w .]+) done in (?P<seconds>[\d.]+) s")
STEP_DONE = re.compile(
    r'Finished execution of step "(?P<name>\w+)" in (?P<seconds>[\d.]+)(?P<unit>m?s)'
)


def logged_phases(lines: Sequence[str]) -> dict[str, float]:
    """Seconds per engine phase (``register dumps``, summed over sources) and per Dagster
    step (``step sources``) in a run's log."""
    phases: dict[str, float] = defaultdict(float)
    for line in lines:
        if found := PHASE_DONE.search(line):
            phases[found["name"]] += float(found["seconds"])
        elif found := STEP_DONE.search(line):
            scale = 1e-3 if found["unit"] == "ms" else 1.0
            phases[f"step {found['name']}"] += float(found["seconds"]) * scale
    return dict(phases)


def run_process(command: Sequence[str], env: dict[str, str], log: Path) -> Sample:
    """Run ``command`` in a fresh process from the project root; its output goes to ``log``."""
    began = time.perf_counter()
    with log.open("w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, text=True,
                                   cwd=PROJECT_ROOT, env=env)  # fmt: skip
        cpu = tree_cpu_seconds(process)
    wall = time.perf_counter() - began
    printed = [line for line in log.read_text().splitlines() if line.strip()]
    runs = [line for line in printed if line.startswith("Materialized")]
    wanted = runs or [line for line in printed if line.startswith(("source ", "window"))]
    outcome = (wanted or printed or [""])[-1][:90]
    if process.returncode != 0:
        outcome = f"exit {process.returncode}: {outcome}"
    return Sample(wall, cpu, outcome, logged_phases(printed))


def in_process(call: Callable[[], Any]) -> Sample:
    """Time a call in this process (wall, and this process's CPU)."""
    began, cpu = time.perf_counter(), time.process_time()
    result = call()
    return Sample(time.perf_counter() - began, time.process_time() - cpu, str(result)[:90])


def cli(*arguments: str) -> list[str]:
    """A ``reclock`` command line."""
    return [sys.executable, "-m", "pipelines.cli", *arguments]


# -- building a history ----------------------------------------------------------------


def build_history(
    base: Path, days: int, now_ms: int, pending: int, log: Callable[[str], None],
    records: int = RECORDS,
) -> History:
    """The deployment ``days`` old at ``now_ms``, its outputs ``pending`` windows behind."""
    root = base / f"{days}d"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    start = floor_minute(now_ms) - days * DAY_MS
    upper = floor_minute(now_ms) - pending * MINUTE_MS
    first_real = upper - REAL_WINDOWS * MINUTE_MS
    history = History(days, root, start, first_real, records)
    first_offset = (first_real - start) // MINUTE_MS * records

    began = time.perf_counter()
    horizon = horizon_ms(history, now_ms)
    runs = instance_for(base, history, horizon, first_real, log)
    history.build_seconds["instance"] = time.perf_counter() - began
    log(f"  instance: {runs} synthesized runs ({history.build_seconds['instance']:.0f} s)")

    began = time.perf_counter()
    write_config(history.config, first_real, first_offset)
    land(history, upper)
    for through in (first_real + 2 * MINUTE_MS, upper):
        sample = run_process(cli("materialize", "--config", str(history.config),
                                 "--through", iso(through)), history.env(),
                             root / "build-materialize.log")  # fmt: skip
        if sample.outcome.startswith("exit") or "FAILED" in sample.outcome:
            raise RuntimeError(f"building {days}d: {sample.outcome} (see {root})")
    history.upper_ms = upper
    write_config(history.config, start, first_offset)
    sample = run_process(cli("maintain", "--config", str(history.config)), history.env(),
                         root / "build-maintain.log")  # fmt: skip
    if sample.outcome.startswith("exit"):
        raise RuntimeError(f"maintaining {days}d: {sample.outcome} (see {root})")
    history.build_seconds["real runs"] = time.perf_counter() - began
    log(f"  real runs and maintenance: {history.build_seconds['real runs']:.0f} s")

    began = time.perf_counter()
    dumps = synthesize_dumps(history, first_real, now_ms)
    exports = synthesize_exports(history, first_real)
    history.build_seconds["dumps, exports"] = time.perf_counter() - began
    log(
        f"  {dumps} dumps registered, retired and archived, {exports} export folders "
        f"({history.build_seconds['dumps, exports']:.0f} s)"
    )
    os.sync()  # the history's writes reach the disk now, not while its measures run
    return history


def horizon_ms(history: History, now_ms: int) -> int:
    """The first window whose runs maintenance keeps at ``now_ms`` (the default
    retention's horizon: the UTC midnight at or before ``now - retention``)."""
    return max(history.start_ms, (now_ms - duration_ms(DEFAULT_RETENTION)) // DAY_MS * DAY_MS)


def instance_for(
    base: Path, history: History, first_start: int, last_end: int, log: Callable[[str], None]
) -> int:
    """Give the history its instance: a run per window from ``first_start`` to
    ``last_end``. The runs are written once per retained length (``instance-<N>d`` under
    the work folder, N the days of runs up to the 30-day retention) and copied; the copy
    is topped up at either end, and runs of windows before ``first_start`` (a kept
    instance from an earlier hour) are deleted, as maintenance deletes them. Returns how
    many runs were written now."""
    kept = base / f"instance-{min(history.days, 30)}d"
    meta = kept / "windows.json"
    assets = [AssetKey([SOURCE, name]) for name in ASSETS]
    first_end = first_start + MINUTE_MS
    written = 0
    if meta.exists() and json.loads(meta.read_text())["first_end"] < first_end - DAY_MS:
        shutil.rmtree(kept)  # more than a day old: rebuild
    if not meta.exists():
        log(f"  writing a kept instance of {min(history.days, 30)} day(s) of runs (once)")
        written, _ = write_runs(kept, assets, first_end, last_end)
        meta.write_text(json.dumps({"first_end": first_end, "last_end": last_end}))
    stored = json.loads(meta.read_text())
    shutil.copytree(kept / "history", history.home / "history")
    instance_settings(history.home)
    if first_end < stored["first_end"]:
        written += write_runs(
            history.home, assets, first_end, stored["first_end"] - MINUTE_MS, in_place=True
        )[0]
    if stored["last_end"] < last_end:
        written += write_runs(
            history.home, assets, stored["last_end"] + MINUTE_MS, last_end, in_place=True
        )[0]
    if stored["first_end"] < first_end:
        first_key = window_key(first_end)
        with DagsterInstance.from_config(str(history.home)) as instance:
            for run in instance.get_runs():
                if run.tags.get(PARTITION_NAME_TAG, first_key) < first_key:
                    instance.delete_run(run.run_id)
    return written


def synthesize_dumps(history: History, first_real: int, now_ms: int) -> int:
    """Register, retire and archive a dump a minute from ``start`` to ``first_real``."""
    n = (first_real - history.start_ms) // MINUTE_MS
    landing = history.root / "landing"
    archive = history.root / "lake" / SOURCE / "archive" / SOURCE
    archive.mkdir(parents=True, exist_ok=True)
    starts = [history.start_ms + i * MINUTE_MS for i in range(n)]
    names = [dump_name(s) for s in starts]
    for i, (start, name) in enumerate(zip(starts, names, strict=True)):
        (archive / name).write_text(dump_text(i, start, history.records))
    size = len(dump_text(0, starts[0], history.records)) if n else 0
    records, step = history.records, ts_step(history.records)
    columns = {
        "path": [str(landing / SOURCE / name) for name in names],
        "size": [size] * n, "mtime_ms": [s + MINUTE_MS + 2_000 for s in starts],
        "arrival_ms": [s + MINUTE_MS + 2_000 for s in starts], "partition": [0] * n,
        "min_offset": [i * records for i in range(n)],
        "max_offset": [i * records + records - 1 for i in range(n)],
        "min_ts": [s + step for s in starts], "max_ts": [s + step * records for s in starts],
        "records": [records] * n, "damaged_lines": [0] * n, "problem": [None] * n,
        "bad_lines": [0] * n,
    }  # fmt: skip
    registry = Registry(history.root / "lake" / SOURCE / "dumps", SOURCE)
    write_deltalake(registry.files_path, pa.table(columns, FILES_SCHEMA), mode="append")
    write_deltalake(registry.retired_path, pa.table({
        "path": columns["path"], "retired_ms": [min(s + DAY_MS, now_ms) for s in starts],
        "archived_to": [str(archive / name) for name in names],
    }, RETIRED_SCHEMA), mode="append")  # fmt: skip
    fold_registry(registry)  # as the daily maintenance leaves it
    return n


def synthesize_exports(history: History, first_real: int) -> int:
    """A CDCv2 export folder per window from ``start`` to ``first_real``, each a copy of
    the first real window's files."""
    exports = history.root / "lake" / SOURCE / "cdcv2"
    model = exports / window_key(first_real + MINUTE_MS)
    files = [(f.name, f.read_bytes()) for f in model.iterdir()] if model.is_dir() else []
    count = 0
    for start in range(history.start_ms, first_real, MINUTE_MS):
        folder = exports / window_key(start + MINUTE_MS)
        folder.mkdir(exist_ok=True)
        for name, content in files:
            (folder / name).write_bytes(content)
        count += 1
    return count


# -- the measures ----------------------------------------------------------------------


def windows_run(
    history: History, windows: int, via_cli: bool = False, remote: str | None = None
) -> Sample:
    """The ``windows`` windows after the outputs' upper, in a fresh process: one run of
    the windows' job as Dagster launches it (one window by its partition key, as the
    schedule asks; more as a range, as a backfill of a range does), or (``via_cli``)
    ``reclock materialize --through`` their last end; ``remote``: attached to that
    Spark Connect server instead of starting Spark in the process."""
    end = history.upper_ms + windows * MINUTE_MS
    land(history, end)
    config, env = history.config, history.env()
    if remote is not None:
        config = history.attached_config()
        env |= {"SPARK_REMOTE": remote, "RECLOCK_CONFIG": str(config)}
    if via_cli:
        command = cli("materialize", "--config", str(config), "--through", iso(end))
    else:
        command = [sys.executable, "-m", "benchmarks.age", "window",
                   "--config", str(config), "--key", window_key(end)]  # fmt: skip
        if windows > 1:
            command += ["--first", window_key(history.upper_ms + MINUTE_MS)]
    kind = "-cli" if via_cli else "-attached" if remote else ""
    sample = run_process(command, env, history.root / f"run-{windows}{kind}.log")
    history.upper_ms = end
    return sample


def inspect(history: History) -> Sample:
    """(c) ``reclock inspect`` in a fresh process."""
    command = cli("inspect", "--config", str(history.config))
    return run_process(command, history.env(), history.root / "inspect.log")


def sensor_ticks(histories: Sequence[History], repeat: int) -> dict[int, list[Sample]]:
    """(b) ``repeat + 1`` sensor ticks per history, taken in turn across ``histories`` in
    this one process (so that the machine's load weighs on every age alike), each on its
    history's instance with its definitions loaded once, as a code server holds them. The
    first tick of each (the code server's first, which reads every registry whole) comes
    first in its list."""
    from cdc_core.config import load_config
    from pipelines.build import build_definitions
    from resources.lake import LakeResource

    loaded = []
    for history in histories:
        config = load_config(history.config)
        definitions = build_definitions(config)
        lake = LakeResource(root=str(config.lake), landing=str(config.landing))
        loaded.append((history, definitions, {"lake": lake}))
    samples: dict[int, list[Sample]] = {history.days: [] for history in histories}
    cursors: dict[int, str | None] = dict.fromkeys(samples)
    for _ in range(repeat + 1):
        for history, definitions, resources in loaded:
            os.environ["DAGSTER_HOME"] = str(history.home)
            with DagsterInstance.from_config(str(history.home)) as instance:
                sample, cursors[history.days] = sensor_tick(
                    definitions, instance, cursors[history.days], resources
                )
            samples[history.days].append(sample)
    return samples


def sensor_tick(
    definitions: Definitions,
    instance: DagsterInstance,
    cursor: str | None,
    resources: dict[str, Any],
) -> tuple[Sample, str | None]:
    """One evaluation of the ``new_dumps`` sensor of ``definitions``, as a code server
    evaluates a tick (``build_sensor_context``, the sensor's own definition and
    ``resources``): its wall and CPU seconds in this process, and the cursor it leaves."""
    context = build_sensor_context(
        instance=instance, cursor=cursor, resources=resources,
        repository_def=definitions.get_repository_def(),
    )  # fmt: skip
    began, cpu = time.perf_counter(), time.process_time()
    result = definitions.resolve_sensor_def("new_dumps").evaluate_tick(context)
    sample = Sample(
        time.perf_counter() - began, time.process_time() - cpu,
        f"{len(result.run_requests or [])} request(s)",
    )  # fmt: skip
    return sample, result.cursor


def tick_measures(samples: list[Sample]) -> dict[str, list[Sample]]:
    """A history's ticks as two measures: the process's first tick, and the ticks after."""
    return {"(b) sensor tick, first": samples[:1], "(b) sensor tick, later": samples[1:]}


def ui_queries(history: History, repeat: int) -> dict[str, list[Sample]]:
    """(d) the asset page's GraphQL queries against a webserver on the history."""
    samples: dict[str, list[Sample]] = {name: [] for name in QUERIES}
    with running_webserver(history.config, history.home, timeout_s=300) as base_url:
        for name, query in QUERIES.items():
            for attempt in range(repeat + 1):
                began = time.perf_counter()
                try:
                    data = graphql(base_url, query, timeout_s=600)
                    outcome = _describe(data)
                except (OSError, RuntimeError, urllib.error.URLError) as failure:
                    outcome = f"failed: {failure}"[:90]
                if attempt:  # the first is a warm-up
                    samples[name].append(Sample(time.perf_counter() - began, 0.0, outcome))
    return samples


def _describe(data: Any) -> str:
    """A short account of a GraphQL answer (partition counts)."""
    text = json.dumps(data)
    if "numPartitions" in text:
        stats = data["assetNodes"][0]["partitionStats"]
        return f"{stats['numMaterialized']} of {stats['numPartitions']} materialized"
    if "partitionKeys" in text:
        dimensions = data["assetNodeOrError"]["partitionKeysByDimension"]
        return f"{len(dimensions[0]['partitionKeys'])} keys"
    return f"{len(text)} bytes"


def first_backfill(base: Path, days: int, windows: int | None, now_ms: int) -> Sample:
    """(f) a new source's first backfill of 600 records spread from its ``start`` on: over
    every window Dagster lists for a ``start`` ``days`` back (``windows`` None; records
    older than the first of them bind at it), or over ``windows`` windows."""
    root = base / f"first-{days}d-{windows or 'all'}"
    shutil.rmtree(root, ignore_errors=True)
    (root / "landing" / SOURCE).mkdir(parents=True)
    end = floor_minute(now_ms)
    start = end - (windows * MINUTE_MS if windows else days * DAY_MS)
    history = History(days, root, start, start)
    write_config(history.config, start, 0)
    instance_settings(history.home)
    for part in range(50):  # 600 records in 50 dumps spread over the source's history
        at = start + (end - start) * part // 50
        text = dump_text(part, floor_minute(at))
        (history.landing / f"{part:03d}.json").write_text(text)
    command = cli("materialize", "--config", str(history.config), "--through", iso(end))
    return run_process(command, history.env(), root / "first-backfill.log")


def first_backfills(base: Path, days: int, repeat: int) -> int:
    """(f) in turn ``repeat`` times: the first backfill of a source whose ``start`` lies
    ``days`` back, and of the same records over 10 windows; their ratio (min over
    repeats)."""
    base.mkdir(parents=True, exist_ok=True)
    samples: dict[int | None, list[Sample]] = {None: [], 10: []}
    print(f"== (f) first backfill of {RECORDS * 50} records       wall      CPU")
    for _ in range(repeat):
        for windows, kept in samples.items():
            sample = first_backfill(base, days, windows, int(time.time() * 1000))
            kept.append(sample)
            label = f"start {days}d back" if windows is None else f"over {windows} windows"
            print(f"{label:<36} {sample.wall:7.2f}  {sample.cpu:7.2f}  {sample.outcome}")
    year, ten = (min(s.wall for s in samples[w]) for w in (None, 10))
    print(f"{days}d back / 10 windows (min wall): {year / ten:.2f}")
    return 0


# -- report ----------------------------------------------------------------------------


def summary(samples: Sequence[Sample], cpu: bool = True) -> str:
    """min / median wall (and CPU) of a measure's samples."""
    walls = [s.wall for s in samples]
    text = f"{min(walls):7.2f} {statistics.median(walls):7.2f}"
    if cpu:
        cpus = [s.cpu for s in samples]
        text += f"  {min(cpus):7.2f} {statistics.median(cpus):7.2f}"
    return text


def measure(
    history: History,
    repeat: int,
    log: Callable[[str], None],
    cli_runs: bool = False,
    warm: str | None = None,
) -> dict[str, list[Sample]]:
    """Every measure of one age, in an order that lets each find what it needs;
    ``cli_runs``: also one window through ``reclock materialize --through`` (once);
    ``warm``: also (a) attached to that Spark Connect server, after one attached run
    not counted (the server's first queries for this age's tables)."""
    results: dict[str, list[Sample]] = {}
    results.update(tick_measures(sensor_ticks([history], repeat)[history.days]))
    log("  (b) done")
    results["(c) reclock inspect"] = [inspect(history) for _ in range(repeat)]
    log("  (c) done")
    for name, samples in ui_queries(history, repeat).items():
        results[f"(d) UI {name}"] = samples
    log("  (d) done")
    results["(a) scheduled window"] = [windows_run(history, 1) for _ in range(repeat)]
    log("  (a) done")
    if warm is not None:
        windows_run(history, 1, remote=warm)
        results["(a) scheduled window, warm Spark"] = [
            windows_run(history, 1, remote=warm) for _ in range(repeat)
        ]
        log("  (a) attached to a warm Spark done")
    results[f"(e) backfill {BACKFILL} windows"] = [
        windows_run(history, BACKFILL) for _ in range(repeat)
    ]
    log("  (e) done")
    if cli_runs:
        results["(a) reclock materialize --through"] = [windows_run(history, 1, via_cli=True)]
        log("  (a) through the command line done")
    return results


def print_table(history: History, results: dict[str, list[Sample]]) -> None:
    """One age's table."""
    print(
        f"\n== {history.days} day(s): start {iso(history.start_ms)}; built in "
        + ", ".join(f"{k} {v:.0f} s" for k, v in history.build_seconds.items())
    )
    print(f"{'measure':<36} {'wall min':>7} {'median':>7}  {'CPU min':>7} {'median':>7}  last")
    for name, samples in results.items():
        in_ui = name.startswith("(d)")
        figures = summary(samples, cpu=not in_ui)
        print(f"{name:<36} {figures:<34}  {samples[-1].outcome}")
    for name, samples in results.items():
        if name.startswith("(a)") and samples[0].phases:
            print_phases(name, samples)
    sys.stdout.flush()


def print_phases(name: str, samples: Sequence[Sample]) -> None:
    """Median and max seconds of each phase and step over a measure's samples."""
    print(f"\n  {name}, by phase ({len(samples)} samples)")
    print(f"  {'phase':<34} {'median':>7} {'max':>7}")
    for phase_name in samples[0].phases:
        seconds = [s.phases.get(phase_name, 0.0) for s in samples]
        print(f"  {phase_name:<34} {statistics.median(seconds):7.2f} {max(seconds):7.2f}")


def save_results(base: Path, days: int, results: dict[str, list[Sample]]) -> None:
    """Keep an age's samples in ``<workdir>/results.json`` (the last measurement of each
    age), so that ratios can span invocations."""
    path = base / "results.json"
    stored = json.loads(path.read_text()) if path.exists() else {}
    stored[str(days)] = {
        "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "samples": {k: [[s.wall, s.cpu, s.outcome] for s in v] for k, v in results.items()},
    }
    path.write_text(json.dumps(stored, indent=1))


def load_results(base: Path) -> dict[int, dict[str, list[Sample]]]:
    """Every age's kept samples."""
    path = base / "results.json"
    if not path.exists():
        return {}
    return {
        int(days): {k: [Sample(*s) for s in v] for k, v in age["samples"].items()}
        for days, age in json.loads(path.read_text()).items()
    }


def print_ratios(ages: dict[int, dict[str, list[Sample]]]) -> None:
    """Each measure at the oldest age over the youngest (min wall, min CPU)."""
    young, old = min(ages), max(ages)
    if young == old:
        return
    print(f"\n== {old}d / {young}d (min over repeats)")
    print(f"{'measure':<36} {'wall':>6} {'CPU':>6}")
    for name, samples in ages[old].items():
        base = ages[young].get(name)
        if not base:
            continue
        wall = min(s.wall for s in samples) / min(s.wall for s in base)
        cpu_base = min(s.cpu for s in base)
        cpu = min(s.cpu for s in samples) / cpu_base if cpu_base else float("nan")
        print(f"{name:<36} {wall:6.2f} {cpu:6.2f}")


def report_body(ages: dict[int, dict[str, list[Sample]]]) -> str:
    """The report page's table: each measure's min wall (and CPU) seconds per age, and
    its ratio of the oldest age to the youngest."""
    days = sorted(ages)
    lines = [
        "Min over repeats, wall / CPU seconds (the UI queries: wall seconds of the "
        "webserver's answer).",
        "",
        "| measure | " + " | ".join(f"{d} day(s)" for d in days) + f" | {days[-1]}d / {days[0]}d |",
        "|---|" + "---|" * (len(days) + 1),
    ]
    for name in ages[days[0]]:
        cells, walls = [], []
        for d in days:
            samples = ages[d].get(name)
            walls.append(min(s.wall for s in samples) if samples else None)
            cpu = "" if not samples or name.startswith("(d)") else \
                f" / {min(s.cpu for s in samples):.2f}"
            cells.append(f"{walls[-1]:.2f}{cpu}" if samples else "")
        ratio = f"{walls[-1] / walls[0]:.2f}" if walls[0] and walls[-1] else ""
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {ratio} |")
    return "\n".join(lines)


def report_figures(ages: dict[int, dict[str, list[Sample]]]) -> dict:
    """Each measure's min wall seconds against the deployment's age, and the same as a
    ratio to the youngest age (flat at 1 when age costs nothing)."""
    days = sorted(ages)
    drawn, (seconds, ratios) = figure(rows=2)
    for name in ages[days[0]]:
        kept = [d for d in days if ages[d].get(name)]
        walls = [min(s.wall for s in ages[d][name]) for d in kept]
        seconds.plot(kept, walls, marker="o", label=name)
        if walls[0]:
            ratios.plot(kept, [w / walls[0] for w in walls], marker="o", label=name)
    for axes in (seconds, ratios):
        axes.set_xscale("log")
        axes.set_xticks(days, [f"{d}d" for d in days])
        axes.set_xlabel("deployment age")
    seconds.set_yscale("log")
    seconds.set_ylabel("min wall seconds")
    seconds.set_title("cost against deployment age")
    ratios.set_ylabel(f"x the {days[0]}-day figure")
    ratios.axhline(1.0, color="0.6", linewidth=0.8)
    ratios.set_ylim(0, max(2.0, *(max(line.get_ydata()) * 1.1 for line in ratios.lines)))
    ratios.legend(fontsize=7, ncols=2)
    return {"age": drawn}


def page_report(ages: dict[int, dict[str, list[Sample]]]) -> Report:
    """The report page of the ages measured."""
    return Report("age", "The cost of age", report_body(ages), report_figures(ages))


def run_window(config_file: Path, key: str, first: str | None) -> int:
    """What a run worker does for a run Dagster launches: the windows' job, assets and
    checks, on the instance of DAGSTER_HOME, for one partition key (the schedule's
    request) or for the range ``first .. key`` (a backfill of a range as one run)."""
    from assets.partitions import range_tags
    from cdc_core.config import load_config
    from pipelines.build import ALL_WINDOWS_JOB, build_definitions

    config = load_config(config_file)
    job = build_definitions(config).resolve_job_def(ALL_WINDOWS_JOB)
    with DagsterInstance.get() as instance:
        result = job.execute_in_process(
            instance=instance, raise_on_error=False,
            partition_key=key if first is None else None,
            tags={"dagster/schedule_name": "latest_closed_window"} if first is None
            else range_tags(first, key),
        )  # fmt: skip
    print(f"window {first or key} .. {key}: {'success' if result.success else 'FAILED'}")
    return 0 if result.success else 1


def arguments() -> argparse.ArgumentParser:
    """The command's options and its subcommands."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command")
    window = commands.add_parser("window", help="one partition's run (used by the benchmark)")
    window.add_argument("--config", type=Path, required=True)
    window.add_argument("--key", required=True, help="the (last) window's partition key")
    window.add_argument("--first", help="the first window's key, for a range")
    ticks = commands.add_parser(
        "ticks", help="(b) alone, the ages' ticks taken in turn, on histories kept in --workdir"
    )
    ticks.add_argument("--workdir", type=Path, required=True)
    ticks.add_argument("--days", type=int, nargs="+", default=[1, 365])
    ticks.add_argument("--repeat", type=int, default=30)
    first = commands.add_parser("first-backfill", help="(f): a new source's first backfill")
    first.add_argument("--workdir", type=Path, required=True)
    first.add_argument("--days", type=int, default=365, help="how far back its start lies")
    first.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--days", type=int, nargs="+", default=[1, 30, 365])
    parser.add_argument("--repeat", type=int, default=2, help="samples per measure")
    parser.add_argument(
        "--records", type=int, default=RECORDS, help="per one-minute dump (default %(default)s)"
    )
    parser.add_argument(
        "--cli",
        action="store_true",
        help="also one window through reclock materialize --through (runs every window listed)",
    )
    parser.add_argument(
        "--warm",
        action="store_true",
        help="also (a) attached to a warm reclock spark-server (one for every age)",
    )
    parser.add_argument(
        "--workdir", type=Path, help="histories and kept instances (default: a temporary folder)"
    )
    add_page_option(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Build each age's history, measure it, print the tables and the ratios."""
    args = arguments().parse_args(argv)
    if args.command == "window":
        return run_window(args.config, args.key, args.first)
    if args.command == "ticks":
        kept = [History(days, args.workdir / f"{days}d", 0, 0) for days in args.days]
        by_age = {days: tick_measures(samples)
                  for days, samples in sensor_ticks(kept, args.repeat).items()}  # fmt: skip
        for days, measures in by_age.items():
            for name, samples in measures.items():
                print(f"{days:>4}d {name:<28} {summary(samples)}")
        print_ratios(by_age)
        return 0
    if args.command == "first-backfill":
        return first_backfills(args.workdir, args.days, args.repeat)
    base = args.workdir or Path(tempfile.mkdtemp(prefix="reclock-age-"))
    base.mkdir(parents=True, exist_ok=True)

    def log(text: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)

    pending = (1 + BACKFILL) * args.repeat + 3 + (args.repeat + 1 if args.warm else 0)
    ages: dict[int, dict[str, list[Sample]]] = {}
    with ExitStack() as stack:
        warm = None
        if args.warm:
            server = SparkServer(free_port(), master="local[2]", conf=SPARK_CONF,
                                 log=base / "spark-server.log")  # fmt: skip
            warm = stack.enter_context(server).address
        for days in args.days:
            log(f"{days} day(s): building")
            now_ms = int(time.time() * 1000)
            history = build_history(base, days, now_ms, pending, log, args.records)
            ages[days] = measure(history, args.repeat, log, args.cli, warm)
            print_table(history, ages[days])
            save_results(base, days, ages[days])
    print_ratios(ages)
    if len(ages) > 1:
        publish(args.page, "benchmarks.age", argv, page_report(ages))
    kept = load_results(base)
    if args.workdir is not None and set(kept) != set(ages):
        print(f"\n(ratios over every age kept in {base / 'results.json'})")
        print_ratios(kept)
    if args.workdir is None:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
