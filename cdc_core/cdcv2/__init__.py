"""The CDCv2 change data capture protocol: update statements ``(data, time, diff)``
and progress statements ``(lower, upper, counts)`` that stay readable however they
are duplicated, reordered and re-batched.

Modules: ``model`` (messages, errors), ``chain`` (progress chaining and count
judgement), ``reference`` (single-threaded reader), ``data_columns``/``records`` (row
values), ``codec_json``/``codec_avro``, ``spark_counts``/``spark_reader``
(data-parallel reader), ``completeness``, ``export`` (shards and DataFrames as
streams), ``stream_files`` (streams as files), ``spark_decode`` (raw messages in Spark),
``source_format`` (CDCv2 topic dumps decoded; ``cdc_core.envelopes.materialize`` makes
them a source).
"""

from cdc_core.cdcv2.completeness import check_completeness
from cdc_core.cdcv2.data_columns import DataColumns
from cdc_core.cdcv2.export import export_shard, tile_progress
from cdc_core.cdcv2.model import MalformedMessage, Message, Progress, Updates
from cdc_core.cdcv2.spark_reader import read_stream
from cdc_core.cdcv2.stream_files import Encoding, write_parts, write_stream

__all__ = [
    "DataColumns",
    "Encoding",
    "MalformedMessage",
    "Message",
    "Progress",
    "Updates",
    "check_completeness",
    "export_shard",
    "read_stream",
    "tile_progress",
    "write_parts",
    "write_stream",
]
