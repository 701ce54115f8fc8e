"""The application layer: what a deployment does with its sources, for every front end.

The CLI, Dagster's assets, sensor and schedules, the tests and the benchmarks reach the
engine through it: ``materialize`` (a run's windows, for one source and for many sources
served at once).
"""
