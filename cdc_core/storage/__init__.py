"""One storage layer for the lake and the landing zone: local folders and S3 alike.

``Location`` is where a lake or landing zone lives; ``S3Settings`` how object-store
locations are reached (the same settings reach pyarrow, delta-rs and Spark's s3a);
``RetryPolicy`` how every client retries a request to the store, ``StorageFailure`` the
error when the store fails one all the same; ``files`` holds the driver's file operations
on both.

Public names: Location, LocationLike, located, is_remote, spark_path, from_spark_path,
UnsupportedScheme, NotLocal, S3Settings, RetryPolicy, RetryPolicyTooSlow, InsecureEndpoint,
UnsafeCommits, LocationUnreachable, StorageFailure, store_failure, FileEntry, delta_options,
on_workers, spark_conf.
"""

import functools
import os
from collections.abc import Callable, Iterator, Sequence

import pyarrow as pa

from cdc_core.storage import files, settings
from cdc_core.storage.failures import StorageFailure, store_failure
from cdc_core.storage.files import FileEntry, LocationUnreachable
from cdc_core.storage.location import (
    Location,
    LocationLike,
    NotLocal,
    UnsupportedScheme,
    from_spark_path,
    is_remote,
    located,
    spark_path,
)
from cdc_core.storage.retries import RetryPolicy, RetryPolicyTooSlow
from cdc_core.storage.settings import InsecureEndpoint, S3Settings, UnsafeCommits


def delta_options(path: str) -> dict[str, str] | None:
    """delta-rs ``storage_options`` for a table at ``path`` (None for a local table)."""
    return settings.current().delta_options() if "://" in path else None


def on_workers(
    function: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]], paths: Sequence[str]
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """``function`` for ``mapInArrow`` over ``paths``, carrying the storage settings when
    a path is on an object store: a Python worker has no loaded config, and its
    environment is the one its JVM started with, so it would not know the endpoint or keys."""
    if not any(is_remote(path) for path in paths):
        return function
    return functools.partial(_with_settings, settings.current(), function)


def _with_settings(
    shipped: S3Settings,
    function: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]],
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """On a worker: make the driver's settings the process's, then run ``function``."""
    settings.use(shipped)
    return function(batches)


def spark_conf(*places: os.PathLike[str] | str) -> dict[str, str]:
    """The Spark settings that let executors reach ``places`` (none for local ones)."""
    if not any(is_remote(place) for place in places):
        return {}
    return settings.current().spark_conf()


__all__ = [
    "FileEntry",
    "InsecureEndpoint",
    "Location",
    "LocationLike",
    "LocationUnreachable",
    "NotLocal",
    "RetryPolicy",
    "RetryPolicyTooSlow",
    "S3Settings",
    "StorageFailure",
    "UnsafeCommits",
    "UnsupportedScheme",
    "delta_options",
    "files",
    "from_spark_path",
    "is_remote",
    "located",
    "on_workers",
    "settings",
    "spark_conf",
    "spark_path",
    "store_failure",
]
