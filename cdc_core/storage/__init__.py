"""One storage layer for the lake and the landing zone: local folders and S3 alike.

``Location`` is where a lake or landing zone lives; ``S3Settings`` how object-store
locations are reached (the same settings reach pyarrow, delta-rs and Spark's s3a);
``files`` holds the driver's file operations on both.

Public names: Location, is_remote, spark_path, from_spark_path, UnsupportedScheme, NotLocal,
S3Settings, InsecureEndpoint, UnsafeCommits, LocationUnreachable, FileEntry,
delta_options, spark_conf.
"""

import os

from cdc_core.storage import files, settings
from cdc_core.storage.files import FileEntry, LocationUnreachable
from cdc_core.storage.location import (
    Location,
    NotLocal,
    UnsupportedScheme,
    from_spark_path,
    is_remote,
    spark_path,
)
from cdc_core.storage.settings import InsecureEndpoint, S3Settings, UnsafeCommits


def delta_options(path: str) -> dict[str, str] | None:
    """delta-rs ``storage_options`` for a table at ``path`` (None for a local table)."""
    return settings.current().delta_options() if "://" in path else None


def spark_conf(*places: os.PathLike[str] | str) -> dict[str, str]:
    """The Spark settings that let executors reach ``places`` (none for local ones)."""
    if not any(is_remote(place) for place in places):
        return {}
    return settings.current().spark_conf()


__all__ = [
    "FileEntry",
    "InsecureEndpoint",
    "Location",
    "LocationUnreachable",
    "NotLocal",
    "S3Settings",
    "UnsafeCommits",
    "UnsupportedScheme",
    "delta_options",
    "files",
    "from_spark_path",
    "is_remote",
    "settings",
    "spark_conf",
    "spark_path",
]
