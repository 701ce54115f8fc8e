"""The suite's warm Spark Connect server, and how a test's subprocess attaches to it.

A ``reclock`` subprocess in local mode pays a JVM start and Spark's first-use compilation
of its own (tens of CPU seconds on two cores); attached to one warm server it is a thin
client. The server is ``reclock spark-server`` as a user runs it, in the foreground of a
child process, on 127.0.0.1 and a free port.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

from cdc_core.spark_server import free_port, listening

REPO = Path(__file__).parents[1]
START_TIMEOUT_S = 180


def client_env() -> dict[str, str]:
    """This process's environment without a Dagster home or a Connect address of its own."""
    return {k: v for k, v in os.environ.items() if k not in ("DAGSTER_HOME", "SPARK_REMOTE")}


def attached(config_file: Path, remote: str) -> Path:
    """A copy of ``config_file`` beside it (same lake, same landing zone, same Spark
    settings) that runs over the Connect server at ``remote`` instead of its master; the
    original still runs in process."""
    settings = yaml.safe_load(config_file.read_text())
    spark = {k: v for k, v in settings.get("spark", {}).items() if k != "master"}
    settings["spark"] = {**spark, "remote": remote}
    copy = config_file.with_name(f"connect-{config_file.name}")
    copy.write_text(yaml.safe_dump(settings, sort_keys=False))
    return copy


@contextmanager
def running_server(log: Path) -> Iterator[str]:
    """A server for the block, at the ``sc://`` address yielded; at the end it must stop
    cleanly on SIGTERM (exit 0, its port closed), as the README says it does."""
    port = free_port()
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "pipelines.cli", "spark-server", "--port", str(port),
             "--conf", "spark.driver.memory=2g"],
            stdout=out, stderr=subprocess.STDOUT, cwd=REPO, env=client_env(),
        )  # fmt: skip
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not listening(port):
            assert process.poll() is None, log.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, "the server never listened"
            time.sleep(0.3)
        yield f"sc://127.0.0.1:{port}"
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(60)
    assert code == 0, log.read_text(errors="replace")[-3000:]
    assert not listening(port), "the server's JVM outlived SIGTERM"
