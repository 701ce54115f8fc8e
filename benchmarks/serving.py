"""Sources served together against one at a time: the same windows, the same process.

    python -m benchmarks.serving [--sources 16] [--windows 4] [--workers 4]
                                 [--workdir DIR]

N upsert sources as ``benchmarks.sources`` builds them (one topic each, 4 partitions, 20
records per topic and window) on one lake, with its own JVM (``local[2]``). The first
three windows are backfilled; then each further window lands and is materialized by
``cdc_core.app.materialize``, alternately one source at a time (``workers=1``) and
``--workers`` at once, so both see the same lake age and machine. Reports each window's
wall seconds, per source, and the ratios of one-at-a-time to together, each window served
together paired with the one-at-a-time window before it.
Engine only (register, bind, reclock, envelope, publish): no Dagster, checks or export.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from benchmarks.age_instance import MINUTE_MS
from benchmarks.report_page import Report, add_page_option, figure, line_chart, publish, table
from benchmarks.sources import Case
from cdc_core.app.materialize import (
    SOURCE_WORKERS,
    LandedDumps,
    ListedLanding,
    RegisteredAhead,
    materialize_windows,
    serve_together,
)
from cdc_core.app.session import config_spark
from cdc_core.config import Config, load_config
from cdc_core.reclock import Windows
from cdc_core.source import SourcePipeline

FIRST_WINDOWS = 3


class Window:
    """One window of every source, as ``serve_together`` serves it."""

    def __init__(self, pipeline: SourcePipeline, windows: Windows) -> None:
        self.pipeline, self.windows = pipeline, windows

    def input_bytes(self, listed: ListedLanding) -> int:
        """What the window reads."""
        return self.pipeline.input_bytes(listed)

    def landed_dumps(self) -> list[LandedDumps]:
        """What the window registers first."""
        return self.pipeline.landed_dumps(arrival_ms=int(time.time() * 1000))

    def registered_ahead(self, registered: RegisteredAhead) -> None:
        """What the run registered first: the window's registration skips it."""
        self.pipeline.registered_ahead(registered)

    def binding(self) -> tuple[SourcePipeline, Windows]:
        """The window, to bind with the other sources'."""
        return self.pipeline, self.windows

    def serve(self) -> int:
        """Materialize the window; how many windows it reported."""
        now = int(time.time() * 1000)
        done = materialize_windows(self.pipeline, [self.windows], now_ms=now, arrived={})
        return len(done.reports)


def materialize(config: Config, windows: Windows, workers: int) -> float:
    """Wall seconds to serve every source's ``windows`` with ``workers`` at once."""
    spark = config_spark(config)
    began = time.perf_counter()
    served = serve_together(
        spark, config, [s.name for s in config.sources],
        lambda name: Window(SourcePipeline.from_config(spark, config, config.source(name)),
                            windows),
        idle=lambda: None, workers=workers,
    )  # fmt: skip
    failures = [s for s in served if s.failure is not None]
    if failures:
        raise RuntimeError(f"{len(failures)} source(s) failed: {failures[0].failure!r}")
    return time.perf_counter() - began


def main(argv: list[str] | None = None) -> int:
    """Alternate one-at-a-time and together over ``--windows`` windows; print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sources", type=int, default=16)
    parser.add_argument("--windows", type=int, default=4, help="measured windows (even)")
    parser.add_argument("--workers", type=int, default=SOURCE_WORKERS)
    parser.add_argument("--workdir", type=Path, default=Path("bench-out") / "serving")
    add_page_option(parser)
    args = parser.parse_args(argv)
    n = args.sources
    case = Case(args.workdir.absolute(), "upsert", n, FIRST_WINDOWS + args.windows + 1)
    case.land(FIRST_WINDOWS)
    config = load_config(case.config("own", None))
    first = case.start_ms
    materialize(config, Windows(first, case.start_ms + FIRST_WINDOWS * MINUTE_MS, MINUTE_MS),
                args.workers)  # fmt: skip
    seconds: dict[int, list[float]] = {1: [], args.workers: []}
    for index in range(args.windows):
        workers = 1 if index % 2 == 0 else args.workers
        case.land(1)
        end = case.start_ms + case.landed * MINUTE_MS
        wall = materialize(config, Windows(first, end, MINUTE_MS), workers)
        seconds[workers].append(wall)
        print(f"window {index + 1}: {workers} at once: {wall:.2f} s, {wall / n:.2f} s per source",
              flush=True)  # fmt: skip
    print(summary(n, args.workers, seconds))
    publish(args.page, "benchmarks.serving", argv, page_report(n, args.workers, seconds))
    return 0


def paired(workers: int, seconds: dict[int, list[float]]) -> list[float]:
    """Each window served together against the one-at-a-time window just before it (one
    at a time / together), so a machine whose load moves during the run moves both sides
    of each ratio."""
    return [a / t for a, t in zip(seconds[1], seconds[workers], strict=False)]


def summary(n: int, workers: int, seconds: dict[int, list[float]]) -> str:
    """The medians and the paired ratios, in a sentence."""
    alone, together = (statistics.median(seconds[w]) for w in (1, workers))
    ratios = paired(workers, seconds)
    return (f"{n} sources, median window: one at a time {alone:.2f} s, {workers} at once "
            f"{together:.2f} s; paired ratios {', '.join(f'{r:.2f}x' for r in ratios)}, "
            f"median {statistics.median(ratios):.2f}x")  # fmt: skip


def page_report(n: int, workers: int, seconds: dict[int, list[float]]) -> Report:
    """The report page: each measured window's seconds, one at a time against together."""
    drawn, (axes,) = figure()
    order = {w: [2 * i + (w != 1) + 1 for i in range(len(seconds[w]))] for w in seconds}
    line_chart(axes, {
        f"{w} at once" if w != 1 else "one at a time": dict(zip(order[w], seconds[w], strict=True))
        for w in seconds
    }, "window measured (in turn)", "wall seconds", f"{n} sources: a window served")  # fmt: skip
    pairs = zip(seconds[1], seconds[workers], strict=False)
    rows = [[i, f"{a:.2f}", f"{t:.2f}", f"{a / t:.2f}x"] for i, (a, t) in enumerate(pairs, 1)]
    body = "\n\n".join([
        f"{n} upsert sources on one lake, engine only (no Dagster, checks or export); the "
        f"windows alternate one source at a time and {workers} at once.",
        summary(n, workers, seconds) + ".",
        table(["pair", "one at a time s", f"{workers} at once s", "ratio"], rows),
    ])  # fmt: skip
    return Report(f"serving-{n}", "Sources served together against one at a time", body,
                  {"serving": drawn})  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
