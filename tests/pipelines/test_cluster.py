"""The bundled demo on a standalone Spark cluster equals the same demo run locally.

The cluster is real: a master and two workers started from pyspark's own distribution,
bound to 127.0.0.1, stopped at the end. The run happens in its own process (a process
has one Spark session, and the suite's is local), selected only by the config's
``spark.master``; the lake and landing folders are storage driver and executors share.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from pyspark.find_spark_home import _find_spark_home

from cdc_core.config import ConfigError, load_config
from cdc_core.frontier import iso
from cdc_core.spark import QUICK_START_OPTIONS, SPARK_REMOTE, SparkConnectConflict, get_spark
from pipelines.sample import write_sample
from tests.lake_rows import SampleLake, table_rows

TABLES = ("remap", "reclocked", "changes", "errors", "state")
START_TIMEOUT_S = 90


class _Daemon:
    """One Spark daemon (master or worker) in the foreground of its own process group."""

    def __init__(self, log: Path, main_class: str, *args: str) -> None:
        spark_class = os.path.join(_find_spark_home(), "bin", "spark-class")
        self.log = log
        env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_NO_DAEMONIZE": "1"}
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                [spark_class, main_class, *args],
                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
            )

    def wait_for(self, pattern: str) -> re.Match[str]:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            found = re.search(pattern, self.log.read_text(errors="replace"))
            if found:
                return found
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.log.name} exited:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.3)
        raise TimeoutError(f"{self.log.name} never printed {pattern!r}")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, 15)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, 9)


@pytest.fixture(scope="module")
def standalone_master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    logs = tmp_path_factory.mktemp("cluster-logs")
    master = _Daemon(
        logs / "master.log", "org.apache.spark.deploy.master.Master",
        "--host", "127.0.0.1", "--port", "0", "--webui-port", "0",
    )
    daemons = [master]
    try:
        url = master.wait_for(r"Starting Spark master at (spark://127\.0\.0\.1:\d+)").group(1)
        for index in range(2):
            daemons.append(_Daemon(
                logs / f"worker-{index}.log", "org.apache.spark.deploy.worker.Worker", url,
                "--host", "127.0.0.1", "--cores", "1", "--memory", "1g", "--webui-port", "0",
                "--work-dir", str(logs / f"work-{index}"),
            ))
        for worker in daemons[1:]:
            worker.wait_for(r"Successfully registered with master")
        yield url
    finally:
        for daemon in reversed(daemons):
            daemon.stop()


def _run_cli(config_file: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pipelines.cli", *args, "--config", str(config_file)],
        capture_output=True, text=True, timeout=900, cwd=Path(__file__).parents[2],
    )


def test_the_demo_on_a_standalone_cluster_equals_the_local_run(
    standalone_master: str, tmp_path: Path, sample_lake: SampleLake
) -> None:
    """The sample's first windows on the cluster, in one run as the shared lake's first run
    took them in the suite's local session: every table equal. Three windows of every
    source still run tasks on both workers (two one-core executors share every stage)
    and carry frontiers from window to window in one run; the later windows would only
    repeat the same jobs, so they are left out of the suite's slowest test."""
    config_file = write_sample(tmp_path / "cluster")
    settings = yaml.safe_load(config_file.read_text())
    settings["spark"] = {
        "master": standalone_master,
        "conf": {"spark.executor.memory": "1g", "spark.cores.max": "2",
                 "spark.driver.memory": "1g",
                 # A short run's JVMs, as a one-window run's driver is (cdc_core.spark):
                 # C2's compilations would fight the run's tasks for the two cores.
                 "spark.driver.extraJavaOptions": QUICK_START_OPTIONS,
                 "spark.executor.extraJavaOptions": QUICK_START_OPTIONS},
    }
    config_file.write_text(yaml.safe_dump(settings, sort_keys=False))
    run = _run_cli(config_file, "materialize", "--through", iso(sample_lake.first_run_ms))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    on_cluster = load_config(config_file)
    assert [s.name for s in on_cluster.sources] == [s.name for s in sample_lake.config.sources]
    for source in on_cluster.sources:
        for table in TABLES:
            assert table_rows(on_cluster, source.name, table) == sample_lake.rows(
                source.name, table, first_run=True
            ), f"{source.name}/{table}"


def test_a_classic_master_beside_a_spark_connect_address_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(SPARK_REMOTE, raising=False)
    with pytest.raises(SparkConnectConflict, match="drop one of them"):
        get_spark("local[2]", {"spark.remote": "sc://127.0.0.1:15002"})
    monkeypatch.setenv(SPARK_REMOTE, "sc://127.0.0.1:15002")
    with pytest.raises(SparkConnectConflict, match="unset SPARK_REMOTE"):
        get_spark("local[2]", {})
    config_file = write_sample(tmp_path)
    settings = yaml.safe_load(config_file.read_text())
    settings["spark"] = {"master": "local[2]", "conf": {"spark.remote": "sc://127.0.0.1:15002"}}
    config_file.write_text(yaml.safe_dump(settings, sort_keys=False))
    with pytest.raises(ConfigError, match=r"spark: spark.master local\[2\] and Spark Connect"):
        load_config(config_file)
