"""What a window costs as a deployment's sources add up: N topics, one window a minute.

    python -m benchmarks.sources [--sources 1 16 64 200] [--variants upsert debezium]
                                 [--modes own attached] [--backfill-windows 60]
                                 [--quick] [--workdir DIR] [--page DIR]

Three variants, each on a fresh lake per N (``--sources``):

- ``upsert``: N upsert sources, one topic each, 4 Kafka partitions, JSON dumps in the
  local landing zone (kcat ``-J`` lines, one file per topic and window): 200 records per
  topic over the first 10 windows, then 20 records per topic in each later window;
- ``upsert-held``: the same records held in one source: one upsert topic that gets, each
  window, the records (and keys) of N topics of ``upsert`` (the peer a deployment of
  many sources is held against);
- ``debezium``: N ``debezium-upsert`` tables of one Postgres database, all members of one
  transaction group with the connector's transaction topic (BEGIN and END records):
  every transaction writes one row in each of 4 tables (in every table when N < 4), and
  every table gets 20 change events a window, as above.

For each variant and N, with ``--modes`` ``own`` (a run process that starts its own JVM)
and ``attached`` (a run process attached to a warm ``reclock spark-server``, one server
for the whole benchmark):

1. the first 10 windows in one ``reclock materialize --through`` run (attached when that
   mode is measured: the server has then run these tables' queries before it is timed);
2. the next window's dumps land; the definitions load in this process (the config, the
   definitions, the windows' job), and the ``new_dumps`` sensor ticks twice, evaluated as
   a code server evaluates it (``build_sensor_context``, the sensor's definition, the
   lake resource): its first tick, then one after it;
3. one scheduled window per mode: ``reclock materialize --through <its end>`` in a fresh
   process, checks and CDCv2 export included (a window of its own for each mode);
4. a backfill per mode: ``--backfill-windows`` windows land, then one ``reclock
   materialize --through`` their last end.

Every measure reports its wall and CPU seconds (a run: its process and its JVM; attached,
the server's CPU is not counted), its Spark jobs (a run's event log; attached, the
server's, counted before and after), its Delta commits (``_delta_log/*.json`` files new
under the lake), each also per window, and the machine's 1-minute load average as it
began. A table is printed after each N; the figures, the command and the machine go to
``<workdir>/sources-<UTC time>.json``, and with ``--page DIR`` a report page with plots
when every case is done; ``--redraw FILE --page DIR`` draws the page of such a file (the
cases done so far, should a run be cut short). Every window is one minute long and closed before
the first run: the config's ``start`` lies back far enough for all of them, within the
span Dagster lists (6 hours by default), so one N's measures must end within about 3.5
hours of its start.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import shutil
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import yaml
from dagster import DagsterInstance

from benchmarks.age import (
    Sample,
    cli,
    dump_name,
    floor_minute,
    iso,
    print_phases,
    run_process,
    sensor_tick,
)
from benchmarks.age_instance import MINUTE_MS
from benchmarks.report_page import (
    Provenance,
    Report,
    add_page_option,
    figure,
    line_chart,
    machine,
    publish,
    table,
    write_page,
)
from cdc_core.config import load_config
from cdc_core.spark_server import SparkServer, free_port
from pipelines.build import ALL_WINDOWS_JOB, build_definitions
from pipelines.sample import (
    UPSERT_KEY_SCHEMA,
    UPSERT_VALUE_SCHEMA,
    Message,
    Record,
    debezium_message,
    dump_line,
    key_partition,
    pg_source,
    transaction_block,
    transaction_records,
    upsert_messages,
)
from resources.lake import LakeResource

VARIANTS = ("upsert", "upsert-held", "debezium")
MODES = ("own", "attached")
SOURCES = (1, 16, 64, 200)
QUICK_SOURCES = (1, 4)
BACKFILL_WINDOWS = 60
FIRST_WINDOWS = 10
RECORDS = 20  # per topic and window
PARTITIONS = 4
KEYS = 100  # per topic
DELETES = 0.05  # of an upsert topic's records
TABLES_PER_TRANSACTION = 4
GROUP = "db"
TRANSACTION_TOPIC = "db.transaction"
TABLE_VALUE = {"id": "bigint", "version": "bigint"}
SPARK_CONF = {"spark.sql.shuffle.partitions": "4"}
EVENT_LOG = {
    "spark.eventLog.enabled": "true",
    "spark.eventLog.compress": "false",
    "spark.eventLog.rolling.enabled": "false",
}
JOB_START = b'"Event":"SparkListenerJobStart"'


# -- the workload ----------------------------------------------------------------------


class Topic:
    """One topic's dump files, a file per window, its offsets going on per partition."""

    def __init__(self, landing: Path, name: str) -> None:
        self.folder = landing / name
        self.name_json = json.dumps(name)
        self.next_offset: dict[int, int] = defaultdict(int)

    def write(self, window_start_ms: int, messages: Iterable[Message]) -> None:
        """The window's dump: ``messages`` at the partitions' next offsets."""
        lines = []
        for message in messages:
            offset = self.next_offset[message.partition]
            self.next_offset[message.partition] = offset + 1
            record = Record(message.partition, offset, message.ts, message.key, message.payload)
            lines.append(dump_line(self.name_json, record))
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / dump_name(window_start_ms)).write_text("".join(lines))


class Upserts:
    """N upsert topics, each written by a producer of its own (seeded by topic and window);
    ``held_in_one``: one topic that carries the records and keys of N."""

    def __init__(self, landing: Path, n: int, *, held_in_one: bool = False) -> None:
        self.topics = [Topic(landing, f"events_{i:03d}") for i in range(1 if held_in_one else n)]
        self.scale = n if held_in_one else 1

    def sources(self) -> list[dict[str, object]]:
        """The config's sources."""
        return [
            {"name": t.folder.name, "topic": t.folder.name, "format": "json",
             "key": UPSERT_KEY_SCHEMA, "value": UPSERT_VALUE_SCHEMA, "envelope": "upsert",
             "reclock": "event-time"}
            for t in self.topics
        ]  # fmt: skip

    def transactions(self) -> list[dict[str, object]]:
        """No transaction group."""
        return []

    def land(self, window_start_ms: int, records: int) -> None:
        """``records`` records per topic in the window."""
        for topic in self.topics:
            rng = random.Random(f"{topic.folder.name}:{window_start_ms}")
            topic.write(window_start_ms, upsert_messages(
                rng, records=records * self.scale, keys=KEYS * self.scale, partitions=PARTITIONS,
                start_ms=window_start_ms, span_ms=MINUTE_MS, delete_fraction=DELETES,
            ))  # fmt: skip


class Database:
    """N tables of one Postgres database through Debezium, and the connector's transaction
    topic: each transaction creates or updates one row in each of its tables."""

    def __init__(self, landing: Path, n: int) -> None:
        self.tables = [Topic(landing, f"table_{i:03d}") for i in range(n)]
        self.transaction_topic = Topic(landing, TRANSACTION_TOPIC)
        self.rows: dict[str, dict[int, dict[str, object]]] = defaultdict(dict)
        self.writes: dict[str, int] = defaultdict(int)
        self.lsn = 24_000_000
        self.tx_id = 700

    @property
    def collections(self) -> dict[str, str]:
        """Each member source's data collection, as the connector names its table."""
        return {t.folder.name: f"public.{t.folder.name}" for t in self.tables}

    def sources(self) -> list[dict[str, object]]:
        """The config's sources."""
        return [
            {"name": t.folder.name, "topic": t.folder.name, "format": "json",
             "key": {"id": "bigint"}, "value": TABLE_VALUE, "envelope": "debezium-upsert",
             "reclock": "event-time"}
            for t in self.tables
        ]  # fmt: skip

    def transactions(self) -> list[dict[str, object]]:
        """The one transaction group of every table."""
        return [{"name": GROUP, "topic": TRANSACTION_TOPIC, "sources": self.collections,
                 "timeout": "10m"}]  # fmt: skip

    def land(self, window_start_ms: int, records: int) -> None:
        """``records`` change events per table in the window, in transactions of
        TABLES_PER_TRANSACTION tables (every table, when there are fewer), whose BEGIN and
        END records land on the transaction topic."""
        n = len(self.tables)
        width = min(TABLES_PER_TRANSACTION, n)
        count = records * n // width  # each table in exactly ``records`` of them
        events: dict[str, list[Message]] = defaultdict(list)
        announced: list[Message] = []
        for j in range(count):
            ts = window_start_ms + (j + 1) * MINUTE_MS // (count + 1)
            commit_lsn = self.lsn
            txid = f"{self.tx_id}:{self.lsn + 1}"
            written: list[tuple[str, int]] = []
            for i in range(width):
                table = self.tables[(j * width + i) % n].folder.name
                events[table].append(self._change(table, ts, commit_lsn, txid, written))
                written.append((table, ts))
            announced += transaction_records(txid, written, self.collections)
            self.tx_id += 1
        for topic in self.tables:
            topic.write(window_start_ms, events[topic.folder.name])
        self.transaction_topic.write(window_start_ms, announced)

    def _change(
        self, table: str, ts: int, commit_lsn: int, txid: str, written: list[tuple[str, int]]
    ) -> Message:
        """The next change event of ``table``: its rows are created, then updated in turn."""
        row_id = self.writes[table] % KEYS + 1
        self.writes[table] += 1
        before = self.rows[table].get(row_id)
        after = {"id": row_id, "version": 1 + (0 if before is None else int(before["version"]))}
        self.rows[table][row_id] = after
        self.lsn += 8
        source = {**pg_source(ts, "false", self.lsn, commit_lsn, self.tx_id), "table": table}
        block = transaction_block(txid, written, table)
        message = debezium_message(
            row_id, before, after, "c" if before is None else "u", source, ts, block
        )
        return message._replace(partition=key_partition(row_id, PARTITIONS))


# -- counting --------------------------------------------------------------------------


class JobCount:
    """Spark jobs started so far, from the event logs in a folder (uncompressed, not
    rolled). A log only grows, and a server's holds every run of the benchmark, so each
    count reads only the bytes appended since the last one."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.read: dict[Path, int] = {}
        self.jobs = 0

    def count(self) -> int:
        """Jobs started in every log of the folder up to now (complete lines only)."""
        for log in sorted(self.folder.iterdir()):
            if not log.is_file():
                continue
            with log.open("rb") as events:
                events.seek(self.read.get(log, 0))
                appended = events.read()
            complete = appended[: appended.rfind(b"\n") + 1]
            self.read[log] = self.read.get(log, 0) + len(complete)
            self.jobs += complete.count(JOB_START)
        return self.jobs


def delta_commits(lake: Path) -> int:
    """Delta commits under ``lake``: its tables' ``_delta_log/*.json`` files."""
    return sum(1 for path in lake.rglob("*.json") if path.parent.name == "_delta_log")


@dataclass
class Figures:
    """One measure of one case: seconds, Spark jobs and Delta commits (None: not
    counted), the windows it covered and the load average as it began."""

    measure: str
    wall: float
    cpu: float
    windows: int = 0
    jobs: int | None = None
    commits: int | None = None
    load: float = 0.0
    outcome: str = ""
    phases: dict[str, float] = field(default_factory=dict)

    def per_window(self, count: int | None) -> str:
        """``count`` per window covered, as text (empty when not counted or no window)."""
        return "" if count is None or not self.windows else f"{count / self.windows:.1f}"


# -- one case --------------------------------------------------------------------------


class Case:
    """One variant with N sources on a fresh lake under ``root``."""

    def __init__(self, root: Path, variant: str, n: int, windows: int) -> None:
        shutil.rmtree(root, ignore_errors=True)
        (root / "events").mkdir(parents=True)
        self.root = root
        self.variant = variant
        self.n = n
        self.landing = root / "landing"
        self.lake = root / "lake"
        self.workload = (
            Database(self.landing, n) if variant == "debezium"
            else Upserts(self.landing, n, held_in_one=variant == "upsert-held")
        )  # fmt: skip
        # Every window measured is closed from the start.
        self.start_ms = floor_minute(int(time.time() * 1000)) - (windows + 1) * MINUTE_MS
        self.landed = 0  # windows whose dumps landed
        self.materialized = 0  # windows the runs went through
        self.own_jobs = JobCount(root / "events")

    def config(self, mode: str, remote: str | None) -> Path:
        """The config file of runs in ``mode``: its own JVM (logging its events under
        ``events/``), or attached to ``remote``."""
        spark: dict[str, object] = (
            {"master": "local[2]",
             "conf": {**SPARK_CONF, **EVENT_LOG, "spark.eventLog.dir": str(self.root / "events")}}
            if mode == "own" else {"remote": remote, "conf": SPARK_CONF}
        )  # fmt: skip
        path = self.root / f"reclock-{mode}.yaml"
        path.write_text(yaml.safe_dump({
            "lake": "lake", "landing": "landing", "window": "1m", "start": iso(self.start_ms),
            "spark": spark, "sources": self.workload.sources(),
            **({"transactions": groups} if (groups := self.workload.transactions()) else {}),
        }, sort_keys=False))  # fmt: skip
        return path

    def land(self, windows: int) -> None:
        """The dumps of the next ``windows`` windows: the first 10 hold 200 records per
        topic together, each later one 20."""
        for _ in range(windows):
            start = self.start_ms + self.landed * MINUTE_MS
            records = 200 // FIRST_WINDOWS if self.landed < FIRST_WINDOWS else RECORDS
            self.workload.land(start, records)
            self.landed += 1

    def materialize(self, label: str, config: Path, jobs: JobCount) -> Figures:
        """``reclock materialize --through`` the last landed window's end, in a fresh
        process on an ephemeral Dagster instance; ``jobs`` counts the run's Spark jobs."""
        through = self.start_ms + self.landed * MINUTE_MS
        env = {k: v for k, v in os.environ.items() if k not in ("DAGSTER_HOME", "SPARK_REMOTE")}
        jobs_before, commits_before, load = jobs.count(), delta_commits(self.lake), loadavg()
        command = cli("materialize", "--config", str(config), "--through", iso(through))
        log = self.root / f"{label.replace(' ', '-').replace(',', '')}.log"
        sample = run_process(command, env, log)
        windows = self.landed - self.materialized
        self.materialized = self.landed
        return Figures(
            label, sample.wall, sample.cpu, windows, jobs.count() - jobs_before,
            delta_commits(self.lake) - commits_before, load, sample.outcome, sample.phases,
        )  # fmt: skip

    def load_and_tick(self, config_file: Path) -> list[Figures]:
        """The definitions' load in this process, then two ticks of the sensor."""
        load = loadavg()
        began, cpu = time.perf_counter(), time.process_time()
        config = load_config(config_file)
        definitions = build_definitions(config)
        definitions.resolve_job_def(ALL_WINDOWS_JOB)
        loaded = Figures("definitions load (in process)", time.perf_counter() - began,
                         time.process_time() - cpu, load=load)  # fmt: skip
        resources = {"lake": LakeResource(root=str(config.lake), landing=str(config.landing))}
        figures = [loaded]
        cursor = None
        with DagsterInstance.ephemeral() as instance:
            for label in ("sensor tick, first", "sensor tick, next"):
                load, before = loadavg(), delta_commits(self.lake)
                sample, cursor = sensor_tick(definitions, instance, cursor, resources)
                figures.append(Figures(label, sample.wall, sample.cpu, commits=delta_commits(
                    self.lake) - before, load=load, outcome=sample.outcome))  # fmt: skip
        return figures


def loadavg() -> float:
    """The machine's load average over the last minute."""
    return os.getloadavg()[0]


def run_case(
    root: Path, variant: str, n: int, modes: list[str], backfill: int,
    server: tuple[str, JobCount] | None,
) -> list[Figures]:
    """Every measure of ``variant`` with ``n`` sources (see the module docstring);
    ``server``: the warm server's address and its job count, for the attached mode."""
    case = Case(root, variant, n, FIRST_WINDOWS + len(modes) * (1 + backfill))
    configs = {mode: case.config(mode, server[0] if server else None) for mode in modes}
    counts = {"own": case.own_jobs, "attached": server[1] if server else case.own_jobs}
    first = "attached" if "attached" in modes else "own"
    figures = []
    case.land(FIRST_WINDOWS)
    figures.append(case.materialize(f"first {FIRST_WINDOWS} windows, {first}", configs[first],
                                    counts[first]))  # fmt: skip
    case.land(1)
    figures += case.load_and_tick(configs[modes[0]])
    for index, mode in enumerate(modes):
        if index:
            case.land(1)
        figures.append(case.materialize(f"one window, {mode}", configs[mode], counts[mode]))
    for mode in modes:
        case.land(backfill)
        figures.append(case.materialize(f"backfill {backfill} windows, {mode}", configs[mode],
                                        counts[mode]))  # fmt: skip
    return figures


# -- report ----------------------------------------------------------------------------


def print_case(variant: str, n: int, figures: list[Figures]) -> None:
    """One case's table, then the phases of its one-window runs."""
    print(f"\n== {variant}, {n} source(s)")
    print(f"{'measure':<34} {'wall s':>8} {'CPU s':>8} {'jobs':>6} {'commits':>7} "
          f"{'jobs/w':>7} {'commits/w':>9} {'load':>5}  outcome")  # fmt: skip
    for f in figures:
        print(f"{f.measure:<34} {f.wall:8.2f} {f.cpu:8.2f} {_count(f.jobs):>6} "
              f"{_count(f.commits):>7} {f.per_window(f.jobs):>7} {f.per_window(f.commits):>9} "
              f"{f.load:5.1f}  {f.outcome}")  # fmt: skip
    for f in figures:
        if f.measure.startswith("one window") and f.phases:
            print_phases(f.measure, [Sample(f.wall, f.cpu, f.outcome, f.phases)])
    sys.stdout.flush()


def _count(value: int | None) -> str:
    return "-" if value is None else str(value)


Cases = dict[str, dict[int, list[Figures]]]  # variant -> N -> its measures


def slopes(cases: Cases) -> list[tuple[str, str, int, int, float]]:
    """Per variant and measure: the wall seconds each source adds beyond the fewest
    (variant, measure, fewest N, most N, seconds per source)."""
    found = []
    for variant, by_n in cases.items():
        if len(by_n) < 2:
            continue
        low, high = min(by_n), max(by_n)
        walls = {f.measure: f.wall for f in by_n[low]}
        found += [
            (variant, f.measure, low, high, (f.wall - walls[f.measure]) / (high - low))
            for f in by_n[high]
            if f.measure in walls
        ]
    return found


def print_slopes(cases: Cases) -> None:
    """Per variant and measure: wall seconds added by each source beyond the fewest."""
    print("\n== wall seconds per extra source (fewest to most sources)")
    for variant, measure, low, high, slope in slopes(cases):
        print(f"{variant:<9} {measure:<34} {low:>3} -> {high:<3} {slope:7.3f} s")


def per_window(cases: Cases, count: Callable[[Figures], float | None]) -> dict[str, dict]:
    """``count`` per window of every run that covers windows (a window's, a backfill's),
    against N, one line per variant and measure."""
    series: dict[str, dict] = {}
    for variant, by_n in cases.items():
        for n, figures in by_n.items():
            for f in figures:
                value = count(f)
                if f.windows and not f.measure.startswith("first") and value is not None:
                    series.setdefault(f"{variant}: {f.measure}", {})[n] = value / f.windows
    return series


def page_report(cases: Cases) -> Report:
    """The report page: a window's wall seconds, Spark jobs and Delta commits against the
    source count, each case's measures and the seconds each source adds."""
    drawn, (walls, jobs, commits) = figure(rows=3)
    line_chart(walls, per_window(cases, lambda f: f.wall), "sources (N)",
               "wall seconds per window", "one window's cost against source count")
    line_chart(jobs, per_window(cases, lambda f: f.jobs), "sources (N)",
               "Spark jobs per window", "Spark jobs against source count")
    line_chart(commits, per_window(cases, lambda f: f.commits), "sources (N)",
               "Delta commits per window", "Delta commits against source count")  # fmt: skip
    parts = [
        "Every window is one minute; each run a fresh `reclock materialize --through` "
        "process (checks and CDCv2 export included). A cell: wall / CPU seconds, then "
        "Spark jobs and Delta commits per window covered, and the machine's 1-minute load "
        "average as the measure began (wall seconds move with it; CPU seconds and counts "
        "much less).",
    ]
    for variant, by_n in cases.items():
        ns = sorted(by_n)
        measures = [f.measure for f in by_n[ns[0]]]
        cells = {(n, f.measure): _cell(f) for n in ns for f in by_n[n]}
        parts += [f"## {variant}", table(
            ["measure", *(f"N = {n}" for n in ns)],
            [[m, *(cells.get((n, m), "") for n in ns)] for m in measures],
        )]  # fmt: skip
    if found := slopes(cases):
        parts += ["## Wall seconds each source adds", table(
            ["variant", "measure", "from N", "to N", "s per source"],
            [[v, m, low, high, f"{slope:.3f}"] for v, m, low, high, slope in found],
        )]  # fmt: skip
    return Report("sources", "Cost against source count", "\n\n".join(parts),
                  {"sources": drawn})  # fmt: skip


def _cell(f: Figures) -> str:
    counted = [f"{f.per_window(f.jobs)} jobs/w" if f.jobs is not None and f.windows else "",
               f"{f.per_window(f.commits)} commits/w" if f.commits is not None and f.windows
               else ""]  # fmt: skip
    return " · ".join([f"{f.wall:.1f} / {f.cpu:.1f} s", *filter(None, counted),
                       f"load {f.load:.1f}"])  # fmt: skip


def save(path: Path, argv: list[str], cases: Cases) -> None:
    """The figures so far, the command and the machine, as JSON."""
    path.write_text(json.dumps({
        "measured": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": machine(), "cores": os.cpu_count(),
        "command": [sys.executable, "-m", "benchmarks.sources", *argv],
        "cases": {variant: {str(n): [asdict(f) for f in figures] for n, figures in by_n.items()}
                  for variant, by_n in cases.items()},
    }, indent=1))  # fmt: skip


def arguments() -> argparse.ArgumentParser:
    """The command's options (source counts, variants, modes, outputs)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sources", type=int, nargs="+", default=list(SOURCES))
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--backfill-windows", type=int, default=BACKFILL_WINDOWS)
    parser.add_argument("--quick", action="store_true",
                        help=f"N = {' and '.join(map(str, QUICK_SOURCES))} only")  # fmt: skip
    parser.add_argument("--workdir", type=Path, default=Path("bench-out") / "sources",
                        help="the cases' lakes and logs, and the JSON figures")  # fmt: skip
    add_page_option(parser)
    parser.add_argument("--redraw", type=Path, metavar="FILE",
                        help="draw the report page of a figures file written before (its "
                        "date, machine and command) instead of measuring")  # fmt: skip
    return parser


def load(path: Path) -> tuple[Provenance, Cases]:
    """A figures file ``save`` wrote: when, where and how it was measured, and its cases."""
    saved = json.loads(path.read_text())
    measured = datetime.fromisoformat(saved["measured"])
    command = f"python -m {shlex.join(saved['command'][2:])}"
    cases = {
        variant: {int(n): [Figures(**f) for f in figures] for n, figures in by_n.items()}
        for variant, by_n in saved["cases"].items()
    }
    return Provenance(measured, saved["machine"], command), cases


def main(argv: list[str] | None = None) -> int:
    """Measure every case asked for, printing each as it ends."""
    argv = sys.argv[1:] if argv is None else argv
    parser = arguments()
    args = parser.parse_args(argv)
    if args.redraw:
        if args.page is None:
            parser.error("--redraw draws a report page: give --page DIR")
        provenance, saved = load(args.redraw)
        report = page_report(saved)
        page = write_page(args.page, report.name, report.title, report.body, report.figures,
                          provenance)  # fmt: skip
        print(f"report page: {page}")
        return 0
    sources = list(QUICK_SOURCES) if args.quick else args.sources
    workdir = args.workdir.absolute()
    workdir.mkdir(parents=True, exist_ok=True)
    out = workdir / f"sources-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    cases: Cases = {}
    with ExitStack() as stack:
        server = None
        if "attached" in args.modes:
            events = workdir / "server-events"
            shutil.rmtree(events, ignore_errors=True)
            events.mkdir()
            conf = {**SPARK_CONF, **EVENT_LOG, "spark.eventLog.dir": str(events)}
            started = SparkServer(free_port(), master="local[2]", conf=conf,
                                  log=workdir / "spark-server.log")  # fmt: skip
            server = (stack.enter_context(started).address, JobCount(events))
        for variant in args.variants:
            for n in sources:
                root = workdir / f"{variant}-{n}"
                figures = run_case(root, variant, n, args.modes, args.backfill_windows, server)
                cases.setdefault(variant, {})[n] = figures
                print_case(variant, n, figures)
                save(out, argv, cases)
    print_slopes(cases)
    print(f"\nfigures written to {out}")
    publish(args.page, "benchmarks.sources", argv, page_report(cases))
    return 0


if __name__ == "__main__":
    sys.exit(main())
