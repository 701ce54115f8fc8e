"""What one window costs an open-ended source, by how far back its ``start`` lies.

For each age it writes a config with ``start`` that many days back and no ``end``, a dozen
records in the first window Dagster lists for it, and times ``reclock materialize
--through <that window's end>`` in a fresh process (a fresh lake, an ephemeral instance):

    python -m benchmarks.open_ended --days 1 30 365

A run's cost should not grow with the windows behind it (issue 30: Dagster listed every
partition key of the asset, 474,094 of them for a start 11 months back).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml

from assets.partitions import window_partitions
from cdc_core.config import load_config

RECORDS = 12


def write_case(workdir: Path, days: int, now: datetime) -> tuple[Path, str, int]:
    """A config starting ``days`` back, and a dozen records in its first listed window;
    returns the config file, the ``--through`` argument and how many windows Dagster lists."""
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
    partitions = window_partitions(load_config(config_file))
    first = partitions.time_window_for_partition_key(partitions.get_first_partition_key())
    first_ms = int(first.start.timestamp() * 1000)
    lines = [
        json.dumps({"topic": "users", "partition": i % 2, "offset": i // 2, "tstype": "create",
                    "ts": first_ms + 1_000 * (i + 1), "broker": 1, "headers": [],
                    "key": json.dumps({"id": i % 5}), "payload": json.dumps({"name": f"n{i}"})})
        for i in range(RECORDS)
    ]  # fmt: skip
    (workdir / "landing" / "users").mkdir(parents=True)
    (workdir / "landing" / "users" / "dump.json").write_text("\n".join(lines) + "\n")
    listed = partitions.get_num_partitions()
    return config_file, first.end.strftime("%Y-%m-%dT%H:%M:%SZ"), listed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=int, nargs="+", default=[1, 30, 365])
    parser.add_argument("--workdir", type=Path, help="kept afterwards (default: a temp folder)")
    args = parser.parse_args()
    root = args.workdir or Path(tempfile.mkdtemp(prefix="open-ended-"))
    print(f"{'start':>12}  {'windows listed':>14}  {'seconds':>8}  result")
    for days in args.days:
        workdir = root / f"{days}d"
        shutil.rmtree(workdir, ignore_errors=True)
        workdir.mkdir(parents=True)
        config_file, through, listed = write_case(workdir, days, datetime.now(UTC))
        command = [sys.executable, "-m", "pipelines.cli", "materialize",
                   "--config", str(config_file), "--through", through]  # fmt: skip
        began = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        seconds = time.perf_counter() - began
        outcome = next(
            (line for line in done.stdout.splitlines() if line.startswith("Materialized")),
            f"exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}",
        )
        print(f"{days:>10} d  {listed:>14}  {seconds:>8.1f}  {outcome}", flush=True)
    if args.workdir is None:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
