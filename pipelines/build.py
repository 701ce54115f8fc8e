"""Definitions of a reclock deployment, built from its config file."""

from __future__ import annotations

import time

from dagster import (
    AssetSelection,
    Definitions,
    define_asset_job,
    in_process_executor,
)

from assets.deployment import deployment_assets
from assets.partitions import window_partitions
from cdc_core.config import Config
from pipelines.maintenance import maintenance_job, maintenance_schedule
from pipelines.sensors import dump_sensor, window_schedule
from resources.lake import LakeResource
from resources.spark import spark_resource

ALL_WINDOWS_JOB = "all_sources_windows"


def build_definitions(config: Config, now_ms: int | None = None) -> Definitions:
    """Assets, checks, jobs, schedules and sensor for every configured source (the
    windows' job and schedule, the maintenance job and its daily schedule).

    The windows are those still within the retention at ``now_ms``: the moment the
    definitions load, unless a caller names another (``windows_definitions``).
    """
    loaded_ms = int(time.time() * 1000) if now_ms is None else now_ms
    maintenance = maintenance_job(config)
    return Definitions.merge(
        windows_definitions(config, loaded_ms),
        Definitions(
            jobs=[maintenance],
            schedules=[
                window_schedule(config, ALL_WINDOWS_JOB),
                maintenance_schedule(maintenance.name),
            ],
            sensors=[dump_sensor(config, ALL_WINDOWS_JOB)],
        ),
    )


def windows_definitions(config: Config, now_ms: int) -> Definitions:
    """What a run of the windows needs, and no more: every source's assets and checks, the
    windows' job and the resources (``reclock materialize`` runs it in process, with no
    schedule, sensor or maintenance job to build).

    Every source's assets and checks are one multi-asset (``assets.deployment``), so the
    definitions cost about the same for two hundred sources as for one. The job runs in
    process: every window of every source in one run shares one Spark session. The
    windows are those still within the retention at ``now_ms``.
    """
    partitions = window_partitions(config, now_ms)
    job = define_asset_job(
        ALL_WINDOWS_JOB,
        selection=AssetSelection.all(),
        partitions_def=partitions,
        executor_def=in_process_executor,
        description=(
            "Every source's windows in one in-process run (one Spark session): register new "
            "dumps, bind, reclock, apply the envelope, publish state, then the checks."
        ),
    )
    return Definitions(
        assets=deployment_assets(config, partitions),
        jobs=[job],
        resources={
            "pyspark": spark_resource(
                config.spark.master, config.spark.conf, [str(config.lake), str(config.landing)]
            ),
            "lake": LakeResource(root=str(config.lake), landing=str(config.landing)),
        },
        executor=in_process_executor,
    )
