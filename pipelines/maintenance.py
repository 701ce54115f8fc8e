"""The maintenance job and its daily schedule: what an operator leaves running beside the
windows so that a year of them costs what day one does.

Each run maintains every source (``cdc_core.app.upkeep.maintain``: retire dumps, sinces at the
retention horizon, compaction, gc, Delta checkpoints and log trimming; and the windows of
its CDCv2 export before that horizon deleted) and deletes the
Dagster runs (with their events) older than the retention, so the instance stays as
bounded as the tables. Last, it asks the webserver named by ``RECLOCK_WEBSERVER_URL``
to reload the run's code location: the webserver and the daemon keep the partitions of
their last load, whose start (the launchable span's) stays where it was while the list
grows a window a window, so a daily reload keeps the list within a day of the span.
"""


import os
import time
import urllib.parse

from dagster import (
    DagsterInstance,
    JobDefinition,
    OpExecutionContext,
    RunsFilter,
    ScheduleDefinition,
    in_process_executor,
    job,
    op,
)
from dagster_graphql import (
    DagsterGraphQLClient,
    DagsterGraphQLClientError,
    ReloadRepositoryLocationStatus,
)
from dagster_pyspark import PySparkResource

from cdc_core.app import upkeep
from cdc_core.app.materialize import open_source
from cdc_core.calendar import to_datetime
from cdc_core.config import Config
from resources.lake import LakeResource

MAINTENANCE_JOB = "maintenance"
# Daily, at a quiet minute: compaction and gc take a while on a large lake.
MAINTENANCE_CRON = "17 3 * * *"
# Runs deleted per batch, so one look at the instance stays small.
RUN_BATCH = 500
# The webserver whose code location maintenance reloads (``make ui`` sets it).
WEBSERVER_URL_ENV = "RECLOCK_WEBSERVER_URL"


def delete_old_runs(instance: DagsterInstance, before_ms: int) -> int:
    """Delete the finished runs created before ``before_ms`` (their events go with them);
    returns how many went."""
    deleted = 0
    while True:
        records = instance.get_run_records(
            filters=RunsFilter(created_before=to_datetime(before_ms)), limit=RUN_BATCH
        )
        finished = [r.dagster_run.run_id for r in records if r.dagster_run.is_finished]
        for run_id in finished:
            instance.delete_run(run_id)
        deleted += len(finished)
        if len(records) < RUN_BATCH or not finished:
            return deleted


def reload_code_location(url: str, location: str) -> str:
    """Ask the webserver at ``url`` to reload ``location`` (its definitions load again,
    the partitions from the span's start as of now); what came of it, in one line. A
    failed reload leaves the maintenance done: it is said, not raised."""
    parts = urllib.parse.urlsplit(url)
    client = DagsterGraphQLClient(
        parts.hostname or "127.0.0.1",
        port_number=parts.port,
        use_https=parts.scheme == "https",
        path_prefix=parts.path.rstrip("/"),
    )
    try:
        info = client.reload_repository_location(location)
    except DagsterGraphQLClientError as error:
        return f"code location {location} not reloaded: {url} answered {error}"
    if info.status != ReloadRepositoryLocationStatus.SUCCESS:
        return f"code location {location} not reloaded: {info.failure_type}: {info.message}"
    return f"code location {location} reloaded by {url}: its partitions start anew"


def maintenance_job(config: Config) -> JobDefinition:
    """The ``maintenance`` job: every source maintained, then old runs deleted and the
    run's code location reloaded (with ``RECLOCK_WEBSERVER_URL``)."""

    @op(description="Retire, advance sinces to the retention horizon, compact, collect "
        "garbage and trim the Delta logs of every source; delete runs past the retention; "
        "reload the code location through the webserver at RECLOCK_WEBSERVER_URL.")
    def maintain_sources(
        context: OpExecutionContext, pyspark: PySparkResource, lake: LakeResource
    ) -> None:
        now_ms = int(time.time() * 1000)
        for source in config.sources:
            pipeline = open_source(pyspark.spark_session, config, source, lake.root, lake.landing)
            context.log.info(upkeep.maintain(pipeline, now_ms).describe())
        horizon = config.calendar.retention_start(now_ms)
        if horizon > config.start_ms:  # some window left the retention of every source
            deleted = delete_old_runs(context.instance, horizon)
            context.log.info(f"deleted {deleted} run(s) created before the retention horizon")
        url, origin = os.environ.get(WEBSERVER_URL_ENV), context.run.remote_job_origin
        if url and origin is not None:  # launched from the webserver or the daemon
            context.log.info(reload_code_location(url, origin.location_name))

    @job(name=MAINTENANCE_JOB, executor_def=in_process_executor,
         description="Keeps every table and the instance bounded; scheduled daily.")
    def maintenance() -> None:
        maintain_sources()

    return maintenance


def maintenance_schedule(job_name: str) -> ScheduleDefinition:
    """The daily ``maintenance_daily`` schedule of the maintenance job."""
    return ScheduleDefinition(
        name="maintenance_daily",
        job_name=job_name,
        cron_schedule=MAINTENANCE_CRON,
        execution_timezone="UTC",
        description="Daily maintenance of every source (see the maintenance job).",
    )
