"""The in-process Dagster run of a deployment's closed windows: what ``reclock
materialize`` runs, and what the tests and benchmarks run to materialize a deployment as a
user does (every source, its checks and its export, through the Dagster definitions).

It plans the run through the application layer (``cdc_core.app.plan``) and shows its
progress and what went wrong (``pipelines.run_output``); the command line only parses
its arguments and calls it.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence

from dagster import DagsterInstance

from assets.partitions import range_tags
from assets.source_assets import source_output_keys
from cdc_core.app.plan import plan_run
from cdc_core.config import Config
from cdc_core.frontier import iso
from pipelines.build import ALL_WINDOWS_JOB, windows_definitions
from pipelines.run_output import (
    dagster_run_config,
    print_problems,
    progress_bar,
    quiet_warnings,
)
from resources.run_tags import SHORT_RUN_TAG


def materialize(
    config: Config,
    through_ms: int | None = None,
    *,
    exports: bool = True,
    verbose: bool = False,
    short: bool = False,
) -> bool:
    """Every closed window of every source, in order, in one in-process Dagster run, with
    the asset checks; ``exports=False`` leaves out the CDCv2 export of each source. It
    shows its progress and what went wrong (``pipelines.run_output``); Dagster's event log
    goes to the terminal only when ``verbose``.

    The run starts at the first window some source still needs (its outputs do not hold
    it, or its export is missing), never earlier: a deployment that has run for months
    adds one window, not every window since the horizon. When no source needs any, it
    says so in one line and runs nothing; that look reads the Delta logs only, without
    starting Spark. Windows before the partitions' start (the launchable span, never
    before the retention horizon) are no partitions: asking only for them is refused.
    One window runs as that partition (its checks' results attach to it), more as a
    range. ``short``: the caller knows the run is short however many windows it covers
    (the demo's), so its driver starts quick (``resources.spark.is_short_run``).
    """
    now_ms = int(time.time() * 1000)
    plan = plan_run(config, through_ms, now_ms, exports=exports)
    if plan.before_partitions:
        print(f"reclock: the windows through {iso(plan.through)} are no partitions any more: "
              f"the first window Dagster still lists starts at {iso(plan.first_start)} (see "
              "the config's launchable and retention)", file=sys.stderr)  # fmt: skip
        return False
    if not plan.closed:
        print("Nothing to materialize: no window has closed yet.")
        return True
    keys = plan.keys
    if not keys:
        last_end = plan.closed[-1][1]
        print(f"Nothing to materialize: every source is complete through {iso(last_end)}.")
        return True
    one = len(keys) == 1
    with quiet_warnings(verbose):
        job = windows_definitions(config, now_ms).resolve_job_def(ALL_WINDOWS_JOB)
        with _instance() as instance, progress_bar(config, len(keys)):
            result = job.execute_in_process(
                instance=instance,
                partition_key=keys[0] if one else None,
                tags=run_tags(keys, short=short),
                raise_on_error=False,
                asset_selection=None if exports else source_output_keys(config),
                run_config=dagster_run_config(verbose),
            )
    print_problems(result)
    print(f"Materialized windows {keys[0]} .. {keys[-1]} ({len(keys)} windows): "
          f"{'success' if result.success else 'FAILED'}")
    return result.success


def run_tags(keys: Sequence[str], *, short: bool) -> dict[str, str]:
    """The tags of a run of the windows ``keys`` (one: its partition key names it instead):
    their range, and ``SHORT_RUN_TAG`` for a run its caller knows is ``short``."""
    covered = range_tags(keys[0], keys[-1]) if len(keys) > 1 else {}
    return {**covered, **({SHORT_RUN_TAG: "true"} if short else {})}


def _instance() -> DagsterInstance:
    """The instance of DAGSTER_HOME when set (runs show in the UI), else an ephemeral one."""
    return DagsterInstance.get() if os.environ.get("DAGSTER_HOME") else DagsterInstance.ephemeral()
