"""A source end to end: one run of windows, its published state, its resumption.

Invariant: every step of a run is an idempotent append keyed by binding time, so a run
repeated or resumed after a crash at any point writes nothing twice and equals a run
never interrupted.

Modules: ``pipeline`` (the per-source run and its status), ``state`` (the published
current rows), ``resumption`` (bounded input reliance: inspect and retire).
"""
