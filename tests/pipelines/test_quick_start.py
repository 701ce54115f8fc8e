"""A short run's driver starts quick: a Dagster run of one partition (what a schedule, a
sensor or a pick in the UI launches), or one its launcher tags short (the demo), compiles
with C1 alone, a range run keeps C2 for its throughput, and a config's own choice wins."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from assets.partitions import range_tags
from cdc_core.calendar import PARTITION_FORMAT
from cdc_core.spark import DRIVER_JAVA_OPTIONS, QUICK_START_OPTIONS, session_conf
from pipelines.run import run_tags
from resources.run_tags import SHORT_RUN_TAG
from resources.spark import is_short_run
from tests.connect_server import client_env
from tests.upsert_config import write_upsert_config

# A run worker's work in a fresh process: the windows' job for one partition, then the
# options its driver JVM was started with.
ONE_PARTITION_RUN = """
import sys
from dagster import DagsterInstance
from pyspark.sql import SparkSession
from cdc_core.config import load_config
from pipelines.build import ALL_WINDOWS_JOB, build_definitions

job = build_definitions(load_config(sys.argv[1])).resolve_job_def(ALL_WINDOWS_JOB)
with DagsterInstance.ephemeral() as instance:
    assert job.execute_in_process(instance=instance, partition_key=sys.argv[2]).success
bean = SparkSession.getActiveSession()._jvm.java.lang.management.ManagementFactory
print(" ".join(bean.getRuntimeMXBean().getInputArguments()))
"""


def test_a_one_partition_runs_driver_compiles_with_c1_alone(tmp_path: Path) -> None:
    # An open-ended source lists its recent windows: one started minutes ago.
    start = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=10)
    config = write_upsert_config(tmp_path, start=start.strftime("%Y-%m-%dT%H:%M:%SZ"))
    env = client_env()
    done = subprocess.run(
        [sys.executable, "-c", ONE_PARTITION_RUN, str(config), start.strftime(PARTITION_FORMAT)],
        capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert set(QUICK_START_OPTIONS.split()) <= set(done.stdout.split())


def test_a_run_of_one_partition_or_tagged_short_by_its_launcher_counts_as_short() -> None:
    assert is_short_run({"dagster/partition": "2026-01-01T00:00:00"})
    assert is_short_run({"dagster/partition": "k", "dagster/backfill": "b"})
    hour = range_tags("2026-01-01T00:00:00", "2026-01-01T00:59:00")
    assert not is_short_run(hour)
    assert is_short_run({**hour, SHORT_RUN_TAG: "true"})
    assert not is_short_run({**hour, SHORT_RUN_TAG: "false"})
    assert not is_short_run({})  # unpartitioned: a check run on its own, maintenance


def test_a_quick_start_comes_before_a_configs_own_driver_options() -> None:
    own = "-XX:TieredStopAtLevel=4 -Dreclock.test=1"
    quick = session_conf(conf={DRIVER_JAVA_OPTIONS: own}, quick_start=True)[DRIVER_JAVA_OPTIONS]
    assert quick.startswith(QUICK_START_OPTIONS) and quick.endswith(own)  # the JVM's last wins
    full = session_conf(conf={DRIVER_JAVA_OPTIONS: own})[DRIVER_JAVA_OPTIONS]
    assert QUICK_START_OPTIONS not in full and full.endswith(own)


def test_a_run_its_caller_knows_is_short_is_tagged_so_and_no_other() -> None:
    keys = ["2026-01-01T00:00:00", "2026-01-01T00:01:00", "2026-01-01T00:02:00"]
    assert is_short_run(run_tags(keys, short=True))  # the demo's eight windows
    assert not is_short_run(run_tags(keys, short=False))  # a backfill keeps C2
    assert run_tags(keys, short=False) == range_tags(keys[0], keys[-1])
    assert run_tags(keys[:1], short=False) == {}  # one window: its partition key says it
