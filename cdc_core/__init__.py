"""reclock engine: frontiers, shards, remap/reclock, envelopes, CDCv2, formats.

Knows nothing of Dagster; the orchestration layers call into it.
"""
