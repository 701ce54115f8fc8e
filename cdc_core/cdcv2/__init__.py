"""The CDCv2 change data capture protocol: update statements ``(data, time, diff)``
and progress statements ``(lower, upper, counts)`` that stay readable however they
are duplicated, reordered and re-batched.

Modules: ``model`` (messages, errors), ``chain`` (progress chaining and count
judgement), ``reference`` (single-threaded reader), ``columns``/``records`` (row
values), ``codec_json``/``codec_avro``, ``spark_counts``/``spark_reader``
(data-parallel reader), ``completeness``, ``export`` (shards and DataFrames as
streams), ``stream_files`` (streams as files), ``decode`` (raw messages in Spark),
``source_format`` (CDCv2 topic dumps as a source).
"""
