"""The window schedule, and the landing-zone sensor.

The schedule ticks at every window boundary (its cron follows the config's ``window``)
and requests the window that just closed; once the config's ``end`` has passed it
requests nothing more.

The landing-zone sensor registers new dumps durably, then asks for closed windows.

Registration records each file with its arrival time (the ``arrival`` reclock policy
binds exactly what had arrived before a window closed), so it happens at every tick,
run or no run. The cursor remembers the last window end requested; the durable
registry, not the cursor, decides what is new, so a lost cursor repeats no work and
a restarted sensor requests nothing twice (run keys name the window range).
"""


import json
import time

from dagster import (
    RunRequest,
    ScheduleEvaluationContext,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    schedule,
    sensor,
)
from dagster._core.definitions.unresolved_asset_job_definition import (
    UnresolvedAssetJobDefinition,
)
from dagster_pyspark import PySparkResource

from assets.partitions import closed_windows, range_tags, to_ms
from cdc_core.config import Config
from cdc_core.frontier import iso
from cdc_core.pipeline import SourcePipeline


def dump_sensor(config: Config, job: UnresolvedAssetJobDefinition):
    @sensor(
        name="new_dumps",
        job=job,
        minimum_interval_seconds=30,
        description=(
            "Registers dump files that landed since the last tick (with their arrival time) "
            "and requests the windows that closed since."
        ),
    )
    def new_dumps(context: SensorEvaluationContext, pyspark: PySparkResource) -> SensorResult:
        now_ms = int(time.time() * 1000)
        cursor = json.loads(context.cursor) if context.cursor else {}
        requested_through = int(cursor.get("requested_through_ms", config.start_ms))
        registered = 0
        for source in config.sources:
            pipeline = SourcePipeline.from_config(pyspark.spark_session, config, source)
            registered += pipeline.register_dumps(arrival_ms=now_ms)
        windows = closed_windows(config, requested_through, now_ms)
        new_cursor = json.dumps(
            {"requested_through_ms": windows[-1][1] if windows else requested_through}
        )
        if not windows:
            return SensorResult(
                skip_reason=SkipReason(f"registered {registered} new file(s); no window closed"),
                cursor=new_cursor,
            )
        first, last = windows[0][0], windows[-1][0]
        request = RunRequest(run_key=f"windows:{first}..{last}", tags=range_tags(first, last))
        return SensorResult(run_requests=[request], cursor=new_cursor)

    return new_dumps


def window_schedule(config: Config, job: UnresolvedAssetJobDefinition):
    @schedule(
        name="latest_closed_window",
        job=job,
        cron_schedule=config.cron,
        execution_timezone="UTC",
        description=(
            f"At every window boundary (every {config.window}, cron {config.cron!r} UTC), "
            "materializes the window that just closed; requests nothing after the config's end."
        ),
    )
    def latest_closed_window(context: ScheduleEvaluationContext) -> RunRequest | SkipReason:
        moment = context.scheduled_execution_time
        now_ms = to_ms(moment) if moment is not None else int(time.time() * 1000)
        closed = closed_windows(config, now_ms - config.window_ms, now_ms)
        if not closed:
            end = "" if config.end_ms is None else f"; the config ends at {iso(config.end_ms)}"
            return SkipReason(f"no window closed in the last {config.window} at {iso(now_ms)}{end}")
        key, _ = closed[-1]
        return RunRequest(run_key=f"window:{key}", partition_key=key)

    return latest_closed_window
