"""Dagster definitions (job, schedule, sensor) and the ``reclock`` command line."""
