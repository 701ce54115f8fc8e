"""The landing-zone sensor: registers new dumps durably, then asks for closed windows.

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
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)
from dagster._core.definitions.unresolved_asset_job_definition import (
    UnresolvedAssetJobDefinition,
)
from dagster_pyspark import PySparkResource

from assets.partitions import closed_windows, range_tags
from cdc_core.config import Config
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
