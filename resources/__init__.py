"""Dagster resources: the Spark session and the lake, through which assets open a source."""
