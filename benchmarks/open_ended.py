"""What one window costs an open-ended source, by how far back its ``start`` lies.

For each age it writes a config with ``start`` that many days back and no ``end``, a dozen
records in the first window Dagster lists for it, and times ``reclock materialize
--through <that window's end>`` in a fresh process (a fresh lake, an ephemeral instance):

    python -m benchmarks.open_ended --days 1 30 365 [--repeat 3]

Wall and CPU seconds (the process and its JVM) of each run; the least of a few runs is
the figure to compare, and on a shared machine the CPU time more than the wall time.

A run's cost should not grow with the windows behind it (Dagster used to list every
partition key of the asset, 474,094 of them for a start 11 months back).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml

from assets.partitions import window_partitions
from benchmarks.report_page import Report, add_page_option, figure, line_chart, publish, table
from cdc_core.config import load_config

RECORDS = 12


def write_case(
    workdir: Path, days: int, now: datetime, records: int = RECORDS
) -> tuple[Path, str, int]:
    """A config starting ``days`` back, and ``records`` records (over a fifth as many keys,
    at least five) in its first listed window; returns the config file, the ``--through``
    argument and how many windows Dagster lists."""
    start = now.replace(second=0, microsecond=0) - timedelta(days=days)
    config_file = workdir / "reclock.yaml"
    config_file.write_text(yaml.safe_dump({
        "lake": "lake", "landing": "landing", "window": "1m",
        "start": start.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "spark": {"master": "local[2]", "conf": {"spark.sql.shuffle.partitions": "4"}},
        "sources": [{"name": "users", "topic": "users", "key": {"id": "bigint"},
                     "value": {"name": "string"}, "envelope": "upsert",
                     "reclock": "event-time"}],
    }))  # fmt: skip
    partitions = window_partitions(load_config(config_file), int(time.time() * 1000))
    first = partitions.time_window_for_partition_key(partitions.get_first_partition_key())
    first_ms = int(first.start.timestamp() * 1000)
    step_ms = min(1_000, 60_000 // (records + 1))  # all within the one-minute window
    lines = [
        json.dumps({"topic": "users", "partition": i % 2, "offset": i // 2, "tstype": "create",
                    "ts": first_ms + step_ms * (i + 1), "broker": 1, "headers": [],
                    "key": json.dumps({"id": i % max(5, records // 5)}),
                    "payload": json.dumps({"name": f"n{i}"})})
        for i in range(records)
    ]  # fmt: skip
    (workdir / "landing" / "users").mkdir(parents=True)
    (workdir / "landing" / "users" / "dump.json").write_text("\n".join(lines) + "\n")
    listed = partitions.get_num_partitions()
    return config_file, first.end.strftime("%Y-%m-%dT%H:%M:%SZ"), listed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=int, nargs="+", default=[1, 30, 365])
    parser.add_argument("--repeat", type=int, default=1, help="runs per age (the least counts)")
    parser.add_argument("--workdir", type=Path, help="kept afterwards (default: a temp folder)")
    add_page_option(parser)
    args = parser.parse_args()
    root = args.workdir or Path(tempfile.mkdtemp(prefix="open-ended-"))
    print(f"{'start':>12}  {'windows listed':>14}  {'wall s':>6}  {'CPU s':>6}  "
          f"{'each run: wall/CPU':<24}  result")
    ages: list[Age] = []
    for days in args.days:
        runs: list[tuple[float, float]] = []
        for _ in range(args.repeat):
            workdir = root / f"{days}d"
            shutil.rmtree(workdir, ignore_errors=True)
            workdir.mkdir(parents=True)
            config_file, through, listed = write_case(workdir, days, datetime.now(UTC))
            command = [sys.executable, "-m", "pipelines.cli", "materialize",
                       "--config", str(config_file), "--through", through]  # fmt: skip
            run = timed_command(command)
            runs.append((run.wall, run.cpu))
            printed = run.output.splitlines()
            outcome = next(
                (line for line in printed if line.startswith("Materialized")),
                f"exit {run.returncode}: {printed[-1:]}",
            )
        ages.append(Age(days, listed, runs, outcome))
        age = ages[-1]
        print(f"{days:>10} d  {listed:>14}  {age.wall:>6.1f}  {age.cpu:>6.1f}  "
              f"{age.every:<24}  {outcome}", flush=True)  # fmt: skip
    if args.workdir is None:
        shutil.rmtree(root, ignore_errors=True)
    publish(args.page, "benchmarks.open_ended", None, page_report(ages))


@dataclass(frozen=True)
class Age:
    """The runs of one ``start``, ``days`` back: Dagster listed ``listed`` windows; each
    run's wall and CPU seconds; the last run's outcome."""

    days: int
    listed: int
    runs: list[tuple[float, float]]
    outcome: str

    @property
    def wall(self) -> float:
        """The least wall seconds of the runs."""
        return min(r[0] for r in self.runs)

    @property
    def cpu(self) -> float:
        """The least CPU seconds of the runs."""
        return min(r[1] for r in self.runs)

    @property
    def every(self) -> str:
        """Each run's wall/CPU seconds."""
        return " ".join(f"{w:.0f}/{c:.0f}" for w, c in self.runs)


def page_report(ages: list[Age]) -> Report:
    """The report page: the first window's least wall and CPU seconds against how far
    back ``start`` lies."""
    drawn, (axes,) = figure()
    line_chart(axes, {"wall": {a.days: a.wall for a in ages}, "CPU": {a.days: a.cpu for a in ages}},
               "days between start and now", "least seconds (process and JVM)",
               "a new open-ended source's first window", log_x=True)  # fmt: skip
    body = "\n\n".join([
        "Each run: `reclock materialize --through` the first window Dagster lists, a "
        "fresh process on a fresh lake (a dozen records); the least of the runs counts.",
        table(["start", "windows listed", "wall s", "CPU s", "each run: wall/CPU", "result"],
              [[f"{a.days} d back", f"{a.listed:,}", f"{a.wall:.1f}", f"{a.cpu:.1f}", a.every,
                a.outcome] for a in ages]),
    ])  # fmt: skip
    return Report("open-ended", "A new source whose start lies far back", body,
                  {"start": drawn})  # fmt: skip


@dataclass(frozen=True)
class TimedCommand:
    """A command run to its end: when it was spawned (epoch seconds), its wall and CPU
    seconds, exit code and output (stdout and stderr together)."""

    spawned: float
    wall: float
    cpu: float
    returncode: int
    output: str


def timed_command(command: list[str]) -> TimedCommand:
    """Run ``command`` in a fresh process, timing its wall and its tree's CPU."""
    spawned = time.time()
    with tempfile.TemporaryFile("w+") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, text=True)
        cpu = tree_cpu_seconds(process)
        wall = time.time() - spawned
        out.seek(0)
        return TimedCommand(spawned, wall, cpu, process.returncode, out.read())


def tree_cpu_seconds(process: subprocess.Popen) -> float:
    """CPU seconds (user and system) of ``process`` and its descendants (the JVM, Python
    workers), sampled from /proc every 0.2 s until it exits: on a shared machine wall time
    moves with the others' load, CPU time much less."""
    ticks = os.sysconf("SC_CLK_TCK")
    last: dict[int, float] = {}
    while process.poll() is None:
        for pid, (parent, cpu) in _processes().items():
            if pid == process.pid or parent in last or parent == process.pid:
                last[pid] = cpu / ticks
        time.sleep(0.2)
    return sum(last.values())


def _processes() -> dict[int, tuple[int, int]]:
    """Every process: pid -> (parent pid, utime + stime in clock ticks)."""
    found: dict[int, tuple[int, int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        found[int(stat.parent.name)] = (int(fields[1]), int(fields[11]) + int(fields[12]))
    return found


if __name__ == "__main__":
    main()
