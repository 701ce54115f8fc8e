"""The window schedule, and the landing-zone sensor.

The schedule ticks at every window boundary (its cron follows the config's ``window``)
and requests the window that just closed; once the config's ``end`` has passed it
requests nothing more.

The sensor only looks: it lists dump files not registered yet (transaction groups'
transaction topics included) and reads where each source's outputs stand from the Delta
logs, writing nothing, so a preview or a dry run changes nothing durable. On an object
store it lists incrementally: the cursor keeps where each folder's listing stands (see
``cdc_core.app.landing``). Each new
file's first sighting (its arrival time, which the ``arrival`` reclock policy binds by)
is kept in the cursor and handed to the run in a tag; the run registers the files with
those times. A new file asks only for windows it can still change: the closed windows
the outputs do not hold yet (at or after their upper; windows not bound yet are among
them) that are still partitions (at or after the calendar's ``first_window_start``). A tick computes
the first and last of them, never the windows between. The run key names those windows
and the outputs' upper, so a repeated request for the same state starts no second run.
"""

import json
import time

from dagster import (
    RunRequest,
    ScheduleDefinition,
    ScheduleEvaluationContext,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    schedule,
    sensor,
)

from assets.partitions import range_tags
from assets.source_assets import ARRIVALS_TAG
from cdc_core.app.landing import look_at_landing
from cdc_core.app.plan import windows_to_ask
from cdc_core.calendar import to_ms
from cdc_core.config import Config
from cdc_core.frontier import TimeFrontier, iso
from resources.lake import LakeResource


def held(upper: TimeFrontier) -> str:
    """What outputs at ``upper`` hold, in words."""
    if upper.time is None:
        return "every window"
    return "nothing yet" if upper.time <= 1 else f"every time through {iso(upper.time - 1)}"


def dump_sensor(config: Config, job_name: str) -> SensorDefinition:
    """The ``new_dumps`` sensor: asks for the closed windows new dump files can still change."""
    @sensor(
        name="new_dumps",
        job_name=job_name,
        minimum_interval_seconds=30,
        description=(
            "Asks for the closed windows that dump files landed since the last tick can still "
            "change (those the outputs do not hold yet), and for windows that closed since; "
            "looks only, so a preview changes nothing: the run registers the files with the "
            "arrival times seen here."
        ),
    )
    def new_dumps(context: SensorEvaluationContext, lake: LakeResource) -> SensorResult:
        now_ms = int(time.time() * 1000)
        cursor = json.loads(context.cursor) if context.cursor else {}
        requested_through = int(cursor.get("requested_through_ms", config.start_ms))
        seen: dict[str, int] = cursor.get("seen", {})
        look = look_at_landing(
            config, lake.root, lake.landing,
            listing=cursor.get("listing"), pending=seen, now_ms=now_ms,
        )  # fmt: skip
        arrivals = {path: seen.get(path, now_ms) for path in look.waiting}
        new_files = [path for path in look.waiting if path not in seen]
        upper = look.upper
        wanted = windows_to_ask(
            config, upper, now_ms, new_files=bool(new_files), asked_through=requested_through
        )
        new_cursor = json.dumps(
            {
                "requested_through_ms": max(requested_through, wanted[1][1] if wanted else 0),
                "seen": arrivals,  # registered files drop out: the run stamped them
                "listing": look.listing,
            }
        )
        if wanted is None:
            return SensorResult(
                skip_reason=SkipReason(
                    f"{len(new_files)} new dump file(s); no closed window they can change "
                    f"(outputs hold {held(upper)})"
                ),
                cursor=new_cursor,
            )
        (first, _), (last, _) = wanted
        arrived = {ARRIVALS_TAG: json.dumps(arrivals)}
        run_key = f"windows:{first}..{last}@{upper.time}"
        # One window is asked for by its key, so the checks' results attach to it.
        request = (
            RunRequest(run_key=run_key, partition_key=first, tags=arrived)
            if first == last
            else RunRequest(run_key=run_key, tags={**range_tags(first, last), **arrived})
        )
        return SensorResult(run_requests=[request], cursor=new_cursor)

    return new_dumps


def window_schedule(config: Config, job_name: str) -> ScheduleDefinition:
    """The ``latest_closed_window`` schedule: the window that just closed, until ``end``."""
    @schedule(
        name="latest_closed_window",
        job_name=job_name,
        cron_schedule=config.calendar.cron,
        execution_timezone="UTC",
        description=(
            f"At every window boundary (every {config.window}, cron {config.calendar.cron!r} UTC), "
            "materializes the window that just closed; requests nothing after the config's end."
        ),
    )
    def latest_closed_window(context: ScheduleEvaluationContext) -> RunRequest | SkipReason:
        moment = context.scheduled_execution_time
        now_ms = to_ms(moment) if moment is not None else int(time.time() * 1000)
        closed = config.calendar.closed_windows(now_ms - config.window_ms, now_ms)
        if not closed:
            end = "" if config.end_ms is None else f"; the config ends at {iso(config.end_ms)}"
            return SkipReason(f"no window closed in the last {config.window} at {iso(now_ms)}{end}")
        key, _ = closed[-1]
        return RunRequest(run_key=f"window:{key}", partition_key=key)

    return latest_closed_window
