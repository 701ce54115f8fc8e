"""A source's CDCv2 export folder: which sources have one, and its windows' expiry.

The export writes one folder per window, named by the window's partition key, under
``<lake>/<source>/cdcv2``; it keeps what the tables keep, so maintenance deletes the
windows before the source's retention horizon and the folder does not grow for ever.
"""

from __future__ import annotations

from pyspark.sql.types import StructType

from cdc_core.calendar import key_start
from cdc_core.cdcv2.data_columns import DataColumns, UnsupportedColumnType
from cdc_core.storage import LocationLike, files, located

EXPORT_FOLDER = "cdcv2"


def expire_exports(root: LocationLike, before_ms: int) -> list[str]:
    """Delete the window folders in ``root`` of windows that start before ``before_ms``
    (the source's retention horizon), and return their names: the export keeps what the
    tables keep, every window from the horizon on, so its folder does not grow by a
    window a minute for ever. Other names (hidden staging, a consumer's own files) stay."""
    place = str(located(root))
    expired = []
    for name in files.list_folders(place):
        try:
            start = key_start(name)
        except ValueError:
            continue
        if start < before_ms:
            files.delete_tree(files.join(place, name))
            expired.append(name)
    return expired


def exportable(output_schema: StructType) -> bool:
    """Whether the CDCv2 encodings carry every column of a source's ``output_schema``
    (scalars: a source that includes ``headers``, a list column, has no export asset)."""
    try:
        DataColumns(output_schema)
    except UnsupportedColumnType:
        return False
    return True
