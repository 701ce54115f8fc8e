"""The application layer: what a deployment does with its sources, for every front end.

The CLI, Dagster's assets, sensor and schedules, the tests and the benchmarks reach the
engine through it: ``plan`` (which windows a run needs), ``materialize`` (a run's
windows, for one source and for many sources served at once), ``status`` (status and
inspect, snapshots and readers, through read handles only), ``landing`` (a sensor's look
at what landed), ``upkeep`` (maintain, retire and rebuild), ``session`` (the Spark
session, the warm server it attaches to, the class archive) and ``errors`` (the engine's
errors a command reports as usage errors). Front ends keep argument parsing, printing
and Dagster's definitions; ``tests/test_layers.py`` holds them to this layer.
"""
