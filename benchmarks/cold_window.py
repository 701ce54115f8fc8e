"""What one scheduled window costs from a cold start, phase by phase.

A fresh ``reclock materialize --through <the window's end>`` process, as a schedule or a
sensor launches each minute: interpreter and imports, the JVM and Spark session, Dagster's
run, every engine phase, the checks and the CDCv2 export, for one window of about a
hundred records of an open-ended upsert source (``benchmarks.open_ended``'s case):

    python -m benchmarks.cold_window [--records 100] [--repeat 5]
    python -m benchmarks.cold_window --remote sc://localhost:15002   # a warm Spark Connect server
    python -m benchmarks.cold_window --against spark.sql.codegen.wholeStage=true  # in turn
    python -m benchmarks.cold_window --sample [--remote ...]   # the bundled sample's window

Each run is a fresh process on a fresh lake. The process times its own steps: the
engine's phase announcements (``cdc_core.phases``), the imports and the session's start
(started as the run's Spark resource starts it, or attached to the ``--remote`` server:
``reclock spark-server``); what no phase covers (Dagster's run
machinery, the lake's opening) is reported as such. The figures are medians over the
runs, with the whole command's wall and CPU time (the process and its JVM).

``--sample`` runs the first window of the bundled sample (``reclock sample``: six sources,
a transaction group, Avro, Kafka Connect sink files, history and expectations) instead.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import yaml

from benchmarks.open_ended import timed_command, write_case
from benchmarks.report_page import Report, add_page_option, bar_chart, figure, publish, table
from cdc_core.config import load_config
from cdc_core.frontier import iso
from pipelines.sample import write_sample

PROCESS_START = "interpreter start and imports (Dagster, pyspark, reclock)"
SESSION = "Spark session start (JVM, or attaching)"
CHECKS = "the checks, first start to last end (four at a time)"
OUTSIDE = "outside phases (Dagster run, opening tables)"
EXIT = "process exit (exit hooks, the session stopping)"


def timed_run(config_file: Path, through: str, out: Path) -> None:
    """The child: one ``materialize`` through ``through``, writing its step times to
    ``out`` (seconds per step; a phase met twice counts its total) with the moments its
    imports were done and its run ended."""
    from cdc_core.phases import PhaseEvent, observing
    from cdc_core.spark import get_spark
    from pipelines.run import materialize

    imported = time.time()
    steps: dict[str, float] = defaultdict(float)
    config = load_config(config_file)
    started = time.time()
    get_spark(  # as the run's resource starts it: a one-window run starts a quick driver
        config.spark.master, config.spark.conf, [str(config.lake), str(config.landing)],
        quick_start=True,
    )
    steps[SESSION] = time.time() - started

    checking: list[float] = []  # when each check started or ended
    ended: list[tuple[float, float]] = []  # when each other phase ended, and its seconds

    def record(event: PhaseEvent) -> None:
        if event.name.startswith("check "):
            checking.append(time.time())
        if event.ended:
            steps[f"{event.source}: {event.name}"] += event.seconds or 0.0
            if not event.name.startswith("check "):
                ended.append((time.time(), event.seconds or 0.0))

    run_began = time.time()
    with observing(record):
        succeeded = materialize(config, int(datetime.fromisoformat(through).timestamp() * 1000))
    # The checks run a few at a time: their share of the run is from the first start to
    # the last end, not the sum of their times. A phase a check runs (a transaction
    # group's pending transactions) is inside that span already.
    span = (min(checking), max(checking)) if checking else (0.0, 0.0)
    steps[CHECKS] = span[1] - span[0]
    announced = sum(s for at, s in ended if not span[0] <= at <= span[1])
    steps[OUTSIDE] = time.time() - run_began - announced - steps[CHECKS]
    out.write_text(json.dumps(
        {"steps": steps, "imported": imported, "ended": time.time(), "succeeded": succeeded}
    ))  # fmt: skip


@dataclass
class Side:
    """The runs of one case: the config as written, or with ``settings`` added."""

    label: str
    settings: dict[str, str]
    walls: list[float] = field(default_factory=list)
    cpus: list[float] = field(default_factory=list)
    steps: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))

    def run(self, workdir: Path, records: int | None, remote: str | None) -> None:
        """One fresh process on a fresh lake in ``workdir``; its figures join the side's.
        ``records`` in the one-source case's window, or None: the sample's first window."""
        if records is None:
            config_file = write_sample(workdir)
            sample = load_config(config_file)
            through = iso(sample.start_ms + sample.window_ms)
        else:
            config_file, through, _ = write_case(workdir, 1, datetime.now(UTC), records)
        case = yaml.safe_load(config_file.read_text())
        spark = case.setdefault("spark", {})
        spark.setdefault("conf", {}).update(self.settings)
        if remote:
            case["spark"] = {"remote": remote, "conf": spark["conf"]}
        config_file.write_text(yaml.safe_dump(case))
        out = workdir / "steps.json"
        command = [sys.executable, "-m", "benchmarks.cold_window",
                   "--child", str(config_file), through, str(out)]  # fmt: skip
        run = timed_command(command)
        if run.returncode or not out.exists():
            sys.exit(f"{self.label}: a run failed (exit {run.returncode}):\n{run.output[-3000:]}")
        result = json.loads(out.read_text())
        if not result["succeeded"]:
            sys.exit(f"{self.label}: the materialization failed:\n{run.output[-3000:]}")
        self.walls.append(run.wall)
        self.cpus.append(run.cpu)
        self.steps[PROCESS_START].append(result["imported"] - run.spawned)
        for name, seconds in result["steps"].items():
            self.steps[name].append(seconds)
        self.steps[EXIT].append(run.spawned + run.wall - result["ended"])
        print(f"{self.label} run {len(self.walls)}: {run.wall:.1f} s wall, {run.cpu:.1f} s CPU",
              flush=True)  # fmt: skip

    def headline(self, case: str, attached: str) -> str:
        """The side's whole run in a sentence."""
        return (f"{self.label}: one window of {case}, cold{attached}, median of "
                f"{len(self.walls)} runs: {statistics.median(self.walls):.1f} s wall, "
                f"{statistics.median(self.cpus):.1f} s CPU (wall of each run: "
                f"{', '.join(f'{w:.1f}' for w in self.walls)})")  # fmt: skip

    def report(self, case: str, attached: str) -> None:
        print(f"\n{self.headline(case, attached)}")
        print(f"{'step':<58} {'median s':>9} {'max s':>7}")
        for name, seconds in self.steps.items():
            print(f"{name:<58} {statistics.median(seconds):>9.2f} {max(seconds):>7.2f}")


def page_report(sides: list[Side], case: str, attached: str) -> Report:
    """The report page: each side's steps, median seconds, as bars and as a table."""
    drawn, axes = figure(rows=len(sides), height=5.0)
    parts = []
    for side, plot in zip(sides, axes, strict=True):
        medians = {name: statistics.median(seconds) for name, seconds in side.steps.items()}
        bar_chart(plot, medians, "median seconds", f"{side.label}: one window of {case}")
        parts += [side.headline(case, attached) + ".", table(
            ["step", "median s", "max s"],
            [[name, f"{medians[name]:.2f}", f"{max(seconds):.2f}"]
             for name, seconds in side.steps.items()],
        )]  # fmt: skip
    return Report("cold-window", "One window from a cold process", "\n\n".join(parts),
                  {"steps": drawn})  # fmt: skip


def setting(text: str) -> tuple[str, str]:
    key, _, value = text.partition("=")
    if not value:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text}")
    return key, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100, help="in the window")
    parser.add_argument("--sample", action="store_true",
                        help="the bundled sample's first window instead (--records unused)")
    parser.add_argument("--repeat", type=int, default=5, help="runs (medians are reported)")
    parser.add_argument("--remote", help="a Spark Connect server the runs attach to")
    parser.add_argument("--against", nargs="+", type=setting, metavar="KEY=VALUE",
                        help="also run the case with these Spark settings in its config, in "
                             "turn with the case as written; report the paired ratio")  # fmt: skip
    add_page_option(parser)
    parser.add_argument("--child", nargs=3, metavar=("CONFIG", "THROUGH", "OUT"),
                        help=argparse.SUPPRESS)  # fmt: skip
    args = parser.parse_args()
    if args.child:
        timed_run(Path(args.child[0]), args.child[1], Path(args.child[2]))
        return
    sides = [Side("as written", {})]
    if args.against:
        settings = dict(args.against)
        sides.append(Side(", ".join(f"{k}={v}" for k, v in settings.items()), settings))
    root = Path(tempfile.mkdtemp(prefix="cold-window-"))
    try:
        for index in range(args.repeat):
            for side_index, side in enumerate(sides):
                workdir = root / f"{index}-{side_index}"
                workdir.mkdir()
                side.run(workdir, None if args.sample else args.records, args.remote)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    attached = f", attached to {args.remote}" if args.remote else ""
    case = "the bundled sample" if args.sample else f"{args.records} records"
    for side in sides:
        side.report(case, attached)
    publish(args.page, "benchmarks.cold_window", None, page_report(sides, case, attached))
    if len(sides) == 2:
        ratios = [a / b for a, b in zip(sides[0].walls, sides[1].walls, strict=True)]
        print(f"\nwall, as written / {sides[1].label}, run by run in turn: median "
              f"{statistics.median(ratios):.2f}x ({', '.join(f'{r:.2f}' for r in ratios)})")


if __name__ == "__main__":
    main()
